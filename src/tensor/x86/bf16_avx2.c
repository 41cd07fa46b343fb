/* bf16_avx2.c — rt_dot_bf16 (dot_ref.c) with AVX2: the 16 vdpbf16ps lanes as two 8-lane
 * halves (elements 0-15 and 16-31 of each block of RT_BF16_BLOCK), the lane step done with
 * FMAs (subnormal inputs read as zero, odd pair first, results flushed), then the 16 lanes
 * reduced as rt_hsum16_ggml. Other lengths take the scalar reference. Bit-identical to it.
 * Also the prompt tiles of the same dot (rt_gemm_bf16_avx2, below) and its single-token
 * kernel (rt_gemv_bf16_avx2). */
#include "tensor/x86/simd_x86.h"

static inline __m256 daz8(__m256i v) {
    const __m256i zexp = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(v, _mm256_and_si256(v, _mm256_set1_epi32(INT32_MIN)), zexp));
}

static inline __m256 ftz8(__m256 r) {
    const __m256 tiny = _mm256_cmp_ps(x86_abs_ps(r), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_blendv_ps(r, _mm256_and_ps(r, _mm256_set1_ps(-0.0f)), tiny);
}

static inline __m256 step8(__m256 acc, const uint8_t *pa, const uint8_t *pb) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)pa), b = _mm256_loadu_si256((const __m256i *)pb);
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    acc = ftz8(_mm256_fmadd_ps(daz8(_mm256_and_si256(a, hi)), daz8(_mm256_and_si256(b, hi)), acc));
    return ftz8(_mm256_fmadd_ps(daz8(_mm256_slli_epi32(a, 16)), daz8(_mm256_slli_epi32(b, 16)), acc));
}

static float vec_dot_bf16(int64_t n, const void *w, const void *x) {
    if (n % RT_BF16_BLOCK != 0) return rt_dot_bf16(n, w, x);
    const uint8_t *a = w, *b = x;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
        lo = step8(lo, a + 2 * i, b + 2 * i);
        hi = step8(hi, a + 2 * i + 32, b + 2 * i + 32);
    }
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    return rt_hsum16_ggml(l);
}

/* ---- prompt tiles: many rows × many tokens ---------------------------------------------------
 *
 * Every output element performs exactly vec_dot_bf16's operations: chain 0 (the lanes of
 * elements 0-15 of each block) and chain 1 (16-31), each step fma(w odd, x odd) then fma(w even,
 * x even), inputs with a zero exponent read as zero, each result flushed when tiny; then
 * x86_hsum_ps(chain 0 + chain 1), which is rt_hsum16_ggml. What differs is the layout (tiles of
 * BG_R rows × BG_T tokens, the two independent chains one after the other over each chunk of
 * BG_KCH elements with their sums parked in between, rows in blocks of BG_WBLK bytes, as
 * gemm_f16_avx2.c; a token tile split into float halves once per row block, so each FMA reads
 * its token operand from memory) and one proof, which lets most tiles skip the zero reading and
 * the flush:
 *
 * A nonzero normal BF16 input with biased exponent e is an integer times 2^(e−134) (8
 * significant bits). If a row and a token hold no subnormal input and the least exponents of
 * their nonzero inputs add up to at least 142, every product is an integer multiple of 2^−126,
 * and so is every sum: the exact sum of two such is one, and rounding it to float keeps it
 * (below 2^−102 it has at most 24 significant bits) or rounds it to a multiple of its ulp
 * (at least 2^−125). A nonzero multiple of 2^−126 is not tiny, so no result is ever flushed,
 * and no input is subnormal, so the zero reading changes nothing: the tile's steps are plain
 * FMAs on the halves of each input word. Real weights and activations pass with a wide margin
 * (their exponent sums are above 200); any other tile takes the dot's full step. */

#define BG_R 3                  /* weight rows per tile */
#define BG_T 3                  /* tokens per tile: BG_R·BG_T accumulators + BG_R weights + a mask = 16 ymm */
#define BG_KCH 1024             /* elements per chunk (a multiple of RT_BF16_BLOCK) */
#define BG_WBLK (256 * 1024)    /* weight bytes per row block (in L2) */
#define BG_TGRP 1024            /* tokens whose exponents are found at once */
#define BG_EMIN 142             /* least exponent sum of a tile that needs neither reading nor flush */
#define BG_SUBN (-1024)         /* the "exponent" of a row or token with a subnormal input */

