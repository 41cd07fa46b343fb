/* test_snapshot_format.c — the snapshot byte format without a model: save/load round trips of
 * both kinds, every single-bit flip and every truncation refused with RECUR_E_FORMAT, another
 * model's bytes refused with RECUR_E_INVALID, sizes as documented. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <xxhash.h>

#include "memory/snapshot.h"

static const snap_layout lay = { .model_id = 0x1234abcd5678ef00ull, .rs_floats = 37, .n_layer_kv = 2,
                                 .n_embd_k = 8, .n_embd_v = 4, .n_ctx = 32 };

static recur_snapshot *filled(recur_snapshot_kind kind, recur_pos pos) {
    recur_snapshot *s = snap_new(&lay, kind, 31);
    assert_non_null(s);
    for (int64_t i = 0; i < lay.rs_floats; i++) s->rs[i] = (float)i * 0.5f - 3.0f;
    if (kind == RECUR_SNAP_SEQUENCE)
        for (int64_t i = 0; i < (int64_t)(pos + 1) * lay.n_layer_kv * (lay.n_embd_k + lay.n_embd_v); i++)
            s->kv[i] = (uint16_t)(i * 7 + 1);
    s->pos = pos;
    return s;
}

static unsigned char *saved(const recur_snapshot *s, size_t *n) {
    *n = recur_snapshot_bytes(s);
    unsigned char *buf = malloc(*n);
    assert_int_equal(recur_snapshot_save(s, buf, *n), *n);
    return buf;
}

static void round_trip(void **state) {
    (void)state;
    for (int kind = RECUR_SNAP_CHECKPOINT; kind <= RECUR_SNAP_SEQUENCE; kind++) {
        recur_snapshot *s = filled((recur_snapshot_kind)kind, 5);
        size_t n;
        unsigned char *buf = saved(s, &n);
        assert_int_equal(n, snap_size(&lay, (recur_snapshot_kind)kind, 5));
        assert_int_equal(recur_snapshot_save(s, buf, n - 1), 0);   /* too small */
        recur_snapshot *back;
        assert_int_equal(snap_load(&lay, buf, n, &back, NULL, 0), RECUR_OK);
        assert_int_equal(recur_snapshot_pos(back), 5);
        assert_int_equal(recur_snapshot_kind_of(back), kind);
        assert_int_equal(recur_snapshot_model_id(back), lay.model_id);
        assert_memory_equal(back->rs, s->rs, lay.rs_floats * sizeof(float));
        if (kind == RECUR_SNAP_SEQUENCE)
            assert_memory_equal(back->kv, s->kv, 6 * lay.n_layer_kv * (lay.n_embd_k + lay.n_embd_v) * 2);
        recur_snapshot_free(back);
        recur_snapshot_free(s);
        free(buf);
    }
}

static void empty_and_sizes(void **state) {
    (void)state;
    recur_snapshot *s = snap_new(&lay, RECUR_SNAP_CHECKPOINT, -1);
    assert_int_equal(recur_snapshot_pos(s), -1);
    assert_int_equal(recur_snapshot_bytes(s), 0);
    unsigned char buf[512];
    assert_int_equal(recur_snapshot_save(s, buf, sizeof buf), 0);
    recur_snapshot_free(s);
    recur_snapshot_free(NULL);
    assert_null(snap_new(&lay, (recur_snapshot_kind)7, 3));
    assert_int_equal(snap_size(&lay, RECUR_SNAP_CHECKPOINT, 0), 64 + 37 * 4 + 8);
    assert_int_equal(snap_size(&lay, RECUR_SNAP_CHECKPOINT, 20), 64 + 37 * 4 + 8);
    assert_int_equal(snap_size(&lay, RECUR_SNAP_SEQUENCE, 2), 64 + 37 * 4 + 3 * 2 * 12 * 2 + 8);
    assert_int_equal(snap_size(&lay, RECUR_SNAP_SEQUENCE, 32), 0);   /* beyond the context */
}

static void every_flip_and_cut_refused(void **state) {
    (void)state;
    recur_snapshot *s = filled(RECUR_SNAP_SEQUENCE, 3);
    size_t n;
    unsigned char *buf = saved(s, &n);
    recur_snapshot *back = NULL;
    char err[256];
    for (size_t i = 0; i < n; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (unsigned char)(1u << bit);
            assert_int_equal(snap_load(&lay, buf, n, &back, err, sizeof err), RECUR_E_FORMAT);
            assert_null(back);
            buf[i] ^= (unsigned char)(1u << bit);
        }
    for (size_t len = 0; len < n; len++)
        assert_int_equal(snap_load(&lay, buf, len, &back, err, sizeof err), RECUR_E_FORMAT);
    assert_int_equal(snap_load(&lay, buf, n, &back, err, sizeof err), RECUR_OK);
    recur_snapshot_free(back);
    recur_snapshot_free(s);
    free(buf);
}

static void other_model_refused(void **state) {
    (void)state;
    recur_snapshot *s = filled(RECUR_SNAP_CHECKPOINT, 9);
    size_t n;
    unsigned char *buf = saved(s, &n);
    snap_layout other = lay;
    other.model_id ^= 1;
    recur_snapshot *back = NULL;
    char err[256];
    assert_int_equal(snap_load(&other, buf, n, &back, err, sizeof err), RECUR_E_INVALID);
    assert_null(back);
    assert_int_equal(snap_check_model(s, &other, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(snap_check_model(s, &lay, err, sizeof err), RECUR_OK);
    other = lay;
    other.rs_floats = 36;   /* same id, different layout: the sizes disagree */
    assert_int_equal(snap_load(&other, buf, n, &back, err, sizeof err), RECUR_E_FORMAT);
    recur_snapshot_free(s);
    free(buf);
}

/* A header position far beyond the context, with a correct checksum (a crafted file): refused,
 * and the size arithmetic does not overflow (fuzz_snapshot found pos + 1 overflowing at
 * INT32_MAX; seed tests/fuzz/seeds/snapshot/regress-pos-max). */
static void huge_position_refused(void **state) {
    (void)state;
    static const uint32_t poses[] = { 0x7fffffffu, 0x7ffffffeu, 32, 0x80000000u, 0xffffffffu };
    for (int kind = RECUR_SNAP_CHECKPOINT; kind <= RECUR_SNAP_SEQUENCE; kind++) {
        recur_snapshot *s = filled((recur_snapshot_kind)kind, 2);
        size_t n;
        unsigned char *buf = saved(s, &n);
        for (size_t i = 0; i < sizeof poses / sizeof poses[0]; i++) {
            memcpy(buf + 24, &poses[i], 4);
            const uint64_t h = XXH3_64bits(buf, n - 8);
            memcpy(buf + n - 8, &h, 8);
            recur_snapshot *back = NULL;
            char err[256];
            const recur_status st = snap_load(&lay, buf, n, &back, err, sizeof err);
            assert_true(st == RECUR_E_FORMAT || st == RECUR_E_FULL);
            assert_null(back);
        }
        recur_snapshot_free(s);
        free(buf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip), cmocka_unit_test(empty_and_sizes),
        cmocka_unit_test(every_flip_and_cut_refused), cmocka_unit_test(other_model_refused),
        cmocka_unit_test(huge_position_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
