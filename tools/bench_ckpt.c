/* bench_ckpt.c — recur-bench --checkpoints: what keeping checkpoints costs a chat server.
 *
 * For a model with recurrent layers: a cold prefill of n_prompt tokens (an emptied sequence,
 * calls of -b tokens) with checkpoint capture off and on, alternating off/on and on/off in
 * each round so that drift in the machine's load hits both alike; on = recur_decode_capture
 * keeping the state after every ckpt_every-th prompt token (positions ckpt_every-1,
 * 2 ckpt_every-1, ...: a server can then resume an edited prompt at most ckpt_every tokens
 * before the edit). Then the mean time of recur_snapshot_take and of recur_snapshot_restore of
 * one checkpoint at the end of the prompt, over ckpt_ops calls each. Models without recurrent
 * layers have nothing to checkpoint (their attention cells are kept): their row says so. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef struct ckpt_run {
    int             n_ckpt;
    recur_snapshot **snap;
    recur_capture  *caps;
    uint64_t       *off_ns, *on_ns;   /* [reps] */
    double          take_us, restore_us;
    size_t          bytes;
} ckpt_run;

static double mean_ns(const uint64_t *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)v[i];
    return s / n;
}

static double sd_ns(const uint64_t *v, int n) {
    if (n <= 1) return 0;
    const double m = mean_ns(v, n);
    double s = 0;
    for (int i = 0; i < n; i++) s += ((double)v[i] - m) * ((double)v[i] - m);
    return sqrt(s / (n - 1));
}

/* The median over rounds of on / off - 1, in percent: each round's pair ran back to back, so a
 * burst of the machine's neighbours that slows a few rounds moves it less than the means. */
static double paired_pct(const uint64_t *off, const uint64_t *on, int n) {
    double *r = n > 0 ? malloc((size_t)n * sizeof *r) : NULL;
    if (!r) return NAN;
    for (int i = 0; i < n; i++) r[i] = 100.0 * ((double)on[i] / (double)off[i] - 1.0);
    bench_sort_doubles(r, n);
    const double med = n % 2 ? r[n / 2] : (r[n / 2 - 1] + r[n / 2]) / 2;
    free(r);
    return med;
}

/* One cold prefill, captures on or off; *ns its time. */
static int prefill_timed(recur_ctx *ctx, const recur_model *m, int n_prompt, int n_batch, const ckpt_run *c, bool on,
                         uint64_t *ns, char *err, size_t err_len) {
    if (recur_seq_rm(ctx, 0, -1, -1)) {
        snprintf(err, err_len, "could not empty the sequence");
        return 1;
    }
    uint64_t tok = 1;   /* the same prompt in every run */
    const uint64_t t0 = bench_now_ns();
    const int rc = bench_prefill(ctx, m, n_prompt, n_batch, &tok, on ? c->caps : NULL, on ? c->n_ckpt : 0, err, err_len);
    *ns = bench_now_ns() - t0;
    return rc;
}

/* The mean µs of ckpt_ops takes, then of ckpt_ops restores, of one checkpoint of seq 0. */
static int time_take_restore(recur_ctx *ctx, const bench_opts *o, ckpt_run *c, char *err, size_t err_len) {
    uint64_t take = 0, restore = 0;
    for (int i = 0; i < o->ckpt_ops; i++) {
        const uint64_t t0 = bench_now_ns();
        if (recur_snapshot_take(ctx, 0, c->snap[0], err, err_len)) return 1;
        take += bench_now_ns() - t0;
    }
    for (int i = 0; i < o->ckpt_ops; i++) {
        const uint64_t t0 = bench_now_ns();
        if (recur_snapshot_restore(ctx, c->snap[0], 0, err, err_len)) return 1;
        restore += bench_now_ns() - t0;
    }
    c->take_us = (double)take / o->ckpt_ops / 1e3;
    c->restore_us = (double)restore / o->ckpt_ops / 1e3;
    c->bytes = recur_snapshot_bytes(c->snap[0]);
    return 0;
}

