/* bench_pfab.c — `recur-bench --prefetch-ab N`: how the single-token prefetch modes (recur.h
 * recur_prefetch_set) compare on this machine, now.
 *
 * Separate runs of recur-bench cannot tell a few per cent apart on a machine whose neighbours
 * move its memory bandwidth by 2x from one minute to the next. Here one process decodes single
 * tokens and switches the mode between them, in quads A B B A: a quad's ratio is the time of
 * its two B tokens over its two A tokens, so load that changes over seconds hits both sides
 * alike. Two comparisons, auto against on and auto against off, N quads each, in order; each
 * row gives the median ratio (below 1: auto is faster), the quartiles, and the tokens a second
 * of each side. The context is refilled from empty every BENCH_PFAB_CTX tokens, so the
 * tokens' attention work stays small and alike. The mode is left as it was. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define BENCH_PFAB_CTX 64

/* One token of seq 0 at the next position (from 0 again when the context is full): its time. */
static int one_token(recur_ctx *ctx, const recur_model *m, uint64_t *tok_state, uint64_t *ns, char *err,
                     size_t err_len) {
    recur_pos pos = recur_seq_pos_max(ctx, 0) + 1;
    if (pos >= BENCH_PFAB_CTX) {
        recur_seq_rm(ctx, 0, -1, -1);
        pos = 0;
    }
    const recur_token tok = bench_token(tok_state, recur_model_n_vocab(m));
    const recur_seq_id seq = 0;
    const recur_batch b = { .n_tokens = 1, .token = &tok, .pos = &pos, .seq_id = &seq, .logits = NULL };
    const uint64_t t0 = bench_now_ns();
    if (recur_decode(ctx, &b, err, err_len)) return 1;
    *ns = bench_now_ns() - t0;
    return 0;
}

/* n quads of mode a against mode b: ratios[n] sorted, and the tokens a second of each side. */
static int compare(recur_ctx *ctx, const recur_model *m, const char *a, const char *b, int n, double *ratios,
                   double *ts_a, double *ts_b, char *err, size_t err_len) {
    uint64_t tok_state = 1, sum_a = 0, sum_b = 0;
    for (int q = 0; q < n; q++) {
        uint64_t t[4];
        for (int i = 0; i < 4; i++) {
            recur_prefetch_set(i == 1 || i == 2 ? b : a);
            if (one_token(ctx, m, &tok_state, &t[i], err, err_len)) return 1;
        }
        ratios[q] = (double)(t[1] + t[2]) / (double)(t[0] + t[3]);
        sum_a += t[0] + t[3];
        sum_b += t[1] + t[2];
    }
    bench_sort_doubles(ratios, n);
    *ts_a = sum_a ? 2.0 * n * 1e9 / (double)sum_a : 0;
    *ts_b = sum_b ? 2.0 * n * 1e9 / (double)sum_b : 0;
    return 0;
}

int bench_pfab_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, bool first, char *err,
                     size_t err_len) {
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = BENCH_PFAB_CTX;
    cp.n_seq_max = 1;
    cp.n_batch = cp.n_ubatch = 1;
    cp.n_threads = n_threads;
    cp.q8_order = o->q8_order;
    recur_ctx *ctx = NULL;
    if (recur_ctx_new(m, &cp, &ctx, err, err_len)) return 1;
    double *ratios = malloc((size_t)o->pf_ab * sizeof *ratios);
    char mode0[8];
    snprintf(mode0, sizeof mode0, "%s", recur_prefetch_mode());
    int rc = 1;
    if (!ratios) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    if (first) {
        printf("| %-30s | %7s | %4s | %4s | %6s | %12s | %15s | %9s | %9s |\n", "model", "threads", "A", "B", "quads",
               "median B/A", "quartiles", "A t/s", "B t/s");
        printf("| ------------------------------ | ------: | ---- | ---- | -----: | -----------: | --------------: |"
               " --------: | --------: |\n");
    }
    uint64_t warm = 0, tok_state = 7;
    for (int i = 0; i < 4; i++)   /* pages in, each mode measured once */
        if (one_token(ctx, m, &tok_state, &warm, err, err_len)) goto done;
    static const char *against[2] = { "on", "off" };
    for (int c = 0; c < 2; c++) {
        double ts_a, ts_b;
        if (compare(ctx, m, against[c], "auto", o->pf_ab, ratios, &ts_a, &ts_b, err, err_len)) goto done;
        const int n = o->pf_ab;
        char quart[32];
        snprintf(quart, sizeof quart, "%.4f-%.4f", ratios[n / 4], ratios[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1]);
        printf("| %-30s | %7d | %4s | %4s | %6d | %12.4f | %15s | %9.2f | %9.2f |\n", bm->type, n_threads, against[c],
               "auto", n, ratios[n / 2], quart, ts_a, ts_b);
        fflush(stdout);
    }
    rc = 0;
done:
    recur_prefetch_set(mode0);
    free(ratios);
    recur_ctx_free(ctx);
    return rc;
}

void bench_pfab_end(bool any) {
    if (!any) return;
    printf("\nB/A: the time of a quad's two B tokens over its two A tokens (quads A B B A, one process,"
           " the mode switched between tokens; below 1: B is faster); t/s: all tokens of that side. auto"
           " times its calls and runs the faster way; its prefetch-on and prefetch-off rows bound what it"
           " can gain or lose (README, RECUR_PREFETCH).\n");
}
