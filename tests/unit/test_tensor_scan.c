/* test_tensor_scan.c — the recurrent scan kernels (gdn_step, ssm2_rows, ssm2_tokens, ssm1_step,
 * conv_step, conv_run) and libm's expf written out (rt_expf_libm):
 * every SIMD table gives the scalar reference's bits (state, outputs), for sizes with and
 * without tails and unaligned rows; the reference itself against a direct double-precision
 * computation of the same recurrence (named tolerance SCAN_REL, relative to the sum of absolute
 * terms). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor.h"
#include "tensor/tensor_impl.h"
#include "tensor_test_util.h"

#define SCAN_REL 1e-5

static float *randv(rng *r, int64_t n, float amp) {
    float *x = malloc((size_t)(n + 1) * sizeof *x);   /* +1: callers use x + 1 (unaligned) */
    assert_non_null(x);
    for (int64_t i = 0; i < n + 1; i++) x[i] = amp * rng_f(r);
    return x;
}

/* The reference against a plain double computation of one step. */
static void check_gdn_math(int64_t d, const float *S0, const float *S1, const float *q, const float *k,
                           const float *v, float decay, float beta, float scale, const float *o) {
    for (int64_t j = 0; j < d; j++) {
        double u = 0, mu = 0, oo = 0, mo = 0;
        for (int64_t i = 0; i < d; i++) {
            u += (double)S0[j * d + i] * decay * k[i];
            mu += fabs((double)S0[j * d + i] * decay * k[i]);
        }
        const double delta = ((double)v[j] - u) * beta;
        for (int64_t i = 0; i < d; i++) {
            const double s = (double)S0[j * d + i] * decay + (double)k[i] * delta;
            if (fabs(s - S1[j * d + i]) > SCAN_REL * (fabs(s) + fabs(v[j]) + mu)) fail_msg("gdn d %lld: S[%lld][%lld]", (long long)d, (long long)j, (long long)i);
            oo += s * q[i];
            mo += fabs(s * q[i]);
        }
        if (fabs(oo * scale - o[j]) > SCAN_REL * (mo * scale + 1e-30)) fail_msg("gdn d %lld: o[%lld] %g vs %g", (long long)d, (long long)j, o[j], oo * scale);
    }
}

static void test_gdn_step(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t dims[] = { 1, 5, 8, 17, 63, 64, 65, 128, 130, 192 };   /* SIMD: groups of 8 rows and the rest */
    rng r = { 3 };
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        const int64_t d = dims[di];
        float *S0 = randv(&r, d * d, 0.5f), *q = randv(&r, d, 0.3f), *k = randv(&r, d, 0.3f), *v = randv(&r, d, 1.0f);
        float *ref = malloc((size_t)d * d * 4 + 4), *got = malloc((size_t)d * d * 4 + 4);
        float *oref = malloc((size_t)d * 4 + 4), *ogot = malloc((size_t)d * 4 + 4);
        const float decay = 0.93f, beta = 0.71f, scale = 1.0f / sqrtf((float)d);
        memcpy(ref, S0 + 1, (size_t)d * d * 4);
        tab[0]->gdn_step(d, ref, q + 1, k + 1, v + 1, decay, beta, scale, oref);
        check_gdn_math(d, S0 + 1, ref, q + 1, k + 1, v + 1, decay, beta, scale, oref);
        for (int t = 1; t < nt; t++) {
            memcpy(got + 1, S0 + 1, (size_t)d * d * 4);   /* odd address: no alignment */
            tab[t]->gdn_step(d, got + 1, q + 1, k + 1, v + 1, decay, beta, scale, ogot + 1);
            if (memcmp(got + 1, ref, (size_t)d * d * 4) != 0) fail_msg("%s: gdn_step state d %lld", tab[t]->isa, (long long)d);
            if (memcmp(ogot + 1, oref, (size_t)d * 4) != 0) fail_msg("%s: gdn_step output d %lld", tab[t]->isa, (long long)d);
        }
        free(S0); free(q); free(k); free(v); free(ref); free(got); free(oref); free(ogot);
    }
}

