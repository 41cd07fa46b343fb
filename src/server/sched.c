/* sched.c — the scheduler thread: queue -> slots -> one batch per step (continuous batching).
 *
 * Threads: sched_submit / sched_slot_info_get / sched_get_metrics run on any thread and only
 * touch what `mu` guards (the queue, the published slot infos and metrics, the quit flag).
 * Everything else (the context, the slots, the batch buffers) belongs to the scheduler thread.
 *
 * One step: drop cancelled tasks -> move queued tasks onto free slots -> build one batch (one
 * token per generating slot, then prompt chunks of the prefilling slots sharing what is left of
 * n_batch) -> one recur_decode -> sample for every slot whose logits were asked -> publish.
 * Slot actions and the cache file: sched_ctl.c; predicted replies: sched_reply.c.
 */
#include "server/sched.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "server/sched_internal.h"

sched_params sched_default_params(void) {
    sched_params p = { .n_slots = 1, .n_ctx_slot = 4096, .n_batch = 2048, .n_ubatch = 512, .n_threads = 0,
                       .queue_max = 64, .cache_prompt = true, .cache_bytes = (int64_t)8192 << 20,
                       .ctx_checkpoints = 32, .ckpt_interval = 512 };
    return p;
}

const sched_params *sched_params_of(const sched *s) { return &s->p; }

/* ---- the thread-safe side ------------------------------------------------------------------ */

