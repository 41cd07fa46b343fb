/* bench.h — recur-bench's options, results and the functions its files share.
 *
 *   bench.c       options, the loop over models x threads x tests
 *   bench_run.c   one test: warmup, then r timed runs of prompt processing / generation
 *   bench_hw.c    the machine: read bandwidth, FMA peak, RSS, CPU name (in a child process)
 *   bench_out.c   md / json / jsonl / csv output and the efficiency table
 *   bench_ckpt.c  --checkpoints: prefill with checkpoint capture on vs off, take / restore
 *   bench_pfab.c  --prefetch-ab: single tokens with the prefetch modes alternated (recur.h)
 *   bench_batched.c  --batched: several sequences decoding together (llama-batched-bench)
 *   bench_replay*.c  `recur-bench replay`: chat workloads against a recur-server (bench_replay.h)
 */
#ifndef RECUR_TOOLS_BENCH_H
#define RECUR_TOOLS_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "recur.h"

#define BENCH_MAX_LIST 32

typedef enum bench_fmt { BENCH_MD, BENCH_JSON, BENCH_JSONL, BENCH_CSV } bench_fmt;

typedef struct bench_opts {
    const char *models[BENCH_MAX_LIST];
    int         n_models;
    int         threads[BENCH_MAX_LIST], n_threads;
    int         n_prompt[BENCH_MAX_LIST], n_n_prompt;
    int         n_gen[BENCH_MAX_LIST], n_n_gen;
    int         n_depth[BENCH_MAX_LIST], n_n_depth;   /* -d: tokens in the context before each test */
    int         pg[BENCH_MAX_LIST][2], n_pg;
    int         n_batch[BENCH_MAX_LIST], n_n_batch;
    int         n_ubatch[BENCH_MAX_LIST], n_n_ubatch;
    int         reps;
    int         delay_s;
    bench_fmt   fmt;
    bool        no_warmup, progress;
    bool        checkpoints;   /* --checkpoints: the checkpoint benchmark instead of pp / tg */
    int         ckpt_every;    /* a checkpoint after every ckpt_every-th prompt token */
    int         ckpt_ops;      /* take / restore calls averaged */
    int         pf_ab;         /* --prefetch-ab N: N quads of tokens a comparison (0: not asked) */
    int         bw_mib;        /* bandwidth buffer; 0: skip the machine measurements */
    uint32_t    q8_order;      /* --q8-order (recur_q8_order) */
    bool        profile;       /* --profile: where the timed runs' time goes (recur_ctx_set_profile) */
    bool        reps_set;      /* -r was given */
    /* --batched (llama-batched-bench's options): prompt, generation and sequence counts, a
     * prompt shared by the sequences, the context's cells (0: what the largest row needs) */
    bool        batched, pps;
    int         npp[BENCH_MAX_LIST], n_npp;
    int         ntg[BENCH_MAX_LIST], n_ntg;
    int         npl[BENCH_MAX_LIST], n_npl;
    int         n_ctx;
} bench_opts;

/* What the machine does with n_threads threads (bench_hw.c). */
typedef struct bench_hw {
    int    n_threads;
    bool   ok;
    double read_gbs;       /* streaming read, best pass, GB/s (1e9 bytes) */
    double read_gbs_by[3]; /* the best pass of each pattern: 1, 2 and 4 streams a thread */
    double fma_gflops;     /* fp32 FMA peak, all threads, GFLOP/s */
    char   fma_isa[16];    /* "avx512", "avx2" or "scalar": the FMA kernel that ran */
    double int8_gops;      /* int8 dot peak (vpdpbusd, 2 ops per byte product), all threads,
                            * GOP/s; 0 where the CPU has no AVX512-VNNI */
    size_t bw_bytes;       /* buffer read per pass */
} bench_hw;