/* ssm2_rows for n rows of ds: the reference against double math, every table against its bits.
 * n covers the SIMD tables' groups of 8 rows and the rows past the last group. */
static void check_ssm2(const tensor_kernels *tab[], int nt, rng *r, int64_t ds, int64_t n) {
    float *s0 = randv(r, n * ds, 2.0f), *B = randv(r, ds, 1.0f), *C = randv(r, ds, 1.0f), *x = randv(r, n, 1.0f);
    float *ref = malloc((size_t)(n * ds + 1) * 4), *got = malloc((size_t)(n * ds + 1) * 4);
    float *yref = malloc((size_t)n * 4), *ygot = malloc((size_t)(n + 1) * 4);
    const float dA = 0.87f, dt = 0.35f;
    memcpy(ref, s0, (size_t)n * ds * 4);
    tab[0]->ssm2_rows(ds, n, ref, B, C, dA, dt, x, yref);
    for (int64_t p = 0; p < n; p++) {
        const float x_dt = x[p] * dt;
        double y = 0, m = 0;
        for (int64_t i = 0; i < ds; i++) {
            const double st = (double)s0[p * ds + i] * dA + (double)B[i] * x_dt;
            if (fabs(st - ref[p * ds + i]) > SCAN_REL * (fabs(st) + 1)) fail_msg("ssm2 ds %lld: state", (long long)ds);
            y += st * C[i];
            m += fabs(st * C[i]);
        }
        if (fabs(y - yref[p]) > SCAN_REL * (m + 1e-30)) fail_msg("ssm2 ds %lld: y[%lld] %g vs %g", (long long)ds, (long long)p, yref[p], y);
    }
    for (int t = 1; t < nt; t++) {
        memcpy(got + 1, s0, (size_t)n * ds * 4);
        tab[t]->ssm2_rows(ds, n, got + 1, B, C, dA, dt, x, ygot + 1);
        if (memcmp(got + 1, ref, (size_t)n * ds * 4) != 0) fail_msg("%s: ssm2_rows state ds %lld n %lld", tab[t]->isa, (long long)ds, (long long)n);
        if (memcmp(ygot + 1, yref, (size_t)n * 4) != 0) fail_msg("%s: ssm2_rows y ds %lld n %lld", tab[t]->isa, (long long)ds, (long long)n);
    }
    free(s0); free(B); free(C); free(x); free(ref); free(got); free(yref); free(ygot);
}

static void test_ssm2_rows(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t dss[] = { 1, 16, 63, 64, 100, 128, 200 }, ns[] = { 1, 7, 8, 19, 64 };
    rng r = { 4 };
    for (size_t di = 0; di < sizeof dss / sizeof dss[0]; di++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) check_ssm2(tab, nt, &r, dss[di], ns[ni]);
}

/* ssm2_tokens (the tables that have it) against the scalar table's ssm2_rows token by token:
 * nt tokens of interleaved rows (B, C, x of token t at t * is, a stride with room for other
 * columns), state and every y bit for bit; nt covers groups of 8 tokens and the tokens after.
 * Both in place and from one state into another (the source left as it was). */