/* 16 BF16 values into the running unsigned minimum of |v| − 1 (a zero wraps to 0xFFFF, so the
 * minimum is the least nonzero magnitude, less one). */
static inline __m256i least_step(__m256i m, __m256i v) {
    return _mm256_min_epu16(m, _mm256_sub_epi16(_mm256_and_si256(v, _mm256_set1_epi16(0x7FFF)), _mm256_set1_epi16(1)));
}

/* The biased exponent of the least nonzero magnitude kept in the 16 lanes of m and in `least`
 * (256 when all were zero, BG_SUBN when it is subnormal). */
static int least_exp_of(__m256i m, uint16_t least) {
    uint16_t l[16];
    _mm256_storeu_si256((__m256i *)l, m);
    for (int k = 0; k < 16; k++) least = l[k] < least ? l[k] : least;
    if (least == 0xFFFF) return 256;
    const int e = (least + 1) >> 7;
    return e == 0 ? BG_SUBN : e;
}

/* The least biased exponent of the nonzero inputs of a row of n BF16 values (least_exp_of). */
static int bf16_least_exp(const uint8_t *row, int64_t n) {
    __m256i m = _mm256_set1_epi16(-1);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) m = least_step(m, _mm256_loadu_si256((const __m256i *)(row + 2 * i)));
    uint16_t least = 0xFFFF;
    for (; i < n; i++) {
        const uint16_t v = (uint16_t)((rd_u16(row + 2 * i) & 0x7FFF) - 1);
        least = v < least ? v : least;
    }
    return least_exp_of(m, least);
}

/* One half of the lanes of an input word: the odd element (h = 0) or the even one (h = 1),
 * read as the dot reads it (`exact`) or as plain floats (the tiles of the proof above). */
static inline __m256 bf16_half(__m256i v, int h, bool exact) {
    const __m256i f = h == 0 ? _mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)) : _mm256_slli_epi32(v, 16);
    return exact ? daz8(f) : _mm256_castsi256_ps(f);
}

/* Tokens x (T rows, xs bytes apart) into the panel p (n floats a token): each input word split
 * into its two halves as floats, block by block [chain 0 odd | chain 0 even | chain 1 odd |
 * chain 1 even], so that the tile reads each half with its FMA. */
static void bf16_token_panel(int T, int64_t n, const uint8_t *x, size_t xs, float *p) {
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    for (int t = 0; t < T; t++)
        for (int64_t i = 0; i < n; i += 16) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(x + t * xs + 2 * i));
            _mm256_store_si256((__m256i *)(p + t * n + i), _mm256_and_si256(v, hi));
            _mm256_store_si256((__m256i *)(p + t * n + i + 8), _mm256_slli_epi32(v, 16));
        }
}

/* R rows × T tokens of the panel x (n floats apart): the two chains in turn over each chunk,
 * then the dot's reduction; y[t·ldy + r]. */
static inline __attribute__((always_inline)) void bf16_tile(int R, int T, bool exact, int64_t n,
                                                             const uint8_t *const *wr, const float *x,
                                                             float *y, int64_t ldy) {
    __m256 s[2][BG_R][BG_T];
    for (int64_t k0 = 0; k0 < n; k0 += BG_KCH) {
        const int64_t k1 = n - k0 < BG_KCH ? n : k0 + BG_KCH;
        for (int c = 0; c < 2; c++) {
            __m256 acc[BG_R][BG_T];
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8")
                for (int t = 0; t < T; t++) acc[r][t] = k0 == 0 ? _mm256_setzero_ps() : s[c][r][t];
            for (int64_t i = k0 + 16 * c; i < k1; i += RT_BF16_BLOCK)
                _Pragma("GCC unroll 2")
                for (int h = 0; h < 2; h++) {
                    __m256 w[BG_R];
                    _Pragma("GCC unroll 8")
                    for (int r = 0; r < R; r++) w[r] = bf16_half(_mm256_loadu_si256((const __m256i *)(wr[r] + 2 * i)), h, exact);
                    _Pragma("GCC unroll 8")
                    for (int t = 0; t < T; t++) {
                        const __m256 p = _mm256_load_ps(x + t * n + i + 8 * h);
                        const __m256 v = exact ? daz8(_mm256_castps_si256(p)) : p;
                        _Pragma("GCC unroll 8")
                        for (int r = 0; r < R; r++) {
                            acc[r][t] = _mm256_fmadd_ps(w[r], v, acc[r][t]);
                            if (exact) acc[r][t] = ftz8(acc[r][t]);
                        }
                    }
                }
            _Pragma("GCC unroll 8")
            for (int r = 0; r < R; r++)
                _Pragma("GCC unroll 8")
                for (int t = 0; t < T; t++) s[c][r][t] = acc[r][t];
        }
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) y[t * ldy + r] = x86_hsum_ps(_mm256_add_ps(s[0][r][t], s[1][r][t]));
}

