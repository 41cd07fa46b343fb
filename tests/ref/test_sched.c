/* test_sched.c — the scheduler (src/server/sched.h) on the shared tiny models: served greedy
 * output equals a direct recur_decode run, 8 concurrent tasks on 4 slots equal the one served
 * alone (hybrid qwen35), prompt-cache reuse, cancellation, the bounded queue, the stop kinds
 * (n_predict, EOS, full context, stop strings never shown), n_probs, and the checkpoint a
 * predicted reply derives while the scheduler is idle. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "recur.h"
#include "ref_model.h"
#include "ref_prompt.h"
#include "server/sched.h"

#define MAX_GEN 512

/* ---- helpers ------------------------------------------------------------------------------- */

/* What one task gave back. */
typedef struct result {
    recur_token tok[MAX_GEN];
    int         n_tok;
    char        text[8192];
    size_t      n_text;
    int         n_events;
    bool        probs_ok;      /* n_probs: every TOKEN event had consistent probabilities */
    srv_stats   stats;
    char        stop_word[64];
    recur_status error;        /* RECUR_OK unless an ERROR event came */
} result;

typedef struct task_cfg {
    int32_t n_predict;
    int32_t id_slot;
    int32_t n_probs;
    bool    cache_prompt;
    bool    ignore_eos;
    const char *stop;          /* one stop string, or NULL */
} task_cfg;

static task_cfg cfg_default(int32_t n_predict) {
    return (task_cfg){ .n_predict = n_predict, .id_slot = -1, .cache_prompt = true };
}

static srv_task *make_task(uint64_t id, const recur_token *prompt, int n, const task_cfg *c) {
    srv_task *t = srv_task_new(id);
    assert_non_null(t);
    t->prompt = malloc((size_t)n * sizeof *t->prompt);
    memcpy(t->prompt, prompt, (size_t)n * sizeof *t->prompt);
    t->n_prompt = n;
    t->params.sampling.temp = 0.0f;   /* greedy */
    t->params.n_predict = c->n_predict;
    t->params.id_slot = c->id_slot;
    t->params.n_probs = c->n_probs;
    t->params.cache_prompt = c->cache_prompt;
    t->params.ignore_eos = c->ignore_eos;
    if (c->stop) {
        t->params.stop = malloc(sizeof *t->params.stop);
        t->params.stop[0] = strdup(c->stop);
        t->params.n_stop = 1;
    }
    return t;
}

/* Reads t's events until the terminal one into r, then drops the caller's reference. */
static void collect(srv_task *t, result *r) {
    memset(r, 0, sizeof *r);
    r->probs_ok = true;
    for (;;) {
        srv_event *ev = srv_task_next(t, -1);
        assert_non_null(ev);
        r->n_events++;
        if (ev->text && ev->text_len) {
            assert_true(r->n_text + ev->text_len < sizeof r->text);
            memcpy(r->text + r->n_text, ev->text, ev->text_len);
            r->n_text += ev->text_len;
            r->text[r->n_text] = '\0';
        }
        if (ev->kind == SRV_EV_TOKEN) {
            assert_true(r->n_tok < MAX_GEN);
            r->tok[r->n_tok++] = ev->token;
            if (t->params.n_probs > 0) {
                const srv_token_probs *p = ev->probs;
                if (!p || p->n_top != t->params.n_probs || p->id != ev->token) r->probs_ok = false;
                for (int i = 1; p && i < p->n_top; i++)
                    if (p->top_logprob[i] > p->top_logprob[i - 1]) r->probs_ok = false;
                if (p && (p->top_id[0] != ev->token || p->logprob != p->top_logprob[0] || p->logprob > 0))
                    r->probs_ok = false;   /* greedy: the sampled token is the most likely one */
            }
        }
        const bool done = ev->done;
        if (ev->kind == SRV_EV_DONE) {
            r->stats = ev->stats;
            if (ev->stats.stopping_word) snprintf(r->stop_word, sizeof r->stop_word, "%s", ev->stats.stopping_word);
            r->stats.stopping_word = NULL;
        } else if (ev->kind == SRV_EV_ERROR) {
            r->error = ev->status;
        }
        srv_event_free(ev);
        if (done) break;
    }
    srv_task_unref(t);
}

