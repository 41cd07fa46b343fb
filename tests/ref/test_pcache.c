/* test_pcache.c — the shared prompt cache on real tiny models (hybrid qwen35 and qwen3next,
 * recurrent mamba2, attention-only qwen3 and llama):
 *  - prompt A is evaluated with checkpoints at 49, 99 and 199 (the last with logits) filed;
 *    prompt B shares A's first 121 tokens: the cache offers 100 tokens (recurrent: the
 *    checkpoint at 99) or 121 (attention: any prefix), restored into another sequence; the rest
 *    of B evaluated there gives logits bit-identical (memcmp) to B evaluated from scratch;
 *  - an identical resend of A restores all 200 tokens and the cached logits equal A's;
 *  - a budget is never exceeded while many prompts are filed, eviction keeps the newest turn;
 *  - at most max_ckpt_path checkpoints stay on one path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/pcache.h"
#include "recur.h"
#include "ref_model.h"
#include "ref_prompt.h"

#define NA 200
#define NB 180
#define SHARED 121

static recur_ctx *new_ctx(recur_model *m) { return ref_ctx(m, 2048, 3, 256, 64, 2); }

/* Evaluates tok[p0 .. n) in seq with captures; logits of every position into out[pos]. */
static void eval(recur_ctx *ctx, const recur_token *tok, int p0, int n, recur_seq_id seq, const recur_capture *caps,
                 int n_cap, float *out, int nv) {
    recur_pos pos[256];
    recur_seq_id sq[256];
    int8_t want[256];
    for (int i = p0; i < n; i++) { pos[i - p0] = i; sq[i - p0] = seq; want[i - p0] = 1; }
    recur_batch b = { n - p0, tok + p0, pos, sq, want };
    char err[256];
    if (recur_decode_capture(ctx, &b, caps, n_cap, err, sizeof err)) fail_msg("decode: %s", err);
    for (int i = p0; i < n; i++) memcpy(out + (size_t)i * nv, recur_get_logits(ctx, i - p0), (size_t)nv * sizeof(float));
}