static void check_ssm2_tokens(const tensor_kernels *tab[], int nt_tab, rng *r, int64_t ds, int64_t n, int64_t nt) {
    const int64_t is = 2 * ds + n + 5, ys = n + 3;
    float *s0 = randv(r, n * ds, 2.0f), *in = randv(r, nt * is, 1.0f), *dA = malloc((size_t)nt * 4), *dt = malloc((size_t)nt * 4);
    float *ref = malloc((size_t)(n * ds) * 4), *got = malloc((size_t)(n * ds) * 4);
    float *yref = calloc((size_t)(nt * ys), 4), *ygot = calloc((size_t)(nt * ys), 4);
    for (int64_t t = 0; t < nt; t++) {
        dA[t] = 0.5f + 0.5f * (float)(t % 7) / 7.0f;
        dt[t] = 0.1f + 0.05f * (float)(t % 5);
    }
    const float *B = in, *C = in + ds, *x = in + 2 * ds;
    memcpy(ref, s0, (size_t)(n * ds) * 4);
    for (int64_t t = 0; t < nt; t++)
        tensor_kernels_scalar()->ssm2_rows(ds, n, ref, B + t * is, C + t * is, dA[t], dt[t], x + t * is, yref + t * ys);
    float *src = malloc((size_t)(n * ds) * 4);
    for (int k = 0; k < nt_tab; k++) {
        if (!tab[k]->ssm2_tokens) continue;
        for (int apart = 0; apart < 2; apart++) {   /* in place, then from src into got (src kept) */
            memcpy(apart ? src : got, s0, (size_t)(n * ds) * 4);
            if (apart) memset(got, 0x7f, (size_t)(n * ds) * 4);
            memset(ygot, 0, (size_t)(nt * ys) * 4);
            tab[k]->ssm2_tokens(ds, n, nt, apart ? src : got, got, B, C, x, is, dA, dt, ygot, ys);
            if (memcmp(got, ref, (size_t)(n * ds) * 4) != 0)
                fail_msg("%s: ssm2_tokens state ds %lld n %lld nt %lld apart %d", tab[k]->isa, (long long)ds, (long long)n,
                         (long long)nt, apart);
            if (memcmp(ygot, yref, (size_t)(nt * ys) * 4) != 0)
                fail_msg("%s: ssm2_tokens y ds %lld n %lld nt %lld apart %d", tab[k]->isa, (long long)ds, (long long)n,
                         (long long)nt, apart);
            if (apart && memcmp(src, s0, (size_t)(n * ds) * 4) != 0)
                fail_msg("%s: ssm2_tokens changed s_in ds %lld n %lld nt %lld", tab[k]->isa, (long long)ds, (long long)n,
                         (long long)nt);
        }
    }
    free(s0); free(in); free(dA); free(dt); free(ref); free(got); free(yref); free(ygot); free(src);
}

