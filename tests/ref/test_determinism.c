/* test_determinism.c — the logits of every position are bit-identical (memcmp) whatever the
 * ubatch size, the decode-call split, the thread count, other sequences in the same batch,
 * and whether the prefix came from a copied sequence or was recomputed after seq_rm.
 * Runs on every llama / qwen3 model of ../shared/testdata/models and on stories260K, and on
 * the F32 and Q8_0 lfm2 / mamba / mamba2 / qwen35 models and the Q4_K_M qwen35 (recurrent: the
 * copied prefix only, since removing a tail needs a state that no longer exists, which must be
 * refused); the Q8_0 block order (recur_ctx_params.q8_order) on a transformer and two
 * recurrent Q8_0 models, whose logits must differ from ggml order's (else the option would
 * change nothing). The Q4_K_M models also give the same logits with their Q4_K matrices
 * packed at load (the default on CPUs with the packed kernel, model/repack.c) as in the
 * file's layout (recur_model_params.no_repack); the ubatch-of-1 variant above is what runs
 * the packed single-token kernel. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "recur.h"
#include "ref_prompt.h"

#define N_PROMPT 300
#define N_OTHER 150

static uint32_t g_q8_order;   /* the q8_order of every context of the running test */

typedef struct run_cfg {
    uint32_t n_batch, n_ubatch;
    int      n_threads;
    bool     interleave_other;   /* a second sequence shares every batch */
    int      every;              /* > 1: seq 0 asks for logits only at positions p % every == 0
                                  * (the last layer then skips the other rows, context.c) */
} run_cfg;

/* Evaluates the N_PROMPT-token prompt of seq 0 (plus, when asked, an N_OTHER-token prompt of
 * seq 1 interleaved token by token) and returns seq 0's logits at every position. */
static float *run(recur_model *m, const run_cfg *cfg) {
    const int nv = recur_model_n_vocab(m);
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_seq_max = 2;
    cp.n_batch = cfg->n_batch;
    cp.n_ubatch = cfg->n_ubatch;
    cp.n_threads = cfg->n_threads;
    cp.q8_order = g_q8_order;
    recur_ctx *ctx;
    char err[256];
    assert_int_equal(recur_ctx_new(m, &cp, &ctx, err, sizeof err), RECUR_OK);

    /* the full entry list, then fed in decode calls of n_batch entries */
    const int n_all = N_PROMPT + (cfg->interleave_other ? N_OTHER : 0);
    recur_token *tok = malloc(n_all * sizeof *tok);
    recur_pos *pos = malloc(n_all * sizeof *pos);
    recur_seq_id *seq = malloc(n_all * sizeof *seq);
    int8_t *want = malloc(n_all);
    int n = 0, i0 = 0, i1 = 0;
    while (i0 < N_PROMPT || (cfg->interleave_other && i1 < N_OTHER)) {
        if (i0 < N_PROMPT) {
            tok[n] = prompt_tok(i0, nv, 0); pos[n] = i0; seq[n] = 0;
            want[n++] = (int8_t)(cfg->every <= 1 || i0 % cfg->every == 0);
            i0++;
        }
        if (cfg->interleave_other && i1 < N_OTHER) {
            tok[n] = prompt_tok(i1, nv, 77); pos[n] = i1++; seq[n] = 1; want[n++] = (int8_t)(i1 % 2);
        }
    }
    float *out = calloc((size_t)N_PROMPT * nv, sizeof(float));
    for (int b0 = 0; b0 < n_all; b0 += (int)cfg->n_batch) {
        const int k = n_all - b0 < (int)cfg->n_batch ? n_all - b0 : (int)cfg->n_batch;
        recur_batch b = { k, tok + b0, pos + b0, seq + b0, want + b0 };
        assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);
        for (int j = 0; j < k; j++) {
            if (seq[b0 + j] != 0 || !want[b0 + j]) continue;
            const float *l = recur_get_logits(ctx, j);
            assert_non_null(l);
            memcpy(out + (size_t)pos[b0 + j] * nv, l, nv * sizeof(float));
        }
    }
    free(tok); free(pos); free(seq); free(want);
    recur_ctx_free(ctx);
    return out;
}

/* seq 0 evaluates the first half; seq_cp gives it to seq 1, which evaluates the rest. Then
 * seq 1's tail is removed and recomputed. Returns the logits of positions >= N_PROMPT/2. */
