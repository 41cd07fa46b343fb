/* q8grp_avx512.h — the group tiles of the AVX-512 prompt gemms whose dot keeps 8 chunk lanes
 * a block, each stepped by one FMA of its exact 4-byte sum (ggml's Q8_0 order, gemm_avx512.c;
 * the AVX-512 table's Q4_0 order, gemm_q40_avx512.c): 16 weight rows go a lane per row,
 * accumulator j of a token holding chunk lane j of all 16 rows. The files differ in how a
 * group panel is packed and in which blocks a chain takes; the tiles, the parking and the
 * final tree are here.
 *
 * A panel entry is one block of the 16 rows: chunk j (lane r: row r's 4 signed weight bytes),
 * its dpbusd start Q8_MAGIC_BITS − 128 · Σ4 of it, and the rows' scales as floats. A token's
 * chunk is broadcast from its activation row's tail (tensor_impl.h, ggml's order: the bytes
 * + 128, unsigned), so dpbusd(start, x + 128, w) holds the bits of the float Q8_MAGIC +
 * Σ4 x·w exactly, and one subtraction gives the chunk sum as a float. */
#ifndef RECUR_TENSOR_Q8GRP_AVX512_H
#define RECUR_TENSOR_Q8GRP_AVX512_H

#include "tensor/x86/simd_x86.h"

#define Q8G_ROWS 16    /* rows per group: one per lane */
#define Q8G_T 3        /* tokens per tile: 24 accumulators */
#define Q8G_KC 32      /* panel entries per pass of a token block (35 KB, from L1) */
#define Q8G_TB 48      /* tokens per block (a multiple of Q8G_T): 24 KB of parked accumulators */
#define Q8G_PMAXB 256  /* panel entries of a panel buffer (272 KB, in L2) */

typedef struct q8_grp {
    __m512i w[8], nc[8];
    __m512  dw;
} q8_grp;

typedef __m512 q8g_park[8];   /* one token's 8 accumulators between runs */

/* The dpbusd start of chunk vector w (signed bytes): Q8_MAGIC_BITS − 128 · Σ4 w. */
static inline __m512i x86_q8g_start(__m512i w) {
    return _mm512_sub_epi32(_mm512_set1_epi32(Q8_MAGIC_BITS),
                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), w));
}

/* x86_hsum_ps's tree over the 8 chunk lanes, lane by lane (16 rows side by side). */
static inline __m512 x86_q8g_tree(const __m512 a[8]) {
    const __m512 a04 = _mm512_add_ps(a[0], a[4]), a26 = _mm512_add_ps(a[2], a[6]);
    const __m512 a15 = _mm512_add_ps(a[1], a[5]), a37 = _mm512_add_ps(a[3], a[7]);
    return _mm512_add_ps(_mm512_add_ps(a04, a26), _mm512_add_ps(a15, a37));
}

/* kb panel entries (pk: the first) for T tokens xs apart, u: the first token's tail at the
 * entry's block, ustep bytes between the tails of consecutive entries' blocks. The
 * accumulators start at zero where `first` (the chain's first block), else from park, and go
 * back to park unless `last` (its last block): then, with `add` (another run's chains of the
 * same tokens), lane by lane add[t][j] + acc first, and the tree into y[t · ldy + r]. Parking
 * keeps each chain in the same order: the bits do not depend on the runs' sizes. */
static inline __attribute__((always_inline)) void x86_q8g_tile(int T, int64_t kb, bool first, bool last,
                                                               const q8_grp *pk, const uint8_t *u, size_t ustep,
                                                               size_t xs, q8g_park *park, const q8g_park *add, float *y,
                                                               int64_t ldy) {
    __m512 acc[Q8G_T][8];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++)
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) acc[t][j] = first ? _mm512_setzero_ps() : park[t][j];
    for (int64_t b = 0; b < kb; b++) {
        const q8_grp *q = pk + b;
        const uint8_t *ub = u + (size_t)b * ustep;
        __m512 d[Q8G_T];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) d[t] = _mm512_mul_ps(q->dw, _mm512_set1_ps(rd_f32(ub + t * xs)));
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            __m512i w = q->w[j], nc = q->nc[j];
            __asm__("" : "+v"(w), "+v"(nc));   /* keep them in registers for the T tokens */
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                int32_t xv;   /* already biased: an xor here, in the chain, costs ~10 % */
                memcpy(&xv, ub + t * xs + Q8_0_TAIL_QS + 4 * j, 4);
                const __m512i s = _mm512_dpbusd_epi32(nc, _mm512_set1_epi32(xv), w);
                const __m512 pf = _mm512_sub_ps(_mm512_castsi512_ps(s), _mm512_set1_ps(Q8_MAGIC));
                acc[t][j] = _mm512_fmadd_ps(d[t], pf, acc[t][j]);
            }
        }
    }
    if (!last) {
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) park[t][j] = acc[t][j];
        return;
    }
    if (add)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            _Pragma("GCC unroll 8")
            for (int j = 0; j < 8; j++) acc[t][j] = _mm512_add_ps(add[t][j], acc[t][j]);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy, x86_q8g_tree(acc[t]));
}

