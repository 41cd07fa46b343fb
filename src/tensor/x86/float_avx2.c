/* float_avx2.c — AVX2 dot products of the float types and the attention helpers.
 *
 * Dots: 4 accumulators of 8 lanes over blocks of 32 elements, then one accumulator over
 * blocks of 8, reduced with x86_hsum_ps, then the scalar tail added in element order (F32
 * weights: rt_dot_f32's order instead, below). The order depends only on n (tensor.h
 * invariant 1). Any n >= 0, no alignment. (BF16: bf16_avx2.c.)
 *
 * Attention (att_scores4, att_wsum4, below) reads K and V in the order that suits decode at
 * depth, where they come from memory: scores read the positions every row sees as two
 * straight streams (a tile takes half its positions from the first half of them and half
 * from the second); weighted sums go a span (WS2_SPAN positions) at a time, every pass over
 * it, block by block (WS2_BLK positions), lane by lane within a block, a decode step's next
 * block of V rows prefetched toward L2 as they go. Each output still sees exactly the
 * reference's operations in its order (att_ref.c). att_avx512.c does the same but for the
 * spans (at head dim 128 its passes share no line of V). */
#include <math.h>
#include <string.h>

#include "tensor/x86/simd_x86.h"

static inline __m256 ld_f16x8(const uint8_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline float reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    return x86_hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

static float dot_f32_f32(int64_t n, const float *a, const float *b) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = reduce4(s0, s1, s2, s3);
    /* memcpy loads: vec_dot_f32 passes weight rows that need not be 4-byte aligned */
    for (; i < n; i++) s += rd_f32((const uint8_t *)(a + i)) * rd_f32((const uint8_t *)(b + i));
    return s;
}

/* The F32 weight dot in rt_dot_f32's order, which is the AVX-512 table's (dot_ref.c says
 * why): four 16-lane accumulators over blocks of 64, the first over blocks of 16, the tail
 * zero-padded into the second, (s0 + s1) + (s2 + s3), rt_hsum16_ggml; each 16-lane
 * accumulator as two 8-lane halves. */
static float vec_dot_f32(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    __m256 s[4][2];
    for (int j = 0; j < 4; j++) s[j][0] = s[j][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++)
            for (int h = 0; h < 2; h++)
                s[j][h] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16 * j + 8 * h), _mm256_loadu_ps(b + i + 16 * j + 8 * h),
                                          s[j][h]);
    for (; i + 16 <= n; i += 16)
        for (int h = 0; h < 2; h++)
            s[0][h] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * h), _mm256_loadu_ps(b + i + 8 * h), s[0][h]);
    if (i < n) {   /* the masked load: zeros past the row */
        float ta[16] = { 0 }, tb[16] = { 0 };
        memcpy(ta, a + i, (size_t)(n - i) * sizeof(float));
        memcpy(tb, b + i, (size_t)(n - i) * sizeof(float));
        for (int h = 0; h < 2; h++) s[1][h] = _mm256_fmadd_ps(_mm256_loadu_ps(ta + 8 * h), _mm256_loadu_ps(tb + 8 * h), s[1][h]);
    }
    __m256 v[2];
    for (int h = 0; h < 2; h++) v[h] = _mm256_add_ps(_mm256_add_ps(s[0][h], s[1][h]), _mm256_add_ps(s[2][h], s[3][h]));
    return x86_hsum_ps(_mm256_add_ps(v[0], v[1]));
}