static float *run_shared_prefix(recur_model *m, bool recompute_tail, bool recurrent) {
    const int nv = recur_model_n_vocab(m), half = N_PROMPT / 2;
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_seq_max = 2;
    cp.n_threads = 2;
    cp.q8_order = g_q8_order;
    recur_ctx *ctx;
    char err[256];
    assert_int_equal(recur_ctx_new(m, &cp, &ctx, err, sizeof err), RECUR_OK);
    recur_token tok[N_PROMPT];
    recur_pos pos[N_PROMPT];
    recur_seq_id s0[N_PROMPT], s1[N_PROMPT];
    int8_t want[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) {
        tok[i] = prompt_tok(i, nv, 0); pos[i] = i; s0[i] = 0; s1[i] = 1; want[i] = 1;
    }
    recur_batch b = { half, tok, pos, s0, want };
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);
    assert_int_equal(recur_seq_cp(ctx, 0, 1, -1, -1), RECUR_OK);
    assert_int_equal(recur_seq_rm(ctx, 0, -1, -1), RECUR_OK);
    assert_int_equal(recur_seq_pos_max(ctx, 1), half - 1);
    recur_batch b2 = { N_PROMPT - half, tok + half, pos + half, s1 + half, want + half };
    assert_int_equal(recur_decode(ctx, &b2, err, sizeof err), RECUR_OK);
    if (recurrent) {   /* a tail would need an earlier state: refused, nothing changed */
        assert_int_equal(recur_seq_rm(ctx, 1, half + 20, -1), RECUR_E_STATE);
        assert_int_equal(recur_seq_rm(ctx, 1, N_PROMPT, -1), RECUR_OK);
        assert_int_equal(recur_seq_pos_max(ctx, 1), N_PROMPT - 1);
    }
    if (recompute_tail) {
        assert_int_equal(recur_seq_rm(ctx, 1, half + 20, -1), RECUR_OK);
        assert_int_equal(recur_seq_pos_max(ctx, 1), half + 19);
        recur_batch b3 = { N_PROMPT - half - 20, tok + half + 20, pos + half + 20, s1 + half + 20, want + half + 20 };
        assert_int_equal(recur_decode(ctx, &b3, err, sizeof err), RECUR_OK);
    }
    float *out = calloc((size_t)(N_PROMPT - half) * nv, sizeof(float));
    const int first = recompute_tail ? 20 : 0;   /* rows of the last decode */
    for (int i = first; i < N_PROMPT - half; i++)
        memcpy(out + (size_t)i * nv, recur_get_logits(ctx, i - first), nv * sizeof(float));
    recur_ctx_free(ctx);
    if (recompute_tail) memset(out, 0, (size_t)first * nv * sizeof(float));
    return out;
}

static void check_model(const char *name, bool recurrent) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", RECUR_TESTDATA, name);
    recur_model *m;
    assert_int_equal(recur_model_load(path, NULL, &m, err, sizeof err), RECUR_OK);
    const int nv = recur_model_n_vocab(m);
    const run_cfg base = { 512, 512, 2, false, 1 };
    float *ref = run(m, &base);
    if (g_q8_order != RECUR_Q8_GGML) {
        const uint32_t order = g_q8_order;
        g_q8_order = RECUR_Q8_GGML;
        float *ggml = run(m, &base);
        g_q8_order = order;
        if (memcmp(ref, ggml, (size_t)N_PROMPT * nv * sizeof(float)) == 0) fail_msg("%s: q8_order changes nothing", name);
        free(ggml);
    }
    const run_cfg variants[] = {
        { 512, 1, 2, false, 1 }, { 512, 7, 2, false, 1 }, { 512, 64, 2, false, 1 },   /* ubatch sizes */
        { 37, 37, 2, false, 1 },                                                     /* decode-call split */
        { 512, 512, 1, false, 1 }, { 512, 13, 3, false, 1 },                         /* thread counts */
        { 64, 13, 2, true, 1 }, { 512, 512, 1, true, 1 },                            /* another sequence */
        { 512, 512, 2, false, 7 }, { 64, 13, 2, true, 3 },                           /* logits of a few rows */
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        float *got = run(m, &variants[v]);
        const int every = variants[v].every > 1 ? variants[v].every : 1;
        bool same = true;
        for (int p = 0; p < N_PROMPT; p += every)
            same = same && memcmp(ref + (size_t)p * nv, got + (size_t)p * nv, (size_t)nv * sizeof(float)) == 0;
        if (!same)
            fail_msg("%s: logits differ with n_batch %u, n_ubatch %u, %d threads, other seq %d, every %d", name,
                     variants[v].n_batch, variants[v].n_ubatch, variants[v].n_threads, variants[v].interleave_other,
                     every);
        free(got);
    }
    const int half = N_PROMPT / 2;
    for (int rec = 0; rec < (recurrent ? 1 : 2); rec++) {
        float *got = run_shared_prefix(m, rec, recurrent);
        const int first = rec ? 20 : 0;
        if (memcmp(ref + (size_t)(half + first) * nv, got + (size_t)first * nv,
                   (size_t)(N_PROMPT - half - first) * nv * sizeof(float)) != 0)
            fail_msg("%s: logits differ after %s", name, rec ? "seq_rm + recompute" : "seq_cp of the prefix");
        free(got);
    }
    if (strstr(name, "Q4_K")) {   /* packed at load (where the CPU has the packed kernel) vs not */
        recur_model_params mp = recur_model_default_params();
        mp.no_repack = true;
        recur_model *u;
        assert_int_equal(recur_model_load(path, &mp, &u, err, sizeof err), RECUR_OK);
        float *got = run(u, &base);
        if (memcmp(ref, got, (size_t)N_PROMPT * nv * sizeof(float)) != 0) fail_msg("%s: logits differ unpacked", name);
        free(got);
        recur_model_free(u);
    }
    free(ref);
    recur_model_free(m);
}

