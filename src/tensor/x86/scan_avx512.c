/* scan_avx512.c — the recurrent scan steps of scan_ref.c on 16-lane vectors: the 64 lanes of
 * the reference are four accumulators (lanes 0-15, 16-31, 32-47, 48-63), reduced in the
 * reference's tree; tails go element by element as there. Same operations, same bits.
 * Any sizes, no alignment.
 *
 * Speed: the accumulators are named variables (an array of vectors indexed in a loop lands on
 * the stack at -O2, and every FMA then waits on a store-forward), and rows go in groups of 8
 * whose reduction trees run side by side in one transposed pass (red8): each row's sum
 * still meets exactly the reference's additions, in its order, only 8 rows share each
 * shuffle and add. */
#include <math.h>
#include <string.h>

#include "tensor/x86/reduce_avx512.h"
#include "tensor/x86/simd_x86.h"

/* The first level of rt_scan_reduce64: v[l] = (acc[l] + acc[32+l]) + (acc[16+l] + acc[48+l]). */
static inline __m512 red64_v(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    return _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
}

/* x86_hsum_ps's tree (lo 8 + hi 8, lo 4 + hi 4, [0] + [2] and [1] + [3], then those two) of
 * eight 16-lane vectors side by side: lane r of the result is the sum of v_r. Each add takes
 * the same two operands, in the same order, as the one-row tree, so the bits are its bits. */
static inline __m256 red8(__m512 v0, __m512 v1, __m512 v2, __m512 v3, __m512 v4, __m512 v5, __m512 v6,
                          __m512 v7) {
    const __m512 s0 = x86_red_quarters(x86_red_halves(v0, v1), x86_red_halves(v2, v3));   /* lane q: row q */
    const __m512 s1 = x86_red_quarters(x86_red_halves(v4, v5), x86_red_halves(v6, v7));   /* lane q: row 4 + q */
    /* lane q: [s_q[0] + s_q[2], s_q[1] + s_q[3], the same of row 4 + q] */
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(s0, s1, _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane q: [row q, row 4 + q, row q, row 4 + q] */
    const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t, t, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(t, t, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, u));
}

static inline __m256 red8v(const __m512 v[8]) { return red8(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]); }

/* One row's tree (x86_hsum_ps of lo 8 + hi 8). */
static inline float red1(__m512 v) {
    return x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* ---- gated delta rule ------------------------------------------------------------------- */

/* Row *= decay over the whole blocks, and the first level of its dot with k. */
static inline __m512 gdn_decay(int64_t np, float *row, const float *k, __m512 vdec) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t i = 0; i < np; i += 64) {
        const __m512 r0 = _mm512_mul_ps(_mm512_loadu_ps(row + i), vdec);
        const __m512 r1 = _mm512_mul_ps(_mm512_loadu_ps(row + i + 16), vdec);
        const __m512 r2 = _mm512_mul_ps(_mm512_loadu_ps(row + i + 32), vdec);
        const __m512 r3 = _mm512_mul_ps(_mm512_loadu_ps(row + i + 48), vdec);
        _mm512_storeu_ps(row + i, r0);
        _mm512_storeu_ps(row + i + 16, r1);
        _mm512_storeu_ps(row + i + 32, r2);
        _mm512_storeu_ps(row + i + 48, r3);
        a0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(k + i), a0);
        a1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(k + i + 16), a1);
        a2 = _mm512_fmadd_ps(r2, _mm512_loadu_ps(k + i + 32), a2);
        a3 = _mm512_fmadd_ps(r3, _mm512_loadu_ps(k + i + 48), a3);
    }
    return red64_v(a0, a1, a2, a3);
}

static inline float gdn_decay_tail(int64_t np, int64_t d, float *row, const float *k, float decay, float sum) {
    for (int64_t i = np; i < d; i++) {
        row[i] *= decay;
        sum += row[i] * k[i];
    }
    return sum;
}

/* Row += k delta over the whole blocks, and the first level of its dot with q. */
static inline __m512 gdn_update(int64_t np, float *row, const float *k, const float *q, __m512 vd) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t i = 0; i < np; i += 64) {
        const __m512 r0 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), vd, _mm512_loadu_ps(row + i));
        const __m512 r1 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16), vd, _mm512_loadu_ps(row + i + 16));
        const __m512 r2 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 32), vd, _mm512_loadu_ps(row + i + 32));
        const __m512 r3 = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 48), vd, _mm512_loadu_ps(row + i + 48));
        _mm512_storeu_ps(row + i, r0);
        _mm512_storeu_ps(row + i + 16, r1);
        _mm512_storeu_ps(row + i + 32, r2);
        _mm512_storeu_ps(row + i + 48, r3);
        a0 = _mm512_fmadd_ps(r0, _mm512_loadu_ps(q + i), a0);
        a1 = _mm512_fmadd_ps(r1, _mm512_loadu_ps(q + i + 16), a1);
        a2 = _mm512_fmadd_ps(r2, _mm512_loadu_ps(q + i + 32), a2);
        a3 = _mm512_fmadd_ps(r3, _mm512_loadu_ps(q + i + 48), a3);
    }
    return red64_v(a0, a1, a2, a3);
}

