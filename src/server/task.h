/* task.h — one generation request as the scheduler sees it, and the channel its results flow
 * back through to the HTTP thread that streams them.
 *
 * Life of a task:
 *   HTTP thread: srv_task_new -> fill prompt + params -> sched_submit (the scheduler takes a
 *   reference) -> srv_task_next repeatedly until an event with done = true -> srv_task_unref.
 *   Scheduler:   srv_task_push for each event (the last one has done = true, and it pushes
 *   nothing after it) -> srv_task_unref.
 *
 * Invariants:
 *  1. Exactly one terminal event (SRV_EV_DONE or SRV_EV_ERROR) is pushed per submitted task, and
 *     it is the last one.
 *  2. srv_task_cancel may be called from any thread at any time (a client went away); the
 *     scheduler sees it with srv_task_cancelled, stops work on the task within one decode step
 *     and still pushes the terminal event (stop_type SRV_STOP_CANCELLED).
 *  3. Everything in srv_task_params and the prompt is written before sched_submit and read-only
 *     afterwards; the task owns (frees) every pointer in it.
 *  4. The text of the events, concatenated, is the generated text with stop strings removed and
 *     never ends inside a UTF-8 character or inside a possible stop string (text is held back
 *     until it is known not to start one). With banned strings (srv_ban.h) the tokens a rewind
 *     took back never appear in any event, and neither does their text.
 */
#ifndef RECUR_SERVER_TASK_H
#define RECUR_SERVER_TASK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

typedef enum srv_stop_type {
    SRV_STOP_NONE = 0,        /* still generating (or n_predict == 0) */
    SRV_STOP_EOS,             /* an end-of-generation token */
    SRV_STOP_LIMIT,           /* n_predict reached, or the slot's context is full */
    SRV_STOP_WORD,            /* a stop string matched */
    SRV_STOP_CANCELLED,       /* srv_task_cancel (client gone) or server shutdown */
} srv_stop_type;

enum { SRV_CKPT_SYSTEM = 1 };       /* the end of a system / tools prefix (kept longest) */

typedef struct srv_task_params {
    recur_sampler_params sampling;   /* sampling.logit_bias is owned by the task */
    int32_t  n_predict;              /* -1: until EOS or the slot's context is full */
    int32_t  n_probs;                /* > 0: the top n_probs log-probabilities of every token */
    int32_t  id_slot;                /* -1: the scheduler chooses */
    bool     cache_prompt;           /* reuse what the slot already holds */
    bool     ignore_eos;             /* EOG tokens are banned (never sampled) */
    char   **stop;                   /* [n_stop] NUL-terminated stop strings */
    int32_t  n_stop;
    struct srv_ban_cfg *ban;         /* banned strings / regexes (srv_ban.h), NULL: none */
} srv_task_params;

/* Log-probabilities of one generated token (before sampling: log-softmax of the raw logits). */
typedef struct srv_token_probs {
    recur_token  id;
    float        logprob;
    int32_t      n_top;
    recur_token *top_id;             /* [n_top], most likely first */
    float       *top_logprob;        /* [n_top] */
} srv_token_probs;

/* Final figures of a task (llama-server's `timings`, `tokens_cached`, `stop_type`, ...). */
typedef struct srv_stats {
    int32_t       id_slot;
    int32_t       n_prompt;          /* prompt tokens of the request */
    int32_t       n_cache;           /* of them, reused from the cache (timings.cache_n) */
    int32_t       n_prompt_eval;     /* evaluated = n_prompt - n_cache (timings.prompt_n) */
    double        prompt_ms;
    int32_t       n_predicted;
    double        predicted_ms;
    int32_t       tokens_cached;     /* tokens the slot holds at the end */
    srv_stop_type stop_type;
    char         *stopping_word;     /* the stop string that matched (SRV_STOP_WORD), else NULL */
} srv_stats;

typedef enum srv_ev_kind {
    SRV_EV_TOKEN = 1,                /* one generated token */
    SRV_EV_DONE,                     /* terminal: stats is filled */
    SRV_EV_ERROR,                    /* terminal: the task failed (status, message) */
} srv_ev_kind;

typedef struct srv_event {
    srv_ev_kind      kind;
    bool             done;           /* kind != SRV_EV_TOKEN */
    char            *text;           /* new text to show, NUL-terminated (may be empty: held
                                      * back); DONE may carry the last released text too.
                                      * NULL only in an ERROR event made out of memory */
    size_t           text_len;
    recur_token      token;          /* TOKEN: the generated token */
    srv_token_probs *probs;          /* TOKEN with n_probs > 0, else NULL */
    srv_stats        stats;          /* DONE */
    recur_status     status;         /* ERROR */
    char             message[256];   /* ERROR */
    struct srv_event *next;          /* queue link (private) */
} srv_event;

typedef struct srv_task {
    uint64_t         id;
    recur_token     *prompt;         /* [n_prompt], malloc'd, owned */
    int32_t          n_prompt;
    srv_task_params  params;
    int32_t         *ckpt_at;        /* [n_ckpt_at] increasing prompt positions where a checkpoint is
                                      * wanted (the state after that token): message boundaries */
    uint8_t         *ckpt_flags;     /* [n_ckpt_at] SRV_CKPT_* */
    int32_t          n_ckpt_at;

    /* private: the result queue and lifetime */
    pthread_mutex_t  mu;
    pthread_cond_t   cv;
    srv_event       *head, *tail;
    atomic_bool      cancelled;
    atomic_int       refs;
} srv_task;

/* A task with one reference, zeroed params (n_predict -1, id_slot -1, cache_prompt true) and the
 * default sampler params. NULL when out of memory. */
srv_task *srv_task_new(uint64_t id);
void      srv_task_ref(srv_task *t);
void      srv_task_unref(srv_task *t);     /* frees the task, its params and queued events at 0 */

void srv_task_cancel(srv_task *t);
bool srv_task_cancelled(const srv_task *t);

/* Scheduler side: appends ev (malloc'd with srv_event_new; the queue owns it afterwards). */
void srv_task_push(srv_task *t, srv_event *ev);
/* HTTP side: the next event, waiting up to timeout_ms (< 0: forever). NULL on timeout. The
 * caller frees it with srv_event_free. */
srv_event *srv_task_next(srv_task *t, int timeout_ms);

/* A zeroed event of this kind with a copy of text (text may be NULL); NULL when out of memory. */
srv_event *srv_event_new(srv_ev_kind kind, const char *text, size_t text_len);
/* The ERROR event for (st, message). Never NULL: falls back to a static-sized event. */
srv_event *srv_event_error(recur_status st, const char *message);
void       srv_event_free(srv_event *ev);   /* NULL is a no-op; frees text, probs, stats strings */

srv_token_probs *srv_token_probs_new(int32_t n_top);
void             srv_token_probs_free(srv_token_probs *p);

const char *srv_stop_type_str(srv_stop_type s);   /* "none" "eos" "limit" "word" "cancelled" */

#endif