static void serve(sched *s, uint64_t id, const recur_token *prompt, int n, const task_cfg *c, result *r) {
    char err[256];
    srv_task *t = make_task(id, prompt, n, c);
    const recur_status st = sched_submit(s, t, err, sizeof err);
    if (st) fail_msg("submit: %s", err);
    collect(t, r);
    assert_int_equal(r->error, RECUR_OK);
}

static sched *start(recur_model *m, int32_t n_slots, int32_t n_ctx_slot, int32_t n_batch) {
    sched_params p = sched_default_params();
    p.n_slots = n_slots;
    p.n_ctx_slot = n_ctx_slot;
    p.n_batch = n_batch;
    p.n_ubatch = n_batch;
    p.n_threads = 2;
    p.queue_max = 16;
    sched *s = NULL;
    char err[256];
    if (sched_new(m, &p, &s, err, sizeof err)) fail_msg("sched_new: %s", err);
    return s;
}

/* Greedy by direct recur_decode calls: the prompt, then one token per call; stops after an
 * end-of-generation token (not included) or n_gen tokens. Returns the tokens generated. */
static int direct_greedy_bias(recur_model *m, const recur_token *prompt, int n, int n_gen, recur_token *out,
                              recur_token bias_tok, float bias) {
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_threads = 1;
    recur_ctx *ctx;
    char err[256];
    assert_int_equal(recur_ctx_new(m, &cp, &ctx, err, sizeof err), RECUR_OK);
    recur_batch b = { n, prompt, NULL, NULL, NULL };
    recur_pos pos[1024];
    recur_seq_id seq[1024] = { 0 };
    for (int i = 0; i < n; i++) pos[i] = i;
    b.pos = pos;
    b.seq_id = seq;
    assert_int_equal(recur_decode(ctx, &b, err, sizeof err), RECUR_OK);
    const float *l = recur_get_logits(ctx, n - 1);
    const int nv = recur_model_n_vocab(m);
    int k = 0;
    for (; k < n_gen; k++) {
        recur_token best = 0;
        float lb = l[0] + (bias_tok == 0 ? bias : 0.0f);
        for (int v = 1; v < nv; v++) {
            const float lv = l[v] + (v == bias_tok ? bias : 0.0f);
            if (lv > lb) { best = v; lb = lv; }
        }
        if (recur_token_is_eog(m, best)) break;
        out[k] = best;
        recur_pos p = n + k;
        recur_batch one = { 1, &out[k], &p, seq, NULL };
        assert_int_equal(recur_decode(ctx, &one, err, sizeof err), RECUR_OK);
        l = recur_get_logits(ctx, 0);
    }
    recur_ctx_free(ctx);
    return k;
}

static int direct_greedy(recur_model *m, const recur_token *prompt, int n, int n_gen, recur_token *out) {
    return direct_greedy_bias(m, prompt, n, n_gen, out, -1, 0.0f);
}

static int make_prompt(recur_model *m, recur_token *out, int n, uint32_t salt) {
    const int nv = recur_model_n_vocab(m);
    int k = 0;
    if (recur_token_bos(m) >= 0) out[k++] = recur_token_bos(m);
    for (; k < n; k++) out[k] = prompt_tok(k, nv, salt);
    return n;
}

/* ---- tests --------------------------------------------------------------------------------- */

/* One greedy task equals the direct run, on an attention model, the hybrid and a recurrent one;
 * n_predict stops it with "limit". */
static void check_single(const char *name) {
    recur_model *m = ref_load(name);
    recur_token prompt[40], ref[32];
    make_prompt(m, prompt, 40, 11);
    const int n_ref = direct_greedy(m, prompt, 40, 24, ref);
    sched *s = start(m, 2, 128, 16);   /* n_batch 16: the prompt takes three steps */
    result r;
    task_cfg c = cfg_default(24);
    serve(s, 1, prompt, 40, &c, &r);
    print_message("%s: %d tokens, stop %s, text \"%.40s\"\n", name, r.n_tok, srv_stop_type_str(r.stats.stop_type), r.text);
    assert_int_equal(r.n_tok, n_ref);
    assert_memory_equal(r.tok, ref, (size_t)n_ref * sizeof *ref);
    assert_int_equal(r.stats.stop_type, n_ref == 24 ? SRV_STOP_LIMIT : SRV_STOP_EOS);
    assert_int_equal(r.stats.n_prompt, 40);
    assert_int_equal(r.stats.n_cache, 0);
    assert_int_equal(r.stats.n_prompt_eval, 40);
    assert_int_equal(r.stats.n_predicted, n_ref + (n_ref < 24));
    sched_free(s);
    recur_model_free(m);
}

