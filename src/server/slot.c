/* slot.c — a task's life on one slot: prompt-cache reuse, sampling, streamed text with stop
 * strings held back, and the terminal event. See slot.h for the states and invariants. */
#include "server/slot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sample/stop.h"
#include "server/slot_ban.h"

double slot_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

recur_status slot_init(slot *s, int32_t id, const slot_env *env) {
    memset(s, 0, sizeof *s);
    s->id = id;
    s->i_batch = -1;
    s->stop_word = -1;
    s->last_task_id = -1;
    s->cache = malloc((size_t)env->n_ctx_slot * sizeof *s->cache);
    s->piece = malloc((size_t)env->piece_max + 1);
    if (!s->cache || !s->piece) return RECUR_E_NOMEM;
    if (env->pc && !(s->logits = malloc((size_t)env->n_vocab * sizeof *s->logits))) return RECUR_E_NOMEM;
    return RECUR_OK;
}

/* Ends the task on this slot with its terminal event ev (delivered by slot_deliver). */
static void slot_release(slot *s, srv_event *ev) {
    slot_ban_stop(s);
    recur_sampler_free(s->smp);
    recur_detok_free(s->detok);
    s->smp = NULL;
    s->detok = NULL;
    if (s->task) {
        s->done_task = s->task;
        s->done_ev = ev;
    }
    s->task = NULL;
    s->state = SLOT_IDLE;
    s->i_batch = -1;
}

void slot_deliver(slot *s) {
    if (!s->done_task) return;
    srv_task_push(s->done_task, s->done_ev);
    srv_task_unref(s->done_task);
    s->done_task = NULL;
    s->done_ev = NULL;
}

void slot_free(slot *s) {
    if (!s) return;
    if (s->task) slot_release(s, srv_event_error(RECUR_E_STATE, "the scheduler stopped"));
    slot_deliver(s);
    free(s->cache);
    free(s->piece);
    free(s->held);
    free(s->logits);
    free(s->plan);
    free(s->plan_flags);
    slot_ban_free(s->ban);
    memset(s, 0, sizeof *s);
}

