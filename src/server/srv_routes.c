/* srv_routes.c — the route table and the endpoints that take a JSON body: completions (native
 * and OAI), chat completions, tokenize, detokenize, apply-template. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/err.h"
#include "server/srv.h"

/* ---- ids ---------------------------------------------------------------------------------------- */

/* prefix + 32 random alphanumerics, as llama-server's gen_chatcmplid */
static void random_id(char *out, size_t cap, const char *prefix) {
    static const char abc[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    unsigned char r[32] = {0};
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) {
        uint64_t x = (uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)out;
        for (int i = 0; i < 32; i++) { x = x * 6364136223846793005ull + 1442695040888963407ull; r[i] = (unsigned char)(x >> 33); }
    }
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (int i = 0; i < 32 && n + 1 < cap; i++) out[n++] = abc[r[i] % 62];
    out[n] = 0;
}

static srv_task *new_task(srv_server *s) { return srv_task_new(atomic_fetch_add(&s->next_id, 1)); }

/* ---- prompts ------------------------------------------------------------------------------------ */

typedef struct tok_buf {
    recur_token *v;
    int32_t      n, cap;
} tok_buf;

static bool tok_add(tok_buf *b, const recur_token *t, int n) {
    if (n <= 0) return true;   /* an empty piece ("prompt": ""): b->v may still be NULL */
    if (b->n + n > b->cap) {
        int32_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        recur_token *nv = realloc(b->v, (size_t)cap * sizeof *nv);
        if (!nv) return false;
        b->v = nv;
        b->cap = cap;
    }
    memcpy(b->v + b->n, t, (size_t)n * sizeof *t);
    b->n += n;
    return true;
}

/* One piece of a prompt: a string (tokenized; specials added only at the very start) or an id. */
static recur_status prompt_piece(srv_server *s, const json_t *el, tok_buf *b, char *err, size_t err_len) {
    if (json_is_integer(el)) {
        json_int_t id = json_integer_value(el);
        if (id < 0 || id >= vocab_n_tokens(s->vocab))
            return rc_fail(err, err_len, RECUR_E_INVALID, "invalid token id %lld in the prompt (the vocabulary has %d)",
                           (long long)id, (int)vocab_n_tokens(s->vocab));
        recur_token t = (recur_token)id;
        return tok_add(b, &t, 1) ? RECUR_OK : rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    }
    if (!json_is_string(el)) return rc_fail(err, err_len, RECUR_E_INVALID, "\"prompt\" must be a string, a list of tokens, or a mix of both");
    recur_token *ids = NULL;
    int n = srv_tokenize(s, json_string_value(el), json_string_length(el), b->n == 0, true, &ids);
    bool ok = n >= 0 && tok_add(b, ids, n);
    free(ids);
    return ok ? RECUR_OK : rc_fail(err, err_len, RECUR_E_NOMEM, "tokenizing the prompt failed");
}

/* body.prompt: a string, token ids, a mix [12, "text", 34], {prompt_string}, or a one-element
 * array of those. Several prompts in one request are refused (501). */
recur_status srv_prompt_parse(srv_server *s, const json_t *body, srv_task *t, char **text, unsigned *status,
                              char *err, size_t err_len) {
    const json_t *p = json_object_get(body, "prompt");
    *status = 400;
    if (p && json_is_object(p)) {
        if (json_object_get(p, "multimodal_data")) { *status = 501; return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "multimodal prompts are not supported"); }
        p = json_object_get(p, "prompt_string");
    }
    if (!p || json_is_null(p)) return rc_fail(err, err_len, RECUR_E_INVALID, "\"prompt\" is required");
    if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0))) p = json_array_get(p, 0);
    tok_buf b = {0};
    recur_status st = RECUR_OK;
    if (json_is_array(p)) {
        size_t i, n_int = 0;
        const json_t *el;
        json_array_foreach(p, i, el) n_int += json_is_integer(el);
        if (!n_int && json_array_size(p) > 1) {
            *status = 501;
            return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "several prompts in one request are not supported");
        }
        json_array_foreach(p, i, el) if (!st) st = prompt_piece(s, el, &b, err, err_len);
    } else {
        st = prompt_piece(s, p, &b, err, err_len);
    }
    if (st) { free(b.v); return st; }
    t->prompt = b.v;
    t->n_prompt = b.n;
    *text = json_is_string(p) ? strdup(json_string_value(p)) : srv_detokenize(s, b.v, b.n, NULL);
    return RECUR_OK;
}

