/* srv_gen.c — running a generation task for a request and answering with llama-server's JSON
 * (server-task.cpp: the native /completion result, OAI text_completion and chat.completion).
 *
 * The handler thread submits the task, waits for its first event (an error there is still a
 * plain HTTP error, not SSE), then either streams (srv_stream.c) or collects every event and
 * answers once. A client that disconnects while we wait cancels the task. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

#define MHD_NO_RESULT 0   /* libmicrohttpd's MHD_NO: close the connection */

unsigned srv_status_http(recur_status st) {
    switch (st) {
    case RECUR_E_INVALID: return 400;
    case RECUR_E_FULL: return 503;
    case RECUR_E_UNSUPPORTED: return 501;
    default: return 500;
    }
}

/* ---- JSON pieces ------------------------------------------------------------------------------ */

/* Bytes of the longest prefix of s that is complete, valid UTF-8. */
static size_t utf8_valid_prefix(const unsigned char *s, size_t len) {
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!n || i + n > len) break;
        size_t k = 1;
        while (k < n && (s[i + k] & 0xC0) == 0x80) k++;
        if (k < n) break;
        i += n;
    }
    return i;
}

/* A JSON string of text; bytes that are not valid UTF-8 become U+FFFD (jansson refuses them). */
json_t *srv_json_str(const char *text, size_t len) {
    json_t *j = json_stringn(text ? text : "", text ? len : 0);
    if (j) return j;
    char *buf = malloc(len * 3 + 1);
    if (!buf) return NULL;
    size_t o = 0, i = 0;
    while (i < len) {
        size_t ok = utf8_valid_prefix((const unsigned char *)text + i, len - i);
        memcpy(buf + o, text + i, ok);
        o += ok;
        i += ok;
        if (i < len) { memcpy(buf + o, "\xEF\xBF\xBD", 3); o += 3; i++; }
    }
    j = json_stringn(buf, o);
    free(buf);
    return j;
}

static json_t *bytes_json(const char *s, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

/* {id, token, bytes, logprob}: token is the piece cut to valid UTF-8, bytes all of it */
static json_t *tok_prob_json(srv_server *s, recur_token id, float logprob) {
    size_t n = 0;
    char *piece = srv_piece(s, id, &n);
    if (!piece) return NULL;
    size_t ok = utf8_valid_prefix((unsigned char *)piece, n);
    /* JSON has no -inf; llama-server writes the lowest float instead */
    double lp = isfinite(logprob) ? logprob : -3.4028234663852886e38;
    json_t *j = json_pack("{s:i, s:o, s:o, s:f}", "id", (int)id, "token", json_stringn(piece, ok), "bytes",
                          bytes_json(piece, n), "logprob", lp);
    free(piece);
    return j;
}

json_t *srv_probs_json(srv_server *s, const srv_token_probs *p) {
    json_t *e = tok_prob_json(s, p->id, p->logprob), *top = json_array();
    for (int32_t i = 0; top && i < p->n_top; i++) json_array_append_new(top, tok_prob_json(s, p->top_id[i], p->top_logprob[i]));
    if (!e || !top) { json_decref(e); json_decref(top); return NULL; }
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

json_t *srv_timings_json(const srv_stats *st) {
    double pn = st->n_prompt_eval, gn = st->n_predicted;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}",
                     "cache_n", (int)st->n_cache, "prompt_n", (int)st->n_prompt_eval, "prompt_ms", st->prompt_ms,
                     "prompt_per_token_ms", pn > 0 ? st->prompt_ms / pn : 0.0,
                     "prompt_per_second", st->prompt_ms > 0 ? 1e3 * pn / st->prompt_ms : 0.0,
                     "predicted_n", (int)st->n_predicted, "predicted_ms", st->predicted_ms,
                     "predicted_per_token_ms", gn > 0 ? st->predicted_ms / gn : 0.0,
                     "predicted_per_second", st->predicted_ms > 0 ? 1e3 * gn / st->predicted_ms : 0.0);
}

json_t *srv_usage_json(const srv_result *res) {
    int np = res->n_prompt, nc = res->stats.n_predicted;
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "completion_tokens", nc, "prompt_tokens", np, "total_tokens",
                     np + nc, "prompt_tokens_details", "cached_tokens", (int)res->stats.n_cache);
}

const char *srv_finish_reason(srv_stop_type st) {
    return st == SRV_STOP_WORD || st == SRV_STOP_EOS ? "stop" : "length";
}

static const char *stop_type_str(srv_stop_type st) {
    return st == SRV_STOP_CANCELLED ? "none" : srv_stop_type_str(st);
}

/* ---- results ---------------------------------------------------------------------------------- */

