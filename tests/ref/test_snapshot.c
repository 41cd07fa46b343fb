/* test_snapshot.c — snapshots are exact: a 300-token prompt is evaluated capturing snapshots
 * at positions 0, 1, 63, 64, 150 and 299; each is serialized, loaded, restored into a fresh
 * sequence of a fresh context (and, as a checkpoint, into the original sequence, trimming its
 * cells), and the rest of the prompt evaluated: the logits must be bit-identical (memcmp) to
 * the uninterrupted run — with other sequences in the batch, several ubatch sizes and 1 or 2
 * threads. Also: another model's snapshot is refused, corrupt bytes give RECUR_E_FORMAT, and
 * bad capture lists give RECUR_E_INVALID with nothing changed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "recur.h"
#include "ref_model.h"
#include "ref_prompt.h"

#define N_PROMPT 300
#define N_OTHER 120
#define N_CAP 6
static const recur_pos cap_pos[N_CAP] = { 0, 1, 63, 64, 150, 299 };

typedef struct cfg {
    uint32_t n_ubatch;
    int      n_threads;
    bool     other;   /* a second sequence shares the batch */
} cfg;

static recur_ctx *new_ctx(recur_model *m, const cfg *k) {
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_seq_max = 3;
    cp.n_batch = 512;
    cp.n_ubatch = k->n_ubatch;
    cp.n_threads = k->n_threads;
    recur_ctx *ctx;
    char err[256];
    if (recur_ctx_new(m, &cp, &ctx, err, sizeof err)) fail_msg("ctx: %s", err);
    return ctx;
}

/* The batch: seq `seq` positions [p0, N_PROMPT) of the prompt, with (when k->other) seq 1's
 * other prompt interleaved. Returns the number of entries. */
static int make_batch(int nv, const cfg *k, recur_seq_id seq, int p0, recur_token *tok, recur_pos *pos,
                      recur_seq_id *sq, int8_t *want) {
    int n = 0, i1 = 0;
    for (int i = p0; i < N_PROMPT || (k->other && i1 < N_OTHER); i++) {
        if (i < N_PROMPT) { tok[n] = prompt_tok(i, nv, 0); pos[n] = i; sq[n] = seq; want[n++] = 1; }
        if (k->other && i1 < N_OTHER) { tok[n] = prompt_tok(i1, nv, 77); pos[n] = i1++; sq[n] = 1; want[n++] = 0; }
    }
    return n;
}

/* Decodes make_batch(seq, p0) with captures; copies seq's logits at positions p0.. into out. */
static void eval(recur_ctx *ctx, int nv, const cfg *k, recur_seq_id seq, int p0, const recur_capture *caps, int n_cap,
                 float *out) {
    static recur_token tok[N_PROMPT + N_OTHER];
    static recur_pos pos[N_PROMPT + N_OTHER];
    static recur_seq_id sq[N_PROMPT + N_OTHER];
    static int8_t want[N_PROMPT + N_OTHER];
    const int n = make_batch(nv, k, seq, p0, tok, pos, sq, want);
    recur_batch b = { n, tok, pos, sq, want };
    char err[256];
    if (recur_decode_capture(ctx, &b, caps, n_cap, err, sizeof err)) fail_msg("decode: %s", err);
    for (int j = 0; j < n; j++)
        if (sq[j] == seq) memcpy(out + (size_t)pos[j] * nv, recur_get_logits(ctx, j), nv * sizeof(float));
}

static void expect_same(const float *ref, const float *got, int nv, int p0, const char *what, int p) {
    if (memcmp(ref + (size_t)p0 * nv, got + (size_t)p0 * nv, (size_t)(N_PROMPT - p0) * nv * sizeof(float)) != 0)
        fail_msg("%s: logits after restoring the snapshot at %d differ", what, p);
}

