/* gemm_avx2.c — AVX2 tiles of weight rows × activation rows for the prompt matmul (tensor.h,
 * gemm), for CPUs without AVX-512.
 *
 * Q8_0: every output element performs exactly dot_avx2.c's dot_q8_0 operations, which are
 * rt_dot_q8_0's (tensor_impl.h): per block, 8 int32 lanes from the sign trick (maddubs of |w|
 * and x with w's sign, then madd with ones: exact, the activation bytes are never -128), one
 * FMA of those lanes (as floats) times the product of the two fp16 scales into an 8-lane
 * accumulator, and x86_hsum_ps at the end. Only the layout differs: a tile of R8 rows × T8
 * tokens keeps its R8·T8 accumulators in registers, so a weight block is loaded (and its |w|
 * formed) once per T8 tokens and an activation block once per R8 rows. Tokens go in chunks
 * whose activations stay in L2 while every row tile passes over them.
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define R8 2            /* rows per tile (AVX2 has 16 vector registers: 8 accumulators) */
#define T8 4            /* tokens per tile */
#define CHUNK_BYTES (192 << 10)   /* activations of a token chunk: within L2 */

static inline __attribute__((always_inline)) void q8_tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                           const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    __m256 acc[R8][T8];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        __m256i w[R8], aw[R8];
        __m256 dw[R8];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            w[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + off + Q8_0_QS));
            aw[r] = _mm256_sign_epi8(w[r], w[r]);
            dw[r] = _mm256_set1_ps(x86_f16(wr[r] + off));
        }
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * xs + off;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + Q8_0_QS));
            const __m256 dx = _mm256_set1_ps(x86_f16(xb));
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, w[r])),
                                                    _mm256_set1_epi16(1));
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) y[t * ldy + r] = x86_hsum_ps(acc[r][t]);
}

/* Rows wr[0..R) over tokens [0, n_tok): T8 at a time, then the tail. */
static inline __attribute__((always_inline)) void q8_rows(int R, int64_t nb, const uint8_t *const *wr, const uint8_t *x,
                                                           size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    int64_t t = 0;
    for (; t + T8 <= n_tok; t += T8) q8_tile(R, T8, nb, wr, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: q8_tile(R, 3, nb, wr, x + t * xs, xs, y + t * ldy, ldy); break;
    case 2: q8_tile(R, 2, nb, wr, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: q8_tile(R, 1, nb, wr, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

static void gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    int64_t tc = (int64_t)(CHUNK_BYTES / (xs ? xs : 1)) / T8 * T8;
    if (tc < T8) tc = T8;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
        const int64_t nt = n_tok - t0 < tc ? n_tok - t0 : tc;
        const uint8_t *xt = X + t0 * xs;
        float *yt = y + t0 * ldy;
        int64_t r = 0;
        for (; r + R8 <= n_rows; r += R8) {
            const uint8_t *wr[R8];
            for (int i = 0; i < R8; i++) wr[i] = W + (size_t)(r + i) * ws;
            q8_rows(R8, nb, wr, xt, xs, nt, yt + r, ldy);
        }
        for (; r < n_rows; r++) {
            const uint8_t *wr[1] = { W + (size_t)r * ws };
            q8_rows(1, nb, wr, xt, xs, nt, yt + r, ldy);
        }
    }
}

void rt_fill_gemm_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0;
}
