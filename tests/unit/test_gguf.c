/* test_gguf.c — GGUF reader and writer: type facts, every shared test file, writer round
 * trips, byte-identical rewrites of real files, getters. Malformed files: test_gguf_corrupt.c. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "gguf_sample.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) { free(p); p = NULL; }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static gguf_file *open_ok(const char *path) {
    gguf_file *g = NULL;
    char err[512] = "";
    recur_status st = gguf_open(path, &g, err, sizeof err);
    if (st) fprintf(stderr, "%s: %s\n", path, err);
    assert_int_equal(st, RECUR_OK);
    assert_non_null(g);
    return g;
}

static void assert_str(gguf_str s, const char *want) {
    if (!gguf_str_eq(s, want)) fprintf(stderr, "got '%.*s', want '%s'\n", (int)s.len, s.ptr, want);
    assert_true(gguf_str_eq(s, want));
}

/* Same key set, types and values, same tensors (facts and bytes). */
static void assert_same_file(const gguf_file *a, const gguf_file *b) {
    assert_int_equal(gguf_n_kv(a), gguf_n_kv(b));
    assert_int_equal(gguf_n_tensors(a), gguf_n_tensors(b));
    assert_int_equal(gguf_alignment(a), gguf_alignment(b));
    for (int64_t i = 0; i < gguf_n_kv(a); i++) {
        gguf_str ka = gguf_kv_key(a, i), kb = gguf_kv_key(b, i);
        assert_int_equal(ka.len, kb.len);
        assert_memory_equal(ka.ptr, kb.ptr, ka.len);
        assert_int_equal(gguf_kv_type_of(a, i), gguf_kv_type_of(b, i));
        gguf_str sa, sb;
        gguf_arr aa, ab;
        int64_t ia, ib;
        double fa, fb;
        if (gguf_kv_str(a, i, &sa)) {
            assert_true(gguf_kv_str(b, i, &sb));
            assert_int_equal(sa.len, sb.len);
            assert_memory_equal(sa.ptr, sb.ptr, sa.len);
        } else if (gguf_kv_arr(a, i, &aa)) {
            assert_true(gguf_kv_arr(b, i, &ab));
            assert_int_equal(aa.elem_type, ab.elem_type);
            assert_int_equal(aa.n, ab.n);
            for (uint64_t j = 0; j < aa.n; j++) {
                if (aa.elem_type == GGUF_KV_STRING) {
                    assert_int_equal(aa.strs[j].len, ab.strs[j].len);
                    assert_memory_equal(aa.strs[j].ptr, ab.strs[j].ptr, aa.strs[j].len);
                } else {
                    assert_true(gguf_arr_int(&aa, j) == gguf_arr_int(&ab, j));
                    double x = gguf_arr_float(&aa, j), y = gguf_arr_float(&ab, j);
                    assert_memory_equal(&x, &y, sizeof x);
                }
            }
        } else if (gguf_kv_float(a, i, &fa)) {
            assert_true(gguf_kv_float(b, i, &fb));
            assert_memory_equal(&fa, &fb, sizeof fa);
        } else if (gguf_kv_int(a, i, &ia)) {
            assert_true(gguf_kv_int(b, i, &ib));
            assert_true(ia == ib);
        }
    }
    for (int64_t i = 0; i < gguf_n_tensors(a); i++) {
        const gguf_tensor *ta = gguf_tensor_at(a, i), *tb = gguf_tensor_at(b, i);
        assert_string_equal(ta->name, tb->name);
        assert_int_equal(ta->type, tb->type);
        assert_int_equal(ta->n_dims, tb->n_dims);
        assert_memory_equal(ta->ne, tb->ne, sizeof ta->ne);
        assert_int_equal(ta->nbytes, tb->nbytes);
        assert_int_equal(ta->offset, tb->offset);
        if (ta->nbytes) assert_memory_equal(ta->data, tb->data, ta->nbytes);
    }
}

/* ---- type facts --------------------------------------------------------------------------- */

