/* gemm_f16_avx512.c — tiles of F16 or BF16 weight rows × activation rows of the same type
 * (tensor.h, gemm), for prompt batches.
 *
 * F16: every output element performs exactly vec_dot_f16's operations (float_avx512.c):
 * four 16-lane accumulator chains s0..s3 (chain c takes element block 64b + 16c of every
 * full 64-element block; then s0 the 16-element blocks after them, s1 the masked tail), each
 * FMA fma(w, x, s) on the converted halves, result reduce_add((s0 + s1) + (s2 + s3)). The
 * chains are independent, so a tile runs them one after the other (R×T accumulators live at
 * a time instead of 4·R·T) and keeps each chain's sums on the stack until the last.
 * BF16 (an AVX512_BF16 CPU: the table's dot is vdpbf16ps, bf16_avx512.c): one chain,
 * acc = vdpbf16ps(acc, w, x) per 32-element block, reduced as rt_hsum16_ggml; rows that are
 * not a multiple of RT_BF16_BLOCK take rt_dot_bf16 per element, as the dot does.
 * Only the layout differs from the dots: a tile of R weight rows × T tokens converts (loads)
 * each weight block once for T tokens and each activation block once for R rows; rows go in
 * blocks of about WBLK bytes (in L2) and each GT-token tile stays in L1 while a block's rows
 * pass over it; four rows' 16-lane reductions run side by side (hsum4x16).
 * Any n, any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define GR 4   /* weight rows per tile */
#define GT 6   /* tokens per tile: GR·GT accumulators + GR weights + 1 activation <= 32 zmm */

/* rt_hsum16_ggml (= _mm512_reduce_add_ps's order) of a0..a3 at once, as 4 floats: lanes
 * l + l+8 (two vectors per register), then h + h+4, then (q0 + q2) + (q1 + q3); every add pairs
 * the same two values as the one-vector reduction. */
static inline __m128 hsum4x16(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, 0x88), _mm512_shuffle_f32x4(h01, h23, 0xDD));
    const __m512 s = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
    const __m512 r = _mm512_add_ps(s, _mm512_permute_ps(s, 0xB1));
    const __m512i lane0 = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0, r));
}

/* The sums of R (<= GR) rows of one token, reduced, to y[0..R). */
static inline __attribute__((always_inline)) void store_rows(int R, float *y, const __m512 *v) {
    const __m128 o = hsum4x16(v[0], v[R > 1 ? 1 : 0], v[R > 2 ? 2 : 0], v[R > 3 ? 3 : 0]);
    if (R == 4) _mm_storeu_ps(y, o);
    else _mm_mask_storeu_ps(y, (__mmask8)((1u << R) - 1u), o);
}

/* ---- F16 -------------------------------------------------------------------------------- */

static inline __m512 ld_h(const uint8_t *row, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 2 * i)));
}
static inline __m512 ld_hm(const uint8_t *row, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + 2 * i));
}

/* acc[r][t] = fma(w_r[i..i+16), x_t[i..i+16), acc[r][t]) (masked: zeros past m). The
 * activations are F16 rows, or with `pan` float rows converted beforehand (exact, zeros past
 * the end: what the masked conversion gives), x + t*xs bytes each. */
static inline __attribute__((always_inline)) void f16_step(int R, int T, __m512 acc[GR][GT], const uint8_t *const *wr,
                                                            const uint8_t *x, size_t xs, bool pan, int64_t i,
                                                            bool masked, __mmask16 m) {
    __m512 w[GR];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) w[r] = masked ? ld_hm(wr[r], i, m) : ld_h(wr[r], i);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) {
        const __m512 v = pan      ? _mm512_loadu_ps((const float *)(x + t * xs) + i)
                         : masked ? ld_hm(x + t * xs, i, m)
                                  : ld_h(x + t * xs, i);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) acc[r][t] = _mm512_fmadd_ps(w[r], v, acc[r][t]);
    }
}