recur_status sched_submit(sched *s, srv_task *t, char *err, size_t err_len) {
    if (!s || !t) return rc_fail(err, err_len, RECUR_E_INVALID, "no scheduler or task");
    if (t->n_prompt < 1) return rc_fail(err, err_len, RECUR_E_INVALID, "the prompt is empty");
    if (t->params.id_slot < -1 || t->params.id_slot >= s->p.n_slots)
        return rc_fail(err, err_len, RECUR_E_INVALID, "id_slot %d out of range (0 .. %d)", t->params.id_slot,
                       s->p.n_slots - 1);
    if (t->n_prompt >= s->p.n_ctx_slot)
        return rc_fail(err, err_len, RECUR_E_INVALID,
                       "the request (%d tokens) exceeds the available context size (%d tokens), try increasing it",
                       t->n_prompt, s->p.n_ctx_slot);
    /* a bad token would fail the whole batch, the other slots' work with it */
    for (int32_t i = 0; i < t->n_prompt; i++)
        if (t->prompt[i] < 0 || t->prompt[i] >= s->env.n_vocab)
            return rc_fail(err, err_len, RECUR_E_INVALID, "prompt token %d (at %d) is out of the vocabulary (0 .. %d)",
                           t->prompt[i], i, s->env.n_vocab - 1);
    for (int32_t i = 0; i < t->params.sampling.n_logit_bias; i++) {
        const recur_token b = t->params.sampling.logit_bias[i].token;
        if (b < 0 || b >= s->env.n_vocab)
            return rc_fail(err, err_len, RECUR_E_INVALID, "logit_bias token %d is out of the vocabulary (0 .. %d)", b,
                           s->env.n_vocab - 1);
    }
    recur_status st = RECUR_OK;
    pthread_mutex_lock(&s->mu);
    /* queued tasks a free slot will take at the next step do not count as waiting */
    const int32_t waiting = s->q_len - s->n_free;
    if (s->quit) st = rc_fail(err, err_len, RECUR_E_STATE, "the server is shutting down");
    else if (waiting >= s->p.queue_max || s->q_len >= s->q_cap)
        st = rc_fail(err, err_len, RECUR_E_FULL, "the queue is full (%d tasks waiting)", waiting);
    else {
        srv_task_ref(t);
        s->q[s->q_len++] = t;
        s->pub_met.requests_deferred = s->q_len;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

int32_t sched_slot_info_get(sched *s, sched_slot_info *out, int32_t cap) {
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < cap && i < s->p.n_slots; i++) out[i] = s->pub[i];
    pthread_mutex_unlock(&s->mu);
    return s->p.n_slots;
}

void sched_get_metrics(sched *s, sched_metrics *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->pub_met;
    out->requests_deferred = s->q_len;
    out->reply_checks_total = s->reply_checks;
    pthread_mutex_unlock(&s->mu);
}

void sched_submit_reply(sched *s, const sched_reply *r) {
    sched_reply old = { 0 };
    /* an attention-only model restores any prefix, and without a cache there is nothing to fill */
    const bool want = r->predict && r->id_slot >= 0 && r->id_slot < s->p.n_slots && s->env.pc && s->env.recurrent &&
                      s->spare >= 0;
    pthread_mutex_lock(&s->mu);
    bool dealt = true;   /* refused, or superseding an older one */
    if (want && !s->quit) {
        old = s->replies[r->id_slot];
        s->replies[r->id_slot] = *r;
        dealt = old.predict != NULL;
        pthread_cond_signal(&s->cv);
    } else {
        old = *r;
    }
    if (dealt) s->reply_checks++;
    pthread_mutex_unlock(&s->mu);
    if (old.free) old.free(old.arg);
}

/* ---- the scheduler thread ------------------------------------------------------------------ */

/* Copies what the other threads may read, then delivers the terminal events of the tasks that
 * ended (after: whoever got one sees the slot free). Scheduler thread, mu held. */
void sched_publish_locked(sched *s) {
    int32_t busy = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        const slot *sl = &s->slots[i];
        sched_slot_info *o = &s->pub[i];
        o->id = i;
        o->id_task = sl->task ? (int64_t)sl->task->id : -1;
        o->is_processing = sl->task != NULL;
        o->n_ctx = s->p.n_ctx_slot;
        o->n_prompt_tokens = sl->last_n_prompt;
        o->n_prompt_tokens_processed = sl->n_past - sl->n_reused;
        o->n_prompt_tokens_cache = sl->n_reused;
        o->n_decoded = sl->n_decoded;
        o->n_tokens_cached = sl->n_cache;
        busy += sl->task != NULL;
        if (sl->n_cache > s->met.n_tokens_max) s->met.n_tokens_max = sl->n_cache;
    }
    s->met.prompt_tokens_total = s->met.tokens_predicted_total = s->met.cache_tokens_reused_total = 0;
    s->met.prompt_seconds_total = s->met.predicted_seconds_total = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        const slot *sl = &s->slots[i];
        s->met.prompt_tokens_total += sl->n_prompt_total;
        s->met.prompt_seconds_total += sl->prompt_ms_total / 1e3;
        s->met.tokens_predicted_total += sl->n_predicted_total;
        s->met.predicted_seconds_total += sl->predicted_ms_total / 1e3;
        s->met.cache_tokens_reused_total += sl->n_reused_total;
    }
    s->met.cache_budget_bytes = s->env.pc ? s->p.cache_bytes : 0;
    if (s->env.pc) {
        pcache_stats ps;
        pcache_stats_get(s->env.pc, &ps);
        s->met.cache_bytes = ps.bytes;
        s->met.cache_tokens = ps.n_tokens;
        s->met.cache_checkpoints = ps.n_ckpt;
        s->met.ckpt_created_total = ps.ckpt_created;
        s->met.ckpt_restored_total = ps.ckpt_restored;
        s->met.ckpt_evicted_total = ps.ckpt_evicted;
    }
    s->met.requests_processing = busy;
    s->n_free = s->p.n_slots - busy;
    s->pub_met = s->met;
    s->pub_met.requests_deferred = s->q_len;
    for (int32_t i = 0; i < s->p.n_slots; i++) slot_deliver(&s->slots[i]);
}

static void sched_publish(sched *s) {
    pthread_mutex_lock(&s->mu);
    sched_publish_locked(s);
    pthread_mutex_unlock(&s->mu);
}

