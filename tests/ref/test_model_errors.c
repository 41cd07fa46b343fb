/* test_model_errors.c — bad models and bad batches give a clear status and message, never a
 * crash: files derived from pub-qwen3-F32.gguf with one thing broken, and decode misuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "recur.h"

#define SRC_MODEL RECUR_TESTDATA "/models/pub-qwen3-F32.gguf"

typedef struct mutation {
    const char *drop_key;      /* leave this KV out */
    const char *drop_tensor;   /* leave this tensor out */
    const char *int_key;       /* set this u32 KV to int_val */
    uint32_t    int_val;
    const char *arch;          /* replace general.architecture */
} mutation;

/* Copies one KV (scalar or array) into the writer. */
static void copy_kv(const gguf_file *g, int64_t i, gguf_writer *w, const char *key) {
    gguf_str s;
    gguf_arr a;
    const gguf_kv_type t = gguf_kv_type_of(g, i);
    if (t == GGUF_KV_STRING) {
        assert_true(gguf_kv_str(g, i, &s));
        char *c = strndup(s.ptr, s.len);
        assert_int_equal(gguf_writer_set_str(w, key, c), RECUR_OK);
        free(c);
    } else if (t == GGUF_KV_ARRAY) {
        assert_true(gguf_kv_arr(g, i, &a));
        if (a.elem_type == GGUF_KV_STRING) {
            const char **ptrs = malloc(a.n * sizeof *ptrs);
            uint64_t *lens = malloc(a.n * sizeof *lens);
            for (uint64_t k = 0; k < a.n; k++) { ptrs[k] = a.strs[k].ptr; lens[k] = a.strs[k].len; }
            assert_int_equal(gguf_writer_set_arr_strn(w, key, ptrs, lens, a.n), RECUR_OK);
            free(ptrs);
            free(lens);
        } else {
            assert_int_equal(gguf_writer_set_arr(w, key, a.elem_type, a.data, a.n), RECUR_OK);
        }
    } else {
        int64_t iv;
        double fv;
        if (t == GGUF_KV_FLOAT32 || t == GGUF_KV_FLOAT64) {
            assert_true(gguf_kv_float(g, i, &fv));
            assert_int_equal(gguf_writer_set_f32(w, key, (float)fv), RECUR_OK);
        } else if (t == GGUF_KV_BOOL) {
            assert_true(gguf_kv_int(g, i, &iv));
            assert_int_equal(gguf_writer_set_bool(w, key, iv != 0), RECUR_OK);
        } else {
            assert_true(gguf_kv_int(g, i, &iv));
            assert_int_equal(gguf_writer_set_u32(w, key, (uint32_t)iv), RECUR_OK);
        }
    }
}

/* Writes a copy of SRC_MODEL with the mutation applied; returns its path (static buffer). */
static const char *write_mutant(const mutation *mu) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/recur-test-model-%d.gguf", (int)getpid());
    gguf_file *g;
    char err[256];
    assert_int_equal(gguf_open(SRC_MODEL, &g, err, sizeof err), RECUR_OK);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_kv_key(g, i);
        char *key = strndup(k.ptr, k.len);
        if (mu->drop_key && strcmp(key, mu->drop_key) == 0) { free(key); continue; }
        if (mu->int_key && strcmp(key, mu->int_key) == 0)
            assert_int_equal(gguf_writer_set_u32(w, key, mu->int_val), RECUR_OK);
        else if (mu->arch && strcmp(key, "general.architecture") == 0)
            assert_int_equal(gguf_writer_set_str(w, key, mu->arch), RECUR_OK);
        else
            copy_kv(g, i, w, key);
        free(key);
    }
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (mu->drop_tensor && strcmp(t->name, mu->drop_tensor) == 0) continue;
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, err, sizeof err),
                         RECUR_OK);
    }
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), RECUR_OK);
    gguf_writer_free(w);
    gguf_close(g);
    return path;
}

/* Loading the mutant fails with `want` and a message containing `needle`. */
static void expect_load_error(const mutation *mu, recur_status want, const char *needle) {
    const char *path = write_mutant(mu);
    recur_model *m = (recur_model *)1;
    char err[512] = "";
    recur_status st = recur_model_load(path, NULL, &m, err, sizeof err);
    unlink(path);
    if (st != want || !strstr(err, needle))
        fail_msg("status %s, message '%s'; wanted %s with '%s'", recur_status_str(st), err, recur_status_str(want),
                 needle);
    assert_null(m);
}