/* Serializes s and loads it back (the loaded one is what gets restored). */
static recur_snapshot *round_trip(recur_ctx *ctx, const recur_snapshot *s) {
    const size_t n = recur_snapshot_bytes(s);
    unsigned char *buf = malloc(n);
    assert_int_equal(recur_snapshot_save(s, buf, n), n);
    recur_snapshot *out;
    char err[256];
    if (recur_snapshot_load(ctx, buf, n, &out, err, sizeof err)) fail_msg("load: %s", err);
    free(buf);
    return out;
}

/* Restores every snapshot into a fresh sequence of a fresh context and continues the prompt. */
static void check_fresh(recur_model *m, const cfg *k, recur_snapshot **snaps, const float *ref, const char *name) {
    const int nv = recur_model_n_vocab(m);
    float *got = calloc((size_t)N_PROMPT * nv, sizeof(float));
    char err[256];
    for (int i = 0; i < N_CAP; i++) {
        recur_ctx *ctx = new_ctx(m, k);
        recur_snapshot *s = round_trip(ctx, snaps[i]);
        if (recur_snapshot_restore(ctx, s, 2, err, sizeof err)) fail_msg("%s restore: %s", name, err);
        assert_int_equal(recur_seq_pos_max(ctx, 2), cap_pos[i]);
        if (cap_pos[i] + 1 < N_PROMPT) {
            eval(ctx, nv, k, 2, cap_pos[i] + 1, NULL, 0, got);
            expect_same(ref, got, nv, cap_pos[i] + 1, name, cap_pos[i]);
        }
        recur_snapshot_free(s);
        recur_ctx_free(ctx);
    }
    free(got);
}

/* Checkpoints restored into the sequence that still holds the cells: the tail is trimmed. */
static void check_trim(recur_model *m, recur_ctx *ctx, const cfg *k, recur_snapshot **ckpt, const float *ref,
                       const char *name) {
    const int nv = recur_model_n_vocab(m);
    float *got = calloc((size_t)N_PROMPT * nv, sizeof(float));
    char err[256];
    for (int i = N_CAP - 1; i >= 0; i--) {
        if (recur_snapshot_restore(ctx, ckpt[i], 0, err, sizeof err)) fail_msg("%s trim restore: %s", name, err);
        assert_int_equal(recur_seq_pos_max(ctx, 0), cap_pos[i]);
        if (k->other) assert_int_equal(recur_seq_rm(ctx, 1, -1, -1), RECUR_OK);
        if (cap_pos[i] + 1 < N_PROMPT) {
            eval(ctx, nv, k, 0, cap_pos[i] + 1, NULL, 0, got);
            expect_same(ref, got, nv, cap_pos[i] + 1, name, cap_pos[i]);
        }
    }
    free(got);
}

/* Captures SEQUENCE snapshots in one run and (when full) checkpoints in a second (pairs in
 * one list must be distinct), checks both runs' logits, then every restore. attn: the model has attention
 * layers (a checkpoint then needs the cells of its prefix: no fresh-sequence restore). */
