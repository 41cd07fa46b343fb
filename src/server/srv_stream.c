/* srv_stream.c — Server-Sent Events for streamed completions, framed as llama-server does
 * (server-common.cpp format_oai_sse; server-task.cpp partial/final results):
 *   every event is `data: <json>\n\n`; OAI endpoints end with `data: [DONE]\n\n`, the native one
 *   does not; an error after the headers is `data: {"error":{...}}\n\n`; a chat stream starts
 *   with a delta {role:"assistant", content:null}, ends with a chunk holding finish_reason and
 *   an empty delta, then (include_usage) a chunk with choices [] and usage; the last chunk
 *   carries timings. While the model is silent a `:\n\n` comment is sent every SSE_PING_S.
 *
 * libmicrohttpd calls stream_read from the connection's own thread, which blocks on the task's
 * events; stream_free (the response is destroyed: done, or the client went away) cancels the
 * task, so a disconnect frees the slot even when nobody polls the socket. */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timing.h"
#include "server/srv.h"

#define SSE_PING_S 30

typedef struct srv_stream {
    srv_server     *s;
    srv_task       *t;
    srv_gen_opts    g;
    srv_event      *first;
    int             fd;
    srv_result      res;
    srv_split_state split;
    char           *out;        /* bytes not yet handed to libmicrohttpd: out[pos, len) */
    size_t          len, cap, pos;
    bool            finished, role_sent, oom;
    int64_t         last_us;
} srv_stream;

static void out_add(srv_stream *st, const char *s, size_t n) {
    if (st->len + n > st->cap) {
        size_t cap = st->cap ? st->cap : 1024;
        while (cap < st->len + n) cap *= 2;
        char *nb = realloc(st->out, cap);
        if (!nb) { st->oom = true; return; }
        st->out = nb;
        st->cap = cap;
    }
    memcpy(st->out + st->len, s, n);
    st->len += n;
}

/* data: <json>\n\n (steals j) */
static void sse(srv_stream *st, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s) { st->oom = true; return; }
    out_add(st, "data: ", 6);
    out_add(st, s, strlen(s));
    out_add(st, "\n\n", 2);
    free(s);
}

/* the fields every OAI chunk has, around choices */
static json_t *oai_chunk(srv_stream *st, json_t *choices) {
    const bool chat = st->g.fmt == SRV_FMT_OAI_CHAT;
    return json_pack("{s:o, s:I, s:s, s:s, s:s, s:s}", "choices", choices, "created", (json_int_t)st->g.created,
                     "id", st->g.id, "model", st->g.model, "system_fingerprint", SRV_BUILD_INFO,
                     "object", chat ? "chat.completion.chunk" : "text_completion");
}

static json_t *logprobs_of(srv_stream *st, const srv_event *ev) {
    if (!ev->probs || st->g.n_probs <= 0) return NULL;
    json_t *p = srv_probs_json(st->s, ev->probs);
    return p ? json_pack("{s:[o]}", "content", p) : NULL;
}

/* one chat chunk with this delta (and logprobs: stolen, may be NULL) */
static void chat_delta(srv_stream *st, json_t *delta, json_t *logprobs) {
    json_t *choice = json_pack("{s:n, s:i, s:o}", "finish_reason", "index", 0, "delta", delta);
    if (choice && logprobs) json_object_set_new(choice, "logprobs", logprobs);
    else json_decref(logprobs);
    sse(st, oai_chunk(st, json_pack("[o]", choice)));
}

/* the reasoning/content deltas the text so far adds (logprobs go on the last chunk) */
static void chat_text(srv_stream *st, bool final, json_t *logprobs) {
    char *reasoning = NULL, *content = NULL;
    srv_chat_split_deltas(&st->g, &st->split, st->res.text, st->res.len, final, &reasoning, &content);
    if (reasoning)
        chat_delta(st, json_pack("{s:o}", "reasoning_content", srv_json_str(reasoning, strlen(reasoning))),
                   content ? NULL : logprobs);
    if (content || (!reasoning && logprobs))
        chat_delta(st, json_pack("{s:o}", "content", srv_json_str(content ? content : "", content ? strlen(content) : 0)),
                   logprobs);
    free(reasoning);
    free(content);
}