/* R rows × T tokens: the four chains in turn, then vec_dot_f16's reduction; y[t*ldy + r]. */
static inline __attribute__((always_inline)) void f16_tile(int R, int T, int64_t n, const uint8_t *const *wr,
                                                            const uint8_t *x, size_t xs, bool pan, float *y,
                                                            int64_t ldy) {
    const int64_t nf = n / 64 * 64;   /* end of the full 64-element blocks */
    __m512 s[4][GR][GT];
    for (int c = 0; c < 4; c++) {
        __m512 acc[GR][GT];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
        for (int64_t i = 16 * c; i < nf; i += 64) f16_step(R, T, acc, wr, x, xs, pan, i, false, 0);
        if (c == 0)
            for (int64_t i = nf; i + 16 <= n; i += 16) f16_step(R, T, acc, wr, x, xs, pan, i, false, 0);
        if (c == 1 && n % 16 != 0) {
            const int64_t i = n / 16 * 16;
            f16_step(R, T, acc, wr, x, xs, pan, i, true, (__mmask16)((1u << (n - i)) - 1u));
        }
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) s[c][r][t] = acc[r][t];
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) {
        __m512 v[GR];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++)
            v[r] = _mm512_add_ps(_mm512_add_ps(s[0][r][t], s[1][r][t]), _mm512_add_ps(s[2][r][t], s[3][r][t]));
        store_rows(R, y + t * ldy, v);
    }
}

/* Rows shorter than SHORTN against one panel token (float row x): R rows at a time, each row's
 * four chains in registers, every step the tile's (the same lanes' operations, the same bits).
 * The tile keeps R·T sums per chain and parks the chains on the stack, which for short rows
 * costs more than their FMAs: Mamba's dt rows (48 and 64 long) took 11 % of mamba-130m's
 * prompt time that way. */
#define SHORTN 128
static inline __attribute__((always_inline)) void f16_short(int R, int64_t n, const uint8_t *const *wr,
                                                             const float *x, float *y) {
    const int64_t nf = n / 64 * 64;
    __m512 s[4][GR];
    _Pragma("GCC unroll 4")
    for (int c = 0; c < 4; c++)
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) s[c][r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nf; i += 64)
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            const __m512 v = _mm512_loadu_ps(x + i + 16 * c);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) s[c][r] = _mm512_fmadd_ps(ld_h(wr[r], i + 16 * c), v, s[c][r]);
        }
    for (int64_t i = nf; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) s[0][r] = _mm512_fmadd_ps(ld_h(wr[r], i), v, s[0][r]);
    }
    if (n % 16 != 0) {
        const int64_t i = n / 16 * 16;
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        const __m512 v = _mm512_loadu_ps(x + i);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) s[1][r] = _mm512_fmadd_ps(ld_hm(wr[r], i, m), v, s[1][r]);
    }
    __m512 v[GR];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) v[r] = _mm512_add_ps(_mm512_add_ps(s[0][r], s[1][r]), _mm512_add_ps(s[2][r], s[3][r]));
    store_rows(R, y, v);
}

/* T panel tokens (float rows xs bytes apart) against n_rows short rows, GR at a time. */
static void f16_short_cols(int T, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const float *x, size_t xs,
                           float *y, int64_t ldy) {
    const uint8_t *wr[GR];
    for (int t = 0; t < T; t++) {
        const float *xt = (const float *)((const uint8_t *)x + t * xs);
        int64_t r = 0;
        for (; r + GR <= n_rows; r += GR) {
            for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
            f16_short(GR, n, wr, xt, y + t * ldy + r);
        }
        for (; r < n_rows; r++) {
            wr[0] = W + (size_t)r * ws;
            f16_short(1, n, wr, xt, y + t * ldy + r);
        }
    }
}

/* T tokens (F16 rows, or float rows with `pan`; xs bytes apart) against every row, GR at a
 * time. */
