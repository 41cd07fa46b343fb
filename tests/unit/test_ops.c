/* test_ops.c — the per-row ops of the forward pass against hand-computed values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "tensor/ops.h"
#include "tensor_test_util.h"

static void test_rmsnorm(void **state) {
    (void)state;
    const float x[4] = { 1, -2, 3, -4 }, w[4] = { 1, 2, 0.5f, -1 };
    float y[4];
    op_rmsnorm(y, x, w, 4, 0.0f);
    const float r = 1.0f / sqrtf(30.0f / 4);
    for (int i = 0; i < 4; i++) assert_float_equal(y[i], x[i] * r * w[i], 1e-6);
    op_rmsnorm(y, x, NULL, 4, 1e6f);             /* a huge eps shrinks everything */
    assert_true(fabsf(y[3]) < 0.01f);
}

static void test_l2norm(void **state) {
    (void)state;
    float x[2] = { 3, 4 }, z[2] = { 0, 0 };
    op_l2norm(x, 2, 1e-6f);
    assert_float_equal(x[0], 0.6f, 1e-6);
    assert_float_equal(x[1], 0.8f, 1e-6);
    op_l2norm(z, 2, 1e-6f);                       /* no division by zero */
    assert_float_equal(z[0], 0.0f, 0);
}

/* The many-row forms give each row the bits of one call per row, with every table's
 * sumsq_rows: row counts around its groups (16 and 8 rows side by side, the rest alone), row
 * lengths with a tail past the whole steps of 8 and shorter than one step, with and without a
 * weight, in place and not, contiguous and strided (a narrow stride, which the AVX-512 table
 * groups, and a wide one, which it leaves to the reference). Values spread over 2^-20..2^3 and
 * some tiny ones, so the double sums are not exact and their order shows. */
static void test_norm_rows(void **state) {
    (void)state;
    enum { R = 41, NMAX = 300 };
    static const int lens[] = { 37, 128, 3, 300 };
    static float x[R * 2 * NMAX], w[NMAX], ref[R * 2 * NMAX], got[R * 2 * NMAX];
    uint32_t u = 12345;
    for (int i = 0; i < R * 2 * NMAX; i++) {
        u = u * 1664525u + 1013904223u;
        x[i] = (float)((int)(u >> 8) - (1 << 23)) * ((i % 11) ? 0x1p-20f : 0x1p-40f);
    }
    for (int i = 0; i < NMAX; i++) w[i] = 0.5f + 0.01f * (float)i;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    for (int k = 0; k < nt; k++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
            const int N = lens[l];
            for (int rows = 1; rows <= R; rows += rows < 18 ? 1 : 7)
                for (int wi = 0; wi < 2; wi++) {
                    const float *wp = wi ? w : NULL;
                    for (int r = 0; r < rows; r++) op_rmsnorm(ref + r * N, x + r * N, wp, N, 1e-6f);
                    op_rmsnorm_rows(tab[k], got, x, wp, N, rows, N, 1e-6f);
                    assert_memory_equal(got, ref, (size_t)rows * N * sizeof(float));
                    memcpy(got, x, (size_t)rows * N * sizeof(float));
                    op_rmsnorm_rows(tab[k], got, got, wp, N, rows, N, 1e-6f);
                    assert_memory_equal(got, ref, (size_t)rows * N * sizeof(float));
                    for (int st = N + 3; st <= 2 * N + 3; st += N) {   /* strided, in place */
                        memcpy(got, x, (size_t)rows * st * sizeof(float));
                        memcpy(ref, x, (size_t)rows * st * sizeof(float));
                        for (int r = 0; r < rows; r++) op_rmsnorm(ref + r * st, ref + r * st, wp, N, 1e-6f);
                        op_rmsnorm_rows(tab[k], got, got, wp, N, rows, st, 1e-6f);
                        assert_memory_equal(got, ref, (size_t)rows * st * sizeof(float));
                    }
                }
            for (int rows = 1; rows <= R; rows += rows < 18 ? 1 : 7) {
                memcpy(ref, x, (size_t)rows * N * sizeof(float));
                memcpy(got, x, (size_t)rows * N * sizeof(float));
                for (int r = 0; r < rows; r++) op_l2norm(ref + r * N, N, 1e-6f);
                op_l2norm_rows(tab[k], got, N, rows, 1e-6f);
                assert_memory_equal(got, ref, (size_t)rows * N * sizeof(float));
            }
        }
}

