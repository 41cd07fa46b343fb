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
    s->ckpt_pos = -1;
    s->i_batch = -1;
    s->stop_word = -1;
    s->last_task_id = -1;
    s->cache = malloc((size_t)env->n_ctx_slot * sizeof *s->cache);
    s->piece = malloc((size_t)env->piece_max + 1);
    if (!s->cache || !s->piece) return RECUR_E_NOMEM;
    if (env->recurrent && env->cache_prompt) {   /* only a reusable cache needs the checkpoint */
        s->ckpt = recur_snapshot_new(env->ctx, RECUR_SNAP_CHECKPOINT, -1);
        if (!s->ckpt) return RECUR_E_NOMEM;
    }
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
    recur_snapshot_free(s->ckpt);
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
    /* the last prompt token is always evaluated again: its logits give the first token */
    int32_t keep = common_prefix(s->cache, s->n_cache, prompt, n);
    if (keep > n - 1) keep = n - 1;
    if (!env->recurrent || keep == s->n_cache) return keep;
    /* recurrent state exists only after the last token, or at the checkpoint */
    if (s->ckpt_pos >= 0 && s->ckpt_pos + 1 <= keep) return s->ckpt_pos + 1;
    return 0;
}

/* Brings the sequence down to its first `keep` tokens (a value slot_reusable gave). */
static void slot_truncate(slot *s, const slot_env *env, int32_t keep) {
    recur_status st = RECUR_OK;
    if (keep == s->n_cache) return;
    if (keep > 0 && !env->recurrent) st = recur_seq_rm(env->ctx, s->id, keep, -1);
    else if (keep > 0) st = recur_snapshot_restore(env->ctx, s->ckpt, s->id, NULL, 0);
    if (keep == 0 || st != RECUR_OK) {
        recur_seq_rm(env->ctx, s->id, -1, -1);   /* removing everything always succeeds */
        keep = 0;
    }
    s->n_cache = keep;
    if (s->ckpt_pos >= keep) s->ckpt_pos = -1;
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

    const int32_t keep = slot_reusable(s, env, t->prompt, t->n_prompt, t->params.cache_prompt);
    slot_truncate(s, env, keep);
    s->n_reused = s->n_past = s->n_cache;

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
    s->ckpt_pos = -1;
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
    (void)env;
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