static float vec_dot_f16(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(ld_f16x8(a + 2 * i), ld_f16x8(b + 2 * i), s0);
        s1 = _mm256_fmadd_ps(ld_f16x8(a + 2 * i + 16), ld_f16x8(b + 2 * i + 16), s1);
        s2 = _mm256_fmadd_ps(ld_f16x8(a + 2 * i + 32), ld_f16x8(b + 2 * i + 32), s2);
        s3 = _mm256_fmadd_ps(ld_f16x8(a + 2 * i + 48), ld_f16x8(b + 2 * i + 48), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(ld_f16x8(a + 2 * i), ld_f16x8(b + 2 * i), s0);
    float s = reduce4(s0, s1, s2, s3);
    for (; i < n; i++) s += x86_f16(a + 2 * i) * x86_f16(b + 2 * i);
    return s;
}

/* gemv[F16]: group r < q = n_rows / 2 is rows r and r + q (two streams, each straight through
 * half the matrix; four rows' accumulators would not fit the 16 registers), group q the odd
 * row left. Each row takes vec_dot_f16's operations in its order (so its bits), x widened once
 * for both, each stream fetched X86_Q8_PF bytes ahead. */
static void gemv_f16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                     float *y) {
    const uint8_t *W = w, *b = x;
    const int64_t q = n_rows / 2, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *a0 = W + (size_t)r * ws, *a1 = W + (size_t)(r + q) * ws;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, t0 = s0, t1 = s0, t2 = s0, t3 = s0;
        int64_t i = 0;
        for (; i + 32 <= n; i += 32) {
            _mm_prefetch((const char *)(a0 + 2 * i + X86_Q8_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(a1 + 2 * i + X86_Q8_PF), _MM_HINT_T0);
            const __m256 x0 = ld_f16x8(b + 2 * i), x1 = ld_f16x8(b + 2 * i + 16);
            const __m256 x2 = ld_f16x8(b + 2 * i + 32), x3 = ld_f16x8(b + 2 * i + 48);
            s0 = _mm256_fmadd_ps(ld_f16x8(a0 + 2 * i), x0, s0);
            s1 = _mm256_fmadd_ps(ld_f16x8(a0 + 2 * i + 16), x1, s1);
            s2 = _mm256_fmadd_ps(ld_f16x8(a0 + 2 * i + 32), x2, s2);
            s3 = _mm256_fmadd_ps(ld_f16x8(a0 + 2 * i + 48), x3, s3);
            t0 = _mm256_fmadd_ps(ld_f16x8(a1 + 2 * i), x0, t0);
            t1 = _mm256_fmadd_ps(ld_f16x8(a1 + 2 * i + 16), x1, t1);
            t2 = _mm256_fmadd_ps(ld_f16x8(a1 + 2 * i + 32), x2, t2);
            t3 = _mm256_fmadd_ps(ld_f16x8(a1 + 2 * i + 48), x3, t3);
        }
        for (; i + 8 <= n; i += 8) {
            const __m256 xv = ld_f16x8(b + 2 * i);
            s0 = _mm256_fmadd_ps(ld_f16x8(a0 + 2 * i), xv, s0);
            t0 = _mm256_fmadd_ps(ld_f16x8(a1 + 2 * i), xv, t0);
        }
        float u = reduce4(s0, s1, s2, s3), v = reduce4(t0, t1, t2, t3);
        for (; i < n; i++) {
            u += x86_f16(a0 + 2 * i) * x86_f16(b + 2 * i);
            v += x86_f16(a1 + 2 * i) * x86_f16(b + 2 * i);
        }
        y[r] = u, y[r + q] = v;
    }
    if (g1 > q && n_rows % 2) y[n_rows - 1] = vec_dot_f16(n, W + (size_t)(n_rows - 1) * ws, x);
}

/* rt_dot_f16_f32's order: lanes 0-7 and 8-15 of the 16 are lo and hi; x86_hsum_ps of
 * lo + hi is rt_hsum16_ggml. A tail (n % 16) goes lane by lane in scalar FMAs. */
