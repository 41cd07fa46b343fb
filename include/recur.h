/*
 * recur.h — the public API of librecur.
 *
 * Anything not declared here is not API. Handles are opaque; every object has a
 * _new/_load and a _free, and _free(NULL) is a harmless no-op. Fallible calls
 * return a recur_status (0 = OK) and, when given a buffer, write a one-line
 * message there. Nothing in the library aborts or exits on bad input.
 *
 * Typical use:
 *
 *   recur_init();
 *   recur_model_params mp = recur_model_default_params();
 *   recur_model *m; char err[256];
 *   if (recur_model_load("model.gguf", &mp, &m, err, sizeof err)) { puts(err); return 1; }
 *   recur_ctx_params cp = recur_ctx_default_params();
 *   recur_ctx *ctx;
 *   if (recur_ctx_new(m, &cp, &ctx, err, sizeof err)) { ... }
 *   recur_batch b = { .n_tokens = n, .token = ids, .pos = pos, .seq_id = seq, .logits = want };
 *   if (recur_decode(ctx, &b, err, sizeof err)) { ... }
 *   const float *logits = recur_get_logits(ctx, n - 1);
 *   recur_ctx_free(ctx); recur_model_free(m);
 */
#ifndef RECUR_H
#define RECUR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ------------------------------------------------------------------------------- */

typedef enum recur_status {
    RECUR_OK = 0,
    RECUR_E_IO,          /* a file could not be opened, read, mapped or written */
    RECUR_E_FORMAT,      /* a file is malformed (the message names the field and offset) */
    RECUR_E_NOMEM,       /* an allocation failed */
    RECUR_E_INVALID,     /* an argument is out of range or inconsistent */
    RECUR_E_UNSUPPORTED, /* valid, but not implemented (architecture, tensor type, ...) */
    RECUR_E_FULL,        /* no room: context cells, batch size or sequence slots */
    RECUR_E_STATE,       /* the operation would need state that no longer exists */
} recur_status;

/* A short constant name for a status ("ok", "io error", ...). */
const char *recur_status_str(recur_status s);

/* Detects the CPU features and fills the kernel tables. Idempotent and thread-safe;
 * every other call does it implicitly if it was not done. */
void recur_init(void);

/* The instruction set the kernels use on this machine: "avx512", "avx2" or "scalar". */
const char *recur_cpu_isa(void);

/* Single-token matmuls run their kernels with or without software prefetch: chosen by timing
 * the calls as they run ("auto", the default), or fixed by the environment variable
 * RECUR_PREFETCH=on|off. Results never depend on it. The mode, and the timed calls so far
 * with and without prefetch (the process's, all models together). */
const char *recur_prefetch_mode(void);
void        recur_prefetch_calls(uint64_t *with_prefetch, uint64_t *without);
/* Sets the mode: "auto", "on" or "off" (RECUR_E_INVALID for anything else). */
recur_status recur_prefetch_set(const char *mode);

/* ---- model -------------------------------------------------------------------------------- */

typedef struct recur_model recur_model;
typedef int32_t recur_token;

/* Weights are used in place from a read-only mapping of the file: no second copy. Where the
 * CPU has a kernel for it (AVX-512), Q4_K, Q6_K and Q8_0 matrices are rearranged at load
 * instead (16 rows to a group, the same size; the file's pages of them are then unmapped),
 * which the single-token matmul reads faster; the results are the same bits. */

typedef struct recur_model_params {
    bool vocab_only;   /* load the tokenizer only (no weights are bound) */
    bool no_repack;    /* keep every weight in the file's layout (also: RECUR_NO_REPACK=1; =q6, =q8, =q6,q8:
                          the Q6_K ones, the Q8_0 ones, both) */
} recur_model_params;

recur_model_params recur_model_default_params(void);

/* Loads a GGUF model. On failure *out is NULL and err holds the reason. */
recur_status recur_model_load(const char *path, const recur_model_params *params,
                              recur_model **out, char *err, size_t err_len);