/* Tokens [t0, t1) of x86_q8g_rows through kb entries, Q8G_T at a time, then the rest; pt and
 * at: token t0's places. */
static __attribute__((noinline, unused)) void x86_q8g_span(int64_t kb, bool f, bool l, const q8_grp *pk,
                                                               const uint8_t *u, size_t ustep, size_t xs, int64_t t0,
                                                               int64_t t1, float *y, int64_t ldy, q8g_park *pt,
                                                               const q8g_park *at) {
    int64_t t = t0;
    for (; t + Q8G_T <= t1; t += Q8G_T)
        x86_q8g_tile(Q8G_T, kb, f, l, pk, u + t * xs, ustep, xs, pt + (t - t0), at ? at + (t - t0) : NULL, y + t * ldy,
                     ldy);
    switch (t1 - t) {
    case 2: x86_q8g_tile(2, kb, f, l, pk, u + t * xs, ustep, xs, pt + (t - t0), at ? at + (t - t0) : NULL, y + t * ldy, ldy); break;
    case 1: x86_q8g_tile(1, kb, f, l, pk, u + t * xs, ustep, xs, pt + (t - t0), at ? at + (t - t0) : NULL, y + t * ldy, ldy); break;
    default: break;
    }
}

/* A run of a group's chains: n panel entries (pk: the first), u the first token's tail at
 * the first entry's block, ustep as x86_q8g_tile; `first`, `last`: the run starts, ends the
 * chains. Every token, Q8G_TB at a time, each token block through the run Q8G_KC entries at
 * a time, its chains parked in park: the token block's own Q8G_TB places, or with park_all
 * token t's place park[t] (kept across the pieces of a row).
 * With `pair` (q8g_pair), a second run goes along: entries pk[n..2n), tails u2 bytes after
 * the first run's, chains in park2 (alike), each Q8G_KC chunk of it right after the first
 * run's (their tails still in L2); the first run's chains are then parked at its end and the
 * second's last step adds them (x86_q8g_tile's `add`). */
typedef struct q8g_pair {
    size_t    u2;
    q8g_park *park2;
} q8g_pair;

static inline void x86_q8g_rows(int64_t n, bool first, bool last, const q8_grp *pk, const uint8_t *u, size_t ustep,
                                size_t xs, int64_t n_tok, float *y, int64_t ldy, q8g_park *park, bool park_all,
                                const q8g_pair *pair) {
    for (int64_t t0 = 0; t0 < n_tok; t0 += Q8G_TB) {
        const int64_t t1 = t0 + Q8G_TB < n_tok ? t0 + Q8G_TB : n_tok;
        q8g_park *pt = park_all ? park + t0 : park;
        for (int64_t k0 = 0; k0 < n; k0 += Q8G_KC) {
            const int64_t kb = k0 + Q8G_KC < n ? Q8G_KC : n - k0;
            const bool f = first && k0 == 0, l = last && k0 + kb == n;
            const uint8_t *uk = u + (size_t)k0 * ustep;
            x86_q8g_span(kb, f, l && !pair, pk + k0, uk, ustep, xs, t0, t1, y, ldy, pt, NULL);
            if (pair)
                x86_q8g_span(kb, f, l, pk + n + k0, uk + pair->u2, ustep, xs, t0, t1, y, ldy,
                             park_all ? pair->park2 + t0 : pair->park2, pt);
        }
    }
}

#endif
