#include "server/task.h"

#include "server/srv_ban.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

srv_task *srv_task_new(uint64_t id) {
    srv_task *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->id = id;
    t->params.sampling = recur_sampler_default_params();
    t->params.n_predict = -1;
    t->params.id_slot = -1;
    t->params.cache_prompt = true;
    pthread_mutex_init(&t->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&t->cancelled, false);
    atomic_init(&t->refs, 1);
    return t;
}

void srv_task_ref(srv_task *t) { atomic_fetch_add(&t->refs, 1); }

void srv_task_unref(srv_task *t) {
    if (!t || atomic_fetch_sub(&t->refs, 1) != 1) return;
    for (srv_event *e = t->head, *n; e; e = n) {
        n = e->next;
        srv_event_free(e);
    }
    for (int32_t i = 0; i < t->params.n_stop; i++) free(t->params.stop[i]);
    free(t->params.stop);
    srv_ban_cfg_free(t->params.ban);
    free((void *)t->params.sampling.logit_bias);
    free(t->prompt);
    free(t->ckpt_at);
    free(t->ckpt_flags);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

void srv_task_cancel(srv_task *t) { atomic_store(&t->cancelled, true); }
bool srv_task_cancelled(const srv_task *t) { return atomic_load(&((srv_task *)t)->cancelled); }

void srv_task_push(srv_task *t, srv_event *ev) {
    ev->next = NULL;
    pthread_mutex_lock(&t->mu);
    if (t->tail) t->tail->next = ev;
    else t->head = ev;
    t->tail = ev;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

srv_event *srv_task_next(srv_task *t, int timeout_ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (timeout_ms > 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
    }
    pthread_mutex_lock(&t->mu);
    while (!t->head && timeout_ms != 0) {
        if (timeout_ms < 0) pthread_cond_wait(&t->cv, &t->mu);
        else if (pthread_cond_timedwait(&t->cv, &t->mu, &until) == ETIMEDOUT) break;
    }
    srv_event *ev = t->head;
    if (ev) {
        t->head = ev->next;
        if (!t->head) t->tail = NULL;
        ev->next = NULL;
    }
    pthread_mutex_unlock(&t->mu);
    return ev;
}

srv_event *srv_event_new(srv_ev_kind kind, const char *text, size_t text_len) {
    srv_event *ev = calloc(1, sizeof *ev);
    if (!ev) return NULL;
    ev->kind = kind;
    ev->done = kind != SRV_EV_TOKEN;
    ev->token = -1;
    ev->text = malloc(text_len + 1);
    if (!ev->text) { free(ev); return NULL; }
    if (text_len) memcpy(ev->text, text, text_len);
    ev->text[text_len] = '\0';
    ev->text_len = text_len;
    return ev;
}

srv_event *srv_event_error(recur_status st, const char *message) {
    srv_event *ev = srv_event_new(SRV_EV_ERROR, NULL, 0);
    if (!ev) {
        /* out of memory: retry without the text buffer, the one allocation we can skip */
        ev = calloc(1, sizeof *ev);
        while (!ev) {
            struct timespec ts = { 0, 1000000 };
            nanosleep(&ts, NULL);
            ev = calloc(1, sizeof *ev);
        }
        ev->kind = SRV_EV_ERROR;
        ev->done = true;
    }
    ev->status = st;
    snprintf(ev->message, sizeof ev->message, "%s", message ? message : recur_status_str(st));
    return ev;
}

void srv_event_free(srv_event *ev) {
    if (!ev) return;
    free(ev->text);
    srv_token_probs_free(ev->probs);
    free(ev->stats.stopping_word);
    free(ev);
}

srv_token_probs *srv_token_probs_new(int32_t n_top) {
    srv_token_probs *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_top = n_top;
    p->top_id = calloc((size_t)(n_top > 0 ? n_top : 1), sizeof *p->top_id);
    p->top_logprob = calloc((size_t)(n_top > 0 ? n_top : 1), sizeof *p->top_logprob);
    if (!p->top_id || !p->top_logprob) { srv_token_probs_free(p); return NULL; }
    return p;
}

void srv_token_probs_free(srv_token_probs *p) {
    if (!p) return;
    free(p->top_id);
    free(p->top_logprob);
    free(p);
}

const char *srv_stop_type_str(srv_stop_type s) {
    switch (s) {
    case SRV_STOP_NONE: return "none";
    case SRV_STOP_EOS: return "eos";
    case SRV_STOP_LIMIT: return "limit";
    case SRV_STOP_WORD: return "word";
    case SRV_STOP_CANCELLED: return "cancelled";
    }
    return "none";
}