void recur_model_free(recur_model *m);

int         recur_model_n_vocab(const recur_model *m);
int         recur_model_n_embd(const recur_model *m);
int         recur_model_n_layer(const recur_model *m);
int         recur_model_n_ctx_train(const recur_model *m);
uint64_t    recur_model_n_params(const recur_model *m);
uint64_t    recur_model_size_bytes(const recur_model *m);   /* bytes of all weight tensors */
const char *recur_model_arch(const recur_model *m);         /* general.architecture */
/* A one-line description ("qwen3 28 layers, 1024 embd, Q8_0, 596.0M params"). */
void        recur_model_desc(const recur_model *m, char *buf, size_t buf_len);
/* Memory per sequence that a context allocates for this model (0 for a vocab_only model):
 *  - state_bytes: the recurrent state of one sequence (conv + SSM / delta state of every
 *    recurrent layer, F32), whatever its length — also the payload of a checkpoint snapshot;
 *    0 without recurrent layers;
 *  - kv_bytes_per_token: the K and V rows (F16) of one token in every attention layer; 0
 *    without attention layers. */
size_t      recur_model_state_bytes(const recur_model *m);
size_t      recur_model_kv_bytes_per_token(const recur_model *m);

/* What evaluating one token costs, from the weights the forward pass binds (for benchmarks:
 * recur-bench's efficiency figures). Every element of a 2-D weight (3-D for experts) is one
 * multiply-accumulate per token; 1-D tensors (norms, biases) are read but not counted as MACs.
 * MoE expert tensors count n_expert_used / n_expert of their size (router and shared expert in
 * full). The token embedding counts one row, unless it is also the lm head (tied). */
typedef struct recur_model_cost {
    uint64_t weight_bytes;       /* weight bytes read per token, lm head included */
    uint64_t weight_macs;        /* MACs per token with those weights, lm head included */
    uint64_t head_bytes;         /* of which the lm head (output.weight, or the tied embedding) */
    uint64_t head_macs;          /* of which the lm head: only tokens that want logits pay it */
    uint64_t attn_macs_per_pos;  /* MACs per token per attended position (Q.K and P.V, all attention layers) */
    uint64_t state_macs;         /* recurrent state update + read-out per token: 3 per state float */
    int32_t  n_layer_recurrent;  /* layers with recurrent state (conv / SSM); 0: a pure transformer */
} recur_model_cost;
recur_model_cost recur_model_token_cost(const recur_model *m);

/* ---- vocabulary (what the model file carries) --------------------------------------------- */

recur_token recur_token_bos(const recur_model *m);   /* -1 when the model has none */
recur_token recur_token_eos(const recur_model *m);
bool        recur_token_is_eog(const recur_model *m, recur_token t);
bool        recur_vocab_add_bos(const recur_model *m);

/* Text to tokens. Returns the number of tokens; when that exceeds max_tokens nothing past
 * max_tokens is written and the caller retries with a larger buffer. Negative on error. */
int recur_tokenize(const recur_model *m, const char *text, size_t text_len, recur_token *tokens,
                   int max_tokens, bool add_special, bool parse_special);

/* The bytes of one token (byte tokens give their byte; control tokens give their text only
 * when special is true). Returns the number of bytes, which may exceed buf_len (nothing
 * then is written past buf_len); negative when the token is out of range. */
int recur_token_to_piece(const recur_model *m, recur_token t, char *buf, int buf_len, bool special);

/* Streaming detokenizer: turns tokens into text and never emits half a UTF-8 character
 * (incomplete sequences are held back until completed; invalid bytes become U+FFFD). */
typedef struct recur_detok recur_detok;
recur_detok *recur_detok_new(const recur_model *m, bool special);
void recur_detok_free(recur_detok *d);
/* Appends the text that token t completes to out; returns the bytes written, negative on error
 * (token out of range, or out_cap too small: then nothing was consumed). An out_cap of
 * recur_detok_max_bytes(m) is always enough. */
