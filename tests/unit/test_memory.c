/* test_memory.c — KV cell bookkeeping: alloc, seq_cp sharing, seq_rm, seq_keep, invariants. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "memory/kv.h"

static kv_cache *make(uint32_t cells, uint32_t seqs) {
    kv_params p = { .n_layer = 2, .n_embd_k = 8, .n_embd_v = 12, .n_head_kv = 2, .n_cells = cells, .n_seq_max = seqs };
    kv_cache *kv;
    char err[128];
    assert_int_equal(kv_new(&p, &kv, err, sizeof err), RECUR_OK);
    return kv;
}

static void check(kv_cache *kv) {
    char err[256] = "";
    if (!kv_check(kv, err, sizeof err)) fail_msg("%s", err);
}

static void test_alloc_and_rm(void **state) {
    (void)state;
    kv_cache *kv = make(16, 2);
    for (int p = 0; p < 10; p++) kv_cell_alloc(kv, 0, p);
    assert_int_equal(kv_n_free(kv), 6);
    assert_int_equal(kv_seq_pos_max(kv, 0), 9);
    assert_int_equal(kv_seq_pos_max(kv, 1), -1);
    check(kv);
    assert_int_equal(kv_seq_rm(kv, 0, 5, -1), RECUR_OK);
    assert_int_equal(kv_seq_pos_max(kv, 0), 4);
    assert_int_equal(kv_n_free(kv), 11);
    assert_int_equal(kv_seq_cell(kv, 0, 5), -1);
    assert_true(kv_seq_cell(kv, 0, 4) >= 0);
    check(kv);
    kv_free(kv);
}

static void test_cp_shares_cells(void **state) {
    (void)state;
    kv_cache *kv = make(16, 3);
    for (int p = 0; p < 8; p++) kv_cell_alloc(kv, 0, p);
    assert_int_equal(kv_seq_cp(kv, 0, 1, -1, 4), RECUR_OK);
    assert_int_equal(kv_n_free(kv), 8);              /* shared, not copied */
    assert_int_equal(kv_seq_cell(kv, 1, 3), kv_seq_cell(kv, 0, 3));
    assert_int_equal(kv_seq_pos_max(kv, 1), 3);
    kv_cell_alloc(kv, 1, 4);
    check(kv);
    /* the bulk map says what kv_seq_cell says, position by position */
    for (int s = 0; s < 3; s++)
        for (int p = 0; p < 16; p++) assert_int_equal(kv_seq_cells(kv, s)[p], kv_seq_cell(kv, s, p));
    assert_null(kv_seq_cells(kv, 3));
    assert_null(kv_seq_cells(kv, -1));
    assert_int_equal(kv_seq_rm(kv, 0, -1, -1), RECUR_OK);   /* cells 0..3 stay for seq 1 */
    assert_int_equal(kv_n_free(kv), 11);
    assert_int_equal(kv_seq_pos_max(kv, 1), 4);
    check(kv);
    assert_int_equal(kv_seq_keep(kv, 2), RECUR_OK);
    assert_int_equal(kv_n_free(kv), 16);
    check(kv);
    kv_free(kv);
}

static void test_rows_are_distinct(void **state) {
    (void)state;
    kv_cache *kv = make(4, 1);
    int32_t a = kv_cell_alloc(kv, 0, 0), b = kv_cell_alloc(kv, 0, 1);
    assert_ptr_not_equal(kv_k_head(kv, 0, 0, a), kv_k_head(kv, 0, 0, b));
    assert_ptr_not_equal(kv_k_head(kv, 0, 0, a), kv_k_head(kv, 1, 0, a));
    assert_ptr_not_equal(kv_k_head(kv, 0, 0, a), kv_k_head(kv, 0, 1, a));
    /* head-major: one head's values of consecutive cells are adjacent (kv.h, invariant 1) */
    assert_ptr_equal(kv_k_head(kv, 1, 1, 1), kv_k_head(kv, 1, 1, 0) + 4);
    assert_ptr_equal(kv_v_head(kv, 1, 1, 1), kv_v_head(kv, 1, 1, 0) + 6);
    assert_ptr_equal(kv_k_rows(kv, 1, 1) + 4 * b, kv_k_head(kv, 1, 1, b));
    assert_ptr_equal(kv_v_rows(kv, 1, 0) + 6 * a, kv_v_head(kv, 1, 0, a));
    kv_k_head(kv, 1, 1, b)[3] = 0x3c00;
    kv_v_head(kv, 1, 1, b)[5] = 0x3c00;
    assert_int_equal(kv_k_head(kv, 1, 1, b)[3], 0x3c00);
    kv_free(kv);
}

/* Whole rows in and out: head h's values sit at h * head dim of the row, in both directions. */
static void test_rows_round_trip(void **state) {
    (void)state;
    kv_cache *kv = make(4, 1);
    const int32_t a = kv_cell_alloc(kv, 0, 0), b = kv_cell_alloc(kv, 0, 1);
    uint16_t k[8], v[12], k2[8], v2[12];
    for (int i = 0; i < 8; i++) k[i] = (uint16_t)(100 + i), k2[i] = 7;
    for (int i = 0; i < 12; i++) v[i] = (uint16_t)(200 + i), v2[i] = 7;
    kv_rows_set(kv, 1, b, k, v);
    kv_rows_set(kv, 1, a, k2, v2);   /* a neighbour cell's rows must not reach b's */
    kv_rows_set(kv, 0, b, k2, v2);   /* nor the layer below's */
    for (int h = 0; h < 2; h++) {
        for (int i = 0; i < 4; i++) assert_int_equal(kv_k_head(kv, 1, h, b)[i], 100 + 4 * h + i);
        for (int i = 0; i < 6; i++) assert_int_equal(kv_v_head(kv, 1, h, b)[i], 200 + 6 * h + i);
    }
    kv_rows_get(kv, 1, b, k2, v2);
    assert_memory_equal(k2, k, sizeof k);
    assert_memory_equal(v2, v, sizeof v);
    kv_free(kv);
}

static void test_bad_args(void **state) {
    (void)state;
    kv_params p = { .n_layer = 1, .n_embd_k = 8, .n_embd_v = 8, .n_head_kv = 1, .n_cells = 8, .n_seq_max = KV_MAX_SEQ + 1 };
    kv_cache *kv;
    char err[128] = "";
    assert_int_equal(kv_new(&p, &kv, err, sizeof err), RECUR_E_INVALID);
    assert_null(kv);
    assert_true(err[0] != 0);
    p.n_seq_max = 1;
    p.n_head_kv = 3;   /* does not divide the rows */
    assert_int_equal(kv_new(&p, &kv, err, sizeof err), RECUR_E_INVALID);
    assert_null(kv);
    kv = make(8, 2);
    assert_int_equal(kv_seq_rm(kv, 5, -1, -1), RECUR_E_INVALID);
    assert_int_equal(kv_seq_cp(kv, 0, 9, -1, -1), RECUR_E_INVALID);
    assert_int_equal(kv_seq_keep(kv, -3), RECUR_E_INVALID);
    assert_int_equal(kv_seq_cell(kv, 0, 1000), -1);
    kv_free(kv);
    kv_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alloc_and_rm), cmocka_unit_test(test_cp_shares_cells),
        cmocka_unit_test(test_rows_are_distinct), cmocka_unit_test(test_rows_round_trip),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
