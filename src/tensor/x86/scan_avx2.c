/* scan_avx2.c — the recurrent scan steps of scan_ref.c on 8-lane vectors: the 64 lanes of the
 * reference are eight accumulators (lanes 8c .. 8c+7), reduced in the reference's tree; tails
 * go element by element as there. Same operations, same bits. Any sizes, no alignment. */
#include <math.h>
#include <string.h>

#include "tensor/x86/simd_x86.h"

/* rt_scan_reduce64 of the eight accumulators: v[0..7] = (a0 + a4) + (a2 + a6),
 * v[8..15] = (a1 + a5) + (a3 + a7), then rt_hsum16_ggml. The accumulators are named
 * variables, not an array: an array of vectors indexed in a loop lands on the stack at -O2,
 * and every FMA then waits on a store-forward. */
static inline float red64(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5, __m256 a6, __m256 a7) {
    const __m256 lo = _mm256_add_ps(_mm256_add_ps(a0, a4), _mm256_add_ps(a2, a6));
    const __m256 hi = _mm256_add_ps(_mm256_add_ps(a1, a5), _mm256_add_ps(a3, a7));
    return x86_hsum_ps(_mm256_add_ps(lo, hi));
}

#define ZERO8(a)                                                                                     \
    __m256 a##0 = _mm256_setzero_ps(), a##1 = _mm256_setzero_ps(), a##2 = _mm256_setzero_ps(),        \
           a##3 = _mm256_setzero_ps(), a##4 = _mm256_setzero_ps(), a##5 = _mm256_setzero_ps(),        \
           a##6 = _mm256_setzero_ps(), a##7 = _mm256_setzero_ps()
#define EACH8(M, a) M(0, a##0); M(1, a##1); M(2, a##2); M(3, a##3); M(4, a##4); M(5, a##5); M(6, a##6); M(7, a##7)

/* row *= decay and a += row k, lanes 8c .. 8c+7 of the block at i */
#define GDN_DEC(c, acc)                                                                 \
    do {                                                                                \
        const __m256 r_ = _mm256_mul_ps(_mm256_loadu_ps(row + i + 8 * (c)), vdec);      \
        _mm256_storeu_ps(row + i + 8 * (c), r_);                                        \
        acc = _mm256_fmadd_ps(r_, _mm256_loadu_ps(k + i + 8 * (c)), acc);               \
    } while (0)
/* row += k delta and a += row q */
#define GDN_UPD(c, acc)                                                                                    \
    do {                                                                                                   \
        const __m256 r_ = _mm256_fmadd_ps(_mm256_loadu_ps(k + i + 8 * (c)), vd, _mm256_loadu_ps(row + i + 8 * (c))); \
        _mm256_storeu_ps(row + i + 8 * (c), r_);                                                           \
        acc = _mm256_fmadd_ps(r_, _mm256_loadu_ps(q + i + 8 * (c)), acc);                                  \
    } while (0)

/* Row j of rt_gdn_step in its two passes: the decay and the k dot (returns the dot), then the
 * update by delta and the q dot (returns the output before the scale). */
static inline __attribute__((always_inline)) float gdn_pass1(int64_t d, float *row, const float *k, float decay) {
    const int64_t np = d & ~(int64_t)63;
    const __m256 vdec = _mm256_set1_ps(decay);
    ZERO8(a);
    for (int64_t i = 0; i < np; i += 64) { EACH8(GDN_DEC, a); }
    float sum = red64(a0, a1, a2, a3, a4, a5, a6, a7);
    for (int64_t i = np; i < d; i++) {
        row[i] *= decay;
        sum += row[i] * k[i];
    }
    return sum;
}

static inline __attribute__((always_inline)) float gdn_pass2(int64_t d, float *row, const float *k, const float *q,
                                                             float delta) {
    const int64_t np = d & ~(int64_t)63;
    const __m256 vd = _mm256_set1_ps(delta);
    ZERO8(b);
    for (int64_t i = 0; i < np; i += 64) { EACH8(GDN_UPD, b); }
    float out = red64(b0, b1, b2, b3, b4, b5, b6, b7);
    for (int64_t i = np; i < d; i++) {
        row[i] = fmaf(k[i], delta, row[i]);
        out += row[i] * q[i];
    }
    return out;
}