static inline float gdn_update_tail(int64_t np, int64_t d, float *row, const float *k, const float *q, float delta,
                                    float out) {
    for (int64_t i = np; i < d; i++) {
        row[i] = fmaf(k[i], delta, row[i]);
        out += row[i] * q[i];
    }
    return out;
}

/* Rows j .. j+7 (rt_gdn_step): the eight decays and k dots, their deltas, then the eight
 * updates and q dots. Each row sees the reference's operations in its order. */
static void gdn_rows8(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                      float scale, float *o) {
    const int64_t np = d & ~(int64_t)63;
    const __m512 vdec = _mm512_set1_ps(decay);
    __m512 r[8];
    float t[8];
    for (int i = 0; i < 8; i++) r[i] = gdn_decay(np, S + i * d, k, vdec);
    __m256 sum = red8v(r);
    if (np < d) {
        _mm256_storeu_ps(t, sum);
        for (int i = 0; i < 8; i++) t[i] = gdn_decay_tail(np, d, S + i * d, k, decay, t[i]);
        sum = _mm256_loadu_ps(t);
    }
    float dl[8];
    _mm256_storeu_ps(dl, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v), sum), _mm256_set1_ps(beta)));
    for (int i = 0; i < 8; i++) r[i] = gdn_update(np, S + i * d, k, q, _mm512_set1_ps(dl[i]));
    __m256 out = red8v(r);
    if (np < d) {
        _mm256_storeu_ps(t, out);
        for (int i = 0; i < 8; i++) t[i] = gdn_update_tail(np, d, S + i * d, k, q, dl[i], t[i]);
        out = _mm256_loadu_ps(t);
    }
    _mm256_storeu_ps(o, _mm256_mul_ps(out, _mm256_set1_ps(scale)));
}

/* d = 128 (the models' state size): k and q stay in registers. The decay's product is not
 * stored by the first pass but formed again by the second (the same rounded product), so a
 * row is written once; and the first pass of the next 8 rows is issued before the second
 * pass of these, so the reduction chain of one group overlaps the other's work. The state comes
 * from memory each token; fetching its rows 16 ahead as well (T0, 4 KiB a group of 8 rows) left
 * qwen35-0.8b's tokens where they were (alternating in runs of 8: 0.993-1.014x the time). So
 * did fetching them 32 KiB ahead, though one thread alone then stepped 8 cold heads in 24-26
 * instead of 35-36 us (a harness outside the repo, mean of 300 layers): in a token both
 * threads step their heads at once, and their reads plus the state's write-backs (1 MiB each
 * way a layer, in ~40 us) already keep memory busy (qwen35-0.8b Q4_K_M tg128, --profile, 4
 * alternating pairs: recurrent 1.00-1.12 ms a token both ways). */
#define GDN_DEC(j, acc) acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(row + 16 * (j)), vdec), k##j, acc)
#define GDN_UPD(j, acc)                                                                                      \
    do {                                                                                                     \
        const __m512 r_ = _mm512_fmadd_ps(k##j, vd, _mm512_mul_ps(_mm512_loadu_ps(row + 16 * (j)), vdec)); \
        _mm512_storeu_ps(row + 16 * (j), r_);                                                                \
        acc = _mm512_fmadd_ps(r_, q##j, acc);                                                                \
    } while (0)

static void gdn_step128(float *S, const float *q, const float *k, const float *v, float decay, float beta,
                        float scale, float *o) {
    const __m512 vdec = _mm512_set1_ps(decay);
    const __m512 k0 = _mm512_loadu_ps(k), k1 = _mm512_loadu_ps(k + 16), k2 = _mm512_loadu_ps(k + 32),
                 k3 = _mm512_loadu_ps(k + 48), k4 = _mm512_loadu_ps(k + 64), k5 = _mm512_loadu_ps(k + 80),
                 k6 = _mm512_loadu_ps(k + 96), k7 = _mm512_loadu_ps(k + 112);
    const __m512 q0 = _mm512_loadu_ps(q), q1 = _mm512_loadu_ps(q + 16), q2 = _mm512_loadu_ps(q + 32),
                 q3 = _mm512_loadu_ps(q + 48), q4 = _mm512_loadu_ps(q + 64), q5 = _mm512_loadu_ps(q + 80),
                 q6 = _mm512_loadu_ps(q + 96), q7 = _mm512_loadu_ps(q + 112);
    __m512 r[8];
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < 128; j += 8) {
        if (j == 0) {   /* the first group's first pass; later groups' come one group early */
            for (int i = 0; i < 8; i++) {
                const float *row = S + i * 128;
                __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
                GDN_DEC(0, a0); GDN_DEC(1, a1); GDN_DEC(2, a2); GDN_DEC(3, a3);
                GDN_DEC(4, a0); GDN_DEC(5, a1); GDN_DEC(6, a2); GDN_DEC(7, a3);
                r[i] = red64_v(a0, a1, a2, a3);
            }
            sum = red8v(r);
        }
        float dl[8];
        _mm256_storeu_ps(dl, _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j), sum), _mm256_set1_ps(beta)));
        if (j + 8 < 128) {
            for (int i = 0; i < 8; i++) {
                const float *row = S + (j + 8 + i) * 128;
                __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
                GDN_DEC(0, a0); GDN_DEC(1, a1); GDN_DEC(2, a2); GDN_DEC(3, a3);
                GDN_DEC(4, a0); GDN_DEC(5, a1); GDN_DEC(6, a2); GDN_DEC(7, a3);
                r[i] = red64_v(a0, a1, a2, a3);
            }
            sum = red8v(r);
        }
        __m512 u[8];
        for (int i = 0; i < 8; i++) {
            float *row = S + (j + i) * 128;
            const __m512 vd = _mm512_set1_ps(dl[i]);
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
            GDN_UPD(0, a0); GDN_UPD(1, a1); GDN_UPD(2, a2); GDN_UPD(3, a3);
            GDN_UPD(4, a0); GDN_UPD(5, a1); GDN_UPD(6, a2); GDN_UPD(7, a3);
            u[i] = red64_v(a0, a1, a2, a3);
        }
        _mm256_storeu_ps(o + j, _mm256_mul_ps(red8v(u), _mm256_set1_ps(scale)));
    }
}
#undef GDN_DEC
#undef GDN_UPD

