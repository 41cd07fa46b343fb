/* bench_out.c — recur-bench's output, in llama-bench's formats: md (the table: model, size,
 * params, backend, threads, test, t/s as mean ± stddev), json (an array of one object per test
 * with llama-bench's field names, samples_ns / samples_ts last), jsonl and csv; recur's own
 * fields (machine figures, efficiency, RSS) follow llama-bench's. md then adds the efficiency
 * and memory tables. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define MAX_RESULTS 1024

struct bench_out {
    const bench_opts *o;
    char              cpu[128];
    int               n;
    bench_result      r[MAX_RESULTS];   /* copies (samples_ns not kept) for md's tables */
    double            avg_ts[MAX_RESULTS];
    bool              show_b, show_ub;
};

/* ---- figures ------------------------------------------------------------------------------ */

static double samples_ts(const bench_result *r, int i) {
    return 1e9 * (double)(r->n_prompt + r->n_gen) / (double)r->samples_ns[i];
}

double bench_avg_ts(const bench_result *r) {
    double s = 0;
    for (int i = 0; i < r->n_samples; i++) s += samples_ts(r, i);
    return r->n_samples ? s / r->n_samples : NAN;
}

/* Sample standard deviation (n - 1), 0 for one sample: as llama-bench. */
double bench_stddev_ts(const bench_result *r) {
    if (r->n_samples <= 1) return 0;
    const double mean = bench_avg_ts(r);
    double s = 0;
    for (int i = 0; i < r->n_samples; i++) s += (samples_ts(r, i) - mean) * (samples_ts(r, i) - mean);
    return sqrt(s / (r->n_samples - 1));
}

static uint64_t avg_ns(const bench_result *r) {
    uint64_t s = 0;
    for (int i = 0; i < r->n_samples; i++) s += r->samples_ns[i];
    return r->n_samples ? s / (uint64_t)r->n_samples : 0;
}

static uint64_t stddev_ns(const bench_result *r) {
    if (r->n_samples <= 1) return 0;
    const double mean = (double)avg_ns(r);
    double s = 0;
    for (int i = 0; i < r->n_samples; i++) s += ((double)r->samples_ns[i] - mean) * ((double)r->samples_ns[i] - mean);
    return (uint64_t)sqrt(s / (r->n_samples - 1));
}

/* tg: what a generated token reads: the weights once (lm head included), the recurrent state
 * of its sequence once, and the K and V rows of every position it attends (at depth d, token i
 * of n attends d + i + 1 positions: d + (n + 1) / 2 on average). The state is written back
 * too; that is not counted (the limit is the read bandwidth). */
static bool tg_only(const bench_result *r) { return r->n_gen > 0 && r->n_prompt == 0; }

double bench_tg_state_bytes(const bench_result *r) { return tg_only(r) ? (double)r->bm->state_bytes : NAN; }

double bench_tg_kv_bytes(const bench_result *r) {
    return tg_only(r) ? (double)r->bm->kv_row_bytes * (r->n_depth + (r->n_gen + 1) / 2.0) : NAN;
}

double bench_bytes_per_token(const bench_result *r) {
    return (double)r->bm->cost.weight_bytes + bench_tg_state_bytes(r) + bench_tg_kv_bytes(r);
}

/* pp: per prompt token, 2 FLOPs per MAC: the weights but the lm head, the recurrent state,
 * attention over the depth and the causal prefix (position i attends d + i + 1 positions:
 * d + (p + 1) / 2 on average), and the lm head once per call (only the last token of a call
 * wants logits). */
double bench_flops_per_token(const bench_result *r) {
    if (!(r->n_prompt > 0 && r->n_gen == 0)) return NAN;
    const recur_model_cost *c = &r->bm->cost;
    const double p = r->n_prompt, calls = ceil(p / (r->n_batch < r->n_prompt ? r->n_batch : r->n_prompt));
    const double macs = (double)(c->weight_macs - c->head_macs + c->state_macs) + (double)c->head_macs * calls / p +
                        (double)c->attn_macs_per_pos * (r->n_depth + (p + 1) / 2);
    return 2 * macs;
}

/* Whether the read bandwidth measured before a tg test and the one after differ by more than
 * BW_MOVED (the larger over the smaller): the test's mean then stands for neither end (this
 * machine class flips between ~34 and ~60 GB/s from one minute to the next). */
#define BW_MOVED 1.25
static bool bw_moved(const bench_result *r) {
    const double a = r->near_read_ends[0], b = r->near_read_ends[1];
    return r->near_read_gbs > 0 && a > 0 && b > 0 && (a > b ? a / b : b / a) > BW_MOVED;
}

