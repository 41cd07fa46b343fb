/* test_ops.c — the per-row ops of the forward pass against hand-computed values. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "tensor/ops.h"

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
    op_rope_apply(a, cs, 4, OP_ROPE_NORM);        /* pairs (0,1), (2,3) */
    assert_float_equal(a[0], 1 * cosf(t0) - 2 * sinf(t0), 1e-5);
    assert_float_equal(a[1], 1 * sinf(t0) + 2 * cosf(t0), 1e-5);
    assert_float_equal(a[3], 3 * sinf(t1) + 4 * cosf(t1), 1e-5);
    op_rope_apply(b, cs, 4, OP_ROPE_NEOX);        /* pairs (0,2), (1,3) */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_l2norm), cmocka_unit_test(test_rope),
        cmocka_unit_test(test_softmax_silu),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
