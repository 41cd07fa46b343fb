/* test_tensor_prefetch.c — tensor/prefetch.c: the choice between the single-token kernels
 * with and without software prefetch (tensor.h tensor_gemv.lean).
 *  - the chooser runs epochs of RT_PF_EPOCH bytes in one mode; it measures each way three
 *    epochs first, then takes the faster one (the lower median of its last epochs) and
 *    explores the other in about one epoch in 16, fewer the slower the other is, and follows
 *    when the faster one changes; an outlier (a stall, a cold first call) does not flip the
 *    choice; an epoch's sample is its calls' time over their bytes; a call recorded in the
 *    mode of an epoch that has ended does not count in the next;
 *  - the mode switch ignores unknown values (recur.h's refuses them);
 *  - tensor_matmul gives the same bits with prefetch on, off and chosen, and times its calls
 *    in the chosen mode only. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "core/threadpool.h"
#include "recur.h"
#include "tensor/tensor_impl.h"
#include "tensor_test_util.h"

#define MIB ((uint64_t)1 << 20)
#define EPOCH_MIB (RT_PF_EPOCH / MIB)

/* Lean picks in n calls of a whole epoch each, recorded as taking ns_on or ns_off per MiB. */
static int run_calls(rt_pf_chooser *c, int n, uint64_t ns_on, uint64_t ns_off) {
    int lean = 0;
    for (int i = 0; i < n; i++) {
        const bool l = rt_pf_pick_lean(c);
        lean += l;
        rt_pf_record(c, l, (l ? ns_off : ns_on) * EPOCH_MIB, RT_PF_EPOCH);
    }
    return lean;
}

/* One call of a whole epoch, ns per MiB, in mode lean. */
static void record(rt_pf_chooser *c, bool lean, uint64_t ns) { rt_pf_record(c, lean, ns * EPOCH_MIB, RT_PF_EPOCH); }

static void test_chooser(void **state) {
    (void)state;
    rt_pf_chooser c = { 0 };
    /* first each way three times, in turn: prefetch, then lean */
    for (int i = 0; i < 3; i++) {
        assert_false(rt_pf_pick_lean(&c));
        record(&c, false, 1000);
        assert_true(rt_pf_pick_lean(&c));
        record(&c, true, 2000);
    }
    assert_int_equal(rt_pf_estimate(&c, false), 1000);
    assert_int_equal(rt_pf_estimate(&c, true), 2000);
    /* prefetch twice as fast: lean only to explore, one call in 16 · 16 */
    int lean = run_calls(&c, 3200, 1000, 2000);
    assert_in_range(lean, 3200 / 1024, 3200 / 64);
    /* the neighbours arrive: lean now takes half the time; within a few hundred calls it is
     * the choice, prefetch explored now and then */
    run_calls(&c, 800, 2000, 1000);
    lean = run_calls(&c, 3200, 2000, 1000);
    assert_in_range(lean, 3200 - 3200 / 32, 3200 - 2);
    assert_int_equal(rt_pf_estimate(&c, true), 1000);
}

/* An epoch is many calls: its sample is their time over their bytes, the mode holds until it
 * has read RT_PF_EPOCH bytes, and a call that ran in the mode of an ended epoch (another
 * context's, begun before it ended) is counted as a call but not in the new epoch. */
static void test_epochs(void **state) {
    (void)state;
    rt_pf_chooser c = { 0 };
    const uint64_t call = RT_PF_EPOCH / 4;   /* four calls an epoch */
    for (int i = 0; i < 4; i++) {
        assert_false(rt_pf_pick_lean(&c));
        rt_pf_record(&c, false, (i == 1 ? 3000 : 1000) * (call / MIB), call);
    }
    assert_int_equal(rt_pf_estimate(&c, false), 1500);   /* (3 · 1000 + 3000) / 4 */
    assert_true(rt_pf_pick_lean(&c));   /* warm-up: lean's turn */
    rt_pf_record(&c, false, 1, call);   /* a late call of the ended epoch */
    for (int i = 0; i < 4; i++) {
        assert_true(rt_pf_pick_lean(&c));
        rt_pf_record(&c, true, 2000 * (call / MIB), call);
    }
    assert_int_equal(rt_pf_estimate(&c, true), 2000);
    assert_int_equal(c.calls[0], 5);
    assert_int_equal(c.calls[1], 4);
    assert_int_equal(c.epochs[0], 1);
    assert_int_equal(c.epochs[1], 1);
}

