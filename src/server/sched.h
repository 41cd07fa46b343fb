/* sched.h — the scheduler: one thread that owns the context (model memory) and decodes every
 * active slot in one batch per step (continuous batching).
 *
 * Slots: slot i uses sequence i of one recur_ctx with n_slots sequences and
 * n_slots * n_ctx_slot cells; a slot's prompt + generated tokens never exceed n_ctx_slot.
 * A submitted task waits in a bounded FIFO queue until a slot is free (the requested one when
 * params.id_slot >= 0), then: reuse what the slot holds (cache_prompt) -> prefill the rest in
 * chunks of at most n_batch tokens per step, shared with the other slots' work -> sample one
 * token per step -> events to the task (see task.h) -> release the slot.
 *
 * Invariants:
 *  1. Only the scheduler thread touches the recur_ctx. sched_submit, sched_slot_info and
 *     sched_get_metrics are safe from any thread.
 *  2. Results never depend on the other slots' work: same prompt + same params + same seed =
 *     same tokens, whatever else is in the batch (the engine's determinism).
 *  3. A cancelled task leaves its slot within one decode step.
 *  4. Every submitted task gets exactly one terminal event, also at sched_free.
 */
#ifndef RECUR_SERVER_SCHED_H
#define RECUR_SERVER_SCHED_H

#include <stdbool.h>
#include <stdint.h>

#include "recur.h"
#include "server/task.h"

typedef struct sched_params {
    int32_t n_slots;       /* -np / --parallel */
    int32_t n_ctx_slot;    /* -c: tokens per slot */
    int32_t n_batch;       /* -b: most tokens per decode step (all slots together) */
    int32_t n_ubatch;      /* -ub */
    int32_t n_threads;     /* -t */
    uint32_t q8_order;     /* --q8-order (recur_q8_order) */
    int32_t queue_max;     /* tasks waiting for a slot; one more is refused (RECUR_E_FULL) */
    bool    cache_prompt;  /* false (--no-cache-prompt): never reuse a slot's tokens */
    int64_t cache_bytes;   /* --cache-ram: the prompt cache's budget (< 0 unlimited, 0: no cache) */
    int32_t ctx_checkpoints;   /* --ctx-checkpoints: checkpoints kept per conversation path */
    int32_t ckpt_interval;     /* --ctx-checkpoints-interval: every N generated tokens; ladder spacing */
    const char *cache_dir;     /* --cache-dir: the prompt cache is loaded from DIR/prompt-cache.bin at
                                * start and written there when idle (NULL: not kept) */
} sched_params;

typedef struct sched sched;

sched_params sched_default_params(void);

/* Creates the context and starts the scheduler thread. m must outlive the scheduler. */
recur_status sched_new(recur_model *m, const sched_params *p, sched **out, char *err, size_t err_len);
/* Cancels every task (each gets its terminal event), joins the thread, frees. NULL: no-op. */
void sched_free(sched *s);

/* Queues t (the scheduler takes its own reference). RECUR_E_FULL: queue_max tasks already wait
 * beyond the free slots (HTTP 503). RECUR_E_INVALID (HTTP 400): id_slot out of range, an empty
 * prompt, a prompt or logit_bias token outside the vocabulary, or a prompt of n_ctx_slot tokens
 * or more (as llama-server: the message then says "exceeds the available context size", its
 * exceed_context_size_error). A prompt + n_predict beyond n_ctx_slot is accepted: the task stops
 * with SRV_STOP_LIMIT when prompt + generated tokens fill the slot. RECUR_E_STATE: shutting down.
 * Nothing is queued on error. */
recur_status sched_submit(sched *s, srv_task *t, char *err, size_t err_len);

const sched_params *sched_params_of(const sched *s);

/* What GET /slots shows of one slot. */
typedef struct sched_slot_info {
    int32_t id;
    int64_t id_task;                  /* -1 when idle */
    bool    is_processing;
    int32_t n_ctx;
    int32_t n_prompt_tokens;          /* of the current (or last) task */
    int32_t n_prompt_tokens_processed;
    int32_t n_prompt_tokens_cache;
    int32_t n_decoded;
    int32_t n_tokens_cached;          /* tokens the slot's sequence holds */
} sched_slot_info;

/* Fills out[0 .. min(cap, n_slots)) and returns n_slots. */
int32_t sched_slot_info_get(sched *s, sched_slot_info *out, int32_t cap);