static float dot_f16_f32(int64_t n, const uint16_t *a16, const float *b) {
    const uint8_t *a = (const uint8_t *)a16;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(ld_f16x8(a + 2 * i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(ld_f16x8(a + 2 * i + 16), _mm256_loadu_ps(b + i + 8), hi);
    }
    if (i < n) {
        float l[16];
        _mm256_storeu_ps(l, lo);
        _mm256_storeu_ps(l + 8, hi);
        for (int k = 0; i < n; i++, k++) {
            const __m128 r = _mm_fmadd_ss(_mm_set_ss(rt_f16_to_f32(a16[i])), _mm_set_ss(b[i]), _mm_set_ss(l[k]));
            l[k] = _mm_cvtss_f32(r);
        }
        lo = _mm256_loadu_ps(l);
        hi = _mm256_loadu_ps(l + 8);
    }
    return x86_hsum_ps(_mm256_add_ps(lo, hi));
}

/* dot_f16_f32's tail: lane k of l[16] takes element i + k with a scalar FMA. */
static inline void tail16(int64_t i, int64_t n, const uint16_t *a16, const float *b, float l[16]) {
    for (int k = 0; i < n; i++, k++) {
        const __m128 r = _mm_fmadd_ss(_mm_set_ss(rt_f16_to_f32(a16[i])), _mm_set_ss(b[i]), _mm_set_ss(l[k]));
        l[k] = _mm_cvtss_f32(r);
    }
}

/* dot_f16_f32 four times over one F16 row: each (lo, hi) pair sees exactly the FMAs, tail
 * and reduction of the one-row kernel. */
static void dot4_f16_f32(int64_t n, const uint16_t *a16, const float *const b[4], float out[4]) {
    const uint8_t *a = (const uint8_t *)a16;
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 k0 = ld_f16x8(a + 2 * i), k1 = ld_f16x8(a + 2 * i + 16);
        for (int j = 0; j < 4; j++) {
            lo[j] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(b[j] + i), lo[j]);
            hi[j] = _mm256_fmadd_ps(k1, _mm256_loadu_ps(b[j] + i + 8), hi[j]);
        }
    }
    for (int j = 0; j < 4; j++) {
        if (i < n) {
            float l[16];
            _mm256_storeu_ps(l, lo[j]);
            _mm256_storeu_ps(l + 8, hi[j]);
            tail16(i, n, a16, b[j], l);
            lo[j] = _mm256_loadu_ps(l);
            hi[j] = _mm256_loadu_ps(l + 8);
        }
        out[j] = x86_hsum_ps(_mm256_add_ps(lo[j], hi[j]));
    }
}

/* axpy_f16 into four rows: the same per-element fmaf, x loaded and converted once. */
static void axpy4_f16(int64_t n, const float alpha[4], const uint16_t *x16, float *const y[4]) {
    const uint8_t *x = (const uint8_t *)x16;
    __m256 va[4];
    for (int j = 0; j < 4; j++) va[j] = _mm256_set1_ps(alpha[j]);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = ld_f16x8(x + 2 * i);
        for (int j = 0; j < 4; j++) _mm256_storeu_ps(y[j] + i, _mm256_fmadd_ps(va[j], v, _mm256_loadu_ps(y[j] + i)));
    }
    for (; i < n; i++) {
        const __m128 v = _mm_set_ss(rt_f16_to_f32(x16[i]));
        for (int j = 0; j < 4; j++) y[j][i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(alpha[j]), v, _mm_set_ss(y[j][i])));
    }
}

/* y = fmaf(alpha, x, y) per element: identical to the scalar reference. */
static void axpy_f16(int64_t n, float alpha, const uint16_t *x16, float *y) {
    const uint8_t *x = (const uint8_t *)x16;
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 y0 = _mm256_fmadd_ps(va, ld_f16x8(x + 2 * i), _mm256_loadu_ps(y + i));
        const __m256 y1 = _mm256_fmadd_ps(va, ld_f16x8(x + 2 * i + 16), _mm256_loadu_ps(y + i + 8));
        _mm256_storeu_ps(y + i, y0);
        _mm256_storeu_ps(y + i + 8, y1);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, ld_f16x8(x + 2 * i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) {
        const __m128 r = _mm_fmadd_ss(_mm_set_ss(alpha), _mm_set_ss(rt_f16_to_f32(x16[i])), _mm_set_ss(y[i]));
        y[i] = _mm_cvtss_f32(r);
    }
}

/* The attention tiles: scores by scores2_tile (below) where every row sees a run of positions
 * with K rows and the head dim is a multiple of 16, else dot4_f16_f32 where the four rows see
 * a position, else one dot_f16_f32 per visible row. The positions every row sees are read as
 * two streams, a tile's first half from [0, h) and its second from [h, 2h), because one
 * thread reads two straight streams from memory faster than one (ab2 outside the repo: one
 * thread, AVX2 table, 2 rows, 14 layers x 8 KV heads x 8192 positions, head dim 128, F16,
 * medians of 8 alternating runs: 20.7 -> 17.5 ms, 11.4 -> 13.4 GB/s); a tile with a missing
 * cell goes one position at a time. Head dims that are not a multiple of 8: weighted sums
 * through 16 lane rows per row on the stack (ATT2_D outputs at a time), axpy4_f16 where the
 * four rows see a position, else axpy_f16 per visible row, then the lanes added in
 * rt_hsum16_ggml's order. Both are the reference's operations (att_ref.c), so the bits are
 * its. */