/* The read bandwidth a tg test is held against: the one measured around it, else the
 * machine's at the start (GB/s; NaN when neither was measured). */
static double tg_read_gbs(const bench_result *r) {
    if (!r->hw || !r->hw->ok) return NAN;
    return r->near_read_gbs > 0 ? r->near_read_gbs : r->hw->read_gbs;
}

double bench_bw_efficiency(const bench_result *r) {
    return bench_avg_ts(r) * bench_bytes_per_token(r) / (tg_read_gbs(r) * 1e9);
}

double bench_fma_efficiency(const bench_result *r) {
    if (!r->hw || !r->hw->ok) return NAN;
    return bench_avg_ts(r) * bench_flops_per_token(r) / (r->hw->fma_gflops * 1e9);
}

double bench_bw_efficiency_p50(const bench_result *r) {
    return 1e3 / r->tok_ms[0] * bench_bytes_per_token(r) / (tg_read_gbs(r) * 1e9);
}

double bench_pp_peak(const bench_result *r, bool *int8) {
    *int8 = false;
    if (!r->hw || !r->hw->ok) return NAN;
    const recur_model_cost *c = &r->bm->cost;
    *int8 = r->hw->int8_gops > 0 && (double)c->weight_bytes < 1.5 * (double)c->weight_macs;
    return *int8 ? r->hw->int8_gops : r->hw->fma_gflops;
}

double bench_pp_efficiency(const bench_result *r) {
    bool int8;
    return bench_avg_ts(r) * bench_flops_per_token(r) / (bench_pp_peak(r, &int8) * 1e9);
}

/* --profile: ms a token in `kind`, and the rate the matmuls read their weights at (GB/s). */
static double prof_ms_per_token(const bench_result *r, int kind) {
    return r->prof.tokens ? (double)r->prof.ns[kind] * 1e-6 / (double)r->prof.tokens : NAN;
}

static double prof_matmul_gbs(const bench_result *r) {
    const uint64_t ns = r->prof.ns[RECUR_PROF_MATMUL];
    return ns ? (double)r->prof.matmul_bytes / (double)ns : NAN;
}

/* --profile: ms a token inside the thread pool's jobs of `kind`, and the rate the matmuls read
 * their weights at inside their jobs (the kernels' rate, without the caller's own work). */
static double prof_job_ms_per_token(const bench_result *r, int kind) {
    return r->prof.tokens ? (double)r->prof.job_ns[kind] * 1e-6 / (double)r->prof.tokens : NAN;
}

static double prof_matmul_job_gbs(const bench_result *r) {
    const uint64_t ns = r->prof.job_ns[RECUR_PROF_MATMUL];
    return ns ? (double)r->prof.matmul_bytes / (double)ns : NAN;
}

/* ---- fields -------------------------------------------------------------------------------- */