/* Rows j .. j + GR - 1 of rt_gdn_step side by side (o[0..GR)): the passes of the other rows
 * are independent work while a row's reduction tree and delta wait on each other (a row's step
 * is a chain of ~80 cycles: one row at a time, the 64 lanes' latency bound the scan). qwen35-
 * 0.8b Q8_0 pp512, 2 threads, recur-bench --profile, recurrent ms a token: rows one at a time
 * 0.80, GR 2 0.64-0.66, GR 4 0.58-0.61. Tried: each GR rows through a run of 16 tokens while
 * they stay in L1 (the head's 64 KB state streams through L2 token by token): no faster.
 * Tried (Zen 4, AVX2 only): rows in pairs, each k and q vector loaded once for both (the 64
 * lanes' accumulators made one at a time in red64's pairs, so a row holds 3 vectors, not 8),
 * 8 rows reduced at once by x86_hsum8_ps: the same bits, and in a harness with q, k, v in
 * arrays of their own 7.9 -> 6.5 thousand cycles a head and token (d 128, one thread), but
 * with them in the conv rows as the model has them (24 KB a token, k 8 KB after q) 6.1-6.6
 * -> 6.8-7.1 (10.6 at two offsets of the state), and recur-bench qwen35-0.8b Q8_0 pp512
 * (recurrent 0.56-0.68 against 0.60-0.62 ms a token, gdn_step 5.9 % -> 6.3 % of perf's
 * samples): not kept. In the model the delta job takes ~8.5 thousand cycles a head and token
 * (timed around dn_delta_job), the kernel alone 6.1-6.3 in the model's layout (two processes
 * at once alike); fetching the next token's q, k, v rows ahead did not close the gap. */
#define GR 4
static inline __attribute__((always_inline)) void gdn_rows(int64_t d, float *row, const float *q, const float *k,
                                                            const float *v, float decay, float beta, float scale,
                                                            float *o) {
    float s[GR], dl[GR], u[GR];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < GR; i++) s[i] = gdn_pass1(d, row + i * d, k, decay);
    _Pragma("GCC unroll 4")
    for (int i = 0; i < GR; i++) dl[i] = (v[i] - s[i]) * beta;
    _Pragma("GCC unroll 4")
    for (int i = 0; i < GR; i++) u[i] = gdn_pass2(d, row + i * d, k, q, dl[i]);
    _Pragma("GCC unroll 4")
    for (int i = 0; i < GR; i++) o[i] = u[i] * scale;
}

static void gdn_step(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                     float scale, float *o) {
    int64_t j = 0;
    for (; j + GR <= d; j += GR) gdn_rows(d, S + j * d, q, k, v + j, decay, beta, scale, o + j);
    for (; j < d; j++) {
        float *row = S + j * d;
        o[j] = gdn_pass2(d, row, k, q, (v[j] - gdn_pass1(d, row, k, decay)) * beta) * scale;
    }
}

/* s = s dA + B x_dt and a += s C, lanes 8c .. 8c+7 of the block at i */
#define SSM2_STEP(c, acc)                                                                                         \
    do {                                                                                                          \
        const int64_t e_ = i + 8 * (c);                                                                           \
        const __m256 st_ = _mm256_fmadd_ps(_mm256_loadu_ps(s + e_), va, _mm256_mul_ps(_mm256_loadu_ps(B + e_), vx)); \
        acc = _mm256_fmadd_ps(st_, _mm256_loadu_ps(C + e_), acc);                                                 \
        _mm256_storeu_ps(s + e_, st_);                                                                            \
    } while (0)

static void ssm2_rows(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                      const float *x, float *y) {
    const int64_t np = ds & ~(int64_t)63;
    const __m256 va = _mm256_set1_ps(dA);
    for (int64_t p = 0; p < n; p++, s += ds) {
        const float x_dt = x[p] * dt;
        const __m256 vx = _mm256_set1_ps(x_dt);
        ZERO8(a);
        for (int64_t i = 0; i < np; i += 64) { EACH8(SSM2_STEP, a); }
        float sum = red64(a0, a1, a2, a3, a4, a5, a6, a7);
        for (int64_t i = np; i < ds; i++) {
            const float st = fmaf(s[i], dA, B[i] * x_dt);
            sum = fmaf(st, C[i], sum);
            s[i] = st;
        }
        y[p] = sum;
    }
}

