/* test_tensor_att.c — tensor/: the attention tiles att_scores4, att_wsum4 and att_wsumt4.
 *
 * Their contract (tensor.h) is that every row of a group gets exactly what the one-row
 * helpers give it alone: the score is dot_f16_f32 times the scale (-inf where a position has
 * no row), the weighted sum is axpy_f16 of each visible position into lane row p % 16, then
 * the 16 lane rows added in ggml's tree. The oracle below is built from those helpers of the
 * scalar table; every table, every group size, staggered contexts, missing cells and head
 * sizes with tails are compared with memcmp (no tolerance), and nothing past a row's context
 * may be written. att_wsumt4 (V transposed) must give att_wsum4's bits with NaN in the
 * transposed rows and the probabilities past the contexts. The last test shows the comparison catches a 1-ulp change and a sum taken
 * in another order. */
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

#define MAX_N   1100  /* positions: several of the weighted sums' 128-position blocks and 512-position spans */
#define MAX_D   264   /* head size */
#define SENTINEL 12345.0f
#define LDV     (MAX_N + 20)   /* the transposed V's row stride: not a multiple of 16 */

static const int64_t k_dims[] = { 1, 7, 16, 17, 64, 80, 128, 130, 256, 264 };
static const int32_t k_ns[] = { 1, 3, 4, 5, 16, 17, 33, 100, 300, 513, 700, 1090 };