static void test_single_llama(void **st) { (void)st; check_single("pub-llama-F32"); }
static void test_single_qwen35(void **st) { (void)st; check_single("pub-qwen35-Q8_0"); }
static void test_single_mamba(void **st) { (void)st; check_single("pub-mamba-F32"); }

/* 8 tasks at once with the same prompt; their results in r[0..8). */
static void serve_wave(sched *s, uint64_t id0, const recur_token *prompt, int n, const task_cfg *c, result *r) {
    srv_task *t[8];
    char err[256];
    for (int i = 0; i < 8; i++) {
        t[i] = make_task(id0 + (uint64_t)i, prompt, n, c);
        assert_int_equal(sched_submit(s, t[i], err, sizeof err), RECUR_OK);
    }
    for (int i = 0; i < 8; i++) {
        collect(t[i], &r[i]);
        assert_int_equal(r[i].error, RECUR_OK);
    }
}

/* 8 concurrent greedy tasks with the same prompt on 4 slots: 8 identical token sequences, equal
 * to the task served alone (the others' prefill chunks and tokens share its batches). */
static void test_isolation_hybrid(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-qwen35-Q8_0");
    recur_token prompt[48];
    make_prompt(m, prompt, 48, 5);
    task_cfg c = cfg_default(20);
    c.cache_prompt = false;   /* every task computes its prompt: the batches really differ */
    c.ignore_eos = true;
    sched *s = start(m, 4, 128, 24);
    result alone;
    serve(s, 1, prompt, 48, &c, &alone);
    assert_int_equal(alone.n_tok, 20);

    static result r[8];
    serve_wave(s, 10, prompt, 48, &c, r);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(r[i].n_tok, alone.n_tok);
        assert_memory_equal(r[i].tok, alone.tok, (size_t)alone.n_tok * sizeof alone.tok[0]);
        assert_string_equal(r[i].text, alone.text);
    }
    sched_metrics met;
    sched_get_metrics(s, &met);
    assert_true(met.n_decode_total > 0);
    print_message("9 tasks: %llu decode steps, %.2f busy slots per step\n", (unsigned long long)met.n_decode_total,
                  (double)met.n_busy_slots_total / (double)met.n_decode_total);
    assert_int_equal(met.tokens_predicted_total, 9 * 20);
    assert_int_equal(met.prompt_tokens_total, 9 * 48);

    /* again with the cache: every slot restores the whole prompt with its last token's logits */
    c.cache_prompt = true;
    serve_wave(s, 20, prompt, 48, &c, r);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(r[i].stats.n_cache, 48);
        assert_int_equal(r[i].stats.n_prompt_eval, 0);
        assert_int_equal(r[i].n_tok, alone.n_tok);
        assert_memory_equal(r[i].tok, alone.tok, (size_t)alone.n_tok * sizeof alone.tok[0]);
    }
    sched_free(s);
    recur_model_free(m);
}

/* A second identical prompt evaluates nothing (the cached logits); an extended one reuses the first
 * conversation; the output is what a fresh computation gives. cache_prompt false: no reuse. */