static inline __attribute__((always_inline)) void f16_cols(int T, int64_t n, const uint8_t *W, size_t ws,
                                                            int64_t n_rows, const uint8_t *x, size_t xs, bool pan,
                                                            float *y, int64_t ldy) {
    const uint8_t *wr[GR];
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR) {
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
        f16_tile(GR, T, n, wr, x, xs, pan, y + r, ldy);
    }
    for (; r < n_rows; r++) {
        wr[0] = W + (size_t)r * ws;
        f16_tile(1, T, n, wr, x, xs, pan, y + r, ldy);
    }
}

/* f16_cols with T a constant in each case: float panel rows (f16_cols_pan), F16 rows (_h). */
static void f16_cols_pan(int T, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *x, size_t xs,
                         float *y, int64_t ldy) {
    switch (T) {
    case 6: f16_cols(6, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    case 5: f16_cols(5, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    case 4: f16_cols(4, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    case 3: f16_cols(3, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    case 2: f16_cols(2, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    default: f16_cols(1, n, W, ws, n_rows, x, xs, true, y, ldy); break;
    }
}

static void f16_cols_h(int T, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *x, size_t xs,
                       float *y, int64_t ldy) {
    switch (T) {
    case 6: f16_cols(6, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    case 5: f16_cols(5, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    case 4: f16_cols(4, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    case 3: f16_cols(3, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    case 2: f16_cols(2, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    default: f16_cols(1, n, W, ws, n_rows, x, xs, false, y, ldy); break;
    }
}

/* Longest row the activation panel takes: its GT float rows (40 KB) stay in L1 while the weight
 * rows pass; a larger panel, read from L2, was slower than converting in the tile (n 2048,
 * 3072 on Zen 5). */
#define PMAXN 1664
/* Converting a row block's weights to float once (96 KB in L2) so that the tile converts
 * nothing was slower on Zen 5: one thread, 256 x 1024, 512 tokens (a program outside the repo,
 * best of 5) 203 against 228 GFLOP/s, ~87 % of the fp32 FMA peak already: the conversions are
 * not what this tile waits for. */
#define WBLK  (128 * 1024)   /* weight bytes per row block */
#define SHORT_WBLK (24 * 1024)   /* the same for rows under SHORTN */

/* Row blocks of about WBLK bytes (in L2) against every token, GT tokens at a time; a token
 * tile stays in L1 while the block's rows pass over it. Rows up to PMAXN: the tile's tokens
 * are converted to float once (exact), so a tile converts only its GR weight blocks (GR·GT
 * FMAs per GR conversions, not GR + GT); longer rows convert both sides in the tile. */
static void gemm_f16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                     float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const bool use_pan = n <= PMAXN;
    _Alignas(64) float pan[GT * PMAXN];
    /* short rows: a block of them stays in L1 while the tile's tokens pass one by one */
    const int64_t np = (n + 15) / 16 * 16, fit = ws ? (int64_t)((n < SHORTN ? SHORT_WBLK : WBLK) / ws) / GR * GR : GR;
    const int64_t rb = fit > GR ? fit : GR;
    for (int64_t r0 = 0; r0 < n_rows; r0 += rb) {
        const int64_t nr = n_rows - r0 < rb ? n_rows - r0 : rb;
        for (int64_t t = 0; t < n_tok; t += GT) {
            const int T = n_tok - t < GT ? (int)(n_tok - t) : GT;
            if (!use_pan) {
                f16_cols_h(T, n, W + (size_t)r0 * ws, ws, nr, X + t * xs, xs, y + t * ldy + r0, ldy);
                continue;
            }
            for (int j = 0; j < T; j++)
                for (int64_t i = 0; i < n; i += 16) {
                    const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
                    _mm512_store_ps(pan + j * np + i, ld_hm(X + (t + j) * xs, i, m));
                }
            if (n < SHORTN)
                f16_short_cols(T, n, W + (size_t)r0 * ws, ws, nr, pan, (size_t)np * 4, y + t * ldy + r0, ldy);
            else
                f16_cols_pan(T, n, W + (size_t)r0 * ws, ws, nr, (const uint8_t *)pan, (size_t)np * 4,
                             y + t * ldy + r0, ldy);
        }
    }
}

/* ---- BF16 (vdpbf16ps) ------------------------------------------------------------------- */

/* 32 weight elements at p: one load, or with `halves` two 32-byte loads, which stay within a
 * cache line each when the row is 32- but not 64-byte aligned (GGUF aligns tensors to 32
 * bytes; a split 64-byte load cost 10-25 % here). */
static inline __m512i ld_w(const uint8_t *p, bool halves) {
    if (!halves) return _mm512_loadu_si512(p);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)(p + 32)), 1);
}

/* R rows × T tokens, n a multiple of RT_BF16_BLOCK: the dot's one chain per element. */
static inline __attribute__((always_inline)) void bf16_tile(int R, int T, int64_t n, const uint8_t *const *wr,
                                                             bool halves, const uint8_t *x, size_t xs, float *y,
                                                             int64_t ldy) {
    __m512 acc[GR][GT];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
        __m512i w[GR];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) w[r] = ld_w(wr[r] + 2 * i, halves);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            const __m512i v = _mm512_loadu_si512(x + t * xs + 2 * i);
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], (__m512bh)w[r], (__m512bh)v);
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) {
        __m512 v[GR];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) v[r] = acc[r][t];
        store_rows(R, y + t * ldy, v);
    }
}

/* T tokens against every row, GR at a time. */
static inline __attribute__((always_inline)) void bf16_cols(int T, int64_t n, const uint8_t *W, size_t ws,
                                                             int64_t n_rows, bool halves, const uint8_t *x, size_t xs,
                                                             float *y, int64_t ldy) {
    const uint8_t *wr[GR];
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR) {
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
        bf16_tile(GR, T, n, wr, halves, x, xs, y + r, ldy);
    }
    for (; r < n_rows; r++) {
        wr[0] = W + (size_t)r * ws;
        bf16_tile(1, T, n, wr, halves, x, xs, y + r, ldy);
    }
}

