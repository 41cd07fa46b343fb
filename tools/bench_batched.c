/* bench_batched.c — `recur-bench --batched`: llama-batched-bench's test, several sequences
 * decoding together (a server's parallel slots).
 *
 * For each prompt length PP, generation length TG and number of sequences B (-npp, -ntg,
 * -npl): the sequences are emptied; the prompts (B of PP tokens, or with -pps one prompt that
 * the other sequences then copy: recur_seq_cp) are evaluated in calls of at most -b tokens,
 * the logits of each sequence's last prompt token kept (T_PP); then TG steps, each one call
 * holding one token of every sequence, all with logits (T_TG). A row whose cells (N_KV:
 * B·(PP + TG), or PP + B·TG with -pps) exceed -c is left out, as llama-batched-bench does;
 * without -c the context holds the largest row. The md table has llama-batched-bench's columns;
 * json / jsonl / csv its jsonl fields plus recur's (the median step, the runs' times). With -r
 * (1 unless given) each row runs that many times and T_PP and T_TG are the medians. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

typedef struct batched_row {
    int      pp, tg, pl, n_kv;
    double   t_pp, t_tg;        /* s: the medians over the runs */
    double   step_ms_p50;       /* the median TG step over all runs, ms (NaN without TG) */
    uint64_t *pp_ns, *tg_ns;    /* [reps] */
} batched_row;

/* One call's worth of entries. */
typedef struct batched_buf {
    int           cap;
    recur_token  *tok;
    recur_pos    *pos;
    recur_seq_id *seq;
    int8_t       *logits;
} batched_buf;

static int buf_init(batched_buf *b, int cap) {
    *b = (batched_buf){ .cap = cap };
    b->tok = malloc((size_t)cap * sizeof *b->tok);
    b->pos = malloc((size_t)cap * sizeof *b->pos);
    b->seq = malloc((size_t)cap * sizeof *b->seq);
    b->logits = malloc((size_t)cap * sizeof *b->logits);
    return b->tok && b->pos && b->seq && b->logits ? 0 : 1;
}

static void buf_free(batched_buf *b) {
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->logits);
}

static int decode(recur_ctx *ctx, const batched_buf *b, int n, char *err, size_t err_len) {
    const recur_batch batch = { .n_tokens = n, .token = b->tok, .pos = b->pos, .seq_id = b->seq, .logits = b->logits };
    return recur_decode(ctx, &batch, err, err_len) ? 1 : 0;
}

/* The prompts: sequence s (0 .. n_seq-1) gets pp tokens from position 0, all sequences one
 * after the other, in calls of at most b->cap entries. */
static int prompts(recur_ctx *ctx, const recur_model *m, int pp, int n_seq, batched_buf *b, uint64_t *tok_state,
                   char *err, size_t err_len) {
    const bool bos = recur_vocab_add_bos(m) && recur_token_bos(m) >= 0;
    int n = 0;
    for (int s = 0; s < n_seq; s++)
        for (int i = 0; i < pp; i++) {
            b->tok[n] = i == 0 && bos ? recur_token_bos(m) : bench_token(tok_state, recur_model_n_vocab(m));
            b->pos[n] = i;
            b->seq[n] = s;
            b->logits[n] = i == pp - 1;
            if (++n == b->cap || (s == n_seq - 1 && i == pp - 1)) {
                if (decode(ctx, b, n, err, err_len)) return 1;
                n = 0;
            }
        }
    return 0;
}

/* One step: a token of each of the pl sequences at position pos (in calls of at most b->cap). */
static int step(recur_ctx *ctx, const recur_model *m, int pl, recur_pos pos, batched_buf *b, uint64_t *tok_state,
                char *err, size_t err_len) {
    for (int s0 = 0; s0 < pl; s0 += b->cap) {
        const int n = MIN(pl - s0, b->cap);
        for (int i = 0; i < n; i++) {
            b->tok[i] = bench_token(tok_state, recur_model_n_vocab(m));
            b->pos[i] = pos;
            b->seq[i] = s0 + i;
            b->logits[i] = 1;
        }
        if (decode(ctx, b, n, err, err_len)) return 1;
    }
    return 0;
}

static int empty_all(recur_ctx *ctx, int n_seq, char *err, size_t err_len) {
    for (int s = 0; s < n_seq; s++)
        if (recur_seq_rm(ctx, s, -1, -1)) {
            snprintf(err, err_len, "could not empty sequence %d", s);
            return 1;
        }
    return 0;
}