static int result_fields(const bench_out *out, const bench_result *r, bench_field *f, double *ts) {
    int k = 0;
    const bool hw = r->hw && r->hw->ok;
    BENCH_S("engine", "recur");
    BENCH_S("cpu_info", out->cpu);
    BENCH_S("isa", recur_cpu_isa());
    BENCH_S("q8_order", recur_q8_order_name(out->o->q8_order));
    BENCH_S("backends", "CPU");
    BENCH_S("model_filename", r->bm->filename);
    BENCH_S("model_type", r->bm->type);
    BENCH_I("model_size", r->bm->size);
    BENCH_I("model_n_params", r->bm->n_params);
    BENCH_I("n_batch", r->n_batch);
    BENCH_I("n_ubatch", r->n_ubatch);
    BENCH_I("n_threads", r->n_threads);
    BENCH_I("n_prompt", r->n_prompt);
    BENCH_I("n_gen", r->n_gen);
    BENCH_I("n_depth", r->n_depth);
    BENCH_S("test_time", r->test_time);
    BENCH_I("avg_ns", avg_ns(r));
    BENCH_I("stddev_ns", stddev_ns(r));
    BENCH_D("avg_ts", bench_avg_ts(r));
    BENCH_D("stddev_ts", bench_stddev_ts(r));
    BENCH_D("read_bw_gbs", hw ? r->hw->read_gbs : NAN);
    BENCH_D("read_bw_near_gbs", hw && r->near_read_gbs > 0 ? r->near_read_gbs : NAN);
    BENCH_D("read_bw_before_gbs", hw && r->near_read_gbs > 0 ? r->near_read_ends[0] : NAN);
    BENCH_D("read_bw_after_gbs", hw && r->near_read_gbs > 0 ? r->near_read_ends[1] : NAN);
    /* each read pattern's bandwidth (the machine's, and around a tg test): a kernel that reads
     * one stream a thread is bound by the first, whatever the fastest pattern does */
    static const char *const by_name[3] = { "read_bw_1stream_gbs", "read_bw_2streams_gbs", "read_bw_4streams_gbs" };
    static const char *const near_name[3] = { "read_bw_near_1stream_gbs", "read_bw_near_2streams_gbs",
                                              "read_bw_near_4streams_gbs" };
    for (int i = 0; i < 3; i++) BENCH_D(by_name[i], hw && r->hw->read_gbs_by[i] > 0 ? r->hw->read_gbs_by[i] : NAN);
    for (int i = 0; i < 3; i++) BENCH_D(near_name[i], hw && r->near_read_by[i] > 0 ? r->near_read_by[i] : NAN);
    BENCH_D("fma_peak_gflops", hw ? r->hw->fma_gflops : NAN);
    BENCH_S("fma_isa", hw ? r->hw->fma_isa : "");
    BENCH_D("bytes_per_token", bench_bytes_per_token(r));
    BENCH_D("weight_bytes_per_token", tg_only(r) ? (double)r->bm->cost.weight_bytes : NAN);
    BENCH_D("state_bytes_per_token", bench_tg_state_bytes(r));
    BENCH_D("kv_bytes_per_token", bench_tg_kv_bytes(r));
    BENCH_D("flops_per_token", bench_flops_per_token(r));
    BENCH_D("bw_efficiency", bench_bw_efficiency(r));
    BENCH_D("fma_efficiency", bench_fma_efficiency(r));
    BENCH_D("int8_peak_gops", hw ? r->hw->int8_gops : NAN);
    BENCH_D("pp_efficiency", bench_pp_efficiency(r));
    BENCH_D("token_ms_p50", r->tok_ms[0]);
    BENCH_D("token_ms_p90", r->tok_ms[1]);
    BENCH_D("token_ms_p99", r->tok_ms[2]);
    BENCH_D("token_ms_max", r->tok_ms[3]);
    BENCH_D("bw_efficiency_p50", bench_bw_efficiency_p50(r));
    BENCH_S("prefetch", recur_prefetch_mode());
    BENCH_I("prefetch_calls", r->pf_calls[0] + r->pf_calls[1]);
    BENCH_I("prefetch_lean_calls", r->pf_calls[1]);
    BENCH_I("rss_load_bytes", r->bm->rss_load);
    BENCH_I("rss_bytes", r->rss);
    BENCH_I("rss_peak_bytes", r->rss_peak);
    if (r->prof.tokens > 0) {   /* --profile */
        static const char *const ms_names[RECUR_PROF_KINDS] = {
            "profile_matmul_ms", "profile_attention_ms", "profile_recurrent_ms",
            "profile_norm_ms",   "profile_elementwise_ms", "profile_other_ms" };
        BENCH_I("profile_tokens", r->prof.tokens);
        for (int kind = 0; kind < RECUR_PROF_KINDS; kind++) BENCH_D(ms_names[kind], prof_ms_per_token(r, kind));
        BENCH_D("profile_matmul_gbs", prof_matmul_gbs(r));
        static const char *const job_names[RECUR_PROF_OTHER] = {
            "profile_matmul_job_ms", "profile_attention_job_ms", "profile_recurrent_job_ms",
            "profile_norm_job_ms",   "profile_elementwise_job_ms" };
        uint64_t wait = 0;
        for (int kind = 0; kind < RECUR_PROF_OTHER; kind++) {
            BENCH_D(job_names[kind], prof_job_ms_per_token(r, kind));
            wait += r->prof.wait_ns[kind];
        }
        BENCH_D("profile_matmul_job_gbs", prof_matmul_job_gbs(r));
        BENCH_D("profile_pool_wait_ms", (double)wait * 1e-6 / (double)r->prof.tokens);
    }
    for (int i = 0; i < r->n_samples; i++) ts[i] = samples_ts(r, i);
    f[k++] = (bench_field){ .name = "samples_ns", .kind = 'a', .u = r->samples_ns, .n = r->n_samples };
    f[k++] = (bench_field){ .name = "samples_ts", .kind = 'f', .f = ts, .n = r->n_samples };
    return k;
}