/* bf16_cols with T and `halves` constants in each case. */
static void bf16_cols_any(int T, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, bool halves,
                          const uint8_t *x, size_t xs, float *y, int64_t ldy) {
#define BF16_T(t)                                                                   \
    case t:                                                                         \
        if (halves) bf16_cols(t, n, W, ws, n_rows, true, x, xs, y, ldy);            \
        else bf16_cols(t, n, W, ws, n_rows, false, x, xs, y, ldy);                  \
        break;
    switch (T) {
    BF16_T(6)
    BF16_T(5)
    BF16_T(4)
    BF16_T(3)
    BF16_T(2)
    default: BF16_T(1)
    }
#undef BF16_T
}

/* The loop nest of gemm_f16: row blocks of about WBLK bytes, GT tokens at a time. */
void rt_gemm_bf16_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    if (n % RT_BF16_BLOCK != 0) {   /* the dot's fallback: the scalar order */
        x86_gemm_by_dot(rt_dot_bf16, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    const bool halves = (((uintptr_t)W | ws) & 63) != 0;
    const int64_t fit = ws ? (int64_t)(WBLK / ws) / GR * GR : GR;
    const int64_t rb = fit > GR ? fit : GR;
    for (int64_t r0 = 0; r0 < n_rows; r0 += rb) {
        const int64_t nr = n_rows - r0 < rb ? n_rows - r0 : rb;
        for (int64_t t = 0; t < n_tok; t += GT) {
            const int T = n_tok - t < GT ? (int)(n_tok - t) : GT;
            bf16_cols_any(T, n, W + (size_t)r0 * ws, ws, nr, halves, X + t * xs, xs, y + t * ldy + r0, ldy);
        }
    }
}

void rt_fill_gemm_f16_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_F16] = gemm_f16;
}