static void check_cache(const char *name, bool recurrent) {
    recur_model *m = ref_load(name);
    recur_token prompt[96];
    make_prompt(m, prompt, 32, 21);
    sched *s = start(m, 1, 256, 64);
    task_cfg c = cfg_default(12);
    c.ignore_eos = true;
    result a, b, x, fresh;
    serve(s, 1, prompt, 32, &c, &a);
    assert_int_equal(a.stats.n_cache, 0);
    assert_int_equal(a.stats.tokens_cached, 32 + 11);
    serve(s, 2, prompt, 32, &c, &b);   /* regenerate */
    assert_int_equal(b.stats.n_cache, 32);
    assert_int_equal(b.stats.n_prompt_eval, 0);
    assert_int_equal(b.n_tok, a.n_tok);
    assert_memory_equal(b.tok, a.tok, (size_t)a.n_tok * sizeof a.tok[0]);

    /* the next turn: prompt + answer + more */
    int n = 32;
    memcpy(prompt + n, b.tok, (size_t)b.n_tok * sizeof b.tok[0]);
    n += b.n_tok;
    for (int i = 0; i < 8; i++, n++) prompt[n] = prompt_tok(100 + i, recur_model_n_vocab(m), 3);
    serve(s, 3, prompt, n, &c, &x);
    assert_int_equal(x.stats.n_cache, 32 + 11);   /* everything the slot held */
    task_cfg nc = c;
    nc.cache_prompt = false;
    serve(s, 4, prompt, n, &nc, &fresh);
    assert_int_equal(fresh.stats.n_cache, 0);
    assert_int_equal(x.n_tok, fresh.n_tok);
    assert_memory_equal(x.tok, fresh.tok, (size_t)x.n_tok * sizeof x.tok[0]);

    /* a prompt that diverges in the middle: attention models keep the common prefix */
    prompt[20] = prompt[20] == 5 ? 6 : 5;
    result d;
    serve(s, 5, prompt, n, &c, &d);
    assert_int_equal(d.stats.n_cache, recurrent ? 0 : 20);
    sched_free(s);
    recur_model_free(m);
}

static void test_cache_llama(void **st) { (void)st; check_cache("pub-llama-F32", false); }
static void test_cache_qwen35(void **st) { (void)st; check_cache("pub-qwen35-Q8_0", true); }
static void test_cache_mamba(void **st) { (void)st; check_cache("pub-mamba-F32", true); }

/* --no-cache-prompt: nothing is reused, the output does not change. */
static void test_no_cache(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-mamba-F32");
    recur_token prompt[20];
    make_prompt(m, prompt, 20, 8);
    sched_params p = sched_default_params();
    p.n_slots = 1;
    p.n_ctx_slot = 64;
    p.n_batch = 16;
    p.n_threads = 1;
    p.cache_prompt = false;
    sched *s;
    char err[256];
    assert_int_equal(sched_new(m, &p, &s, err, sizeof err), RECUR_OK);
    task_cfg c = cfg_default(6);
    result a, b;
    serve(s, 1, prompt, 20, &c, &a);
    serve(s, 2, prompt, 20, &c, &b);
    assert_int_equal(b.stats.n_cache, 0);
    assert_int_equal(b.stats.n_prompt_eval, 20);
    assert_int_equal(a.n_tok, b.n_tok);
    assert_memory_equal(a.tok, b.tok, (size_t)a.n_tok * sizeof a.tok[0]);
    sched_free(s);
    recur_model_free(m);
}

/* A cancelled task ends with "cancelled" and its slot serves the next task. */
static void test_cancel(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-llama-F32");
    recur_token prompt[16];
    make_prompt(m, prompt, 16, 9);
    sched *s = start(m, 1, 1024, 32);
    task_cfg c = cfg_default(-1);
    c.ignore_eos = true;
    char err[256];
    srv_task *t = make_task(1, prompt, 16, &c);
    srv_task_ref(t);   /* keep it to cancel after collect's unref */
    assert_int_equal(sched_submit(s, t, err, sizeof err), RECUR_OK);
    srv_event *ev = srv_task_next(t, -1);   /* generation has started */
    assert_int_equal(ev->kind, SRV_EV_TOKEN);
    srv_event_free(ev);
    srv_task_cancel(t);
    result r;
    collect(t, &r);
    assert_int_equal(r.error, RECUR_OK);
    assert_int_equal(r.stats.stop_type, SRV_STOP_CANCELLED);
    assert_true(r.stats.n_predicted < 1024 - 16);
    srv_task_unref(t);

    /* the only slot is free again */
    result r2;
    task_cfg c2 = cfg_default(4);
    c2.id_slot = 0;
    serve(s, 2, prompt, 16, &c2, &r2);
    assert_int_equal(r2.stats.stop_type, SRV_STOP_LIMIT);
    sched_slot_info info[1];
    assert_int_equal(sched_slot_info_get(s, info, 1), 1);
    assert_int_equal(info[0].n_ctx, 1024);
    sched_free(s);
    recur_model_free(m);
}

/* Beyond the free slots and queue_max waiting tasks, submit answers RECUR_E_FULL; bad requests
 * RECUR_E_INVALID; sched_free ends every task with a terminal event. */
