/* slot.h — one slot of the scheduler: a sequence of the context, the tokens it holds (the prompt
 * cache) and, while a task runs on it, that task's sampler, detokenizer and stop-string state.
 *
 * Private to the scheduler thread (sched.c): nothing here is thread-safe.
 *
 * States:  IDLE --slot_start--> PREFILL --last prompt token evaluated--> GEN --stop--> IDLE
 *          (PREFILL/GEN --cancel/error/shutdown--> IDLE). n_predict == 0 goes PREFILL -> IDLE.
 *
 * Invariants:
 *  1. cache[0 .. n_cache) are exactly the tokens sequence `id` holds (positions 0 .. n_cache-1).
 *  2. Earlier states live in the shared prompt cache (env->pc, src/cache/pcache.h): a task
 *     starts from the slot's own sequence when the prompt extends it, else from the deepest
 *     restorable point of the cache when that is deeper. While PREFILL, plan[i_plan ..] are the
 *     prompt positions still to checkpoint (message boundaries, the ladder, the divergence
 *     point, the last prompt token with its logits).
 *  3. While GEN, `pending` is the last sampled token, not yet evaluated; it goes to position
 *     n_cache in the next step.
 *  4. A slot with a task has pushed no terminal event yet; slot_finish / slot_fail make exactly
 *     one and keep it with the task's reference (done_ev, done_task) until slot_deliver pushes
 *     it: the scheduler publishes the slot's new figures first, so a client that got its
 *     terminal event sees them in GET /slots and /metrics.
 */
#ifndef RECUR_SERVER_SLOT_H
#define RECUR_SERVER_SLOT_H

#include <stdbool.h>
#include <stdint.h>

#include "cache/pcache.h"
#include "recur.h"
#include "server/task.h"

typedef enum slot_state { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_GEN } slot_state;

/* What all slots share: the model, its context and what the scheduler learned about them. */
typedef struct slot_env {
    recur_model       *model;
    recur_ctx         *ctx;
    int32_t            n_vocab;
    int32_t            n_ctx_slot;
    bool               recurrent;      /* a partial tail cannot be removed (recurrent layers) */
    bool               cache_prompt;   /* sched_params.cache_prompt */
    pcache            *pc;             /* the shared prompt cache; NULL: off (--cache-ram 0) */
    int32_t            ckpt_interval;  /* a checkpoint every this many generated tokens; ladder spacing */
    const recur_token *eog;            /* [n_eog] end-of-generation tokens (for ignore_eos) */
    int32_t            n_eog;
    int32_t            piece_max;      /* recur_detok_max_bytes */
} slot_env;

typedef struct slot {
    int32_t         id;                /* = its sequence id */
    slot_state      state;
    srv_task       *task;              /* NULL when idle (the slot holds one reference) */
    srv_task       *done_task;         /* a finished task whose terminal event waits for slot_deliver */
    srv_event      *done_ev;
    uint64_t        last_used;         /* step counter when it last finished (LRU) */

    recur_token    *cache;             /* [n_ctx_slot] */
    int32_t         n_cache;
    float          *logits;            /* [n_vocab] the cached logits of the last prompt token (pc only) */
    bool            logits_ready;      /* PREFILL, whole prompt restored: sample from `logits` */
    recur_pos      *plan;              /* [plan_cap] prompt positions to checkpoint, increasing */
    uint8_t        *plan_flags;        /* [plan_cap] PCACHE_* flags */
    int32_t         n_plan, i_plan, plan_cap;

    /* the running task */
    int32_t         n_past;            /* prompt tokens in the sequence (prefill progress) */
    int32_t         n_reused;          /* prompt tokens taken from the cache */
    int32_t         n_decoded;         /* tokens sampled */
    recur_token     pending;
    int32_t         i_batch;           /* batch entry whose logits this slot samples from, else -1 */
    recur_sampler  *smp;
    recur_detok    *detok;
    char           *piece;             /* [env->piece_max] detokenizer output */
    char           *held;              /* text not shown yet (a possible stop-string start) */
    struct slot_ban *ban;              /* banned strings (slot_ban.h): kept across tasks, NULL until needed */
    size_t          n_held, held_cap;
    srv_stop_type   stop;
    int             stop_word;         /* index of the matched stop string, else -1 */
    double          t_start, t_prompt_done, t_end;   /* ms, monotonic */

    /* figures of the last task, for GET /slots */
    int64_t         last_task_id;
    int32_t         last_n_prompt;

    /* totals over the finished tasks, for GET /metrics */
    uint64_t        n_prompt_total, n_predicted_total, n_reused_total;
    double          prompt_ms_total, predicted_ms_total;
} slot;

