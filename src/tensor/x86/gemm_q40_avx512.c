/* gemm_q40_avx512.c — tiles of Q4_0 weight rows × Q8_0 activation rows (tensor.h, gemm).
 *
 * Every output element performs exactly the AVX-512 table's dot_q4_0 (dot_avx512.c): per
 * pair of blocks (2i, 2i+1), 16 int32 lanes (lanes 0-7: block 2i, 8-15: block 2i+1, each the
 * exact sum of 4 byte products in the dot's element order) converted to float and added with
 * one FMA scaled by dup2(dw·dx of block 2i, of block 2i+1) into one 16-lane accumulator;
 * then hsum512 (lo256 + hi256, x86_hsum_ps), then an odd last block added as the 8-lane
 * hsum of its scaled lanes. Only the integer route and the layout differ:
 *  - the weight nibbles are unpacked once to signed bytes q − 8 and the activation bytes
 *    are made unsigned (y + 128), so dpbusd starting from −128·Σ4 (q − 8) gives Σ4 (q − 8)·y
 *    exactly (the dot's dpbusd(q, y) − dpbusd(8, y) is the same integer);
 *  - a tile of GR rows × GT tokens (one 16-lane accumulator each) shares each unpacked
 *    weight pair over GT tokens and each activation pair over GR rows;
 *  - from PMIN_TOK tokens on, the weight side of a row tile (signed bytes, the dpbusd start,
 *    the scales as floats) is computed once per call into a stack panel (≤ 192 KB, L2) and
 *    every token tile reads it from there;
 *  - but from GMIN_TOK tokens on, whole groups of 16 rows go a lane per row (below), these
 *    tiles taking only the rows after them and the block-order twin's calls.
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include <stdlib.h>
#include <string.h>

#include "tensor/x86/q8grp_avx512.h"

#define GR 4   /* rows per tile */
#define GT 4   /* tokens per tile */

#define PMAXP 256      /* block pairs per panel buffer (16384 elements) */
#define PMIN_TOK 8     /* fewer tokens do not pay for the packing */

/* The weight side of one block pair of one row: signed bytes q − 8 (block 2i in bytes 0-31,
 * 2i+1 in 32-63, each as [16 low nibbles, 16 high nibbles]: the dot's element order), the
 * dpbusd start −128·Σ4 (q − 8), and the two fp16 scales as floats (lanes 0-7, 8-15). An odd
 * last block uses the low halves only (the high halves zero). */
typedef struct q4_pair {
    __m512i w, nc;
    __m512  dw;
} q4_pair;

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: x86_f16's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

static inline __m512 dup2_h(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(p0), _mm256_castsi256_si128(bcast_h(p1)), 1));
}

/* 16 nibble bytes at p -> 32 bytes [low nibbles, high nibbles] minus 8. */
static inline __m256i nib_signed(const uint8_t *p) {
    return _mm256_sub_epi8(x86_unpack_nib16(p), _mm256_set1_epi8(8));
}

/* Blocks a (and a + Q4_0_BYTES when two) of one row. */
static inline __attribute__((always_inline)) q4_pair load_pair(const uint8_t *a, bool two) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    q4_pair q;
    const __m256i lo = nib_signed(a + Q4_0_QS);
    if (two) {
        q.w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), nib_signed(a + Q4_0_BYTES + Q4_0_QS), 1);
        q.dw = dup2_h(a, a + Q4_0_BYTES);
    } else {
        q.w = _mm512_zextsi256_si512(lo);
        q.dw = _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_set1_epi16((short)rd_u16(a))));
    }
    q.nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q.w));
    return q;
}

/* The activation side of one block pair of one token: bytes y + 128 and the scales. */
static inline __attribute__((always_inline)) void load_x(const uint8_t *b, __m512i *xu, __m512 *dx) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + Q8_0_QS))),
                                         _mm256_loadu_si256((const __m256i *)(b + Q8_0_BYTES + Q8_0_QS)), 1);
    *xu = _mm512_xor_si512(y, bias);
    *dx = dup2_h(b, b + Q8_0_BYTES);
}

/* R rows × T tokens over every block; y[t * ldy + r]. The weight side comes from the panel
 * pk (GR rows per pair) when given, else it is unpacked from the rows wr here. */
