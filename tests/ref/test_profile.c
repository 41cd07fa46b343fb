/* test_profile.c — recur_ctx_set_profile: where a context's decodes spend their time.
 *  - profiling changes no logit (memcmp against a context that does not profile);
 *  - each decode is counted with its tokens, the kinds' times add up to the decode's time
 *    (other = the remainder), and a single-token decode takes the steps its architecture
 *    has: qwen3 4 matmuls a layer + the lm head, one attention job a layer, 2 norms a layer +
 *    the output norm, 3 element-wise steps a layer (two residual adds, SwiGLU); mamba2 2
 *    matmuls a layer + the head, 3 recurrent steps (conv, scan, grouped norm), a norm a layer
 *    + the output norm, the residual add;
 *  - the matmuls' weight bytes of a dense model are, for every decode (each weight once per
 *    ubatch), the bytes of the file's matrices (the lm head included, the token embedding only
 *    when it is the head; conv kernels, norms and per-head scalars are not matrices); with MoE
 *    they include the lm head and a single token reads at most what recur_model_token_cost
 *    says (it counts the n_expert_used experts a token reads, and the norms);
 *  - the kind names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "recur.h"
#include "ref_model.h"
#include "ref_prompt.h"

#define N_PREFILL 16
#define N_STEPS   8

/* Steps a single-token decode takes, a layer (a) and once (b) per kind; a < 0: not checked. */
typedef struct steps_of {
    int a[RECUR_PROF_KINDS], b[RECUR_PROF_KINDS];
} steps_of;

/* The bytes of the file's matrices that a token's matmuls read (an independent count). */
static uint64_t matrix_bytes(const char *name) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", RECUR_TESTDATA, name);
    gguf_file *g = NULL;
    if (gguf_open(path, &g, err, sizeof err)) fail_msg("%s: %s", path, err);
    const bool tied = !gguf_find_tensor(g, "output.weight");
    uint64_t sum = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        const bool embd = strcmp(t->name, "token_embd.weight") == 0;
        if (t->n_dims < 2 || t->ne[0] == 1 || strstr(t->name, "conv1d") || strstr(t->name, "norm") || (embd && !tied))
            continue;
        sum += t->nbytes;
    }
    gguf_close(g);
    return sum;
}

/* Tokens [p0, p0 + n) of the prompt into ctx as one decode (logits of the last). */
static void decode(recur_ctx *ctx, int nv, int p0, int n) {
    recur_token tok[N_PREFILL];
    recur_pos pos[N_PREFILL];
    recur_seq_id seq[N_PREFILL] = { 0 };
    for (int i = 0; i < n; i++) tok[i] = prompt_tok(p0 + i, nv, 5), pos[i] = p0 + i;
    const recur_batch b = { n, tok, pos, seq, NULL };
    char err[256];
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);
}

static void check_model(const char *name, const steps_of *want, bool dense) {
    recur_model *m = ref_load(name);
    const int nv = recur_model_n_vocab(m), L = recur_model_n_layer(m);
    const recur_model_cost cost = recur_model_token_cost(m);
    recur_ctx *prof_ctx = ref_ctx(m, 64, 1, 32, 32, 2), *plain = ref_ctx(m, 64, 1, 32, 32, 2);
    const uint64_t matrices = dense ? matrix_bytes(name) : 0;
    for (int d = 0; d <= N_STEPS; d++) {
        const int p0 = d == 0 ? 0 : N_PREFILL + d - 1, n = d == 0 ? N_PREFILL : 1;
        recur_profile p;
        memset(&p, 0, sizeof p);
        recur_ctx_set_profile(prof_ctx, &p);
        decode(prof_ctx, nv, p0, n);
        recur_ctx_set_profile(prof_ctx, NULL);
        decode(plain, nv, p0, n);
        assert_memory_equal(recur_get_logits(prof_ctx, n - 1), recur_get_logits(plain, n - 1), (size_t)nv * sizeof(float));

        assert_int_equal(p.decodes, 1);
        assert_int_equal(p.tokens, n);
        assert_true(p.total_ns > 0);
        uint64_t sum = 0;
        for (int k = 0; k < RECUR_PROF_KINDS; k++) sum += p.ns[k];
        assert_int_equal(sum, p.total_ns);   /* other = the remainder, never negative */
        assert_int_equal(p.steps[RECUR_PROF_OTHER], 1);
        if (n == 1)
            for (int k = 0; k < RECUR_PROF_KINDS; k++) {
                if (want->a[k] < 0) continue;
                if (p.steps[k] != (uint64_t)(want->a[k] * L + want->b[k]))
                    fail_msg("%s: %s steps %llu, want %d", name, recur_prof_kind_name((recur_prof_kind)k),
                             (unsigned long long)p.steps[k], want->a[k] * L + want->b[k]);
            }
        assert_true(p.matmul_bytes >= cost.head_bytes);
        if (n == 1) assert_true(p.matmul_bytes <= cost.weight_bytes);
        if (dense) assert_int_equal(p.matmul_bytes, matrices);
    }
    recur_ctx_free(prof_ctx);
    recur_ctx_free(plain);
    recur_model_free(m);
}

static void test_qwen3(void **state) {
    (void)state;
    /*               matmul attention recurrent norm elementwise other */
    const steps_of want = { { 4, 1, 0, 2, 3, -1 }, { 1, 0, 0, 1, 0, 0 } };
    check_model("pub-qwen3-Q4_K_M", &want, true);
}

static void test_mamba2(void **state) {
    (void)state;
    const steps_of want = { { 2, 0, 3, 1, 1, -1 }, { 1, 0, 0, 1, 0, 0 } };
    check_model("pub-mamba2-Q8_0", &want, true);
}

static void test_qwen35moe(void **state) {
    (void)state;
    const steps_of want = { { -1, -1, -1, -1, -1, -1 }, { 0 } };   /* hybrid + MoE: the sums only */
    check_model("pub-qwen35moe-Q8_0", &want, false);
}

static void test_names(void **state) {
    (void)state;
    static const char *const names[] = { "matmul", "attention", "recurrent", "norm", "elementwise", "other" };
    for (int k = 0; k < RECUR_PROF_KINDS; k++) assert_string_equal(recur_prof_kind_name((recur_prof_kind)k), names[k]);
    assert_null(recur_prof_kind_name(RECUR_PROF_KINDS));
    assert_null(recur_prof_kind_name((recur_prof_kind)-1));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_mamba2),
        cmocka_unit_test(test_qwen35moe),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
