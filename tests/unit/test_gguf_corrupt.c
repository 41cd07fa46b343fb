/* test_gguf_corrupt.c — malformed GGUF files, built in memory from a valid written file and
 * from a real model's bytes: each must fail with RECUR_E_FORMAT and a message, never crash or
 * allocate by a hostile count. Every buffer handed to the reader is an exact-size copy, so the
 * sanitizer build catches any read past its end. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf_sample.h"

/* ---- a map of where each header field of a valid file sits -------------------------------- */

typedef struct field_map {
    int64_t n_kv, n_t;
    size_t  kv_at[64], kv_type[64], kv_val[64];      /* key length, type id, value */
    size_t  t_at[64], t_ndims[64], t_type[64], t_off[64];
    size_t  end;                                     /* end of the tensor infos */
} field_map;

static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static size_t skip_value(const uint8_t *b, size_t off, uint32_t t) {
    static const uint8_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    if (t == GGUF_KV_STRING) return off + 8 + ld64(b + off);
    if (t != GGUF_KV_ARRAY) return off + sz[t];
    uint32_t et = ld32(b + off);
    uint64_t n = ld64(b + off + 4);
    off += 12;
    if (et != GGUF_KV_STRING) return off + n * sz[et];
    for (uint64_t i = 0; i < n; i++) off += 8 + ld64(b + off);
    return off;
}

/* Walks a valid file (only KVs and tensors up to 64 are recorded). */
static void map_fields(const uint8_t *b, field_map *m) {
    memset(m, 0, sizeof *m);
    m->n_t = (int64_t)ld64(b + 8);
    m->n_kv = (int64_t)ld64(b + 16);
    size_t off = 24;
    for (int64_t i = 0; i < m->n_kv; i++) {
        size_t at = off, type = at + 8 + ld64(b + at), val = type + 4;
        if (i < 64) { m->kv_at[i] = at; m->kv_type[i] = type; m->kv_val[i] = val; }
        off = skip_value(b, val, ld32(b + type));
    }
    for (int64_t i = 0; i < m->n_t; i++) {
        size_t at = off, nd = at + 8 + ld64(b + at), ty = nd + 4 + 8 * ld32(b + nd);
        if (i < 64) { m->t_at[i] = at; m->t_ndims[i] = nd; m->t_type[i] = ty; m->t_off[i] = ty + 4; }
        off = ty + 12;
    }
    m->end = off;
}

static int64_t kv_index(const uint8_t *b, const field_map *m, const char *key) {
    for (int64_t i = 0; i < m->n_kv && i < 64; i++)
        if (ld64(b + m->kv_at[i]) == strlen(key) && !memcmp(b + m->kv_at[i] + 8, key, strlen(key))) return i;
    return -1;
}

/* ---- expectations ------------------------------------------------------------------------- */

/* Opens an exact-size copy of buf[0..len): it must fail with RECUR_E_FORMAT and a message
 * starting with "gguf:" and containing needle (when not NULL). */
static void expect_format(const uint8_t *buf, size_t len, const char *needle) {
    uint8_t *copy = malloc(len ? len : 1);
    memcpy(copy, buf, len);
    gguf_file *g = (gguf_file *)&g;
    char err[512] = "";
    recur_status st = gguf_open_memory(len ? copy : NULL, len, &g, err, sizeof err);
    if (st != RECUR_E_FORMAT || (needle && !strstr(err, needle)))
        fprintf(stderr, "len %zu: status %d, message '%s' (want '%s')\n", len, st, err, needle ? needle : "");
    assert_int_equal(st, RECUR_E_FORMAT);
    assert_null(g);
    assert_true(strncmp(err, "gguf: ", 6) == 0);
    if (needle) assert_non_null(strstr(err, needle));
    free(copy);
}

