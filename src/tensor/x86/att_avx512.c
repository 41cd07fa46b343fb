/* att_avx512.c — the attention tiles (tensor.h att_scores4, att_wsum4) on AVX-512.
 *
 * Scores: 4 positions (8 for a decode step's one or two rows) x the group's rows per tile,
 * one 16-lane accumulator per (row, position) over the head dimension (dot_f16_f32's chain:
 * lane d % 16, masked tail), so each K row is
 * loaded and converted once for every row; then one transpose-and-add network performs
 * rt_hsum16_ggml's additions (halves, quarters, pairs, last pair) for all 16 accumulators at
 * once instead of one reduction each. Positions every row sees are read as two streams: a
 * tile takes half its positions from the first half of them and half from the second, as in
 * decode at depth K comes from memory and one thread reads two straight streams far faster
 * than one (ab outside the repo: one thread, 2 rows, 14 layers x 8 KV heads x 8192
 * positions, medians of 6 alternating runs: 9.6 -> 12.3 GB/s; 4 or 8 streams no faster,
 * tiles alternating between the halves slower).
 * Weighted sums: lane l = p % 16 of the reference is done on its own: positions l, l + 16, ...
 * feed a tile of the group's rows x 64 outputs held in registers (128 for one or two rows of
 * heads over 64: a lane then reads whole 256-byte V rows in one sweep instead of two); the
 * rows share each V load, no per-position load and store of lane rows; the 16 lane results
 * go to a small stack buffer and are added element-wise in rt_hsum16_ggml's order. The lanes
 * pass block by block (WS_BLK positions), the next block prefetched toward L2 as they go: a
 * lane sweeping the whole context reads 256 bytes every 4 KB, which from memory one thread
 * does at ~7 GB/s whatever the prefetch distance (ab as above: 6.9 -> 11.7 GB/s; a plain
 * strided read of that pattern outside the repo: 7-8 GB/s against 12-15 straight). Both
 * together: recur-bench -p 0 -n 32 -d 8192, qwen3-0.6b Q8_0, 2 threads, 10.3 -> 15.8 t/s.
 * Decode (cold: the rows come from memory) on the Zen 5 machine class: the score streams
 * fetch their K rows ATT_K_PF positions ahead and the weighted sums fetch the next block to
 * L1 (T0) instead of L2; a pass whose vectors are all full loads without masks (the masked
 * loads cost a mask register each and keep the conversion from taking its operand from
 * memory). A program outside the repo (2 threads, 14 layers x 8 KV heads x 4096 positions,
 * 117 MB of K and of V, alternating passes, medians), old time over new: two rows a group
 * scores 1.24x, weighted sums 1.64x; four rows 1.02x and 1.35x (four rows a position are
 * more work, so memory is less the bound). In a batch (warm: the rows are in L2, shared by
 * the groups) the fetches ahead cost instructions and win nothing (scores 0.75-0.90x), so
 * they are the decode step's only; the unmasked loads there: 0.96-1.09x. recur-bench
 * per-token A/B in one process, decode's fetching on against off (unmasked loads in both):
 * qwen3-0.6b Q4_K_M at depth 4096 0.858 the time a token, 512 0.938, 0 0.998; qwen35-0.8b
 * Q4_K_M (6 attention layers of 24) 0.972 at 4096, ~1.0 at 512. tg32 at depth 4096,
 * qwen3-0.6b Q4_K_M, 2 threads, against the build before (alternating runs): 35.0, 37.2,
 * 42.4 -> 44.8, 52.6, 53.6 t/s.
 * Each output sees exactly the reference's operations in its order (att_ref.c); positions a
 * row does not see, or that have no cell, get no operation at all. */
#include <math.h>
#include <string.h>

#include "tensor/x86/reduce_avx512.h"
#include "tensor/x86/simd_x86.h"

#define WS_C 8                /* most vectors of outputs per weighted-sum pass */
#define WS_D (16 * WS_C)
#define ATT_K_PF 16           /* positions a score stream's K rows are fetched ahead */
#define WS_BLK 128            /* positions per block of a weighted-sum pass (a multiple of 16);
                               * ab: 128 and 256 alike, 512 9.2-9.5 GB/s, 64 8.6-8.8 */

static inline __mmask16 mask_upto(int64_t rem) {
    return rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1u);
}
static inline __m512 ld_h(const uint16_t *p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

/* rt_hsum16_ggml of one accumulator: lane l + lane l+8, then x86_hsum_ps (the same tree). */
static inline float hsum16(__m512 a) {
    return x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)));
}

