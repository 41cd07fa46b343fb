/* gemm_q40_avx2.c — AVX2 tiles of Q4_0 weight rows × a few Q8_0 activation rows, for CPUs
 * without AVX-512: the AVX2 table's gemm[Q4_0] (gemm_avx2.c) below Q40_W16_TOK tokens, where
 * widening every row for its gemm costs more than the tokens then gain.
 *
 * Every output element performs exactly the AVX2 table's dot_q4_0 operations (dot_avx2.c):
 * per block, the 8 int32 lanes of x86_dot_i8 (the sign trick on q − 8 and the activation
 * bytes: exact), one FMA of them times the product of the two fp16 scales into the even
 * blocks' or the odd blocks' 8-lane accumulator (an odd last block into the even one), then
 * x86_hsum_ps of their sum. Only the layout differs: a row's blocks are unpacked once per call
 * into a stack buffer (q − 8, |q − 8| and the scale as a float), and 4 tokens a tile then take
 * the sign trick and maddubs straight from it. Rows longer than QMAXB blocks, and calls of
 * fewer than QT tokens, take the dot. Any row and token counts, unaligned rows and strides.
 * Against the widened gemm (/tmp/s34/g40.c outside the repo: one thread, 1024 x 3072, best of
 * 5): 4 tokens 81-83 against 47 GOP/s, 8 93 against 103-111, 16 96-98 against 129-131; with
 * the scale product as a vector multiply (dot_avx2.c gemv_q4_0 says why) 4 tokens 94-95, 7 98-99
 * against 8 tokens widened 112-114. */
#include "tensor/x86/simd_x86.h"

#define QT 4        /* tokens per register tile: 8 accumulators */
#define QMAXB 512   /* blocks per row buffer (16384 elements, 36 KB) */

/* One Q4_0 block of one row, unpacked (96 bytes). */
typedef struct q40_ublk {
    __m256i q, aq;   /* q − 8 (signed bytes) and |q − 8| */
    float   d, pad[7];
} q40_ublk;

static inline __attribute__((always_inline)) void tile(int T, int64_t nb, const q40_ublk *u, const uint8_t *x,
                                                        size_t xs, float *y, int64_t ldy) {
    __m256 acc[2][QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    const int64_t pairs = nb / 2 * 2;
    for (int64_t i = 0; i < nb; i++) {
        const q40_ublk *p = u + i;
        const int e = i < pairs ? (int)(i & 1) : 0;   /* even / odd accumulator; an odd last block: even */
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const uint8_t *b = x + t * xs + (size_t)i * Q8_0_BYTES;
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS));
            const __m256i pr = _mm256_madd_epi16(_mm256_maddubs_epi16(p->aq, _mm256_sign_epi8(yv, p->q)), _mm256_set1_epi16(1));
            const __m256 d = _mm256_mul_ps(_mm256_broadcast_ss(&p->d), x86_f16_bcast(b));
            if (e) acc[1][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(pr), acc[1][t]);
            else acc[0][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(pr), acc[0][t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) y[t * ldy] = x86_hsum_ps(_mm256_add_ps(acc[0][t], acc[1][t]));
}

void rt_gemm_q4_0_few_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                           int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK4_0;
    if (nb > QMAXB || n_tok < QT) {   /* no room, or too few tokens to pay for the unpacking: the dot */
        x86_gemm_by_dot(rt_dot_q4_0_avx2, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    _Alignas(32) q40_ublk u[QMAXB];
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *a = W + (size_t)r * ws + (size_t)i * Q4_0_BYTES;
            u[i].q = _mm256_sub_epi8(x86_unpack_nib16(a + Q4_0_QS), _mm256_set1_epi8(8));
            u[i].aq = _mm256_sign_epi8(u[i].q, u[i].q);
            u[i].d = x86_f16(a);
        }
        int64_t t = 0;
        for (; t + QT <= n_tok; t += QT) tile(QT, nb, u, X + t * xs, xs, y + t * ldy + r, ldy);
        switch (n_tok - t) {
        case 3: tile(3, nb, u, X + t * xs, xs, y + t * ldy + r, ldy); break;
        case 2: tile(2, nb, u, X + t * xs, xs, y + t * ldy + r, ldy); break;
        case 1: tile(1, nb, u, X + t * xs, xs, y + t * ldy + r, ldy); break;
        default: break;
        }
    }
}