void srv_result_free(srv_result *res) {
    free(res->text);
    free(res->tokens);
    json_decref(res->probs);
    free(res->stats.stopping_word);
    memset(res, 0, sizeof *res);
}

bool srv_result_add(srv_server *s, srv_result *res, const srv_event *ev, bool want_probs) {
    if (ev->text && ev->text_len) {
        if (res->len + ev->text_len + 1 > res->cap) {
            size_t cap = res->cap ? res->cap : 256;
            while (cap < res->len + ev->text_len + 1) cap *= 2;
            char *nt = realloc(res->text, cap);
            if (!nt) return false;
            res->text = nt;
            res->cap = cap;
        }
        memcpy(res->text + res->len, ev->text, ev->text_len);
        res->len += ev->text_len;
        res->text[res->len] = 0;
    }
    if (ev->kind == SRV_EV_TOKEN) {
        if (res->n_tokens == res->cap_tokens) {
            int32_t cap = res->cap_tokens ? res->cap_tokens * 2 : 64;
            recur_token *nt = realloc(res->tokens, (size_t)cap * sizeof *nt);
            if (!nt) return false;
            res->tokens = nt;
            res->cap_tokens = cap;
        }
        res->tokens[res->n_tokens++] = ev->token;
        res->stats.n_predicted = res->n_tokens;
        if (want_probs && ev->probs) {
            if (!res->probs && !(res->probs = json_array())) return false;
            if (json_array_append_new(res->probs, srv_probs_json(s, ev->probs))) return false;
        }
    }
    if (ev->kind == SRV_EV_DONE) {
        free(res->stats.stopping_word);
        res->stats = ev->stats;
        res->stats.stopping_word = ev->stats.stopping_word ? strdup(ev->stats.stopping_word) : NULL;
    }
    return true;
}

static json_t *tokens_json(const srv_gen_opts *g, const srv_result *res) {
    json_t *a = json_array();
    for (int32_t i = 0; g->return_tokens && a && i < res->n_tokens; i++) json_array_append_new(a, json_integer(res->tokens[i]));
    return a;
}

json_t *srv_native_final(srv_server *s, const srv_gen_opts *g, const srv_result *res, const char *content,
                         size_t content_len, bool with_probs) {
    (void)s;
    const srv_stats *st = &res->stats;
    json_t *j = json_pack("{s:i, s:o, s:o, s:i, s:b, s:s, s:i, s:i, s:O, s:o, s:b, s:b, s:s, s:o, s:i, s:o}",
                          "index", 0, "content", srv_json_str(content, content_len), "tokens", tokens_json(g, res),
                          "id_slot", (int)st->id_slot, "stop", 1, "model", g->model,
                          "tokens_predicted", (int)st->n_predicted, "tokens_evaluated", (int)res->n_prompt,
                          "generation_settings", g->settings ? g->settings : json_object(),
                          "prompt", srv_json_str(g->prompt_text, g->prompt_text ? strlen(g->prompt_text) : 0),
                          "has_new_line", res->text && memchr(res->text, '\n', res->len) != NULL, "truncated", 0,
                          "stop_type", stop_type_str(st->stop_type),
                          "stopping_word", srv_json_str(st->stopping_word, st->stopping_word ? strlen(st->stopping_word) : 0),
                          "tokens_cached", (int)st->tokens_cached, "timings", srv_timings_json(st));
    if (j && with_probs && res->probs) json_object_set(j, "completion_probabilities", res->probs);
    return j;
}

static json_t *oai_final(const srv_gen_opts *g, const srv_result *res) {
    json_t *logprobs = res->probs ? json_pack("{s:O}", "content", res->probs) : json_null();
    json_t *choice;
    const char *object;
    if (g->fmt == SRV_FMT_OAI_CHAT) {
        object = "chat.completion";
        choice = json_pack("{s:s, s:i, s:o}", "finish_reason", srv_finish_reason(res->stats.stop_type), "index", 0,
                           "message", srv_chat_message(g, res->text, res->len));
        if (choice && res->probs) json_object_set(choice, "logprobs", logprobs);
        json_decref(logprobs);
    } else {
        object = "text_completion";
        choice = json_pack("{s:o, s:i, s:o, s:s}", "text", srv_json_str(res->text, res->len), "index", 0,
                           "logprobs", logprobs, "finish_reason", srv_finish_reason(res->stats.stop_type));
    }
    json_t *j = json_pack("{s:[o], s:I, s:s, s:s, s:s, s:o, s:s, s:o}", "choices", choice, "created",
                          (json_int_t)g->created, "model", g->model, "system_fingerprint", SRV_BUILD_INFO, "object",
                          object, "usage", srv_usage_json(res), "id", g->id, "timings", srv_timings_json(&res->stats));
    /* recur extension (as /completion's): the generated token ids, for clients that track them */
    if (j && g->return_tokens) json_object_set_new(j, "tokens", tokens_json(g, res));
    return j;
}