static void check_model(const char *name) {
    recur_model *m = ref_load(name);
    recur_ctx *ctx = new_ctx(m);
    const int nv = recur_model_n_vocab(m);
    const bool recurrent = recur_model_state_bytes(m) > 0;
    pcache_params pp = { .budget_bytes = -1, .max_ckpt_path = 32 };
    pcache *pc;
    char err[256];
    assert_int_equal(pcache_new(ctx, &pp, &pc, err, sizeof err), RECUR_OK);

    recur_token a[NA], b[NB];
    for (int i = 0; i < NA; i++) a[i] = prompt_tok(i, nv, 1);
    for (int i = 0; i < NB; i++) b[i] = i < SHARED ? a[i] : prompt_tok(i, nv, 2);
    float *la = malloc((size_t)NA * nv * sizeof(float)), *lb = malloc((size_t)NB * nv * sizeof(float));
    float *lr = malloc((size_t)NB * nv * sizeof(float));

    /* A in seq 0 with three checkpoints */
    const recur_pos at[3] = { 49, 99, NA - 1 };
    pcache_ckpt *ck[3];
    recur_capture caps[3];
    int n_cap = 0;
    for (int k = 0; k < 3; k++) {
        ck[k] = pcache_ckpt_new(pc, k == 2);
        assert_non_null(ck[k]);
        if (recurrent) caps[n_cap++] = (recur_capture){ 0, at[k], pcache_ckpt_snap(ck[k]) };
        else assert_null(pcache_ckpt_snap(ck[k]));
    }
    eval(ctx, a, 0, NA, 0, caps, n_cap, la, nv);
    for (int k = 0; k < 3; k++)
        assert_int_equal(pcache_ckpt_commit(pc, 0, a, at[k], ck[k], la + (size_t)at[k] * nv, 0), RECUR_OK);

    /* B from scratch in seq 2, then from the cache in seq 1 */
    eval(ctx, b, 0, NB, 2, NULL, 0, lb, nv);
    pcache_hit h = pcache_lookup(pc, b, NB);
    assert_int_equal(h.n_match, SHARED);
    assert_int_equal(h.n_restore, recurrent ? 100 : SHARED);
    assert_false(h.logits);
    assert_int_equal(pcache_restore(pc, 1, b, NB, &h, 0, NULL, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_seq_pos_max(ctx, 1), h.n_restore - 1);
    eval(ctx, b, h.n_restore, NB, 1, NULL, 0, lr, nv);
    assert_memory_equal(lr + (size_t)h.n_restore * nv, lb + (size_t)h.n_restore * nv,
                        (size_t)(NB - h.n_restore) * nv * sizeof(float));

    /* identical resend of A: nothing to evaluate, the logits come from the cache */
    h = pcache_lookup(pc, a, NA);
    assert_true(h.logits);
    assert_int_equal(h.n_restore, NA);
    float *cached = malloc((size_t)nv * sizeof(float));
    recur_seq_rm(ctx, 1, -1, -1);
    assert_int_equal(pcache_restore(pc, 1, a, NA, &h, 0, cached, err, sizeof err), RECUR_OK);
    assert_memory_equal(cached, la + (size_t)(NA - 1) * nv, (size_t)nv * sizeof(float));
    assert_int_equal(recur_seq_pos_max(ctx, 1), NA - 1);
    /* ... and the restored state continues exactly: one more token */
    recur_token ext[NA + 1];
    memcpy(ext, a, sizeof a);
    ext[NA] = 5;
    float *l1 = malloc((size_t)(NA + 1) * nv * sizeof(float)), *l2 = malloc((size_t)(NA + 1) * nv * sizeof(float));
    eval(ctx, ext, NA, NA + 1, 1, NULL, 0, l1, nv);
    eval(ctx, ext, NA, NA + 1, 0, NULL, 0, l2, nv);
    assert_memory_equal(l1 + (size_t)NA * nv, l2 + (size_t)NA * nv, (size_t)nv * sizeof(float));

    /* a prompt one token shorter than A: the checkpoint at 199 has no use, 99 (or 198 rows) does */
    h = pcache_lookup(pc, a, NA - 1);
    assert_false(h.logits);
    assert_int_equal(h.n_restore, recurrent ? 100 : NA - 2);

    pcache_stats st;
    pcache_stats_get(pc, &st);
    assert_int_equal(st.n_ckpt, 3);
    assert_true(st.ckpt_restored >= (recurrent ? 2u : 1u));
    assert_int_equal(st.n_tokens, NA);   /* B was never filed */
    pcache_free(pc);
    free(la); free(lb); free(lr); free(cached); free(l1); free(l2);
    recur_ctx_free(ctx);
    recur_model_free(m);
}

static void test_qwen35(void **st) { (void)st; check_model("pub-qwen35-F32"); }
static void test_qwen3next(void **st) { (void)st; check_model("pub-qwen3next-Q8_0"); }
static void test_mamba2(void **st) { (void)st; check_model("pub-mamba2-F32"); }
static void test_qwen3(void **st) { (void)st; check_model("pub-qwen3-Q8_0"); }
static void test_llama(void **st) { (void)st; check_model("pub-llama-F32"); }

/* Many conversations filed under a small budget: bytes never exceed it, the newest survives. */
static void test_budget(void **state) {
    (void)state;
    recur_model *m = ref_load("pub-qwen35-F32");
    recur_ctx *ctx = new_ctx(m);
    const int nv = recur_model_n_vocab(m);
    const int64_t budget = (int64_t)(recur_model_state_bytes(m) * 6 + recur_model_kv_bytes_per_token(m) * 600);
    pcache_params pp = { .budget_bytes = budget, .max_ckpt_path = 3 };
    pcache *pc;
    char err[256];
    assert_int_equal(pcache_new(ctx, &pp, &pc, err, sizeof err), RECUR_OK);
    float *lg = malloc((size_t)NA * nv * sizeof(float));
    recur_token tok[NA];
    pcache_stats st;
    for (int conv = 0; conv < 12; conv++) {
        for (int i = 0; i < NA; i++) tok[i] = i < 20 ? prompt_tok(i, nv, 9) : prompt_tok(i, nv, 100 + conv);
        recur_seq_rm(ctx, 0, -1, -1);
        const recur_pos at[5] = { 19, 60, 100, 150, NA - 1 };
        pcache_ckpt *ck[5];
        recur_capture caps[5];
        int n = 0;
        for (int k = 0; k < 5; k++) {
            ck[k] = pcache_ckpt_new(pc, k == 4);
            pcache_stats_get(pc, &st);
            assert_true(st.bytes <= budget);
            if (ck[k]) caps[n++] = (recur_capture){ 0, at[k], pcache_ckpt_snap(ck[k]) };
        }
        eval(ctx, tok, 0, NA, 0, caps, n, lg, nv);
        for (int k = 0; k < 5; k++) {
            if (!ck[k]) continue;
            pcache_ckpt_commit(pc, 0, tok, at[k], ck[k], lg + (size_t)at[k] * nv, k == 0 ? PCACHE_SYSTEM : 0);
            pcache_stats_get(pc, &st);
            assert_true(st.bytes <= budget);
        }
        assert_true(st.n_ckpt <= 3 * (conv + 1));
        /* the newest conversation is restorable in full */
        pcache_hit h = pcache_lookup(pc, tok, NA);
        assert_true(h.logits);
    }
    pcache_stats_get(pc, &st);
    assert_true(st.ckpt_evicted > 0);
    assert_true(st.bytes <= budget);
    pcache_free(pc);
    free(lg);
    recur_ctx_free(ctx);
    recur_model_free(m);
}

/* The tree and one path survive a file: a fresh context resumes a conversation exactly; a
 * corrupt, truncated or foreign file is refused and changes nothing. */
static void test_file(void **state) {
    (void)state;
    recur_model *m = ref_load("pub-qwen35-F32");
    recur_ctx *ctx = new_ctx(m);
    const int nv = recur_model_n_vocab(m);
    pcache_params pp = { .budget_bytes = -1, .max_ckpt_path = 32 };
    pcache *pc;
    char err[256];
    assert_int_equal(pcache_new(ctx, &pp, &pc, err, sizeof err), RECUR_OK);
    recur_token a[NA + 1];
    for (int i = 0; i < NA; i++) a[i] = prompt_tok(i, nv, 7);
    a[NA] = 9;
    float *la = malloc((size_t)(NA + 1) * nv * sizeof(float)), *lb = malloc((size_t)(NA + 1) * nv * sizeof(float));
    pcache_ckpt *ck[2] = { pcache_ckpt_new(pc, false), pcache_ckpt_new(pc, true) };
    recur_capture caps[2] = { { 0, 99, pcache_ckpt_snap(ck[0]) }, { 0, NA - 1, pcache_ckpt_snap(ck[1]) } };
    eval(ctx, a, 0, NA, 0, caps, 2, la, nv);
    assert_int_equal(pcache_ckpt_commit(pc, 0, a, 99, ck[0], NULL, 0), RECUR_OK);
    assert_int_equal(pcache_ckpt_commit(pc, 0, a, NA - 1, ck[1], la + (size_t)(NA - 1) * nv, 0), RECUR_OK);
    eval(ctx, a, NA, NA + 1, 0, NULL, 0, la, nv);   /* the next token's logits, uninterrupted */

    char path[256], path2[256];
    snprintf(path, sizeof path, "/tmp/recur-test-pcache-%d.bin", (int)getpid());
    snprintf(path2, sizeof path2, "/tmp/recur-test-pcache-%d-path.bin", (int)getpid());
    size_t bytes = 0;
    assert_int_equal(pcache_write(pc, NULL, 0, path, &bytes, err, sizeof err), RECUR_OK);
    assert_true(bytes > (size_t)NA * recur_model_kv_bytes_per_token(m));
    assert_int_equal(pcache_write(pc, a, 150, path2, &bytes, err, sizeof err), RECUR_OK);

    /* a fresh context and cache from the file */
    recur_ctx *ctx2 = new_ctx(m);
    pcache *pc2;
    assert_int_equal(pcache_new(ctx2, &pp, &pc2, err, sizeof err), RECUR_OK);
    recur_token *deep = NULL;
    int32_t n_deep = 0;
    assert_int_equal(pcache_read(pc2, path, &deep, &n_deep, &bytes, err, sizeof err), RECUR_OK);
    assert_int_equal(n_deep, NA);
    assert_memory_equal(deep, a, (size_t)NA * sizeof a[0]);
    free(deep);
    pcache_hit h = pcache_lookup(pc2, a, NA);
    assert_true(h.logits);
    float *cached = malloc((size_t)nv * sizeof(float));
    assert_int_equal(pcache_restore(pc2, 0, a, NA, &h, 0, cached, err, sizeof err), RECUR_OK);
    assert_memory_equal(cached, la + (size_t)(NA - 1) * nv, (size_t)nv * sizeof(float));
    eval(ctx2, a, NA, NA + 1, 0, NULL, 0, lb, nv);
    assert_memory_equal(lb + (size_t)NA * nv, la + (size_t)NA * nv, (size_t)nv * sizeof(float));

    /* the path file: 150 tokens with the checkpoint at 99 */
    pcache *pc3;
    assert_int_equal(pcache_new(ctx2, &pp, &pc3, err, sizeof err), RECUR_OK);
    assert_int_equal(pcache_read(pc3, path2, &deep, &n_deep, NULL, err, sizeof err), RECUR_OK);
    assert_int_equal(n_deep, 150);
    free(deep);
    h = pcache_lookup(pc3, a, NA);
    assert_int_equal(h.n_restore, 100);

    /* damage: one flipped byte, a truncation — refused, the cache unchanged */
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 200, SEEK_SET);
    fputc(0x5a ^ fgetc(f), f);
    fclose(f);
    pcache_stats before, after;
    pcache_stats_get(pc3, &before);
    assert_int_equal(pcache_read(pc3, path, NULL, NULL, NULL, err, sizeof err), RECUR_E_FORMAT);
    assert_int_equal(truncate(path2, 1000), 0);
    assert_int_equal(pcache_read(pc3, path2, NULL, NULL, NULL, err, sizeof err), RECUR_E_FORMAT);
    assert_int_equal(pcache_read(pc3, "/nonexistent/x.bin", NULL, NULL, NULL, err, sizeof err), RECUR_E_IO);
    pcache_stats_get(pc3, &after);
    assert_int_equal(after.bytes, before.bytes);
    /* another model's file */
    recur_model *m2 = ref_load("pub-mamba2-F32");
    recur_ctx *ctx3 = new_ctx(m2);
    pcache *pc4;
    assert_int_equal(pcache_new(ctx3, &pp, &pc4, err, sizeof err), RECUR_OK);
    assert_int_equal(pcache_write(pc, NULL, 0, path, NULL, err, sizeof err), RECUR_OK);
    assert_int_equal(pcache_read(pc4, path, NULL, NULL, NULL, err, sizeof err), RECUR_E_INVALID);
    unlink(path);
    unlink(path2);
    pcache_free(pc4); pcache_free(pc3); pcache_free(pc2); pcache_free(pc);
    recur_ctx_free(ctx3); recur_ctx_free(ctx2); recur_ctx_free(ctx);
    recur_model_free(m2);
    recur_model_free(m);
    free(la); free(lb); free(cached);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen35), cmocka_unit_test(test_qwen3next), cmocka_unit_test(test_mamba2),
        cmocka_unit_test(test_qwen3),  cmocka_unit_test(test_llama),     cmocka_unit_test(test_budget),
        cmocka_unit_test(test_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