/* ssm2_rows over nt tokens (tensor.h ssm2_tokens), rows of 128 (d_state 128: 2 blocks of 64)
 * in groups of SSM2_R: lane group c of the group's rows (lanes 8c .. 8c+7 of both blocks: the
 * reference's lane c of each block) stays in registers while up to SSM2_T tokens pass, and
 * each token leaves its lane group's partial sum, fmaf(hi, C, fmaf(lo, C, 0)) as the
 * accumulator would hold it, for red64's tree, whose additions each lane group makes as it
 * goes (ssm2_lanes128). The rows and lane groups are independent until that tree, so the bits
 * are ssm2_rows's. Against rows in groups of 8 in L1 stepped token by token (below):
 * 29-31 against 28-65 cycles a row and token alone (one thread, 64 rows, 8 heads, 512 tokens in
 * runs of 16; the older path swings with where its state and B, C rows lie), 24 being the
 * floor of its 3 operations a state vector on the two FMA pipes (gemm_avx2.c lists the
 * pipes); mamba2-370m Q4_K_M pp512 (recur-bench -r 2, 4 alternating pairs) 310-322 -> 317-324
 * t/s, the scan still 17 % of perf's samples. Until the tree's additions moved into the lane
 * groups' loop, all of them came in a pass after it, with the FMA pipes idle: 38.9, 49.8, 29.6
 * -> 37.3, 46.7, 27.6 TSC cycles a row and token (4 heads, 512 tokens in runs of 16, one
 * thread, the two in one process alternating, best of 30, three runs on a noisy machine;
 * /tmp/s30/ssmab.c outside the repo), 16 heads 43.0, 44.3, 42.5 -> 40.1, 39.1, 41.6. */
#define SSM2_R 4
#define SSM2_T 16

/* Lane group c's step of ssm2_group128 over the tokens, and its part of red64's tree for each
 * (token, row): the groups go in the order 0 4 2 6 1 5 3 7 and each adds its partial sum to
 * the ones the tree pairs it with as soon as both exist (slot A: a0, then a0 + a4, then
 * lo = (a0 + a4) + (a2 + a6); B: a2; C: a1, then a1 + a5; D: a3), the last one finishing
 * hi = (a1 + a5) + (a3 + a7) and y = x86_hsum_ps(lo + hi): red64's additions, each where its
 * operands are, inside the FMA-bound loop rather than in a pass of their own after it. */
enum { SSM2_A, SSM2_B, SSM2_C, SSM2_D };
static inline __attribute__((always_inline)) void ssm2_lanes128(int c, int64_t nt, const float *s_in, float *s,
                                                                const float *B, const float *C, int64_t is,
                                                                const float *dA, const float (*xdt)[SSM2_R],
                                                                float (*part)[SSM2_R][4][8], float *y, int64_t ys) {
    enum { ds = 128 };
    const __m256 z = _mm256_setzero_ps();
    __m256 lo[SSM2_R], hi[SSM2_R];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < SSM2_R; r++) {
        lo[r] = _mm256_loadu_ps(s_in + r * ds + 8 * c);
        hi[r] = _mm256_loadu_ps(s_in + r * ds + 64 + 8 * c);
    }
    for (int64_t t = 0; t < nt; t++) {
        const float *Bt = B + t * is + 8 * c, *Ct = C + t * is + 8 * c;
        const __m256 va = _mm256_set1_ps(dA[t]);
        const __m256 bl = _mm256_loadu_ps(Bt), bh = _mm256_loadu_ps(Bt + 64);
        const __m256 cl = _mm256_loadu_ps(Ct), ch = _mm256_loadu_ps(Ct + 64);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < SSM2_R; r++) {
            const __m256 vx = _mm256_set1_ps(xdt[t][r]);
            lo[r] = _mm256_fmadd_ps(lo[r], va, _mm256_mul_ps(bl, vx));
            hi[r] = _mm256_fmadd_ps(hi[r], va, _mm256_mul_ps(bh, vx));
            const __m256 a = _mm256_fmadd_ps(hi[r], ch, _mm256_fmadd_ps(lo[r], cl, z));
            float (*pt)[8] = part[t][r];
            switch (c) {
            case 0: _mm256_store_ps(pt[SSM2_A], a); break;
            case 4: _mm256_store_ps(pt[SSM2_A], _mm256_add_ps(_mm256_load_ps(pt[SSM2_A]), a)); break;
            case 2: _mm256_store_ps(pt[SSM2_B], a); break;
            case 6:
                _mm256_store_ps(pt[SSM2_A], _mm256_add_ps(_mm256_load_ps(pt[SSM2_A]), _mm256_add_ps(_mm256_load_ps(pt[SSM2_B]), a)));
                break;
            case 1: _mm256_store_ps(pt[SSM2_C], a); break;
            case 5: _mm256_store_ps(pt[SSM2_C], _mm256_add_ps(_mm256_load_ps(pt[SSM2_C]), a)); break;
            case 3: _mm256_store_ps(pt[SSM2_D], a); break;
            default: {
                const __m256 h = _mm256_add_ps(_mm256_load_ps(pt[SSM2_C]), _mm256_add_ps(_mm256_load_ps(pt[SSM2_D]), a));
                y[t * ys + r] = x86_hsum_ps(_mm256_add_ps(_mm256_load_ps(pt[SSM2_A]), h));
            }
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < SSM2_R; r++) {
        _mm256_storeu_ps(s + r * ds + 8 * c, lo[r]);
        _mm256_storeu_ps(s + r * ds + 64 + 8 * c, hi[r]);
    }
}

