/* test_rs.c — recurrent state memory: zero states for new sequences, seq_cp copies the whole
 * state, seq_rm removes whole sequences or a tail past pos_max and refuses (RECUR_E_STATE,
 * nothing changed) what would need an earlier state, seq_keep drops the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "memory/rs.h"

enum { N_LAYER = 3, N_CONV = 6, N_SSM = 10, N_SEQ = 4 };

static rs_state *mk(void) {
    rs_params p = { .n_layer = N_LAYER, .n_conv = N_CONV, .n_ssm = N_SSM, .n_seq_max = N_SEQ };
    rs_state *rs;
    char err[128];
    assert_int_equal(rs_new(&p, &rs, err, sizeof err), RECUR_OK);
    return rs;
}

static bool all_equal(rs_state *rs, recur_seq_id seq, float v) {
    for (int il = 0; il < N_LAYER; il++) {
        for (int i = 0; i < N_CONV; i++) if (rs_conv(rs, il, seq)[i] != v) return false;
        for (int i = 0; i < N_SSM; i++) if (rs_ssm(rs, il, seq)[i] != v) return false;
    }
    return true;
}

/* Stands in for a decode of tokens 0..n-1: fills the states with v. */
static void feed(rs_state *rs, recur_seq_id seq, int n, float v) {
    for (int il = 0; il < N_LAYER; il++) {
        for (int i = 0; i < N_CONV; i++) rs_conv(rs, il, seq)[i] = v;
        for (int i = 0; i < N_SSM; i++) rs_ssm(rs, il, seq)[i] = v;
    }
    for (int p = rs_seq_pos_max(rs, seq) + 1; p < n; p++) rs_seq_advance(rs, seq, p);
}

static void test_new_is_zero(void **state) {
    (void)state;
    rs_state *rs = mk();
    for (recur_seq_id s = 0; s < N_SEQ; s++) {
        assert_int_equal(rs_seq_pos_max(rs, s), -1);
        assert_true(all_equal(rs, s, 0.0f));
    }
    /* layers and sequences do not overlap */
    feed(rs, 1, 5, 2.0f);
    assert_true(all_equal(rs, 0, 0.0f));
    assert_true(all_equal(rs, 2, 0.0f));
    assert_true(all_equal(rs, 1, 2.0f));
    assert_int_equal(rs_seq_pos_max(rs, 1), 4);
    rs_free(rs);
    rs_free(NULL);
}

static void test_cp(void **state) {
    (void)state;
    rs_state *rs = mk();
    feed(rs, 0, 8, 3.0f);
    assert_int_equal(rs_seq_cp(rs, 0, 2, -1, -1), RECUR_OK);
    assert_true(all_equal(rs, 2, 3.0f));
    assert_int_equal(rs_seq_pos_max(rs, 2), 7);
    /* the copy is independent */
    rs_ssm(rs, 0, 0)[0] = 9.0f;
    assert_true(rs_ssm(rs, 0, 2)[0] == 3.0f);
    /* a prefix or a range past the start would need an earlier state */
    assert_int_equal(rs_seq_cp(rs, 0, 3, 0, 4), RECUR_E_STATE);
    assert_int_equal(rs_seq_cp(rs, 0, 3, 2, -1), RECUR_E_STATE);
    assert_int_equal(rs_seq_pos_max(rs, 3), -1);
    assert_true(all_equal(rs, 3, 0.0f));
    /* a range covering both sequences is fine; copying an empty sequence empties dst */
    assert_int_equal(rs_seq_cp(rs, 0, 3, 0, 8), RECUR_OK);
    assert_int_equal(rs_seq_cp(rs, 1, 3, -1, -1), RECUR_OK);
    assert_int_equal(rs_seq_pos_max(rs, 3), -1);
    assert_true(all_equal(rs, 3, 0.0f));
    assert_int_equal(rs_seq_cp(rs, 0, N_SEQ, -1, -1), RECUR_E_INVALID);
    assert_int_equal(rs_seq_cp(rs, -1, 0, -1, -1), RECUR_E_INVALID);
    rs_free(rs);
}

static void test_rm(void **state) {
    (void)state;
    rs_state *rs = mk();
    feed(rs, 0, 10, 1.0f);
    feed(rs, 1, 4, 2.0f);
    /* a tail past pos_max: no-op */
    assert_int_equal(rs_seq_rm(rs, 0, 10, -1), RECUR_OK);
    assert_int_equal(rs_seq_rm(rs, 0, 50, 60), RECUR_OK);
    assert_int_equal(rs_seq_pos_max(rs, 0), 9);
    /* a tail, a head or a middle part: refused, nothing changed */
    assert_int_equal(rs_seq_rm(rs, 0, 5, -1), RECUR_E_STATE);
    assert_int_equal(rs_seq_rm(rs, 0, 9, -1), RECUR_E_STATE);
    assert_int_equal(rs_seq_rm(rs, 0, 0, 5), RECUR_E_STATE);
    assert_int_equal(rs_seq_rm(rs, 0, 3, 5), RECUR_E_STATE);
    assert_int_equal(rs_seq_pos_max(rs, 0), 9);
    assert_true(all_equal(rs, 0, 1.0f));
    /* every sequence: refused as a whole when one of them would need an earlier state */
    assert_int_equal(rs_seq_rm(rs, -1, 6, -1), RECUR_E_STATE);
    assert_int_equal(rs_seq_pos_max(rs, 1), 3);
    assert_true(all_equal(rs, 1, 2.0f));
    /* the whole sequence */
    assert_int_equal(rs_seq_rm(rs, 0, -1, -1), RECUR_OK);
    assert_int_equal(rs_seq_pos_max(rs, 0), -1);
    assert_true(all_equal(rs, 0, 0.0f));
    assert_int_equal(rs_seq_rm(rs, 1, 0, 4), RECUR_OK);
    assert_true(all_equal(rs, 1, 0.0f));
    feed(rs, 2, 3, 5.0f);
    feed(rs, 3, 7, 6.0f);
    assert_int_equal(rs_seq_rm(rs, -1, -1, -1), RECUR_OK);
    for (recur_seq_id s = 0; s < N_SEQ; s++) assert_true(all_equal(rs, s, 0.0f));
    assert_int_equal(rs_seq_rm(rs, N_SEQ, -1, -1), RECUR_E_INVALID);
    rs_free(rs);
}

static void test_keep(void **state) {
    (void)state;
    rs_state *rs = mk();
    for (recur_seq_id s = 0; s < N_SEQ; s++) feed(rs, s, 2 + s, 1.0f + (float)s);
    assert_int_equal(rs_seq_keep(rs, 2), RECUR_OK);
    for (recur_seq_id s = 0; s < N_SEQ; s++) {
        assert_int_equal(rs_seq_pos_max(rs, s), s == 2 ? 3 : -1);
        assert_true(all_equal(rs, s, s == 2 ? 3.0f : 0.0f));
    }
    assert_int_equal(rs_seq_keep(rs, -1), RECUR_E_INVALID);
    rs_free(rs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_is_zero), cmocka_unit_test(test_cp), cmocka_unit_test(test_rm),
        cmocka_unit_test(test_keep),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