/* A slow first sample (a cold call, or one the machine held back) does not hold its mode back.
 * The case this chooser was written for: the output head of qwen3-0.6b Q4_K_M, one call a
 * token, whose first prefetch call took 9 times its usual; a mean-based chooser then ran it
 * lean, at half the speed, for hundreds of tokens. */
static void test_first_samples(void **state) {
    (void)state;
    rt_pf_chooser c = { 0 };
    record(&c, false, 138542);   /* prefetch's first epoch: cold */
    const int lean = run_calls(&c, 400, 15107, 30827);
    assert_int_equal(rt_pf_estimate(&c, false), 15107);
    assert_in_range(lean, 3, 400 / 16);   /* its three warm-up epochs, then one in 256 */
    /* the same with lean's first epoch the cold one */
    rt_pf_chooser d = { 0 };
    record(&d, false, 15107);
    record(&d, true, 300000);   /* lean's first epoch: cold */
    assert_in_range(run_calls(&d, 400, 30827, 15107), 400 - 400 / 16, 400 - 2);
}

/* How often the slower mode is explored: one call in 16 while the two are within 1/16 of each
 * other, one in 16 · 16 · gap beyond (exploring costs at most 1/256 of the time while the gap
 * is under 1), at most one in 256. */
static void test_explore_rate(void **state) {
    (void)state;
    rt_pf_chooser c = { 0 };
    int lean = run_calls(&c, 3200, 1000, 1040);   /* 4 % apart: 1 in 16 */
    assert_in_range(lean, 3200 / 32, 3200 / 8);
    rt_pf_chooser d = { 0 };
    lean = run_calls(&d, 32000, 1000, 1500);   /* half as slow again: 1 in 128 */
    assert_in_range(lean, 32000 / 256, 32000 / 64);
    rt_pf_chooser e = { 0 };
    lean = run_calls(&e, 32000, 1000, 100000);   /* far slower: 1 in 256, still explored */
    assert_in_range(lean, 32000 / 512, 32000 / 128);
}

/* Stalls (the OS or the machine's neighbours hold a thread back for milliseconds) in some
 * samples of the faster mode, even three of its last eight: its estimate stays, and so does
 * the choice. */
static void test_outlier(void **state) {
    (void)state;
    rt_pf_chooser c = { 0 };
    run_calls(&c, 40, 1000, 1300);
    for (int stalls = 0; stalls < 3;) {   /* three prefetch epochs held back (lean ones explored between) */
        const bool lean = rt_pf_pick_lean(&c);
        record(&c, lean, lean ? 1300 : 2000000);
        stalls += !lean;
    }
    assert_int_equal(rt_pf_estimate(&c, false), 1000);
    assert_true(run_calls(&c, 160, 1000, 1300) < 160 / 4);
    /* but when most of them take longer, that is the machine now: lean takes over */
    assert_true(run_calls(&c, 160, 2000, 1300) > 160 / 2);
    assert_int_equal(rt_pf_estimate(&c, false), 2000);
}