/* The terminal event of a task that never reached a slot. */
static void sched_cancel_queued(srv_task *t) {
    srv_event *ev = srv_event_new(SRV_EV_DONE, NULL, 0);
    if (!ev) ev = srv_event_error(RECUR_E_STATE, "cancelled");
    else {
        ev->stats.id_slot = -1;
        ev->stats.n_prompt = t->n_prompt;
        ev->stats.stop_type = SRV_STOP_CANCELLED;
    }
    srv_task_push(t, ev);
    srv_task_unref(t);
}

/* The free slot for t: the requested one, else the one that can reuse the most of its prompt
 * when that is more than a tenth of it (as llama-server's slot_prompt_similarity: a shared BOS
 * alone should not take a slot whose cache another prompt needs), else the least recently used.
 * -1 when none is free (or the requested one is busy). */
static int32_t sched_pick_slot(const sched *s, const srv_task *t) {
    if (t->params.id_slot >= 0) return s->slots[t->params.id_slot].task ? -1 : t->params.id_slot;
    int32_t best = -1, best_reuse = 0, lru = -1;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        const slot *sl = &s->slots[i];
        if (sl->task) continue;
        if (lru < 0 || sl->last_used < s->slots[lru].last_used) lru = i;
        const int32_t r = slot_reusable(sl, &s->env, t->prompt, t->n_prompt, t->params.cache_prompt);
        if ((int64_t)r * 10 > t->n_prompt && r > best_reuse) {
            best = i;
            best_reuse = r;
        }
    }
    /* the prompt cache serves any slot alike: the slot's own sequence breaks the tie (fewer copies) */
    return best >= 0 ? best : lru;
}

static int32_t sched_busy(const sched *s) {
    int32_t busy = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) busy += s->slots[i].task != NULL;
    return busy;
}

/* Moves queued tasks onto free slots (FIFO; a task waiting for a busy requested slot lets the
 * next ones pass) and answers the cancelled ones; waits while there is nothing to do. The
 * slots are reserved under mu, the tasks started (cache reuse: sequence ops, maybe a
 * checkpoint restore) after it. Returns false when the thread should stop. */
static bool sched_take_queued(sched *s) {
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->quit && s->q_len == 0 && sched_busy(s) == 0 && !s->ctl.pending) {
            sched_publish_locked(s);   /* delivers what slot_start refused */
            if (sched_reply_next(s)) continue;   /* idle: predicted replies first */
            if (s->p.cache_dir && s->env.pc && sched_cache_sig(s) != s->cache_gen) {
                /* idle: after 2 s without work the cache goes to disk */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 2;
                if (pthread_cond_timedwait(&s->cv, &s->mu, &ts) == ETIMEDOUT && !s->ctl.pending && s->q_len == 0) {
                    pthread_mutex_unlock(&s->mu);
                    sched_write_cache(s);
                    pthread_mutex_lock(&s->mu);
                }
                continue;
            }
            pthread_cond_wait(&s->cv, &s->mu);
        }
        if (s->quit) { pthread_mutex_unlock(&s->mu); return false; }
        if (s->ctl.pending) {
            sched_do_ctl(s);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        int32_t kept = 0;
        for (int32_t i = 0; i < s->q_len; i++) {
            srv_task *t = s->q[i];
            const int32_t k = srv_task_cancelled(t) ? -2 : sched_pick_slot(s, t);
            if (k == -2) sched_cancel_queued(t);
            else if (k < 0) s->q[kept++] = t;
            else s->slots[k].task = s->starting[k] = t;   /* reserved */
        }
        s->q_len = kept;
        s->n_free = s->p.n_slots - sched_busy(s);
        pthread_mutex_unlock(&s->mu);
        for (int32_t k = 0; k < s->p.n_slots; k++) {
            if (!s->starting[k]) continue;
            slot_start(&s->slots[k], &s->env, s->starting[k], slot_now_ms());
            s->starting[k] = NULL;
        }
        if (sched_busy(s) > 0) return true;
    }
}