static int ckpt_measure(recur_ctx *ctx, const recur_model *m, const bench_opts *o, int n_prompt, int n_batch,
                        ckpt_run *c, char *err, size_t err_len) {
    uint64_t ns;
    if (!o->no_warmup && (prefill_timed(ctx, m, n_prompt, n_batch, c, false, &ns, err, err_len) ||
                          prefill_timed(ctx, m, n_prompt, n_batch, c, true, &ns, err, err_len)))
        return 1;
    for (int i = 0; i < o->reps; i++) {
        const bool on_first = i % 2 == 1;
        if (prefill_timed(ctx, m, n_prompt, n_batch, c, on_first, on_first ? &c->on_ns[i] : &c->off_ns[i], err, err_len) ||
            prefill_timed(ctx, m, n_prompt, n_batch, c, !on_first, on_first ? &c->off_ns[i] : &c->on_ns[i], err, err_len))
            return 1;
    }
    return time_take_restore(ctx, o, c, err, err_len);
}

/* ---- output -------------------------------------------------------------------------------- */

static void md_header(void) {
    /* "µ" takes two bytes: its columns get one more */
    printf("| %-30s | %7s | %8s | %6s | %18s | %18s | %9s | %9s | %10s | %10s | %11s |\n", "model", "threads", "test",
           "ckpts", "capture off t/s", "capture on t/s", "overhead", "paired", "ckpt size", "take µs", "restore µs");
    printf("| ------------------------------ | ------: | -------: | -----: | -----------------: | -----------------: |"
           " --------: | --------: | ---------: | --------: | ---------: |\n");
}

static void print_row(const bench_model *bm, const bench_opts *o, int n_threads, int n_prompt, int n_batch,
                      int n_ubatch, const ckpt_run *c, bool first) {
    const bool skip = c == NULL;
    const int reps = o->reps;
    const double off = skip ? NAN : mean_ns(c->off_ns, reps), on = skip ? NAN : mean_ns(c->on_ns, reps);
    const double overhead = 100.0 * (on - off) / off, paired = skip ? NAN : paired_pct(c->off_ns, c->on_ns, reps);
    char test[32];
    snprintf(test, sizeof test, "pp%d", n_prompt);
    if (o->fmt == BENCH_MD) {
        if (first) md_header();
        if (skip) {
            printf("| %-30s | %7d | %8s | %6s | %-101s |\n", bm->type, n_threads, test, "-",
                   "no recurrent layers: nothing to checkpoint");
        } else {
            char ts_off[48], ts_on[48], size[32];
            if (c->bytes < 1048576) snprintf(size, sizeof size, "%.1f KiB", (double)c->bytes / 1024.0);
            else snprintf(size, sizeof size, "%.2f MiB", (double)c->bytes / 1048576.0);
            snprintf(ts_off, sizeof ts_off, "%.2f ± %.2f", 1e9 * n_prompt / off, 1e9 * n_prompt * sd_ns(c->off_ns, reps) / off / off);
            snprintf(ts_on, sizeof ts_on, "%.2f ± %.2f", 1e9 * n_prompt / on, 1e9 * n_prompt * sd_ns(c->on_ns, reps) / on / on);
            printf("| %-30s | %7d | %8s | %6d | %19s | %19s | %7.2f %% | %7.2f %% | %10s | %9.1f | %10.1f |\n",
                   bm->type, n_threads, test, c->n_ckpt, ts_off, ts_on, overhead, paired, size, c->take_us,
                   c->restore_us);
        }
        fflush(stdout);
        return;
    }
    bench_field f[32];
    int k = bench_record_head(f, bm, o->fmt, first);
    BENCH_I("n_threads", n_threads);
    BENCH_I("n_prompt", n_prompt);
    BENCH_I("n_batch", n_batch);
    BENCH_I("n_ubatch", n_ubatch);
    BENCH_I("recurrent_layers", bm->cost.n_layer_recurrent);
    if (skip) BENCH_S("skipped", "no recurrent layers: nothing to checkpoint");
    else BENCH_D("skipped", NAN);   /* null */
    BENCH_I("ckpt_every", o->ckpt_every);
    BENCH_I("n_ckpt", skip ? 0 : c->n_ckpt);
    BENCH_I("ckpt_bytes", skip ? 0 : c->bytes);
    BENCH_D("off_avg_ns", off);
    BENCH_D("off_stddev_ns", skip ? NAN : sd_ns(c->off_ns, reps));
    BENCH_D("on_avg_ns", on);
    BENCH_D("on_stddev_ns", skip ? NAN : sd_ns(c->on_ns, reps));
    BENCH_D("off_avg_ts", 1e9 * n_prompt / off);
    BENCH_D("on_avg_ts", 1e9 * n_prompt / on);
    BENCH_D("overhead_pct", overhead);
    BENCH_D("overhead_paired_pct", paired);
    BENCH_I("ckpt_ops", o->ckpt_ops);
    BENCH_D("take_avg_us", skip ? NAN : c->take_us);
    BENCH_D("restore_avg_us", skip ? NAN : c->restore_us);
    f[k++] = (bench_field){ .name = "off_samples_ns", .kind = 'a', .u = skip ? NULL : c->off_ns, .n = skip ? 0 : reps };
    f[k++] = (bench_field){ .name = "on_samples_ns", .kind = 'a', .u = skip ? NULL : c->on_ns, .n = skip ? 0 : reps };
    bench_emit(o->fmt, f, k, first);
}