static void expect_ok(const uint8_t *buf, size_t len) {
    gguf_file *g;
    char err[512] = "";
    recur_status st = gguf_open_memory(buf, len, &g, err, sizeof err);
    if (st) fprintf(stderr, "len %zu: %s\n", len, err);
    assert_int_equal(st, RECUR_OK);
    gguf_close(g);
}

/* A copy of buf with n bytes at off replaced by val (little-endian). */
static void patch_expect(const uint8_t *buf, size_t len, size_t off, uint64_t val, int n, const char *needle) {
    uint8_t *c = malloc(len);
    memcpy(c, buf, len);
    for (int i = 0; i < n; i++) c[off + (size_t)i] = (uint8_t)(val >> (8 * i));
    expect_format(c, len, needle);
    free(c);
}

static void patch_bytes_expect(const uint8_t *buf, size_t len, size_t off, const char *bytes, const char *needle) {
    uint8_t *c = malloc(len);
    memcpy(c, buf, len);
    memcpy(c + off, bytes, strlen(bytes));
    expect_format(c, len, needle);
    free(c);
}

static uint8_t *sample_bytes(uint32_t align, size_t *len) {
    gguf_writer *w = sample_writer(align);
    assert_non_null(w);
    void *buf;
    assert_int_equal(gguf_writer_to_memory(w, &buf, len, NULL, 0), RECUR_OK);
    gguf_writer_free(w);
    return buf;
}

static uint8_t *model_bytes(const char *name, size_t *len) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/%s", RECUR_TESTDATA, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len);
    assert_int_equal(fread(p, 1, *len, f), *len);
    fclose(f);
    return p;
}

/* End of the last tensor's data: any shorter file is truncated. */
static size_t data_end(const uint8_t *buf, size_t len) {
    gguf_file *g;
    assert_int_equal(gguf_open_memory(buf, len, &g, NULL, 0), RECUR_OK);
    size_t end = (size_t)gguf_data_offset(g);
    if (gguf_n_tensors(g)) {
        const gguf_tensor *t = gguf_tensor_at(g, gguf_n_tensors(g) - 1);
        end += (size_t)(t->offset + t->nbytes);
    }
    gguf_close(g);
    return end;
}

/* ---- truncation --------------------------------------------------------------------------- */

static void test_truncate_sample(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = sample_bytes(0, &len);
    size_t end = data_end(b, len);
    assert_int_equal(end, len);
    for (size_t n = 0; n < len; n++) expect_format(b, n, NULL);
    expect_ok(b, len);
    expect_format(b, len - 1, "past the end of the file");
    expect_format(b, 3, "magic");
    free(b);
}

static void test_truncate_model(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = model_bytes("pub-qwen3-Q8_0.gguf", &len);
    size_t end = data_end(b, len);
    gguf_file *g;
    assert_int_equal(gguf_open_memory(b, len, &g, NULL, 0), RECUR_OK);
    size_t hdr = (size_t)gguf_data_offset(g);
    gguf_close(g);
    for (size_t n = 0; n <= hdr; n++) expect_format(b, n, NULL);   /* every header offset */
    uint32_t x = 12345;
    for (int i = 0; i < 400; i++) {                                  /* sampled in the data */
        x = x * 1664525u + 1013904223u;
        size_t n = hdr + 1 + (size_t)x % (end - hdr - 1);
        gguf_file *t = (gguf_file *)&t;
        char err[256] = "";
        assert_int_equal(gguf_open_memory(b, n, &t, err, sizeof err), RECUR_E_FORMAT);  /* data is not read */
        assert_null(t);
        assert_non_null(strstr(err, "past the end of the file"));
    }
    for (size_t n = end; n <= len; n++) expect_ok(b, n);
    free(b);
}

/* ---- one bad field at a time -------------------------------------------------------------- */