int  recur_detok_max_bytes(const recur_model *m);
int  recur_detok_push(recur_detok *d, recur_token t, char *out, int out_cap);
/* Flushes what is held back (an unfinished character comes out as U+FFFD). */
int  recur_detok_flush(recur_detok *d, char *out, int out_cap);

/* A metadata value of the model file as text (numbers printed, arrays summarised). Returns
 * the length, which may exceed buf_len; -1 when the key is absent. */
int recur_model_meta_str(const recur_model *m, const char *key, char *buf, size_t buf_len);

/* ---- sampling ----------------------------------------------------------------------------- */

/* A bias added to one token's logit before sampling; -INFINITY bans the token. */
typedef struct recur_logit_bias {
    recur_token token;
    float       bias;
} recur_logit_bias;

/* The chain, in llama.cpp's default order: logit_bias -> penalties (over the accepted history)
 * -> top_k -> typical_p -> top_p -> min_p -> temperature -> draw from the softmax with the
 * sampler's own PRNG. temp <= 0 is greedy over the biased, penalized logits (the lowest id wins
 * ties). Same seed + same history + same logits -> same token. */
typedef struct recur_sampler_params {
    float    temp;              /* <= 0: greedy (the lowest id wins ties) */
    int32_t  top_k;             /* <= 0: all tokens */
    float    top_p;             /* >= 1: off */
    float    min_p;             /* <= 0: off */
    float    typical_p;         /* >= 1: off */
    int32_t  min_keep;          /* top_p / min_p / typical_p keep at least this many (0 = 1) */
    int32_t  penalty_last_n;    /* history the penalties look at; 0: off, -1: all accepted */
    float    penalty_repeat;    /* 1: off (llama.cpp's repeat_penalty) */
    float    penalty_freq;      /* 0: off (frequency_penalty) */
    float    penalty_present;   /* 0: off (presence_penalty) */
    const recur_logit_bias *logit_bias;   /* [n_logit_bias], copied by recur_sampler_new */
    int32_t  n_logit_bias;
    uint64_t seed;              /* same seed + same logits -> same tokens */
} recur_sampler_params;

typedef struct recur_sampler recur_sampler;
recur_sampler_params recur_sampler_default_params(void);
/* NULL when out of memory or p is invalid (a logit_bias token outside the vocab). */
recur_sampler *recur_sampler_new(const recur_sampler_params *p, int32_t n_vocab);
void           recur_sampler_free(recur_sampler *s);
/* Chooses the next token; does not add it to the history (recur_sampler_accept does). */
recur_token    recur_sampler_sample(recur_sampler *s, const float *logits);
/* Appends t to the history the penalties see (prompt tokens and generated ones). */
void           recur_sampler_accept(recur_sampler *s, recur_token t);
/* Empties the history and restarts the PRNG from the seed. */
void           recur_sampler_reset(recur_sampler *s);
/* Replaces the history with toks[0 .. n) (as if reset, then each accepted) but keeps the PRNG
 * where it is: for a rewind, whose resampled token must not replay the discarded draw. */
void           recur_sampler_set_history(recur_sampler *s, const recur_token *toks, int32_t n);

/* The n most likely tokens of logits[0 .. n_vocab) with their log-probabilities (log-softmax of
 * the raw logits), most likely first, the lower id first on ties. Returns how many were
 * written: min(n, n_vocab). */
int32_t recur_logprobs_top(const float *logits, int32_t n_vocab, int32_t n, recur_token *ids, float *logprobs);
/* log-softmax(logits)[t]. */
float   recur_logprob_of(const float *logits, int32_t n_vocab, recur_token t);

/* ---- context: sequence memory + a batch evaluator ----------------------------------------- */

