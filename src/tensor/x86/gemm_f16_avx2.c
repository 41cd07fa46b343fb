/* gemm_f16_avx2.c — tiles of F16 weight rows × F16 activation rows (tensor.h, gemm), for
 * prompt batches on CPUs without AVX-512.
 *
 * Every output element performs exactly the AVX2 table's vec_dot_f16 (float_avx2.c): four
 * 8-lane chains s0..s3 (chain c takes elements 32i + 8c .. 32i + 8c + 7 of every full
 * 32-element block, then s0 the 8-element blocks after them), each step fma(w, x, s) on the
 * converted halves, reduced as x86_hsum_ps((s0 + s1) + (s2 + s3)), then the n % 8 elements
 * left added one by one. The chains are independent, so a tile runs them one after the other
 * (GR·GT accumulators live at a time instead of 4·GR·GT) and keeps each chain's sums until the
 * last. Only the layout differs from the dot:
 *  - rows go in blocks of about WBLK bytes (in L2) against every token, GT tokens at a time;
 *  - rows up to PMAXN: a token tile is converted to floats once per row block (exact, so the
 *    products are the same), and stays in L1 while the block's rows pass over it, so a tile
 *    of GR rows × GT tokens converts only its GR weight vectors per step (GR·GT FMAs); longer
 *    rows convert the activations in the tile too.
 * Any n, any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define GR 3   /* weight rows per tile */
#define GT 4   /* tokens per tile: GR·GT accumulators + GR weights + 1 activation = 16 ymm */
#define KCH 1024   /* elements per chunk of a tile (a multiple of 32) */

static inline __m256 ld_h(const uint8_t *row, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 2 * i)));
}

/* acc[r][t] = fma(w_r[i..i+8), x_t[i..i+8), acc[r][t]); the activations are F16 rows, or with
 * `pan` float rows, x + t*xs bytes each. */
static inline __attribute__((always_inline)) void f16_step(int R, int T, __m256 acc[GR][GT], const uint8_t *const *wr,
                                                            const uint8_t *x, size_t xs, bool pan, int64_t i) {
    __m256 w[GR];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) w[r] = ld_h(wr[r], i);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) {
        const __m256 v = pan ? _mm256_loadu_ps((const float *)(x + t * xs) + i) : ld_h(x + t * xs, i);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(w[r], v, acc[r][t]);
    }
}

/* R rows × T tokens: the four chains in turn over each KCH-element chunk (a chain's steps stay
 * in order, its sums parked in s between chunks), chain 0's 8-element blocks after the last,
 * then vec_dot_f16's reduction and its element tail (from the F16 rows xh); y[t*ldy + r]. A
 * chunk's rows and tokens stay in L1 for the four passes; whole rows of 3072 did not. */
static inline __attribute__((always_inline)) void f16_tile(int R, int T, int64_t n, const uint8_t *const *wr,
                                                            const uint8_t *x, size_t xs, bool pan,
                                                            const uint8_t *xh, size_t xhs, float *y, int64_t ldy) {
    const int64_t nf = n / 32 * 32, n8 = n / 8 * 8;
    __m256 s[4][GR][GT];
    for (int64_t k0 = 0; k0 < nf || k0 == 0; k0 += KCH) {
        const int64_t k1 = nf - k0 < KCH ? nf : k0 + KCH;
        for (int c = 0; c < 4; c++) {
            __m256 acc[GR][GT];
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8")
                for (int t = 0; t < T; t++) acc[r][t] = k0 == 0 ? _mm256_setzero_ps() : s[c][r][t];
            for (int64_t i = k0 + 8 * c; i < k1; i += 32) f16_step(R, T, acc, wr, x, xs, pan, i);
            if (c == 0 && k1 == nf)
                for (int64_t i = nf; i < n8; i += 8) f16_step(R, T, acc, wr, x, xs, pan, i);
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8")
                for (int t = 0; t < T; t++) s[c][r][t] = acc[r][t];
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const __m256 a = _mm256_add_ps(_mm256_add_ps(s[0][r][t], s[1][r][t]), _mm256_add_ps(s[2][r][t], s[3][r][t]));
            float v = x86_hsum_ps(a);
            for (int64_t i = n8; i < n; i++) v += x86_f16(wr[r] + 2 * i) * x86_f16(xh + t * xhs + 2 * i);
            y[t * ldy + r] = v;
        }
}

/* T tokens against every row, GR at a time. */
static inline __attribute__((always_inline)) void f16_cols(int T, int64_t n, const uint8_t *W, size_t ws,
                                                            int64_t n_rows, const uint8_t *x, size_t xs, bool pan,
                                                            const uint8_t *xh, size_t xhs, float *y, int64_t ldy) {
    const uint8_t *wr[GR];
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR) {
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
        f16_tile(GR, T, n, wr, x, xs, pan, xh, xhs, y + r, ldy);
    }
    for (; r < n_rows; r++) {
        wr[0] = W + (size_t)r * ws;
        f16_tile(1, T, n, wr, x, xs, pan, xh, xhs, y + r, ldy);
    }
}

/* f16_cols with T and `pan` constants in each case. */
static void f16_cols_any(int T, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *x, size_t xs,
                         bool pan, const uint8_t *xh, size_t xhs, float *y, int64_t ldy) {
#define F16_T(t)                                                                   \
    case t:                                                                        \
        if (pan) f16_cols(t, n, W, ws, n_rows, x, xs, true, xh, xhs, y, ldy);       \
        else f16_cols(t, n, W, ws, n_rows, x, xs, false, xh, xhs, y, ldy);          \
        break;
    switch (T) {
    F16_T(4)
    F16_T(3)
    F16_T(2)
    default: F16_T(1)
    }
#undef F16_T
}

#define PMAXN 1664           /* longest row the activation panel takes: GT float rows, 26 KB */
#define WBLK  (128 * 1024)   /* weight bytes per row block */

static void gemm_f16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                     float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const bool use_pan = n <= PMAXN;
    _Alignas(32) float pan[GT * PMAXN];
    const int64_t np = (n + 7) / 8 * 8, fit = ws ? (int64_t)(WBLK / ws) / GR * GR : GR;
    const int64_t rb = fit > GR ? fit : GR;
    for (int64_t r0 = 0; r0 < n_rows; r0 += rb) {
        const int64_t nr = n_rows - r0 < rb ? n_rows - r0 : rb;
        for (int64_t t = 0; t < n_tok; t += GT) {
            const int T = n_tok - t < GT ? (int)(n_tok - t) : GT;
            const uint8_t *xt = X + t * xs;
            float *yt = y + t * ldy + r0;
            if (!use_pan) {
                f16_cols_any(T, n, W + (size_t)r0 * ws, ws, nr, xt, xs, false, xt, xs, yt, ldy);
                continue;
            }
            for (int j = 0; j < T; j++)   /* the elements past n8 are not read from here */
                for (int64_t i = 0; i + 8 <= n; i += 8) _mm256_store_ps(pan + j * np + i, ld_h(xt + j * xs, i));
            f16_cols_any(T, n, W + (size_t)r0 * ws, ws, nr, (const uint8_t *)pan, (size_t)np * 4, true, xt, xs, yt,
                         ldy);
        }
    }
}

void rt_fill_gemm_f16_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_F16] = gemm_f16;
}
