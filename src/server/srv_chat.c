/* srv_chat.c — OpenAI chat messages into a prompt (through the chat template, chat/chat.h), and
 * generated text back into a message with reasoning_content, whole or as stream deltas. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"
#include "server/srv.h"

/* content given as parts [{type:"text", text}, ...] becomes one string, parts joined by "\n"
 * (llama-server's concat_typed_text); other part types need a multimodal model. */
static recur_status flatten_content(json_t *msg, char *err, size_t err_len) {
    json_t *c = json_object_get(msg, "content");
    if (!c || json_is_null(c) || json_is_string(c)) return RECUR_OK;
    if (!json_is_array(c)) return rc_fail(err, err_len, RECUR_E_INVALID, "Invalid 'content' type: must be a string or an array of parts");
    size_t len = 0, i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text))
            return rc_fail(err, err_len, RECUR_E_INVALID, "unsupported content part: only {\"type\":\"text\",\"text\":...} "
                                                          "parts are supported (this server has no multimodal input)");
        len += json_string_length(text) + 1;
    }
    char *buf = malloc(len + 1), *p = buf;
    if (!buf) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    json_array_foreach(c, i, part) {
        json_t *text = json_object_get(part, "text");
        if (i) *p++ = '\n';
        memcpy(p, json_string_value(text), json_string_length(text));
        p += json_string_length(text);
    }
    json_object_set_new(msg, "content", json_stringn(buf, (size_t)(p - buf)));
    free(buf);
    return RECUR_OK;
}

/* A validated copy of body.messages (content parts flattened). */
static json_t *messages_copy(const json_t *body, char *err, size_t err_len) {
    const json_t *m = json_object_get(body, "messages");
    if (!m || json_is_null(m)) { rc_fail(err, err_len, RECUR_E_INVALID, "'messages' is required"); return NULL; }
    if (!json_is_array(m)) { rc_fail(err, err_len, RECUR_E_INVALID, "Expected 'messages' to be an array"); return NULL; }
    if (!json_array_size(m)) { rc_fail(err, err_len, RECUR_E_INVALID, "'messages' must not be empty"); return NULL; }
    json_t *out = json_deep_copy(m);
    size_t i;
    json_t *msg;
    json_array_foreach(out, i, msg) {
        if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "role"))) {
            rc_fail(err, err_len, RECUR_E_INVALID, "message %zu: expected an object with a string 'role'", i);
            json_decref(out);
            return NULL;
        }
        if (flatten_content(msg, err, err_len)) { json_decref(out); return NULL; }
    }
    return out;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Where the prompt cache should place checkpoints (the state after token p): the end of a
 * system / tools prefix, the start of every user message and of its content, the end of every
 * assistant message, and every token of a short generation prompt (a template that renders a
 * past reply differently from how it was generated — reasoning stripped — diverges inside
 * it). The last prompt token is the scheduler's business. */
static void chat_hints(const chat_prompt *cp, const json_t *msgs, bool tools, srv_task *t) {
    /* the generation prompt: where a past reply renders differently (known), else every token of
     * a short one */
    const int32_t gen = cp->gen_reply >= 0 ? 1 : cp->gen_prompt.end - cp->gen_prompt.begin;
    const int32_t cap = 3 * cp->n_messages + 1 + (gen <= 16 ? gen : 0);
    int32_t *at = malloc((size_t)cap * sizeof *at), n = 0, sys = -1;
    uint8_t *fl = malloc((size_t)cap);
    if (!at || !fl) { free(at); free(fl); return; }   /* hints are an optimisation */
    for (int32_t i = 0; i < cp->n_messages; i++) {
        const char *role = json_string_value(json_object_get(json_array_get(msgs, (size_t)i), "role"));
        const chat_span sp = cp->msg_tokens[i];
        if (i == 0 && ((role && !strcmp(role, "system")) || tools)) at[n++] = sys = sp.end - 1;
        if (role && !strcmp(role, "user")) { at[n++] = sp.begin - 1; at[n++] = cp->msg_content[i] - 1; }
        if (role && !strcmp(role, "assistant")) at[n++] = sp.end - 1;
    }
    if (cp->gen_reply >= 0) at[n++] = cp->gen_reply - 1;
    else
        for (int32_t p = cp->gen_prompt.begin - 1; gen <= 16 && p < cp->gen_prompt.end - 1; p++) at[n++] = p;
    qsort(at, (size_t)n, sizeof *at, cmp_i32);
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        if (at[i] < 0 || at[i] >= cp->n_tokens - 1 || (k && at[k - 1] == at[i])) continue;
        fl[k] = at[i] == sys ? SRV_CKPT_SYSTEM : 0;
        at[k++] = at[i];
    }
    t->ckpt_at = at;
    t->ckpt_flags = fl;
    t->n_ckpt_at = k;
}