typedef struct recur_ctx recur_ctx;
typedef int32_t recur_pos;
typedef int32_t recur_seq_id;

/* The order of the sums of Q8_0 weights times Q8_0 activations (recur_ctx_params.q8_order).
 * Either is fixed per output element, so logits never depend on threads, batch or cache. */
typedef enum recur_q8_order {
    RECUR_Q8_GGML = 0,    /* ggml's x86 order: llama.cpp's logits to the bit (the default) */
    RECUR_Q8_BLOCK = 1,   /* one FMA per block of its exact integer sum: half the vector work,
                             prompts of Q8_0 models ~1.3-1.5x faster; rounds differently from
                             llama.cpp (as exactly, not the same bits) */
} recur_q8_order;

/* "ggml" / "block" for a q8_order, and back (-1 for another name: a flag's value). */
const char *recur_q8_order_name(uint32_t q8_order);
int         recur_q8_order_parse(const char *name);

typedef struct recur_ctx_params {
    uint32_t n_ctx;      /* attention cells in all (0 = the model's training context, capped at 4096) */
    uint32_t n_seq_max;  /* distinct sequences that may live at once (ids 0 .. n_seq_max-1) */
    uint32_t n_batch;    /* most tokens one recur_decode call accepts */
    uint32_t n_ubatch;   /* tokens evaluated together inside a call (results never depend on it) */
    int      n_threads;  /* kernel threads (results never depend on it) */
    uint32_t q8_order;   /* recur_q8_order (default RECUR_Q8_GGML) */
} recur_ctx_params;

recur_ctx_params recur_ctx_default_params(void);

recur_status recur_ctx_new(recur_model *m, const recur_ctx_params *params, recur_ctx **out,
                           char *err, size_t err_len);
void recur_ctx_free(recur_ctx *ctx);
const recur_ctx_params *recur_ctx_params_of(const recur_ctx *ctx);
recur_model *recur_ctx_model(const recur_ctx *ctx);

/* A batch: n_tokens entries, each (token, position, sequence, want-logits). Tokens of one
 * sequence must come in increasing position order and continue that sequence (its next
 * position is recur_seq_pos_max + 1). logits may be NULL: then only the last token's
 * logits are kept. */
typedef struct recur_batch {
    int32_t            n_tokens;
    const recur_token *token;
    const recur_pos   *pos;
    const recur_seq_id *seq_id;
    const int8_t      *logits;
} recur_batch;

/* Evaluates a batch. Guarantees: the logits of every token are bit-identical whatever the
 * batch composition, the ubatch size and the thread count.
 * Returns RECUR_OK; RECUR_E_INVALID for a malformed batch (nothing changed);
 * RECUR_E_FULL when the cells are exhausted (nothing changed: cells are planned before any
 * work is done). */
recur_status recur_decode(recur_ctx *ctx, const recur_batch *batch, char *err, size_t err_len);

/* Logits (n_vocab floats) of batch entry i of the last recur_decode, or NULL when that entry
 * did not ask for logits. Valid until the next recur_decode. */
const float *recur_get_logits(const recur_ctx *ctx, int32_t i);

/* Sequence operations. p0 < 0 means 0; p1 < 0 means infinity.
 *
 * Models with recurrent layers (lfm2, mamba, mamba2) keep, per sequence, only the state after
 * its last token, so for them:
 *  - recur_seq_rm succeeds when [p0, p1) misses the sequence's positions (a no-op, e.g. a tail
 *    with p0 > recur_seq_pos_max) or covers all of them (the sequence becomes empty, its state
 *    zero). Anything else (a tail [p0, inf) with 0 < p0 <= pos_max, a head or a middle part)
 *    would need an earlier state: RECUR_E_STATE, and nothing changes.
 *  - recur_seq_cp copies the whole state: [p0, p1) must cover every position of src and dst,
 *    else RECUR_E_STATE (nothing changes).
 *  - recur_seq_keep drops every other sequence (their states become zero).
 * RECUR_E_INVALID for a sequence id outside 0 .. n_seq_max-1. */
