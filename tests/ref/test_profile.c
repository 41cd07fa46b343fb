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
 *  - the matmul calls by kind (recur_profile.mm) add up to the MATMUL totals; the lm head's
 *    call (its type and shape from the file) is one a decode; qwen3's joint q/k/v call (the
 *    types and rows of blk.0's three matrices) is one for each layer whose three matrices
 *    have those types and shapes; the MoE model's experts are gate with up and down;
 *  - the thread pool's part (recur_profile.jobs, job_ns, wait_ns): within each kind's time,
 *    the caller's waits within the jobs', none for OTHER, and the matmul calls' job times
 *    adding up to the MATMUL one;
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

/* Expected kinds of matmul call, from the file alone: the lm head (output.weight, else the
 * tied token_embd) and, when q is set, the joint q/k/v call of a layer (blk.0's). */
typedef struct mm_want {
    recur_prof_mm head, qkv;
    bool          has_qkv;
    int           qkv_layers;   /* layers whose q/k/v are blk.0's types and shapes */
} mm_want;

static void mm_of(const gguf_file *g, const char *const *names, int n, recur_prof_mm *e) {
    memset(e, 0, sizeof *e);
    e->n_mats = n;
    for (int i = 0; i < n; i++) {
        const gguf_tensor *t = gguf_find_tensor(g, names[i]);
        if (!t) fail_msg("no tensor %s", names[i]);
        e->cols = t->ne[0];
        e->rows += t->ne[1];
        snprintf(e->types + strlen(e->types), sizeof e->types - strlen(e->types), "%s%s", i ? "," : "",
                 gguf_type_name(t->type));
    }
}

static mm_want mm_expected(const char *name, bool qkv) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", RECUR_TESTDATA, name);
    gguf_file *g = NULL;
    if (gguf_open(path, &g, err, sizeof err)) fail_msg("%s: %s", path, err);
    mm_want w = { .has_qkv = qkv };
    mm_of(g, (const char *[]){ gguf_find_tensor(g, "output.weight") ? "output.weight" : "token_embd.weight" }, 1, &w.head);
    char q[64], k[64], v[64];
    for (int l = 0; qkv; l++) {   /* Q4_K_M: some layers' v is Q6_K */
        snprintf(q, sizeof q, "blk.%d.attn_q.weight", l);
        snprintf(k, sizeof k, "blk.%d.attn_k.weight", l);
        snprintf(v, sizeof v, "blk.%d.attn_v.weight", l);
        if (!gguf_find_tensor(g, q)) break;
        recur_prof_mm e;
        mm_of(g, (const char *[]){ q, k, v }, 3, l == 0 ? &w.qkv : &e);
        w.qkv_layers += l == 0 || memcmp(&e, &w.qkv, sizeof e) == 0;
    }
    gguf_close(g);
    return w;
}

/* The entry of p->mm of the same kind of call as *want, or NULL. */
static const recur_prof_mm *mm_find(const recur_profile *p, const recur_prof_mm *want) {
    for (int i = 0; i < p->n_mm; i++) {
        const recur_prof_mm *e = &p->mm[i];
        if (!strcmp(e->types, want->types) && e->n_mats == want->n_mats && e->rows == want->rows &&
            e->cols == want->cols && !e->experts)
            return e;
    }
    return NULL;
}

/* The kinds of call add up to the MATMUL totals; where the file says which calls a token
 * makes, they are there. */
