/* bench_run.c — one recur-bench test, with llama-bench's method: a context sized for the test,
 * a warmup (the whole prompt for pp, one token for tg), then r timed runs, each on an emptied
 * sequence (holding n_depth tokens first when -d asks: filled before the clock starts, as
 * llama-bench does). pp evaluates an n_prompt-token prompt in calls of n_batch tokens (logits of the
 * last token of each call); tg generates n_gen tokens one call at a time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_sort_doubles(double *v, int n) {
    if (n > 1) qsort(v, (size_t)n, sizeof *v, cmp_double);
}

uint64_t bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A 64-bit LCG: the tokens only need to be valid ids, and the same in every run. */
recur_token bench_token(uint64_t *state, int32_t n_vocab) {
    *state = *state * 6364136223846793005u + 1442695040888963407u;
    return (recur_token)((*state >> 33) % (uint64_t)n_vocab);
}

int bench_prefill(recur_ctx *ctx, const recur_model *m, int n, int n_batch, uint64_t *tok_state,
                  const recur_capture *caps, int n_caps, char *err, size_t err_len) {
    recur_token *tok = malloc((size_t)n_batch * sizeof *tok);
    recur_pos *pos = malloc((size_t)n_batch * sizeof *pos);
    recur_seq_id *seq = calloc((size_t)n_batch, sizeof *seq);
    int rc = 1;
    if (!tok || !pos || !seq) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    const int32_t n_vocab = recur_model_n_vocab(m);
    const recur_pos p0 = recur_seq_pos_max(ctx, 0) + 1;
    for (int done_n = 0; done_n < n;) {
        const int nb = MIN(n - done_n, n_batch);
        for (int i = 0; i < nb; i++) {
            const bool bos = p0 + done_n + i == 0 && recur_vocab_add_bos(m) && recur_token_bos(m) >= 0;
            tok[i] = bos ? recur_token_bos(m) : bench_token(tok_state, n_vocab);
            pos[i] = p0 + done_n + i;
        }
        /* the captures whose position lies in this call */
        const recur_capture *c0 = caps;
        int nc = 0;
        while (caps && c0 < caps + n_caps && c0->pos < p0 + done_n) c0++;
        while (caps && c0 + nc < caps + n_caps && c0[nc].pos < p0 + done_n + nb) nc++;
        const recur_batch b = { .n_tokens = nb, .token = tok, .pos = pos, .seq_id = seq, .logits = NULL };
        const recur_status st = nc ? recur_decode_capture(ctx, &b, c0, nc, err, err_len)
                                   : recur_decode(ctx, &b, err, err_len);
        if (st) goto done;
        done_n += nb;
    }
    rc = 0;
done:
    free(tok);
    free(pos);
    free(seq);
    return rc;
}

/* n_gen tokens, one per call; the next token is a stand-in, not sampled (as llama-bench).
 * tok_ns, when not NULL, gets each token's time. */
static int bench_generate(recur_ctx *ctx, const recur_model *m, int n_gen, uint64_t *tok_state, uint64_t *tok_ns,
                          char *err, size_t err_len) {
    const int32_t n_vocab = recur_model_n_vocab(m);
    const recur_seq_id seq = 0;
    const bool bos = recur_seq_pos_max(ctx, 0) < 0 && recur_vocab_add_bos(m) && recur_token_bos(m) >= 0;
    recur_token tok = bos ? recur_token_bos(m) : bench_token(tok_state, n_vocab);
    for (int i = 0; i < n_gen; i++) {
        const recur_pos pos = recur_seq_pos_max(ctx, 0) + 1;
        const recur_batch b = { .n_tokens = 1, .token = &tok, .pos = &pos, .seq_id = &seq, .logits = NULL };
        const uint64_t t0 = tok_ns ? bench_now_ns() : 0;
        if (recur_decode(ctx, &b, err, err_len)) return 1;
        if (!recur_get_logits(ctx, 0)) {
            snprintf(err, err_len, "no logits after a generation step");
            return 1;
        }
        if (tok_ns) tok_ns[i] = bench_now_ns() - t0;
        tok = bench_token(tok_state, n_vocab);
    }
    return 0;
}

static int run_once(recur_ctx *ctx, const recur_model *m, int n_prompt, int n_gen, int n_batch, uint64_t *tok_state,
                    uint64_t *tok_ns, char *err, size_t err_len) {
    if (n_prompt > 0 && bench_prefill(ctx, m, n_prompt, n_batch, tok_state, NULL, 0, err, err_len)) return 1;
    if (n_gen > 0 && bench_generate(ctx, m, n_gen, tok_state, tok_ns, err, err_len)) return 1;
    return 0;
}