static void on_token(srv_stream *st, const srv_event *ev) {
    const srv_gen_opts *g = &st->g;
    if (g->fmt == SRV_FMT_OAI_CHAT) {
        chat_text(st, false, logprobs_of(st, ev));
    } else if (g->fmt == SRV_FMT_OAI_CMPL) {
        json_t *lp = logprobs_of(st, ev);
        sse(st, oai_chunk(st, json_pack("[{s:o, s:i, s:o, s:n}]", "text", srv_json_str(ev->text, ev->text_len),
                                        "index", 0, "logprobs", lp ? lp : json_null(), "finish_reason")));
    } else {
        json_t *j = json_pack("{s:i, s:o, s:[], s:b, s:i, s:i, s:i}", "index", 0, "content",
                              srv_json_str(ev->text, ev->text_len), "tokens", "stop", 0, "id_slot", -1,
                              "tokens_predicted", (int)st->res.n_tokens, "tokens_evaluated", (int)st->res.n_prompt);
        if (j && g->return_tokens) json_array_append_new(json_object_get(j, "tokens"), json_integer(ev->token));
        if (j && ev->probs && g->n_probs > 0)
            json_object_set_new(j, "completion_probabilities", json_pack("[o]", srv_probs_json(st->s, ev->probs)));
        sse(st, j);
    }
}

static void on_done(srv_stream *st, const srv_event *ev) {
    const srv_gen_opts *g = &st->g;
    const srv_result *res = &st->res;
    const char *finish = srv_finish_reason(res->stats.stop_type);
    if (g->fmt == SRV_FMT_NATIVE) {
        sse(st, srv_native_final(st->s, g, res, ev->text ? ev->text : "", ev->text_len, false));
        return;
    }
    json_t *last;
    if (g->fmt == SRV_FMT_OAI_CHAT) {
        chat_text(st, true, NULL);
        srv_chat_reply_submit(st->s, g, st->t, res);
        last = oai_chunk(st, json_pack("[{s:s, s:i, s:{}}]", "finish_reason", finish, "index", 0, "delta"));
        if (g->include_usage) {
            sse(st, last);
            last = oai_chunk(st, json_array());
            if (last) json_object_set_new(last, "usage", srv_usage_json(res));
        }
    } else {
        last = oai_chunk(st, json_pack("[{s:o, s:i, s:n, s:s}]", "text", srv_json_str(ev->text, ev->text_len),
                                       "index", 0, "logprobs", "finish_reason", finish));
        if (last) json_object_set_new(last, "usage", srv_usage_json(res));
    }
    if (last) json_object_set_new(last, "timings", srv_timings_json(&res->stats));
    sse(st, last);
    out_add(st, "data: [DONE]\n\n", 14);
}

static void on_event(srv_stream *st, srv_event *ev) {
    if (ev->kind == SRV_EV_ERROR) {
        sse(st, srv_error_json(srv_status_http(ev->status), NULL, ev->message));
        st->finished = true;
        return;
    }
    if (st->g.fmt == SRV_FMT_OAI_CHAT && !st->role_sent) {
        chat_delta(st, json_pack("{s:s, s:n}", "role", "assistant", "content"), NULL);
        st->role_sent = true;
    }
    if (!srv_result_add(st->s, &st->res, ev, false)) st->oom = true;
    if (ev->kind == SRV_EV_TOKEN) on_token(st, ev);
    else { on_done(st, ev); st->finished = true; }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_stream *st = cls;
    while (st->pos == st->len) {
        st->pos = st->len = 0;
        if (st->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        srv_event *ev = st->first ? st->first : srv_task_next(st->t, SRV_POLL_MS);
        st->first = NULL;
        if (ev) {
            on_event(st, ev);
            srv_event_free(ev);
            if (st->oom) { srv_task_cancel(st->t); return MHD_CONTENT_READER_END_WITH_ERROR; }
        } else if (srv_client_gone(st->fd)) {
            srv_task_cancel(st->t);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (rc_time_us() - st->last_us >= SSE_PING_S * 1000000ll) {
            out_add(st, ":\n\n", 3);
        }
    }
    size_t n = st->len - st->pos < max ? st->len - st->pos : max;
    memcpy(buf, st->out + st->pos, n);
    st->pos += n;
    st->last_us = rc_time_us();
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    srv_stream *st = cls;
    srv_task_cancel(st->t);   /* a no-op for the scheduler when the task already ended */
    srv_task_unref(st->t);
    srv_event_free(st->first);
    srv_result_free(&st->res);
    srv_gen_opts_free(&st->g);
    free(st->out);
    free(st);
}

srv_stream *srv_stream_new(srv_server *s, srv_task *t, srv_gen_opts *g, srv_event *first, int fd) {
    srv_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    *st = (srv_stream){ .s = s, .t = t, .g = *g, .first = first, .fd = fd, .last_us = rc_time_us() };
    st->res.n_prompt = t->n_prompt;
    g->prompt_text = NULL;
    g->settings = NULL;
    g->chat_body = NULL;
    return st;
}

int srv_reply_stream(srv_req *r, srv_stream *st) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!resp) {
        stream_free(st);
        return srv_reply_error(r, 500, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin && *origin ? origin : "*");
    MHD_add_response_header(resp, "Server", "recur");
    enum MHD_Result rc = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return rc;
}