void bench_json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static void print_value(const bench_field *x, bool json) {
    if (x->kind == 's') {
        if (json) bench_json_str(stdout, x->s);
        else printf("\"%s\"", x->s);
    } else if (x->kind == 'i') {
        printf("%lld", x->i);
    } else if (x->kind == 'd') {
        if (isnan(x->d)) printf("%s", json ? "null" : "");
        else printf("%.6f", x->d);
    } else {
        printf("[ ");
        for (int i = 0; i < x->n; i++)
            if (x->kind == 'a') printf("%s%llu", i ? ", " : "", (unsigned long long)x->u[i]);
            else printf("%s%g", i ? ", " : "", x->f[i]);
        printf(" ]");
    }
}

int bench_record_head(bench_field *f, const bench_model *bm, bench_fmt fmt, bool first) {
    if (first && fmt == BENCH_JSON) printf("[\n");
    int k = 0;
    BENCH_S("engine", "recur");
    BENCH_S("model_filename", bm->filename);
    BENCH_S("model_type", bm->type);
    return k;
}

void bench_emit(bench_fmt fmt, const bench_field *f, int n, bool first) {
    if (fmt == BENCH_JSON || fmt == BENCH_JSONL) {
        const bool lines = fmt == BENCH_JSON;   /* json: one field a line; jsonl: one object a line */
        printf(lines ? "%s  {\n" : "%s{", lines && !first ? ",\n" : "");
        for (int i = 0; i < n; i++) {
            printf(lines ? "    \"%s\": " : "\"%s\": ", f[i].name);
            print_value(&f[i], true);
            if (i + 1 < n) printf(lines ? ",\n" : ", ");
        }
        printf(lines ? "\n  }" : "}\n");
    } else if (fmt == BENCH_CSV) {   /* arrays are left out */
        int last = n - 1;
        while (last >= 0 && (f[last].kind == 'a' || f[last].kind == 'f')) last--;
        if (first)
            for (int i = 0; i <= last; i++) printf("%s%s", f[i].name, i < last ? "," : "\n");
        for (int i = 0; i <= last; i++) {
            print_value(&f[i], false);
            printf("%s", i < last ? "," : "\n");
        }
    }
    fflush(stdout);
}

/* ---- md ------------------------------------------------------------------------------------ */

static void md_header(const bench_out *out) {
    printf("| %-30s | %10s | %10s | %-10s | %7s |", "model", "size", "params", "backend", "threads");
    if (out->show_b) printf(" %7s |", "n_batch");
    if (out->show_ub) printf(" %8s |", "n_ubatch");
    printf(" %15s | %20s |\n", "test", "t/s");
    printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: |");
    if (out->show_b) printf(" ------: |");
    if (out->show_ub) printf(" -------: |");
    printf(" --------------: | -------------------: |\n");
}

static void test_name(const bench_result *r, char *buf, size_t len) {
    char depth[24] = "";
    if (r->n_depth > 0) snprintf(depth, sizeof depth, " @ d%d", r->n_depth);   /* llama-bench's suffix */
    if (r->n_prompt > 0 && r->n_gen == 0) snprintf(buf, len, "pp%d%s", r->n_prompt, depth);
    else if (r->n_gen > 0 && r->n_prompt == 0) snprintf(buf, len, "tg%d%s", r->n_gen, depth);
    else snprintf(buf, len, "pp%d+tg%d%s", r->n_prompt, r->n_gen, depth);
}

static void md_row(const bench_out *out, const bench_result *r) {
    char size[32], params[32], test[48], ts[64];
    const double sz = (double)r->bm->size, np = (double)r->bm->n_params;
    if (sz < 1024.0 * 1024 * 1024) snprintf(size, sizeof size, "%.2f MiB", sz / 1024 / 1024);
    else snprintf(size, sizeof size, "%.2f GiB", sz / 1024 / 1024 / 1024);
    if (np < 1e9) snprintf(params, sizeof params, "%.2f M", np / 1e6);
    else snprintf(params, sizeof params, "%.2f B", np / 1e9);
    test_name(r, test, sizeof test);
    snprintf(ts, sizeof ts, "%.2f ± %.2f", bench_avg_ts(r), bench_stddev_ts(r));
    printf("| %-30s | %10s | %10s | %-10s | %7d |", r->bm->type, size, params, "CPU", r->n_threads);
    if (out->show_b) printf(" %7d |", r->n_batch);
    if (out->show_ub) printf(" %8d |", r->n_ubatch);
    printf(" %15s | %21s |\n", test, ts);   /* 21: "±" is two bytes */
}