static void gdn_step(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                     float scale, float *o) {
    if (d == 128) {
        gdn_step128(S, q, k, v, decay, beta, scale, o);
        return;
    }
    const int64_t np = d & ~(int64_t)63;
    const __m512 vdec = _mm512_set1_ps(decay);
    int64_t j = 0;
    for (; j + 8 <= d; j += 8) gdn_rows8(d, S + j * d, q, k, v + j, decay, beta, scale, o + j);
    for (; j < d; j++) {
        float *row = S + j * d;
        const float sum = gdn_decay_tail(np, d, row, k, decay, red1(gdn_decay(np, row, k, vdec)));
        const float delta = (v[j] - sum) * beta;
        o[j] = gdn_update_tail(np, d, row, k, q, delta, red1(gdn_update(np, row, k, q, _mm512_set1_ps(delta)))) * scale;
    }
}

/* ---- Mamba-2 ------------------------------------------------------------------------------ */

/* Row s stepped over the whole blocks (s = s dA + B x_dt), and the first level of its dot with C. */
static inline __m512 ssm2_row(int64_t np, float *s, const float *B, const float *C, __m512 va, __m512 vx) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    for (int64_t i = 0; i < np; i += 64) {
        const __m512 s0 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i), va, _mm512_mul_ps(_mm512_loadu_ps(B + i), vx));
        const __m512 s1 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i + 16), va, _mm512_mul_ps(_mm512_loadu_ps(B + i + 16), vx));
        const __m512 s2 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i + 32), va, _mm512_mul_ps(_mm512_loadu_ps(B + i + 32), vx));
        const __m512 s3 = _mm512_fmadd_ps(_mm512_loadu_ps(s + i + 48), va, _mm512_mul_ps(_mm512_loadu_ps(B + i + 48), vx));
        _mm512_storeu_ps(s + i, s0);
        _mm512_storeu_ps(s + i + 16, s1);
        _mm512_storeu_ps(s + i + 32, s2);
        _mm512_storeu_ps(s + i + 48, s3);
        a0 = _mm512_fmadd_ps(s0, _mm512_loadu_ps(C + i), a0);
        a1 = _mm512_fmadd_ps(s1, _mm512_loadu_ps(C + i + 16), a1);
        a2 = _mm512_fmadd_ps(s2, _mm512_loadu_ps(C + i + 32), a2);
        a3 = _mm512_fmadd_ps(s3, _mm512_loadu_ps(C + i + 48), a3);
    }
    return red64_v(a0, a1, a2, a3);
}

static inline float ssm2_tail(int64_t np, int64_t ds, float *s, const float *B, const float *C, float dA, float x_dt,
                              float sum) {
    for (int64_t i = np; i < ds; i++) {
        const float st = fmaf(s[i], dA, B[i] * x_dt);
        sum = fmaf(st, C[i], sum);
        s[i] = st;
    }
    return sum;
}

/* ds = 128 (Mamba-2's d_state): B and C stay in registers for all the rows, so a row costs
 * only its own loads and stores. Same operations as ssm2_row.
 * A decode step is bound by the state's traffic: 48 layers x 1 MiB stepped by 2 threads (a
 * program outside the repo, medians of 40 tokens) took 2.01-2.07 ms against 1.93-2.00 for a
 * plain in-place multiply-add over the same bytes, and 2.27-2.29 with streaming stores. */