/* dot_f16_f32 (float_avx512.c): one chain, masked tail, hsum16. */
static float dot1(int64_t n, const uint16_t *a, const float *b) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(ld_h(a + i, 0xFFFF), _mm512_loadu_ps(b + i), acc);
    if (i < n) {
        const __mmask16 m = mask_upto(n - i);
        acc = _mm512_mask3_fmadd_ps(ld_h(a + i, m), _mm512_maskz_loadu_ps(m, b + i), acc, m);
    }
    return hsum16(acc);
}

/* One head-dim step of scores_tile (m: every lane, or the tail's). */
static inline __attribute__((always_inline)) void scores_step(int R, int NP, const uint16_t *const kr[8],
                                                               const float *const *q, int64_t d, __mmask16 m,
                                                               __m512 a[16]) {
    __m512 kv[8];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NP; j++) kv[j] = ld_h(kr[j] + d, m);
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++) {
        const __m512 qv = _mm512_maskz_loadu_ps(m, q[i] + d);
        _Pragma("GCC unroll 16")
        for (int j = 0; j < NP; j++) {
            const int slot = 4 * (j % 4) + i + 2 * (j / 4);
            a[slot] = _mm512_mask3_fmadd_ps(kv[j], qv, a[slot], m);
        }
    }
}

/* Scores of rows 0..R-1 at NP positions (NP 4, or 8 when R <= 2: a decode step, one token's
 * heads): p.. and p2.., NP/2 each, all of which every row sees and have a row. Tile position
 * j accumulates row i in slot 4(j % 4) + i + 2(j / 4) (4j + i when NP is 4), so x86_reduce16
 * fills all 16 outputs: r[4(i + 2h) + j % 4] is row i's score at tile position 4h + j % 4
 * (r[4i + j] at j when NP is 4); each K row is loaded and converted once per head-dim step
 * for every row. */
static inline __attribute__((always_inline)) void scores_tile(int R, int NP, int64_t dk, const uint16_t *const *k,
                                                               const float *const *q, float scale,
                                                               float *const *s, int32_t p, int32_t p2) {
    __m512 a[16];
    _Pragma("GCC unroll 16")
    for (int m = 0; m < 16; m++) a[m] = _mm512_setzero_ps();
    const uint16_t *kr[8];
    _Pragma("GCC unroll 16")
    for (int j = 0; j < NP; j++) kr[j] = k[j < NP / 2 ? p + j : p2 + j - NP / 2];
    int64_t d = 0;
    for (; d + 16 <= dk; d += 16) scores_step(R, NP, kr, q, d, 0xFFFF, a);
    if (d < dk) scores_step(R, NP, kr, q, d, mask_upto(dk - d), a);   /* masked tail */
    float r[16];
    _mm512_storeu_ps(r, _mm512_mul_ps(x86_reduce16(a), _mm512_set1_ps(scale)));
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++) {
        memcpy(s[i] + p, r + 4 * i, NP / 2 * sizeof(float));   /* tile positions 0..NP/2-1 */
        memcpy(s[i] + p2, r + 4 * i + (NP == 8 ? 8 : 2), NP / 2 * sizeof(float));
    }
}

/* Row i's score at position p, one at a time (no cell: -inf). */
static inline void score1(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4],
                          const int32_t n_ctx[4], float scale, float *const s[4], int32_t p) {
    for (int i = 0; i < nr; i++)
        if (p < n_ctx[i]) s[i][p] = k[p] ? dot1(dk, k[p], q[i]) * scale : -INFINITY;
}

/* A K row's lines toward L1. */
static inline void prefetch_row(const uint16_t *r, int64_t dk) {
    for (int64_t o = 0; o < 2 * dk; o += 64) _mm_prefetch((const char *)r + o, _MM_HINT_T0);
}

static inline bool all_rows(const uint16_t *const *k, int32_t p, int n) {
    for (int j = 0; j < n; j++)
        if (!k[p + j]) return false;
    return true;
}