static inline __attribute__((always_inline)) void tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                        const q4_pair *pk, bool use_pk, const uint8_t *x, size_t xs,
                                                        float *y, int64_t ldy) {
    __m512 acc[GR][GT];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int64_t np = nb / 2;
    for (int64_t i = 0; i < np; i++) {
        __m512i xu[GT];
        __m512 dx[GT];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) load_x(x + t * xs + (size_t)i * 2 * Q8_0_BYTES, &xu[t], &dx[t]);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const q4_pair q = use_pk ? pk[i * GR + r] : load_pair(wr[r] + (size_t)i * 2 * Q4_0_BYTES, true);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(q.nc, xu[t], q.w));
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(q.dw, dx[t]), pf, acc[r][t]);
            }
        }
    }
    float s[GR][GT];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            s[r][t] = x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), _mm512_extractf32x8_ps(acc[r][t], 1)));
    if (nb & 1) {   /* the dot's odd last block: its 8 scaled lanes summed, then added */
        const __m256i bias = _mm256_set1_epi8((char)0x80);
        for (int r = 0; r < R; r++) {
            const q4_pair q = use_pk ? pk[np * GR + r] : load_pair(wr[r] + (size_t)np * 2 * Q4_0_BYTES, false);
            for (int t = 0; t < T; t++) {
                const uint8_t *b = x + t * xs + (size_t)np * 2 * Q8_0_BYTES;
                const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)), bias);
                const __m256i p = _mm256_dpbusd_epi32(_mm512_castsi512_si256(q.nc), xu, _mm512_castsi512_si256(q.w));
                const __m256 d = _mm256_mul_ps(_mm512_castps512_ps256(q.dw), _mm256_cvtph_ps(_mm_set1_epi16((short)rd_u16(b))));
                s[r][t] += x86_hsum_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(p)));
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) y[t * ldy + r] = s[r][t];
}

