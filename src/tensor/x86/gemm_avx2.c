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

/* Row i of wr goes to y[t * ldy + yo[i]]; with pf, each row's stream is fetched X86_Q8_PF
 * bytes ahead (gemv_avx512.c). */
static inline __attribute__((always_inline)) void q8_tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                           const int64_t *yo, const uint8_t *x, size_t xs, float *y,
                                                           int64_t ldy, bool pf) {
    __m256 acc[R8][T8];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        if (pf && (b & 1))   /* a line a stream every other block */
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) _mm_prefetch((const char *)(wr[r] + off + X86_Q8_PF), _MM_HINT_T0);
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
        for (int t = 0; t < T; t++) y[t * ldy + yo[r]] = x86_hsum_ps(acc[r][t]);
}

/* Rows wr[0..R) over tokens [0, n_tok): T8 at a time, then the tail; the first pass fetches
 * ahead where pf says (the others find the rows in L1). */
static inline __attribute__((always_inline)) void q8_rows(int R, int64_t nb, const uint8_t *const *wr,
                                                           const int64_t *yo, const uint8_t *x, size_t xs,
                                                           int64_t n_tok, float *y, int64_t ldy, bool pf) {
    int64_t t = 0;
    for (; t + T8 <= n_tok; t += T8) q8_tile(R, T8, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t);
    switch (n_tok - t) {
    case 3: q8_tile(R, 3, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    case 2: q8_tile(R, 2, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    case 1: q8_tile(R, 1, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    default: break;
    }
}

static const int64_t row_order[R8] = { 0, 1 };   /* y offsets of neighbouring rows */

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
            q8_rows(R8, nb, wr, row_order, xt, xs, nt, yt + r, ldy, false);
        }
        for (; r < n_rows; r++) {
            const uint8_t *wr[1] = { W + (size_t)r * ws };
            q8_rows(1, nb, wr, row_order, xt, xs, nt, yt + r, ldy, false);
        }
    }
}

/* A few tokens over the file's layout (tensor.h tensor_gemv.tokens of gemv[Q8_0]): the single-
 * token kernel's four streams, rows r, r + q, r + 2q, r + 3q (q = n_rows / 4), as two pairs
 * of a tile (eight accumulators: all AVX2's registers allow), up to T8 tokens a pass, the first
 * pass fetching ahead; gemm_q8_0 would read neighbouring rows side by side, which this
 * machine's prefetchers follow badly (gemv_avx512.c). The 0-3 rows left go one at a time. */
static void gemm_q8_0_streams(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                              int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 4;
    for (int64_t r = 0; r < q; r++)
        for (int p = 0; p < 2; p++) {
            const int64_t yo[2] = { r + 2 * p * q, r + (2 * p + 1) * q };
            const uint8_t *wr[2] = { W + (size_t)yo[0] * ws, W + (size_t)yo[1] * ws };
            q8_rows(2, nb, wr, yo, x, xs, n_tok, y, ldy, true);
        }
    for (int64_t r = 4 * q; r < n_rows; r++) {
        const uint8_t *wr[1] = { W + (size_t)r * ws };
        q8_rows(1, nb, wr, &r, x, xs, n_tok, y, ldy, true);
    }
}

void rt_fill_gemm_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0;
    k->gemv[GGUF_T_Q8_0].tokens = gemm_q8_0_streams;
    k->gemv[GGUF_T_Q8_0].tokens_max = X86_Q8_STREAMS_MAX_AVX2;
}