static void test_unchanged_copy_loads(void **state) {
    (void)state;
    mutation mu = { 0 };
    const char *path = write_mutant(&mu);
    recur_model *m;
    char err[256];
    assert_int_equal(recur_model_load(path, NULL, &m, err, sizeof err), RECUR_OK);
    recur_model_free(m);
    unlink(path);
}

static void test_missing_tensor(void **state) {
    (void)state;
    mutation mu = { .drop_tensor = "blk.1.ffn_up.weight" };
    expect_load_error(&mu, RECUR_E_FORMAT, "blk.1.ffn_up.weight");
}

static void test_bad_hparams(void **state) {
    (void)state;
    mutation heads = { .int_key = "qwen3.attention.head_count", .int_val = 7 };
    expect_load_error(&heads, RECUR_E_FORMAT, "head_count");
    mutation embd = { .int_key = "qwen3.embedding_length", .int_val = 128 };
    expect_load_error(&embd, RECUR_E_FORMAT, "shape");
    mutation layers = { .int_key = "qwen3.block_count", .int_val = 100000 };
    expect_load_error(&layers, RECUR_E_FORMAT, "block_count");
    mutation more_layers = { .int_key = "qwen3.block_count", .int_val = 6 };
    expect_load_error(&more_layers, RECUR_E_FORMAT, "blk.4.");
    mutation missing = { .drop_key = "qwen3.embedding_length" };
    expect_load_error(&missing, RECUR_E_FORMAT, "embedding_length");
}

static void test_unknown_arch(void **state) {
    (void)state;
    mutation mu = { .arch = "nosucharch" };
    expect_load_error(&mu, RECUR_E_UNSUPPORTED, "qwen3");
}

/* The whole file in memory (malloc'd), its size in *n. */
static unsigned char *read_all(const char *path, size_t *n) {
    FILE *in = fopen(path, "rb");
    assert_non_null(in);
    fseek(in, 0, SEEK_END);
    *n = (size_t)ftell(in);
    fseek(in, 0, SEEK_SET);
    unsigned char *buf = malloc(*n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, *n, in), *n);
    fclose(in);
    return buf;
}

/* A copy of buf's first n bytes fails to load with RECUR_E_FORMAT, a NULL model and a message
 * that names the file, says "truncated" and holds `needle` (what is wrong) and "gguf". */
static void expect_prefix_error(const unsigned char *buf, size_t n, const char *needle) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/recur-test-trunc-%d.gguf", (int)getpid());
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(out);
    recur_model *m = (recur_model *)1;
    char err[512] = "";
    const recur_status st = recur_model_load(path, NULL, &m, err, sizeof err);
    unlink(path);
    if (st != RECUR_E_FORMAT || !strstr(err, needle) || !strstr(err, "truncated") || !strstr(err, "gguf") ||
        strncmp(err, path, strlen(path)) != 0)
        fail_msg("cut at %zu bytes: status %s, message '%s'; wanted FORMAT with '%s'", n, recur_status_str(st), err,
                 needle);
    assert_null(m);
}

/* A file cut short anywhere — in the counts, the metadata, the tensor-info table, right after
 * the header (no tensor data at all), inside the data, one byte before the end — is refused at
 * load with a message that says so, never mapped and run on bytes past the end. */