#define ATT2_D 64

/* Scores tile: R rows × NP positions (R·NP <= 8), all of which every row sees and have a K row,
 * head dims a multiple of 16. dot_f16_f32's two chains (lo: elements 16i..16i+7, hi: 16i+8..
 * 16i+15) are independent, so they go in two passes, eight accumulators at a time (row i,
 * position j in slot NP·i + j); each K vector is loaded and converted once for the R rows.
 * Then lo + hi, and one transpose-and-add network performs x86_hsum_ps's additions for all
 * eight at once: h = lanes l + l+4, q = h0 + h2 | h1 + h3, then q0 + q1. */
static inline __attribute__((always_inline)) void scores2_pass(int R, int NP, int64_t dk, const uint16_t *const kr[8],
                                                                const float *const q[4], int64_t h, __m256 a[8]) {
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 8; m++) a[m] = _mm256_setzero_ps();
    for (int64_t d = h; d < dk; d += 16) {
        __m256 kv[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < NP; j++) kv[j] = ld_f16x8((const uint8_t *)(kr[j] + d));
        _Pragma("GCC unroll 8")
        for (int i = 0; i < R; i++) {
            __m256 qv = _mm256_loadu_ps(q[i] + d);
            __asm__("" : "+x"(qv));   /* one load for the NP positions (folded, gcc loaded it NP times) */
            _Pragma("GCC unroll 8")
            for (int j = 0; j < NP; j++) a[NP * i + j] = _mm256_fmadd_ps(kv[j], qv, a[NP * i + j]);
        }
    }
}

static inline __attribute__((always_inline)) void scores2_tile(int R, int NP, int64_t dk, const uint16_t *const *k,
                                                                const float *const q[4], float scale,
                                                                float *const s[4], int32_t p, int32_t p2) {
    const uint16_t *kr[8];
    _Pragma("GCC unroll 8")
    for (int j = 0; j < NP; j++) kr[j] = k[j < NP / 2 ? p + j : p2 + j - NP / 2];
    __m256 lo[8], hi[8], v[8], z[4], u[2];
    scores2_pass(R, NP, dk, kr, q, 0, lo);
    scores2_pass(R, NP, dk, kr, q, 8, hi);
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 8; m++) v[m] = _mm256_add_ps(lo[m], hi[m]);
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 4; m++)   /* 128-bit lane c: v[2m + c]'s h0..h3 */
        z[m] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * m], v[2 * m + 1], 0x31));
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 2; m++)   /* lane c: q0, q1 of v[4m + c], then of v[4m + 2 + c] */
        u[m] = _mm256_add_ps(_mm256_shuffle_ps(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane c: the sums of v[c], v[2 + c], v[4 + c], v[6 + c] */
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
    float o[8];
    _mm256_storeu_ps(o, _mm256_mul_ps(r, _mm256_set1_ps(scale)));
    _Pragma("GCC unroll 8")
    for (int m = 0; m < R * NP; m++)   /* tile position j = m % NP: p + j, or p2 + j - NP/2 */
        s[m / NP][m % NP < NP / 2 ? p + m % NP : p2 + m % NP - NP / 2] = o[(m % 2) * 4 + m / 2];
}

/* Row i's score at position p, one at a time (no cell: -inf); the four rows' dots at once
 * where all four see it. */
static inline void score1(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4],
                          const int32_t n_ctx[4], int32_t n_min, float scale, float *const s[4], int32_t p) {
    if (nr == 4 && p < n_min && k[p]) {
        float d[4];
        dot4_f16_f32(dk, k[p], q, d);
        for (int i = 0; i < 4; i++) s[i][p] = d[i] * scale;
        return;
    }
    for (int i = 0; i < nr; i++)
        if (p < n_ctx[i]) s[i][p] = k[p] ? dot_f16_f32(dk, k[p], q[i]) * scale : -INFINITY;
}

static inline bool all_rows(const uint16_t *const *k, int32_t p, int n) {
    for (int j = 0; j < n; j++)
        if (!k[p + j]) return false;
    return true;
}