static void test_queue_full(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-llama-F32");
    recur_token prompt[16];
    make_prompt(m, prompt, 16, 9);
    sched_params p = sched_default_params();
    p.n_slots = 1;
    p.n_ctx_slot = 4096;
    p.n_batch = 32;
    p.n_threads = 1;
    p.queue_max = 1;
    sched *s;
    char err[256];
    assert_int_equal(sched_new(m, &p, &s, err, sizeof err), RECUR_OK);
    task_cfg c = cfg_default(-1);
    c.ignore_eos = true;
    srv_task *a = make_task(1, prompt, 16, &c), *b = make_task(2, prompt, 16, &c), *d = make_task(3, prompt, 16, &c);
    assert_int_equal(sched_submit(s, a, err, sizeof err), RECUR_OK);
    srv_event *ev = srv_task_next(a, -1);   /* a holds the slot (4000 tokens to go) */
    assert_int_equal(ev->kind, SRV_EV_TOKEN);
    srv_event_free(ev);
    assert_int_equal(sched_submit(s, b, err, sizeof err), RECUR_OK);
    assert_int_equal(sched_submit(s, d, err, sizeof err), RECUR_E_FULL);

    srv_task *bad = make_task(4, prompt, 16, &c);
    bad->params.id_slot = 1;
    assert_int_equal(sched_submit(s, bad, err, sizeof err), RECUR_E_INVALID);
    srv_task_unref(bad);
    bad = make_task(6, prompt, 16, &c);
    bad->prompt[3] = recur_model_n_vocab(m);
    assert_int_equal(sched_submit(s, bad, err, sizeof err), RECUR_E_INVALID);
    srv_task_unref(bad);
    recur_token *big = calloc(4096, sizeof *big);
    bad = make_task(5, big, 4096, &c);
    assert_int_equal(sched_submit(s, bad, err, sizeof err), RECUR_E_INVALID);
    assert_non_null(strstr(err, "exceeds the available context size"));
    srv_task_unref(bad);
    free(big);

    sched_free(s);   /* a is running, b is queued: both end */
    result ra, rb;
    collect(a, &ra);
    collect(b, &rb);
    assert_int_equal(ra.stats.stop_type, SRV_STOP_CANCELLED);
    assert_int_equal(rb.stats.stop_type, SRV_STOP_CANCELLED);
    srv_task_unref(d);
    recur_model_free(m);
}

/* EOS ends a task like the direct run; the full slot context ends it with "limit". */
static void test_eos_and_context_full(void **st) {
    (void)st;
    recur_model *m = ref_load("stories260K");
    recur_token prompt[8], ref[120];
    make_prompt(m, prompt, 4, 2);
    /* greedy stories here do not end by themselves: a bias on EOS (the smallest of a few that
     * makes it come, after some text) gives an end to compare */
    const recur_token eos = recur_token_eos(m);
    recur_logit_bias lb = { eos, 0.0f };
    int n_ref = 120;
    for (int i = 4; i <= 30 && (n_ref == 120 || n_ref < 3); i += 2) {
        lb.bias = (float)i;
        n_ref = direct_greedy_bias(m, prompt, 4, 120, ref, eos, lb.bias);
    }
    assert_true(n_ref >= 3 && n_ref < 120);
    sched *s = start(m, 2, 512, 64);
    result r;
    srv_task *t = make_task(1, prompt, 4, &(task_cfg){ .n_predict = -1, .id_slot = -1, .cache_prompt = true });
    t->params.sampling.logit_bias = malloc(sizeof lb);
    memcpy((void *)t->params.sampling.logit_bias, &lb, sizeof lb);
    t->params.sampling.n_logit_bias = 1;
    char err[256];
    assert_int_equal(sched_submit(s, t, err, sizeof err), RECUR_OK);
    collect(t, &r);
    print_message("EOS after %d tokens (bias %.1f)\n", n_ref, lb.bias);
    assert_int_equal(r.stats.stop_type, SRV_STOP_EOS);
    assert_int_equal(r.n_tok, n_ref);
    assert_memory_equal(r.tok, ref, (size_t)n_ref * sizeof *ref);
    sched_free(s);

    s = start(m, 2, 40, 64);
    make_prompt(m, prompt, 8, 1);
    task_cfg c = cfg_default(-1);
    c.ignore_eos = true;
    serve(s, 2, prompt, 8, &c, &r);
    assert_int_equal(r.stats.stop_type, SRV_STOP_LIMIT);
    assert_int_equal(r.stats.n_predicted, 40 - 8);   /* prompt + generated fill the slot */
    assert_int_equal(r.stats.tokens_cached, 39);
    sched_free(s);
    recur_model_free(m);
}