recur_status recur_seq_rm(recur_ctx *ctx, recur_seq_id seq, recur_pos p0, recur_pos p1);
recur_status recur_seq_cp(recur_ctx *ctx, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1);
recur_status recur_seq_keep(recur_ctx *ctx, recur_seq_id seq);
recur_pos    recur_seq_pos_max(const recur_ctx *ctx, recur_seq_id seq);   /* -1 when empty */

/* Raw attention rows, for a prompt cache that keeps them outside the context. A row is the
 * K then V values (F16) of one position in every attention layer, in layer order:
 * recur_ctx_kv_row_bytes bytes (= recur_model_kv_bytes_per_token; 0 without attention layers,
 * and then both calls do nothing).
 *  - recur_seq_kv_get copies seq's rows of positions [p0, p1) into buf (RECUR_E_STATE when a
 *    cell is missing).
 *  - recur_seq_kv_put appends rows [p0, p1) to seq, which must end at p0 - 1 (RECUR_E_STATE
 *    otherwise; RECUR_E_FULL when the free cells are too few; nothing changed then). Only the
 *    attention memory changes: with recurrent layers the sequence is not usable until a
 *    checkpoint at a position <= p1 - 1 is restored (or the sequence removed). */
size_t       recur_ctx_kv_row_bytes(const recur_ctx *ctx);
recur_status recur_seq_kv_get(recur_ctx *ctx, recur_seq_id seq, recur_pos p0, recur_pos p1, void *buf, char *err,
                              size_t err_len);
recur_status recur_seq_kv_put(recur_ctx *ctx, recur_seq_id seq, recur_pos p0, recur_pos p1, const void *buf,
                              char *err, size_t err_len);

/* ---- snapshots: the state of one sequence at one position ---------------------------------
 *
 * A snapshot holds the memory of one sequence right after its token at position `pos`:
 *  - RECUR_SNAP_CHECKPOINT: the recurrent state only (conv + SSM of every recurrent layer).
 *    Attention cells are not copied: restoring it needs a sequence that still holds the cells
 *    of positions 0..pos (or a model without attention layers).
 *  - RECUR_SNAP_SEQUENCE: the recurrent state plus the K/V rows of every attention layer for
 *    positions 0..pos: restorable into any sequence, also of another context of the model.
 * A snapshot is caller-owned, sized at _new (no allocation happens during decode), and knows
 * its model (recur_ctx_state_id), kind, position and byte size. Snapshots of another model
 * (or q8_order) are refused by every call (RECUR_E_INVALID). Restoring then evaluating the rest of the prompt
 * gives logits bit-identical to the uninterrupted run.
 *
 * States: empty (pos -1) --capture/take/load--> holds pos p --capture/take--> holds pos p' ...
 * A failing call leaves the snapshot and the context as they were. */

typedef struct recur_snapshot recur_snapshot;

typedef enum recur_snapshot_kind {
    RECUR_SNAP_CHECKPOINT = 1,   /* recurrent state only */
    RECUR_SNAP_SEQUENCE = 2,     /* recurrent state + attention K/V rows 0..pos */
} recur_snapshot_kind;

/* What to capture during recur_decode_capture: the state of seq right after position pos. */
typedef struct recur_capture {
    recur_seq_id    seq;
    recur_pos       pos;
    recur_snapshot *snap;
} recur_capture;

/* Identity of a model: XXH3 of its hyperparameters and tensor layout (names, types, shapes). */
uint64_t recur_model_id(const recur_model *m);
/* Identity of the states a context computes: its model's id, mixed with the q8_order when not
 * the default (the same prefix gives other bits). Snapshots and cache files carry it: one
 * context refuses the states of another. */
uint64_t recur_ctx_state_id(const recur_ctx *ctx);