/* tg tests, token by token: the mean of the table above carries every burst of a shared
 * machine's neighbours; the median token is the steady speed. */
static void md_tokens(const bench_out *out) {
    bool any = false;
    for (int i = 0; i < out->n && !any; i++) any = !isnan(out->r[i].tok_ms[0]);
    if (!any) return;
    printf("\n| %-30s | %7s | %15s | %9s | %9s | %9s | %9s | %10s | %22s |\n", "model", "threads", "test", "token p50",
           "p90", "p99", "longest", "t/s at p50", "efficiency at p50");
    printf("| ------------------------------ | ------: | --------------: | --------: | --------: | --------: | --------: |"
           " ---------: | ---------------------: |\n");
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        if (isnan(r->tok_ms[0])) continue;
        char test[48], eff[48] = "-";
        const double e = bench_bw_efficiency_p50(r);
        if (!isnan(e)) snprintf(eff, sizeof eff, "%.1f %% of read bw", 100 * e);
        test_name(r, test, sizeof test);
        printf("| %-30s | %7d | %15s | %6.3f ms | %6.3f ms | %6.3f ms | %6.3f ms | %10.2f | %22s |\n", r->bm->type,
               r->n_threads, test, r->tok_ms[0], r->tok_ms[1], r->tok_ms[2], r->tok_ms[3], 1e3 / r->tok_ms[0], eff);
    }
    printf("\ntg tokens: each generated token of the timed runs timed alone (percentiles over all of them). The t/s"
           " and efficiency above are the runs' means, llama-bench's figure; on a shared machine they carry the"
           " neighbours' bursts (the long tail here), while the median token shows the steady speed.\n");
}

static void md_efficiency(const bench_out *out) {
    const bench_hw *seen[BENCH_MAX_LIST];
    int n_seen = 0;
    for (int i = 0; i < out->n; i++) {
        const bench_hw *hw = out->r[i].hw;
        bool dup = !hw;
        for (int j = 0; j < n_seen && !dup; j++) dup = seen[j] == hw;
        if (dup || n_seen == BENCH_MAX_LIST) continue;
        seen[n_seen++] = hw;
        if (hw->ok)
            printf("machine, %d threads: read %.1f GB/s (%zu MiB buffer, best of 9 passes; 1, 2 and 4 streams a thread:"
                   " %.1f, %.1f, %.1f), fp32 FMA peak %.1f GFLOP/s (%s), int8 dot peak %.1f GOP/s%s\n",
                   hw->n_threads, hw->read_gbs, hw->bw_bytes >> 20, hw->read_gbs_by[0], hw->read_gbs_by[1],
                   hw->read_gbs_by[2], hw->fma_gflops, hw->fma_isa, hw->int8_gops,
                   hw->int8_gops > 0 ? " (vpdpbusd)" : " (no VNNI: not measured)");
        else
            printf("machine, %d threads: not measured (the measurement failed)\n", hw->n_threads);
    }
    printf("\n| %-30s | %7s | %15s | %10s | %14s | %16s | %12s | %11s | %22s |\n", "model", "threads", "test", "t/s",
           "per token", "achieved", "read bw", "limit t/s", "efficiency");
    printf("| ------------------------------ | ------: | --------------: | ---------: | -------------: |"
           " ---------------: | -----------: | ----------: | ---------------------: |\n");
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        const double ts = out->avg_ts[i], bpt = bench_bytes_per_token(r), fpt = bench_flops_per_token(r);
        if (isnan(bpt) && isnan(fpt)) continue;   /* pp+tg mixes both limits */
        const bool tg = !isnan(bpt);
        /* the limit: t/s at the measured bandwidth (tg) or at the peak the weights run at (pp) */
        bool int8 = false;
        const double limit = !(r->hw && r->hw->ok) ? NAN : tg ? tg_read_gbs(r) * 1e9 / bpt : bench_pp_peak(r, &int8) * 1e9 / fpt;
        char test[48], per[32], got[32], bw[32] = "-", lim[32] = "-", eff[48] = "-";
        if (tg && !isnan(limit)) snprintf(bw, sizeof bw, "%.2f GB/s%s", tg_read_gbs(r), bw_moved(r) ? "*" : "");
        if (tg) {
            snprintf(per, sizeof per, "%.1f MB", bpt / 1e6);
            snprintf(got, sizeof got, "%.2f GB/s", ts * bpt / 1e9);
        } else {
            snprintf(per, sizeof per, "%.3f GFLOP", fpt / 1e9);
            snprintf(got, sizeof got, "%.1f GFLOP/s", ts * fpt / 1e9);
        }
        if (!isnan(limit)) {
            snprintf(lim, sizeof lim, "%.2f", limit);
            snprintf(eff, sizeof eff, "%.1f %% of %s", 100 * ts / limit, tg ? "read bw" : int8 ? "int8 peak" : "FMA peak");
        }
        test_name(r, test, sizeof test);
        printf("| %-30s | %7d | %15s | %10.2f | %14s | %16s | %12s | %11s | %22s |\n", r->bm->type, r->n_threads, test, ts,
               per, got, bw, lim, eff);
    }
    printf("\ntg: bytes per token = what one token reads: every weight once (MoE: only the used experts' share;"
           " token embedding: one row), its sequence's recurrent state once, and the KV rows of the positions it"
           " attends (depth + (n + 1) / 2 on average); the state written back is not counted. read bw = the read bandwidth"
           " measured right before and right after the test (their mean; the machine line's figure where it was not"
           " measured): a shared machine's bandwidth moves during a run; * = the two measurements differ by more than"
           " %.0f %% (listed below), so the efficiency stands for neither.\n"
           "pp: FLOPs per token = 2 x MACs: every weight element but the lm head, attention Q.K and P.V over the"
           " depth and the causal prefix, 3 per recurrent-state float; the lm head once per -b call. Quantized weights (under 1.5 bytes"
           " per element) are held against the int8 dot peak where the CPU has VNNI, others against the fp32 FMA peak.\n",
           100 * (BW_MOVED - 1));
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        if (!bw_moved(r)) continue;
        char test[48];
        test_name(r, test, sizeof test);
        printf("* %s %s: read bw %.2f GB/s before, %.2f after\n", r->bm->type, test, r->near_read_ends[0],
               r->near_read_ends[1]);
    }
    uint64_t pf[2] = { 0, 0 };
    for (int i = 0; i < out->n; i++)
        if (out->r[i].n_prompt == 0)
            for (int m = 0; m < 2; m++) pf[m] += out->r[i].pf_calls[m];
    printf("single-token matmuls, prefetch mode: %s", recur_prefetch_mode());
    if (pf[0] + pf[1] > 0)
        printf(" (RECUR_PREFETCH; the tg tests' timed calls ran the lean twins %llu times in %llu: %.0f %%)",
               (unsigned long long)pf[1], (unsigned long long)(pf[0] + pf[1]),
               100.0 * (double)pf[1] / (double)(pf[0] + pf[1]));
    printf("\n");
}

