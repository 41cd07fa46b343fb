/* recur-bench — llama-bench's benchmark for recur, plus what the machine allows.
 *
 *   recur-bench -m model.gguf -t 2 -p 512 -n 128 -r 5 -o md
 *
 * Prints llama-bench's table (model, size, params, backend, threads, test, t/s as mean ±
 * stddev) or its JSON / JSONL / CSV fields, then, measured in the same run on the same thread
 * counts, the read bandwidth, fp32 FMA peak and int8 dot peak of the machine, and per model two
 * efficiency figures: tg t/s x bytes read per token / bandwidth, pp FLOP/s / the peak its weights
 * run at (int8 for quantized weights where the CPU has VNNI, else fp32 FMA); and the resident
 * memory; `--profile` adds where the timed runs' time went (recur_ctx_set_profile). `--checkpoints`
 * instead measures prefill with checkpoint capture on vs off and the
 * time to take and restore one checkpoint (bench_ckpt.c), and `--prefetch-ab` compares the
 * single-token prefetch modes token by token (bench_pfab.c), and `--batched` runs
 * llama-batched-bench's test: several sequences decoding together (bench_batched.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: recur-bench [options]\n"
        "       recur-bench replay --server PATH -m MODEL [options]   (chat workloads; replay --help)\n"
        "  -m, --model FILE          GGUF model; repeat or give a comma list\n"
        "  -t, --threads N,...       kernel threads (default 2)\n"
        "  -p, --n-prompt N,...      prompt tokens of the pp tests (default 512; 0 = none)\n"
        "  -n, --n-gen N,...         generated tokens of the tg tests (default 128; 0 = none)\n"
        "  -pg PP,TG                 a pp+tg test (repeatable)\n"
        "  -d, --n-depth N,...       context tokens filled (untimed) before each run (default 0)\n"
        "  -b, --batch-size N,...    tokens per decode call (default 2048)\n"
        "  -ub, --ubatch-size N,...  tokens evaluated together (default 512)\n"
        "  --q8-order ggml|block     sum order of Q8_0 weights (default ggml: llama.cpp's bits)\n"
        "  -r, --repetitions N       timed runs per test (default 5), after one warmup\n"
        "  -o, --output FMT          md, json, jsonl or csv (default md)\n"
        "  --delay S                 seconds to wait before each test (default 0)\n"
        "  --no-warmup               skip the warmup run\n"
        "  --progress                print progress to stderr\n"
        "  --bw-mib N                bandwidth buffer in MiB (default 1024; 0 = skip the machine figures)\n"
        "  --profile                 where the pp / tg tests' time goes: matmuls (and the GB/s they\n"
        "                            read), attention, recurrent mixers, norms, element-wise steps, the rest;\n"
        "                            then the matmuls by kind of call (shape, calls, ms, GB/s, and inside\n"
        "                            the thread pool's jobs), and the pool's jobs by kind (md only)\n"
        "  --checkpoints             prefill with checkpoint capture on vs off, take / restore time\n"
        "  --ckpt-every N            --checkpoints: one checkpoint after every N-th prompt token (default 64)\n"
        "  --ckpt-ops N              --checkpoints: take / restore calls averaged (default 200)\n"
        "  --prefetch-ab N           single tokens, the prefetch mode switched between tokens (ABBA):\n"
        "                            auto against on and against off, N quads each; medians of\n"
        "                            the quads' time ratios (RECUR_PREFETCH, README)\n"
        "  --batched                 llama-batched-bench's test: B sequences, each a PP-token prompt, then\n"
        "                            TG steps of one token each (-b, -ub, -t, -r apply; -r 1 unless given)\n"
        "  -npp N,...                --batched: prompt tokens of each sequence (default 128,256,512)\n"
        "  -ntg N,...                --batched: generated tokens of each sequence (default 128,256)\n"
        "  -npl N,...                --batched: sequences decoding together (default 1,2,4,8,16,32)\n"
        "  -pps                      --batched: one prompt shared by the sequences (copied, not recomputed)\n"
        "  -c, --ctx-size N          --batched: cells of the context; rows needing more are left out\n"
        "                            (default: what the largest row needs)\n"
        "  -h, --help                this text\n");
}

/* Appends "a,b,c" to list. */
static int parse_list(const char *flag, const char *v, int *list, int *n, int min) {
    for (const char *p = v; *p;) {
        char *end;
        const long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < min || x > 1 << 24 || *n == BENCH_MAX_LIST) {
            fprintf(stderr, "recur-bench: bad value '%s' for %s\n", v, flag);
            return 2;
        }
        list[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int parse_models(char *v, bench_opts *o) {
    for (char *save = NULL, *s = strtok_r(v, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
        if (o->n_models == BENCH_MAX_LIST) {
            fprintf(stderr, "recur-bench: at most %d models\n", BENCH_MAX_LIST);
            return 2;
        }
        o->models[o->n_models++] = s;
    }
    return 0;
}

static int parse_fmt(const char *v, bench_fmt *fmt) {
    if (strcmp(v, "md") == 0) *fmt = BENCH_MD;
    else if (strcmp(v, "json") == 0) *fmt = BENCH_JSON;
    else if (strcmp(v, "jsonl") == 0) *fmt = BENCH_JSONL;
    else if (strcmp(v, "csv") == 0) *fmt = BENCH_CSV;
    else {
        fprintf(stderr, "recur-bench: unknown output format '%s' (md, json, jsonl, csv)\n", v);
        return 2;
    }
    return 0;
}

/* Fills the lists nobody gave with llama-bench's defaults. */
static void defaults(bench_opts *o) {
    if (!o->n_threads) o->threads[o->n_threads++] = 2;
    if (!o->n_n_prompt) o->n_prompt[o->n_n_prompt++] = 512;
    if (!o->n_n_gen) o->n_gen[o->n_n_gen++] = 128;
    if (!o->n_n_depth) o->n_depth[o->n_n_depth++] = 0;
    if (!o->n_n_batch) o->n_batch[o->n_n_batch++] = 2048;
    if (!o->n_n_ubatch) o->n_ubatch[o->n_n_ubatch++] = 512;
    if (o->batched) {   /* llama-batched-bench's defaults */
        static const int npp[] = { 128, 256, 512 }, ntg[] = { 128, 256 }, npl[] = { 1, 2, 4, 8, 16, 32 };
        for (int i = 0; !o->n_npp && i < 3; i++) o->npp[i] = npp[i];
        for (int i = 0; !o->n_ntg && i < 2; i++) o->ntg[i] = ntg[i];
        for (int i = 0; !o->n_npl && i < 6; i++) o->npl[i] = npl[i];
        if (!o->n_npp) o->n_npp = 3;
        if (!o->n_ntg) o->n_ntg = 2;
        if (!o->n_npl) o->n_npl = 6;
        if (!o->reps_set) o->reps = 1;   /* llama-batched-bench runs each row once */
    }
}

static int parse_args(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){ .reps = 5, .fmt = BENCH_MD, .ckpt_every = 64, .ckpt_ops = 200, .bw_mib = 1024 };
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define FLAG(s, l) (strcmp(a, s) == 0 || strcmp(a, l) == 0)
#define NEED() do { if (!v) { fprintf(stderr, "recur-bench: %s needs a value\n", a); return 2; } i++; } while (0)
        if (FLAG("-h", "--help")) { usage(stdout); return 1; }
        else if (FLAG("-m", "--model")) { NEED(); rc = parse_models(v, o); }
        else if (FLAG("-t", "--threads")) { NEED(); rc = parse_list(a, v, o->threads, &o->n_threads, 1); }
        else if (FLAG("-p", "--n-prompt")) { NEED(); rc = parse_list(a, v, o->n_prompt, &o->n_n_prompt, 0); }
        else if (FLAG("-n", "--n-gen")) { NEED(); rc = parse_list(a, v, o->n_gen, &o->n_n_gen, 0); }
        else if (FLAG("-d", "--n-depth")) { NEED(); rc = parse_list(a, v, o->n_depth, &o->n_n_depth, 0); }
        else if (FLAG("-b", "--batch-size")) { NEED(); rc = parse_list(a, v, o->n_batch, &o->n_n_batch, 1); }
        else if (FLAG("-ub", "--ubatch-size")) { NEED(); rc = parse_list(a, v, o->n_ubatch, &o->n_n_ubatch, 1); }
        else if (FLAG("--q8-order", "--q8-order")) {
            NEED();
            const int q = recur_q8_order_parse(v);
            if (q < 0) { fprintf(stderr, "recur-bench: --q8-order takes ggml or block, not '%s'\n", v); return 2; }
            o->q8_order = (uint32_t)q;
        }
        else if (FLAG("-pg", "--pg")) {
            NEED();
            int pair[BENCH_MAX_LIST], n = 0;
            rc = parse_list(a, v, pair, &n, 0);
            if (!rc && (n != 2 || o->n_pg == BENCH_MAX_LIST)) {
                fprintf(stderr, "recur-bench: -pg takes PP,TG\n");
                rc = 2;
            }
            if (!rc) { o->pg[o->n_pg][0] = pair[0]; o->pg[o->n_pg][1] = pair[1]; o->n_pg++; }
        }
        else if (FLAG("-r", "--repetitions")) { NEED(); o->reps = atoi(v); o->reps_set = true; }
        else if (FLAG("--batched", "--batched")) o->batched = true;
        else if (FLAG("-npp", "--n-pp")) { NEED(); o->batched = true; rc = parse_list(a, v, o->npp, &o->n_npp, 1); }
        else if (FLAG("-ntg", "--n-tg")) { NEED(); o->batched = true; rc = parse_list(a, v, o->ntg, &o->n_ntg, 0); }
        else if (FLAG("-npl", "--n-pl")) { NEED(); o->batched = true; rc = parse_list(a, v, o->npl, &o->n_npl, 1); }
        else if (FLAG("-pps", "--pps")) { o->batched = true; o->pps = true; }
        else if (FLAG("-c", "--ctx-size")) { NEED(); o->n_ctx = atoi(v); }
        else if (FLAG("-o", "--output")) { NEED(); rc = parse_fmt(v, &o->fmt); }
        else if (FLAG("--delay", "--delay")) { NEED(); o->delay_s = atoi(v); }
        else if (FLAG("--no-warmup", "--no-warmup")) o->no_warmup = true;
        else if (FLAG("--progress", "--progress")) o->progress = true;
        else if (FLAG("--bw-mib", "--bw-mib")) { NEED(); o->bw_mib = atoi(v); }
        else if (FLAG("--profile", "--profile")) o->profile = true;
        else if (FLAG("--checkpoints", "--checkpoints")) o->checkpoints = true;
        else if (FLAG("--ckpt-every", "--ckpt-every")) { NEED(); o->ckpt_every = atoi(v); }
        else if (FLAG("--ckpt-ops", "--ckpt-ops")) { NEED(); o->ckpt_ops = atoi(v); }
        else if (FLAG("--prefetch-ab", "--prefetch-ab")) { NEED(); o->pf_ab = atoi(v); }
        else { fprintf(stderr, "recur-bench: unknown option '%s' (see --help)\n", a); return 2; }
#undef FLAG
#undef NEED
    }
    if (rc) return rc;
    if (!o->n_models) { fprintf(stderr, "recur-bench: no model (-m FILE)\n"); return 2; }
    if (o->reps < 1 || o->reps > 100000 || o->delay_s < 0 || o->bw_mib < 0 || o->ckpt_every < 1 || o->ckpt_ops < 1 ||
        o->pf_ab < 0 || o->pf_ab > 100000 || o->n_ctx < 0 || o->n_ctx > 1 << 24) {
        fprintf(stderr, "recur-bench: -r, --delay, --bw-mib, --ckpt-every, --ckpt-ops, --prefetch-ab or -c out of range\n");
        return 2;
    }
    if (o->n_ctx > 0 && !o->batched) {   /* the pp / tg tests size their context themselves */
        fprintf(stderr, "recur-bench: -c is --batched's (llama-batched-bench's context); the pp and tg tests take "
                        "what -p, -n and -d need\n");
        return 2;
    }
    if ((o->batched ? 1 : 0) + (o->checkpoints ? 1 : 0) + (o->pf_ab > 0 ? 1 : 0) > 1) {
        fprintf(stderr, "recur-bench: --batched, --checkpoints and --prefetch-ab are separate benchmarks: one at a time\n");
        return 2;
    }
    if (o->profile && (o->batched || o->checkpoints || o->pf_ab > 0)) {
        fprintf(stderr, "recur-bench: --profile profiles the pp and tg tests, not --batched, --checkpoints or "
                        "--prefetch-ab\n");
        return 2;
    }
    defaults(o);
    return 0;
}

/* llama-bench's "model" column: architecture, a size label, the file type. The size label is
 * derived from the parameter count (llama.cpp takes it from a table of known shapes). */
static void model_type(const recur_model *m, char *buf, size_t len) {
    static const struct { int id; const char *name; } ftypes[] = {
        { 0, "all F32" }, { 1, "F16" }, { 2, "Q4_0" }, { 3, "Q4_1" }, { 7, "Q8_0" }, { 8, "Q5_0" },
        { 9, "Q5_1" }, { 10, "Q2_K - Medium" }, { 11, "Q3_K - Small" }, { 12, "Q3_K - Medium" },
        { 13, "Q3_K - Large" }, { 14, "Q4_K - Small" }, { 15, "Q4_K - Medium" }, { 16, "Q5_K - Small" },
        { 17, "Q5_K - Medium" }, { 18, "Q6_K" }, { 21, "Q2_K - Small" }, { 32, "BF16" },
    };
    char ft[64] = "", v[32];
    if (recur_model_meta_str(m, "general.file_type", v, sizeof v) > 0)
        for (size_t i = 0; i < sizeof ftypes / sizeof ftypes[0]; i++)
            if (atoi(v) == ftypes[i].id) snprintf(ft, sizeof ft, "%s", ftypes[i].name);
    if (!ft[0]) {   /* recur_model_desc's third field is the dominant weight type */
        char desc[256];
        recur_model_desc(m, desc, sizeof desc);
        const char *p = strchr(desc, ',');
        p = p ? strchr(p + 1, ',') : NULL;
        if (p) snprintf(ft, sizeof ft, "%.*s", (int)strcspn(p + 2, ","), p + 2);
    }
    const double np = (double)recur_model_n_params(m);
    char label[32];
    if (np >= 1e8) snprintf(label, sizeof label, "%.1fB", np / 1e9);
    else if (np >= 1e6) snprintf(label, sizeof label, "%.0fM", np / 1e6);
    else snprintf(label, sizeof label, "?B");
    /* a label longer than buf is cut (the type column is informative only) */
    if (snprintf(buf, len, "%s %s %s", recur_model_arch(m), label, ft) >= (int)len && len > 0) buf[len - 1] = '\0';
}

/* The pp, tg and pp+tg tests of one (threads, batch, ubatch, depth) setting, as set in *base;
 * returns the number that failed. */
static int bench_setting_tests(recur_model *m, const bench_opts *o, const bench_result *base, bench_out *out) {
    int fails = 0;
    const int n_tests = o->n_n_prompt + o->n_n_gen + o->n_pg;
    for (int k = 0; k < n_tests; k++) {
        bench_result r = *base;
        if (k < o->n_n_prompt) r.n_prompt = o->n_prompt[k];
        else if (k < o->n_n_prompt + o->n_n_gen) r.n_gen = o->n_gen[k - o->n_n_prompt];
        else { r.n_prompt = o->pg[k - o->n_n_prompt - o->n_n_gen][0]; r.n_gen = o->pg[k - o->n_n_prompt - o->n_n_gen][1]; }
        if (r.n_prompt == 0 && r.n_gen == 0) continue;
        if (o->delay_s) sleep((unsigned)o->delay_s);
        const time_t now = time(NULL);
        strftime(r.test_time, sizeof r.test_time, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        char err[256];
        /* a tg test's roofline: the bandwidth right around it (a shared machine's moves by 2x
         * within a run), the mean of a measurement before and one after */
        const bool near = r.hw && r.n_gen > 0 && r.n_prompt == 0;   /* a tg test, at any depth */
        double by0[3] = { 0 }, by1[3] = { 0 };
        const double bw0 = near ? bench_read_bw(r.n_threads, (size_t)o->bw_mib << 20, by0) : 0;
        if (bench_run_test(m, o, &r, err, sizeof err)) {
            fprintf(stderr, "recur-bench: %s: %s\n", r.bm->filename, err);
            fails++;
            continue;
        }
        const double bw1 = near ? bench_read_bw(r.n_threads, (size_t)o->bw_mib << 20, by1) : 0;
        if (bw0 > 0 && bw1 > 0) {
            r.near_read_gbs = (bw0 + bw1) / 2;
            r.near_read_ends[0] = bw0, r.near_read_ends[1] = bw1;
            for (int i = 0; i < 3; i++) r.near_read_by[i] = (by0[i] + by1[i]) / 2;
        }
        bench_out_test(out, &r);
    }
    return fails;
}

/* Runs every test of one model; returns the number of failed tests. */
static int bench_model_tests(recur_model *m, const bench_model *bm, const bench_opts *o, const bench_hw *hw,
                             bench_out *out) {
    int fails = 0;
    uint64_t *samples = malloc((size_t)o->reps * sizeof *samples);
    if (!samples) return 1;
    for (int ti = 0; ti < o->n_threads; ti++)
        for (int bi = 0; bi < o->n_n_batch; bi++)
            for (int ui = 0; ui < o->n_n_ubatch; ui++)
                for (int di = 0; di < o->n_n_depth; di++) {
                    const bench_result base = {
                        .bm = bm, .hw = hw && hw[ti].ok ? &hw[ti] : NULL, .n_batch = o->n_batch[bi],
                        .n_ubatch = o->n_ubatch[ui], .n_threads = o->threads[ti], .n_depth = o->n_depth[di],
                        .n_samples = o->reps, .samples_ns = samples,
                    };
                    fails += bench_setting_tests(m, o, &base, out);
                }
    free(samples);
    return fails;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "replay")) return bench_replay_main(argc - 1, argv + 1);
    bench_opts o;
    const int prc = parse_args(argc, argv, &o);
    if (prc) return prc == 1 ? 0 : prc;
    recur_init();
    /* the machine first, in a child process per thread count, before any model is mapped */
    bench_hw hw[BENCH_MAX_LIST] = { 0 };
    const bool own = o.checkpoints || o.pf_ab > 0 || o.batched;   /* a benchmark of its own instead of pp / tg */
    if (o.bw_mib > 0 && !own)
        for (int ti = 0; ti < o.n_threads; ti++) {
            if (o.progress) fprintf(stderr, "recur-bench: measuring the machine on %d threads\n", o.threads[ti]);
            bench_hw_measure(o.threads[ti], (size_t)o.bw_mib << 20, &hw[ti]);
            if (!hw[ti].ok) fprintf(stderr, "recur-bench: the machine measurement failed on %d threads\n", o.threads[ti]);
        }
    bench_out *out = own ? NULL : bench_out_new(&o);
    if (!own && !out) return 1;
    /* the md tables at the end refer to every model's description */
    bench_model *bms = calloc((size_t)o.n_models, sizeof *bms);
    if (!bms) return 1;
    int fails = 0;
    bool any_ckpt = false, any_pfab = false, any_batched = false;
    for (int mi = 0; mi < o.n_models; mi++) {
        recur_model_params mp = recur_model_default_params();
        recur_model *m = NULL;
        char err[256];
        if (recur_model_load(o.models[mi], &mp, &m, err, sizeof err)) {
            fprintf(stderr, "recur-bench: %s\n", err);
            fails++;
            continue;
        }
        bench_model *bm = &bms[mi];
        *bm = (bench_model){ .filename = o.models[mi], .size = recur_model_size_bytes(m),
                             .n_params = recur_model_n_params(m), .cost = recur_model_token_cost(m),
                             .state_bytes = recur_model_state_bytes(m),
                             .kv_row_bytes = recur_model_kv_bytes_per_token(m), .rss_load = bench_rss() };
        model_type(m, bm->type, sizeof bm->type);
        if (o.batched) {
            for (int ti = 0; ti < o.n_threads; ti++)
                if (bench_batched_model(m, bm, &o, o.threads[ti], &any_batched, err, sizeof err)) {
                    fprintf(stderr, "recur-bench: %s: %s\n", bm->filename, err);
                    fails++;
                }
        } else if (o.pf_ab > 0) {
            for (int ti = 0; ti < o.n_threads; ti++) {
                if (bench_pfab_model(m, bm, &o, o.threads[ti], !any_pfab, err, sizeof err)) {
                    fprintf(stderr, "recur-bench: %s: %s\n", bm->filename, err);
                    fails++;
                } else {
                    any_pfab = true;
                }
            }
        } else if (!o.checkpoints) {
            fails += bench_model_tests(m, bm, &o, o.bw_mib > 0 ? hw : NULL, out);
        } else {
            for (int ti = 0; ti < o.n_threads; ti++)
                for (int pi = 0; pi < o.n_n_prompt; pi++) {
                    if (o.n_prompt[pi] < 1) continue;
                    if (bench_ckpt_model(m, bm, &o, o.threads[ti], o.n_prompt[pi], o.n_batch[0], o.n_ubatch[0],
                                         !any_ckpt, err, sizeof err)) {
                        fprintf(stderr, "recur-bench: %s: %s\n", bm->filename, err);
                        fails++;
                    } else {
                        any_ckpt = true;
                    }
                }
        }
        recur_model_free(m);
    }
    if (out) {
        bench_out_end(out);
        bench_out_free(out);
    } else if (o.batched) {
        bench_batched_end(&o, any_batched);
    } else if (o.pf_ab > 0) {
        bench_pfab_end(any_pfab);
    } else {
        bench_ckpt_end(&o, any_ckpt);
    }
    free(bms);
    return fails ? 1 : 0;
}