#define SSM2_V(k, acc)                                                                                   \
    do {                                                                                                 \
        const __m512 st_ = _mm512_fmadd_ps(_mm512_loadu_ps(sp + 16 * (k)), va, _mm512_mul_ps(b##k, vx)); \
        _mm512_storeu_ps(sp + 16 * (k), st_);                                                            \
        acc = _mm512_fmadd_ps(st_, c##k, acc);                                                           \
    } while (0)

static void ssm2_rows128(int64_t n, float *s, const float *B, const float *C, float dA, float dt, const float *x,
                         float *y) {
    const __m512 va = _mm512_set1_ps(dA);
    const __m512 b0 = _mm512_loadu_ps(B), b1 = _mm512_loadu_ps(B + 16), b2 = _mm512_loadu_ps(B + 32),
                 b3 = _mm512_loadu_ps(B + 48), b4 = _mm512_loadu_ps(B + 64), b5 = _mm512_loadu_ps(B + 80),
                 b6 = _mm512_loadu_ps(B + 96), b7 = _mm512_loadu_ps(B + 112);
    const __m512 c0 = _mm512_loadu_ps(C), c1 = _mm512_loadu_ps(C + 16), c2 = _mm512_loadu_ps(C + 32),
                 c3 = _mm512_loadu_ps(C + 48), c4 = _mm512_loadu_ps(C + 64), c5 = _mm512_loadu_ps(C + 80),
                 c6 = _mm512_loadu_ps(C + 96), c7 = _mm512_loadu_ps(C + 112);
    int64_t p = 0;
    for (; p + 8 <= n; p += 8) {
        __m512 r[8];
        for (int i = 0; i < 8; i++) {
            float *sp = s + (p + i) * 128;
            const __m512 vx = _mm512_set1_ps(x[p + i] * dt);
            __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
            SSM2_V(0, a0); SSM2_V(1, a1); SSM2_V(2, a2); SSM2_V(3, a3);
            SSM2_V(4, a0); SSM2_V(5, a1); SSM2_V(6, a2); SSM2_V(7, a3);
            r[i] = red64_v(a0, a1, a2, a3);
        }
        _mm256_storeu_ps(y + p, red8v(r));
    }
    for (; p < n; p++) {
        float *sp = s + p * 128;
        const __m512 vx = _mm512_set1_ps(x[p] * dt);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
        SSM2_V(0, a0); SSM2_V(1, a1); SSM2_V(2, a2); SSM2_V(3, a3);
        SSM2_V(4, a0); SSM2_V(5, a1); SSM2_V(6, a2); SSM2_V(7, a3);
        y[p] = red1(red64_v(a0, a1, a2, a3));
    }
}
#undef SSM2_V

static void ssm2_rows(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                      const float *x, float *y) {
    if (ds == 128) {
        ssm2_rows128(n, s, B, C, dA, dt, x, y);
        return;
    }
    const int64_t np = ds & ~(int64_t)63;
    const __m512 va = _mm512_set1_ps(dA);
    int64_t p = 0;
    for (; p + 8 <= n; p += 8) {   /* eight rows, one transposed reduction */
        __m512 r[8];
        for (int i = 0; i < 8; i++) r[i] = ssm2_row(np, s + (p + i) * ds, B, C, va, _mm512_set1_ps(x[p + i] * dt));
        const __m256 sum = red8v(r);
        if (np < ds) {
            float t[8];
            _mm256_storeu_ps(t, sum);
            for (int i = 0; i < 8; i++) y[p + i] = ssm2_tail(np, ds, s + (p + i) * ds, B, C, dA, x[p + i] * dt, t[i]);
        } else {
            _mm256_storeu_ps(y + p, sum);
        }
    }
    for (; p < n; p++) {
        const float x_dt = x[p] * dt;
        float *sp = s + p * ds;
        y[p] = ssm2_tail(np, ds, sp, B, C, dA, x_dt, red1(ssm2_row(np, sp, B, C, va, _mm512_set1_ps(x_dt))));
    }
}

/* ds = 128 over nt tokens (tensor.h ssm2_tokens): row by row, the row's state in registers
 * while the tokens pass, so it is loaded and stored once per call instead of once per token;
 * each token's B and C are read from L1. A row's y of eight tokens are reduced side by side
 * (red8: per lane the one-row tree). Per (row, token) the operations of ssm2_rows128. */
static inline __attribute__((always_inline)) __m512 ssm2_tok(__m512 st[8], const float *B, const float *C, float dA,
                                                             float x_dt) {
    const __m512 va = _mm512_set1_ps(dA), vx = _mm512_set1_ps(x_dt);
    __m512 a[4];
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++) {
        st[k] = _mm512_fmadd_ps(st[k], va, _mm512_mul_ps(_mm512_loadu_ps(B + 16 * k), vx));
        const __m512 c = _mm512_loadu_ps(C + 16 * k);
        a[k & 3] = _mm512_fmadd_ps(st[k], c, k < 4 ? _mm512_setzero_ps() : a[k & 3]);   /* from +0, as ssm2_rows128 */
    }
    return red64_v(a[0], a[1], a[2], a[3]);
}

static void ssm2_tokens(int64_t ds, int64_t n, int64_t nt, const float *s_in, float *s, const float *B,
                        const float *C, const float *x, int64_t is, const float *dA, const float *dt, float *y,
                        int64_t ys) {
    if (ds != 128) {
        if (s_in != s) memcpy(s, s_in, (size_t)(n * ds) * sizeof(float));
        for (int64_t t = 0; t < nt; t++) ssm2_rows(ds, n, s, B + t * is, C + t * is, dA[t], dt[t], x + t * is, y + t * ys);
        return;
    }
    for (int64_t p = 0; p < n; p++) {
        float *sp = s + p * 128;
        const float *sp_in = s_in + p * 128;
        __m512 st[8];
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) st[k] = _mm512_loadu_ps(sp_in + 16 * k);
        int64_t t = 0;
        for (; t + 8 <= nt; t += 8) {
            __m512 r[8];
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 8; i++) {
                const int64_t u = t + i;
                r[i] = ssm2_tok(st, B + u * is, C + u * is, dA[u], x[u * is + p] * dt[u]);
            }
            _Alignas(32) float o[8];
            _mm256_store_ps(o, red8v(r));
            for (int i = 0; i < 8; i++) y[(t + i) * ys + p] = o[i];
        }
        for (; t < nt; t++) y[t * ys + p] = red1(ssm2_tok(st, B + t * is, C + t * is, dA[t], x[t * is + p] * dt[t]));
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) _mm512_storeu_ps(sp + 16 * k, st[k]);
    }
}