/* ---- generation endpoints ------------------------------------------------------------------- */

int srv_h_completion(srv_req *r, json_t *body, srv_fmt fmt) {
    srv_server *s = r->s;
    char err[512];
    unsigned status = 400;
    srv_task *t = new_task(s);
    srv_gen_opts g = { .fmt = fmt };
    if (!t) return srv_reply_error(r, 500, "out of memory");
    random_id(g.id, sizeof g.id, "cmpl-");
    recur_status st = srv_prompt_parse(s, body, t, &g.prompt_text, &status, err, sizeof err);
    if (!st) st = srv_params_parse(s, body, t, &g, err, sizeof err);
    if (st) {
        srv_task_unref(t);
        srv_gen_opts_free(&g);
        return srv_reply_error(r, st == RECUR_E_NOMEM ? 500 : st == RECUR_E_UNSUPPORTED ? 501 : status, err);
    }
    return srv_gen_run(r, t, &g);
}

int srv_h_chat(srv_req *r, json_t *body) {
    srv_server *s = r->s;
    char err[1024];
    unsigned status = 400;
    srv_task *t = new_task(s);
    srv_gen_opts g = { .fmt = SRV_FMT_OAI_CHAT };
    if (!t) return srv_reply_error(r, 500, "out of memory");
    random_id(g.id, sizeof g.id, "chatcmpl-");
    char *text = NULL;
    size_t text_len = 0;
    recur_status st = srv_chat_prompt(s, body, true, &text, &text_len, &t->prompt, &t->n_prompt, &g.think_open,
                                      t, &status, err, sizeof err);
    free(text);
    if (!st && (st = srv_params_parse(s, body, t, &g, err, sizeof err)))
        status = st == RECUR_E_NOMEM ? 500 : st == RECUR_E_UNSUPPORTED ? 501 : 400;
    if (st) {
        srv_task_unref(t);
        srv_gen_opts_free(&g);
        return srv_reply_error(r, status, err);
    }
    g.chat_body = json_incref(body);
    return srv_gen_run(r, t, &g);
}

/* ---- tokens and templates ------------------------------------------------------------------- */

static json_t *piece_json(srv_server *s, recur_token id) {
    size_t n = 0;
    char *p = srv_piece(s, id, &n);
    if (!p) return NULL;
    json_t *j = json_stringn(p, n);   /* NULL unless valid UTF-8: then the bytes, as llama-server */
    if (!j) {
        j = json_array();
        for (size_t i = 0; j && i < n; i++) json_array_append_new(j, json_integer((unsigned char)p[i]));
    }
    free(p);
    return j;
}

int srv_h_tokenize(srv_req *r, json_t *body) {
    char err[256];
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    recur_status st;
    if ((st = srv_get_str(body, "content", &content, err, sizeof err)) ||
        (st = srv_get_bool(body, "add_special", &add_special, err, sizeof err)) ||
        (st = srv_get_bool(body, "parse_special", &parse_special, err, sizeof err)) ||
        (st = srv_get_bool(body, "with_pieces", &with_pieces, err, sizeof err)))
        return srv_reply_error(r, 400, err);
    json_t *toks = json_array();
    if (content) {
        recur_token *ids = NULL;
        int n = srv_tokenize(r->s, content, strlen(content), add_special, parse_special, &ids);
        if (n < 0) { json_decref(toks); return srv_reply_error(r, 500, "tokenizing failed"); }
        for (int i = 0; i < n; i++)
            json_array_append_new(toks, with_pieces ? json_pack("{s:i, s:o}", "id", (int)ids[i], "piece", piece_json(r->s, ids[i]))
                                                    : json_integer(ids[i]));
        free(ids);
    }
    return srv_reply_json(r, 200, json_pack("{s:o}", "tokens", toks));
}