#define MODEL_TEST(fn, name) static void fn(void **state) { (void)state; g_q8_order = RECUR_Q8_GGML; check_model(name, false); }
#define RECURRENT_TEST(fn, name) static void fn(void **state) { (void)state; g_q8_order = RECUR_Q8_GGML; check_model(name, true); }
#define BLOCK_TEST(fn, name, rec) static void fn(void **state) { (void)state; g_q8_order = RECUR_Q8_BLOCK; check_model(name, rec); }
MODEL_TEST(llama_f32, "pub-llama-F32")
MODEL_TEST(llama_f16, "pub-llama-F16")
MODEL_TEST(llama_q8_0, "pub-llama-Q8_0")
MODEL_TEST(llama_q4_k_m, "pub-llama-Q4_K_M")
MODEL_TEST(qwen3_f32, "pub-qwen3-F32")
MODEL_TEST(qwen3_q8_0, "pub-qwen3-Q8_0")
MODEL_TEST(qwen3_q4_k_m, "pub-qwen3-Q4_K_M")
MODEL_TEST(stories, "stories260K")
RECURRENT_TEST(lfm2_f32, "pub-lfm2-F32")
RECURRENT_TEST(lfm2_q8_0, "pub-lfm2-Q8_0")
RECURRENT_TEST(mamba_f32, "pub-mamba-F32")
RECURRENT_TEST(mamba_q8_0, "pub-mamba-Q8_0")
RECURRENT_TEST(mamba2_f32, "pub-mamba2-F32")
RECURRENT_TEST(mamba2_q8_0, "pub-mamba2-Q8_0")
RECURRENT_TEST(qwen35_f32, "pub-qwen35-F32")
RECURRENT_TEST(qwen35_q8_0, "pub-qwen35-Q8_0")
RECURRENT_TEST(qwen35_q4_k_m, "pub-qwen35-Q4_K_M")
RECURRENT_TEST(qwen35moe_f32, "pub-qwen35moe-F32")
RECURRENT_TEST(qwen35moe_q8_0, "pub-qwen35moe-Q8_0")
RECURRENT_TEST(qwen3next_f32, "pub-qwen3next-F32")
RECURRENT_TEST(qwen3next_q8_0, "pub-qwen3next-Q8_0")
BLOCK_TEST(qwen3_q8_0_block, "pub-qwen3-Q8_0", false)
BLOCK_TEST(mamba2_q8_0_block, "pub-mamba2-Q8_0", true)
BLOCK_TEST(qwen35_q8_0_block, "pub-qwen35-Q8_0", true)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(llama_f32), cmocka_unit_test(llama_f16), cmocka_unit_test(llama_q8_0),
        cmocka_unit_test(llama_q4_k_m), cmocka_unit_test(qwen3_f32), cmocka_unit_test(qwen3_q8_0),
        cmocka_unit_test(qwen3_q4_k_m), cmocka_unit_test(stories),
        cmocka_unit_test(lfm2_f32), cmocka_unit_test(lfm2_q8_0), cmocka_unit_test(mamba_f32),
        cmocka_unit_test(mamba_q8_0), cmocka_unit_test(mamba2_f32), cmocka_unit_test(mamba2_q8_0),
        cmocka_unit_test(qwen35_f32), cmocka_unit_test(qwen35_q8_0), cmocka_unit_test(qwen35_q4_k_m),
        cmocka_unit_test(qwen35moe_f32), cmocka_unit_test(qwen35moe_q8_0), cmocka_unit_test(qwen3next_f32),
        cmocka_unit_test(qwen3next_q8_0), cmocka_unit_test(qwen3_q8_0_block), cmocka_unit_test(mamba2_q8_0_block),
        cmocka_unit_test(qwen35_q8_0_block),
    };
    const char *only = getenv("RECUR_TEST_FILTER");   /* e.g. "qwen3next*": run a subset */
    if (only) cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