static void test_ssm2_tokens(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t dss[] = { 64, 100, 128 }, ns[] = { 1, 9, 64 }, nts[] = { 1, 3, 8, 16, 21 };
    rng r = { 5 };
    int with = 0;
    for (int k = 0; k < nt; k++) with += tab[k]->ssm2_tokens != NULL;
    for (size_t di = 0; di < sizeof dss / sizeof dss[0]; di++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
            for (size_t ti = 0; ti < sizeof nts / sizeof nts[0]; ti++) check_ssm2_tokens(tab, nt, &r, dss[di], ns[ni], nts[ti]);
    if (!with) skip();   /* no table here has it: nothing was compared */
}

/* rt_expf_libm and rt_logf_libm: the special inputs exactly, and within one unit in the last
 * place of libm's expf over [-110, 90] and logf over positive floats subnormal to 2^131 (on
 * Debian 12's glibc with FMA they are those functions bit for bit: a program outside the repo
 * compared all 2^32 inputs of each; other libms round differently, so only the ulp is
 * asserted here). */
static void test_expf_libm(void **state) {
    (void)state;
    assert_true(rt_logf_libm(1.0f) == 0.0f && signbit(rt_logf_libm(1.0f)) == 0);
    assert_true(isinf(rt_logf_libm(0.0f)) && rt_logf_libm(0.0f) < 0);
    assert_true(isnan(rt_logf_libm(-1.0f)) && isnan(rt_logf_libm(NAN)));
    assert_true(isinf(rt_logf_libm(INFINITY)) && rt_logf_libm(INFINITY) > 0);
    assert_true(rt_softplus_libm(25.0f) == 25.0f);
    assert_true(rt_expf_libm(-INFINITY) == 0.0f);
    assert_true(isinf(rt_expf_libm(INFINITY)) && rt_expf_libm(INFINITY) > 0);
    assert_true(isnan(rt_expf_libm(NAN)));
    assert_true(isinf(rt_expf_libm(89.0f)) && rt_expf_libm(-104.0f) == 0.0f);
    assert_true(rt_expf_libm(0.0f) == 1.0f);
    rng r = { 11 };
    for (int i = 0; i < 1 << 20; i++) {
        const float x = -110.0f + 200.0f * (0.5f + 0.5f * rng_f(&r));
        const float got = rt_expf_libm(x), want = expf(x);
        const float ulp = nextafterf(fabsf(want), INFINITY) - fabsf(want);
        if (got != want && !(fabsf(got - want) <= ulp)) fail_msg("expf(%a): %a, libm %a", x, got, want);
        const float lx = ldexpf(0.5f + 0.5f * fabsf(rng_f(&r)), (int)(rng_unif(&r) * 280.0) - 148);   /* subnormals too */
        const float lg = rt_logf_libm(lx), lw = logf(lx);
        const float lu = nextafterf(fabsf(lw), INFINITY) - fabsf(lw);
        if (lg != lw && !(fabsf(lg - lw) <= lu)) fail_msg("logf(%a): %a, libm %a", lx, lg, lw);
    }
}

/* ssm1_step's exps alone, many of them: with the state 1, B 0 and dt 25 (its own softplus)
 * each new state element is expf(25·A) itself, so every table's vector exp meets rt_expf_libm on 2^17 arguments over
 * [-110, 90] (normal, subnormal, zero and infinite results, and the lane-by-lane checks). */
static void test_ssm1_exps(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    enum { DS = 64, N = 2048 };
    rng r = { 13 };
    float *s = malloc((size_t)N * DS * 4), *A = malloc((size_t)N * DS * 4), *y = malloc((size_t)N * 4);
    float B[DS] = { 0 }, C[DS], dt[N], x[N];
    for (int i = 0; i < DS; i++) C[i] = 1.0f;
    for (int c = 0; c < N; c++) dt[c] = 25.0f, x[c] = 1.0f;   /* softplus(25) = 25 */
    for (int i = 0; i < N * DS; i++) A[i] = (-10.0f + 100.0f * rng_f(&r)) / 25.0f;
    for (int k = 0; k < nt; k++) {
        for (int i = 0; i < N * DS; i++) s[i] = 1.0f;
        tab[k]->ssm1_step(DS, N, s, A, B, C, dt, x, y);
        for (int i = 0; i < N * DS; i++)
            if (memcmp(&s[i], &(float){ rt_expf_libm(25.0f * A[i]) }, 4)) fail_msg("%s: exp(%a) %a", tab[k]->isa, 25.0f * A[i], s[i]);
    }
    free(s); free(A); free(y);
}

/* ssm1_step: every table gives the reference's bits (states and y) for sizes that take the
 * 8-channel vectors and for those that do not, with some exps past |x| >= 88 (lane by lane);
 * the reference against the recurrence in double. */
static void test_ssm1_step(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t dss[] = { 16, 8, 12, 64, 72 }, ns[] = { 1, 8, 13, 64 };
    rng r = { 9 };
    for (size_t di = 0; di < sizeof dss / sizeof dss[0]; di++)
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            const int64_t ds = dss[di], n = ns[ni];
            float *s0 = randv(&r, n * ds, 1.0f), *A = randv(&r, n * ds, 1.0f), *B = randv(&r, ds, 1.0f);
            float *C = randv(&r, ds, 1.0f), *x = randv(&r, n, 1.0f), *dt = randv(&r, n, 4.0f);
            for (int64_t i = 0; i < n * ds; i++) A[i] = -4.0f * fabsf(A[i]) - 0.1f;   /* A < 0, as exp(A_log) gives */
            for (int64_t c = 0; c < n; c++) dt[c] = c % 5 == 3 ? 30.0f : c % 7 == 2 ? 95.0f : dt[c];   /* dt > 20; exps past -88 */
            double dsp[64];
            for (int64_t c = 0; c < n; c++) dsp[c] = dt[c] > 20.0f ? dt[c] : log1p(exp((double)dt[c]));
            float *ref = malloc((size_t)(n * ds) * 4), *got = malloc((size_t)(n * ds) * 4);
            float *yref = malloc((size_t)n * 4), *ygot = malloc((size_t)n * 4);
            memcpy(ref, s0, (size_t)(n * ds) * 4);
            tab[0]->ssm1_step(ds, n, ref, A, B, C, dt, x, yref);
            for (int64_t c = 0; c < n; c++) {   /* the reference against the recurrence in double */
                double y = 0, m = 0;
                for (int64_t i = 0; i < ds; i++) {
                    const double st = (double)s0[c * ds + i] * exp(dsp[c] * A[c * ds + i]) + (double)B[i] * x[c] * dsp[c];
                    if (fabs(st - ref[c * ds + i]) > SCAN_REL * (fabs(s0[c * ds + i]) + fabs((double)B[i] * x[c] * dsp[c]) + 1e-30))
                        fail_msg("ssm1 ds %lld: state %lld %lld", (long long)ds, (long long)c, (long long)i);
                    y += st * C[i];
                    m += fabs(st * C[i]);
                }
                if (fabs(y - yref[c]) > SCAN_REL * (m + 1e-30)) fail_msg("ssm1 ds %lld: y[%lld]", (long long)ds, (long long)c);
            }
            for (int k = 1; k < nt; k++) {
                memcpy(got, s0, (size_t)(n * ds) * 4);
                tab[k]->ssm1_step(ds, n, got, A, B, C, dt, x, ygot);
                if (memcmp(got, ref, (size_t)(n * ds) * 4) || memcmp(ygot, yref, (size_t)n * 4))
                    fail_msg("%s: ssm1_step ds %lld n %lld", tab[k]->isa, (long long)ds, (long long)n);
            }
            free(s0); free(A); free(B); free(C); free(x); free(dt); free(ref); free(got); free(yref); free(ygot);
        }
}

