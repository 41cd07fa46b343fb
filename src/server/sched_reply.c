/* sched_reply.c — predicted replies (sched.h): when the scheduler is idle it checks how the
 * client will send the last reply back and derives the checkpoint the next turn resumes from. */
#include <stdio.h>
#include <stdlib.h>

#include "server/sched_internal.h"

/* slot_reply_derive's question between chunks: is anything waiting for the scheduler? */
static bool sched_reply_stop(void *arg) {
    sched *s = arg;
    pthread_mutex_lock(&s->mu);
    const bool stop = s->quit || s->q_len > 0 || s->ctl.pending;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Checks one predicted reply (sched.h) and derives its checkpoint when one is missing. */
static void sched_reply_run(sched *s, sched_reply *r) {
    slot *sl = &s->slots[r->id_slot];
    slot_reply_result res = { .d = -1, .what = "the slot moved on to another task" };
    const int32_t held = sl->n_cache;
    const double t0 = slot_now_ms();
    if (!sl->task && sl->last_task_id == (int64_t)r->id_task) {
        recur_token *pred = NULL;
        const int32_t n = r->predict(r->arg, &pred);
        const slot_scratch b = { s->p.n_batch, s->b_tok, s->b_pos, s->b_seq, s->b_want };
        if (n < 0) res.what = "the reply could not be rendered";
        else slot_reply_derive(sl, &s->env, s->spare, r->n_prompt, pred, n, &b, sched_reply_stop, s, &res);
        free(pred);
    }
    if (r->free) r->free(r->arg);
    s->met.reply_tokens_total += (uint64_t)res.n_eval;
    s->met.reply_ckpts_total += res.bytes > 0;
    if (res.n_eval || res.bytes)
        fprintf(stderr,
                "slot %d: task %llu: the reply, as the client sends it back, diverges at %d (prompt %d, held %d): %s; "
                "from the checkpoint after %d, %d tokens evaluated, checkpoint at %d: %zu bytes, %.1f ms\n",
                sl->id, (unsigned long long)r->id_task, res.d, r->n_prompt, held, res.what, res.from - 1, res.n_eval,
                res.d - 1, res.bytes, slot_now_ms() - t0);
    else
        fprintf(stderr, "slot %d: task %llu: the reply, as the client sends it back, diverges at %d (prompt %d, held %d): %s\n",
                sl->id, (unsigned long long)r->id_task, res.d, r->n_prompt, held, res.what);
}

/* Runs the first waiting predicted reply, if any. mu held on entry and exit; released while
 * working. */
bool sched_reply_next(sched *s) {
    int32_t k = 0;
    while (k < s->p.n_slots && !s->replies[k].predict) k++;
    if (k == s->p.n_slots) return false;
    sched_reply r = s->replies[k];
    s->replies[k] = (sched_reply){ 0 };
    pthread_mutex_unlock(&s->mu);
    sched_reply_run(s, &r);
    pthread_mutex_lock(&s->mu);
    s->reply_checks++;
    return true;
}