static void att_scores4(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4],
                        const int32_t n_ctx[4], float scale, float *const s[4], bool cold) {
    /* No fetching ahead. Measured on an AVX2-only Zen 4: both streams' K rows fetched 16
     * positions ahead when cold (att_avx512.c's way), recur-bench qwen3-0.6b Q8_0, 2 threads,
     * 3 alternating pairs: tg128 attention 0.84-0.91 -> 0.79-0.83 ms a token (0.4 % of the
     * token), tg32 at depth 4096 (attention half the token, its K and V read at ~82 % of the
     * memory's speed) 15.3-16.8 -> 16.5-18.4 ms: not kept. The decode job fetches a KV head's
     * first rows itself (attention.c ATT_PF_POS). */
    (void)cold;
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < nr; i++) n_min = n_ctx[i] < n_min ? n_ctx[i] : n_min, n_max = n_ctx[i] > n_max ? n_ctx[i] : n_max;
    /* positions [0, 2h) every row sees, as two streams [0, h) and [h, 2h) */
    const int np = nr == 1 ? 8 : nr == 2 ? 4 : 2, half = np / 2;   /* positions per tile */
    const int32_t h = dk % 16 ? 0 : n_min / np * half;
    for (int32_t p = 0; p < h; p += half) {
        const int32_t p2 = h + p;
        if (!all_rows(k, p, half) || !all_rows(k, p2, half)) {
            for (int j = 0; j < half; j++) {
                score1(nr, dk, k, q, n_ctx, n_min, scale, s, p + j);
                score1(nr, dk, k, q, n_ctx, n_min, scale, s, p2 + j);
            }
            continue;
        }
        switch (nr) {
        case 1: scores2_tile(1, 8, dk, k, q, scale, s, p, p2); break;
        case 2: scores2_tile(2, 4, dk, k, q, scale, s, p, p2); break;
        case 3: scores2_tile(3, 2, dk, k, q, scale, s, p, p2); break;
        default: scores2_tile(4, 2, dk, k, q, scale, s, p, p2); break;
        }
    }
    /* the rest (fewer than np of them every row sees): a tile of half as many positions for
     * one or two rows where every row sees them and has a row, else one by one */
    int32_t p = 2 * h;
    while (p < n_max) {
        if (nr <= 2 && dk % 16 == 0 && p + half <= n_min && all_rows(k, p, half)) {
            if (nr == 1) scores2_tile(1, 4, dk, k, q, scale, s, p, p + 2);
            else scores2_tile(2, 2, dk, k, q, scale, s, p, p + 1);
            p += half;
            continue;
        }
        score1(nr, dk, k, q, n_ctx, n_min, scale, s, p);
        p++;
    }
}

static void att_wsum4_lanes(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4],
                      const int32_t n_ctx[4], float *const out[4]) {
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < nr; i++) n_min = n_ctx[i] < n_min ? n_ctx[i] : n_min, n_max = n_ctx[i] > n_max ? n_ctx[i] : n_max;
    float lane[4][16][ATT2_D];
    for (int64_t d0 = 0; d0 < dv; d0 += ATT2_D) {
        const int64_t nd = dv - d0 < ATT2_D ? dv - d0 : ATT2_D;
        memset(lane, 0, sizeof lane);
        for (int32_t p = 0; p < n_max; p++) {
            if (!v[p]) continue;
            if (nr == 4 && p < n_min) {
                const float al[4] = { pr[0][p], pr[1][p], pr[2][p], pr[3][p] };
                float *const y[4] = { lane[0][p % 16], lane[1][p % 16], lane[2][p % 16], lane[3][p % 16] };
                axpy4_f16(nd, al, v[p] + d0, y);
                continue;
            }
            for (int i = 0; i < nr; i++)
                if (p < n_ctx[i]) axpy_f16(nd, pr[i][p], v[p] + d0, lane[i][p % 16]);
        }
        for (int i = 0; i < nr; i++)
            for (int64_t d = 0; d < nd; d++) {
                float l[16];
                for (int e = 0; e < 16; e++) l[e] = lane[i][e][d];
                out[i][d0 + d] = rt_hsum16_ggml(l);
            }
    }
}