/* rt_conv_step, 16 channels per vector. The weights of a channel are K apart: for K <= 4 the
 * 16 K weights of 16 channels are K whole vectors, and weight k of each channel is picked
 * out of them by two permutes (a gather costs far more); other K gather. The channels past
 * the last whole vector go as there. */
static inline __m512 conv_wk(__m512 v0, __m512 v1, __m512 v2, __m512 v3, __m512i base, int k) {
    const __m512i e = _mm512_add_epi32(base, _mm512_set1_epi32(k));   /* c K + k, < 64 */
    const __mmask16 hi = _mm512_cmpge_epi32_mask(e, _mm512_set1_epi32(32));
    return _mm512_mask_blend_ps(hi, _mm512_permutex2var_ps(v0, e, v1), _mm512_permutex2var_ps(v2, e, v3));
}

static void conv_step(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                      float *out) {
    const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(K));
    int64_t ch = lo;
    for (; ch + 16 <= hi; ch += 16) {
        const float *wc = w + ch * K;
        const __m512 v = _mm512_loadu_ps(in + ch);
        __m512 sum = _mm512_setzero_ps();
        if (K <= 4) {
            const __m512 z = _mm512_setzero_ps();
            const __m512 v0 = _mm512_loadu_ps(wc), v1 = K > 1 ? _mm512_loadu_ps(wc + 16) : z;
            const __m512 v2 = K > 2 ? _mm512_loadu_ps(wc + 32) : z, v3 = K > 3 ? _mm512_loadu_ps(wc + 48) : z;
            for (int k = 0; k < K - 1; k++)
                sum = _mm512_fmadd_ps(_mm512_loadu_ps(state + k * C + ch), conv_wk(v0, v1, v2, v3, base, k), sum);
            sum = _mm512_fmadd_ps(v, conv_wk(v0, v1, v2, v3, base, K - 1), sum);
        } else {
            for (int k = 0; k < K - 1; k++)
                sum = _mm512_fmadd_ps(_mm512_loadu_ps(state + k * C + ch), _mm512_i32gather_ps(base, wc + k, 4), sum);
            sum = _mm512_fmadd_ps(v, _mm512_i32gather_ps(base, wc + K - 1, 4), sum);
        }
        for (int k = 0; k < K - 2; k++) _mm512_storeu_ps(state + k * C + ch, _mm512_loadu_ps(state + (k + 1) * C + ch));
        if (K > 1) _mm512_storeu_ps(state + (int64_t)(K - 2) * C + ch, v);
        _mm512_storeu_ps(out + ch, sum);
    }
    for (; ch < hi; ch++) {
        const float *wc = w + ch * K;
        const float v = in[ch];
        float sum = 0.0f;
        for (int k = 0; k < K - 1; k++) sum = fmaf(state[k * C + ch], wc[k], sum);
        sum = fmaf(v, wc[K - 1], sum);
        for (int k = 0; k < K - 2; k++) state[k * C + ch] = state[(k + 1) * C + ch];
        if (K > 1) state[(int64_t)(K - 2) * C + ch] = v;
        out[ch] = sum;
    }
}

/* conv_run: 16 channels at a time over all n tokens, their K weights picked out once and
 * their K-1 state rows held in registers (K <= 4: the permuted case of conv_step; each token
 * performs conv_step's operations); other K, and the channels past the last whole vector, go
 * token by token through conv_step. */