static void att_scores4(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4],
                        const int32_t n_ctx[4], float scale, float *const s[4], bool cold) {
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < nr; i++) {
        if (n_ctx[i] < n_min) n_min = n_ctx[i];
        if (n_ctx[i] > n_max) n_max = n_ctx[i];
    }
    /* positions [0, 2h) every row sees, as two streams [0, h) and [h, 2h) */
    const int NP = nr <= 2 ? 8 : 4, half = NP / 2;
    const int32_t h = n_min / NP * half;
    for (int32_t p = 0; p < h; p += half) {
        const int32_t p2 = h + p;
        if (!all_rows(k, p, half) || !all_rows(k, p2, half)) {
            for (int j = 0; j < half; j++) {
                score1(nr, dk, k, q, n_ctx, scale, s, p + j);
                score1(nr, dk, k, q, n_ctx, scale, s, p2 + j);
            }
            continue;
        }
        for (int j = 0; cold && j < half; j++) {   /* both streams' rows ATT_K_PF positions ahead */
            const int32_t a = p + ATT_K_PF + j, b = p2 + ATT_K_PF + j;
            if (a < n_max && k[a]) prefetch_row(k[a], dk);
            if (b < n_max && k[b]) prefetch_row(k[b], dk);
        }
        switch (nr) {
        case 1: scores_tile(1, 8, dk, k, q, scale, s, p, p2); break;
        case 2: scores_tile(2, 8, dk, k, q, scale, s, p, p2); break;
        case 3: scores_tile(3, 4, dk, k, q, scale, s, p, p2); break;
        default: scores_tile(4, 4, dk, k, q, scale, s, p, p2); break;
        }
    }
    /* the rest: tiles of 4 where every row sees them and has a row, else one by one */
    int32_t p = 2 * h;
    while (p < n_max) {
        if (p + 4 <= n_min && all_rows(k, p, 4)) {
            switch (nr) {
            case 1: scores_tile(1, 4, dk, k, q, scale, s, p, p + 2); break;
            case 2: scores_tile(2, 4, dk, k, q, scale, s, p, p + 2); break;
            case 3: scores_tile(3, 4, dk, k, q, scale, s, p, p + 2); break;
            default: scores_tile(4, 4, dk, k, q, scale, s, p, p + 2); break;
            }
            p += 4;
            continue;
        }
        score1(nr, dk, k, q, n_ctx, scale, s, p);
        p++;
    }
}

/* Positions p, p + 16, ... below `end` into the accumulators of rows 0..R-1, outputs
 * d0..d0+16C-1; `check`: only the rows whose context reaches p (else every row sees them). */
static inline __attribute__((always_inline)) void wsum_span(int R, int C, bool full, bool check, int32_t p,
                                                             int32_t end, int64_t d0, const __mmask16 m[WS_C],
                                                             const uint16_t *const *v, const float *const *pr,
                                                             const int32_t *n_ctx, __m512 acc[4][WS_C]) {
    for (; p < end; p += 16) {
        const uint16_t *vp = v[p];
        if (!vp) continue;
        __m512 x[WS_C];
        _Pragma("GCC unroll 16")
        for (int c = 0; c < C; c++)
            x[c] = full ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vp + d0 + 16 * c)))
                        : ld_h(vp + d0 + 16 * c, m[c]);
        _Pragma("GCC unroll 16")
        for (int i = 0; i < R; i++) {
            if (check && p >= n_ctx[i]) continue;
            const __m512 b = _mm512_set1_ps(pr[i][p]);
            _Pragma("GCC unroll 16")
            for (int c = 0; c < C; c++) acc[i][c] = _mm512_fmadd_ps(b, x[c], acc[i][c]);
        }
    }
}

/* One weighted-sum pass: outputs d0..d0+16C-1 (valid lanes in m) of rows 0..R-1. Blocks of
 * WS_BLK positions, in each lane by lane (a lane's accumulators parked in `lanes` between
 * blocks), so each lane still takes its positions in increasing order; as the lanes pass, the
 * next block's rows go toward L2 (L1 when cold), 1/16 of them per lane. */