static void test_rope(void **state) {
    (void)state;
    /* head of 6 dims, 4 rotated: angles pos*base^(-2i/4) for i = 0, 1 */
    const int pos = 3;
    const float base = 100.0f;
    float cs[4];
    op_rope_cache(cs, pos, 4, base, 1.0f, NULL);
    const float t0 = 3.0f, t1 = 3.0f * powf(base, -0.5f);
    assert_float_equal(cs[0], cosf(t0), 1e-5);
    assert_float_equal(cs[3], sinf(t1), 1e-5);
    float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6] = { 1, 2, 3, 4, 5, 6 };
    const tensor_kernels *k = tensor_kernels_active();
    op_rope_apply(k, a, cs, 4, OP_ROPE_NORM);        /* pairs (0,1), (2,3) */
    assert_float_equal(a[0], 1 * cosf(t0) - 2 * sinf(t0), 1e-5);
    assert_float_equal(a[1], 1 * sinf(t0) + 2 * cosf(t0), 1e-5);
    assert_float_equal(a[3], 3 * sinf(t1) + 4 * cosf(t1), 1e-5);
    op_rope_apply(k, b, cs, 4, OP_ROPE_NEOX);        /* pairs (0,2), (1,3) */
    assert_float_equal(b[0], 1 * cosf(t0) - 3 * sinf(t0), 1e-5);
    assert_float_equal(b[2], 1 * sinf(t0) + 3 * cosf(t0), 1e-5);
    assert_float_equal(b[3], 2 * sinf(t1) + 4 * cosf(t1), 1e-5);
    assert_float_equal(a[4], 5, 0);               /* dims past n_rot pass through */
    assert_float_equal(b[5], 6, 0);
    const float ff[2] = { 1.0f, 4.0f };           /* frequency factors divide theta */
    op_rope_cache(cs, pos, 4, base, 1.0f, ff);
    assert_float_equal(cs[3], sinf(t1 / 4.0f), 1e-5);
    op_rope_cache(cs, pos, 4, base, 0.5f, NULL);  /* linear scaling */
    assert_float_equal(cs[1], sinf(t0 * 0.5f), 1e-5);
}

/* Every table's rope gives the scalar reference's bits (NORM and NEOX, whole groups of 8
 * pairs and tails), and leaves the dims past n_rot alone. */
static void test_rope_tables(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 5 };
    static const int rots[] = { 2, 4, 14, 16, 18, 32, 48, 64, 96, 128, 130, 256 };
    for (size_t ri = 0; ri < sizeof rots / sizeof rots[0]; ri++)
        for (int neox = 0; neox <= 1; neox++) {
            const int n_rot = rots[ri];
            float cs[256], x[260], ref[260], got[260];
            for (int i = 0; i < n_rot; i++) cs[i] = rng_f(&r);
            for (int i = 0; i < n_rot + 4; i++) x[i] = rng_gauss(&r) * (i % 7 == 0 ? 1e-3f : 10.0f);
            memcpy(ref, x, sizeof x);
            tab[0]->rope_f32(ref, cs, n_rot, neox);
            for (int i = n_rot; i < n_rot + 4; i++) assert_memory_equal(&ref[i], &x[i], 4);
            for (int k = 1; k < nt; k++) {
                memcpy(got, x, sizeof x);
                tab[k]->rope_f32(got, cs, n_rot, neox);
                if (memcmp(got, ref, (size_t)(n_rot + 4) * 4) != 0)
                    fail_msg("%s rope n_rot %d neox %d differs from the scalar reference", tab[k]->isa, n_rot, neox);
            }
        }
}