/* A stop string found in the greedy text (also across a token boundary) cuts the text there,
 * and no event ever shows any of it. */
static void test_stop_strings(void **st) {
    (void)st;
    recur_model *m = ref_load("stories260K");
    recur_token prompt[1];
    make_prompt(m, prompt, 1, 0);
    sched *s = start(m, 1, 256, 64);
    task_cfg c = cfg_default(60);
    result full, r;
    serve(s, 1, prompt, 1, &c, &full);
    assert_true(full.n_text > 40);
    /* a stop string that starts in one token's text and ends in a later one's */
    size_t at = 0, len = 0, off = 0;
    for (int i = 0; i + 1 < full.n_tok && len == 0; i++) {
        char a[64], b[64];
        const int la = recur_token_to_piece(m, full.tok[i], a, sizeof a, false);
        const int lb = recur_token_to_piece(m, full.tok[i + 1], b, sizeof b, false);
        if (off >= 20 && la >= 2 && lb >= 2) {   /* from inside token i to inside token i + 1 */
            at = off + 1;
            len = (size_t)la - 1 + 1;
        }
        off += (size_t)la;
    }
    assert_true(len >= 2 && at + len < full.n_text);
    char stop[64];
    memcpy(stop, full.text + at, len);
    stop[len] = '\0';
    const char *first = strstr(full.text, stop);
    c.stop = stop;
    serve(s, 2, prompt, 1, &c, &r);
    print_message("stop \"%s\": %zu bytes in %d events\n", stop, r.n_text, r.n_events);
    assert_int_equal(r.stats.stop_type, SRV_STOP_WORD);
    assert_string_equal(r.stop_word, stop);
    assert_int_equal(r.n_text, (size_t)(first - full.text));
    assert_memory_equal(r.text, full.text, r.n_text);
    /* a stop string that never matches: all text comes out, the held part in DONE */
    c.stop = "\x01\x02 never";
    serve(s, 3, prompt, 1, &c, &r);
    assert_string_equal(r.text, full.text);
    assert_int_equal(r.stats.stop_type, SRV_STOP_LIMIT);
    sched_free(s);
    recur_model_free(m);
}

/* Slot choice: a prompt goes back to the slot that holds it (not one whose cache shares only
 * the BOS), a requested slot is honoured; n_predict 0 evaluates the prompt and samples nothing. */
static void test_slot_choice(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-llama-F32");
    recur_token p1[24], p2[24];
    make_prompt(m, p1, 24, 31);
    make_prompt(m, p2, 24, 32);
    sched *s = start(m, 3, 128, 32);
    task_cfg c = cfg_default(4);
    result a, b, a2, b2, z;
    serve(s, 1, p1, 24, &c, &a);
    serve(s, 2, p2, 24, &c, &b);
    assert_int_not_equal(a.stats.id_slot, b.stats.id_slot);
    serve(s, 3, p2, 24, &c, &b2);
    serve(s, 4, p1, 24, &c, &a2);
    assert_int_equal(a2.stats.id_slot, a.stats.id_slot);
    assert_int_equal(a2.stats.n_cache, 24);
    assert_int_equal(b2.stats.id_slot, b.stats.id_slot);
    assert_int_equal(b2.stats.n_cache, 24);

    task_cfg z0 = cfg_default(0);
    z0.id_slot = 2;
    serve(s, 5, p1, 24, &z0, &z);
    assert_int_equal(z.stats.id_slot, 2);
    assert_int_equal(z.stats.stop_type, SRV_STOP_NONE);
    assert_int_equal(z.n_tok, 0);
    assert_int_equal(z.stats.n_predicted, 0);
    assert_int_equal(z.stats.tokens_cached, 24);
    sched_slot_info info[4];
    assert_int_equal(sched_slot_info_get(s, info, 4), 3);
    assert_int_equal(info[2].id_task, -1);
    assert_false(info[2].is_processing);
    assert_int_equal(info[2].n_tokens_cached, 24);
    assert_int_equal(info[2].n_prompt_tokens, 24);
    sched_free(s);
    recur_model_free(m);
}