recur_status slot_init(slot *s, int32_t id, const slot_env *env);
void         slot_free(slot *s);

/* Prompt tokens this slot's own sequence could reuse for prompt[0 .. n) (0 when caching is
 * off). Pure. */
int32_t slot_reusable(const slot *s, const slot_env *env, const recur_token *prompt, int32_t n, bool cache_prompt);

/* Takes t (the slot keeps the caller's reference), reuses what it can of the cache, builds the
 * sampler. On failure the task already got its ERROR event and the slot is idle again. */
recur_status slot_start(slot *s, const slot_env *env, srv_task *t, double now_ms);

/* Called after a decode in which this slot's logits were requested (logits = entry i_batch):
 * samples, emits events, and may finish the task (the slot becomes IDLE). */
void slot_on_logits(slot *s, const slot_env *env, const float *logits, double now_ms);

/* The prompt is fully evaluated and n_predict == 0: finish without sampling. */
void slot_finish(slot *s, const slot_env *env, srv_stop_type stop, double now_ms);
/* An ERROR event for the task, and the sequence is cleared (its state is unknown). */
void slot_fail(slot *s, const slot_env *env, recur_status st, const char *msg);
/* Pushes the terminal event slot_finish / slot_fail made and drops the task. No-op when none. */
void slot_deliver(slot *s);

/* Shows one generated token: its text through the detokenizer and the stop strings, and its
 * TOKEN event (probs is taken, may be NULL). Finishes the task on a stop string (or fails it
 * when out of memory): returns false when the task ended. */
bool slot_emit(slot *s, const slot_env *env, recur_token tok, srv_token_probs *probs, double now_ms);
/* The log-probabilities of tok and the n_probs most likely tokens of raw logits (NULL when
 * n_probs <= 0 or out of memory). */
srv_token_probs *slot_probs(const slot_env *env, int32_t n_probs, const float *logits, recur_token tok);

double slot_now_ms(void);

/* ---- slot_reply.c: a checkpoint where the client's copy of a reply will diverge ---------------
 * An idle slot holds prompt + generated tokens. When pred (how the client will send the reply
 * back, re-tokenized inside its next prompt) first differs from them at d strictly inside the
 * generated tokens (n_prompt < d < n_cache), the state after token d - 1 exists nowhere: the
 * next turn would resume from the end of the prompt and evaluate the reply's tokens again.
 * slot_reply_derive makes it on `spare`, a sequence no slot uses: a copy of the slot's
 * sequence (attention cells shared, not copied) is brought back to the deepest checkpoint at
 * or before d - 1 (not before the prompt's end: only the reply's tokens are worth evaluating on
 * speculation), the tokens up to d are evaluated in chunks of at most SLOT_REPLY_CHUNK (the
 * same tokens from the same state: bit-exact), and the state after d - 1 is filed in the prompt
 * cache; spare is emptied again. The slot itself is never changed. Nothing is done for a model
 * without recurrent layers (any prefix is restorable), without a prompt cache or a spare
 * sequence, or when that checkpoint exists already. stop(arg) is asked before every chunk:
 * true (a request is waiting) abandons the work. */
enum { SLOT_REPLY_CHUNK = 64 };

typedef struct slot_scratch {   /* batch buffers of cap entries (chunks are min(cap, SLOT_REPLY_CHUNK)) */
    int32_t       cap;
    recur_token  *tok;
    recur_pos    *pos;
    recur_seq_id *seq;
    int8_t       *want;
} slot_scratch;

typedef struct slot_reply_result {
    int32_t     d;            /* the divergence point (-1: not computed) */
    int32_t     from;         /* tokens restored before evaluating (the resume point) */
    int32_t     n_eval;       /* tokens evaluated */
    size_t      bytes;        /* of the checkpoint filed (0: none) */
    const char *what;         /* the decision, for the log line */
} slot_reply_result;

void slot_reply_derive(const slot *s, const slot_env *env, recur_seq_id spare, int32_t n_prompt,
                       const recur_token *pred, int32_t n_pred, const slot_scratch *b, bool (*stop)(void *),
                       void *arg, slot_reply_result *out);

#endif