static void ssm2_group128(int64_t nt, const float *s_in, float *s, const float *B, const float *C, const float *x,
                          int64_t is, const float *dA, const float *dt, float *y, int64_t ys) {
    float part[SSM2_T][SSM2_R][4][8] __attribute__((aligned(32)));
    float xdt[SSM2_T][SSM2_R];
    for (int64_t t = 0; t < nt; t++)
        for (int r = 0; r < SSM2_R; r++) xdt[t][r] = x[t * is + r] * dt[t];
    ssm2_lanes128(0, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(4, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(2, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(6, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(1, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(5, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(3, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
    ssm2_lanes128(7, nt, s_in, s, B, C, is, dA, xdt, part, y, ys);
}

/* Other sizes: rows in groups of SSM2_G, each group through all the tokens before the next, so
 * that its state stays in L1 while the tokens pass (a head's 64 rows of 128 floats are L1's
 * 32 KB: token by token the whole head streamed from L2 for every token); the run's B and C
 * rows (SCAN_RUN tokens: 16 KB) stay there too. The rows are independent, so each sees
 * ssm2_rows's operations in its order: the same bits. (AVX2 cannot hold a 128-float row in
 * registers as the AVX-512 kernel does.) Tried again (Zen 4): rows in pairs sharing each B and
 * C load, as the delta rule's tried pairs above, 8 rows reduced at once: 42-46 cycles a row
 * and token either way (ds 128, 64 rows, 512 tokens, 8 heads, one thread), and mamba2-370m
 * pp512's recurrent time unchanged.
 * One token (a decode step) takes this path at every size: its state comes from memory (a
 * layer's is 1 MB in mamba2-370m), and ssm2_group128's lane groups, 32 bytes of 8 places in
 * 4 rows at a time, read it at half the rate that row after row does (/tmp/s30/ssm1.c outside
 * the repo: one thread, 48 layers x 16 heads of state, 25 MB, evicted between passes, best
 * of 5: 4.3-5.0 against 9.6 GB/s; a plain in-place pass 9.8-11.0). */
#define SSM2_G 8

static void ssm2_tokens(int64_t ds, int64_t n, int64_t nt, const float *s_in, float *s, const float *B,
                        const float *C, const float *x, int64_t is, const float *dA, const float *dt, float *y,
                        int64_t ys) {
    int64_t p = 0;
    if (ds == 128 && nt > 1)   /* one token: the rows one after the other (above) */
        for (; p + SSM2_R <= n; p += SSM2_R)
            for (int64_t t0 = 0; t0 < nt; t0 += SSM2_T)   /* the state from s_in, then on in s */
                ssm2_group128(nt - t0 < SSM2_T ? nt - t0 : SSM2_T, (t0 ? s : s_in) + p * ds, s + p * ds,
                              B + t0 * is, C + t0 * is, x + t0 * is + p, is, dA + t0, dt + t0, y + t0 * ys + p, ys);
    for (; p < n; p += SSM2_G) {
        const int64_t g = n - p < SSM2_G ? n - p : SSM2_G;
        if (s_in != s) memcpy(s + p * ds, s_in + p * ds, (size_t)(g * ds) * sizeof(float));
        for (int64_t t = 0; t < nt; t++)
            ssm2_rows(ds, g, s + p * ds, B + t * is, C + t * is, dA[t], dt[t], x + t * is + p, y + t * ys + p);
    }
}

/* rt_expf_libm of 4 floats in double lanes (expf_libm_ref.c: the same operations, so the same
 * bits), for |x| < 88 (the caller checks). */
static inline __m128 expf4_libm(__m128 x) {
    const __m256d invln2n = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_EXPF_INVLN2N));
    const __m256d shift = _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_EXPF_SHIFT));
    const __m256d xd = _mm256_cvtps_pd(x);
    const __m256d t = _mm256_fmadd_pd(xd, invln2n, shift);
    const __m256i ki = _mm256_castpd_si256(t);
    const __m256d r = _mm256_fmsub_pd(invln2n, xd, _mm256_sub_pd(t, shift));
    const __m256i tab = _mm256_i64gather_epi64((const long long *)rt_expf_tab, _mm256_and_si256(ki, _mm256_set1_epi64x(31)), 8);
    const __m256d sc = _mm256_castsi256_pd(_mm256_add_epi64(tab, _mm256_slli_epi64(ki, 47)));
    const __m256d z = _mm256_fmadd_pd(r, _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_EXPF_C0)),
                                      _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_EXPF_C1)));
    const __m256d y0 = _mm256_fmadd_pd(r, _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_EXPF_C2)), _mm256_set1_pd(1.0));
    return _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_fmadd_pd(z, _mm256_mul_pd(r, r), y0), sc));
}