/* n_probs: every token carries its top n log-probabilities. */
static void test_n_probs(void **st) {
    (void)st;
    recur_model *m = ref_load("pub-llama-F32");
    recur_token prompt[12];
    make_prompt(m, prompt, 12, 4);
    sched *s = start(m, 1, 128, 32);
    task_cfg c = cfg_default(8);
    c.n_probs = 5;
    c.ignore_eos = true;
    result r;
    serve(s, 1, prompt, 12, &c, &r);
    assert_int_equal(r.n_tok, 8);
    assert_true(r.probs_ok);
    sched_free(s);
    recur_model_free(m);
}

/* ---- predicted replies --------------------------------------------------------------------- */

/* A prediction the test makes: a copy of tok[0 .. n) (n < 0: "cannot say"); counts frees.
 * intrude: a task submitted while predicting (a request arriving during the idle work). */
typedef struct fake_reply {
    recur_token tok[160];
    int32_t     n;
    int         freed;
    sched      *s;
    srv_task   *intrude;
} fake_reply;

static int32_t fake_predict(void *arg, recur_token **out) {
    fake_reply *f = arg;
    char err[256];
    if (f->intrude && sched_submit(f->s, f->intrude, err, sizeof err)) return -1;
    f->intrude = NULL;
    if (f->n < 0) return -1;
    *out = malloc((size_t)f->n * sizeof **out);
    if (!*out) return -1;
    memcpy(*out, f->tok, (size_t)f->n * sizeof **out);
    return f->n;
}

static void fake_free(void *arg) { ((fake_reply *)arg)->freed++; }

/* Waits until the scheduler has dealt with `want` predictions (a liveness bound, not a speed
 * assertion); returns its metrics. */
static sched_metrics wait_replies(sched *s, uint64_t want) {
    sched_metrics met;
    for (int i = 0; i < 30000; i++) {
        sched_get_metrics(s, &met);
        if (met.reply_checks_total >= want) return met;
        struct timespec ts = { 0, 1000000 };
        nanosleep(&ts, NULL);
    }
    fail_msg("the scheduler did not check %llu predicted replies", (unsigned long long)want);
    return met;
}

static void submit_reply(sched *s, uint64_t id_task, int32_t id_slot, int32_t n_prompt, fake_reply *f) {
    const sched_reply r = { id_task, id_slot, n_prompt, fake_predict, fake_free, f };
    sched_submit_reply(s, &r);
}

/* A request that arrives during the idle work (here: while the prediction is made) takes
 * precedence: nothing is evaluated, and the same prediction later derives its checkpoint as if
 * nothing had happened. f->tok[0 .. n2) is a prompt served before (its reply was predicted). */
static void check_reply_gives_way(sched *s, fake_reply *f, int32_t n2, const task_cfg *c) {
    result g, x;
    sched_metrics met;
    sched_get_metrics(s, &met);
    const uint64_t checks = met.reply_checks_total, toks = met.reply_tokens_total, ckpts = met.reply_ckpts_total;
    serve(s, 4, f->tok, n2, c, &g);   /* a regenerate */
    f->n = n2 + 3;
    memcpy(f->tok + n2, g.tok, 3 * sizeof *f->tok);
    f->tok[f->n++] = g.tok[3] == 7 ? 8 : 7;
    f->s = s;
    f->intrude = make_task(5, f->tok, 20, c);
    srv_task *t5 = f->intrude;   /* its first reference is the test's, dropped by collect */
    submit_reply(s, 4, g.stats.id_slot, n2, f);
    collect(t5, &x);
    assert_int_equal(x.error, RECUR_OK);
    met = wait_replies(s, checks + 1);
    assert_int_equal(met.reply_tokens_total, toks);
    assert_int_equal(met.reply_ckpts_total, ckpts);
    if (x.stats.id_slot != g.stats.id_slot) {   /* g's slot still holds its response */
        submit_reply(s, 4, g.stats.id_slot, n2, f);
        met = wait_replies(s, checks + 2);
        assert_int_equal(met.reply_tokens_total, toks + 3);
        assert_int_equal(met.reply_ckpts_total, ckpts + 1);
    }
}

/* After a response, a prediction that the reply comes back re-tokenized differently from its
 * 5th generated token on: the idle scheduler derives the state there (5 tokens evaluated from
 * the prompt's checkpoint), the slot still holds the whole response, and the next turn, which
 * diverges there, evaluates only what follows, with the output of a fresh computation. A
 * prediction that matches the generated tokens, or fails, costs nothing; a model without
 * recurrent layers needs nothing. */