/* Adds one entry to the batch. */
static inline void batch_add(sched *s, int32_t *n, recur_token tok, recur_pos pos, recur_seq_id seq, bool want) {
    s->b_tok[*n] = tok;
    s->b_pos[*n] = pos;
    s->b_seq[*n] = seq;
    s->b_want[*n] = want;
    (*n)++;
}

/* How many prompt tokens each prefilling slot gets this step: `budget` shared max-min fairly
 * (the slots needing least first, each taking at most an equal share of what is left). */
static void sched_share_prefill(sched *s, int32_t budget) {
    int32_t np = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        s->take[i] = 0;
        if (s->slots[i].state != SLOT_PREFILL) continue;
        const int32_t rem = s->slots[i].task->n_prompt - s->slots[i].n_past;
        int32_t j = np++;
        for (; j > 0; j--) {   /* insertion sort by remaining prompt */
            const slot *o = &s->slots[s->order[j - 1]];
            if (o->task->n_prompt - o->n_past <= rem) break;
            s->order[j] = s->order[j - 1];
        }
        s->order[j] = i;
    }
    for (int32_t j = 0; j < np && budget > 0; j++) {
        const slot *sl = &s->slots[s->order[j]];
        int32_t share = budget / (np - j);
        if (share < 1) share = 1;
        const int32_t rem = sl->task->n_prompt - sl->n_past;
        s->take[s->order[j]] = rem < share ? rem : share;
        budget -= s->take[s->order[j]];
    }
}

/* A checkpoint of (seq, pos) in this step: reserved in the prompt cache now, captured by the
 * decode, filed by sched_file_pending. entry: the batch index whose logits it keeps, or -1. */
static void sched_plan_ckpt(sched *s, int32_t *n_caps, int32_t seq, recur_pos pos, int32_t entry, uint32_t flags) {
    pcache_ckpt *ck = pcache_ckpt_new(s->env.pc, entry >= 0);
    if (!ck) return;
    recur_snapshot *snap = pcache_ckpt_snap(ck);
    if (!snap && entry < 0) { pcache_ckpt_drop(s->env.pc, ck); return; }   /* nothing to keep */
    if (snap) s->caps[(*n_caps)++] = (recur_capture){ seq, pos, snap };
    s->pend[s->n_pend++] = (struct sched_pend){ seq, entry, pos, ck, flags };
}

/* Fills the batch; returns its entries and sets *n_caps. */
static int32_t sched_build_batch(sched *s, int32_t *n_caps) {
    int32_t n = 0, n_gen = 0;
    *n_caps = 0;
    s->n_pend = 0;
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        sl->i_batch = -1;
        if (sl->state != SLOT_GEN) continue;
        sl->i_batch = n;
        const recur_pos pos = sl->n_cache;
        if (s->env.pc && s->p.ckpt_interval > 0 && (pos + 1) % s->p.ckpt_interval == 0)
            sched_plan_ckpt(s, n_caps, sl->id, pos, -1, 0);
        batch_add(s, &n, sl->pending, pos, sl->id, true);
        n_gen++;
    }
    sched_share_prefill(s, s->p.n_batch - n_gen);
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->state != SLOT_PREFILL || s->take[i] == 0) continue;
        const srv_task *t = sl->task;
        const int32_t p0 = sl->n_past, p1 = sl->n_past + s->take[i];
        for (; sl->i_plan < sl->n_plan && sl->plan[sl->i_plan] < p1; sl->i_plan++) {
            const recur_pos p = sl->plan[sl->i_plan];
            if (p >= p0) sched_plan_ckpt(s, n_caps, sl->id, p, p == t->n_prompt - 1 ? n + p - p0 : -1,
                                         sl->plan_flags[sl->i_plan]);
        }
        for (int32_t p = p0; p < p1; p++) {
            if (p == t->n_prompt - 1) sl->i_batch = n;
            batch_add(s, &n, t->prompt[p], p, sl->id, p == t->n_prompt - 1);
        }
    }
    return n;
}