static void corrupt_header(const uint8_t *b, size_t len) {
    patch_bytes_expect(b, len, 0, "GGUX", "magic");
    patch_bytes_expect(b, len, 0, "FUGG", "magic");
    patch_expect(b, len, 4, 1, 4, "version 1");
    patch_expect(b, len, 4, 4, 4, "version 4");
    patch_expect(b, len, 4, 0, 4, "version 0");
    patch_expect(b, len, 4, 0x03000000, 4, "big-endian");
    patch_expect(b, len, 8, 1ull << 62, 8, "n_tensors");
    patch_expect(b, len, 8, UINT64_MAX, 8, "n_tensors");
    patch_expect(b, len, 16, 1ull << 62, 8, "n_kv");
    patch_expect(b, len, 16, UINT64_MAX, 8, "n_kv");
    patch_expect(b, len, 16, ld64(b + 16) + 1, 8, NULL);       /* one KV too many */
    patch_expect(b, len, 8, ld64(b + 8) + 1, 8, NULL);         /* one tensor too many */
}

static void corrupt_kvs(const uint8_t *b, size_t len, const field_map *m, const char *dup_from, const char *dup_to) {
    patch_expect(b, len, m->kv_at[0], 1ull << 62, 8, "string length");
    patch_expect(b, len, m->kv_at[0], 0, 8, "empty key");
    patch_expect(b, len, m->kv_type[0], 13, 4, "unknown KV type id 13");
    patch_expect(b, len, m->kv_type[0], UINT32_MAX, 4, "unknown KV type id");
    int64_t s = -1, sa = -1, na = -1;
    for (int64_t i = 0; i < m->n_kv && i < 64; i++) {
        uint32_t t = ld32(b + m->kv_type[i]);
        if (t == GGUF_KV_STRING && s < 0) s = i;
        if (t == GGUF_KV_ARRAY && ld32(b + m->kv_val[i]) == GGUF_KV_STRING && sa < 0) sa = i;
        if (t == GGUF_KV_ARRAY && ld32(b + m->kv_val[i]) != GGUF_KV_STRING && na < 0) na = i;
    }
    assert_true(s >= 0 && sa >= 0 && na >= 0);
    patch_expect(b, len, m->kv_val[s], 1ull << 62, 8, "string length");
    patch_expect(b, len, m->kv_val[s], UINT64_MAX, 8, "string length");
    patch_expect(b, len, m->kv_val[sa], GGUF_KV_ARRAY, 4, "arrays of arrays");
    patch_expect(b, len, m->kv_val[sa], 13, 4, "unknown type id 13");
    patch_expect(b, len, m->kv_val[sa] + 4, 1ull << 62, 8, "array count");
    patch_expect(b, len, m->kv_val[na] + 4, 1ull << 62, 8, "array count");
    patch_expect(b, len, m->kv_val[na] + 4, UINT64_MAX, 8, "array count");
    patch_expect(b, len, m->kv_val[sa] + 12, 1ull << 62, 8, "string length");   /* first element */
    int64_t d = kv_index(b, m, dup_from);
    assert_true(d >= 0);
    patch_bytes_expect(b, len, m->kv_at[d] + 8, dup_to, "duplicate key");
}