static inline __attribute__((always_inline)) void conv_run16(int K, float *state, const float *wc, __m512i base,
                                                              int64_t C, int64_t ch, int64_t n, const float *in,
                                                              int64_t is, float *out, int64_t os) {
    const __m512 z = _mm512_setzero_ps();
    const __m512 v0 = _mm512_loadu_ps(wc), v1 = K > 1 ? _mm512_loadu_ps(wc + 16) : z;
    const __m512 v2 = K > 2 ? _mm512_loadu_ps(wc + 32) : z, v3 = K > 3 ? _mm512_loadu_ps(wc + 48) : z;
    __m512 wk[4], st[3];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K; k++) wk[k] = conv_wk(v0, v1, v2, v3, base, k);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K - 1; k++) st[k] = _mm512_loadu_ps(state + k * C + ch);
    for (int64_t t = 0; t < n; t++) {
        const __m512 v = _mm512_loadu_ps(in + t * is + ch);
        __m512 sum = z;
        _Pragma("GCC unroll 4")
        for (int k = 0; k < K - 1; k++) sum = _mm512_fmadd_ps(st[k], wk[k], sum);
        sum = _mm512_fmadd_ps(v, wk[K - 1], sum);
        _Pragma("GCC unroll 4")
        for (int k = 0; k + 1 < K - 1; k++) st[k] = st[k + 1];
        if (K > 1) st[K - 2] = v;
        _mm512_storeu_ps(out + t * os + ch, sum);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K - 1; k++) _mm512_storeu_ps(state + k * C + ch, st[k]);
}

static void conv_run(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, int64_t n,
                     const float *in, int64_t is, float *out, int64_t os) {
    int64_t ch = lo;
    if (K >= 1 && K <= 4) {
        const __m512i base = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                _mm512_set1_epi32(K));
        for (; ch + 16 <= hi; ch += 16) switch (K) {
            case 1: conv_run16(1, state, w + ch * K, base, C, ch, n, in, is, out, os); break;
            case 2: conv_run16(2, state, w + ch * K, base, C, ch, n, in, is, out, os); break;
            case 3: conv_run16(3, state, w + ch * K, base, C, ch, n, in, is, out, os); break;
            default: conv_run16(4, state, w + ch * K, base, C, ch, n, in, is, out, os); break;
            }
    }
    if (ch < hi)
        for (int64_t t = 0; t < n; t++) conv_step(state, w, K, C, ch, hi, in + t * is, out + t * os);
}

/* ---- Mamba-1 ------------------------------------------------------------------------------ */

/* Two 8-float halves as one vector. */
static inline __m512 join8(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }

/* rt_expf_libm of 8 floats in double lanes (expf_libm_ref.c: the same operations, so the same
 * bits) for |x| < 88 (the caller checks): the table's 32 entries held in four registers and
 * picked by two permutes and a blend instead of a gather. */
typedef struct expf_tab512 {
    __m512i lo0, lo1, hi0, hi1;   /* entries 0-7, 8-15, 16-23, 24-31 */
} expf_tab512;

static inline expf_tab512 expf_tab_load(void) {
    const __m512i *t = (const __m512i *)(const void *)rt_expf_tab;
    return (expf_tab512){ _mm512_loadu_si512(t), _mm512_loadu_si512(t + 1), _mm512_loadu_si512(t + 2),
                          _mm512_loadu_si512(t + 3) };
}

static inline __m256 expf8d_libm(__m256 x, const expf_tab512 *tb) {
    const __m512d invln2n = _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_EXPF_INVLN2N));
    const __m512d shift = _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_EXPF_SHIFT));
    const __m512d xd = _mm512_cvtps_pd(x);
    const __m512d t = _mm512_fmadd_pd(xd, invln2n, shift);
    const __m512i ki = _mm512_castpd_si512(t);
    const __m512d r = _mm512_fmsub_pd(invln2n, xd, _mm512_sub_pd(t, shift));
    const __m512i lo = _mm512_permutex2var_epi64(tb->lo0, ki, tb->lo1), hi = _mm512_permutex2var_epi64(tb->hi0, ki, tb->hi1);
    const __m512i tab = _mm512_mask_blend_epi64(_mm512_test_epi64_mask(ki, _mm512_set1_epi64(16)), lo, hi);
    const __m512d sc = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_slli_epi64(ki, 47)));
    const __m512d z = _mm512_fmadd_pd(r, _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_EXPF_C0)),
                                      _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_EXPF_C1)));
    const __m512d y0 = _mm512_fmadd_pd(r, _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_EXPF_C2)), _mm512_set1_pd(1.0));
    return _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_fmadd_pd(z, _mm512_mul_pd(r, r), y0), sc));
}

/* The lanes of x whose exp needs libm's checks (|x| >= 88 and the like: the top 12 bits of x
 * above RT_EXPF_TOP_MAX). */
static inline __mmask16 expf_needs_checks(__m512 x) {
    const __m512i top = _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 20), _mm512_set1_epi32(0x7ff));
    return _mm512_cmpgt_epi32_mask(top, _mm512_set1_epi32(RT_EXPF_TOP_MAX));
}

/* rt_expf_libm of 16 floats: the vector formula, or lane by lane where a lane needs the checks. */
static inline __m512 expf16_libm(__m512 x, const expf_tab512 *tb) {
    if (expf_needs_checks(x)) {
        float v[16];
        _mm512_storeu_ps(v, x);
        for (int l = 0; l < 16; l++) v[l] = rt_expf_libm(v[l]);
        return _mm512_loadu_ps(v);
    }
    return join8(expf8d_libm(_mm512_castps512_ps256(x), tb), expf8d_libm(_mm512_extractf32x8_ps(x, 1), tb));
}

/* rt_logf_libm's table split into its two columns, 16 doubles each in two registers. */
typedef struct logf_tab512 {
    __m512d inv0, inv1, log0, log1;   /* 1/c and log c of entries 0-7 and 8-15 */
} logf_tab512;