static int32_t common_prefix(const recur_token *a, int32_t na, const recur_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

int32_t slot_reusable(const slot *s, const slot_env *env, const recur_token *prompt, int32_t n, bool cache_prompt) {
    if (!cache_prompt || !env->cache_prompt || n < 1) return 0;
    /* the last prompt token is evaluated again unless its logits are cached: they give the first token */
    int32_t keep = common_prefix(s->cache, s->n_cache, prompt, n);
    if (keep > n - 1) keep = n - 1;
    /* recurrent state exists only after the sequence's last token (earlier: the prompt cache) */
    return !env->recurrent || keep == s->n_cache ? keep : 0;
}

/* Brings the sequence down to its first `keep` tokens (a value slot_reusable gave). */
static void slot_truncate(slot *s, const slot_env *env, int32_t keep) {
    if (keep == s->n_cache) return;
    if (keep == 0 || recur_seq_rm(env->ctx, s->id, keep, -1) != RECUR_OK) {
        recur_seq_rm(env->ctx, s->id, -1, -1);   /* removing everything always succeeds */
        keep = 0;
    }
    s->n_cache = keep;
}

/* Starts the task from the slot's own sequence or from the prompt cache, whichever restores
 * more; returns how far the prompt agrees with what either holds (the divergence point). */
static int32_t slot_resume(slot *s, const slot_env *env, const srv_task *t) {
    const bool use = t->params.cache_prompt && env->cache_prompt;
    const int32_t n = t->n_prompt, live = slot_reusable(s, env, t->prompt, n, t->params.cache_prompt);
    const int32_t c_live = use ? common_prefix(s->cache, s->n_cache, t->prompt, n) : 0;
    pcache_hit h = { 0, 0, false, NULL };
    if (use && env->pc) h = pcache_lookup(env->pc, t->prompt, n);
    s->logits_ready = false;
    if (h.n_restore > live) {
        char err[256];
        const recur_status st = pcache_restore(env->pc, s->id, t->prompt, n, &h, c_live, s->logits, err, sizeof err);
        if (st) {
            fprintf(stderr, "slot %d: restore from the prompt cache failed (%s): evaluating everything\n", s->id, err);
            recur_seq_rm(env->ctx, s->id, -1, -1);
            s->n_cache = 0;
        } else {
            memcpy(s->cache, t->prompt, (size_t)h.n_restore * sizeof *s->cache);
            s->n_cache = h.n_restore;
            s->logits_ready = h.logits;
        }
    } else {
        slot_truncate(s, env, live);
    }
    if (env->pc)
        fprintf(stderr,
                "slot %d: task %llu: %d prompt tokens: %d restored from %s (state after position %d)%s, %d to "
                "evaluate; the prompt agrees with the cache to %d, with the slot to %d\n",
                s->id, (unsigned long long)t->id, n, s->n_cache, h.n_restore > live ? "the prompt cache" : "the slot",
                s->n_cache - 1, s->logits_ready ? " with the last token's logits" : "", n - s->n_cache, h.n_match,
                c_live);
    return h.n_match > c_live ? h.n_match : c_live;
}

static void plan_add(slot *s, recur_pos p, uint8_t flags) {
    if (s->n_plan < s->plan_cap) { s->plan[s->n_plan] = p; s->plan_flags[s->n_plan++] = flags; }
}

/* Where this prefill checkpoints (positions >= n_cache): the task's message boundaries, else a
 * ladder every ckpt_interval tokens back from the end; the divergence point (a next request
 * branches there again); the last prompt token, with its logits (an identical resend). */
static recur_status slot_plan(slot *s, const slot_env *env, const srv_task *t, int32_t diverge) {
    s->n_plan = s->i_plan = 0;
    if (!env->pc || s->logits_ready) return RECUR_OK;
    const int32_t n = t->n_prompt, iv = env->ckpt_interval;
    const int32_t need = t->n_ckpt_at + (iv > 0 ? n / iv : 0) + 2;
    if (need > s->plan_cap) {
        recur_pos *p = realloc(s->plan, (size_t)need * sizeof *p);
        if (p) s->plan = p;
        uint8_t *f = realloc(s->plan_flags, (size_t)need);
        if (f) s->plan_flags = f;
        if (!p || !f) return RECUR_E_NOMEM;
        s->plan_cap = need;
    }
    for (int32_t i = 0; i < t->n_ckpt_at; i++)
        if (t->ckpt_at[i] >= s->n_cache && t->ckpt_at[i] < n - 1)
            plan_add(s, t->ckpt_at[i], t->ckpt_flags[i] & SRV_CKPT_SYSTEM ? PCACHE_SYSTEM : 0);
    for (int32_t p = n - 1 - iv; t->n_ckpt_at == 0 && iv > 0 && p >= s->n_cache; p -= iv) plan_add(s, p, 0);
    if (diverge > s->n_cache && diverge - 1 < n - 1) plan_add(s, diverge - 1, 0);
    plan_add(s, n - 1, 0);
    for (int32_t i = 1; i < s->n_plan; i++)   /* insertion sort, then drop repeats */
        for (int32_t j = i; j > 0 && s->plan[j - 1] > s->plan[j]; j--) {
            const recur_pos tp = s->plan[j]; s->plan[j] = s->plan[j - 1]; s->plan[j - 1] = tp;
            const uint8_t tf = s->plan_flags[j]; s->plan_flags[j] = s->plan_flags[j - 1]; s->plan_flags[j - 1] = tf;
        }
    int32_t k = 0;
    for (int32_t i = 0; i < s->n_plan; i++) {
        if (k && s->plan[k - 1] == s->plan[i]) { s->plan_flags[k - 1] |= s->plan_flags[i]; continue; }
        s->plan[k] = s->plan[i];
        s->plan_flags[k++] = s->plan_flags[i];
    }
    s->n_plan = k;
    if (s->n_plan) {   /* the log line of the plan: the first few positions */
        char buf[160];
        size_t len = 0;
        for (int32_t i = 0; i < s->n_plan && len + 16 < sizeof buf; i++)
            len += (size_t)snprintf(buf + len, sizeof buf - len, " %d", s->plan[i]);
        fprintf(stderr, "slot %d: checkpoints planned at%s%s\n", s->id, buf, len + 16 >= sizeof buf ? " ..." : "");
    }
    return RECUR_OK;
}

/* The end of a response: the state after the last evaluated token goes into the prompt cache
 * (a checkpoint; without recurrent layers the rows alone), so the next turn resumes there. */
static void slot_file_end(slot *s, const slot_env *env) {
    if (!env->pc || s->n_cache < 1) return;
    pcache_ckpt *ck = pcache_ckpt_new(env->pc, false);
    recur_snapshot *snap = pcache_ckpt_snap(ck);
    if (snap && recur_snapshot_take(env->ctx, s->id, snap, NULL, 0) == RECUR_OK) {
        pcache_ckpt_commit(env->pc, s->id, s->cache, s->n_cache - 1, ck, NULL, 0);
        return;
    }
    pcache_ckpt_drop(env->pc, ck);
    if (!snap) pcache_insert(env->pc, s->id, s->cache, s->n_cache);
}

/* The task's sampler: its params, plus a ban on every end-of-generation token for ignore_eos. */
static recur_sampler *slot_sampler(const slot_env *env, const srv_task_params *tp) {
    recur_sampler_params sp = tp->sampling;
    recur_logit_bias *bias = NULL;
    if (tp->ignore_eos && env->n_eog > 0) {
        const int32_t n = sp.n_logit_bias + env->n_eog;
        bias = malloc((size_t)n * sizeof *bias);
        if (!bias) return NULL;
        if (sp.n_logit_bias > 0) memcpy(bias, sp.logit_bias, (size_t)sp.n_logit_bias * sizeof *bias);
        for (int32_t i = 0; i < env->n_eog; i++)
            bias[sp.n_logit_bias + i] = (recur_logit_bias){ env->eog[i], -INFINITY };
        sp.logit_bias = bias;
        sp.n_logit_bias = n;
    }
    recur_sampler *smp = recur_sampler_new(&sp, env->n_vocab);
    free(bias);
    return smp;
}

recur_status slot_start(slot *s, const slot_env *env, srv_task *t, double now_ms) {
    s->task = t;
    s->last_task_id = (int64_t)t->id;
    s->last_n_prompt = t->n_prompt;
    s->n_decoded = 0;
    s->stop = SRV_STOP_NONE;
    s->stop_word = -1;
    s->n_held = 0;
    s->t_start = s->t_prompt_done = s->t_end = now_ms;

    const int32_t diverge = slot_resume(s, env, t);
    s->n_reused = s->n_past = s->n_cache;
    if (slot_plan(s, env, t, diverge)) {
        slot_fail(s, env, RECUR_E_NOMEM, "out of memory (checkpoint plan)");
        return RECUR_E_NOMEM;
    }

    size_t stop_max = 0;
    for (int32_t i = 0; i < t->params.n_stop; i++) {
        const size_t l = strlen(t->params.stop[i]);
        if (l > stop_max) stop_max = l;
    }
    /* held text: less than the longest stop string, plus one piece, plus a flushed U+FFFD */
    const size_t need = stop_max + (size_t)env->piece_max + 8;
    if (need > s->held_cap) {
        char *h = realloc(s->held, need);
        if (!h) { slot_fail(s, env, RECUR_E_NOMEM, "out of memory (stop-string buffer)"); return RECUR_E_NOMEM; }
        s->held = h;
        s->held_cap = need;
    }
    s->smp = slot_sampler(env, &t->params);
    s->detok = recur_detok_new(env->model, false);
    if (!s->smp || !s->detok) {
        slot_fail(s, env, RECUR_E_NOMEM, "out of memory (sampler)");
        return RECUR_E_NOMEM;
    }
    for (int32_t i = 0; i < t->n_prompt; i++) recur_sampler_accept(s->smp, t->prompt[i]);
    if (t->params.ban && slot_ban_start(s, env, t->params.ban) != RECUR_OK) {
        slot_fail(s, env, RECUR_E_NOMEM, "out of memory (banned strings)");
        return RECUR_E_NOMEM;
    }
    s->state = SLOT_PREFILL;
    return RECUR_OK;
}

void slot_fail(slot *s, const slot_env *env, recur_status st, const char *msg) {
    recur_seq_rm(env->ctx, s->id, -1, -1);
    s->n_cache = 0;
    s->logits_ready = false;
    slot_release(s, s->task ? srv_event_error(st, msg) : NULL);
}

/* Looks for stop strings in the held text. Returns how many bytes of it may be shown now and
 * records a match (the text from the match on is dropped). */
static size_t slot_check_stop(slot *s) {
    const srv_task_params *tp = &s->task->params;
    if (tp->n_stop <= 0) return s->n_held;
    size_t at = s->n_held, safe = s->n_held;
    const int k = sample_stop_find(s->held, s->n_held, 0, (const char *const *)tp->stop, tp->n_stop, &at, &safe);
    if (k >= 0) {
        s->stop = SRV_STOP_WORD;
        s->stop_word = k;
        s->n_held = at;
        return at;
    }
    return safe;
}

/* Drops the first n bytes of the held text (they were sent). */
static void slot_consume(slot *s, size_t n) {
    memmove(s->held, s->held + n, s->n_held - n);
    s->n_held -= n;
}

void slot_finish(slot *s, const slot_env *env, srv_stop_type stop, double now_ms) {
    srv_task *t = s->task;
    if (s->state == SLOT_PREFILL) s->t_prompt_done = now_ms;
    s->t_end = now_ms;
    if (stop != SRV_STOP_WORD && stop != SRV_STOP_CANCELLED && s->detok) {
        const int k = recur_detok_flush(s->detok, s->held + s->n_held, (int)(s->held_cap - s->n_held));
        if (k > 0) s->n_held += (size_t)k;
        const srv_stop_type before = s->stop;
        slot_check_stop(s);   /* the text ends here: a partial stop string is shown */
        if (s->stop == SRV_STOP_WORD && before != SRV_STOP_WORD) stop = SRV_STOP_WORD;
    }
    if (stop == SRV_STOP_CANCELLED) s->n_held = 0;
    slot_file_end(s, env);
    s->logits_ready = false;
    srv_event *ev = srv_event_new(SRV_EV_DONE, s->held, s->n_held);
    s->n_held = 0;
    if (!ev) {
        slot_release(s, srv_event_error(RECUR_E_NOMEM, "out of memory (final event)"));
        return;
    }
    srv_stats *st = &ev->stats;
    st->id_slot = s->id;
    st->n_prompt = t->n_prompt;
    st->n_cache = s->n_reused;
    st->n_prompt_eval = s->n_past - s->n_reused;
    st->prompt_ms = s->t_prompt_done - s->t_start;
    st->n_predicted = s->n_decoded;
    st->predicted_ms = s->t_end - s->t_prompt_done;
    st->tokens_cached = s->n_cache;
    st->stop_type = stop;
    if (stop == SRV_STOP_WORD && s->stop_word >= 0) st->stopping_word = strdup(t->params.stop[s->stop_word]);
    s->n_prompt_total += (uint64_t)st->n_prompt_eval;
    s->n_reused_total += (uint64_t)st->n_cache;
    s->prompt_ms_total += st->prompt_ms;
    s->n_predicted_total += (uint64_t)st->n_predicted;
    s->predicted_ms_total += st->predicted_ms;
    slot_release(s, ev);
}

/* The log-probabilities of the sampled token and the n_probs most likely ones (raw logits). */
srv_token_probs *slot_probs(const slot_env *env, int32_t n_probs, const float *logits, recur_token tok) {
    if (n_probs <= 0) return NULL;
    if (n_probs > env->n_vocab) n_probs = env->n_vocab;
    srv_token_probs *p = srv_token_probs_new(n_probs);
    if (!p) return NULL;
    p->n_top = recur_logprobs_top(logits, env->n_vocab, n_probs, p->top_id, p->top_logprob);
    p->id = tok;
    p->logprob = recur_logprob_of(logits, env->n_vocab, tok);
    return p;
}

bool slot_emit(slot *s, const slot_env *env, recur_token tok, srv_token_probs *probs, double now_ms) {
    const int k = recur_detok_push(s->detok, tok, s->held + s->n_held, (int)(s->held_cap - s->n_held));
    if (k > 0) s->n_held += (size_t)k;
    const size_t show = slot_check_stop(s);
    srv_event *ev = srv_event_new(SRV_EV_TOKEN, s->held, show);
    if (!ev) {
        srv_token_probs_free(probs);
        slot_fail(s, env, RECUR_E_NOMEM, "out of memory (token event)");
        return false;
    }
    ev->token = tok;
    ev->probs = probs;
    slot_consume(s, show);
    srv_task_push(s->task, ev);
    if (s->stop != SRV_STOP_WORD) return true;
    slot_finish(s, env, SRV_STOP_WORD, now_ms);
    return false;
}

void slot_on_logits(slot *s, const slot_env *env, const float *logits, double now_ms) {
    srv_task *t = s->task;
    if (s->state == SLOT_PREFILL) {
        s->t_prompt_done = now_ms;
        s->state = SLOT_GEN;
    }
    if (t->params.n_predict == 0) { slot_finish(s, env, SRV_STOP_NONE, now_ms); return; }

    if (slot_ban_active(s)) { slot_ban_on_logits(s, env, logits, now_ms); return; }

    const recur_token tok = recur_sampler_sample(s->smp, logits);
    recur_sampler_accept(s->smp, tok);
    s->n_decoded++;
    if (!t->params.ignore_eos && recur_token_is_eog(env->model, tok)) {
        slot_finish(s, env, SRV_STOP_EOS, now_ms);
        return;
    }
    if (!slot_emit(s, env, tok, slot_probs(env, t->params.n_probs, logits, tok), now_ms)) return;
    if (t->params.n_predict > 0 && s->n_decoded >= t->params.n_predict) slot_finish(s, env, SRV_STOP_LIMIT, now_ms);
    else if (s->n_cache + 1 >= env->n_ctx_slot) slot_finish(s, env, SRV_STOP_LIMIT, now_ms);
    else s->pending = tok;
}