static inline __attribute__((always_inline)) void wsum_pass(int R, int C, bool full, bool cold, int64_t d0,
                                                             const __mmask16 m[WS_C], const uint16_t *const *v,
                                                             const float *const *pr, const int32_t *n_ctx,
                                                             int32_t n_min, int32_t n_max, float *const *out) {
    _Alignas(64) float lanes[4][16][WS_D];
    for (int32_t b0 = 0; b0 == 0 || b0 < n_max; b0 += WS_BLK) {   /* block 0 even when empty: it zeroes the lanes */
        const int32_t b1 = b0 + WS_BLK < n_max ? b0 + WS_BLK : n_max;
        const int32_t e_all = b1 < n_min ? b1 : n_min;   /* [b0, e_all): every row sees them */
        for (int l = 0; l < 16; l++) {
            const int32_t f0 = b1 + l * (WS_BLK / 16), f1 = f0 + WS_BLK / 16 < n_max ? f0 + WS_BLK / 16 : n_max;
            for (int32_t p = f0; p < f1; p++)   /* every 64-byte line of the pass's part of the row */
                if (v[p])
                    _Pragma("GCC unroll 16")
                    for (int c = 0; c < C; c += 2) {
                        if (cold) _mm_prefetch((const char *)(v[p] + d0 + 16 * c), _MM_HINT_T0);
                        else _mm_prefetch((const char *)(v[p] + d0 + 16 * c), _MM_HINT_T1);
                    }
            __m512 acc[4][WS_C];
            _Pragma("GCC unroll 16")
            for (int i = 0; i < R; i++)
                _Pragma("GCC unroll 16")
                for (int c = 0; c < C; c++) acc[i][c] = b0 ? _mm512_load_ps(lanes[i][l] + 16 * c) : _mm512_setzero_ps();
            /* the lane's positions: those every row sees, then those only some rows see */
            const int32_t p_all = b0 + l;
            const int32_t p_mid = e_all <= p_all ? p_all : p_all + (e_all - p_all + 15) / 16 * 16;
            wsum_span(R, C, full, false, p_all, e_all, d0, m, v, pr, n_ctx, acc);
            wsum_span(R, C, full, true, p_mid, b1, d0, m, v, pr, n_ctx, acc);
            _Pragma("GCC unroll 16")
            for (int i = 0; i < R; i++)
                _Pragma("GCC unroll 16")
                for (int c = 0; c < C; c++) _mm512_store_ps(lanes[i][l] + 16 * c, acc[i][c]);
        }
    }
    _Pragma("GCC unroll 16")
    for (int i = 0; i < R; i++)
        _Pragma("GCC unroll 16")
        for (int c = 0; c < C; c++) {
            if (!m[c]) continue;
            __m512 h[8], q[4];
            _Pragma("GCC unroll 16")
            for (int e = 0; e < 8; e++)
                h[e] = _mm512_add_ps(_mm512_load_ps(lanes[i][e] + 16 * c), _mm512_load_ps(lanes[i][e + 8] + 16 * c));
            _Pragma("GCC unroll 16")
            for (int e = 0; e < 4; e++) q[e] = _mm512_add_ps(h[e], h[e + 4]);
            _mm512_mask_storeu_ps(out[i] + d0 + 16 * c, m[c],
                                  _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3])));
        }
}

/* wsum_pass with the tile for nr rows (wide: 128 outputs, for one or two rows). */
static inline __attribute__((always_inline)) void wsum_rows(int nr, bool wide, bool full, bool cold, int64_t d0,
                                                             const __mmask16 m[WS_C], const uint16_t *const *v,
                                                             const float *const pr[4], const int32_t n_ctx[4],
                                                             int32_t n_min, int32_t n_max, float *const out[4]) {
    switch (nr * 2 + wide) {
    case 2: wsum_pass(1, WS_C / 2, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    case 3: wsum_pass(1, WS_C, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    case 4: wsum_pass(2, WS_C / 2, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    case 5: wsum_pass(2, WS_C, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    case 6: wsum_pass(3, WS_C / 2, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    default: wsum_pass(4, WS_C / 2, full, cold, d0, m, v, pr, n_ctx, n_min, n_max, out); break;
    }
}

static void att_wsum4(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4],
                      const int32_t n_ctx[4], float *const out[4], bool cold) {
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < nr; i++) {
        if (n_ctx[i] < n_min) n_min = n_ctx[i];
        if (n_ctx[i] > n_max) n_max = n_ctx[i];
    }
    const bool wide = nr <= 2 && dv > WS_D / 2;   /* 16 accumulators at most */
    for (int64_t d0 = 0; d0 < dv; d0 += wide ? WS_D : WS_D / 2) {
        __mmask16 m[WS_C];
        for (int c = 0; c < WS_C; c++) m[c] = mask_upto(dv - d0 - 16 * c);
        /* every lane of the pass's vectors valid: plain loads (the masked ones cost a mask
         * register each and the conversion could not take its operand from memory) */
        const bool full = dv - d0 >= (wide ? WS_D : WS_D / 2);
        if (full) wsum_rows(nr, wide, true, cold, d0, m, v, pr, n_ctx, n_min, n_max, out);
        else wsum_rows(nr, wide, false, cold, d0, m, v, pr, n_ctx, n_min, n_max, out);
    }
}

void rt_fill_att_avx512(tensor_kernels *k) {
    k->att_scores4 = att_scores4;
    k->att_wsum4 = att_wsum4;
    rt_fill_att_vt_avx512(k);
}
