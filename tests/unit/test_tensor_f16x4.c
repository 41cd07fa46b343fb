/* test_tensor_f16x4.c — tensor/: the four-row attention helpers dot4_f16_f32 and axpy4_f16.
 *
 * Their contract is bit-identity with four calls of the one-row kernels (tensor.h), in every
 * table, for any length and alignment: attention's outputs must not depend on how query rows
 * are grouped. So every comparison here is memcmp (no tolerance), and the last test shows the
 * comparison catches a 1-ulp difference and a reordered sum. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"
#include "tensor_test_util.h"

/* lengths around the 8/16-lane blocks and their tails, and attention's head sizes */
static const int64_t k_lens[] = { 0, 1, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 127, 128, 129, 256, 1000 };
#define N_LENS (sizeof k_lens / sizeof k_lens[0])
#define MAX_LEN 1000
#define MAX_OFF 3   /* element offsets tried for every row: SIMD loads must not assume alignment */

/* Shared buffers: one F16 row and four float rows, each with room for an offset. */
typedef struct bufs {
    uint16_t h[MAX_LEN + MAX_OFF];
    float    b[4][MAX_LEN + MAX_OFF];
    float    y0[4][MAX_LEN + MAX_OFF], y1[4][MAX_LEN + MAX_OFF];
} bufs;

static void fill(rng *r, bufs *B) {
    for (int i = 0; i < MAX_LEN + MAX_OFF; i++) {
        B->h[i] = rt_f32_to_f16(rng_val(r));
        for (int j = 0; j < 4; j++) B->b[j][i] = rng_val(r), B->y0[j][i] = rng_val(r);
    }
}

static void test_dot4(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static bufs B;
    rng r = { 11 };
    for (int k = 0; k < nt; k++)
        for (size_t l = 0; l < N_LENS; l++)
            for (int off = 0; off <= MAX_OFF; off++) {
                fill(&r, &B);
                const int64_t n = k_lens[l];
                const uint16_t *a = B.h + off;
                /* rows at different offsets; the last case repeats a row (reads may alias) */
                const float *const b[4] = { B.b[0] + off, B.b[1] + (off + 1) % (MAX_OFF + 1), B.b[2],
                                            off == MAX_OFF ? B.b[0] + off : B.b[3] + MAX_OFF - off };
                float got[4], want[4];
                tab[k]->dot4_f16_f32(n, a, b, got);
                for (int j = 0; j < 4; j++) want[j] = tab[k]->dot_f16_f32(n, a, b[j]);
                if (memcmp(got, want, sizeof got) != 0)
                    fail_msg("%s: dot4_f16_f32 n %lld off %d differs from dot_f16_f32", tab[k]->isa, (long long)n, off);
                /* and the one-row kernels agree across tables (tensor.h), so dot4 does too */
                float ref[4];
                tab[0]->dot4_f16_f32(n, a, b, ref);
                if (memcmp(got, ref, sizeof got) != 0)
                    fail_msg("%s: dot4_f16_f32 n %lld off %d differs from the scalar table", tab[k]->isa, (long long)n, off);
            }
}

static void test_axpy4(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static bufs B;
    rng r = { 12 };
    for (int k = 0; k < nt; k++)
        for (size_t l = 0; l < N_LENS; l++)
            for (int off = 0; off <= MAX_OFF; off++) {
                fill(&r, &B);
                const int64_t n = k_lens[l];
                const float alpha[4] = { rng_val(&r), rng_val(&r), -0.0f, rng_val(&r) * 1e-3f };
                memcpy(B.y1, B.y0, sizeof B.y0);
                const int o[4] = { off, (off + 2) % (MAX_OFF + 1), 0, MAX_OFF - off };
                float *const y0[4] = { B.y0[0] + o[0], B.y0[1] + o[1], B.y0[2] + o[2], B.y0[3] + o[3] };
                float *const y1[4] = { B.y1[0] + o[0], B.y1[1] + o[1], B.y1[2] + o[2], B.y1[3] + o[3] };
                tab[k]->axpy4_f16(n, alpha, B.h + off, y0);
                for (int j = 0; j < 4; j++) tab[k]->axpy_f16(n, alpha[j], B.h + off, y1[j]);
                /* whole rows: nothing outside [o, o + n) may be written either */
                if (memcmp(B.y0, B.y1, sizeof B.y0) != 0)
                    fail_msg("%s: axpy4_f16 n %lld off %d differs from axpy_f16", tab[k]->isa, (long long)n, off);
            }
}

/* The checks above are only worth something if a 1-ulp change and a reordered sum are caught:
 * nudge one of dot4's results by 1 ulp and one axpy4 output element, and replace the dot by
 * the same products summed in plain index order; each must fail the comparison used above. */
static void test_comparison_can_fail(void **state) {
    (void)state;
    const tensor_kernels *k = tensor_kernels_active();
    static bufs B;
    rng r = { 13 };
    fill(&r, &B);
    const int64_t n = 128;
    const float *const b[4] = { B.b[0], B.b[1], B.b[2], B.b[3] };
    float got[4], want[4];
    k->dot4_f16_f32(n, B.h, b, got);
    for (int j = 0; j < 4; j++) want[j] = k->dot_f16_f32(n, B.h, b[j]);
    assert_memory_equal(got, want, sizeof got);
    got[2] = nextafterf(got[2], INFINITY);
    assert_true(memcmp(got, want, sizeof got) != 0);

    float *const y[4] = { B.y0[0], B.y0[1], B.y0[2], B.y0[3] };
    const float alpha[4] = { 0.5f, -1.25f, 3.0f, 0.1f };
    memcpy(B.y1, B.y0, sizeof B.y0);
    k->axpy4_f16(n, alpha, B.h, y);
    for (int j = 0; j < 4; j++) k->axpy_f16(n, alpha[j], B.h, B.y1[j]);
    assert_memory_equal(B.y0, B.y1, sizeof B.y0);
    B.y0[3][77] = nextafterf(B.y0[3][77], -INFINITY);
    assert_true(memcmp(B.y0, B.y1, sizeof B.y0) != 0);

    /* a sequential sum of the same products differs from the 16-lane order for some rows */
    int caught = 0;
    for (int t = 0; t < 20; t++) {
        fill(&r, &B);
        float seq = 0.0f;
        for (int64_t i = 0; i < n; i++) seq = fmaf(rt_f16_to_f32(B.h[i]), B.b[0][i], seq);
        const float lanes = k->dot_f16_f32(n, B.h, B.b[0]);
        caught += memcmp(&seq, &lanes, 4) != 0;
    }
    assert_true(caught > 0);
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot4),
        cmocka_unit_test(test_axpy4),
        cmocka_unit_test(test_comparison_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