/* conv_step: every table gives the reference's bits (state and output, in == out too), for
 * channel ranges with vector tails; the reference against a double sum. */
static void test_conv_step(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 5 };
    const int Ks[] = { 1, 2, 3, 4, 5 };   /* SIMD: K <= 4 permuted, K = 5 gathered */
    const int64_t C = 75, ranges[][2] = { { 0, 75 }, { 16, 48 }, { 3, 70 }, { 74, 75 } };
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++) {
            const int K = Ks[ki];
            const int64_t lo = ranges[ri][0], hi = ranges[ri][1], ns = (K - 1) * C;
            float *st0 = randv(&r, ns, 1.0f), *w = randv(&r, C * K, 1.0f), *in = randv(&r, C, 1.0f);
            float *sref = malloc((size_t)(ns + 1) * 4), *sgot = malloc((size_t)(ns + 1) * 4), oref[75], ogot[75];
            memcpy(sref, st0, (size_t)ns * 4);
            for (int64_t c = 0; c < C; c++) oref[c] = ogot[c] = -7.0f;
            tab[0]->conv_step(sref, w, K, C, lo, hi, in, oref);
            for (int64_t c = 0; c < C; c++) {
                const bool in_r = c >= lo && c < hi;
                double e = in[c] * (double)w[c * K + K - 1], m = fabs(e);
                for (int k = 0; k < K - 1; k++) {
                    e += (double)st0[k * C + c] * w[c * K + k];
                    m += fabs((double)st0[k * C + c] * w[c * K + k]);
                }
                if (!in_r) assert_true(oref[c] == -7.0f);
                else if (fabs(e - oref[c]) > SCAN_REL * (m + 1e-30)) fail_msg("conv K %d ch %lld", K, (long long)c);
                if (K > 1) assert_true(sref[(K - 2) * C + c] == (in_r ? in[c] : st0[(K - 2) * C + c]));
            }
            for (int t = 1; t < nt; t++) {
                memcpy(sgot, st0, (size_t)ns * 4);
                for (int64_t c = 0; c < C; c++) ogot[c] = -7.0f;
                tab[t]->conv_step(sgot, w, K, C, lo, hi, in, ogot);
                if (memcmp(sgot, sref, (size_t)ns * 4) != 0 || memcmp(ogot, oref, sizeof oref) != 0)
                    fail_msg("%s: conv_step K %d [%lld, %lld)", tab[t]->isa, K, (long long)lo, (long long)hi);
                memcpy(sgot, st0, (size_t)ns * 4);   /* in place: out = in */
                memcpy(ogot, in, sizeof ogot);
                tab[t]->conv_step(sgot, w, K, C, lo, hi, ogot, ogot);
                for (int64_t c = lo; c < hi; c++)
                    if (memcmp(&ogot[c], &oref[c], 4) != 0) fail_msg("%s: conv_step in place K %d", tab[t]->isa, K);
            }
            free(st0); free(w); free(in); free(sref); free(sgot);
        }
}