static void check_cfg(recur_model *m, const cfg *k, const float *ref, bool attn, bool full, const char *name) {
    const int nv = recur_model_n_vocab(m);
    recur_ctx *ctx = new_ctx(m, k), *ctx2 = new_ctx(m, k);
    recur_snapshot *seqs[N_CAP], *ckpts[N_CAP];
    recur_capture seq_caps[N_CAP + 1], ck_caps[N_CAP];
    for (int i = 0; i < N_CAP; i++) {
        seqs[i] = recur_snapshot_new(ctx, RECUR_SNAP_SEQUENCE, N_PROMPT - 1);
        ckpts[i] = recur_snapshot_new(ctx, RECUR_SNAP_CHECKPOINT, -1);
        assert_non_null(seqs[i]);
        assert_non_null(ckpts[i]);
        seq_caps[i] = (recur_capture){ 0, cap_pos[i], seqs[i] };
        ck_caps[i] = (recur_capture){ 0, cap_pos[i], ckpts[i] };
    }
    recur_snapshot *other = recur_snapshot_new(ctx, RECUR_SNAP_CHECKPOINT, -1);
    int n_seq_caps = N_CAP;
    if (k->other) seq_caps[n_seq_caps++] = (recur_capture){ 1, 50, other };
    float *got = calloc((size_t)N_PROMPT * nv, sizeof(float));
    eval(ctx, nv, k, 0, 0, seq_caps, n_seq_caps, got);
    expect_same(ref, got, nv, 0, name, -1);   /* capturing changes no logit */
    check_fresh(m, k, seqs, ref, name);
    if (full) {
        eval(ctx2, nv, k, 0, 0, ck_caps, N_CAP, got);
        expect_same(ref, got, nv, 0, name, -1);
        for (int i = 0; i < N_CAP; i++) assert_int_equal(recur_snapshot_pos(ckpts[i]), cap_pos[i]);
        if (!attn) check_fresh(m, k, ckpts, ref, name);
        check_trim(m, ctx2, k, ckpts, ref, name);
    }
    /* the capture at the last position equals a snapshot taken after the run */
    recur_snapshot *t = recur_snapshot_new(ctx, RECUR_SNAP_SEQUENCE, -1);
    char err[256];
    assert_int_equal(recur_snapshot_take(ctx, 0, t, err, sizeof err), RECUR_OK);
    const size_t nb = recur_snapshot_bytes(t);
    assert_int_equal(nb, recur_snapshot_bytes(seqs[N_CAP - 1]));
    assert_int_equal(nb, recur_snapshot_size(ctx, RECUR_SNAP_SEQUENCE, N_PROMPT - 1));
    unsigned char *a = malloc(nb), *b = malloc(nb);
    recur_snapshot_save(t, a, nb);
    recur_snapshot_save(seqs[N_CAP - 1], b, nb);
    assert_memory_equal(a, b, nb);
    free(a); free(b); free(got);
    recur_snapshot_free(t);
    recur_snapshot_free(other);
    for (int i = 0; i < N_CAP; i++) { recur_snapshot_free(seqs[i]); recur_snapshot_free(ckpts[i]); }
    recur_ctx_free(ctx2);
    recur_ctx_free(ctx);
}

static void check_model(const char *name, bool attn) {
    recur_model *m = ref_load(name);
    const int nv = recur_model_n_vocab(m);
    const cfg base = { 512, 2, false };
    recur_ctx *ctx = new_ctx(m, &base);
    float *ref = calloc((size_t)N_PROMPT * nv, sizeof(float));
    eval(ctx, nv, &base, 0, 0, NULL, 0, ref);
    recur_ctx_free(ctx);
    const cfg cfgs[] = { { 64, 2, false }, { 512, 1, true }, { 13, 2, true } };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) check_cfg(m, &cfgs[i], ref, attn, i == 0, name);
    free(ref);
    recur_model_free(m);
}

#define MODEL_TEST(fn, name, rec) static void fn(void **state) { (void)state; check_model(name, rec); }
MODEL_TEST(lfm2_f32, "pub-lfm2-F32", true)
MODEL_TEST(lfm2_q8_0, "pub-lfm2-Q8_0", true)
MODEL_TEST(mamba_f32, "pub-mamba-F32", false)
MODEL_TEST(mamba_q8_0, "pub-mamba-Q8_0", false)
MODEL_TEST(mamba2_f32, "pub-mamba2-F32", false)
MODEL_TEST(mamba2_q8_0, "pub-mamba2-Q8_0", false)
MODEL_TEST(qwen3_f32, "pub-qwen3-F32", true)
MODEL_TEST(qwen35_f32, "pub-qwen35-F32", true)
MODEL_TEST(qwen35_q8_0, "pub-qwen35-Q8_0", true)
/* one weight type per MoE arch: the snapshot path is the arch's, and this test is long */
MODEL_TEST(qwen35moe_q8_0, "pub-qwen35moe-Q8_0", true)
MODEL_TEST(qwen3next_f32, "pub-qwen3next-F32", true)
MODEL_TEST(llama_f32, "pub-llama-F32", true)