/* T tokens (least exponent ex) against rows [0, nr) of W (least exponents ew), BG_R at a time. */
static inline __attribute__((always_inline)) void bf16_cols(int T, int64_t n, const uint8_t *W, size_t ws,
                                                             const int *ew, int64_t nr, const float *x, int ex, float *y,
                                                             int64_t ldy) {
    const uint8_t *wr[BG_R];
    int64_t r = 0;
    for (; r < nr; r += BG_R) {
        const int R = nr - r < BG_R ? (int)(nr - r) : BG_R;
        int e = ew[r];
        for (int k = 0; k < R; k++) {
            wr[k] = W + (size_t)(r + k) * ws;
            e = ew[r + k] < e ? ew[r + k] : e;
        }
        const bool exact = e + ex < BG_EMIN;
        if (R == BG_R && !exact) bf16_tile(BG_R, T, false, n, wr, x, y + r, ldy);
        else if (R == BG_R) bf16_tile(BG_R, T, true, n, wr, x, y + r, ldy);
        else
            for (int k = 0; k < R; k++)
                if (exact) bf16_tile(1, T, true, n, wr + k, x, y + r + k, ldy);
                else bf16_tile(1, T, false, n, wr + k, x, y + r + k, ldy);
    }
}

void rt_gemm_bf16_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                       float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    if (n % RT_BF16_BLOCK != 0) {
        x86_gemm_by_dot(vec_dot_bf16, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    float *pan = aligned_alloc(32, (size_t)BG_T * (size_t)n * sizeof(float));
    if (!pan) {   /* the dot needs no memory */
        x86_gemm_by_dot(vec_dot_bf16, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    int ew[BG_WBLK / (2 * RT_BF16_BLOCK)], ex[BG_TGRP];
    const int64_t fit = (int64_t)(BG_WBLK / ws) / BG_R * BG_R, rb = fit > BG_R ? fit : BG_R;
    for (int64_t t0 = 0; t0 < n_tok; t0 += BG_TGRP) {
        const int64_t tn = n_tok - t0 < BG_TGRP ? n_tok - t0 : BG_TGRP;
        for (int64_t t = 0; t < tn; t++) ex[t] = bf16_least_exp(X + (size_t)(t0 + t) * xs, n);
        for (int64_t r0 = 0; r0 < n_rows; r0 += rb) {
            const int64_t nr = n_rows - r0 < rb ? n_rows - r0 : rb;
            for (int64_t r = 0; r < nr; r++) ew[r] = bf16_least_exp(W + (size_t)(r0 + r) * ws, n);
            for (int64_t t = 0; t < tn; t += BG_T) {
                const int T = tn - t < BG_T ? (int)(tn - t) : BG_T;
                int e = ex[t];
                for (int k = 1; k < T; k++) e = ex[t + k] < e ? ex[t + k] : e;
                bf16_token_panel(T, n, X + (size_t)(t0 + t) * xs, xs, pan);
                float *yt = y + (t0 + t) * ldy + r0;
                const uint8_t *wb = W + (size_t)r0 * ws;
                switch (T) {
                case 3: bf16_cols(3, n, wb, ws, ew, nr, pan, e, yt, ldy); break;
                case 2: bf16_cols(2, n, wb, ws, ew, nr, pan, e, yt, ldy); break;
                default: bf16_cols(1, n, wb, ws, ew, nr, pan, e, yt, ldy); break;
                }
            }
        }
    }
    free(pan);
}

/* ---- a single token: many rows × one activation row --------------------------------------
 *
 * One dot at a time is latency-bound (each step waits on the flush of the one before), and the
 * zero reading and the flush cost more than the FMAs. So GV_R rows run side by side (rows
 * r + k·q, q = n_rows / GV_R: straight streams, as gemv_avx512.c's Q8_0 quad) with plain FMAs
 * on the halves of each input word, each row's least exponent found in the same pass. Where
 * the proof above holds for the row and the token, those are the dot's bits; otherwise (tiny
 * or subnormal inputs, none in real weights) the row is computed again with the dot, from
 * cache. */

#define GV_R RT_GEMV_BF16_GROUP

/* Rows w[0..GV_R) against x: the plain-FMA sums and each row's least exponent; with pf, each
 * row fetched X86_Q8_PF bytes ahead, a line a block (bf16_avx512.c's gemv does it always):
 * recur-bench --prefetch-ab 24, RECUR_ISA=avx2, qwen3-0.6b BF16, the chooser against prefetch
 * off 0.929 the time a token (before, this kernel had none). */
static inline __attribute__((always_inline)) void gv_rows(int64_t n, const uint8_t *const *w, const uint8_t *x,
                                                           float out[GV_R], int least[GV_R], bool pf) {
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 acc[GV_R][2];   /* unrolled loops keep these in registers */
    __m256i m[GV_R];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < GV_R; r++) {
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        m[r] = _mm256_set1_epi16(-1);
    }
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
        if (pf)
            _Pragma("GCC unroll 8")
            for (int r = 0; r < GV_R; r++) _mm_prefetch((const char *)(w[r] + 2 * i + X86_Q8_PF), _MM_HINT_T0);
        _Pragma("GCC unroll 2")
        for (int c = 0; c < 2; c++) {   /* chain c: elements 16c .. 16c + 15 of the block */
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + 2 * i + 32 * c));
            const __m256 xo = _mm256_castsi256_ps(_mm256_and_si256(xv, hi)), xe = _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16));
            _Pragma("GCC unroll 8")
            for (int r = 0; r < GV_R; r++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(w[r] + 2 * i + 32 * c));
                m[r] = least_step(m[r], v);
                acc[r][c] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, hi)), xo, acc[r][c]);
                acc[r][c] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[r][c]);
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < GV_R; r++) {
        out[r] = x86_hsum_ps(_mm256_add_ps(acc[r][0], acc[r][1]));
        least[r] = least_exp_of(m[r], 0xFFFF);
    }
}