/* The weighted sums with the lane accumulators in registers (head dims a multiple of 8): lane
 * l of the reference (positions l, l + 16, ...) is run on its own over a pass of the rows'
 * outputs d0..d0+8C-1, R·C <= 12 vectors, so a V row is loaded and converted once for every row
 * and no lane row goes through memory per position; the 16 lane results of a pass go to a
 * stack buffer and are added element-wise in rt_hsum16_ggml's order (att_avx512.c's scheme).
 * The lanes pass block by block, the next block prefetched toward L2 as they go: a lane
 * sweeping the whole context reads 16-128 bytes every 4 KB, which from memory one thread does
 * at a few GB/s (ab2 as above: 64.1 -> 21.1 ms, 3.7 -> 11.1 GB/s). Contexts in cache: 64 or
 * 256 positions for every head, no slower (0.087 -> 0.079 ms at 64); one head of 1024
 * positions held in L2, run over and over, 6.8 -> 8.1 us (the accumulators stored and
 * reloaded every 8 positions of a lane, prefetches of lines already there).
 * Only a decode step (cold) fetches ahead: a batch's rows are in L2 already, shared by its
 * groups. Three rows take 4 vectors a pass (12 accumulators; four rows at 3 vectors a pass ran
 * slower, 37-47 GFLOP/s against 53-55: spills). With the scores' query vectors held in
 * registers (gcc had folded each load into the FMAs, so a 4-row tile loaded it twice a step:
 * 10 loads for 8 FMAs) and the rows' probability pointers too, one thread on warm rows (/tmp/s24/at.c outside the repo, head dim 128, 256 positions,
 * best of 10): 4 rows scores 47.8 -> 62.0 GFLOP/s, weighted sums 46.9 -> 53-55; 3 rows weighted
 * sums 49.8 -> 61-64 (of ~86 a core: 5.4 G FMAs/s measured). recur-bench pp512 --profile,
 * qwen3-0.6b Q4_K_M, 2 threads, 3 alternating pairs: attention 0.80-0.91 -> 0.76-0.84 ms a
 * token (a fifth of the prompt's time).
 * The passes take the context a span (WS2_SPAN positions) at a time, every pass over a span
 * before the next span, the lanes of all passes parked on the stack between spans: a pass
 * reads 32-64 bytes of each V row, so over the whole context a line that two passes share
 * was gone from L2 (1 MB) before the second one came once a head's V outgrew it, and came
 * from L3 twice, in lane order (rows 4 KB apart). One thread, 4 rows, head dim 128, 4352
 * positions (V 1.1 MB; /tmp/s25/at2.c outside the repo, best of 10): 38-41 -> 47-50
 * GFLOP/s, 8192 positions 37-39 -> 47-49 (spans of 1024 the same, 2048 45-47); two such
 * processes at once 39-40 -> 42-49; 2 rows fetching ahead (a decode step) 37 -> 40-41; 512
 * positions and fewer (one span) unchanged. */
#define WS2_ACC 8
#define WS2_BLK 128           /* positions per block of a weighted-sum pass (a multiple of 16);
                               * ab2: 256 no faster from memory, slower in L2 */
#define WS2_SPAN 512          /* positions every pass takes in turn */
_Static_assert(WS2_SPAN % WS2_BLK == 0, "a span starts a block, whose lanes start at positions 0 mod 16");
#define WS2_DV 256            /* outputs whose lanes are parked at once (64 KB on the stack) */

/* Positions p, p + 16, ... below `end` into acc[i][c]; `check`: only the rows whose context
 * reaches p (else every row sees them). */