/* --profile: where a token's time went, by kind, in the timed runs. */
static void md_profile(const bench_out *out) {
    bool any = false;
    for (int i = 0; i < out->n && !any; i++) any = out->r[i].prof.tokens > 0;
    if (!any) return;
    printf("\n| %-30s | %7s | %15s |", "model", "threads", "test");
    for (int kind = 0; kind < RECUR_PROF_KINDS; kind++) printf(" %17s |", recur_prof_kind_name((recur_prof_kind)kind));
    printf(" %10s | %11s |\n", "a token", "matmul read");
    printf("| ------------------------------ | ------: | --------------: |");
    for (int kind = 0; kind < RECUR_PROF_KINDS; kind++) printf(" ----------------: |");
    printf(" ---------: | ----------: |\n");
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        if (!r->prof.tokens) continue;
        char test[48], gbs[32] = "-";
        test_name(r, test, sizeof test);
        printf("| %-30s | %7d | %15s |", r->bm->type, r->n_threads, test);
        for (int kind = 0; kind < RECUR_PROF_KINDS; kind++)
            printf(" %7.3f ms %4.1f %% |", prof_ms_per_token(r, kind),
                   r->prof.total_ns ? 100.0 * (double)r->prof.ns[kind] / (double)r->prof.total_ns : 0.0);
        if (!isnan(prof_matmul_gbs(r))) snprintf(gbs, sizeof gbs, "%.1f GB/s", prof_matmul_gbs(r));
        printf(" %7.3f ms | %11s |\n", (double)r->prof.total_ns * 1e-6 / (double)r->prof.tokens, gbs);
    }
    printf("\nprofile (--profile): the timed runs' decode time a token (a prompt token for pp), by kind of step, and"
           " its share; each step timed whole on the calling thread (the thread pool's hand-offs included); other ="
           " what no other kind took (embedding rows, checks, MoE routing, logits copies). matmul read = the weight"
           " bytes the matmuls read over their time.\n");
}