/* The generated tokens' times (ns) as r->tok_ms: median, 90th, 99th percentile, longest.
 * Percentile q of n sorted values: the one at index floor(q (n - 1)). */
static void token_times(bench_result *r, const uint64_t *tok_ns, int n) {
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return;
    for (int i = 0; i < n; i++) v[i] = (double)tok_ns[i] * 1e-6;
    bench_sort_doubles(v, n);
    const double q[4] = { 0.5, 0.9, 0.99, 1.0 };
    for (int k = 0; k < 4; k++) r->tok_ms[k] = v[(int)(q[k] * (n - 1))];
    free(v);
}

/* Empties the sequence, then fills r->n_depth tokens of context (llama-bench's -d). */
static int fill_depth(recur_ctx *ctx, const recur_model *m, const bench_result *r, uint64_t *tok_state, char *err,
                      size_t err_len) {
    if (recur_seq_rm(ctx, 0, -1, -1)) {
        snprintf(err, err_len, "could not empty the sequence");
        return 1;
    }
    return r->n_depth > 0 ? bench_prefill(ctx, m, r->n_depth, MIN(r->n_batch, r->n_depth), tok_state, NULL, 0, err,
                                          err_len)
                          : 0;
}

int bench_run_test(recur_model *m, const bench_opts *o, bench_result *r, char *err, size_t err_len) {
    for (int k = 0; k < 4; k++) r->tok_ms[k] = NAN;
    memset(&r->prof, 0, sizeof r->prof);
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = (uint32_t)(r->n_depth + r->n_prompt + r->n_gen);
    cp.n_seq_max = 1;
    /* a call never holds more than the prompt (or the depth fill), so the logits buffer is
     * sized for that */
    const int n_batch = MIN(r->n_batch, r->n_prompt > 0 ? r->n_prompt : 1);
    cp.n_batch = (uint32_t)MIN(r->n_batch, MAX(n_batch, r->n_depth));
    cp.n_ubatch = (uint32_t)MIN(r->n_ubatch, (int)cp.n_batch);
    cp.n_threads = r->n_threads;
    cp.q8_order = o->q8_order;
    recur_ctx *ctx = NULL;
    if (recur_ctx_new(m, &cp, &ctx, err, err_len)) return 1;
    uint64_t tok_state = 1;
    int rc = 1;
    /* a tg test's tokens one by one (a shared machine's bursts show as a long tail) */
    uint64_t *tok_ns = r->n_prompt == 0 && r->n_gen > 0 ? malloc((size_t)r->n_samples * r->n_gen * sizeof *tok_ns) : NULL;
    if (!o->no_warmup) {
        if (r->n_prompt > 0 && run_once(ctx, m, r->n_prompt, 0, n_batch, &tok_state, NULL, err, err_len)) goto done;
        recur_seq_rm(ctx, 0, -1, -1);
        if (r->n_gen > 0 && run_once(ctx, m, 0, 1, n_batch, &tok_state, NULL, err, err_len)) goto done;
    }
    uint64_t pf0[2];
    recur_prefetch_calls(&pf0[0], &pf0[1]);
    for (int i = 0; i < r->n_samples; i++) {
        if (o->progress)
            fprintf(stderr, "recur-bench: %s: run %d/%d\n", r->bm->filename, i + 1, r->n_samples);
        if (fill_depth(ctx, m, r, &tok_state, err, err_len)) goto done;
        if (o->profile) recur_ctx_set_profile(ctx, &r->prof);   /* the timed run only */
        const uint64_t t0 = bench_now_ns();
        const int bad = run_once(ctx, m, r->n_prompt, r->n_gen, n_batch, &tok_state,
                                 tok_ns ? tok_ns + (size_t)i * r->n_gen : NULL, err, err_len);
        r->samples_ns[i] = bench_now_ns() - t0;
        recur_ctx_set_profile(ctx, NULL);
        if (bad) goto done;
    }
    if (tok_ns && r->n_samples > 0) token_times(r, tok_ns, r->n_samples * r->n_gen);
    recur_prefetch_calls(&r->pf_calls[0], &r->pf_calls[1]);
    r->pf_calls[0] -= pf0[0];
    r->pf_calls[1] -= pf0[1];
    rc = 0;
done:
    free(tok_ns);
    r->rss = bench_rss();
    r->rss_peak = bench_rss_peak();
    if (r->rss_peak < r->rss) r->rss_peak = r->rss;   /* the kernel updates VmHWM lazily */
    recur_ctx_free(ctx);
    return rc;
}