static inline logf_tab512 logf_tab_load(void) {
    const double *t = (const double *)(const void *)rt_logf_tab;
    const __m512i ev = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), od = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    const __m512d r0 = _mm512_loadu_pd(t), r1 = _mm512_loadu_pd(t + 8), r2 = _mm512_loadu_pd(t + 16), r3 = _mm512_loadu_pd(t + 24);
    return (logf_tab512){ _mm512_permutex2var_pd(r0, ev, r1), _mm512_permutex2var_pd(r2, ev, r3),
                          _mm512_permutex2var_pd(r0, od, r1), _mm512_permutex2var_pd(r2, od, r3) };
}

/* rt_logf_libm of 8 positive normal floats (bits ix) in double lanes (logf_libm_ref.c: the same
 * operations, so the same bits). */
static inline __m256 logf8d_libm(__m256i ix, const logf_tab512 *tb) {
    const __m256i tmp = _mm256_sub_epi32(ix, _mm256_set1_epi32((int)RT_LOGF_OFF));
    const __m512i i = _mm512_cvtepu32_epi64(_mm256_and_si256(_mm256_srli_epi32(tmp, 19), _mm256_set1_epi32(15)));
    const __m256i iz = _mm256_sub_epi32(ix, _mm256_and_si256(tmp, _mm256_set1_epi32((int)0xff800000u)));
    const __m512d invc = _mm512_permutex2var_pd(tb->inv0, i, tb->inv1), logc = _mm512_permutex2var_pd(tb->log0, i, tb->log1);
    const __m512d r = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_castsi256_ps(iz)), invc, _mm512_set1_pd(-1.0));
    const __m512d y0 = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm256_srai_epi32(tmp, 23)),
                                       _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_LOGF_LN2)), logc);
    const __m512d r2 = _mm512_mul_pd(r, r);
    const __m512d y = _mm512_fmadd_pd(_mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_LOGF_A0)), r2,
                                      _mm512_fmadd_pd(r, _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_LOGF_A1)),
                                                      _mm512_castsi512_pd(_mm512_set1_epi64((long long)RT_LOGF_A2))));
    return _mm512_cvtpd_ps(_mm512_fmadd_pd(r2, y, _mm512_add_pd(r, y0)));
}

/* rt_softplus_libm of 16 floats: expf, 1 + e, logf, then x where x > 20; lanes that need logf's
 * checks (an infinite or NaN 1 + e) go one by one. */
static inline __m512 softplus16_libm(__m512 x, const expf_tab512 *et, const logf_tab512 *lt) {
    const __m512 a = _mm512_add_ps(_mm512_set1_ps(1.0f), expf16_libm(x, et));
    const __m512i ia = _mm512_castps_si512(a);
    __m512 l;
    if (_mm512_cmpgt_epi32_mask(_mm512_set1_epi32(0x00800000), ia) | _mm512_cmpgt_epi32_mask(ia, _mm512_set1_epi32(0x7f7fffff))) {
        float v[16];
        _mm512_storeu_ps(v, a);
        for (int k = 0; k < 16; k++) v[k] = rt_logf_libm(v[k]);
        l = _mm512_loadu_ps(v);
    } else
        l = join8(logf8d_libm(_mm512_castsi512_si256(ia), lt), logf8d_libm(_mm512_extracti64x4_epi64(ia, 1), lt));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(20.0f), _CMP_GT_OQ), l, x);
}