/* One kind of matmul call of a profiled test: its steps a token, time and read rate. */
static void md_profile_mm_row(const bench_result *r, const char *test, const recur_prof_mm *e, const char *types) {
    const double tok = (double)r->prof.tokens, all = (double)r->prof.ns[RECUR_PROF_MATMUL];
    char shape[48], gbs[32] = "-";
    snprintf(shape, sizeof shape, e->n_mats ? "%d x %lld x %lld%s" : "-", (int)e->n_mats, (long long)e->rows,
             (long long)e->cols, e->experts ? " (experts)" : "");
    char job_gbs[32] = "-";
    if (e->ns > 0) snprintf(gbs, sizeof gbs, "%.1f GB/s", (double)e->bytes / (double)e->ns);
    if (e->job_ns > 0) snprintf(job_gbs, sizeof job_gbs, "%.1f GB/s", (double)e->bytes / (double)e->job_ns);
    printf("| %-30s | %15s | %-24s | %-28s | %9.3f | %9.2f | %9.2f | %9.3f ms | %5.1f %% | %11s | %11s |\n",
           r->bm->type, test, types, shape, (double)e->steps / tok,
           e->steps ? (double)e->ns * 1e-3 / (double)e->steps : 0.0,
           e->steps ? (double)e->job_ns * 1e-3 / (double)e->steps : 0.0, (double)e->ns * 1e-6 / tok,
           all > 0 ? 100.0 * (double)e->ns / all : 0.0, gbs, job_gbs);
}

/* --profile: the matmul time by kind of call (recur_profile.mm), in the order first seen. */
static void md_profile_mm(const bench_out *out) {
    bool any = false;
    for (int i = 0; i < out->n && !any; i++) any = out->r[i].prof.n_mm > 0;
    if (!any) return;
    printf("\n| %-30s | %15s | %-24s | %-28s | %9s | %9s | %9s | %12s | %7s | %11s | %11s |\n", "model", "test",
           "types", "matrices x rows x cols", "a token", "us a call", "in job", "a token", "matmul", "read",
           "read in job");
    printf("| ------------------------------ | --------------: | ------------------------ | ---------------------------- |"
           " --------: | --------: | --------: | -----------: | ------: | ----------: | ----------: |\n");
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        if (!r->prof.tokens) continue;
        char test[48];
        test_name(r, test, sizeof test);
        for (int k = 0; k < r->prof.n_mm; k++) md_profile_mm_row(r, test, &r->prof.mm[k], r->prof.mm[k].types);
        if (r->prof.mm_rest.steps) md_profile_mm_row(r, test, &r->prof.mm_rest, "(other kinds)");
    }
    printf("\nmatmul calls by kind (--profile): the matrices that ran as one call (q/k/v together, gate/up together,"
           " a MoE layer's experts), their output rows together and input length; calls and ms a token; their share"
           " of the matmul time; the rate they read their weights at. in job: the part of a call inside its thread-pool"
           " job (the kernels' shares; the rest is the caller quantizing the activations and planning the shares), and"
           " the rate the weights were read at in it.\n");
}

/* --profile: the thread pool's part of each kind's time: the jobs spread over the threads. */
static void md_profile_pool(const bench_out *out) {
    bool any = false;
    for (int i = 0; i < out->n && !any; i++)
        for (int kind = 0; kind < RECUR_PROF_OTHER && !any; kind++) any = out->r[i].prof.jobs[kind] > 0;
    if (!any) return;
    printf("\n| %-30s | %15s | %-11s | %9s | %10s | %12s | %9s | %11s | %14s |\n", "model", "test", "kind",
           "jobs", "us a job", "in jobs", "of kind", "caller wait", "outside jobs");
    printf("| ------------------------------ | --------------: | ----------- | --------: | ---------: | -----------: |"
           " --------: | ----------: | -------------: |\n");
    for (int i = 0; i < out->n; i++) {
        const bench_result *r = &out->r[i];
        if (!r->prof.tokens) continue;
        char test[48];
        test_name(r, test, sizeof test);
        const double tok = (double)r->prof.tokens;
        for (int kind = 0; kind < RECUR_PROF_OTHER; kind++) {
            const uint64_t n = r->prof.jobs[kind];
            if (!n) continue;
            printf("| %-30s | %15s | %-11s | %9.2f | %10.2f | %9.3f ms | %7.1f %% | %8.2f us | %11.3f ms |\n",
                   r->bm->type, test, recur_prof_kind_name((recur_prof_kind)kind), (double)n / tok,
                   (double)r->prof.job_ns[kind] * 1e-3 / (double)n, (double)r->prof.job_ns[kind] * 1e-6 / tok,
                   r->prof.ns[kind] ? 100.0 * (double)r->prof.job_ns[kind] / (double)r->prof.ns[kind] : 0.0,
                   (double)r->prof.wait_ns[kind] * 1e-3 / (double)n,
                   (double)(r->prof.ns[kind] - r->prof.job_ns[kind]) * 1e-6 / tok);
        }
    }
    printf("\nthread pool (--profile): a token's jobs that ran on several threads, by kind of step; their time on the"
           " calling thread from handing the job out to its end, a job and a token, and its share of the kind's time;"
           " the part of a job the caller waited for the other threads' last shares after running out of its own"
           " (the threads ending apart); the kind's time outside its jobs (the caller alone: quantizing activations,"
           " planning, the steps it runs alone).\n");
}