/* An empty snapshot for ctx's model. A RECUR_SNAP_SEQUENCE snapshot holds positions up to
 * max_pos (max_pos < 0: the context size - 1); checkpoints ignore max_pos. NULL on failure
 * (bad kind, out of memory). */
recur_snapshot *recur_snapshot_new(const recur_ctx *ctx, recur_snapshot_kind kind, recur_pos max_pos);
void recur_snapshot_free(recur_snapshot *s);

/* Serialized bytes of a snapshot of this kind at position pos (a checkpoint's do not depend
 * on pos); 0 for a bad kind or pos. */
size_t recur_snapshot_size(const recur_ctx *ctx, recur_snapshot_kind kind, recur_pos pos);

recur_snapshot_kind recur_snapshot_kind_of(const recur_snapshot *s);
recur_pos recur_snapshot_pos(const recur_snapshot *s);          /* -1 when empty */
uint64_t  recur_snapshot_model_id(const recur_snapshot *s);     /* = recur_ctx_state_id of its context */
size_t    recur_snapshot_bytes(const recur_snapshot *s);        /* serialized size now; 0 when empty */

/* recur_decode, plus: for each of the n entries of list, the state of list[i].seq right after
 * its token at list[i].pos is copied into list[i].snap while the batch is evaluated (any
 * position inside a ubatch; the batch is not split and the logits are those of recur_decode).
 * Each (seq, pos) must be a token of this batch, pairs must be distinct, snapshots distinct,
 * of ctx's model, and a sequence snapshot must reach pos (max_pos). Otherwise RECUR_E_INVALID
 * and nothing changed (no snapshot, no sequence). RECUR_E_STATE when a sequence snapshot would
 * need attention cells of an earlier position that were removed; other statuses as
 * recur_decode, nothing changed. On RECUR_OK every listed snapshot holds its position. */
recur_status recur_decode_capture(recur_ctx *ctx, const recur_batch *batch, const recur_capture *list, int n,
                                  char *err, size_t err_len);

/* Where a context's decodes spend their time (recur-bench --profile). Each kind is the wall
 * time of the steps of that kind, thread pool hand-offs included:
 *  - MATMUL: the weight matmuls (lm head included), with the weight bytes they read, also by
 *    kind of call (recur_prof_mm);
 *  - ATTENTION: the attention jobs (q/k norms, RoPE, K/V stores, scores, softmax, sums, gates);
 *  - RECURRENT: the recurrent mixers' own steps (conv, scans, delta rule, their norms);
 *  - NORM: the RMSNorms of the residual stream;
 *  - ELEMENTWISE: the residual adds and SwiGLU;
 *  - OTHER: the rest of recur_decode (embedding rows, checks, MoE routing, logits copies). */
typedef enum recur_prof_kind {
    RECUR_PROF_MATMUL,
    RECUR_PROF_ATTENTION,
    RECUR_PROF_RECURRENT,
    RECUR_PROF_NORM,
    RECUR_PROF_ELEMENTWISE,
    RECUR_PROF_OTHER,
    RECUR_PROF_KINDS
} recur_prof_kind;

/* One kind of MATMUL step: the matrices that ran as one call (q/k/v of a layer: 3; a MoE
 * layer's experts: gate and up, or down), alike in every such call. */
typedef struct recur_prof_mm {
    char     types[40];   /* the matrices' types in order, comma-separated: "Q4_K,Q4_K,Q6_K" */
    int32_t  n_mats;      /* matrices in the call */
    int32_t  experts;     /* 1: a MoE layer's expert matrices (rows and bytes: of all experts read) */
    int64_t  rows, cols;  /* output rows of the call's matrices together (of one expert), input length */
    uint64_t steps;       /* calls timed */
    uint64_t ns;          /* their wall time */
    uint64_t job_ns;      /* of which in thread-pool jobs (recur_profile.job_ns) */
    uint64_t bytes;       /* weight bytes they read */
} recur_prof_mm;
#define RECUR_PROF_MM_MAX 48