/* One model as the output describes it. */
typedef struct bench_model {
    const char      *filename;
    char             type[96];     /* llama-bench's "model" column: "qwen3 0.6B Q8_0" */
    uint64_t         size, n_params;
    recur_model_cost cost;
    uint64_t         state_bytes;  /* recurrent state of one sequence (recur_model_state_bytes) */
    uint64_t         kv_row_bytes; /* K and V of one position, all attention layers */
    uint64_t         rss_load;     /* VmRSS right after recur_model_load */
} bench_model;

/* One test (one row of the table). */
typedef struct bench_result {
    const bench_model *bm;
    const bench_hw    *hw;          /* measured on n_threads threads; NULL when not measured */
    int                n_prompt, n_gen, n_batch, n_ubatch, n_threads;
    int                n_depth;     /* context filled (untimed) before every run */
    int                n_samples;
    uint64_t          *samples_ns;  /* [n_samples] */
    char               test_time[32];
    uint64_t           rss, rss_peak;   /* VmRSS / VmHWM after the test */
    double             near_read_gbs;   /* tg tests: the read bandwidth measured right before and
                                         * right after the runs, their mean (0: not measured) */
    double             near_read_ends[2];   /* those two measurements, before and after (0: not measured) */
    double             near_read_by[3];     /* their mean for each pattern: 1, 2 and 4 streams a thread */
    uint64_t           pf_calls[2];     /* matmul calls timed for the prefetch choice during the
                                         * timed runs: with, without (recur.h recur_prefetch_calls) */
    double             tok_ms[4];       /* tg tests: one generated token's time over all timed runs,
                                         * ms: median, 90th and 99th percentile, longest (NaN:
                                         * not a tg test) */
    recur_profile      prof;            /* --profile: the timed runs' (prof.tokens 0: not profiled) */
} bench_result;

/* ---- bench_run.c ---- */
/* Runs one test (warmup unless o->no_warmup, then o->reps timed runs) into r, whose sizes and
 * samples_ns (o->reps entries) the caller set. Returns 0, or 1 with err set. */
int bench_run_test(recur_model *m, const bench_opts *o, bench_result *r, char *err, size_t err_len);
/* Deterministic stand-ins for prompt tokens (what is read does not change the speed). */
recur_token bench_token(uint64_t *state, int32_t n_vocab);
/* Decodes n tokens of seq 0 from position pos0 in calls of at most n_batch tokens, logits of the
 * last token of each call only; caps, when not NULL, are handed to recur_decode_capture. */
int bench_prefill(recur_ctx *ctx, const recur_model *m, int n, int n_batch, uint64_t *tok_state,
                  const recur_capture *caps, int n_caps, char *err, size_t err_len);
uint64_t bench_now_ns(void);
/* Sorts v[0..n) ascending (the medians and quartiles of paired runs). */
void bench_sort_doubles(double *v, int n);

/* ---- bench_hw.c ---- */
/* Measures bandwidth (a bw_bytes buffer) and FMA peak on n_threads threads, in a child process
 * so that the buffer never counts in this process's peak RSS. */
void bench_hw_measure(int n_threads, size_t bw_bytes, bench_hw *out);
/* The read bandwidth alone, measured as bench_hw_measure does (GB/s; 0 when it failed). */
double bench_read_bw(int n_threads, size_t bw_bytes, double by[3]);
/* VmRSS / VmHWM of this process in bytes (0 when /proc is unreadable). */
uint64_t bench_rss(void);
uint64_t bench_rss_peak(void);
/* The CPU's model name ("AMD EPYC"), or "unknown". */
void bench_cpu_name(char *buf, size_t len);