recur_status srv_chat_prompt(srv_server *s, const json_t *body, bool add_gen, char **text, size_t *text_len,
                             recur_token **tokens, int32_t *n_tokens, bool *think_open, srv_task *hints,
                             unsigned *status, char *err, size_t err_len) {
    *status = 400;
    const json_t *tools = json_object_get(body, "tools"), *kw = json_object_get(body, "chat_template_kwargs");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'tools': must be an array");
    if (tools && json_array_size(tools) && !s->o.jinja)
        return rc_fail(err, err_len, RECUR_E_INVALID, "tools param requires --jinja flag");
    if (kw && !json_is_null(kw) && !json_is_object(kw))
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'chat_template_kwargs': must be an object");
    bool agp = add_gen;
    recur_status st = srv_get_bool(body, "add_generation_prompt", &agp, err, err_len);
    if (st) return st;
    json_t *msgs = messages_copy(body, err, err_len);
    if (!msgs) return RECUR_E_INVALID;
    chat_params p = { .messages = msgs, .tools = json_is_array(tools) ? tools : NULL,
                      .kwargs = json_is_object(kw) ? kw : NULL, .add_generation_prompt = agp };
    chat_prompt cp;
    st = chat_apply(s->tmpl, s->vocab, &p, &cp, err, err_len);
    if (!st && hints) chat_hints(&cp, msgs, p.tools && json_array_size(p.tools), hints);
    json_decref(msgs);
    if (st) {
        /* a template error (raise_exception, ...): llama-server's server_error; but a render
         * limit (RECUR_E_FULL: nesting, output size, work budget) is the request's doing */
        *status = st == RECUR_E_FULL ? 400 : 500;
        return st;
    }
    *text = cp.text;
    *text_len = cp.text_len;
    *tokens = cp.tokens;
    *n_tokens = cp.n_tokens;
    *think_open = cp.think_open;
    cp.text = NULL;
    cp.tokens = NULL;
    chat_prompt_free(&cp);
    return RECUR_OK;
}

json_t *srv_chat_message(const srv_gen_opts *g, const char *text, size_t len) {
    if (!text) text = "";
    chat_reasoning r = { .content = text, .content_len = len };
    if (g->reasoning != SRV_REASONING_NONE) r = chat_split_reasoning(text, len, g->think_open);
    if (g->reasoning == SRV_REASONING_DEEPSEEK_LEGACY) { r.content = text; r.content_len = len; }
    json_t *m = json_pack("{s:s, s:o}", "role", "assistant", "content", srv_json_str(r.content, r.content_len));
    if (m && r.found && r.reasoning_len)
        json_object_set_new(m, "reasoning_content", srv_json_str(r.reasoning, r.reasoning_len));
    return m;
}

/* how many bytes at the end of text[0, len) are a proper prefix of tag */
static size_t partial_tag(const char *text, size_t len, const char *tag) {
    size_t t = strlen(tag);
    for (size_t k = t - 1; k > 0; k--)
        if (len >= k && !memcmp(text + len - k, tag, k)) return k;
    return 0;
}