static void test_types(void **state) {
    (void)state;
    static const struct { uint32_t t, blck, bytes; const char *name; } k[] = {
        {GGUF_T_F32, 1, 4, "F32"}, {GGUF_T_F16, 1, 2, "F16"}, {GGUF_T_BF16, 1, 2, "BF16"},
        {GGUF_T_Q4_0, 32, 18, "Q4_0"}, {GGUF_T_Q4_1, 32, 20, "Q4_1"}, {GGUF_T_Q5_0, 32, 22, "Q5_0"},
        {GGUF_T_Q5_1, 32, 24, "Q5_1"}, {GGUF_T_Q8_0, 32, 34, "Q8_0"}, {GGUF_T_Q8_1, 32, 36, "Q8_1"},
        {GGUF_T_Q2_K, 256, 84, "Q2_K"}, {GGUF_T_Q3_K, 256, 110, "Q3_K"}, {GGUF_T_Q4_K, 256, 144, "Q4_K"},
        {GGUF_T_Q5_K, 256, 176, "Q5_K"}, {GGUF_T_Q6_K, 256, 210, "Q6_K"}, {GGUF_T_Q8_K, 256, 292, "Q8_K"},
        {GGUF_T_IQ2_XXS, 256, 66, "IQ2_XXS"}, {GGUF_T_IQ2_XS, 256, 74, "IQ2_XS"},
        {GGUF_T_IQ3_XXS, 256, 98, "IQ3_XXS"}, {GGUF_T_IQ1_S, 256, 50, "IQ1_S"},
        {GGUF_T_IQ4_NL, 32, 18, "IQ4_NL"}, {GGUF_T_IQ3_S, 256, 110, "IQ3_S"}, {GGUF_T_IQ2_S, 256, 82, "IQ2_S"},
        {GGUF_T_IQ4_XS, 256, 136, "IQ4_XS"}, {GGUF_T_I8, 1, 1, "I8"}, {GGUF_T_I16, 1, 2, "I16"},
        {GGUF_T_I32, 1, 4, "I32"}, {GGUF_T_I64, 1, 8, "I64"}, {GGUF_T_F64, 1, 8, "F64"},
        {GGUF_T_IQ1_M, 256, 56, "IQ1_M"}, {GGUF_T_TQ1_0, 256, 54, "TQ1_0"}, {GGUF_T_TQ2_0, 256, 66, "TQ2_0"},
        {GGUF_T_MXFP4, 32, 17, "MXFP4"}, {GGUF_T_NVFP4, 64, 36, "NVFP4"}, {GGUF_T_Q1_0, 128, 18, "Q1_0"},
        {GGUF_T_Q2_0, 64, 18, "Q2_0"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        uint32_t blck = 0, bytes = 0;
        assert_true(gguf_type_block(k[i].t, &blck, &bytes));
        assert_int_equal(blck, k[i].blck);
        assert_int_equal(bytes, k[i].bytes);
        assert_string_equal(gguf_type_name(k[i].t), k[i].name);
    }
    static const uint32_t removed[] = {4, 5, 31, 32, 33, 36, 37, 38, GGUF_T_COUNT, 1000, UINT32_MAX};
    for (size_t i = 0; i < sizeof removed / sizeof removed[0]; i++) {
        assert_false(gguf_type_block(removed[i], NULL, NULL));
        assert_string_equal(gguf_type_name(removed[i]), "?");
    }
    assert_string_equal(gguf_kv_type_name(GGUF_KV_UINT32), "uint32");
    assert_string_equal(gguf_kv_type_name(GGUF_KV_ARRAY), "array");
    assert_string_equal(gguf_kv_type_name(GGUF_KV_COUNT), "?");

    uint64_t nb;
    int64_t ne[4] = {4096, 4096, 1, 1};
    assert_true(gguf_tensor_nbytes(GGUF_T_Q4_K, ne, &nb));
    assert_int_equal(nb, 4096 / 256 * 144 * 4096);
    ne[0] = 100;
    assert_false(gguf_tensor_nbytes(GGUF_T_Q8_0, ne, &nb));           /* not a block multiple */
    assert_true(gguf_tensor_nbytes(GGUF_T_F32, ne, &nb));
    assert_int_equal(nb, 100 * 4 * 4096);
    int64_t big[4] = {1ll << 40, 1ll << 30, 1, 1};
    assert_false(gguf_tensor_nbytes(GGUF_T_F32, big, &nb));             /* overflow */
    int64_t neg[4] = {32, -1, 1, 1};
    assert_false(gguf_tensor_nbytes(GGUF_T_F32, neg, &nb));
    assert_false(gguf_tensor_nbytes(4, ne, &nb));
}

/* ---- the shared test files ---------------------------------------------------------------- */

static int open_dir(const char *sub) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", RECUR_TESTDATA, sub);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".gguf") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        gguf_file *g = open_ok(path);
        gguf_str arch;
        assert_true(gguf_get_str(g, "general.architecture", &arch));
        assert_true(arch.len > 0);
        assert_true(gguf_version(g) == 3);
        /* every tensor lies inside the file, in order */
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            assert_true(gguf_data_offset(g) + t->offset + t->nbytes <= gguf_file_size(g));
            assert_ptr_equal(gguf_find_tensor(g, t->name), t);
        }
        for (int64_t i = 0; i < gguf_n_kv(g); i++) {
            gguf_str k = gguf_kv_key(g, i);
            char key[256];
            snprintf(key, sizeof key, "%.*s", (int)k.len, k.ptr);
            assert_int_equal(gguf_find_key(g, key), i);
        }
        gguf_close(g);
        n++;
    }
    closedir(d);
    return n;
}