/* ---- bench_out.c ---- */
typedef struct bench_out bench_out;
bench_out *bench_out_new(const bench_opts *o);
void bench_out_test(bench_out *out, const bench_result *r);
/* Footer: for md the efficiency and memory tables over every result so far. */
void bench_out_end(bench_out *out);
void bench_out_free(bench_out *out);
/* Efficiency figures of a result (NAN when they do not apply or the machine was not measured). */
double bench_bytes_per_token(const bench_result *r);
double bench_tg_state_bytes(const bench_result *r);
double bench_tg_kv_bytes(const bench_result *r);
double bench_flops_per_token(const bench_result *r);
double bench_bw_efficiency(const bench_result *r);
double bench_fma_efficiency(const bench_result *r);
/* pp: the peak the test's weights are multiplied at: the int8 dot peak for quantized weights
 * (under 1.5 bytes per weight element: their dots run on vpdpbusd) where measured, else the
 * fp32 FMA peak. Sets *int8 to which one. GFLOP/s (GOP/s); NaN when not measured. */
double bench_pp_peak(const bench_result *r, bool *int8);
/* pp t/s x FLOPs per token / bench_pp_peak. */
double bench_pp_efficiency(const bench_result *r);
/* tg: bench_bw_efficiency at the median token's speed (tok_ms[0]) instead of the runs' mean. */
double bench_bw_efficiency_p50(const bench_result *r);
double bench_avg_ts(const bench_result *r);
double bench_stddev_ts(const bench_result *r);
/* Writes s as a JSON string literal (quotes included). */
void bench_json_str(FILE *f, const char *s);
/* One named value of a json / jsonl / csv record. kind: 's' string, 'i' integer, 'd' number
 * (NAN: null), 'a' / 'f' arrays of n uint64 / double (left out of csv). */
typedef struct bench_field {
    const char     *name;
    char            kind;
    const char     *s;
    long long       i;
    double          d;
    const uint64_t *u;
    const double   *f;
    int             n;
} bench_field;
/* Append a string / integer / number field to a record being built: the caller has
 * `bench_field f[]` and `int k` (the fields so far) in scope. */
#define BENCH_S(n, v) f[k++] = (bench_field){ .name = n, .kind = 's', .s = v }
#define BENCH_I(n, v) f[k++] = (bench_field){ .name = n, .kind = 'i', .i = (long long)(v) }
#define BENCH_D(n, v) f[k++] = (bench_field){ .name = n, .kind = 'd', .d = (v) }
/* Opens a record of model bm's in f: the json array's bracket before the output's first record,
 * then the engine, model_filename and model_type fields. Returns the fields written. */
int bench_record_head(bench_field *f, const bench_model *bm, bench_fmt fmt, bool first);
/* Prints one record in fmt (json, jsonl or csv); first: the output's first record (csv header,
 * no separating comma in json). */
void bench_emit(bench_fmt fmt, const bench_field *f, int n, bool first);

/* ---- bench_pfab.c ---- */
/* --prefetch-ab for one model on n_threads threads: prints its rows (the header first when
 * `first`). Returns 0, or 1 with err set. */
int bench_pfab_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, bool first, char *err,
                     size_t err_len);
/* The note under the rows (nothing when no row was printed). */
void bench_pfab_end(bool any);

/* ---- bench_batched.c ---- */
/* --batched for one model on n_threads threads: prints its table (json: its records; *any: a
 * record was printed before, set when this call prints one). Returns 0, or 1 with err set. */
int bench_batched_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, bool *any,
                        char *err, size_t err_len);
/* The note under the tables (json: the closing bracket). */
void bench_batched_end(const bench_opts *o, bool any);

/* ---- bench_ckpt.c ---- */
/* --checkpoints for one model on n_threads threads and an n_prompt-token prompt; prints its row
 * in o->fmt (first: the first row of the output). Returns 0, or 1 with err set. */
int bench_ckpt_model(recur_model *m, const bench_model *bm, const bench_opts *o, int n_threads, int n_prompt,
                     int n_batch, int n_ubatch, bool first, char *err, size_t err_len);
void bench_ckpt_end(const bench_opts *o, bool any);

/* ---- bench_replay.c ---- */
/* `recur-bench replay ...` (argv[0] is "replay"): the exit status. */
int bench_replay_main(int argc, char **argv);

#endif