/* conv_run: every table (the scalar one too) gives, state and every output row, the bits of
 * n scalar conv_steps in order: token counts 1 and 7, K 1..5 (SIMD: 1-4 in registers, 5 per
 * token), ranges with vector tails, row strides wider than C, and in place (in == out). */
static void test_conv_run(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 9 };
    enum { C = 75, S = 80, NMAX = 7 };   /* S: the row stride */
    const int64_t ranges[][2] = { { 0, 75 }, { 16, 48 }, { 3, 70 }, { 74, 75 } }, ntoks[] = { 1, 7 };
    for (int K = 1; K <= 5; K++)
        for (size_t ri = 0; ri < sizeof ranges / sizeof ranges[0]; ri++)
            for (size_t ni = 0; ni < 2; ni++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    const int64_t lo = ranges[ri][0], hi = ranges[ri][1], n = ntoks[ni], ns = (K - 1) * C;
                    float *st0 = randv(&r, ns, 1.0f), *w = randv(&r, C * K, 1.0f), *in = randv(&r, S * NMAX, 1.0f);
                    float *sref = malloc((size_t)(ns + 1) * 4), *sgot = malloc((size_t)(ns + 1) * 4);
                    float oref[S * NMAX], ogot[S * NMAX];
                    memcpy(sref, st0, (size_t)ns * 4);
                    for (int e = 0; e < S * NMAX; e++) oref[e] = inplace ? in[e] : -7.0f;
                    for (int64_t t = 0; t < n; t++)
                        tab[0]->conv_step(sref, w, K, C, lo, hi, inplace ? oref + t * S : in + t * S, oref + t * S);
                    for (int k = 0; k < nt; k++) {
                        memcpy(sgot, st0, (size_t)ns * 4);
                        for (int e = 0; e < S * NMAX; e++) ogot[e] = inplace ? in[e] : -7.0f;
                        tab[k]->conv_run(sgot, w, K, C, lo, hi, n, inplace ? ogot : in, S, ogot, S);
                        if (memcmp(sgot, sref, (size_t)ns * 4) != 0 || memcmp(ogot, oref, sizeof oref) != 0)
                            fail_msg("%s: conv_run K %d [%lld, %lld) n %lld in place %d", tab[k]->isa, K,
                                     (long long)lo, (long long)hi, (long long)n, inplace);
                    }
                    free(st0); free(w); free(in); free(sref); free(sgot);
                }
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gdn_step),
        cmocka_unit_test(test_ssm2_rows),
        cmocka_unit_test(test_ssm2_tokens),
        cmocka_unit_test(test_expf_libm),
        cmocka_unit_test(test_ssm1_step),
        cmocka_unit_test(test_ssm1_exps),
        cmocka_unit_test(test_conv_step),
        cmocka_unit_test(test_conv_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