void bench_ckpt_end(const bench_opts *o, bool any) {
    if (o->fmt == BENCH_JSON) printf(any ? "\n]\n" : "[]\n");
    if (o->fmt == BENCH_MD && any)
        printf("\ncapture on: a checkpoint (recurrent state) after every %d-th prompt token, kept by recur_decode_capture;"
               " overhead = on / off - 1 of the mean prefill time; paired = the median over rounds of on / off - 1"
               " (each round runs off and on back to back).\ntake / restore: recur_snapshot_take /"
               " recur_snapshot_restore of one checkpoint, mean of %d calls each.\n", o->ckpt_every, o->ckpt_ops);
    fflush(stdout);
}

/* ---- one model ----------------------------------------------------------------------------- */

static void ckpt_free(ckpt_run *c) {
    for (int i = 0; c->snap && i < c->n_ckpt; i++) recur_snapshot_free(c->snap[i]);
    free(c->snap);
    free(c->caps);
    free(c->off_ns);
    free(c->on_ns);
}

int bench_ckpt_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, int n_prompt,
                     int n_batch, int n_ubatch, bool first, char *err, size_t err_len) {
    n_batch = MIN(n_batch, n_prompt);
    n_ubatch = MIN(n_ubatch, n_batch);
    if (bm->cost.n_layer_recurrent == 0) {
        print_row(bm, o, n_threads, n_prompt, n_batch, n_ubatch, NULL, first);
        return 0;
    }
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = (uint32_t)n_prompt;
    cp.n_seq_max = 1;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)n_ubatch;
    cp.n_threads = n_threads;
    cp.q8_order = o->q8_order;
    recur_ctx *ctx = NULL;
    if (recur_ctx_new(m, &cp, &ctx, err, err_len)) return 1;
    ckpt_run c = { .n_ckpt = n_prompt / o->ckpt_every > 0 ? n_prompt / o->ckpt_every : 1 };
    c.snap = calloc((size_t)c.n_ckpt, sizeof *c.snap);
    c.caps = calloc((size_t)c.n_ckpt, sizeof *c.caps);
    c.off_ns = calloc((size_t)o->reps, sizeof *c.off_ns);
    c.on_ns = calloc((size_t)o->reps, sizeof *c.on_ns);
    int rc = 1;
    if (!c.snap || !c.caps || !c.off_ns || !c.on_ns) {
        snprintf(err, err_len, "out of memory");
        goto done;
    }
    for (int i = 0; i < c.n_ckpt; i++) {
        c.snap[i] = recur_snapshot_new(ctx, RECUR_SNAP_CHECKPOINT, -1);
        if (!c.snap[i]) {
            snprintf(err, err_len, "out of memory for %d checkpoints", c.n_ckpt);
            goto done;
        }
        /* positions ascending: bench_prefill hands each call the captures inside it */
        const recur_pos pos = n_prompt / o->ckpt_every > 0 ? (i + 1) * o->ckpt_every - 1 : n_prompt - 1;
        c.caps[i] = (recur_capture){ .seq = 0, .pos = pos, .snap = c.snap[i] };
    }
    if (ckpt_measure(ctx, m, o, n_prompt, n_batch, &c, err, err_len)) goto done;
    print_row(bm, o, n_threads, n_prompt, n_batch, n_ubatch, &c, first);
    rc = 0;
done:
    ckpt_free(&c);
    recur_ctx_free(ctx);
    return rc;
}