/* rt_expf_libm of 8 floats: the vector formula, or lane by lane where a lane needs the checks. */
static inline __m256 expf8_libm(__m256 x) {
    const __m256i top = _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 20), _mm256_set1_epi32(0x7ff));
    if (_mm256_movemask_epi8(_mm256_cmpgt_epi32(top, _mm256_set1_epi32(RT_EXPF_TOP_MAX)))) {
        float v[8];
        _mm256_storeu_ps(v, x);
        for (int l = 0; l < 8; l++) v[l] = rt_expf_libm(v[l]);
        return _mm256_loadu_ps(v);
    }
    return _mm256_set_m128(expf4_libm(_mm256_extractf128_ps(x, 1)), expf4_libm(_mm256_castps256_ps128(x)));
}

/* rt_logf_libm of 4 positive normal floats (bits ix, int32 lanes) in double lanes
 * (logf_libm_ref.c: the same operations, so the same bits). */
static inline __m128 logf4_libm(__m128i ix) {
    const __m128i tmp = _mm_sub_epi32(ix, _mm_set1_epi32((int)RT_LOGF_OFF));
    const __m128i i2 = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(tmp, 19), _mm_set1_epi32(15)), 1);
    const __m128i iz = _mm_sub_epi32(ix, _mm_and_si128(tmp, _mm_set1_epi32((int)0xff800000u)));
    const double *tab = (const double *)(const void *)rt_logf_tab;
    const __m256d invc = _mm256_i32gather_pd(tab, i2, 8), logc = _mm256_i32gather_pd(tab + 1, i2, 8);
    const __m256d r = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_castsi128_ps(iz)), invc, _mm256_set1_pd(-1.0));
    const __m256d y0 = _mm256_fmadd_pd(_mm256_cvtepi32_pd(_mm_srai_epi32(tmp, 23)),
                                       _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_LOGF_LN2)), logc);
    const __m256d r2 = _mm256_mul_pd(r, r);
    const __m256d y = _mm256_fmadd_pd(_mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_LOGF_A0)), r2,
                                      _mm256_fmadd_pd(r, _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_LOGF_A1)),
                                                      _mm256_castsi256_pd(_mm256_set1_epi64x((long long)RT_LOGF_A2))));
    return _mm256_cvtpd_ps(_mm256_fmadd_pd(r2, y, _mm256_add_pd(r, y0)));
}

/* rt_softplus_libm of 8 floats: expf, 1 + e, logf, then x where x > 20; lanes that need
 * logf's checks (an infinite or NaN 1 + e) go one by one. */