static void test_softmax_silu(void **state) {
    (void)state;
    const tensor_kernels *k = tensor_kernels_active();
    float x[3] = { 1, 2, -INFINITY };
    op_softmax(k, x, 3);
    assert_float_equal(x[0], 1.0f / (1.0f + expf(1.0f)), 1e-6);
    assert_float_equal(x[0] + x[1], 1.0f, 1e-6);
    assert_float_equal(x[2], 0.0f, 0);
    float big[2] = { 1000.0f, 999.0f };          /* max-subtracted: no overflow */
    op_softmax(k, big, 2);
    assert_false(isnan(big[0]));
    float g[2] = { 0.0f, 2.0f }, u[2] = { 5.0f, 3.0f };
    op_swiglu(k, g, g, u, 2);
    assert_float_equal(g[0], 0.0f, 0);
    assert_float_equal(g[1], 3.0f * 2.0f / (1.0f + expf(-2.0f)), 1e-6);
}

/* ggml's rows: elements below n - n % 16 through the table's vectorised kernels, the rest
 * with libm's expf; the same bits in every table and for any split of the row. */
static void test_ggml_lanes(void **state) {
    (void)state;
    enum { N = 1037 };   /* 64 chunks of 16 and a tail of 13 */
    const int64_t nv = N - N % OP_GGML_LANES;
    const tensor_kernels *tab[3] = { tensor_kernels_scalar(), tensor_kernels_avx2(), tensor_kernels_avx512() };
    static float x[N], g[N], want[N], y[N], z[N];
    uint32_t s = 7;
    for (int i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) * 0x1p-24f * 16.0f - 8.0f;
        g[i] = 0.5f + (float)i * 0.001f;
    }
    tab[0]->silu_f32(nv, x, want);
    int64_t differs = -1;   /* an input the two exps tell apart, also put in the tail */
    for (int64_t i = 0; i < nv; i++)
        if (want[i] != op_silu1(x[i])) differs = i;
    assert_true(differs >= 0);
    x[N - 2] = x[differs];
    for (int64_t i = nv; i < N; i++) want[i] = op_silu1(x[i]);
    for (int k = 0; k < 3; k++) {
        if (!tab[k]) continue;
        op_silu(tab[k], y, x, N);
        assert_memory_equal(y, want, sizeof want);
        const int64_t cut[] = { 0, 5, 16, 500, 1030, N };   /* a split across threads */
        for (int c = 0; c + 1 < 6; c++) op_silu_part(tab[k], z, x, N, cut[c], cut[c + 1]);
        assert_memory_equal(z, want, sizeof want);
        memcpy(z, g, sizeof g);
        op_swiglu(tab[k], z, x, z, N);   /* y aliasing g */
        for (int i = 0; i < N; i++) assert_true(memcmp(&z[i], &(float){ want[i] * g[i] }, 4) == 0);
    }
}

/* op_softmax: exp(x - max) with the vectorised exp on the first n - n % 16 values and libm's
 * on the tail, chunk sums as _mm512_reduce_add_ps in float, everything added in double. */
static void test_softmax_lanes(void **state) {
    (void)state;
    enum { N = 37 };
    const tensor_kernels *sc = tensor_kernels_scalar();
    float x[N], e[N], y[N];
    /* max 0; -20 and -3.3 are inputs where ggml's exp and libm's differ, one in the vector
     * part, one in the tail */
    for (int i = 0; i < N; i++) x[i] = -fabsf(sinf((float)i * 1.7f)) * 6.0f;
    x[3] = -INFINITY;
    x[5] = -20.0f;
    x[35] = -0x1.a66666p+1f;
    float max = -INFINITY;
    for (int i = 0; i < N; i++) max = fmaxf(max, x[i]);
    double sum = 0;
    for (int c = 0; c < 32; c += 16) {
        float d[16], h[8], q[4];
        for (int l = 0; l < 16; l++) d[l] = x[c + l] - max;
        sc->exp_f32(16, d, e + c);
        for (int l = 0; l < 8; l++) h[l] = e[c + l] + e[c + l + 8];
        for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
        sum += (double)((q[0] + q[2]) + (q[1] + q[3]));
    }
    for (int i = 32; i < N; i++) sum += (double)(e[i] = expf(x[i] - max));
    float v35;
    sc->exp_f32(1, &x[35], &v35);
    assert_true(e[5] != expf(x[5]) && e[35] != v35);
    const float inv = (float)(1.0 / sum);
    const tensor_kernels *tab[3] = { sc, tensor_kernels_avx2(), tensor_kernels_avx512() };
    for (int k = 0; k < 3; k++) {
        if (!tab[k]) continue;
        memcpy(y, x, sizeof x);
        op_softmax(tab[k], y, N);
        for (int i = 0; i < N; i++) assert_true(memcmp(&y[i], &(float){ e[i] * inv }, 4) == 0);
    }
    assert_float_equal(y[3], 0.0f, 0);
}