static void test_open_testdata(void **state) {
    (void)state;
    assert_true(open_dir("models") >= 27);
    assert_true(open_dir("vocab") >= 4);
}

static void test_known_facts(void **state) {
    (void)state;
    char path[1024];
    snprintf(path, sizeof path, "%s/models/pub-llama-F32.gguf", RECUR_TESTDATA);
    gguf_file *g = open_ok(path);
    gguf_str s;
    int64_t v;
    double f;
    bool b;
    assert_true(gguf_get_str(g, "general.architecture", &s));
    assert_str(s, "llama");
    assert_int_equal(gguf_n_tensors(g), 39);
    assert_int_equal(gguf_n_kv(g), 23);
    assert_int_equal(gguf_alignment(g), 32);
    assert_int_equal(gguf_data_offset(g) % 32, 0);
    assert_true(gguf_get_int(g, "llama.block_count", &v) && v == 4);
    assert_true(gguf_get_int(g, "llama.attention.head_count_kv", &v) && v == 4);
    assert_true(gguf_get_float(g, "llama.rope.freq_base", &f) && f == 10000.0);
    assert_false(gguf_get_float(g, "llama.block_count", &f));        /* an integer */
    assert_false(gguf_get_int(g, "llama.rope.freq_base", &v));       /* a float */
    assert_true(gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) && b);
    assert_true(gguf_get_int(g, "tokenizer.ggml.add_bos_token", &v) && v == 1);
    assert_false(gguf_get_str(g, "no.such.key", &s));
    assert_int_equal(gguf_find_key(g, "no.such.key"), -1);
    gguf_arr a;
    assert_true(gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    assert_int_equal(a.elem_type, GGUF_KV_STRING);
    assert_int_equal(a.n, 512);
    assert_str(a.strs[0], "<unk>");
    assert_str(a.strs[3], "<0x00>");
    assert_int_equal(gguf_arr_int(&a, 0), 0);                         /* strings give 0 */
    assert_true(gguf_get_arr(g, "tokenizer.ggml.token_type", &a));
    assert_int_equal(gguf_arr_int(&a, 0), 2);
    assert_int_equal(gguf_arr_int(&a, 1), 3);
    assert_int_equal(gguf_arr_int(&a, 512), 0);                       /* out of range */
    const gguf_tensor *t = gguf_find_tensor(g, "blk.0.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGUF_T_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 512);
    assert_int_equal(t->ne[1], 256);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->nbytes, 512 * 256 * 4);
    assert_int_equal((uintptr_t)t->data % 32, 0);
    assert_null(gguf_find_tensor(g, "blk.9.ffn_down.weight"));
    assert_null(gguf_tensor_at(g, 39));
    assert_null(gguf_tensor_at(g, -1));
    gguf_close(g);

    snprintf(path, sizeof path, "%s/models/pub-qwen3-Q4_K_M.gguf", RECUR_TESTDATA);
    g = open_ok(path);
    assert_int_equal(gguf_n_tensors(g), 46);
    assert_true(gguf_get_int(g, "qwen3.attention.key_length", &v) && v == 64);
    assert_null(gguf_find_tensor(g, "output.weight"));                /* tied */
    t = gguf_find_tensor(g, "blk.3.attn_k_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 64);
    gguf_close(g);

    snprintf(path, sizeof path, "%s/vocab/qwen3-vocab.gguf", RECUR_TESTDATA);
    g = open_ok(path);
    assert_int_equal(gguf_n_tensors(g), 0);
    assert_true(gguf_get_arr(g, "tokenizer.ggml.tokens", &a));
    assert_int_equal(a.n, 151936);
    assert_str(a.strs[0], "!");
    assert_true(gguf_get_int(g, "tokenizer.ggml.eos_token_id", &v) && v == 151645);
    gguf_close(g);
}

static void test_open_missing(void **state) {
    (void)state;
    gguf_file *g = (gguf_file *)&g;
    char err[256] = "";
    assert_int_equal(gguf_open("/nonexistent/dir/model.gguf", &g, err, sizeof err), RECUR_E_IO);
    assert_null(g);
    assert_true(strlen(err) > 0);
    err[0] = 0;
    assert_int_equal(gguf_open("/tmp", &g, err, sizeof err), RECUR_E_IO);      /* a directory */
    assert_null(g);
    assert_true(strlen(err) > 0);
    assert_int_equal(gguf_open("/nonexistent", &g, NULL, 0), RECUR_E_IO);    /* err may be NULL */
    gguf_close(NULL);
    gguf_writer_free(NULL);
}

/* ---- writer ------------------------------------------------------------------------------- */

static void check_sample(const gguf_file *g, uint32_t align) {
    int64_t v;
    double f;
    bool b;
    gguf_str s;
    gguf_arr a;
    assert_int_equal(gguf_version(g), 3);
    assert_int_equal(gguf_alignment(g), align ? align : 32);
    assert_true(gguf_get_int(g, "t.i32", &v) && v == -123456);
    assert_false(gguf_get_int(g, "t.u64", &v));                 /* does not fit int64 */
    assert_true(gguf_get_float(g, "t.f32", &f) && f == (double)1e-6f);
    assert_true(gguf_get_bool(g, "t.bool", &b) && b);
    assert_true(gguf_get_str(g, "t.str", &s));
    assert_str(s, "h\xc3\xa9llo \"world\"\n");
    assert_true(gguf_get_arr(g, "a.u64", &a));
    assert_int_equal(gguf_arr_int(&a, 0), INT64_MAX);            /* saturates */
    assert_true(gguf_arr_float(&a, 0) == 9223372036854775808.0);
    assert_true(gguf_get_arr(g, "a.i64", &a) && gguf_arr_int(&a, 0) == INT64_MIN);
    assert_true(gguf_get_arr(g, "a.f32", &a) && gguf_arr_float(&a, 1) == -1.25);
    assert_true(gguf_get_arr(g, "a.i16", &a) && gguf_arr_int(&a, 0) == -32768);
    assert_true(gguf_get_arr(g, "a.u32", &a) && gguf_arr_int(&a, 0) == 4000000000ll);
    assert_true(gguf_get_arr(g, "a.empty", &a) && a.n == 0 && a.elem_type == GGUF_KV_INT32);
    assert_true(gguf_get_arr(g, "a.strn", &a) && a.n == 2 && a.strs[0].len == 3);
    assert_memory_equal(a.strs[0].ptr, "a\0b", 3);
    assert_true(gguf_get_arr(g, "a.str", &a) && a.n == 3 && a.strs[1].len == 0);
    assert_int_equal(gguf_n_tensors(g), SAMPLE_N_TENSORS);
    uint64_t off = 0;
    uint32_t al = align ? align : 32;
    for (int i = 0; i < SAMPLE_N_TENSORS; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        assert_string_equal(t->name, k_sample_tensors[i].name);
        assert_int_equal(t->type, k_sample_tensors[i].type);
        assert_int_equal(t->n_dims, k_sample_tensors[i].n_dims);
        assert_memory_equal(t->ne, k_sample_tensors[i].ne, sizeof t->ne);
        assert_int_equal(t->offset, off);
        assert_int_equal((gguf_data_offset(g) + t->offset) % al, 0);
        uint8_t *want = malloc(t->nbytes + 1);
        sample_fill(want, t->nbytes, (uint32_t)i);
        if (t->nbytes) assert_memory_equal(t->data, want, t->nbytes);
        free(want);
        off += (t->nbytes + al - 1) / al * al;
    }
    assert_int_equal(gguf_data_offset(g) + off, gguf_file_size(g));
}

static void roundtrip(uint32_t align) {
    gguf_writer *w = sample_writer(align);
    assert_non_null(w);
    void *buf;
    size_t len;
    char err[256];
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_OK);
    gguf_file *g;
    assert_int_equal(gguf_open_memory(buf, len, &g, err, sizeof err), RECUR_OK);
    check_sample(g, align);

    char dir[] = "/tmp/test_gguf_XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sample.gguf", dir);
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), RECUR_OK);
    size_t flen;
    void *fbuf = read_file(path, &flen);
    assert_non_null(fbuf);
    assert_int_equal(flen, len);
    assert_memory_equal(fbuf, buf, len);                       /* file == memory image */
    snprintf(err, sizeof err, "%s.tmp", path);
    assert_int_not_equal(access(err, F_OK), 0);                /* temp file renamed away */
    gguf_file *g2 = open_ok(path);
    assert_same_file(g, g2);
    gguf_close(g2);
    unlink(path);
    rmdir(dir);
    free(fbuf);
    gguf_close(g);
    free(buf);
    gguf_writer_free(w);
}