/* mixed signs and magnitudes, so another summation order would round differently */
/* ggml's 16-lane tree (_mm512_reduce_add_ps): halves, quarters, then the last pairs */
static float tree16(const float l[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

typedef struct data {
    uint16_t        K[MAX_N][MAX_D], V[MAX_N][MAX_D];
    const uint16_t *kp[MAX_N], *vp[MAX_N];
    float           q[4][MAX_D], pr[4][MAX_N + 16];
    uint16_t        VT[MAX_D][LDV];
    float           got[4][MAX_N + 16], want[4][MAX_N + 16];
    float           lanes[16][MAX_D];
} data;

/* Positions p % hole == hole - 1 have no cell (hole 0: all have one). Probabilities are
 * rounded to F16 and may be 0, as attention's are. */
static void fill(rng *r, data *D, int32_t n, int64_t d, int hole) {
    for (int32_t p = 0; p < n; p++) {
        for (int64_t e = 0; e < d; e++) D->K[p][e] = rt_f32_to_f16(rng_val(r)), D->V[p][e] = rt_f32_to_f16(rng_val(r));
        const bool none = hole && p % hole == hole - 1;
        D->kp[p] = none ? NULL : D->K[p];
        D->vp[p] = none ? NULL : D->V[p];
    }
    for (int i = 0; i < 4; i++) {
        for (int64_t e = 0; e < d; e++) D->q[i][e] = rt_f16_to_f32(rt_f32_to_f16(rng_val(r)));
        for (int32_t p = 0; p < n; p++) {
            const float u = fabsf(rng_val(r)) / 40.0f;
            D->pr[i][p] = (rng_u64(r) & 7) == 0 ? 0.0f : rt_f16_to_f32(rt_f32_to_f16(u));
        }
        for (int32_t p = n; p < MAX_N + 16; p++) D->pr[i][p] = NAN;   /* past the context: unused */
    }
    /* V transposed: +0 where a position has no row, F16 NaN past the last position */
    for (int64_t e = 0; e < d; e++)
        for (int32_t p = 0; p < LDV; p++) D->VT[e][p] = p >= n ? 0x7e00 : D->vp[p] ? D->V[p][e] : 0;
}

static void oracle_scores(const data *D, int nr, int64_t dk, const int32_t *n_ctx, float scale, float w[4][MAX_N + 16]) {
    const tensor_kernels *s = tensor_kernels_scalar();
    for (int i = 0; i < nr; i++)
        for (int32_t p = 0; p < n_ctx[i]; p++) w[i][p] = D->kp[p] ? s->dot_f16_f32(dk, D->kp[p], D->q[i]) * scale : -INFINITY;
}

static void oracle_wsum(data *D, int nr, int64_t dv, const int32_t *n_ctx, float w[4][MAX_N + 16]) {
    const tensor_kernels *s = tensor_kernels_scalar();
    for (int i = 0; i < nr; i++) {
        memset(D->lanes, 0, sizeof D->lanes);
        for (int32_t p = 0; p < n_ctx[i]; p++)
            if (D->vp[p]) s->axpy_f16(dv, D->pr[i][p], D->vp[p], D->lanes[p % 16]);
        for (int64_t e = 0; e < dv; e++) {
            float l[16];
            for (int k = 0; k < 16; k++) l[k] = D->lanes[k][e];
            w[i][e] = tree16(l);
        }
    }
}

static void fill_sentinel(float (*a)[MAX_N + 16]) {
    for (int i = 0; i < 4; i++)
        for (int p = 0; p < MAX_N + 16; p++) a[i][p] = SENTINEL;
}

/* Contexts of a group: all n; staggered ends (consecutive tokens); one row seeing little. */
static void contexts(int shape, int nr, int32_t n, int32_t out[4]) {
    for (int i = 0; i < 4; i++) {
        int32_t c = n;
        if (shape == 1) c = n - (nr - 1 - i);
        if (shape == 2 && i == nr - 1) c = n / 3;
        out[i] = c < 1 ? 1 : c;
    }
}

/* cold (the rows fetched ahead, as in a decode step) must not change a bit either. */
static void run_case(const tensor_kernels *k, data *D, rng *r, int nr, int64_t d, int32_t n, int shape, int hole,
                     bool cold) {
    fill(r, D, n, d, hole);
    int32_t n_ctx[4];
    contexts(shape, nr, n, n_ctx);
    const float scale = 1.0f / sqrtf((float)d);
    const float *q[4] = { D->q[0], D->q[1], D->q[2], D->q[3] }, *pr[4] = { D->pr[0], D->pr[1], D->pr[2], D->pr[3] };
    float *got[4] = { D->got[0], D->got[1], D->got[2], D->got[3] };

    fill_sentinel(D->got);
    fill_sentinel(D->want);
    k->att_scores4(nr, d, D->kp, q, n_ctx, scale, got, cold);
    oracle_scores(D, nr, d, n_ctx, scale, D->want);
    if (memcmp(D->got, D->want, sizeof D->got) != 0)
        fail_msg("%s: att_scores4 nr %d d %lld n %d shape %d hole %d cold %d differs from the one-row dots", k->isa,
                 nr, (long long)d, n, shape, hole, cold);

    fill_sentinel(D->got);
    fill_sentinel(D->want);
    k->att_wsum4(nr, d, D->vp, pr, n_ctx, got, cold);
    oracle_wsum(D, nr, d, n_ctx, D->want);
    if (memcmp(D->got, D->want, sizeof D->got) != 0)
        fail_msg("%s: att_wsum4 nr %d d %lld n %d shape %d hole %d cold %d differs from the lane sums", k->isa, nr,
                 (long long)d, n, shape, hole, cold);

    if (!k->att_wsumt4) return;
    fill_sentinel(D->got);
    k->att_wsumt4(nr, d, &D->VT[0][0], LDV, pr, n_ctx, got);
    if (memcmp(D->got, D->want, sizeof D->got) != 0)
        fail_msg("%s: att_wsumt4 nr %d d %lld n %d shape %d hole %d differs from the lane sums", k->isa, nr,
                 (long long)d, n, shape, hole);
}

static void test_tiles_match_one_row(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static data D;
    rng r = { 21 };
    for (int t = 0; t < nt; t++)
        for (size_t a = 0; a < sizeof k_dims / sizeof k_dims[0]; a++)
            for (size_t b = 0; b < sizeof k_ns / sizeof k_ns[0]; b++)
                for (int nr = 1; nr <= 4; nr++)
                    for (int shape = 0; shape < 3; shape++)
                        run_case(tab[t], &D, &r, nr, k_dims[a], k_ns[b], shape, (int)(b % 3) * 5, (a + b + shape) % 2);
}

/* A group's rows get the same bits as each row alone (nr = 1), for every table. */
static void test_grouping_invariant(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static data D;
    static float alone[4][MAX_N + 16];
    rng r = { 22 };
    for (int t = 0; t < nt; t++) {
        const tensor_kernels *k = tab[t];
        fill(&r, &D, 200, 128, 9);
        const int32_t n_ctx[4] = { 197, 198, 199, 200 };
        const float *q[4] = { D.q[0], D.q[1], D.q[2], D.q[3] }, *pr[4] = { D.pr[0], D.pr[1], D.pr[2], D.pr[3] };
        float *got[4] = { D.got[0], D.got[1], D.got[2], D.got[3] };
        k->att_wsum4(4, 128, D.vp, pr, n_ctx, got, true);
        for (int i = 0; i < 4; i++) {
            float *one[4] = { alone[i] };
            const float *pri[4] = { D.pr[i] };
            k->att_wsum4(1, 128, D.vp, pri, &n_ctx[i], one, false);
        }
        for (int i = 0; i < 4; i++) assert_memory_equal(D.got[i], alone[i], 128 * sizeof(float));
        k->att_scores4(4, 128, D.kp, q, n_ctx, 0.125f, got, true);
        for (int i = 0; i < 4; i++) {
            float *one[4] = { alone[i] };
            const float *qi[4] = { D.q[i] };
            k->att_scores4(1, 128, D.kp, qi, &n_ctx[i], 0.125f, one, false);
            assert_memory_equal(D.got[i], alone[i], (size_t)n_ctx[i] * sizeof(float));
        }
    }
}

/* f16_cols (att_wsumt4's transposition) of every table: each row's values in its column, +0
 * for a missing row, nothing else of dst written; counts and head sizes off the 8 x 8 blocks. */
static void test_f16_cols(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static data D;
    static uint16_t got[MAX_D][LDV];
    rng r = { 24 };
    const int32_t ns[] = { 1, 7, 8, 9, 16, 23, 64, 100 };
    const int64_t ds[] = { 1, 7, 8, 9, 16, 130 };
    for (int t = 0; t < nt; t++)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof ds / sizeof ds[0]; b++) {
                const int32_t n = ns[a], off = (int32_t)(a % 3);   /* columns from off: unaligned starts */
                fill(&r, &D, n, ds[b], 4);
                memset(got, 0xAB, sizeof got);
                tab[t]->f16_cols(n, ds[b], D.vp, &got[0][off], LDV);
                for (int64_t e = 0; e < MAX_D; e++)
                    for (int32_t p = 0; p < LDV; p++) {
                        const bool in = e < ds[b] && p >= off && p < off + n;
                        const uint16_t want = !in ? 0xABAB : D.vp[p - off] ? D.V[p - off][e] : 0;
                        if (got[e][p] != want)
                            fail_msg("%s: f16_cols n %d dv %lld: [%lld][%d] = %04x, not %04x", tab[t]->isa, n,
                                     (long long)ds[b], (long long)e, p, got[e][p], want);
                    }
            }
}

/* The comparisons above are worth something only if they can fail: a 1-ulp nudge is caught,
 * and the same products summed position by position (one chain) differ from the lane order. */
static void test_comparison_can_fail(void **state) {
    (void)state;
    const tensor_kernels *k = tensor_kernels_active();
    static data D;
    rng r = { 23 };
    fill(&r, &D, 100, 64, 0);
    const int32_t n_ctx[4] = { 100, 100, 100, 100 };
    const float *pr[4] = { D.pr[0], D.pr[1], D.pr[2], D.pr[3] };
    float *got[4] = { D.got[0], D.got[1], D.got[2], D.got[3] };
    k->att_wsum4(4, 64, D.vp, pr, n_ctx, got, false);
    oracle_wsum(&D, 4, 64, n_ctx, D.want);
    assert_memory_equal(D.got, D.want, sizeof D.got);
    D.got[1][5] = nextafterf(D.got[1][5], INFINITY);
    assert_true(memcmp(D.got, D.want, sizeof D.got) != 0);
    int caught = 0;
    for (int64_t e = 0; e < 64; e++) {
        float chain = 0.0f;
        for (int32_t p = 0; p < 100; p++) chain = fmaf(D.pr[0][p], rt_f16_to_f32(D.V[p][e]), chain);
        caught += memcmp(&chain, &D.want[0][e], 4) != 0;
    }
    assert_true(caught > 0);
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiles_match_one_row),
        cmocka_unit_test(test_grouping_invariant),
        cmocka_unit_test(test_f16_cols),
        cmocka_unit_test(test_comparison_can_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