/* ---- sizes ------------------------------------------------------------------------------ */

/* recur_model_state_bytes / _kv_bytes_per_token are what a context holds per sequence: a
 * checkpoint is the 64-byte header, the recurrent state and an 8-byte checksum; a sequence
 * snapshot grows by one token's K/V rows per position. Hand-computed for the tiny models
 * (F32 states, F16 K/V): */
static void sizes_match_getters(void **state) {
    (void)state;
    static const struct { const char *name; size_t rs, kv; } k[] = {
        /* 3 DeltaNet layers x ((4-1) x (2*2*128 + 256) + 256*128) x 4; 1 attention layer x 2 x 2*64 x 2 */
        { "pub-qwen35-F32", 420864, 512 },
        /* 1 DeltaNet layer x ((4-1) x (2*1*128 + 256) + 256*128) x 4; 1 attention layer */
        { "pub-qwen35moe-Q8_0", 137216, 512 },
        { "pub-qwen3next-F32", 137216, 512 },
        { "pub-mamba-F32", 155648, 0 },       /* 4 x ((4-1) x 512 + 16*512) x 4 */
        { "pub-mamba2-Q8_0", 1085440, 0 },    /* 4 x ((4-1) x (512 + 2*128) + 128*512) x 4 */
        { "pub-lfm2-F32", 4096, 512 },        /* 2 conv layers x (3-1) x 256 x 4; 2 attention x 2 x 2*32 x 2 */
        { "pub-llama-F32", 0, 2048 },         /* 4 x 4 heads x 2*32 x 2 */
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        recur_model *m = ref_load(k[i].name);
        assert_int_equal(recur_model_state_bytes(m), k[i].rs);
        assert_int_equal(recur_model_kv_bytes_per_token(m), k[i].kv);
        const cfg c = { 64, 1, false };
        recur_ctx *ctx = new_ctx(m, &c);
        assert_int_equal(recur_snapshot_size(ctx, RECUR_SNAP_CHECKPOINT, 0), 64 + k[i].rs + 8);
        for (recur_pos p = 1; p < 300; p += 149)
            assert_int_equal(recur_snapshot_size(ctx, RECUR_SNAP_SEQUENCE, p) -
                             recur_snapshot_size(ctx, RECUR_SNAP_SEQUENCE, p - 1), k[i].kv);
        recur_ctx_free(ctx);
        recur_model_free(m);
    }
}

/* ---- refusals --------------------------------------------------------------------------- */