static void md_memory(const bench_out *out) {
    printf("\n| %-30s | %16s | %16s | %16s |\n", "model", "RSS after load", "RSS in tests", "peak RSS");
    printf("| ------------------------------ | ---------------: | ---------------: | ---------------: |\n");
    for (int i = 0; i < out->n; i++) {
        if (i + 1 < out->n && out->r[i + 1].bm == out->r[i].bm) continue;   /* the model's last test */
        uint64_t rss = 0;
        for (int j = 0; j < out->n; j++)
            if (out->r[j].bm == out->r[i].bm && out->r[j].rss > rss) rss = out->r[j].rss;
        printf("| %-30s | %12.1f MiB | %12.1f MiB | %12.1f MiB |\n", out->r[i].bm->type,
               (double)out->r[i].bm->rss_load / 1048576.0, (double)rss / 1048576.0,
               (double)out->r[i].rss_peak / 1048576.0);
    }
    printf("\nRSS from /proc/self/status (VmRSS; peak = VmHWM of the process so far); weights are mapped from the"
           " file, so their pages count once touched, except Q4_K, Q6_K, Q8_0, Q4_0 and Q5_K matrices packed at load"
           " (in memory of their own from the start; RECUR_NO_REPACK=1 keeps them in the file's layout,"
           " RECUR_NO_REPACK=q6, q8, q6,q8, q40 or q5 the Q6_K ones, the Q8_0 ones, both, the Q4_0 ones or the Q5_K"
           " ones).\n");
}

/* ---- the printer --------------------------------------------------------------------------- */

bench_out *bench_out_new(const bench_opts *o) {
    bench_out *out = calloc(1, sizeof *out);
    if (!out) return NULL;
    out->o = o;
    bench_cpu_name(out->cpu, sizeof out->cpu);
    out->show_b = o->n_n_batch > 1 || o->n_batch[0] != 2048;
    out->show_ub = o->n_n_ubatch > 1 || o->n_ubatch[0] != 512;
    if (o->fmt == BENCH_MD) md_header(out);
    else if (o->fmt == BENCH_JSON) printf("[\n");
    return out;
}

void bench_out_test(bench_out *out, const bench_result *r) {
    if (out->o->fmt == BENCH_MD) {
        md_row(out, r);
        fflush(stdout);
    } else {
        bench_field f[80];
        double *ts = malloc((size_t)(r->n_samples > 0 ? r->n_samples : 1) * sizeof *ts);
        if (!ts) return;
        bench_emit(out->o->fmt, f, result_fields(out, r, f, ts), out->n == 0);
        free(ts);
    }
    if (out->n < MAX_RESULTS) {
        out->r[out->n] = *r;
        out->r[out->n].samples_ns = NULL;
        out->avg_ts[out->n] = bench_avg_ts(r);
        out->n++;
    }
}

void bench_out_end(bench_out *out) {
    if (out->o->fmt == BENCH_JSON) printf("\n]\n");
    if (out->o->fmt == BENCH_MD && out->n > 0) {
        printf("\n");
        md_efficiency(out);
        md_tokens(out);
        md_profile(out);
        md_profile_mm(out);
        md_profile_pool(out);
        md_memory(out);
        printf("\nbuild: recur (kernels: %s, q8 order: %s)\n", recur_cpu_isa(), recur_q8_order_name(out->o->q8_order));
    }
    fflush(stdout);
}

void bench_out_free(bench_out *out) { free(out); }