static void corrupt_tensors(const uint8_t *b, size_t len, const field_map *m, int64_t dup_a, int64_t dup_b) {
    int64_t last = m->n_t - 1;
    patch_expect(b, len, m->t_at[0], 64, 8, "the limit is 63");
    patch_expect(b, len, m->t_at[0], 0, 8, "empty name");
    patch_expect(b, len, m->t_at[0], 1ull << 62, 8, "string length");
    patch_expect(b, len, m->t_ndims[0], 5, 4, "5 dimensions");
    patch_expect(b, len, m->t_ndims[0] + 4, UINT64_MAX, 8, "negative");
    patch_expect(b, len, m->t_ndims[0] + 12, 1ull << 62, 8, "overflow");
    patch_expect(b, len, m->t_ndims[0] + 4, 33, 8, NULL);                 /* ne[0] changed */
    static const uint32_t bad_types[] = {4, 5, 31, 33, 36, 38, GGUF_T_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++)
        patch_expect(b, len, m->t_type[0], bad_types[i], 4, "unknown tensor type id");
    patch_expect(b, len, m->t_off[1], ld64(b + m->t_off[1]) + 1, 8, "not a multiple of the alignment");
    patch_expect(b, len, m->t_off[1], ld64(b + m->t_off[0]), 8, "expected");        /* overlaps #0 */
    patch_expect(b, len, m->t_off[1], ld64(b + m->t_off[1]) + 4096, 8, "expected"); /* a gap */
    patch_expect(b, len, m->t_off[last], ld64(b + m->t_off[last]) + (1ull << 40), 8, NULL);
    patch_expect(b, len, m->t_off[last], UINT64_MAX - 31, 8, NULL);
    /* same-length names: give tensor dup_b the name of tensor dup_a */
    assert_int_equal(ld64(b + m->t_at[dup_a]), ld64(b + m->t_at[dup_b]));
    uint8_t *c = malloc(len);
    memcpy(c, b, len);
    memcpy(c + m->t_at[dup_b] + 8, b + m->t_at[dup_a] + 8, ld64(b + m->t_at[dup_a]));
    expect_format(c, len, "duplicate tensor name");
    free(c);
}

static void test_corrupt_sample(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = sample_bytes(32, &len);
    field_map m;
    map_fields(b, &m);
    assert_int_equal(m.n_t, SAMPLE_N_TENSORS);
    corrupt_header(b, len);
    corrupt_kvs(b, len, &m, "key.dup2", "key.dup1");
    corrupt_tensors(b, len, &m, 2, 3);   /* blk.0.attn_q.weight / blk.0.ffn_up.weight */
    /* ne[0] of the Q8_0 token_embd not a multiple of 32 */
    patch_expect(b, len, m.t_ndims[0] + 4, 48, 8, "not a multiple of the Q8_0 block size 32");
    int64_t a = kv_index(b, &m, "general.alignment");
    assert_true(a >= 0);
    patch_expect(b, len, m.kv_val[a], 0, 4, "not a power of 2");
    patch_expect(b, len, m.kv_val[a], 3, 4, "not a power of 2");
    patch_expect(b, len, m.kv_val[a], 48, 4, "not a power of 2");
    patch_expect(b, len, m.kv_type[a], GGUF_KV_INT32, 4, "must be uint32");
    patch_expect(b, len, m.kv_val[a], 64, 4, NULL);    /* valid, but the offsets no longer fit */
    free(b);
}

static void test_corrupt_model(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = model_bytes("pub-llama-Q8_0.gguf", &len);
    field_map m;
    map_fields(b, &m);
    corrupt_header(b, len);
    corrupt_kvs(b, len, &m, "tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id");
    int64_t q = -1, k = -1;
    for (int64_t i = 0; i < m.n_t && i < 64; i++) {
        if (!memcmp(b + m.t_at[i] + 8, "blk.0.attn_q.weight", 19)) q = i;
        if (!memcmp(b + m.t_at[i] + 8, "blk.0.attn_k.weight", 19)) k = i;
    }
    assert_true(q >= 0 && k >= 0);
    corrupt_tensors(b, len, &m, q, k);
    free(b);
}

/* ---- random damage: never a crash, only OK or FORMAT -------------------------------------- */

static void flip_header(const uint8_t *b, size_t len, size_t hdr, int rounds, uint32_t seed) {
    uint8_t *c = malloc(len);
    uint32_t x = seed;
    int n_ok = 0;
    for (int r = 0; r < rounds; r++) {
        memcpy(c, b, len);
        int flips = 1 + r % 4;
        for (int i = 0; i < flips; i++) {
            x = x * 1664525u + 1013904223u;
            size_t at = (x >> 8) % hdr;
            x = x * 1664525u + 1013904223u;
            c[at] = (r & 1) ? (uint8_t)(x >> 24) : (uint8_t)(c[at] ^ (1u << (x >> 29)));
        }
        gguf_file *g;
        char err[512] = "";
        recur_status st = gguf_open_memory(c, len, &g, err, sizeof err);
        assert_true(st == RECUR_OK || st == RECUR_E_FORMAT);
        if (st == RECUR_OK) {
            n_ok++;
            gguf_close(g);
        } else {
            assert_true(strlen(err) > 0);
        }
    }
    free(c);
    assert_true(n_ok < rounds);
}