/* Records what the batch put into each sequence (invariant 1 of slot.h). */
static void sched_commit_batch(sched *s, int32_t n) {
    for (int32_t j = 0; j < n; j++) {
        slot *sl = &s->slots[s->b_seq[j]];
        sl->cache[s->b_pos[j]] = s->b_tok[j];
        sl->n_cache = s->b_pos[j] + 1;
        if (sl->state == SLOT_PREFILL) sl->n_past = sl->n_cache;
    }
}

/* Files this step's checkpoints in the prompt cache (ok: the decode succeeded), else drops them. */
static void sched_file_pending(sched *s, bool ok) {
    for (int32_t k = 0; k < s->n_pend; k++) {
        const struct sched_pend *e = &s->pend[k];
        if (!ok) { pcache_ckpt_drop(s->env.pc, e->ck); continue; }
        const float *lg = e->entry >= 0 ? recur_get_logits(s->env.ctx, e->entry) : NULL;
        pcache_ckpt_commit(s->env.pc, e->seq, s->slots[e->seq].cache, e->pos, e->ck, lg, e->flags);
    }
    s->n_pend = 0;
}

/* One decode step over every busy slot. */
static void sched_step(sched *s) {
    const double t0 = slot_now_ms();
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->task && srv_task_cancelled(sl->task)) {
            slot_finish(sl, &s->env, SRV_STOP_CANCELLED, t0);
            sl->last_used = s->n_steps;
        }
    }
    for (int32_t i = 0; i < s->p.n_slots; i++) {   /* whole prompt restored with its logits */
        slot *sl = &s->slots[i];
        if (!sl->task || sl->state != SLOT_PREFILL || !sl->logits_ready) continue;
        sl->logits_ready = false;
        slot_on_logits(sl, &s->env, sl->logits, t0);
        if (!sl->task) sl->last_used = s->n_steps;
    }
    int32_t n_caps = 0, busy = 0;
    const int32_t n = sched_build_batch(s, &n_caps);
    if (n == 0) return;
    for (int32_t i = 0; i < s->p.n_slots; i++) busy += s->slots[i].task != NULL;

    char err[256];
    const recur_batch b = { n, s->b_tok, s->b_pos, s->b_seq, s->b_want };
    const recur_status st = n_caps ? recur_decode_capture(s->env.ctx, &b, s->caps, n_caps, err, sizeof err)
                                   : recur_decode(s->env.ctx, &b, err, sizeof err);
    s->n_steps++;
    s->met.n_decode_total++;
    s->met.n_busy_slots_total += (uint64_t)busy;
    sched_commit_batch(s, st == RECUR_OK ? n : 0);
    sched_file_pending(s, st == RECUR_OK);
    if (st != RECUR_OK) {
        fprintf(stderr, "sched: decode failed (%s): %s\n", recur_status_str(st), err);
        for (int32_t i = 0; i < s->p.n_slots; i++)
            if (s->slots[i].task) slot_fail(&s->slots[i], &s->env, st, err);
        return;
    }
    const double t1 = slot_now_ms();
    for (int32_t i = 0; i < s->p.n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->task || sl->i_batch < 0) continue;
        slot_on_logits(sl, &s->env, recur_get_logits(s->env.ctx, sl->i_batch), t1);
        if (!sl->task) sl->last_used = s->n_steps;
    }
}

static void *sched_main(void *arg) {
    sched *s = arg;
    while (sched_take_queued(s)) {
        sched_step(s);
        sched_publish(s);
    }
    /* shutdown: every task still here gets its terminal event */
    const double now = slot_now_ms();
    for (int32_t i = 0; i < s->p.n_slots; i++)
        if (s->slots[i].task) slot_finish(&s->slots[i], &s->env, SRV_STOP_CANCELLED, now);
    pthread_mutex_lock(&s->mu);
    for (int32_t i = 0; i < s->q_len; i++) sched_cancel_queued(s->q[i]);
    s->q_len = 0;
    pthread_cond_broadcast(&s->ctl_cv);   /* a waiting slot action sees quit */
    pthread_mutex_unlock(&s->mu);
    sched_publish(s);
    sched_write_cache(s);
    return NULL;
}

