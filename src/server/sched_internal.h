/* sched_internal.h — the scheduler's state, shared by its files (sched.c: queue, batches and
 * the thread; sched_ctl.c: slot actions and the prompt-cache file; sched_reply.c: predicted
 * replies). Nothing outside src/server/sched*.c includes it: everyone else uses sched.h. */
#ifndef RECUR_SERVER_SCHED_INTERNAL_H
#define RECUR_SERVER_SCHED_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/sched.h"
#include "server/slot.h"

struct sched {
    sched_params  p;
    slot_env      env;
    slot         *slots;       /* [n_slots] */
    recur_token  *eog;         /* [env.n_eog] */
    uint64_t      n_steps;     /* decode steps so far (the LRU clock) */
    sched_metrics met;         /* scheduler-private counters, published after each step */

    /* the batch, sized n_batch at creation */
    recur_token   *b_tok;
    recur_pos     *b_pos;
    recur_seq_id  *b_seq;
    int8_t        *b_want;
    recur_capture *caps;       /* [n_batch] snapshots captured in this step */
    struct sched_pend {        /* [n_batch] checkpoints of this step, filed after the decode */
        int32_t      seq, entry;   /* entry: batch index whose logits it keeps, -1 none */
        recur_pos    pos;
        pcache_ckpt *ck;
        uint32_t     flags;
    } *pend;
    int32_t        n_pend;
    int32_t       *order;      /* [n_slots] prefill order scratch */
    int32_t       *take;       /* [n_slots] prompt tokens per slot this step */
    srv_task     **starting;   /* [n_slots] tasks sched_take_queued puts on slots */

    pthread_t       th;
    bool            th_started;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    /* guarded by mu */
    srv_task      **q;         /* [q_cap] FIFO, in submission order */
    int32_t         q_len, q_cap;
    int32_t         n_free;    /* slots without a task */
    bool            quit;
    sched_slot_info *pub;      /* [n_slots] */
    sched_metrics    pub_met;
    struct sched_ctl {         /* one slot action at a time, answered by the scheduler thread */
        bool              pending, done;
        int32_t           id;
        sched_slot_op     op;
        const char       *path;
        sched_slot_result res;
        recur_status      st;
        char              err[256];
    } ctl;
    pthread_cond_t  ctl_cv;    /* a slot action was answered, or may be posted */
    sched_reply    *replies;       /* [n_slots] predicted replies waiting for an idle moment (predict
                                    * NULL: none) */
    uint64_t        reply_checks;  /* sched_metrics.reply_checks_total */
    recur_seq_id    spare;         /* a sequence no slot uses, for predicted replies (-1: none) */
    bool            cache_dirty;   /* the prompt cache changed since cache_dir was written */
    uint64_t        cache_gen;     /* its checkpoints created at the last write */
};

/* Copies what the other threads may read and delivers the ended tasks' events (sched.c).
 * Scheduler thread, mu held. */
void sched_publish_locked(sched *s);

/* Answers the posted slot action (sched_ctl.c). mu held on entry and exit; released while
 * working. */
void sched_do_ctl(sched *s);
/* --cache-dir (sched_ctl.c): a signature of the prompt cache's contents; the file written
 * when the signature moved since the last write or load; the file an earlier run left loaded. */
uint64_t sched_cache_sig(const sched *s);
void     sched_write_cache(sched *s);
void     sched_load_cache(sched *s);

/* Runs the first waiting predicted reply, if any (sched_reply.c). mu held on entry and exit;
 * released while working. */
bool sched_reply_next(sched *s);

#endif