static inline __attribute__((always_inline)) void gemv_bf16_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                               int64_t g0, int64_t g1, const void *x, float *y,
                                                               bool pf) {
    const uint8_t *W = w, *X = x;
    const int64_t q = n_rows / GV_R, e = g1 < q ? g1 : q;
    const bool blocks = n % RT_BF16_BLOCK == 0;   /* otherwise the dot alone, row by row */
    const int ex = blocks && g0 < e ? bf16_least_exp(X, n) : 0;
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *wr[GV_R];
        float out[GV_R];
        int least[GV_R];
        for (int k = 0; k < GV_R; k++) wr[k] = W + (size_t)(r + k * q) * ws;
        if (!blocks) {
            for (int k = 0; k < GV_R; k++) y[r + k * q] = vec_dot_bf16(n, wr[k], X);
            continue;
        }
        gv_rows(n, wr, X, out, least, pf);
        for (int k = 0; k < GV_R; k++) y[r + k * q] = least[k] + ex >= BG_EMIN ? out[k] : vec_dot_bf16(n, wr[k], X);
    }
    for (int64_t r = g1 > q ? GV_R * q : n_rows; r < n_rows; r++) y[r] = vec_dot_bf16(n, W + (size_t)r * ws, X);
}

X86_GEMV_PF_TWINS(gemv_bf16)

void rt_gemv_bf16_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                       const void *x, float *y) {
    gemv_bf16(n, w, ws, n_rows, g0, g1, x, y);
}

void rt_fill_bf16_avx2(tensor_kernels *k) {
    k->vec_dot[GGUF_T_BF16] = vec_dot_bf16;
    k->gemm[GGUF_T_BF16] = rt_gemm_bf16_avx2;
    k->gemv[GGUF_T_BF16] = (tensor_gemv){ gemv_bf16, GV_R, gemv_bf16_lean, 0, NULL, 0 };
}