/* ---- creation ------------------------------------------------------------------------------ */

/* Whether the model keeps recurrent state: can a sequence lose a partial tail? Two tokens are
 * evaluated in sequence 0, then the second is removed (refused with RECUR_E_STATE when not). */
static recur_status sched_probe_recurrent(sched *s, char *err, size_t err_len) {
    recur_token bos = recur_token_bos(s->env.model);
    const recur_token tok[2] = { bos >= 0 ? bos : 0, bos >= 0 ? bos : 0 };
    const recur_pos pos[2] = { 0, 1 };
    const recur_seq_id seq[2] = { 0, 0 };
    const int8_t want[2] = { 0, 1 };
    const recur_batch b = { 2, tok, pos, seq, want };
    recur_status st = recur_decode(s->env.ctx, &b, err, err_len);
    if (st) return st;
    st = recur_seq_rm(s->env.ctx, 0, 1, -1);
    s->env.recurrent = st == RECUR_E_STATE;
    recur_seq_rm(s->env.ctx, 0, -1, -1);
    if (st != RECUR_OK && st != RECUR_E_STATE)
        return rc_fail(err, err_len, st, "sched: cannot remove a sequence tail (%s)", recur_status_str(st));
    return RECUR_OK;
}

static recur_status sched_alloc(sched *s, char *err, size_t err_len) {
    const int32_t nb = s->p.n_batch, ns = s->p.n_slots;
    s->b_tok = malloc((size_t)nb * sizeof *s->b_tok);
    s->b_pos = malloc((size_t)nb * sizeof *s->b_pos);
    s->b_seq = malloc((size_t)nb * sizeof *s->b_seq);
    s->b_want = malloc((size_t)nb);
    s->caps = calloc((size_t)nb, sizeof *s->caps);
    s->pend = calloc((size_t)nb, sizeof *s->pend);
    s->order = calloc((size_t)ns, sizeof *s->order);
    s->take = calloc((size_t)ns, sizeof *s->take);
    s->starting = calloc((size_t)ns, sizeof *s->starting);
    s->q_cap = s->p.queue_max + ns;
    s->q = calloc((size_t)s->q_cap, sizeof *s->q);
    s->pub = calloc((size_t)ns, sizeof *s->pub);
    s->slots = calloc((size_t)ns, sizeof *s->slots);
    s->replies = calloc((size_t)ns, sizeof *s->replies);
    const int32_t nv = s->env.n_vocab;
    s->eog = malloc((size_t)nv * sizeof *s->eog);
    if (!s->b_tok || !s->b_pos || !s->b_seq || !s->b_want || !s->caps || !s->pend || !s->order || !s->take || !s->starting || !s->q ||
        !s->pub || !s->slots || !s->replies || !s->eog)
        return rc_fail(err, err_len, RECUR_E_NOMEM, "sched: out of memory");
    for (recur_token t = 0; t < nv; t++)
        if (recur_token_is_eog(s->env.model, t)) s->eog[s->env.n_eog++] = t;
    s->env.eog = s->eog;
    for (int32_t i = 0; i < ns; i++)
        if (slot_init(&s->slots[i], i, &s->env))
            return rc_fail(err, err_len, RECUR_E_NOMEM, "sched: out of memory (slot %d)", i);
    return RECUR_OK;
}