static inline __attribute__((always_inline)) void wsum2_span(int R, int C, bool check, int32_t p, int32_t end,
                                                              int64_t d0, const uint16_t *const *v,
                                                              const float *const *pr, const int32_t *n_ctx,
                                                              __m256 acc[4][WS2_ACC]) {
    const float *prr[4];   /* the rows' pointers held in registers (read through pr, gcc loaded them
                            * again at every position: 4 of a position's 11 loads) */
    _Pragma("GCC unroll 4")
    for (int i = 0; i < R; i++) prr[i] = pr[i];
    for (; p < end; p += 16) {
        const uint8_t *vp = (const uint8_t *)v[p];
        if (!vp) continue;
        if (!check) {
            __m256 b[4];
            _Pragma("GCC unroll 4")
            for (int i = 0; i < R; i++) b[i] = _mm256_set1_ps(prr[i][p]);
            _Pragma("GCC unroll 8")
            for (int c = 0; c < C; c++) {
                const __m256 x = ld_f16x8(vp + 2 * (d0 + 8 * c));
                _Pragma("GCC unroll 4")
                for (int i = 0; i < R; i++) acc[i][c] = _mm256_fmadd_ps(b[i], x, acc[i][c]);
            }
            continue;
        }
        _Pragma("GCC unroll 4")
        for (int i = 0; i < R; i++) {
            if (p >= n_ctx[i]) continue;
            const __m256 b = _mm256_set1_ps(prr[i][p]);
            _Pragma("GCC unroll 8")
            for (int c = 0; c < C; c++) acc[i][c] = _mm256_fmadd_ps(b, ld_f16x8(vp + 2 * (d0 + 8 * c)), acc[i][c]);
        }
    }
}

/* One weighted-sum pass over positions [s0, s1): outputs d0..d0+8C-1 of rows 0..R-1. Blocks of
 * WS2_BLK positions, in each lane by lane (a lane's accumulators parked in `lanes`, row i,
 * lane l at lanes + (16i + l)·8C, between blocks), so each lane still takes its positions in
 * increasing order; s0 = 0 starts the lanes at zero, and `last` adds them into out. With pf
 * (a decode step), as the lanes pass, the next block's rows go toward L2, 1/16 of them per
 * lane. */
static inline __attribute__((always_inline)) void wsum2_pass(int R, int C, int64_t d0, const uint16_t *const *v,
                                                              const float *const *pr, const int32_t *n_ctx,
                                                              int32_t n_min, int32_t n_max, int32_t s0, int32_t s1,
                                                              float *lanes, bool last, float *const *out, bool pf) {
    for (int32_t b0 = s0; b0 == s0 || b0 < s1; b0 += WS2_BLK) {   /* one block even when empty: it zeroes the lanes */
        const int32_t b1 = b0 + WS2_BLK < s1 ? b0 + WS2_BLK : s1;
        const int32_t e_all = b1 < n_min ? b1 : n_min;   /* [b0, e_all): every row sees them */
        for (int l = 0; l < 16; l++) {
            const int32_t f0 = b1 + l * (WS2_BLK / 16), f1 = f0 + WS2_BLK / 16 < n_max ? f0 + WS2_BLK / 16 : n_max;
            for (int32_t p = f0; pf && p < f1; p++)   /* every 64-byte line of the pass's part of the row */
                if (v[p])
                    _Pragma("GCC unroll 8")
                    for (int c = 0; c < C; c += 4) _mm_prefetch((const char *)(v[p] + d0 + 8 * c), _MM_HINT_T1);
            __m256 acc[4][WS2_ACC];
            _Pragma("GCC unroll 4")
            for (int i = 0; i < R; i++)
                _Pragma("GCC unroll 8")
                for (int c = 0; c < C; c++)
                    acc[i][c] = b0 ? _mm256_load_ps(lanes + ((16 * i + l) * C + c) * 8) : _mm256_setzero_ps();
            /* the lane's positions: those every row sees, then those only some rows see */
            const int32_t p_all = b0 + l;
            const int32_t p_mid = e_all <= p_all ? p_all : p_all + (e_all - p_all + 15) / 16 * 16;
            wsum2_span(R, C, false, p_all, e_all, d0, v, pr, n_ctx, acc);
            wsum2_span(R, C, true, p_mid, b1, d0, v, pr, n_ctx, acc);
            _Pragma("GCC unroll 4")
            for (int i = 0; i < R; i++)
                _Pragma("GCC unroll 8")
                for (int c = 0; c < C; c++) _mm256_store_ps(lanes + ((16 * i + l) * C + c) * 8, acc[i][c]);
        }
    }
    if (!last) return;
    for (int i = 0; i < R; i++)   /* unrolled, h and q in registers: as loops through the stack
                                   * a 64-position pass took twice as long (1140 vs 590 ns) */
        for (int c = 0; c < C; c++) {
            const float *li = lanes + (16 * i * C + c) * 8;
            __m256 h[8], q[4];
            _Pragma("GCC unroll 8")
            for (int e = 0; e < 8; e++) h[e] = _mm256_add_ps(_mm256_load_ps(li + e * C * 8), _mm256_load_ps(li + (e + 8) * C * 8));
            _Pragma("GCC unroll 4")
            for (int e = 0; e < 4; e++) q[e] = _mm256_add_ps(h[e], h[e + 4]);
            _mm256_storeu_ps(out[i] + d0 + 8 * c, _mm256_add_ps(_mm256_add_ps(q[0], q[2]), _mm256_add_ps(q[1], q[3])));
        }
}