static inline __m256 softplus8_libm(__m256 x) {
    const __m256 a = _mm256_add_ps(_mm256_set1_ps(1.0f), expf8_libm(x));
    const __m256i ia = _mm256_castps_si256(a);
    __m256 l;
    if (_mm256_movemask_epi8(_mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x00800000), ia),
                                             _mm256_cmpgt_epi32(ia, _mm256_set1_epi32(0x7f7fffff))))) {
        float v[8];
        _mm256_storeu_ps(v, a);
        for (int k = 0; k < 8; k++) v[k] = rt_logf_libm(v[k]);
        l = _mm256_loadu_ps(v);
    } else
        l = _mm256_set_m128(logf4_libm(_mm256_extractf128_si256(ia, 1)), logf4_libm(_mm256_castsi256_si128(ia)));
    return _mm256_blendv_ps(l, x, _mm256_cmp_ps(x, _mm256_set1_ps(20.0f), _CMP_GT_OQ));
}

/* v[0..7] (rows) transposed in place: v[k] lane j = old v[j] lane k. */
static inline void transpose8(__m256 v[8]) {
    __m256 a[8], b[8];
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]);
        a[2 * i + 1] = _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]);
    }
    _Pragma("GCC unroll 2")
    for (int i = 0; i < 2; i++)
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            b[4 * i + 2 * h] = _mm256_shuffle_ps(a[4 * i + h], a[4 * i + 2 + h], _MM_SHUFFLE(1, 0, 1, 0));
            b[4 * i + 2 * h + 1] = _mm256_shuffle_ps(a[4 * i + h], a[4 * i + 2 + h], _MM_SHUFFLE(3, 2, 3, 2));
        }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_permute2f128_ps(b[k], b[4 + k], 0x20);
        v[4 + k] = _mm256_permute2f128_ps(b[k], b[4 + k], 0x31);
    }
}

/* rt_ssm1_step, 8 channels at a time for ds a multiple of 8 (up to SSM1_DS): their softplus
 * 8 at a time, each channel's new state 8 elements a vector (the exps 8 at a time), kept on the stack, then turned so
 * that a vector holds one element of the 8 channels and each channel's sum chain runs in its
 * lane, element by element as in the reference. Other channels and sizes: the reference.
 * Until this the model stepped every element with libm's expf, one at a time (recur-bench
 * -t 2 -p 512 -n 64 -r 1 --profile, mamba-130m Q8_0 synth, 3 alternating pairs: recurrent
 * 4.48-4.65 -> 1.06-1.09 ms a prompt token, the whole token 6.38-6.95 -> 3.09-3.62; 4.10-5.37
 * -> 1.15-1.35 ms a generated token, the whole token 10.3-13.8 -> 7.8-8.1). perf then put
 * ssm1_step at ~14 % of the prompt's samples and the softplus's scalar logf and expf at ~4.3 %
 * (gemm_q8_0 40.6 %); with the softplus here, 8 at a time, ssm1_step takes 16.6 % and the
 * libm calls nothing (gemm_q8_0 42.0 %): the scan and its softplus 0.45 -> 0.39 of the gemm. */
#define SSM1_DS 64
void rt_ssm1_step_avx2(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C,
                       const float *dt, const float *x, float *y) {
    int64_t c = 0;
    if (ds % 8 == 0 && ds <= SSM1_DS)
        for (; c + 8 <= n; c += 8) {
            __m256 st[8][SSM1_DS / 8];
            float dsp[8];
            _mm256_storeu_ps(dsp, softplus8_libm(_mm256_loadu_ps(dt + c)));
            for (int j = 0; j < 8; j++) {
                float *sj = s + (c + j) * ds;
                const float *aj = A + (c + j) * ds;
                const __m256 vd = _mm256_set1_ps(dsp[j]), vx = _mm256_set1_ps(x[c + j] * dsp[j]);
                for (int64_t i = 0; i < ds; i += 8) {
                    const __m256 e = expf8_libm(_mm256_mul_ps(vd, _mm256_loadu_ps(aj + i)));
                    const __m256 v = _mm256_fmadd_ps(_mm256_loadu_ps(sj + i), e, _mm256_mul_ps(_mm256_loadu_ps(B + i), vx));
                    _mm256_storeu_ps(sj + i, v);
                    st[j][i / 8] = v;
                }
            }
            __m256 sum = _mm256_setzero_ps();
            for (int64_t q = 0; q < ds / 8; q++) {
                __m256 v[8];
                _Pragma("GCC unroll 8")
                for (int j = 0; j < 8; j++) v[j] = st[j][q];
                transpose8(v);
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++) sum = _mm256_fmadd_ps(v[k], _mm256_set1_ps(C[8 * q + k]), sum);
            }
            _mm256_storeu_ps(y + c, sum);
        }
    if (c < n) rt_ssm1_step(ds, n - c, s + c * ds, A + c * ds, B, C, dt + c, x + c, y + c);
}