static void check_mm(const recur_profile *p, const mm_want *want, int L, bool single) {
    uint64_t ns = p->mm_rest.ns, steps = p->mm_rest.steps, bytes = p->mm_rest.bytes, job_ns = p->mm_rest.job_ns;
    assert_true(p->n_mm > 0 && p->n_mm <= RECUR_PROF_MM_MAX);
    for (int i = 0; i < p->n_mm; i++) {
        assert_true(p->mm[i].steps > 0);
        ns += p->mm[i].ns, steps += p->mm[i].steps, bytes += p->mm[i].bytes, job_ns += p->mm[i].job_ns;
        assert_true(p->mm[i].job_ns <= p->mm[i].ns);
    }
    assert_int_equal(ns, p->ns[RECUR_PROF_MATMUL]);
    assert_int_equal(steps, p->steps[RECUR_PROF_MATMUL]);
    assert_int_equal(job_ns, p->job_ns[RECUR_PROF_MATMUL]);
    assert_int_equal(bytes, p->matmul_bytes);
    if (!want) {   /* MoE: the expert calls are there, gate with up and down */
        bool pair = false, one = false;
        for (int i = 0; i < p->n_mm; i++)
            if (p->mm[i].experts) {
                if (p->mm[i].n_mats == 2) pair = true;
                else one = true;
            }
        assert_true(pair && one);
        return;
    }
    const recur_prof_mm *head = mm_find(p, &want->head);
    if (!head) fail_msg("no lm head call %s %lld x %lld", want->head.types, (long long)want->head.rows,
                        (long long)want->head.cols);
    assert_int_equal(head->steps, 1);
    if (want->has_qkv && single) {
        const recur_prof_mm *qkv = mm_find(p, &want->qkv);
        if (!qkv) fail_msg("no q/k/v call %s %lld x %lld", want->qkv.types, (long long)want->qkv.rows,
                           (long long)want->qkv.cols);
        assert_int_equal(qkv->steps, want->qkv_layers);
        assert_true(want->qkv_layers > 0 && want->qkv_layers <= L);
    }
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

static void check_model(const char *name, const steps_of *want, bool dense, bool qkv) {
    recur_model *m = ref_load(name);
    const int nv = recur_model_n_vocab(m), L = recur_model_n_layer(m);
    const recur_model_cost cost = recur_model_token_cost(m);
    recur_ctx *prof_ctx = ref_ctx(m, 64, 1, 32, 32, 2), *plain = ref_ctx(m, 64, 1, 32, 32, 2);
    const uint64_t matrices = dense ? matrix_bytes(name) : 0;
    const mm_want mw = mm_expected(name, qkv);
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
        /* the pool's part of each kind: within its time, the caller's waits within the jobs;
         * a prompt's matmuls are big enough to be spread over the 2 threads */
        for (int k = 0; k < RECUR_PROF_KINDS; k++) {
            assert_true(p.job_ns[k] <= p.ns[k]);
            assert_true(p.wait_ns[k] <= p.job_ns[k]);
            assert_true(p.jobs[k] <= 4 * p.steps[k] || k == RECUR_PROF_MATMUL);
        }
        assert_true(p.jobs[RECUR_PROF_OTHER] == 0 && p.job_ns[RECUR_PROF_OTHER] == 0);
        if (n > 1) assert_true(p.jobs[RECUR_PROF_MATMUL] > 0 && p.job_ns[RECUR_PROF_MATMUL] > 0);
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
        check_mm(&p, dense ? &mw : NULL, L, n == 1);
    }
    recur_ctx_free(prof_ctx);
    recur_ctx_free(plain);
    recur_model_free(m);
}

static void test_qwen3(void **state) {
    (void)state;
    /*               matmul attention recurrent norm elementwise other */
    const steps_of want = { { 4, 1, 0, 2, 3, -1 }, { 1, 0, 0, 1, 0, 0 } };
    check_model("pub-qwen3-Q4_K_M", &want, true, true);
}

static void test_mamba2(void **state) {
    (void)state;
    const steps_of want = { { 2, 0, 3, 1, 1, -1 }, { 1, 0, 0, 1, 0, 0 } };
    check_model("pub-mamba2-Q8_0", &want, true, false);
}

static void test_qwen35moe(void **state) {
    (void)state;
    const steps_of want = { { -1, -1, -1, -1, -1, -1 }, { 0 } };   /* hybrid + MoE: the sums only */
    check_model("pub-qwen35moe-Q8_0", &want, false, false);
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