static void test_random_damage(void **state) {
    (void)state;
    size_t len;
    uint8_t *b = sample_bytes(0, &len);
    gguf_file *g;
    assert_int_equal(gguf_open_memory(b, len, &g, NULL, 0), RECUR_OK);
    size_t hdr = (size_t)gguf_data_offset(g);
    gguf_close(g);
    flip_header(b, len, hdr, 3000, 1);
    free(b);
    b = model_bytes("pub-llama-Q8_0.gguf", &len);
    assert_int_equal(gguf_open_memory(b, len, &g, NULL, 0), RECUR_OK);
    hdr = (size_t)gguf_data_offset(g);
    gguf_close(g);
    flip_header(b, len, 64, 500, 2);          /* the counts and first key */
    flip_header(b, len, hdr, 1500, 3);
    free(b);
}

static void test_tiny_files(void **state) {
    (void)state;
    char dir[] = "/tmp/test_gguf_corrupt_XXXXXX", path[80];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/small.gguf", dir);
    for (int n = 0; n <= 24; n += 3) {
        FILE *f = fopen(path, "wb");
        fwrite("GGUF\3\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 1, (size_t)n, f);
        fclose(f);
        gguf_file *g = (gguf_file *)&g;
        char err[256] = "";
        recur_status st = gguf_open(path, &g, err, sizeof err);
        if (n < 24) {
            assert_int_equal(st, RECUR_E_FORMAT);
            assert_null(g);
            assert_true(strlen(err) > 0);
        } else {
            assert_int_equal(st, RECUR_OK);    /* 0 tensors, 0 KVs: an empty but valid file */
            assert_int_equal(gguf_n_kv(g), 0);
            gguf_close(g);
        }
    }
    unlink(path);
    rmdir(dir);
}

/* Found by fuzz_gguf: a v2 file whose only KV is an empty string array (no string pool at all)
 * made the reader offset a NULL pool (UBSan: "applying zero offset to null pointer"). */
static void test_empty_string_array(void **state) {
    (void)state;
    static const uint8_t file[] = {
        'G', 'G', 'U', 'F', 2, 0, 0, 0,       /* magic, version 2 */
        0, 0, 0, 0, 0, 0, 0, 0,               /* 0 tensors */
        1, 0, 0, 0, 0, 0, 0, 0,               /* 1 KV */
        1, 0, 0, 0, 0, 0, 0, 0, 1,            /* key: 1 byte */
        9, 0, 0, 0,                           /* type ARRAY */
        8, 0, 0, 0,                           /* of STRING */
        0, 0, 0, 0, 0, 0, 0, 0,               /* 0 elements */
        0,                                    /* trailing byte */
    };
    gguf_file *g = NULL;
    char err[256] = "";
    recur_status st = gguf_open_memory(file, sizeof file, &g, err, sizeof err);
    assert_true(st == RECUR_OK || st == RECUR_E_FORMAT);
    if (st == RECUR_OK) {
        assert_int_equal(gguf_n_kv(g), 1);
        gguf_close(g);
    } else {
        assert_true(strlen(err) > 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_sample),
        cmocka_unit_test(test_truncate_model),
        cmocka_unit_test(test_corrupt_sample),
        cmocka_unit_test(test_corrupt_model),
        cmocka_unit_test(test_random_damage),
        cmocka_unit_test(test_tiny_files),
        cmocka_unit_test(test_empty_string_array),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