/* One run of a row: its prompt and generation times; step_ns[tg] each step's time. */
static int run_row(recur_ctx *ctx, const recur_model *m, const bench_opts *o, const batched_row *r, batched_buf *b,
                   uint64_t *pp_ns, uint64_t *tg_ns, uint64_t *step_ns, char *err, size_t err_len) {
    uint64_t tok_state = 1;
    if (empty_all(ctx, r->pl, err, err_len)) return 1;
    const uint64_t t0 = bench_now_ns();
    if (prompts(ctx, m, r->pp, o->pps ? 1 : r->pl, b, &tok_state, err, err_len)) return 1;
    for (int s = 1; o->pps && s < r->pl; s++)
        if (recur_seq_cp(ctx, 0, s, -1, -1)) {
            snprintf(err, err_len, "could not copy the shared prompt to sequence %d", s);
            return 1;
        }
    const uint64_t t1 = bench_now_ns();
    for (int i = 0; i < r->tg; i++) {
        const uint64_t s0 = bench_now_ns();
        if (step(ctx, m, r->pl, r->pp + i, b, &tok_state, err, err_len)) return 1;
        step_ns[i] = bench_now_ns() - s0;
    }
    *pp_ns = t1 - t0;
    *tg_ns = bench_now_ns() - t1;
    return 0;
}

static double median_u64(const uint64_t *v, int n) {
    double *d = malloc((size_t)n * sizeof *d);
    if (!d || n == 0) {
        free(d);
        return NAN;
    }
    for (int i = 0; i < n; i++) d[i] = (double)v[i];
    bench_sort_doubles(d, n);
    const double med = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
    free(d);
    return med;
}

static int measure_row(recur_ctx *ctx, const recur_model *m, const bench_opts *o, batched_row *r, batched_buf *b,
                       char *err, size_t err_len) {
    const int reps = o->reps;
    uint64_t *steps = malloc((size_t)MAX(1, reps * r->tg) * sizeof *steps);
    if (!steps) {
        snprintf(err, err_len, "out of memory");
        return 1;
    }
    int rc = 0;
    for (int i = 0; i < reps && !rc; i++) {
        if (o->progress) fprintf(stderr, "recur-bench: batched pp %d tg %d B %d: run %d/%d\n", r->pp, r->tg, r->pl, i + 1, reps);
        rc = run_row(ctx, m, o, r, b, &r->pp_ns[i], &r->tg_ns[i], steps + (size_t)i * r->tg, err, err_len);
    }
    if (!rc) {
        r->t_pp = median_u64(r->pp_ns, reps) / 1e9;
        r->t_tg = median_u64(r->tg_ns, reps) / 1e9;
        r->step_ms_p50 = r->tg > 0 ? median_u64(steps, reps * r->tg) / 1e6 : NAN;
    }
    free(steps);
    return rc;
}

/* ---- output -------------------------------------------------------------------------------- */

static double speed_pp(const bench_opts *o, const batched_row *r) {
    return (o->pps ? r->pp : (double)r->pl * r->pp) / r->t_pp;
}

static void print_row(const bench_model *bm, const bench_opts *o, int n_threads, int n_kv_max, int n_batch,
                      int n_ubatch, const batched_row *r, bool first) {
    const double s_tg = r->tg > 0 ? (double)r->pl * r->tg / r->t_tg : NAN, t = r->t_pp + r->t_tg;
    if (o->fmt == BENCH_MD) {
        printf("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", r->pp, r->tg, r->pl,
               r->n_kv, r->t_pp, speed_pp(o, r), r->t_tg, s_tg, t, r->n_kv / t);
        fflush(stdout);
        return;
    }
    bench_field f[32];
    int k = bench_record_head(f, bm, o->fmt, first);
    BENCH_I("n_kv_max", n_kv_max);
    BENCH_I("n_batch", n_batch);
    BENCH_I("n_ubatch", n_ubatch);
    BENCH_I("is_pp_shared", o->pps);
    BENCH_I("n_threads", n_threads);
    BENCH_I("n_threads_batch", n_threads);
    BENCH_I("pp", r->pp);
    BENCH_I("tg", r->tg);
    BENCH_I("pl", r->pl);
    BENCH_I("n_kv", r->n_kv);
    BENCH_D("t_pp", r->t_pp);
    BENCH_D("speed_pp", speed_pp(o, r));
    BENCH_D("t_tg", r->t_tg);
    BENCH_D("speed_tg", s_tg);
    BENCH_D("t", t);
    BENCH_D("speed", r->n_kv / t);
    BENCH_I("reps", o->reps);
    BENCH_D("tg_step_ms_p50", r->step_ms_p50);
    f[k++] = (bench_field){ .name = "pp_samples_ns", .kind = 'a', .u = r->pp_ns, .n = o->reps };
    f[k++] = (bench_field){ .name = "tg_samples_ns", .kind = 'a', .u = r->tg_ns, .n = o->reps };
    bench_emit(o->fmt, f, k, first);
}