/* One row tile (R rows) over every token, GT at a time, then the token tail. */
static inline __attribute__((always_inline)) void row_tile(int R, int64_t nb, const uint8_t *const *wr,
                                                            const q4_pair *pk, bool use_pk, const uint8_t *x, size_t xs,
                                                            int64_t n_tok, float *y, int64_t ldy) {
    int64_t t = 0;
    for (; t + GT <= n_tok; t += GT) tile(R, GT, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: tile(R, 3, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 2: tile(R, 2, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: tile(R, 1, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

static void pack_panel(q4_pair *pk, int64_t nb, const uint8_t *const *wr) {
    for (int64_t i = 0; i < nb / 2; i++)
        for (int r = 0; r < GR; r++) pk[i * GR + r] = load_pair(wr[r] + (size_t)i * 2 * Q4_0_BYTES, true);
    if (nb & 1)
        for (int r = 0; r < GR; r++) pk[nb / 2 * GR + r] = load_pair(wr[r] + (size_t)(nb / 2) * 2 * Q4_0_BYTES, false);
}

static void panel_rows(int64_t nb, const uint8_t *const *wr, const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                       int64_t ldy, q4_pair *pk) {
    pack_panel(pk, nb, wr);
    row_tile(GR, nb, wr, pk, true, x, xs, n_tok, y, ldy);
}

static void gemm_q4_0_tiles(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                            int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK4_0;
    const uint8_t *wr[GR];
    const bool packed = (nb + 1) / 2 <= PMAXP && n_tok >= PMIN_TOK;
    _Alignas(64) q4_pair pk[PMAXP * GR];   /* 192 KB, only touched when packed */
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR) {
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
        if (packed) panel_rows(nb, wr, X, xs, n_tok, y + r, ldy, pk);
        else row_tile(GR, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy);
    }
    for (int i = 0; r + i < n_rows; i++) wr[i] = W + (size_t)(r + i) * ws;
    switch (n_rows - r) {
    case 3: row_tile(3, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    case 2: row_tile(2, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    case 1: row_tile(1, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    default: break;
    }
}

/* ---- groups of 16 rows: one row per lane ---------------------------------------------------
 *
 * From GMIN_TOK tokens on (ggml's order of the activation tails: not in the block-order
 * twin, whose tails lack the biased bytes), whole groups of 16 rows go a lane per row, as the
 * Q8_0 gemm's groups do (q8grp_avx512.h): the dot's 16-lane accumulator is two chains of 8
 * chunk lanes, lanes 0-7 stepped by the even blocks, 8-15 by the odd ones, so a group's
 * panel holds the even blocks, then the odd ones (each as a Q8_0 block of signed bytes q − 8:
 * chunk j is elements 4j..4j+3 in the dot's [low nibbles, high nibbles] order, which are the
 * activation's bytes 4j..4j+3). Every chunk of the even chains is followed by the same
 * chunk of the odd ones (q8g_pair: their tails still in L2); the even chains are parked at
 * their end, and the odd ones' last step adds them (hsum512: the low half plus the high
 * half) before x86_hsum_ps's tree; an odd last block's 8 scaled lanes are summed by the same
 * tree and added after. Per chunk one dpbusd and one FMA, the scale product once per block
 * for 16 rows (the 4-row tiles above: a cvt, a multiply and an FMA per dpbusd). Rows longer
 * than a panel (Q8G_PMAXB / 2 block pairs: 8192 elements) go in pieces, the chains parked
 * between them.
 * Measured against the tiles (2 threads; busy neighbours, so ranges): /tmp/s16/mmn.c outside
 * the repo (packed rows through tensor_matmul, best of 3), 512 x 4096 with 512 tokens 5.7-6.0
 * -> 3.5-3.6 ms, 256 x 14336 11.3-12.1 -> 8.2-8.7, 512 x 4096 with 16 tokens 0.21 ->
 * 0.13-0.17; recur-bench pp512 -r 1, two alternating rounds: a Q4_0 llama3-8b (recur-gguf
 * synth, zero weights) 26.5-26.8 -> 34.3-39.4 t/s (ik_llama.cpp 34.8 in the same minutes),
 * qwen3-0.6b Q4_0 359-394 -> 466-542 (ik 374-486). */
#define GMIN_TOK 8     /* as the Q8_0 groups (gemm_avx512.c PMIN_TOK) */
#define GPAIRS (Q8G_PMAXB / 2)   /* block pairs per panel */

/* Panel entry q from 16 rows' quant dwords v[u] (lane r: row r's bytes 4u..4u+3 of the
 * block) and their fp16 scales h. */
static inline __attribute__((always_inline)) void q40_entry(q8_grp *q, const __m512i v[4], __m256i h) {
    const __m512i m = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    _Pragma("GCC unroll 4")
    for (int u = 0; u < 4; u++) {
        q->w[u] = _mm512_sub_epi8(_mm512_and_si512(v[u], m), eight);
        q->w[u + 4] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v[u], 4), m), eight);
    }
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) q->nc[j] = x86_q8g_start(q->w[j]);
    q->dw = _mm512_cvtph_ps(h);
}

/* Block b of the file's rows at W (16 rows ws bytes apart: offsets fit int32, as the
 * rows of one call's 16-row share do). */
static inline void q40_entry_file(q8_grp *q, const uint8_t *W, size_t ws, int64_t b) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32((int)ws));
    const uint8_t *a = W + (size_t)b * Q4_0_BYTES;
    __m512i v[4];
    _Pragma("GCC unroll 4")
    for (int u = 0; u < 4; u++) v[u] = _mm512_i32gather_epi32(idx, (const void *)(a + Q4_0_QS + 4 * u), 1);
    q40_entry(q, v, _mm512_cvtepi32_epi16(_mm512_i32gather_epi32(idx, (const void *)a, 1)));
}

/* Block b of a group packed at load (tensor.h TENSOR_Q40R16_BLOCK): plain loads. */
static inline void q40_entry_r16(q8_grp *q, const uint8_t *G, int64_t b) {
    const uint8_t *h = G + (size_t)b * TENSOR_Q40R16_BLOCK;
    __m512i v[4];
    _Pragma("GCC unroll 4")
    for (int u = 0; u < 4; u++) v[u] = _mm512_loadu_si512((const void *)(h + Q40R16_QS + 64 * u));
    q40_entry(q, v, _mm256_loadu_si256((const __m256i *)(h + Q40R16_D)));
}

/* Group g's block b into q: g the group's first row (file) or its packed start (r16). */
static inline void q40_entry_of(q8_grp *q, bool r16, const uint8_t *g, size_t ws, int64_t b) {
    if (r16) q40_entry_r16(q, g, b);
    else q40_entry_file(q, g, ws, b);
}

/* The odd last block (entry q, u: the first token's tail at it) of every token: its 8 scaled
 * chunk lanes in x86_hsum_ps's tree, added to y (or to 0.0f where `alone`: no pairs). */
static void q40_last_block(const q8_grp *q, const uint8_t *u, size_t xs, int64_t n_tok, float *y, int64_t ldy,
                           bool alone) {
    for (int64_t t = 0; t < n_tok; t++, u += xs) {
        const __m512 d = _mm512_mul_ps(q->dw, _mm512_set1_ps(rd_f32(u)));
        __m512 v[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            int32_t xv;
            memcpy(&xv, u + Q8_0_TAIL_QS + 4 * j, 4);
            const __m512i s = _mm512_dpbusd_epi32(q->nc[j], _mm512_set1_epi32(xv), q->w[j]);
            v[j] = _mm512_mul_ps(d, _mm512_sub_ps(_mm512_castsi512_ps(s), _mm512_set1_ps(Q8_MAGIC)));
        }
        float *yt = y + t * ldy;
        const __m512 base = alone ? _mm512_setzero_ps() : _mm512_loadu_ps(yt);
        _mm512_storeu_ps(yt, _mm512_add_ps(base, x86_q8g_tree(v)));
    }
}

/* Whole groups of 16 rows (from row 0; r16: packed at load) over every token. Rows past one
 * panel park every token's chains between the pieces; returns the rows done: none without
 * memory for those parks (n_tok · 1 KB). */
static int64_t q40_groups(bool r16, int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *X,
                          size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    const int64_t np = nb / 2;
    const bool pieces = np > GPAIRS;
    _Alignas(64) q8g_park stack[2][Q8G_TB];
    q8g_park *even = pieces ? aligned_alloc(64, (size_t)n_tok * 2 * sizeof *even) : stack[0];
    if (!even) return 0;
    const q8g_pair odd = { Q8_0_TAIL_BYTES, pieces ? even + n_tok : stack[1] };
    const uint8_t *u = X + q8_0_tail(nb * QK4_0);
    _Alignas(64) q8_grp pk[2 * GPAIRS];   /* 272 KB, only touched here */
    int64_t r = 0;
    for (; r + Q8G_ROWS <= n_rows; r += Q8G_ROWS) {
        const uint8_t *g = W + (size_t)r * ws;
        for (int64_t q0 = 0; q0 < np; q0 += GPAIRS) {
            const int64_t qb = q0 + GPAIRS < np ? GPAIRS : np - q0;
            for (int64_t i = 0; i < qb; i++) {
                q40_entry_of(&pk[i], r16, g, ws, 2 * (q0 + i));
                q40_entry_of(&pk[qb + i], r16, g, ws, 2 * (q0 + i) + 1);
            }
            x86_q8g_rows(qb, q0 == 0, q0 + qb == np, pk, u + (size_t)(2 * q0) * Q8_0_TAIL_BYTES, 2 * Q8_0_TAIL_BYTES,
                         xs, n_tok, y + r, ldy, even, pieces, &odd);
        }
        if (nb & 1) {
            q40_entry_of(&pk[0], r16, g, ws, nb - 1);
            q40_last_block(&pk[0], u + (size_t)(nb - 1) * Q8_0_TAIL_BYTES, xs, n_tok, y + r, ldy, np == 0);
        }
    }
    if (pieces) free(even);
    return r;
}

static void gemm_q4_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w;
    const int64_t r = n_tok >= GMIN_TOK ? q40_groups(false, n / QK4_0, W, ws, n_rows, x, xs, n_tok, y, ldy) : 0;
    if (r < n_rows) gemm_q4_0_tiles(n, W + (size_t)r * ws, ws, n_rows - r, x, xs, n_tok, y + r, ldy);
}

/* Rows packed 16 to a group at load (tensor.h gemm_q4_0_r16): the panels from the packed
 * bytes; without memory for the parks, unpacked a group at a time for the tiles. */
static void gemm_q4_0_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    if (q40_groups(true, n / QK4_0, W, ws, n_rows, X, xs, n_tok, y, ldy) == n_rows) return;
    x86_gemm_r16_unpacked(tensor_q4_0_r16_unpack, gemm_q4_0_tiles, rt_dot_q4_0_r16, n, W, ws, n_rows, X, xs, n_tok, y,
                          ldy);
}

/* The block-order twin's tails (tensor_impl.h) lack the biased bytes the groups read: it
 * keeps the tiles (rt_fill_q8blk_avx512 calls this again once q8_block is set). */
void rt_fill_gemm_q40_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q4_0] = k->q8_block ? gemm_q4_0_tiles : gemm_q4_0;
    k->gemm_q4_0_r16 = k->q8_block ? NULL : gemm_q4_0_r16;
}