/* gguf_map_all maps the file in (reading it again where its cache is in small pieces and the
 * kernel can do better: the bytes stay the file's); gguf_drop_range unmaps the whole 2 MiB
 * pieces of a mapped range: reading them again gives the file's bytes back; ranges outside
 * the data, NULL and a file read from memory: nothing. */
static void test_drop_range(void **state) {
    (void)state;
    const int64_t ne[GGUF_MAX_DIMS] = { 1 << 20, 3, 1, 1 };   /* 12 MiB of F32 */
    float *data = malloc((size_t)ne[0] * ne[1] * 4);
    assert_non_null(data);
    for (int64_t i = 0; i < ne[0] * ne[1]; i++) data[i] = (float)(i % 1009) - 500.0f;
    char err[256], dir[] = "/tmp/test_gguf_XXXXXX", path[64];
    gguf_writer *w = gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_OK);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/drop.gguf", dir);
    assert_int_equal(gguf_writer_write(w, path, err, sizeof err), RECUR_OK);
    const int fd = open(path, O_RDONLY);   /* written back, so its cached pages can be dropped */
    assert_true(fd >= 0);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    gguf_file *g = open_ok(path);
    assert_true(gguf_mapped(g));
    const gguf_tensor *t = gguf_find_tensor(g, "t");
    assert_non_null(t);
    const size_t n = (size_t)ne[0] * ne[1] * 4;
    gguf_map_all(g);
    assert_memory_equal(t->data, data, n);
    gguf_map_all(g);
    assert_memory_equal(t->data, data, n);
    gguf_drop_range(g, t->data, n);
    gguf_drop_range(g, (const uint8_t *)t->data + 4096, n);   /* past the end: nothing */
    gguf_drop_range(g, NULL, n);
    gguf_drop_range(NULL, t->data, n);
    assert_memory_equal(t->data, data, n);
    void *buf;
    size_t len;
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_OK);
    gguf_file *gm;
    assert_int_equal(gguf_open_memory(buf, len, &gm, err, sizeof err), RECUR_OK);
    assert_false(gguf_mapped(gm));
    assert_false(gguf_mapped(NULL));
    const gguf_tensor *tm = gguf_find_tensor(gm, "t");
    assert_non_null(tm);
    gguf_map_all(gm);
    gguf_drop_range(gm, tm->data, n);
    assert_memory_equal(tm->data, data, n);
    gguf_close(gm);
    free(buf);
    gguf_close(g);
    unlink(path);
    rmdir(dir);
    gguf_writer_free(w);
    free(data);
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    roundtrip(0);
    roundtrip(32);
    roundtrip(64);
    roundtrip(1);
}