static char *delta(const char *full, size_t full_len, size_t *sent) {
    if (full_len <= *sent) return NULL;
    char *d = strndup(full + *sent, full_len - *sent);
    *sent = full_len;
    return d;
}

void srv_chat_split_deltas(const srv_gen_opts *g, srv_split_state *st, const char *text, size_t len, bool final,
                           char **reasoning, char **content) {
    *reasoning = *content = NULL;
    if (!text) { text = ""; len = 0; }
    if (g->reasoning == SRV_REASONING_NONE || g->reasoning == SRV_REASONING_DEEPSEEK_LEGACY) {
        *content = delta(text, len, &st->sent_content);
        return;
    }
    /* while streaming, hold back what may still turn into a tag: a partial "</think>" at the
     * end, or a start that may still become "<think>" — so that nothing sent is ever retracted */
    size_t eff = final ? len : len - partial_tag(text, len, "</think>"), i = 0;
    while (i < eff && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) i++;
    if (!final && eff - i < 7 && !memcmp(text + i, "<think>", eff - i)) return;
    chat_reasoning r = chat_split_reasoning(text, eff, g->think_open);
    if (!r.found) {
        *content = delta(text, eff, &st->sent_content);
        return;
    }
    *reasoning = delta(r.reasoning, r.reasoning_len, &st->sent_reasoning);
    if (r.closed) *content = delta(r.content, r.content_len, &st->sent_content);
}

/* ---- the next turn, predicted ------------------------------------------------------------------ */

/* What the scheduler renders when it is idle: its own copies (it runs on another thread). */
typedef struct chat_next {
    const srv_server *s;
    json_t           *messages, *tools, *kwargs, *reply;
} chat_next;

static void chat_next_free(void *arg) {
    chat_next *c = arg;
    if (!c) return;
    json_decref(c->messages);
    json_decref(c->tools);
    json_decref(c->kwargs);
    json_decref(c->reply);
    free(c);
}

static int32_t chat_next_predict(void *arg, recur_token **out) {
    const chat_next *c = arg;
    const chat_params p = { .messages = c->messages, .tools = c->tools, .kwargs = c->kwargs };
    int32_t n = 0;
    char err[256];
    if (chat_reply_tokens(c->s->tmpl, c->s->vocab, &p, c->reply, out, &n, err, sizeof err)) {
        fprintf(stderr, "chat: the next turn could not be predicted: %s\n", err);
        return -1;
    }
    return n;
}

void srv_chat_reply_submit(srv_server *s, const srv_gen_opts *g, const srv_task *t, const srv_result *res) {
    const json_t *body = g->chat_body;
    if (!body || !t->params.cache_prompt || res->stats.stop_type == SRV_STOP_CANCELLED || res->stats.id_slot < 0) return;
    char err[64];
    chat_next *c = calloc(1, sizeof *c);
    if (!c) return;   /* a prediction is an optimisation */
    const json_t *tools = json_object_get(body, "tools"), *kw = json_object_get(body, "chat_template_kwargs");
    c->s = s;
    c->messages = messages_copy(body, err, sizeof err);
    c->tools = json_is_array(tools) && json_array_size(tools) ? json_deep_copy(tools) : NULL;
    c->kwargs = json_is_object(kw) ? json_deep_copy(kw) : NULL;
    c->reply = srv_chat_message(g, res->text, res->len);   /* exactly the message the client gets */
    if (!c->messages || !c->reply || (json_is_array(tools) && json_array_size(tools) && !c->tools) ||
        (json_is_object(kw) && !c->kwargs)) {
        chat_next_free(c);
        return;
    }
    const sched_reply r = { .id_task = t->id, .id_slot = res->stats.id_slot, .n_prompt = t->n_prompt,
                            .predict = chat_next_predict, .free = chat_next_free, .arg = c };
    pthread_rwlock_rdlock(&s->life);
    if (s->sched) sched_submit_reply(s->sched, &r);
    else chat_next_free(c);
    pthread_rwlock_unlock(&s->life);
}