typedef struct recur_profile {
    uint64_t decodes;                  /* recur_decode / recur_decode_capture calls */
    uint64_t tokens;                   /* tokens they evaluated */
    uint64_t total_ns;                 /* their wall time */
    uint64_t ns[RECUR_PROF_KINDS];     /* by kind; OTHER is total_ns less the others */
    uint64_t steps[RECUR_PROF_KINDS];  /* steps timed, by kind (OTHER: decodes) */
    uint64_t matmul_bytes;             /* weight bytes the matmuls read */
    /* the thread pool's share of ns, by kind (OTHER: none): the jobs that ran on several
     * threads, their time on the calling thread from publishing to return, and the part of it
     * the caller waited for the other threads' last shares; ns less job_ns is the caller's
     * own work (quantizing activations, planning a matmul, the steps it runs alone) */
    uint64_t jobs[RECUR_PROF_KINDS];
    uint64_t job_ns[RECUR_PROF_KINDS];
    uint64_t wait_ns[RECUR_PROF_KINDS];
    /* the MATMUL steps by kind of call, in the order first seen; steps of kinds past the
     * first RECUR_PROF_MM_MAX are counted in mm_rest (types ""), so the mm entries and
     * mm_rest add up to ns, steps and matmul_bytes of MATMUL */
    int32_t       n_mm;
    recur_prof_mm mm[RECUR_PROF_MM_MAX];
    recur_prof_mm mm_rest;
} recur_profile;

/* While p is set, every decode of ctx adds to *p (zero it to start from nothing); NULL stops.
 * Results never depend on it; unset, it costs one test per step. p must outlive its use. */
void        recur_ctx_set_profile(recur_ctx *ctx, recur_profile *p);
const char *recur_prof_kind_name(recur_prof_kind kind);   /* "matmul", ...; NULL out of range */

/* Copies the current state of seq (at recur_seq_pos_max) into s. RECUR_E_INVALID for a bad
 * seq, an empty sequence, a snapshot of another model or too short; nothing changed then. */
recur_status recur_snapshot_take(recur_ctx *ctx, recur_seq_id seq, recur_snapshot *s, char *err, size_t err_len);

/* Puts s back into seq, whose recur_seq_pos_max becomes s's position.
 *  - sequence snapshot: seq's cells are dropped and re-created for positions 0..pos
 *    (RECUR_E_FULL when the free cells, counting those seq alone uses, are too few).
 *  - checkpoint: seq must hold attention cells for every position 0..pos (always true without
 *    attention layers), else RECUR_E_STATE; cells beyond pos are dropped.
 * RECUR_E_INVALID for an empty snapshot, another model's, or a bad seq. On error nothing
 * changed. Other sequences are never touched (shared cells stay with them). */
recur_status recur_snapshot_restore(recur_ctx *ctx, const recur_snapshot *s, recur_seq_id seq, char *err,
                                    size_t err_len);

/* Serializes s into buf (cap bytes, at least recur_snapshot_bytes): a header (magic, version,
 * model id, kind, position, sizes), the payload, and an XXH3 checksum of everything before it.
 * Little-endian. Returns the bytes written, 0 when s is empty or cap too small. */
size_t recur_snapshot_save(const recur_snapshot *s, void *buf, size_t cap);

/* A snapshot from bytes written by recur_snapshot_save, for ctx's model. RECUR_E_FORMAT for
 * corrupt data (bad magic, version, sizes, truncation, checksum); RECUR_E_INVALID when it is
 * another model's; RECUR_E_FULL when its position is beyond ctx's size (no decode could follow
 * it); RECUR_E_NOMEM. *out is NULL on failure. */
recur_status recur_snapshot_load(const recur_ctx *ctx, const void *buf, size_t len, recur_snapshot **out,
                                 char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif /* RECUR_H */