static void test_writer_replace_and_errors(void **state) {
    (void)state;
    gguf_writer *w = gguf_writer_new();
    char err[256];
    assert_int_equal(gguf_writer_set_u32(w, "a", 1), RECUR_OK);
    assert_int_equal(gguf_writer_set_u32(w, "b", 2), RECUR_OK);
    assert_int_equal(gguf_writer_set_str(w, "a", "again"), RECUR_OK);     /* replaced in place */
    assert_int_equal(gguf_writer_set_u32(w, "", 1), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_u32(w, NULL, 1), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_arr(w, "x", GGUF_KV_ARRAY, "", 0), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_arr(w, "x", GGUF_KV_COUNT, "", 0), RECUR_E_INVALID);
    int64_t ne[4] = {32, 2, 1, 1};
    float data[64] = {0};
    assert_int_equal(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_OK);
    err[0] = 0;
    assert_int_equal(gguf_writer_add_tensor(w, "t", GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_E_INVALID);
    assert_true(strlen(err) > 0);
    char longname[80];
    memset(longname, 'x', 64);
    longname[64] = 0;
    assert_int_equal(gguf_writer_add_tensor(w, longname, GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_E_INVALID);
    longname[63] = 0;                                                       /* 63 bytes: ok */
    assert_int_equal(gguf_writer_add_tensor(w, longname, GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_OK);
    assert_int_equal(gguf_writer_add_tensor(w, "u", GGUF_T_F32, 5, ne, data, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_add_tensor(w, "u", 4, 2, ne, data, err, sizeof err), RECUR_E_INVALID);
    ne[0] = 30;
    assert_int_equal(gguf_writer_add_tensor(w, "u", GGUF_T_Q8_0, 2, ne, data, err, sizeof err), RECUR_E_INVALID);
    ne[0] = -1;
    assert_int_equal(gguf_writer_add_tensor(w, "u", GGUF_T_F32, 2, ne, data, err, sizeof err), RECUR_E_INVALID);

    void *buf;
    size_t len;
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_OK);
    gguf_file *g;
    assert_int_equal(gguf_open_memory(buf, len, &g, err, sizeof err), RECUR_OK);
    assert_int_equal(gguf_n_kv(g), 2);
    assert_str(gguf_kv_key(g, 0), "a");
    assert_int_equal(gguf_kv_type_of(g, 0), GGUF_KV_STRING);
    assert_int_equal(gguf_n_tensors(g), 2);
    gguf_close(g);
    free(buf);

    assert_int_equal(gguf_writer_set_u32(w, "general.alignment", 3), RECUR_OK);
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_u32(w, "general.alignment", 0), RECUR_OK);
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_i32(w, "general.alignment", 32), RECUR_OK);
    assert_int_equal(gguf_writer_write(w, "/tmp/never-written.gguf", err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(gguf_writer_set_u32(w, "general.alignment", 16), RECUR_OK);
    assert_int_equal(gguf_writer_write(w, "/nonexistent/dir/x.gguf", err, sizeof err), RECUR_E_IO);
    gguf_writer_free(w);
}

/* Copying every KV and tensor of a ggml-written file gives the same bytes back. */
static void rewrite_same(const char *sub, const char *name) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/%s/%s", RECUR_TESTDATA, sub, name);
    gguf_file *g = open_ok(path);
    gguf_writer *w = gguf_writer_new();
    for (int64_t i = 0; i < gguf_n_kv(g); i++) assert_int_equal(gguf_writer_set_kv_from(w, g, i), RECUR_OK);
    assert_int_equal(gguf_writer_set_kv_from(w, g, gguf_n_kv(g)), RECUR_E_INVALID);
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        assert_int_equal(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, err, sizeof err),
                         RECUR_OK);
    }
    void *buf;
    size_t len, orig_len;
    assert_int_equal(gguf_writer_to_memory(w, &buf, &len, err, sizeof err), RECUR_OK);
    void *orig = read_file(path, &orig_len);
    assert_int_equal(len, orig_len);
    assert_memory_equal(buf, orig, len);
    free(orig);
    free(buf);
    gguf_writer_free(w);
    gguf_close(g);
}

static void test_rewrite_identical(void **state) {
    (void)state;
    rewrite_same("models", "pub-llama-Q4_K_M.gguf");
    rewrite_same("models", "pub-qwen35-BF16.gguf");
    rewrite_same("models", "stories260K.gguf");
    rewrite_same("vocab", "qwen3-vocab.gguf");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_open_testdata),
        cmocka_unit_test(test_known_facts),
        cmocka_unit_test(test_open_missing),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_drop_range),
        cmocka_unit_test(test_writer_replace_and_errors),
        cmocka_unit_test(test_rewrite_identical),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
