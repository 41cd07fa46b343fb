/* test_vocab.c — the tokenizer against llama.cpp's reference vectors.
 *
 * For every vocab in RECUR_TESTDATA/vocab (and models/stories260K.gguf) all cases of
 * tokenizer/<name>.jsonl (tokenize), <name>.detok.jsonl (detokenize) and <name>.pieces.jsonl
 * (single pieces) must pass. Counts are printed; the first failures are shown in full.
 * Also: the streaming detokenizer, load errors, and a vocab-less file.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/err.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

/* ---- a small JSON reader (one value per line is all the data needs) ----------------------- */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype        type;
    bool         b;
    double       num;
    char        *str;      /* J_STR: bytes (may hold NUL), len in n; J_OBJ: keys in keys[] */
    size_t       n;        /* J_STR bytes, J_ARR / J_OBJ entries */
    struct jval *items;
    char       **keys;
} jval;

static void jfree(jval *v) {
    if (v->type == J_ARR || v->type == J_OBJ) {
        for (size_t i = 0; i < v->n; i++) {
            jfree(&v->items[i]);
            if (v->keys) free(v->keys[i]);
        }
        free(v->items);
        free(v->keys);
    }
    free(v->str);
}

typedef struct { const char *p, *end; } jcur;

static void jws(jcur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static size_t put_utf8(uint32_t c, char *o) {
    if (c < 0x80) { o[0] = (char)c; return 1; }
    if (c < 0x800) { o[0] = (char)(0xc0 | (c >> 6)); o[1] = (char)(0x80 | (c & 0x3f)); return 2; }
    if (c < 0x10000) {
        o[0] = (char)(0xe0 | (c >> 12)); o[1] = (char)(0x80 | ((c >> 6) & 0x3f));
        o[2] = (char)(0x80 | (c & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (c >> 18)); o[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((c >> 6) & 0x3f)); o[3] = (char)(0x80 | (c & 0x3f));
    return 4;
}

static bool hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        v = v * 16 + (uint32_t)d;
    }
    *out = v;
    return true;
}

static bool jstring(jcur *c, char **out, size_t *len) {
    if (c->p >= c->end || *c->p != '"') return false;
    c->p++;
    char *s = malloc((size_t)(c->end - c->p) + 1);
    size_t n = 0;
    while (c->p < c->end && *c->p != '"') {
        char ch = *c->p++;
        if (ch != '\\') { s[n++] = ch; continue; }
        if (c->p >= c->end) break;
        char e = *c->p++;
        switch (e) {
        case 'n': s[n++] = '\n'; break;
        case 't': s[n++] = '\t'; break;
        case 'r': s[n++] = '\r'; break;
        case 'b': s[n++] = '\b'; break;
        case 'f': s[n++] = '\f'; break;
        case 'u': {
            uint32_t u, lo;
            if (c->end - c->p < 4 || !hex4(c->p, &u)) { free(s); return false; }
            c->p += 4;
            if (u >= 0xD800 && u <= 0xDBFF && c->end - c->p >= 6 && c->p[0] == '\\' && c->p[1] == 'u' &&
                hex4(c->p + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                c->p += 6;
            }
            n += put_utf8(u, s + n);
            break;
        }
        default: s[n++] = e; break;
        }
    }
    if (c->p >= c->end) { free(s); return false; }
    c->p++;
    s[n] = '\0';
    *out = s;
    *len = n;
    return true;
}

static bool jparse(jcur *c, jval *v) {
    memset(v, 0, sizeof *v);
    jws(c);
    if (c->p >= c->end) return false;
    char ch = *c->p;
    if (ch == '"') { v->type = J_STR; return jstring(c, &v->str, &v->n); }
    if (ch == '[' || ch == '{') {
        bool obj = ch == '{';
        v->type = obj ? J_OBJ : J_ARR;
        c->p++;
        size_t cap = 0;
        for (;;) {
            jws(c);
            if (c->p < c->end && *c->p == (obj ? '}' : ']')) { c->p++; return true; }
            if (v->n == cap) {
                cap = cap ? cap * 2 : 8;
                v->items = realloc(v->items, cap * sizeof *v->items);
                if (obj) v->keys = realloc(v->keys, cap * sizeof *v->keys);
            }
            if (obj) {
                size_t kl;
                if (!jstring(c, &v->keys[v->n], &kl)) return false;
                jws(c);
                if (c->p >= c->end || *c->p++ != ':') { free(v->keys[v->n]); return false; }
            }
            if (!jparse(c, &v->items[v->n])) { if (obj) free(v->keys[v->n]); return false; }
            v->n++;
            jws(c);
            if (c->p < c->end && *c->p == ',') c->p++;
        }
    }
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) { c->p += 4; v->type = J_NULL; return true; }
    if (c->end - c->p >= 4 && memcmp(c->p, "true", 4) == 0) { c->p += 4; v->type = J_BOOL; v->b = true; return true; }
    if (c->end - c->p >= 5 && memcmp(c->p, "false", 5) == 0) { c->p += 5; v->type = J_BOOL; return true; }
    char *e;
    v->type = J_NUM;
    v->num = strtod(c->p, &e);
    if (e == c->p) return false;
    c->p = e;
    return true;
}

static const jval *jget(const jval *o, const char *key) {
    if (o->type != J_OBJ) return NULL;
    for (size_t i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

/* Reads a .jsonl file; calls fn for every line. Returns the number of lines. */
typedef bool (*case_fn)(const vocab *v, const jval *c, char *why, size_t why_len);

/* ---- helpers ------------------------------------------------------------------------------ */

static vocab *load_vocab(const char *path) {
    gguf_file *g;
    char err[256] = "";
    recur_status rc = gguf_open(path, &g, err, sizeof err);
    if (rc) fail_msg("gguf_open %s: %s", path, err);
    vocab *v;
    rc = vocab_load(g, &v, err, sizeof err);
    gguf_close(g);                                      /* the vocab must outlive the file */
    if (rc) fail_msg("vocab_load %s: %s", path, err);
    return v;
}

static void to_hex(const char *s, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", (unsigned)(uint8_t)s[i]);
    out[2 * n] = '\0';
}

static bool check_tokenize(const vocab *v, const jval *c, char *why, size_t why_len) {
    const jval *text = jget(c, "text"), *ids = jget(c, "ids");
    bool add = jget(c, "add_special")->b, parse = jget(c, "parse_special")->b;
    int n = vocab_tokenize(v, text->str, text->n, NULL, 0, add, parse);
    recur_token *got = malloc(sizeof *got * (size_t)(n > 0 ? n : 1));
    int n2 = vocab_tokenize(v, text->str, text->n, got, n, add, parse);
    bool ok = n >= 0 && n2 == n && (size_t)n == ids->n;
    for (int i = 0; ok && i < n; i++) ok = got[i] == (recur_token)ids->items[i].num;
    if (!ok) {
        int k = snprintf(why, why_len, "text=\"%.60s\" add=%d parse=%d\n      want:", text->str, add, parse);
        for (size_t i = 0; i < ids->n && i < 24 && k < (int)why_len; i++)
            k += snprintf(why + k, why_len - (size_t)k, " %d", (int)ids->items[i].num);
        if (k < (int)why_len) k += snprintf(why + k, why_len - (size_t)k, "\n      got: ");
        for (int i = 0; i < n && i < 24 && k < (int)why_len; i++)
            k += snprintf(why + k, why_len - (size_t)k, " %d", got[i]);
    }
    free(got);
    return ok;
}

static bool check_detok(const vocab *v, const jval *c, char *why, size_t why_len) {
    const jval *ids = jget(c, "ids"), *hex = jget(c, "hex");
    bool rm = jget(c, "remove_special")->b, un = jget(c, "unparse_special")->b;
    recur_token *t = malloc(sizeof *t * (ids->n ? ids->n : 1));
    for (size_t i = 0; i < ids->n; i++) t[i] = (recur_token)ids->items[i].num;
    int n = vocab_detokenize(v, t, (int)ids->n, NULL, 0, rm, un);
    char *buf = malloc((size_t)(n > 0 ? n : 1)), *h = malloc(2 * (size_t)(n > 0 ? n : 1) + 1);
    int n2 = vocab_detokenize(v, t, (int)ids->n, buf, n, rm, un);
    bool ok = n >= 0 && n2 == n;
    if (ok) {
        to_hex(buf, (size_t)n, h);
        ok = strcmp(h, hex->str) == 0;
    }
    if (!ok)
        snprintf(why, why_len, "ids[0]=%d n=%zu rm=%d un=%d\n      want: %.120s\n      got:  %.120s",
                 ids->n ? t[0] : -1, ids->n, rm, un, hex->str, n >= 0 ? h : "(error)");
    free(t); free(buf); free(h);
    return ok;
}

static bool check_piece(const vocab *v, const jval *c, char *why, size_t why_len) {
    recur_token id = (recur_token)jget(c, "id")->num;
    static const char *keys[2] = { "piece_hex", "piece_special_hex" };
    for (int sp = 0; sp < 2; sp++) {
        char buf[1024], h[2049];
        int n = vocab_token_to_piece(v, id, buf, sizeof buf, sp);
        if (n < 0 || n > (int)sizeof buf) { snprintf(why, why_len, "id %d: n=%d", id, n); return false; }
        to_hex(buf, (size_t)n, h);
        const char *want = jget(c, keys[sp])->str;
        if (strcmp(h, want) != 0) {
            snprintf(why, why_len, "id %d special=%d: want %.80s got %.80s", id, sp, want, h);
            return false;
        }
    }
    return true;
}

/* Runs every line of file through fn; prints the counts and the first failures. */
static void run_cases(const vocab *v, const char *name, const char *file, case_fn fn,
                      int *pass, int *total) {
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer/%s", RECUR_TESTDATA, file);
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    *pass = *total = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        jcur c = { line, line + len };
        jval j;
        if (len <= 1) continue;
        if (!jparse(&c, &j)) fail_msg("%s: bad JSON at line %d", file, *total + 1);
        char why[1024] = "";
        bool ok = fn(v, &j, why, sizeof why);
        (*total)++;
        if (ok) (*pass)++;
        else if (*total - *pass <= 8) printf("  FAIL %s %s #%d: %s\n", name, file, *total, why);
        jfree(&j);
    }
    free(line);
    fclose(f);
    printf("  %-28s %-30s %5d / %5d\n", name, file, *pass, *total);
}

static void run_vocab(const char *gguf_rel, const char *name, bool pieces) {
    char path[512], file[128];
    snprintf(path, sizeof path, "%s/%s", RECUR_TESTDATA, gguf_rel);
    vocab *v = load_vocab(path);
    int p1, t1, p2, t2, p3 = 0, t3 = 0;
    snprintf(file, sizeof file, "%s.jsonl", name);
    run_cases(v, gguf_rel, file, check_tokenize, &p1, &t1);
    snprintf(file, sizeof file, "%s.detok.jsonl", name);
    run_cases(v, gguf_rel, file, check_detok, &p2, &t2);
    if (pieces) {
        snprintf(file, sizeof file, "%s.pieces.jsonl", name);
        run_cases(v, gguf_rel, file, check_piece, &p3, &t3);
    }
    vocab_free(v);
    assert_true(t1 > 0 && t2 > 0);
    assert_int_equal(p1, t1);
    assert_int_equal(p2, t2);
    assert_int_equal(p3, t3);
}

/* ---- reference vectors -------------------------------------------------------------------- */

static void test_qwen3(void **st)       { (void)st; run_vocab("vocab/qwen3-vocab.gguf", "qwen3", true); }
static void test_llama3(void **st)      { (void)st; run_vocab("vocab/llama3-vocab.gguf", "llama3", true); }
static void test_llama_spm(void **st)   { (void)st; run_vocab("vocab/ggml-vocab-llama-spm.gguf", "llama-spm", true); }
static void test_stories(void **st)     { (void)st; run_vocab("vocab/stories260K.gguf", "stories260k-spm", true); }
static void test_stories_model(void **st) { (void)st; run_vocab("models/stories260K.gguf", "stories260k-spm", true); }

static void test_once_upon_a_time(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", RECUR_TESTDATA);
    vocab *v = load_vocab(path);
    assert_int_equal(vocab_kind_of(v), VOCAB_SPM);
    assert_int_equal(vocab_bos(v), 1);
    assert_int_equal(vocab_eos(v), 2);
    assert_true(vocab_add_bos(v));
    assert_true(vocab_is_eog(v, 2));
    recur_token t[8];
    const char *s = "Once upon a time";
    int n = vocab_tokenize(v, s, strlen(s), t, 8, true, false);
    assert_int_equal(n, 5);
    const recur_token want[5] = { 1, 403, 407, 261, 378 };
    assert_memory_equal(t, want, sizeof want);
    /* too small a buffer: the count, and nothing past max_tokens */
    recur_token small[3] = { -7, -7, -7 };
    assert_int_equal(vocab_tokenize(v, s, strlen(s), small, 2, true, false), 5);
    assert_int_equal(small[0], 1);
    assert_int_equal(small[2], -7);
    /* llama.cpp: the leading space is dropped from the first piece, unless a BOS was removed */
    char buf[64];
    n = vocab_detokenize(v, want + 1, 4, buf, sizeof buf, true, false);
    assert_int_equal(n, (int)strlen(s));
    assert_memory_equal(buf, s, strlen(s));
    n = vocab_detokenize(v, want, 5, buf, sizeof buf, true, false);
    assert_int_equal(n, (int)strlen(s) + 1);
    assert_memory_equal(buf, " Once", 5);
    n = vocab_detokenize(v, want, 5, buf, 3, false, true);   /* "<s> Once..." cut at 3 bytes */
    assert_int_equal(n, (int)strlen(s) + 4);
    assert_memory_equal(buf, "<s>", 3);
    vocab_free(v);
}

static void test_special_ids(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/qwen3-vocab.gguf", RECUR_TESTDATA);
    vocab *v = load_vocab(path);
    assert_int_equal(vocab_kind_of(v), VOCAB_BPE);
    assert_false(vocab_add_bos(v));
    recur_token im_end = vocab_text_to_token(v, "<|im_end|>", 10);
    recur_token eot = vocab_text_to_token(v, "<|endoftext|>", 13);
    recur_token s = vocab_text_to_token(v, "</s>", 4);
    assert_int_equal(im_end, 151645);
    assert_true(vocab_is_eog(v, im_end));
    assert_true(vocab_is_eog(v, eot));
    assert_true(vocab_is_eog(v, s));                    /* llama.cpp treats "</s>" as EOG */
    assert_true(vocab_is_control(v, s));
    assert_false(vocab_is_eog(v, vocab_text_to_token(v, "Hello", 5)));
    vocab_free(v);

    snprintf(path, sizeof path, "%s/vocab/llama3-vocab.gguf", RECUR_TESTDATA);
    v = load_vocab(path);
    assert_true(vocab_add_bos(v));                      /* llama-bpe: BOS without the key */
    assert_int_equal(vocab_bos(v), 128000);
    assert_true(vocab_is_eog(v, vocab_text_to_token(v, "<|eot_id|>", 10)));
    vocab_free(v);
}

/* ---- streaming detokenizer ---------------------------------------------------------------- */

static void test_stream(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", RECUR_TESTDATA);
    vocab *v = load_vocab(path);
    recur_token b_c3 = vocab_text_to_token(v, "<0xC3>", 6), b_a9 = vocab_text_to_token(v, "<0xA9>", 6);
    recur_token b_ff = vocab_text_to_token(v, "<0xFF>", 6), b_e2 = vocab_text_to_token(v, "<0xE2>", 6);
    recur_token b_82 = vocab_text_to_token(v, "<0x82>", 6), b_ac = vocab_text_to_token(v, "<0xAC>", 6);
    recur_token hello = vocab_text_to_token(v, "\xe2\x96\x81Hello", 8);
    assert_true(b_c3 >= 0 && b_a9 >= 0 && b_ff >= 0 && b_e2 >= 0 && b_82 >= 0 && b_ac >= 0 && hello >= 0);
    int cap = 16 + 3 * vocab_max_piece_len(v);
    char *out = malloc((size_t)cap);
    vocab_stream s;
    vocab_stream_init(&s);

    /* "é" split over two byte tokens: held back, then emitted whole */
    assert_int_equal(vocab_stream_push(v, &s, b_c3, false, out, cap), 0);
    assert_int_equal(s.n_pending, 1);
    assert_int_equal(vocab_stream_push(v, &s, b_a9, false, out, cap), 2);
    assert_memory_equal(out, "\xc3\xa9", 2);

    /* "€" over three tokens */
    assert_int_equal(vocab_stream_push(v, &s, b_e2, false, out, cap), 0);
    assert_int_equal(vocab_stream_push(v, &s, b_82, false, out, cap), 0);
    assert_int_equal(vocab_stream_push(v, &s, b_ac, false, out, cap), 3);
    assert_memory_equal(out, "\xe2\x82\xac", 3);

    /* an invalid byte becomes U+FFFD */
    assert_int_equal(vocab_stream_push(v, &s, b_ff, false, out, cap), 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);

    /* an unfinished character broken by a normal piece: U+FFFD, then the piece */
    assert_int_equal(vocab_stream_push(v, &s, b_c3, false, out, cap), 0);
    assert_int_equal(vocab_stream_push(v, &s, hello, false, out, cap), 9);
    assert_memory_equal(out, "\xef\xbf\xbd Hello", 9);

    /* a stray continuation byte */
    assert_int_equal(vocab_stream_push(v, &s, b_a9, false, out, cap), 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);

    /* flush: an unfinished character comes out as U+FFFD, then nothing is held */
    assert_int_equal(vocab_stream_push(v, &s, b_e2, false, out, cap), 0);
    assert_int_equal(vocab_stream_push(v, &s, b_82, false, out, cap), 0);
    assert_int_equal(vocab_stream_flush(&s, out, cap), 3);
    assert_memory_equal(out, "\xef\xbf\xbd", 3);
    assert_int_equal(vocab_stream_flush(&s, out, cap), 0);

    /* control tokens: nothing unless special */
    assert_int_equal(vocab_stream_push(v, &s, 1, false, out, cap), 0);
    assert_int_equal(vocab_stream_push(v, &s, 1, true, out, cap), 3);
    assert_memory_equal(out, "<s>", 3);

    /* too little room: an error, and nothing consumed */
    assert_int_equal(vocab_stream_push(v, &s, b_c3, false, out, cap), 0);
    assert_true(vocab_stream_push(v, &s, hello, false, out, 2) < 0);
    assert_int_equal(s.n_pending, 1);
    assert_int_equal(vocab_stream_push(v, &s, b_a9, false, out, cap), 2);
    assert_memory_equal(out, "\xc3\xa9", 2);

    assert_true(vocab_stream_push(v, &s, vocab_n_tokens(v), false, out, cap) < 0);
    free(out);
    vocab_free(v);
}

/* ---- load errors and files without a tokenizer -------------------------------------------- */

typedef struct gbuf { uint8_t *p; size_t n, cap; } gbuf;

static void gput(gbuf *b, const void *s, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}
static void gput_u32(gbuf *b, uint32_t x) { gput(b, &x, 4); }
static void gput_u64(gbuf *b, uint64_t x) { gput(b, &x, 8); }
static void gput_str(gbuf *b, const char *s) { gput_u64(b, strlen(s)); gput(b, s, strlen(s)); }
static void gkv_str(gbuf *b, const char *k, const char *s) {
    gput_str(b, k); gput_u32(b, GGUF_KV_STRING); gput_str(b, s);
}
static void gkv_strs(gbuf *b, const char *k, const char *const *s, size_t n) {
    gput_str(b, k); gput_u32(b, GGUF_KV_ARRAY); gput_u32(b, GGUF_KV_STRING); gput_u64(b, n);
    for (size_t i = 0; i < n; i++) gput_str(b, s[i]);
}

/* A GGUF v3 file with no tensors and the given tokenizer KVs (model NULL: no tokenizer). */
static gbuf make_gguf(const char *model, const char *pre) {
    static const char *const toks[] = { "a", "b", "ab", "<|endoftext|>" };
    static const char *const merges[] = { "a b" };
    gbuf b = { 0 };
    uint32_t n_kv = 1 + (model ? 3 : 0) + (pre ? 1 : 0);
    gput_u32(&b, 0x46554747u); gput_u32(&b, 3); gput_u64(&b, 0); gput_u64(&b, n_kv);
    gkv_str(&b, "general.architecture", "llama");
    if (model) {
        gkv_str(&b, "tokenizer.ggml.model", model);
        gkv_strs(&b, "tokenizer.ggml.tokens", toks, 4);
        gkv_strs(&b, "tokenizer.ggml.merges", merges, 1);
    }
    if (pre) gkv_str(&b, "tokenizer.ggml.pre", pre);
    while (b.n % 32) gput(&b, "", 1);
    return b;
}

static recur_status load_mem(const gbuf *b, vocab **v, char *err, size_t err_len) {
    gguf_file *g;
    recur_status rc = gguf_open_memory(b->p, b->n, &g, err, err_len);
    if (rc) fail_msg("gguf_open_memory: %s", err);
    rc = vocab_load(g, v, err, err_len);
    gguf_close(g);
    return rc;
}

static void test_load_errors(void **st) {
    (void)st;
    char err[256] = "";
    vocab *v = NULL;

    gbuf b = make_gguf("gpt2", "no-such-pre");
    assert_int_equal(load_mem(&b, &v, err, sizeof err), RECUR_E_UNSUPPORTED);
    assert_null(v);
    assert_non_null(strstr(err, "no-such-pre"));
    assert_non_null(strstr(err, "qwen2"));
    assert_non_null(strstr(err, "llama-bpe"));
    free(b.p);

    b = make_gguf("bert", NULL);
    assert_int_equal(load_mem(&b, &v, err, sizeof err), RECUR_E_UNSUPPORTED);
    assert_non_null(strstr(err, "gpt2"));
    free(b.p);

    /* no tokenizer at all: a VOCAB_NONE vocab whose tokenize fails */
    b = make_gguf(NULL, NULL);
    assert_int_equal(load_mem(&b, &v, err, sizeof err), RECUR_OK);
    assert_int_equal(vocab_kind_of(v), VOCAB_NONE);
    recur_token t[4];
    assert_true(vocab_tokenize(v, "ab", 2, t, 4, true, true) < 0);
    assert_int_equal(vocab_bos(v), -1);
    vocab_free(v);
    free(b.p);

    /* a tiny BPE vocab: "ab" merges, the special token splits, EOG by text */
    b = make_gguf("gpt2", "gpt-2");
    assert_int_equal(load_mem(&b, &v, err, sizeof err), RECUR_OK);
    free(b.p);                                          /* the vocab owns copies */
    const char *s = "ab<|endoftext|>ba";
    int n = vocab_tokenize(v, s, strlen(s), t, 4, false, true);
    assert_int_equal(n, 4);
    assert_int_equal(t[0], 2); assert_int_equal(t[1], 3);
    assert_int_equal(t[2], 1); assert_int_equal(t[3], 0);
    assert_true(vocab_is_eog(v, 3));
    assert_true(vocab_token_to_piece(v, 4, NULL, 0, false) < 0);
    vocab_free(v);
    vocab_free(NULL);
}

/* The tiny models' vocabs (every pre-tokenizer recur supports): load, and text survives a
 * tokenize / detokenize round trip. */
static void test_tiny_model_vocabs(void **st) {
    (void)st;
    static const char *const files[] = { "pub-llama-F32", "pub-qwen3-F32", "pub-qwen35-F32",
        "pub-lfm2-F32", "pub-mamba-F32", "pub-qwen3next-F32" };
    static const char text[] = "Hello world, this is a test: 12345 \xc3\xbc" "n\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 "
                               "\xe6\x97\xa5\xe6\x9c\xac\n\n\tcode();  end";
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512], out[256];
        snprintf(path, sizeof path, "%s/models/%s.gguf", RECUR_TESTDATA, files[i]);
        vocab *v = load_vocab(path);
        recur_token t[256];
        int n = vocab_tokenize(v, text, strlen(text), t, 256, false, true);
        assert_true(n > 0 && n <= 256);
        int m = vocab_detokenize(v, t, n, out, sizeof out, false, false);
        if (m != (int)strlen(text) || memcmp(out, text, strlen(text)) != 0)
            fail_msg("%s: round trip gave %d bytes \"%.*s\"", files[i], m, m > 0 ? m : 0, out);
        vocab_free(v);
    }
}