void bench_batched_end(const bench_opts *o, bool any) {
    if (o->fmt == BENCH_JSON) printf(any ? "\n]\n" : "[]\n");
    if (o->fmt == BENCH_MD && any)
        printf("\nPP, TG: prompt and generated tokens of each of B sequences (-pps: one prompt, copied to the other"
               " sequences); N_KV: cells used; T_PP, T_TG: the %s of %d run%s; S_PP = %s / T_PP, S_TG = B·TG / T_TG,"
               " S = N_KV / T.\n",
               o->reps > 1 ? "medians" : "time", o->reps, o->reps > 1 ? "s" : "", o->pps ? "PP" : "B·PP");
    fflush(stdout);
}

/* ---- one model ----------------------------------------------------------------------------- */

static int cells_of(const bench_opts *o, int pp, int tg, int pl) {
    return o->pps ? pp + pl * tg : pl * (pp + tg);
}

int bench_batched_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, bool *any,
                        char *err, size_t err_len) {
    const bool first = !*any;
    int n_kv_max = o->n_ctx, max_pl = 1;
    for (int a = 0; a < o->n_npp; a++)
        for (int c = 0; c < o->n_ntg; c++)
            for (int d = 0; d < o->n_npl; d++) {
                if (!o->n_ctx) n_kv_max = MAX(n_kv_max, cells_of(o, o->npp[a], o->ntg[c], o->npl[d]));
                max_pl = MAX(max_pl, o->npl[d]);
            }
    const int n_batch = o->n_batch[0], n_ubatch = MIN(o->n_ubatch[0], n_batch);
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = (uint32_t)n_kv_max;
    cp.n_seq_max = (uint32_t)max_pl;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)n_ubatch;
    cp.n_threads = n_threads;
    cp.q8_order = o->q8_order;
    recur_ctx *ctx = NULL;
    if (recur_ctx_new(m, &cp, &ctx, err, err_len)) return 1;
    batched_buf b;
    batched_row r = { 0 };
    r.pp_ns = calloc((size_t)o->reps, sizeof *r.pp_ns);
    r.tg_ns = calloc((size_t)o->reps, sizeof *r.tg_ns);
    int rc = 1;
    if (buf_init(&b, n_batch) || !r.pp_ns || !r.tg_ns) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    if (o->fmt == BENCH_MD) {
        printf("%s%s: %s, n_kv_max = %d, n_batch = %d, n_ubatch = %d, is_pp_shared = %d, n_threads = %d\n\n",
               first ? "" : "\n", bm->filename, bm->type, n_kv_max, n_batch, n_ubatch, o->pps, n_threads);
        printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
               "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
        printf("|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|\n");
    }
    if (!o->no_warmup && n_kv_max >= 2) {   /* a short prompt and one step: the first calls fault the weights in */
        batched_row w = { .pp = MIN(MIN(o->npp[0], 32), n_kv_max - 1), .tg = 1, .pl = 1 };
        uint64_t a, c, s;
        if (run_row(ctx, m, o, &w, &b, &a, &c, &s, err, err_len)) goto done;
    }
    bool rows = false;
    for (int a = 0; a < o->n_npp; a++)
        for (int c = 0; c < o->n_ntg; c++)
            for (int d = 0; d < o->n_npl; d++) {
                r.pp = o->npp[a];
                r.tg = o->ntg[c];
                r.pl = o->npl[d];
                r.n_kv = cells_of(o, r.pp, r.tg, r.pl);
                if (r.n_kv > n_kv_max) continue;   /* llama-batched-bench leaves such rows out */
                if (measure_row(ctx, m, o, &r, &b, err, err_len)) goto done;
                print_row(bm, o, n_threads, n_kv_max, n_batch, n_ubatch, &r, !*any);
                *any = rows = true;
            }
    if (!rows) fprintf(stderr, "recur-bench: %s: every row needs more than -c %d cells\n", bm->filename, n_kv_max);
    rc = 0;
done:
    buf_free(&b);
    free(r.pp_ns);
    free(r.tg_ns);
    recur_ctx_free(ctx);
    return rc;
}