/* ---- running ---------------------------------------------------------------------------------- */

srv_event *srv_wait_event(srv_task *t, int fd) {
    for (;;) {
        srv_event *ev = srv_task_next(t, SRV_POLL_MS);
        /* a token comes faster than the poll interval, so the socket is checked at every
         * wake-up, not only on timeouts (one recv syscall per token) */
        if (srv_client_gone(fd)) {
            srv_event_free(ev);
            srv_task_cancel(t);
            return NULL;
        }
        if (ev) return ev;
    }
}

static int reply_exceed(srv_req *r, int32_t n_prompt, int32_t n_ctx) {
    char msg[160];
    snprintf(msg, sizeof msg, "request (%d tokens) exceeds the available context size (%d tokens), try increasing it",
             (int)n_prompt, (int)n_ctx);
    json_t *e = srv_error_json(400, "exceed_context_size_error", msg);
    json_t *inner = json_object_get(e, "error");
    json_object_set_new(inner, "n_prompt_tokens", json_integer(n_prompt));
    json_object_set_new(inner, "n_ctx", json_integer(n_ctx));
    return srv_reply_json(r, 400, e);
}

/* Submits t; on failure answers the request and returns false. */
static bool submit(srv_req *r, srv_task *t, int *rc) {
    srv_server *s = r->s;
    char err[256] = "";
    recur_status st = RECUR_E_STATE;
    int32_t n_ctx = 0;
    bool exceed = false;
    pthread_rwlock_rdlock(&s->life);
    if (s->sched) {
        n_ctx = sched_params_of(s->sched)->n_ctx_slot;
        exceed = t->n_prompt >= n_ctx;
        st = exceed ? RECUR_E_INVALID : sched_submit(s->sched, t, err, sizeof err);
    }
    pthread_rwlock_unlock(&s->life);
    if (st == RECUR_OK) return true;
    if (exceed) *rc = reply_exceed(r, t->n_prompt, n_ctx);
    else if (st == RECUR_E_STATE) *rc = srv_reply_error(r, 503, "the server is shutting down");
    else if (st == RECUR_E_FULL) *rc = srv_reply_error(r, 503, err[0] ? err : "the server is busy: too many queued requests");
    else *rc = srv_reply_error(r, srv_status_http(st), err[0] ? err : recur_status_str(st));
    return false;
}

static int collect(srv_req *r, srv_task *t, srv_gen_opts *g, srv_event *ev) {
    srv_result res = { .n_prompt = t->n_prompt };
    bool ok = true;
    for (;;) {
        if (!ev) { srv_result_free(&res); return MHD_NO_RESULT; }   /* client gone: close the connection */
        if (ev->kind == SRV_EV_ERROR) {
            int rc = srv_reply_error(r, srv_status_http(ev->status), ev->message);
            srv_event_free(ev);
            srv_result_free(&res);
            return rc;
        }
        bool done = ev->done;
        ok = ok && srv_result_add(r->s, &res, ev, g->n_probs > 0);
        srv_event_free(ev);
        if (done) break;
        ev = srv_wait_event(t, r->fd);
    }
    json_t *j = !ok ? NULL
              : g->fmt == SRV_FMT_NATIVE ? srv_native_final(r->s, g, &res, res.text, res.len, true)
              : oai_final(g, &res);
    if (j) srv_chat_reply_submit(r->s, g, t, &res);   /* before the client sees the response */
    srv_result_free(&res);
    return j ? srv_reply_json(r, 200, j) : srv_reply_error(r, 500, "out of memory");
}

int srv_gen_run(srv_req *r, srv_task *t, srv_gen_opts *g) {
    int rc = 0;
    snprintf(g->model, sizeof g->model, "%s", srv_model_name(r->s));
    g->created = time(NULL);
    if (t->n_prompt == 0) rc = srv_reply_error(r, 400, "empty prompt");
    else if (submit(r, t, &rc)) {
        srv_event *ev = srv_wait_event(t, r->fd);
        if (ev && ev->kind == SRV_EV_ERROR) {
            rc = srv_reply_error(r, srv_status_http(ev->status), ev->message);
            srv_event_free(ev);
        } else if (ev && g->stream) {
            struct srv_stream *st = srv_stream_new(r->s, t, g, ev, r->fd);
            if (st) return srv_reply_stream(r, st);   /* the stream owns t, g and ev now */
            srv_event_free(ev);
            srv_task_cancel(t);
            rc = srv_reply_error(r, 500, "out of memory");
        } else if (ev) {
            rc = collect(r, t, g, ev);
        }
    }
    srv_task_unref(t);
    srv_gen_opts_free(g);
    return rc;
}