/* Invariant 2: concurrent tokenizing of one vocab gives the single-threaded result. */
typedef struct tjob { const vocab *v; const char *text; const recur_token *want; int n; bool ok; } tjob;

static void *tok_worker(void *arg) {
    tjob *j = arg;
    recur_token t[512];
    j->ok = true;
    for (int it = 0; it < 200 && j->ok; it++) {
        int n = vocab_tokenize(j->v, j->text, strlen(j->text), t, 512, true, true);
        j->ok = n == j->n && memcmp(t, j->want, (size_t)n * sizeof *t) == 0;
    }
    return NULL;
}

static void test_threads(void **st) {
    (void)st;
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/qwen3-vocab.gguf", RECUR_TESTDATA);
    vocab *v = load_vocab(path);
    const char *text = "<|im_start|>user\nHello, w\xc3\xb6rld! 12345 \xe6\x97\xa5\xe6\x9c\xac<|im_end|>\n";
    recur_token want[512];
    int n = vocab_tokenize(v, text, strlen(text), want, 512, true, true);
    assert_true(n > 0 && n < 512);
    pthread_t th[4];
    tjob jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (tjob){ v, text, want, n, false };
        assert_int_equal(pthread_create(&th[i], NULL, tok_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(jobs[i].ok);
    }
    vocab_free(v);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_once_upon_a_time),
        cmocka_unit_test(test_special_ids),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_tiny_model_vocabs),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_stories_model),
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_qwen3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