/* v[0..15] (rows) transposed in place: v[k] lane j = old v[j] lane k. */
static inline __attribute__((always_inline)) void transpose16(__m512 v[16]) {
    __m512 a[16], b[16];
    /* a[2i + h], 128-bit lane g: rows 2i, 2i + 1 interleaved, elements 4g + 2h, 4g + 2h + 1 */
    _Pragma("GCC unroll 8")
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    /* b[4i + m], lane g: rows 4i .. 4i + 3 of element 4g + m */
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++)
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m512d x = _mm512_castps_pd(a[4 * i + h]), y = _mm512_castps_pd(a[4 * i + 2 + h]);
            b[4 * i + 2 * h] = _mm512_castpd_ps(_mm512_unpacklo_pd(x, y));
            b[4 * i + 2 * h + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(x, y));
        }
    /* a[8i + m]: lanes (row group 2i, element group 0), (2i, 2), (2i + 1, 0), (2i + 1, 2) of
     * element offset m; a[8i + 4 + m] the same with element groups 1 and 3 */
    _Pragma("GCC unroll 2")
    for (int i = 0; i < 2; i++)
        _Pragma("GCC unroll 4")
        for (int m = 0; m < 4; m++) {
            a[8 * i + m] = _mm512_shuffle_f32x4(b[8 * i + m], b[8 * i + 4 + m], _MM_SHUFFLE(2, 0, 2, 0));
            a[8 * i + 4 + m] = _mm512_shuffle_f32x4(b[8 * i + m], b[8 * i + 4 + m], _MM_SHUFFLE(3, 1, 3, 1));
        }
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++) {
        v[k] = _mm512_shuffle_f32x4(a[k], a[8 + k], _MM_SHUFFLE(2, 0, 2, 0));
        v[8 + k] = _mm512_shuffle_f32x4(a[k], a[8 + k], _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* rt_ssm1_step, 16 channels at a time for ds a multiple of 16 (up to SSM1_DS; Mamba-1's d_state
 * is 16): the channels' softplus 16 at a time, each channel's new state 16 elements a vector (the
 * exps 16 at a time, in double lanes as libm computes them, the table read by permutes instead
 * of the AVX2 step's gathers), kept, then turned so that a vector holds one element of the 16
 * channels and each channel's sum chain runs in its lane, element by element as in the
 * reference. Other channels and sizes: the AVX2 table's step. Until this the AVX-512 table ran
 * that AVX2 step: one thread, 768 channels of d_state 16 a call (/tmp/s35/s1.c outside the
 * repo, best of 20 x 64 calls) 48-61 -> 19-25 TSC cycles a channel (the machine busy with a
 * build beside it); recur-bench -t 2 -p 512 -n 0 -r 1 --bw-mib 0, mamba-130m Q8_0 synth, the
 * same minutes (with the F16 short rows of gemm_f16_avx512.c): 886-902 -> 1234-1271 t/s. */
#define SSM1_DS 64

/* Channels in groups of 16 (s and A at the first of n), DS state elements each: y[0..n / 16 * 16).
 * The exps take the vector formula throughout and a group's states are written only once no lane
 * needed libm's checks (|x| >= 88, not met by trained models' dt · A); else the group goes to the
 * AVX2 step (whose exps check lane by lane), from the states as they were. */
static inline __attribute__((always_inline)) void ssm1_groups(int64_t DS, int64_t n, float *s, const float *A,
                                                              const float *B, const float *C, const float *dt,
                                                              const float *x, float *y) {
    const expf_tab512 tb = expf_tab_load();
    const logf_tab512 lt = logf_tab_load();
    __m512 bv[SSM1_DS / 16];
    for (int64_t q = 0; q < DS / 16; q++) bv[q] = _mm512_loadu_ps(B + 16 * q);
    for (int64_t c = 0; c + 16 <= n; c += 16) {
        float *sc = s + c * DS;
        const float *ac = A + c * DS;
        __m512 st[SSM1_DS / 16][16];
        const __m512 dsp = softplus16_libm(_mm512_loadu_ps(dt + c), &tb, &lt);
        float d[16], xd[16];
        _mm512_storeu_ps(d, dsp);
        _mm512_storeu_ps(xd, _mm512_mul_ps(_mm512_loadu_ps(x + c), dsp));
        __mmask16 checks = 0;
        _Pragma("GCC unroll 16")
        for (int j = 0; j < 16; j++) {
            const __m512 vd = _mm512_set1_ps(d[j]), vx = _mm512_set1_ps(xd[j]);
            for (int64_t q = 0; q < DS / 16; q++) {
                const __m512 a = _mm512_mul_ps(vd, _mm512_loadu_ps(ac + j * DS + 16 * q));
                checks |= expf_needs_checks(a);
                const __m512 e = join8(expf8d_libm(_mm512_castps512_ps256(a), &tb),
                                           expf8d_libm(_mm512_extractf32x8_ps(a, 1), &tb));
                st[q][j] = _mm512_fmadd_ps(_mm512_loadu_ps(sc + j * DS + 16 * q), e, _mm512_mul_ps(bv[q], vx));
            }
        }
        if (checks) {
            rt_ssm1_step_avx2(DS, 16, sc, ac, B, C, dt + c, x + c, y + c);
            continue;
        }
        __m512 sum = _mm512_setzero_ps();
        for (int64_t q = 0; q < DS / 16; q++) {
            _Pragma("GCC unroll 16")
            for (int j = 0; j < 16; j++) _mm512_storeu_ps(sc + j * DS + 16 * q, st[q][j]);
            transpose16(st[q]);
            _Pragma("GCC unroll 16")
            for (int k = 0; k < 16; k++) sum = _mm512_fmadd_ps(st[q][k], _mm512_set1_ps(C[16 * q + k]), sum);
        }
        _mm512_storeu_ps(y + c, sum);
    }
}

static void ssm1_step(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C,
                      const float *dt, const float *x, float *y) {
    int64_t c = 0;
    if (ds % 16 == 0 && ds <= SSM1_DS) {
        if (ds == 16) ssm1_groups(16, n, s, A, B, C, dt, x, y);   /* Mamba-1's size: a group's states in registers */
        else ssm1_groups(ds, n, s, A, B, C, dt, x, y);
        c = n / 16 * 16;
    }
    if (c < n) rt_ssm1_step_avx2(ds, n - c, s + c * ds, A + c * ds, B, C, dt + c, x + c, y + c);
}

void rt_fill_scan_avx512(tensor_kernels *k) {
    k->gdn_step = gdn_step;
    k->ssm2_rows = ssm2_rows;
    k->ssm2_tokens = ssm2_tokens;
    k->ssm1_step = ssm1_step;
    k->conv_step = conv_step;
    k->conv_run = conv_run;
}