#undef ZERO8
#undef EACH8
#undef GDN_DEC
#undef GDN_UPD
#undef SSM2_STEP
#undef SSM2_R
#undef SSM2_T
#undef SSM2_G

/* rt_conv_step, 8 channels per vector (the weights of a channel are K apart: gathered); the
 * channels past the last whole vector as there. */
static void conv_step(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                      float *out) {
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(K));
    int64_t ch = lo;
    for (; ch + 8 <= hi; ch += 8) {
        const float *wc = w + ch * K;
        __m256 sum = _mm256_setzero_ps();
        for (int k = 0; k < K - 1; k++) {
            const float *p = wc + k;
            sum = _mm256_fmadd_ps(_mm256_loadu_ps(state + k * C + ch), _mm256_i32gather_ps(p, idx, 4), sum);
        }
        const float *p = wc + K - 1;
        const __m256 v = _mm256_loadu_ps(in + ch);
        sum = _mm256_fmadd_ps(v, _mm256_i32gather_ps(p, idx, 4), sum);
        for (int k = 0; k < K - 2; k++) _mm256_storeu_ps(state + k * C + ch, _mm256_loadu_ps(state + (k + 1) * C + ch));
        if (K > 1) _mm256_storeu_ps(state + (int64_t)(K - 2) * C + ch, v);
        _mm256_storeu_ps(out + ch, sum);
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

/* conv_run: 8 channels at a time over all n tokens, their K weights gathered once and their
 * K-1 state rows held in registers (K <= 4; each token performs conv_step's operations); other
 * K, and the channels past the last whole vector, go token by token through conv_step. */
static inline __attribute__((always_inline)) void conv_run8(int K, float *state, const float *wc, __m256i idx,
                                                             int64_t C, int64_t ch, int64_t n, const float *in,
                                                             int64_t is, float *out, int64_t os) {
    __m256 wk[4], st[3];
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K; k++) wk[k] = _mm256_i32gather_ps(wc + k, idx, 4);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K - 1; k++) st[k] = _mm256_loadu_ps(state + k * C + ch);
    for (int64_t t = 0; t < n; t++) {
        const __m256 v = _mm256_loadu_ps(in + t * is + ch);
        __m256 sum = _mm256_setzero_ps();
        _Pragma("GCC unroll 4")
        for (int k = 0; k < K - 1; k++) sum = _mm256_fmadd_ps(st[k], wk[k], sum);
        sum = _mm256_fmadd_ps(v, wk[K - 1], sum);
        _Pragma("GCC unroll 4")
        for (int k = 0; k + 1 < K - 1; k++) st[k] = st[k + 1];
        if (K > 1) st[K - 2] = v;
        _mm256_storeu_ps(out + t * os + ch, sum);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < K - 1; k++) _mm256_storeu_ps(state + k * C + ch, st[k]);
}

static void conv_run(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, int64_t n,
                     const float *in, int64_t is, float *out, int64_t os) {
    int64_t ch = lo;
    if (K >= 1 && K <= 4) {
        const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(K));
        for (; ch + 8 <= hi; ch += 8) switch (K) {
            case 1: conv_run8(1, state, w + ch * K, idx, C, ch, n, in, is, out, os); break;
            case 2: conv_run8(2, state, w + ch * K, idx, C, ch, n, in, is, out, os); break;
            case 3: conv_run8(3, state, w + ch * K, idx, C, ch, n, in, is, out, os); break;
            default: conv_run8(4, state, w + ch * K, idx, C, ch, n, in, is, out, os); break;
            }
    }
    if (ch < hi)
        for (int64_t t = 0; t < n; t++) conv_step(state, w, K, C, ch, hi, in + t * is, out + t * os);
}

void rt_fill_scan_avx2(tensor_kernels *k) {
    k->gdn_step = gdn_step;
    k->ssm2_rows = ssm2_rows;
    k->ssm2_tokens = ssm2_tokens;
    k->ssm1_step = rt_ssm1_step_avx2;
    k->conv_step = conv_step;
    k->conv_run = conv_run;
}