/* op_softmax of every table, many lengths and scales (zeros of both signs, -INFINITY, equal
 * maxima), against ggml_vec_soft_max_f32's steps written out with the scalar exp. */
static void test_softmax_tables(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 11 };
    float x[400], want[400], got[400], d[16];
    for (int n = 1; n <= 400; n += (n < 40 ? 1 : 13)) {
        const float scale = n % 3 == 0 ? 30.0f : n % 3 == 1 ? 1.0f : 1e-3f;
        for (int i = 0; i < n; i++) {
            const uint64_t u = rng_u64(&r);
            x[i] = u % 11 == 0 ? (u % 2 ? 0.0f : -0.0f) : u % 17 == 0 ? -INFINITY : rng_gauss(&r) * scale;
        }
        if (n > 20) x[n / 2] = x[n / 3] = 0.0f, x[n / 4] = -0.0f;   /* zeros may be the maximum */
        float max = -INFINITY;
        for (int i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
        double sum = 0;
        const int nv = n - n % 16;
        for (int c = 0; c < nv; c += 16) {
            for (int l = 0; l < 16; l++) d[l] = x[c + l] - max;
            tab[0]->exp_f32(16, d, want + c);
            float h[8], q[4];
            for (int l = 0; l < 8; l++) h[l] = want[c + l] + want[c + l + 8];
            for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
            sum += (double)((q[0] + q[2]) + (q[1] + q[3]));
        }
        for (int i = nv; i < n; i++) sum += (double)(want[i] = expf(x[i] - max));
        const float inv = (float)(1.0 / sum);
        for (int i = 0; i < n; i++) want[i] *= inv;
        for (int k = 0; k < nt; k++) {
            memcpy(got, x, (size_t)n * 4);
            op_softmax(tab[k], got, n);
            if (memcmp(got, want, (size_t)n * 4) != 0) fail_msg("%s softmax n %d differs", tab[k]->isa, n);
        }
    }
}

/* max_f32 of every table: the largest value at every length and place, -INFINITY for none,
 * NaNs never the answer, zeros of both signs equal. */
static void test_max_tables(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 5 };
    float x[300];
    for (int k = 0; k < nt; k++) assert_true(tab[k]->max_f32(0, x) == -INFINITY);
    for (int n = 1; n <= 300; n += (n < 80 ? 1 : 17))
        for (int at = 0; at < n; at += (n < 20 ? 1 : n / 7)) {
            for (int i = 0; i < n; i++) x[i] = -fabsf(rng_gauss(&r)) - 1.0f;
            if (n > 2) x[(at + 1) % n] = NAN, x[(at + n / 2) % n] = -INFINITY;
            if (n > 64) x[(at + 32) % n] = x[(at + 64) % n] = NAN;   /* after the maximum in its lane */
            x[at] = at % 3 == 0 ? 0.5f : at % 3 == 1 ? -0.0f : -0.25f;
            for (int k = 0; k < nt; k++) {
                const float m = tab[k]->max_f32(n, x);
                if (!(m == x[at])) fail_msg("%s max_f32 n %d at %d: %g, want %g", tab[k]->isa, n, at, m, x[at]);
            }
        }
    for (int i = 0; i < 40; i++) x[i] = NAN;
    for (int k = 0; k < nt; k++) assert_true(tab[k]->max_f32(40, x) == -INFINITY);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_l2norm), cmocka_unit_test(test_norm_rows), cmocka_unit_test(test_rope), cmocka_unit_test(test_rope_tables),
        cmocka_unit_test(test_softmax_silu), cmocka_unit_test(test_ggml_lanes), cmocka_unit_test(test_softmax_lanes),
        cmocka_unit_test(test_softmax_tables), cmocka_unit_test(test_max_tables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