/* Every pass of the rows' outputs [d_lo, d_hi) over positions [s0, s1), the lanes of the pass
 * at d0 parked at park + 16·nr·(d0 - d_lo) (16 lanes of the nr rows' 8C outputs). */
static void wsum2_passes(int nr, int64_t d_lo, int64_t d_hi, const uint16_t *const *v, const float *const pr[4],
                         const int32_t n_ctx[4], int32_t n_min, int32_t n_max, int32_t s0, int32_t s1, float *park,
                         float *const out[4], bool pf) {
    const int C = nr == 1 ? 8 : nr <= 3 ? 4 : 2;   /* vectors of outputs per pass (R·C <= 12 accumulators) */
    const bool last = s1 >= n_max;
    for (int64_t d0 = d_lo; d0 < d_hi;) {
        float *lanes = park + 16 * nr * (d0 - d_lo);
        if ((d_hi - d0) / 8 >= C) {
            switch (nr) {
            case 1: wsum2_pass(1, 8, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
            case 2: wsum2_pass(2, 4, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
            case 3: wsum2_pass(3, 4, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
            default: wsum2_pass(4, 2, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
            }
            d0 += 8 * C;
            continue;
        }
        switch (nr) {   /* the last vectors of a head dim that is not a multiple of the pass */
        case 1: wsum2_pass(1, 1, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
        case 2: wsum2_pass(2, 1, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
        case 3: wsum2_pass(3, 1, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
        default: wsum2_pass(4, 1, d0, v, pr, n_ctx, n_min, n_max, s0, s1, lanes, last, out, pf); break;
        }
        d0 += 8;
    }
}

static void att_wsum4(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4],
                      const int32_t n_ctx[4], float *const out[4], bool cold) {
    if (dv % 8) {   /* head dims that are not a multiple of 8: the lane rows in memory */
        att_wsum4_lanes(nr, dv, v, pr, n_ctx, out);
        return;
    }
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < nr; i++) n_min = n_ctx[i] < n_min ? n_ctx[i] : n_min, n_max = n_ctx[i] > n_max ? n_ctx[i] : n_max;
    _Alignas(32) float park[4 * 16 * WS2_DV];
    for (int64_t d_lo = 0; d_lo < dv; d_lo += WS2_DV) {   /* head dims past WS2_DV: a piece at a time */
        const int64_t d_hi = dv - d_lo < WS2_DV ? dv : d_lo + WS2_DV;
        for (int32_t s0 = 0; s0 == 0 || s0 < n_max; s0 += WS2_SPAN) {   /* one span even when empty: it zeroes the lanes */
            const int32_t s1 = s0 + WS2_SPAN < n_max ? s0 + WS2_SPAN : n_max;
            wsum2_passes(nr, d_lo, d_hi, v, pr, n_ctx, n_min, n_max, s0, s1, park, out, cold);
        }
    }
}

void rt_fill_float_avx2(tensor_kernels *k) {
    k->vec_dot[GGUF_T_F32] = vec_dot_f32;
    k->vec_dot[GGUF_T_F16] = vec_dot_f16;
    k->gemv[GGUF_T_F16] = (tensor_gemv){ gemv_f16, 2, NULL, 0, NULL, 0 };
    k->dot_f16_f32 = dot_f16_f32;
    k->axpy_f16 = axpy_f16;
    k->dot4_f16_f32 = dot4_f16_f32;
    k->axpy4_f16 = axpy4_f16;
    k->att_scores4 = att_scores4;
    k->att_wsum4 = att_wsum4;
    k->dot_f32 = dot_f32_f32;
}