static void check_reply(const char *name, bool recurrent) {
    recur_model *m = ref_load(name);
    const int nv = recur_model_n_vocab(m);
    static fake_reply f;
    memset(&f, 0, sizeof f);
    make_prompt(m, f.tok, 32, 41);
    sched *s = start(m, 2, 256, 64);
    task_cfg c = cfg_default(12);
    c.ignore_eos = true;
    result a, b, fresh;
    serve(s, 1, f.tok, 32, &c, &a);
    assert_int_equal(a.n_tok, 12);
    const int d = 32 + 5;
    memcpy(f.tok + 32, a.tok, 5 * sizeof *f.tok);
    f.tok[d] = a.tok[5] == 7 ? 8 : 7;   /* the reply's 6th token re-renders as another one */
    for (int i = d + 1; i < d + 12; i++) f.tok[i] = prompt_tok(200 + i, nv, 9);   /* then a next message */
    f.n = d + 12;
    submit_reply(s, 1, a.stats.id_slot, 32, &f);
    sched_metrics met = wait_replies(s, 1);
    assert_int_equal(f.freed, 1);
    assert_int_equal(met.reply_ckpts_total, recurrent ? 1 : 0);
    assert_int_equal(met.reply_tokens_total, recurrent ? 5 : 0);
    sched_slot_info info[2];
    sched_slot_info_get(s, info, 2);
    assert_int_equal(info[a.stats.id_slot].n_tokens_cached, 32 + 11);   /* the slot is untouched */

    serve(s, 2, f.tok, f.n, &c, &b);   /* the next turn */
    print_message("%s: next turn from %d cached tokens, %d evaluated\n", name, b.stats.n_cache, b.stats.n_prompt_eval);
    assert_int_equal(b.stats.n_cache, d);

    /* task 2's reply re-renders as generated: nothing to do; one that cannot be rendered either */
    const int32_t n2 = f.n;
    memcpy(f.tok + f.n, b.tok, 11 * sizeof *f.tok);
    f.n += 11;
    f.tok[f.n++] = prompt_tok(300, nv, 2);
    submit_reply(s, 2, b.stats.id_slot, n2, &f);
    met = wait_replies(s, 2);
    assert_int_equal(met.reply_tokens_total, recurrent ? 5 : 0);
    f.n = -1;
    submit_reply(s, 2, b.stats.id_slot, n2, &f);
    met = wait_replies(s, 3);
    assert_int_equal(f.freed, 3);
    assert_int_equal(met.reply_ckpts_total, recurrent ? 1 : 0);

    task_cfg nc = c;   /* the next turn's output is a fresh computation's */
    nc.cache_prompt = false;
    serve(s, 3, f.tok, n2, &nc, &fresh);
    assert_int_equal(b.n_tok, fresh.n_tok);
    assert_memory_equal(b.tok, fresh.tok, (size_t)fresh.n_tok * sizeof fresh.tok[0]);

    if (recurrent) check_reply_gives_way(s, &f, n2, &c);
    sched_free(s);
    recur_model_free(m);
}

static void test_reply_qwen35(void **st) { (void)st; check_reply("pub-qwen35-Q8_0", true); }
static void test_reply_mamba(void **st) { (void)st; check_reply("pub-mamba-F32", true); }
static void test_reply_llama(void **st) { (void)st; check_reply("pub-llama-F32", false); }

int main(void) {
    recur_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_llama),
        cmocka_unit_test(test_single_qwen35),
        cmocka_unit_test(test_single_mamba),
        cmocka_unit_test(test_isolation_hybrid),
        cmocka_unit_test(test_cache_llama),
        cmocka_unit_test(test_cache_qwen35),
        cmocka_unit_test(test_cache_mamba),
        cmocka_unit_test(test_no_cache),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_queue_full),
        cmocka_unit_test(test_eos_and_context_full),
        cmocka_unit_test(test_stop_strings),
        cmocka_unit_test(test_slot_choice),
        cmocka_unit_test(test_n_probs),
        cmocka_unit_test(test_reply_qwen35),
        cmocka_unit_test(test_reply_mamba),
        cmocka_unit_test(test_reply_llama),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