static recur_status sched_check_params(const sched_params *p, char *err, size_t err_len) {
    if (p->n_slots < 1 || p->n_slots > 64)
        return rc_fail(err, err_len, RECUR_E_INVALID, "sched: n_slots %d out of range (1 .. 64)", p->n_slots);
    if (p->n_ctx_slot < 2)
        return rc_fail(err, err_len, RECUR_E_INVALID, "sched: n_ctx_slot %d too small", p->n_ctx_slot);
    if (p->n_batch < p->n_slots)
        return rc_fail(err, err_len, RECUR_E_INVALID, "sched: n_batch %d below n_slots %d (one token per slot)",
                       p->n_batch, p->n_slots);
    if (p->n_ubatch < 0 || p->queue_max < 0)
        return rc_fail(err, err_len, RECUR_E_INVALID, "sched: negative n_ubatch or queue_max");
    if ((int64_t)p->n_slots * p->n_ctx_slot > INT32_MAX)
        return rc_fail(err, err_len, RECUR_E_INVALID, "sched: n_slots * n_ctx_slot too large");
    return RECUR_OK;
}


recur_status sched_new(recur_model *m, const sched_params *p, sched **out, char *err, size_t err_len) {
    *out = NULL;
    recur_status st = sched_check_params(p, err, err_len);
    if (st) return st;
    sched *s = calloc(1, sizeof *s);
    if (!s) return rc_fail(err, err_len, RECUR_E_NOMEM, "sched: out of memory");
    s->p = *p;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->ctl_cv, NULL);
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = (uint32_t)(p->n_slots * p->n_ctx_slot);
    /* one more sequence for predicted replies (sched_submit_reply) when they can be of use */
    const bool spare = p->cache_bytes != 0 && p->cache_prompt && recur_model_state_bytes(m) > 0 && p->n_slots < 64;
    s->spare = spare ? p->n_slots : -1;
    cp.n_seq_max = (uint32_t)(p->n_slots + spare);
    cp.n_batch = (uint32_t)p->n_batch;
    cp.n_ubatch = (uint32_t)(p->n_ubatch > 0 ? p->n_ubatch : p->n_batch);
    cp.n_threads = p->n_threads;
    cp.q8_order = p->q8_order;
    s->env = (slot_env){ .model = m, .n_vocab = recur_model_n_vocab(m), .n_ctx_slot = p->n_ctx_slot,
                         .cache_prompt = p->cache_prompt, .piece_max = recur_detok_max_bytes(m),
                         .ckpt_interval = p->ckpt_interval };
    st = recur_ctx_new(m, &cp, &s->env.ctx, err, err_len);
    if (!st) st = sched_probe_recurrent(s, err, err_len);
    if (!st && p->cache_bytes != 0 && p->cache_prompt) {
        const pcache_params pp = { .budget_bytes = p->cache_bytes, .max_ckpt_path = p->ctx_checkpoints, .log = stderr };
        st = pcache_new(s->env.ctx, &pp, &s->env.pc, err, err_len);
        if (!st && p->cache_dir) sched_load_cache(s);
    }
    if (!st) st = sched_alloc(s, err, err_len);
    if (!st) {
        sched_publish(s);
        if (pthread_create(&s->th, NULL, sched_main, s) != 0)
            st = rc_fail(err, err_len, RECUR_E_NOMEM, "sched: cannot start the scheduler thread");
        else s->th_started = true;
    }
    if (st) { sched_free(s); return st; }
    *out = s;
    return RECUR_OK;
}

void sched_free(sched *s) {
    if (!s) return;
    if (s->th_started) {
        pthread_mutex_lock(&s->mu);
        s->quit = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    for (int32_t i = 0; s->slots && i < s->p.n_slots; i++) slot_free(&s->slots[i]);
    for (int32_t i = 0; s->replies && i < s->p.n_slots; i++)
        if (s->replies[i].free) s->replies[i].free(s->replies[i].arg);
    pcache_free(s->env.pc);
    recur_ctx_free(s->env.ctx);
    free(s->slots); free(s->replies); free(s->pub); free(s->q); free(s->eog);
    free(s->b_tok); free(s->b_pos); free(s->b_seq); free(s->b_want);
    free(s->caps); free(s->pend); free(s->order); free(s->take); free(s->starting);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->ctl_cv);
    free(s);
}