static void test_truncated_file(void **state) {
    (void)state;
    size_t n;
    unsigned char *buf = read_all(SRC_MODEL, &n);
    gguf_file *g;
    char err[512] = "";
    assert_int_equal(gguf_open(SRC_MODEL, &g, err, sizeof err), RECUR_OK);
    /* file offsets of things inside the header: the mapping's base from a tensor's data */
    const gguf_tensor *t0 = gguf_tensor_at(g, 0);
    const char *base = (const char *)t0->data - gguf_data_offset(g) - t0->offset;
    const size_t kv_mid = (size_t)(gguf_kv_key(g, gguf_n_kv(g) / 2).ptr - base);
    const size_t kv_last = (size_t)(gguf_kv_key(g, gguf_n_kv(g) - 1).ptr - base);
    /* tensor #n/2's info record: its name with the u64 length before it, after the last KV */
    const gguf_tensor *tm = gguf_tensor_at(g, gguf_n_tensors(g) / 2);
    unsigned char rec[8 + GGUF_MAX_NAME];
    const uint64_t name_len = strlen(tm->name);
    memcpy(rec, &name_len, 8);   /* little-endian host, as the file */
    memcpy(rec + 8, tm->name, name_len);
    const unsigned char *hit = memmem(buf + kv_last, gguf_data_offset(g) - kv_last, rec, 8 + name_len);
    assert_non_null(hit);
    const size_t info_mid = (size_t)(hit - buf);
    const size_t data = (size_t)gguf_data_offset(g);
    assert_true(kv_mid < kv_last && kv_last < info_mid && info_mid < data && data < n);
    gguf_close(g);

    expect_prefix_error(buf, 0, "magic");
    expect_prefix_error(buf, 20, "n_kv");                      /* inside the counts */
    /* the counts promise more than the bytes left can hold: caught before the first KV */
    expect_prefix_error(buf, kv_mid + 3, "cannot fit");
    expect_prefix_error(buf, kv_last - 1, "key");              /* inside the last KV's key */
    expect_prefix_error(buf, info_mid + 5, "name");            /* inside a tensor's info */
    expect_prefix_error(buf, info_mid + 8 + name_len + 2, "n_dims");
    expect_prefix_error(buf, data, "past the end of the file");   /* header whole, no data */
    expect_prefix_error(buf, data + 1000, "past the end of the file");
    expect_prefix_error(buf, n / 2, "past the end of the file");
    expect_prefix_error(buf, n - 1, "past the end of the file");
    free(buf);

    recur_model *m;
    assert_int_equal(recur_model_load("/nonexistent/model.gguf", NULL, &m, err, sizeof err), RECUR_E_IO);
    assert_non_null(strstr(err, "/nonexistent/model.gguf"));
}

static void test_bad_batches(void **state) {
    (void)state;
    recur_model *m;
    char err[256];
    assert_int_equal(recur_model_load(SRC_MODEL, NULL, &m, err, sizeof err), RECUR_OK);
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 8;
    cp.n_threads = 1;
    recur_ctx *ctx;
    assert_int_equal(recur_ctx_new(m, &cp, &ctx, err, sizeof err), RECUR_OK);
    recur_token tok[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    recur_pos pos[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    recur_seq_id seq[8] = { 0 };
    recur_batch b = { 8, tok, pos, seq, NULL };
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);
    assert_non_null(recur_get_logits(ctx, 7));
    assert_null(recur_get_logits(ctx, 6));
    assert_null(recur_get_logits(ctx, 99));
    b.n_tokens = 9;                                         /* more than n_batch */
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_E_INVALID);
    b.n_tokens = 8;                                         /* positions do not continue */
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_E_INVALID);
    recur_pos pos2[8] = { 8, 9, 10, 11, 12, 13, 14, 15 };
    b.pos = pos2;
    tok[3] = 100000;                                        /* token outside the vocabulary */
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_E_INVALID);
    assert_non_null(strstr(err, "100000"));
    tok[3] = 4;
    seq[2] = 5;                                             /* sequence id out of range */
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_E_INVALID);
    seq[2] = 0;
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);   /* fills all 16 cells */
    recur_pos pos3[1] = { 16 };
    recur_batch b1 = { 1, tok, pos3, seq, NULL };
    assert_int_equal(recur_decode(ctx, &b1, err, sizeof err), RECUR_E_FULL);
    assert_int_equal(recur_seq_pos_max(ctx, 0), 15);        /* nothing changed */
    assert_int_equal(recur_seq_rm(ctx, 0, 12, -1), RECUR_OK);
    recur_pos pos4[1] = { 12 };
    b1.pos = pos4;
    assert_int_equal(recur_decode(ctx, &b1, err, sizeof err), RECUR_OK);
    recur_ctx_free(ctx);
    recur_ctx_free(NULL);
    recur_model_free(m);
    recur_model_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unchanged_copy_loads), cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_bad_hparams), cmocka_unit_test(test_unknown_arch),
        cmocka_unit_test(test_truncated_file), cmocka_unit_test(test_bad_batches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