/* Counters for GET /metrics (llama-server's names in comments). */
typedef struct sched_metrics {
    uint64_t prompt_tokens_total;        /* llamacpp:prompt_tokens_total */
    double   prompt_seconds_total;       /* llamacpp:prompt_seconds_total */
    uint64_t tokens_predicted_total;     /* llamacpp:tokens_predicted_total */
    double   predicted_seconds_total;    /* llamacpp:tokens_predicted_seconds_total */
    uint64_t n_decode_total;             /* llamacpp:n_decode_total */
    uint64_t n_busy_slots_total;         /* sum over decode steps of busy slots */
    int32_t  requests_processing;        /* llamacpp:requests_processing */
    int32_t  requests_deferred;          /* llamacpp:requests_deferred (queued) */
    int32_t  n_tokens_max;               /* llamacpp:n_tokens_max (largest slot fill seen) */
    /* the prompt cache (recur:*) */
    uint64_t cache_tokens_reused_total;  /* prompt tokens restored instead of evaluated */
    uint64_t ckpt_created_total, ckpt_restored_total, ckpt_evicted_total;
    int64_t  cache_bytes;                /* held by the prompt cache now */
    int64_t  cache_budget_bytes;         /* -1: unlimited, 0: off */
    int64_t  cache_tokens;               /* rows (tokens) the prompt cache holds */
    int32_t  cache_checkpoints;          /* checkpoints it holds */
    /* predicted replies (sched_submit_reply) */
    uint64_t reply_checks_total;         /* predictions dealt with: checked, superseded or not needed */
    uint64_t reply_ckpts_total;          /* checkpoints derived inside a reply */
    uint64_t reply_tokens_total;         /* tokens evaluated for them while idle */
} sched_metrics;

void sched_get_metrics(sched *s, sched_metrics *out);

/* After a chat response: how the client will send the reply back inside its next prompt.
 * When that re-tokenizes differently from the generated tokens (a template trims the content,
 * invalid UTF-8 became U+FFFD, BPE merges across the reply's end, a reasoning block is dropped),
 * the next prompt diverges at d inside them, where a recurrent model has no saved state. Once
 * the scheduler is idle (no queued task, no busy slot, no slot action) it calls predict, and
 * when d lies strictly inside the generated tokens it derives the state after d - 1 into the
 * prompt cache (slot.h, slot_reply_derive), on a spare sequence of the context (one more than
 * the slots), in chunks that give way to any request. It never changes a result, nor what a
 * slot holds: the same tokens are evaluated from the same state. */
typedef struct sched_reply {
    uint64_t id_task;      /* the task whose response it is */
    int32_t  id_slot;      /* the slot it ran on (srv_stats.id_slot) */
    int32_t  n_prompt;     /* its prompt tokens */
    /* The predicted next prompt's tokens into *out (malloc'd); the count, or < 0 when it cannot
     * say. Called at most once, on the scheduler thread, while it is idle. */
    int32_t (*predict)(void *arg, recur_token **out);
    void    (*free)(void *arg);   /* releases arg, exactly once; may be NULL */
    void    *arg;
} sched_reply;

/* Queues r, one per slot (a newer one supersedes the older); the scheduler owns r->arg from now
 * on, also when nothing is to be done (no prompt cache, no recurrent layers, shutting down,
 * a bad slot): then it is released at once. Every call adds one to reply_checks_total when
 * the prediction has been dealt with. Safe from any thread. */
void sched_submit_reply(sched *s, const sched_reply *r);

/* POST /slots/{id}?action=...: run on the scheduler thread between decode steps; the caller
 * waits. save: the slot's tokens, attention rows, final state and every checkpoint on its path
 * into one file (pcache_write: atomic, checksummed); restore: the file into the prompt cache
 * and the slot, so a request that extends the conversation evaluates only its new tokens;
 * erase: the slot's sequence. RECUR_E_INVALID: a bad id; RECUR_E_STATE: the slot is busy;
 * file errors as pcache_read / pcache_write. */
typedef enum sched_slot_op { SCHED_SLOT_SAVE = 1, SCHED_SLOT_RESTORE, SCHED_SLOT_ERASE } sched_slot_op;

typedef struct sched_slot_result {
    int32_t n_tokens;    /* saved / restored / erased */
    size_t  bytes;       /* written / read */
    double  ms;
} sched_slot_result;

recur_status sched_slot_action(sched *s, int32_t id, sched_slot_op op, const char *path, sched_slot_result *out,
                               char *err, size_t err_len);

#endif