int srv_h_detokenize(srv_req *r, json_t *body) {
    const json_t *toks = json_object_get(body, "tokens");
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0;
    if (toks && !json_is_null(toks) && !json_is_array(toks)) return srv_reply_error(r, 400, "Field 'tokens': must be an array");
    recur_token *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return srv_reply_error(r, 500, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *el = json_array_get(toks, i);
        json_int_t v = json_is_integer(el) ? json_integer_value(el) : -1;
        if (v < 0 || v >= vocab_n_tokens(r->s->vocab)) {
            free(ids);
            return srv_reply_error(r, 400, "Field 'tokens': must be token ids of this model's vocabulary");
        }
        ids[i] = (recur_token)v;
    }
    size_t len = 0;
    char *text = srv_detokenize(r->s, ids, (int)n, &len);
    free(ids);
    if (!text) return srv_reply_error(r, 500, "out of memory");
    json_t *j = json_pack("{s:o}", "content", srv_json_str(text, len));
    free(text);
    return srv_reply_json(r, 200, j);
}

int srv_h_apply_template(srv_req *r, json_t *body) {
    char err[1024], *text = NULL;
    size_t len = 0;
    recur_token *toks = NULL;
    int32_t n = 0;
    bool think_open = false;
    unsigned status = 400;
    recur_status st = srv_chat_prompt(r->s, body, true, &text, &len, &toks, &n, &think_open, NULL, &status, err,
                                      sizeof err);
    free(toks);
    if (st) return srv_reply_error(r, status, err);
    json_t *j = json_pack("{s:o}", "prompt", srv_json_str(text, len));
    free(text);
    return srv_reply_json(r, 200, j);
}

/* ---- the route table --------------------------------------------------------------------------- */

typedef enum route_id {
    R_HEALTH, R_MODELS, R_PROPS, R_SLOTS, R_METRICS, R_COMPLETION, R_OAI_COMPLETION, R_CHAT, R_TOKENIZE,
    R_DETOKENIZE, R_APPLY_TEMPLATE,
} route_id;

typedef struct route {
    const char *method, *path;
    route_id    id;
} route;

static const route ROUTES[] = {
    { "GET", "/health", R_HEALTH }, { "GET", "/v1/health", R_HEALTH },
    { "GET", "/models", R_MODELS }, { "GET", "/v1/models", R_MODELS },
    { "GET", "/props", R_PROPS }, { "GET", "/slots", R_SLOTS }, { "GET", "/metrics", R_METRICS },
    { "POST", "/completion", R_COMPLETION }, { "POST", "/completions", R_COMPLETION },
    { "POST", "/v1/completions", R_OAI_COMPLETION },
    { "POST", "/chat/completions", R_CHAT }, { "POST", "/v1/chat/completions", R_CHAT },
    { "POST", "/tokenize", R_TOKENIZE }, { "POST", "/detokenize", R_DETOKENIZE },
    { "POST", "/apply-template", R_APPLY_TEMPLATE },
};

static int with_body(srv_req *r, route_id id) {
    json_error_t je;
    json_t *body = json_loadb(r->body, r->body_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!body) {
        char msg[300];
        snprintf(msg, sizeof msg, "invalid JSON in the request body: %s (line %d, column %d)", je.text, je.line, je.column);
        return srv_reply_error(r, 400, msg);
    }
    if (!json_is_object(body)) {
        json_decref(body);
        return srv_reply_error(r, 400, "request body must be a JSON object");
    }
    int rc;
    switch (id) {
    case R_COMPLETION: rc = srv_h_completion(r, body, SRV_FMT_NATIVE); break;
    case R_OAI_COMPLETION: rc = srv_h_completion(r, body, SRV_FMT_OAI_CMPL); break;
    case R_CHAT: rc = srv_h_chat(r, body); break;
    case R_TOKENIZE: rc = srv_h_tokenize(r, body); break;
    case R_DETOKENIZE: rc = srv_h_detokenize(r, body); break;
    default: rc = srv_h_apply_template(r, body); break;
    }
    json_decref(body);
    return rc;
}

int srv_route(srv_req *r) {
    if (!strcmp(r->method, "POST") && !strncmp(r->path, "/slots/", 7)) return srv_h_slot_action(r, r->path + 7);
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const route *rt = &ROUTES[i];
        if (strcmp(rt->path, r->path) || strcmp(rt->method, r->method)) continue;
        switch (rt->id) {
        case R_HEALTH: return srv_h_health(r);
        case R_MODELS: return srv_h_models(r);
        case R_PROPS: return srv_h_props(r);
        case R_SLOTS: return srv_h_slots(r);
        case R_METRICS: return srv_h_metrics(r);
        default: return with_body(r, rt->id);
        }
    }
    return srv_reply_error_type(r, 404, "not_found_error", "File Not Found");
}