static void other_model_refused(void **state) {
    (void)state;
    recur_model *ma = ref_load("pub-mamba2-F32"), *mb = ref_load("pub-mamba2-Q8_0");
    assert_int_not_equal(recur_model_id(ma), recur_model_id(mb));
    const cfg k = { 64, 2, false };
    recur_ctx *ca = new_ctx(ma, &k), *cb = new_ctx(mb, &k);
    recur_snapshot *sa = recur_snapshot_new(ca, RECUR_SNAP_CHECKPOINT, -1);
    assert_int_equal(recur_snapshot_model_id(sa), recur_model_id(ma));
    float *got = calloc((size_t)N_PROMPT * recur_model_n_vocab(ma), sizeof(float));
    const recur_capture cap = { 0, 10, sa };
    eval(ca, recur_model_n_vocab(ma), &k, 0, 0, &cap, 1, got);
    char err[256];
    assert_int_equal(recur_snapshot_restore(cb, sa, 0, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(recur_seq_pos_max(cb, 0), -1);
    const size_t n = recur_snapshot_bytes(sa);
    unsigned char *buf = malloc(n);
    assert_int_equal(recur_snapshot_save(sa, buf, n), n);
    recur_snapshot *back = NULL;
    assert_int_equal(recur_snapshot_load(cb, buf, n, &back, err, sizeof err), RECUR_E_INVALID);
    assert_null(back);
    /* capture into another model's snapshot */
    recur_token tok = 5; recur_pos pos = 0; recur_seq_id seq = 0;
    recur_batch b = { 1, &tok, &pos, &seq, NULL };
    const recur_capture bad = { 0, 0, sa };
    assert_int_equal(recur_decode_capture(cb, &b, &bad, 1, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(recur_snapshot_pos(sa), 10);
    free(buf); free(got);
    recur_snapshot_free(sa);
    recur_ctx_free(ca); recur_ctx_free(cb);
    recur_model_free(ma); recur_model_free(mb);
}

/* The states of a context with the Q8_0 block order are not the default context's (other
 * bits for the same prefix): their ids differ and each refuses the other's snapshots. */
static void other_q8_order_refused(void **state) {
    (void)state;
    recur_model *m = ref_load("pub-mamba2-Q8_0");
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 256;
    recur_ctx *cg, *cb;
    char err[256];
    assert_int_equal(recur_ctx_new(m, &cp, &cg, err, sizeof err), RECUR_OK);
    cp.q8_order = RECUR_Q8_BLOCK;
    assert_int_equal(recur_ctx_new(m, &cp, &cb, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_ctx_state_id(cg), recur_model_id(m));
    assert_int_not_equal(recur_ctx_state_id(cb), recur_model_id(m));
    cp.q8_order = 2;
    recur_ctx *bad = NULL;
    assert_int_equal(recur_ctx_new(m, &cp, &bad, err, sizeof err), RECUR_E_INVALID);
    assert_null(bad);
    recur_token tok[4] = { 1, 2, 3, 4 };
    recur_pos pos[4] = { 0, 1, 2, 3 };
    recur_seq_id seq[4] = { 0, 0, 0, 0 };
    recur_batch b = { 4, tok, pos, seq, NULL };
    assert_int_equal(recur_decode(cb, &b, err, sizeof err), RECUR_OK);
    recur_snapshot *sb = recur_snapshot_new(cb, RECUR_SNAP_CHECKPOINT, -1);
    assert_int_equal(recur_snapshot_take(cb, 0, sb, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_snapshot_model_id(sb), recur_ctx_state_id(cb));
    assert_int_equal(recur_snapshot_restore(cg, sb, 0, err, sizeof err), RECUR_E_INVALID);
    assert_int_equal(recur_seq_pos_max(cg, 0), -1);
    assert_int_equal(recur_snapshot_restore(cb, sb, 0, err, sizeof err), RECUR_OK);
    recur_snapshot_free(sb);
    recur_ctx_free(cg); recur_ctx_free(cb);
    recur_model_free(m);
}

static void corrupt_refused(void **state) {
    (void)state;
    recur_model *m = ref_load("pub-lfm2-F32");
    const cfg k = { 512, 2, false };
    recur_ctx *ctx = new_ctx(m, &k);
    recur_snapshot *s = recur_snapshot_new(ctx, RECUR_SNAP_SEQUENCE, -1);
    float *got = calloc((size_t)N_PROMPT * recur_model_n_vocab(m), sizeof(float));
    const recur_capture cap = { 0, 20, s };
    eval(ctx, recur_model_n_vocab(m), &k, 0, 0, &cap, 1, got);
    const size_t n = recur_snapshot_bytes(s);
    unsigned char *buf = malloc(n);
    assert_int_equal(recur_snapshot_save(s, buf, n), n);
    char err[256];
    recur_snapshot *back = NULL;
    const size_t flips[] = { 0, 9, 13, 17, 25, 33, 49, 64, 100, n / 2, n - 9, n - 1 };
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        buf[flips[i]] ^= 0x10;
        assert_int_equal(recur_snapshot_load(ctx, buf, n, &back, err, sizeof err), RECUR_E_FORMAT);
        assert_null(back);
        buf[flips[i]] ^= 0x10;
    }
    const size_t cuts[] = { 0, 10, 64, 72, n / 2, n - 8, n - 1 };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++)
        assert_int_equal(recur_snapshot_load(ctx, buf, cuts[i], &back, err, sizeof err), RECUR_E_FORMAT);
    assert_int_equal(recur_snapshot_load(ctx, buf, n, &back, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_snapshot_pos(back), 20);
    recur_snapshot_free(back);
    free(buf); free(got);
    recur_snapshot_free(s);
    recur_ctx_free(ctx);
    recur_model_free(m);
}

static void bad_capture_rejected(void **state) {
    (void)state;
    recur_model *m = ref_load("pub-mamba-F32");
    const cfg k = { 64, 2, false };
    recur_ctx *ctx = new_ctx(m, &k);
    const int nv = recur_model_n_vocab(m);
    recur_snapshot *a = recur_snapshot_new(ctx, RECUR_SNAP_CHECKPOINT, -1);
    recur_snapshot *b = recur_snapshot_new(ctx, RECUR_SNAP_CHECKPOINT, -1);
    recur_snapshot *short_seq = recur_snapshot_new(ctx, RECUR_SNAP_SEQUENCE, 10);
    recur_token tok[N_PROMPT]; recur_pos pos[N_PROMPT]; recur_seq_id sq[N_PROMPT]; int8_t want[N_PROMPT];
    const int n = make_batch(nv, &k, 0, 0, tok, pos, sq, want);
    recur_batch bt = { n, tok, pos, sq, want };
    const recur_capture bad[][2] = {
        { { 0, N_PROMPT, a }, { 0, 5, b } },   /* beyond the batch */
        { { 0, 5, a }, { 0, -1, b } },         /* before it */
        { { 1, 5, a }, { 0, 6, b } },          /* a sequence not in the batch */
        { { 0, 5, a }, { 0, 5, b } },          /* duplicated position */
        { { 0, 5, a }, { 0, 6, a } },          /* the same snapshot twice */
        { { 0, 5, a }, { 0, 20, short_seq } }, /* beyond the snapshot's reach */
        { { 0, 5, a }, { 7, 6, b } },          /* bad sequence id */
        { { 0, 5, a }, { 0, 6, NULL } },       /* no snapshot */
    };
    char err[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(recur_decode_capture(ctx, &bt, bad[i], 2, err, sizeof err), RECUR_E_INVALID);
        assert_int_equal(recur_seq_pos_max(ctx, 0), -1);
        assert_int_equal(recur_snapshot_pos(a), -1);
        assert_int_equal(recur_snapshot_pos(b), -1);
    }
    assert_int_equal(recur_snapshot_restore(ctx, a, 0, err, sizeof err), RECUR_E_INVALID);   /* empty */
    const recur_capture good[2] = { { 0, 5, a }, { 0, 6, b } };
    assert_int_equal(recur_decode_capture(ctx, &bt, good, 2, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_snapshot_pos(a), 5);
    assert_int_equal(recur_snapshot_pos(b), 6);
    assert_int_equal(recur_snapshot_size(ctx, RECUR_SNAP_CHECKPOINT, 5), recur_snapshot_bytes(a));
    recur_snapshot_free(a); recur_snapshot_free(b); recur_snapshot_free(short_seq);
    recur_ctx_free(ctx);
    recur_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lfm2_f32), cmocka_unit_test(lfm2_q8_0), cmocka_unit_test(mamba_f32),
        cmocka_unit_test(mamba_q8_0), cmocka_unit_test(mamba2_f32), cmocka_unit_test(mamba2_q8_0),
        cmocka_unit_test(qwen3_f32), cmocka_unit_test(qwen35_f32), cmocka_unit_test(qwen35_q8_0),
        cmocka_unit_test(qwen35moe_q8_0), cmocka_unit_test(qwen3next_f32),
        cmocka_unit_test(llama_f32), cmocka_unit_test(sizes_match_getters), cmocka_unit_test(other_model_refused), cmocka_unit_test(other_q8_order_refused),
        cmocka_unit_test(corrupt_refused), cmocka_unit_test(bad_capture_rejected),
    };
    const char *only = getenv("RECUR_TEST_FILTER");   /* e.g. "qwen3next*": run a subset */
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