static void test_mode(void **state) {
    (void)state;
    /* recur.h's names for the modes */
    char m_api[8];
    snprintf(m_api, sizeof m_api, "%s", recur_prefetch_mode());
    assert_int_equal(recur_prefetch_set("off"), RECUR_OK);
    assert_string_equal(recur_prefetch_mode(), "off");
    assert_int_equal(tensor_gemv_prefetch_get(), TENSOR_PF_OFF);
    assert_int_equal(recur_prefetch_set("fast"), RECUR_E_INVALID);
    assert_int_equal(recur_prefetch_set(NULL), RECUR_E_INVALID);
    assert_string_equal(recur_prefetch_mode(), "off");
    assert_int_equal(recur_prefetch_set("on"), RECUR_OK);
    assert_string_equal(recur_prefetch_mode(), "on");
    assert_int_equal(recur_prefetch_set(m_api), RECUR_OK);
    for (int m = TENSOR_PF_AUTO; m <= TENSOR_PF_OFF; m++)
        assert_int_equal(tensor_gemv_prefetch_parse(tensor_gemv_prefetch_name(m)), m);
    assert_int_equal(tensor_gemv_prefetch_parse("ON"), -1);
    assert_int_equal(tensor_gemv_prefetch_parse(""), -1);
    const int m0 = tensor_gemv_prefetch_get();
    tensor_gemv_prefetch_set(TENSOR_PF_OFF);
    assert_int_equal(tensor_gemv_prefetch_get(), TENSOR_PF_OFF);
    tensor_gemv_prefetch_set(7);
    tensor_gemv_prefetch_set(-1);
    assert_int_equal(tensor_gemv_prefetch_get(), TENSOR_PF_OFF);
    tensor_gemv_prefetch_set(m0);
    assert_int_equal(tensor_gemv_prefetch_get(), m0);
}

/* One token through a Q8_0 matrix of 1024 x 512 (557 KB: timed) on two threads. */
static void test_matmul_modes(void **state) {
    (void)state;
    enum { NIN = 1024, NOUT = 512 };
    const tensor_kernels *k = tensor_kernels_active();
    rng r = { 77 };
    float *w = xalloc((size_t)NIN * NOUT * sizeof(float)), x[NIN];
    for (int64_t i = 0; i < (int64_t)NIN * NOUT; i++) w[i] = rng_val(&r);
    for (int i = 0; i < NIN; i++) x[i] = rng_val(&r);
    uint8_t *W = xalloc(tensor_row_bytes(GGUF_T_Q8_0, NIN) * NOUT);
    k->from_float[GGUF_T_Q8_0](w, W, (int64_t)NIN * NOUT);
    void *scratch = aligned_alloc(64, (tensor_matmul_scratch_bytes(GGUF_T_Q8_0, NIN, 1) + 63) / 64 * 64);
    assert_non_null(scratch);
    tp_pool *pool = tp_new(2);
    assert_non_null(pool);
    float ref[NOUT], y[NOUT];
    const int m0 = tensor_gemv_prefetch_get();
    tensor_gemv_prefetch_set(TENSOR_PF_ON);
    tensor_matmul(pool, k, GGUF_T_Q8_0, W, NIN, NOUT, x, 1, ref, NOUT, scratch);
    static const int modes[] = { TENSOR_PF_OFF, TENSOR_PF_AUTO, TENSOR_PF_ON };
    const bool twin = k->gemv[GGUF_T_Q8_0].lean != NULL;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        tensor_gemv_prefetch_set(modes[m]);
        uint64_t c0[2], c1[2];
        tensor_gemv_prefetch_stats(c0);
        for (int run = 0; run < 40; run++) {
            memset(y, 0, sizeof y);
            tensor_matmul(pool, k, GGUF_T_Q8_0, W, NIN, NOUT, x, 1, y, NOUT, scratch);
            assert_memory_equal(y, ref, sizeof y);
        }
        tensor_gemv_prefetch_stats(c1);
        /* only the chosen mode times its calls (all 40 here, when the kernel has a twin) */
        const uint64_t timed = (c1[0] - c0[0]) + (c1[1] - c0[1]);
        assert_int_equal(timed, modes[m] == TENSOR_PF_AUTO && twin ? 40 : 0);
    }
    tensor_gemv_prefetch_set(m0);
    tp_free(pool);
    free(scratch); free(W); free(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chooser),
        cmocka_unit_test(test_epochs),
        cmocka_unit_test(test_first_samples),
        cmocka_unit_test(test_explore_rate),
        cmocka_unit_test(test_outlier),
        cmocka_unit_test(test_mode),
        cmocka_unit_test(test_matmul_modes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
