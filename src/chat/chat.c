/* chat.c — chat templates applied to messages, tokenized with per-message spans; reasoning
 * split of generated text. See chat.h for the contracts.
 *
 * Spans: render messages[0..i] (no generation prompt) for every i; the end of message i's
 * text is the length of the common prefix of that rendering and the full one (kept
 * non-decreasing). Tokens are then aligned with the text by their pieces.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"

/* ---- the template and its context ---------------------------------------------------------- */

char *chat_template_from_gguf(const gguf_file *g, const char *name) {
    char key[256];
    snprintf(key, sizeof key, name ? "tokenizer.chat_template.%s" : "tokenizer.chat_template", name);
    gguf_str s;
    if (!gguf_get_str(g, key, &s)) return NULL;
    char *out = malloc(s.len + 1);
    if (!out) return NULL;
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return out;
}

/* the stored text of token t, "" when t < 0 */
static json_t *token_json(const vocab *v, recur_token t) {
    size_t len = 0;
    const char *s = v && t >= 0 ? vocab_token_text(v, t, &len) : NULL;
    return json_stringn(s ? s : "", s ? len : 0);
}

recur_status chat_render_context(const jinja_template *t, const vocab *v, const json_t *context,
                                 const struct tm *now, char **out, size_t *out_len, char *err, size_t err_len) {
    *out = NULL;
    if (context && !json_is_object(context)) return rc_fail(err, err_len, RECUR_E_INVALID, "the context must be a JSON object");
    json_t *ctx = context ? json_copy((json_t *)context) : json_object();
    if (!ctx) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    if (!json_object_get(ctx, "bos_token")) json_object_set_new(ctx, "bos_token", token_json(v, v ? vocab_bos(v) : -1));
    if (!json_object_get(ctx, "eos_token")) json_object_set_new(ctx, "eos_token", token_json(v, v ? vocab_eos(v) : -1));
    jinja_render_opts o = {.now = now};
    recur_status st = jinja_render(t, ctx, &o, out, out_len, err, err_len);
    json_decref(ctx);
    return st;
}

/* messages[0, n) with p's other inputs; add_gen overrides p->add_generation_prompt */
static recur_status render_n(const jinja_template *t, const vocab *v, const chat_params *p, size_t n, bool add_gen,
                             char **out, size_t *out_len, char *err, size_t err_len) {
    json_t *ctx = json_object(), *msgs = json_array();
    if (!ctx || !msgs) { json_decref(ctx); json_decref(msgs); return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory"); }
    for (size_t i = 0; i < n; i++) json_array_append(msgs, json_array_get(p->messages, i));
    json_object_set_new(ctx, "messages", msgs);
    bool tools = p->tools && json_is_array(p->tools) && json_array_size(p->tools) > 0;
    json_object_set(ctx, "tools", tools ? (json_t *)p->tools : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_gen));
    if (p->kwargs && json_is_object(p->kwargs)) json_object_update(ctx, (json_t *)p->kwargs);
    recur_status st = chat_render_context(t, v, ctx, p->now, out, out_len, err, err_len);
    json_decref(ctx);
    return st;
}

/* ---- spans --------------------------------------------------------------------------------- */

static size_t common_prefix(const char *a, size_t an, const char *b, size_t bn) {
    size_t i = 0;
    while (i < an && i < bn && a[i] == b[i]) i++;
    return i;
}

/* When the rendering of messages[0..i] stops agreeing with the full one at d before its end
 * (templates render a message differently once later ones follow, e.g. Qwen3 drops the
 * reasoning of earlier turns), message i still ends where the longest tail (up to 256 bytes)
 * of that rendering first reappears in full[lo, hi): its end-of-turn text. lo is where message
 * i starts; hi is where message i + 1 ends when that is known (else the text's end), so the
 * tail cannot be found in a later turn that renders alike. The tail may begin before d: the
 * two renderings can share a few bytes past the divergence (Qwen3.5's empty reply: "<think>"
 * in the prefix rendering, "<|im_end|>" in the full one, agree on "<"), so only an occurrence
 * that ends after d counts. Whether a tail of length k occurs so is monotone in k (drop its
 * first byte), so a binary search finds the longest. */
static const char *tail_at(const char *pre, size_t pre_len, const char *full, size_t lo, size_t hi, size_t d,
                           size_t k) {
    size_t from = d + 1 > k && d + 1 - k > lo ? d + 1 - k : lo;   /* ends after d, starts at lo or later */
    return from + k <= hi ? memmem(full + from, hi - from, pre + pre_len - k, k) : NULL;
}

static size_t resync(const char *pre, size_t pre_len, const char *full, size_t lo, size_t hi, size_t d) {
    size_t a = 0, b = pre_len < 256 ? pre_len : 256;
    while (a < b) {
        size_t k = (a + b + 1) / 2;
        if (tail_at(pre, pre_len, full, lo, hi, d, k)) a = k;
        else b = k - 1;
    }
    if (!a) return d;
    return (size_t)(tail_at(pre, pre_len, full, lo, hi, d, a) - full) + a;
}

/* p's messages + reply (stolen) + a placeholder user message: the next turn's history, as a
 * client that sends the reply back renders it. NULL when out of memory. */
static json_t *next_turn_messages(const chat_params *p, json_t *reply) {
    json_t *m = reply ? json_copy((json_t *)p->messages) : NULL;
    if (!m || json_array_append_new(m, reply) ||
        json_array_append_new(m, json_pack("{s:s, s:s}", "role", "user", "content", "\x02"))) {
        if (!m) json_decref(reply);
        json_decref(m);
        return NULL;
    }
    return m;
}

/* Where a reply to this prompt, rendered later as history (the messages + that reply + a next
 * user message), stops agreeing with the prompt's text: a byte inside the generation prompt,
 * or SIZE_MAX when unknown (a render failed, or no generation prompt). Templates that open a
 * reasoning block in the generation prompt but drop it from past replies diverge there. */
static size_t reply_split(const jinja_template *t, const vocab *v, const chat_params *p, const chat_prompt *out) {
    if (!p->add_generation_prompt) return SIZE_MAX;
    json_t *m = next_turn_messages(p, json_pack("{s:s, s:s}", "role", "assistant", "content", "\x01"));
    if (!m) return SIZE_MAX;
    chat_params q = *p;
    q.messages = m;
    char *txt = NULL, e[8];
    size_t len = 0, b = SIZE_MAX;
    if (render_n(t, v, &q, json_array_size(m), false, &txt, &len, e, sizeof e) == RECUR_OK)
        b = common_prefix(txt, len, out->text, out->text_len);
    free(txt);
    json_decref(m);
    return b;
}

/* A rendering of messages[0..i] and how far it agrees with the full text. */
typedef struct prefix_render {
    char  *txt;          /* NULL when the render failed */
    size_t len, agree;
} prefix_render;

static recur_status render_prefix(const jinja_template *t, const vocab *v, const chat_params *p, const chat_prompt *out,
                                  size_t n, prefix_render *r) {
    char e[8];
    r->txt = NULL;
    r->len = r->agree = 0;
    recur_status st = render_n(t, v, p, n, false, &r->txt, &r->len, e, sizeof e);
    if (st == RECUR_OK) r->agree = common_prefix(r->txt, r->len, out->text, out->text_len);
    else free(r->txt), r->txt = NULL;
    return st == RECUR_E_NOMEM ? st : RECUR_OK;
}

/* Where r agrees with the full text to its end: its length; or its length less a trailing EOS
 * text (eos, eos_len) — a template may end a conversation with EOS that a longer one has only
 * at its very end (Phi-3's `{% else %}{{ eos_token }}`); SIZE_MAX when it does not agree. */
static size_t agreed_end(const prefix_render *r, const char *eos, size_t eos_len) {
    if (!r->txt) return SIZE_MAX;
    if (r->agree == r->len) return r->len;
    bool trailer = eos_len && r->len >= eos_len && !memcmp(r->txt + r->len - eos_len, eos, eos_len);
    return trailer && r->agree >= r->len - eos_len ? r->len - eos_len : SIZE_MAX;
}

/* msg_text of every message from prefix renderings of the full text. The rendering of
 * messages[0..i + 1] is made before message i's end is settled: when it agrees with the full
 * text to its end, message i ends there at the latest (resync's bound). */
static recur_status text_spans(const jinja_template *t, const vocab *v, const chat_params *p, chat_prompt *out) {
    size_t prev = 0, eos_len = 0;
    const char *eos = vocab_eos(v) >= 0 ? vocab_token_text(v, vocab_eos(v), &eos_len) : NULL;
    if (!eos || (p->kwargs && json_object_get(p->kwargs, "eos_token"))) eos_len = 0;   /* not the text rendered */
    prefix_render cur = {0}, next = {0};
    recur_status st = out->n_messages ? render_prefix(t, v, p, out, 1, &cur) : RECUR_OK;
    for (int32_t i = 0; !st && i < out->n_messages; i++) {
        if (i + 1 < out->n_messages) st = render_prefix(t, v, p, out, (size_t)i + 2, &next);
        size_t end = prev;
        if (!st && cur.txt) {
            const size_t whole = agreed_end(&cur, eos, eos_len), hi = agreed_end(&next, eos, eos_len);
            end = whole != SIZE_MAX ? whole : cur.agree;
            if (whole == SIZE_MAX)
                end = resync(cur.txt, cur.len, out->text, prev, hi == SIZE_MAX ? out->text_len : hi < end ? end : hi, end);
            if (end < prev) end = prev;
        }
        if (i == out->n_messages - 1 && !p->add_generation_prompt) end = out->text_len;
        free(cur.txt);
        cur = next;
        next = (prefix_render){0};
        out->msg_text[i].begin = prev;
        out->msg_text[i].end = end;
        prev = end;
    }
    free(cur.txt);
    free(next.txt);
    return st;
}

/* Where the tokenized text lies in cp->text, and which tokens the tokenizer added. */
typedef struct tok_layout {
    size_t b, e;             /* bytes [b, e) were tokenized (a BOS/EOS text outside was stripped) */
    bool   added_bos, added_eos;
    bool   add_gen;          /* the prompt ends with a generation prompt */
} tok_layout;

/* Byte offset in text where each token starts (starts[n] = the end), aligning token pieces with
 * the text; an added BOS covers [0, b), an added EOS [e, text_len). Returns false when some
 * piece did not align. */
static bool align_tokens(const vocab *v, const chat_prompt *cp, const tok_layout *L, size_t *starts) {
    size_t pos = 0, cap = 256;
    char *buf = malloc(cap);
    bool exact = buf != NULL;
    for (int32_t k = 0; k < cp->n_tokens; k++) {
        starts[k] = pos;
        if (k == 0 && L->added_bos) { pos = L->b; continue; }
        if (k == cp->n_tokens - 1 && L->added_eos) { pos = cp->text_len; continue; }
        int n = buf ? vocab_token_to_piece(v, cp->tokens[k], buf, (int)cap, true) : -1;
        if (n > (int)cap) {
            char *nb = realloc(buf, (size_t)n);
            if (nb) buf = nb, cap = (size_t)n;
            n = nb ? vocab_token_to_piece(v, cp->tokens[k], buf, (int)cap, true) : -1;
        }
        size_t left = cp->text_len - pos, len = n > 0 ? (size_t)n : 0;
        if (n >= 0 && len <= left && !memcmp(cp->text + pos, buf, len)) pos += len;
        else if (len && buf[0] == ' ' && len - 1 <= left && !memcmp(cp->text + pos, buf + 1, len - 1)) pos += len - 1;
        else exact = false;   /* SPM's added space prefix, or nothing aligns: keep going */
    }
    starts[cp->n_tokens] = pos;
    free(buf);
    return exact && pos == (L->added_eos ? cp->text_len : L->e);
}

/* the first token starting at or after byte b */
static int32_t token_at(const size_t *starts, int32_t n, size_t b) {
    int32_t k = 0;
    while (k < n && starts[k] < b) k++;
    return k;
}

/* The last occurrence of needle in hay (a message's content sits at the end of its span, and a
 * span that merged a system message may repeat the same words earlier). */
static const char *last_occurrence(const char *hay, size_t n, const char *needle, size_t k) {
    const char *best = NULL;
    for (const char *p = hay; (p = memmem(p, n - (size_t)(p - hay), needle, k)) != NULL; p++) best = p;
    return best;
}

/* The token where message i's content starts: the last token starting at or before the last
 * occurrence of its content text (up to 4 KiB of it: a shorter prefix may recur inside the
 * content itself) inside its span; the span's begin when absent. */
static int32_t content_begin(const chat_prompt *cp, const size_t *starts, int32_t i, const json_t *msg) {
    const json_t *c = json_object_get(msg, "content");
    const chat_span sp = cp->msg_tokens[i];
    size_t len = json_is_string(c) ? json_string_length(c) : 0;
    if (len > 4096) len = 4096;   /* a long prefix is as good as the whole */
    const chat_text_span tx = cp->msg_text[i];
    const char *hit = len && tx.end > tx.begin
                          ? last_occurrence(cp->text + tx.begin, tx.end - tx.begin, json_string_value(c), len)
                          : NULL;
    if (!hit) return sp.begin;
    const size_t b = (size_t)(hit - cp->text);
    int32_t k = sp.begin;
    while (k + 1 < sp.end && starts[k + 1] <= b) k++;
    return k;
}

static recur_status token_spans(const vocab *v, chat_prompt *cp, const tok_layout *L, const json_t *messages) {
    size_t *starts = malloc(((size_t)cp->n_tokens + 1) * sizeof *starts);
    if (!starts) return RECUR_E_NOMEM;
    cp->spans_exact = align_tokens(v, cp, L, starts);
    int32_t prev = 0;
    for (int32_t i = 0; i < cp->n_messages; i++) {
        int32_t end = token_at(starts, cp->n_tokens, cp->msg_text[i].end);
        if (i == cp->n_messages - 1 && !L->add_gen) end = cp->n_tokens;
        if (end < prev) end = prev;
        cp->msg_tokens[i].begin = prev;
        cp->msg_tokens[i].end = end;
        cp->msg_text[i].begin = i ? cp->msg_text[i - 1].end : 0;
        cp->msg_text[i].end = end < cp->n_tokens ? starts[end] : cp->text_len;   /* whole tokens */
        prev = end;
    }
    for (int32_t i = 0; i < cp->n_messages; i++)
        cp->msg_content[i] = content_begin(cp, starts, i, json_array_get(messages, (size_t)i));
    cp->gen_prompt.begin = prev;
    cp->gen_prompt.end = cp->n_tokens;
    cp->gen_reply = -1;
    if (cp->spans_exact && cp->reply_split_byte != SIZE_MAX) {   /* the token holding that byte */
        int32_t k = prev;
        while (k + 1 < cp->n_tokens && starts[k + 1] <= cp->reply_split_byte) k++;
        cp->gen_reply = cp->reply_split_byte >= cp->text_len ? cp->n_tokens : k;
    }
    free(starts);
    return RECUR_OK;
}

/* ---- tokenizing ---------------------------------------------------------------------------- */

static bool starts_with_token(const vocab *v, recur_token t, const char *s, size_t n, bool at_end, size_t *len) {
    size_t tl = 0;
    const char *tt = t >= 0 ? vocab_token_text(v, t, &tl) : NULL;
    if (!tt || !tl || tl > n) return false;
    *len = tl;
    return !memcmp(at_end ? s + n - tl : s, tt, tl);
}

/* text tokenized as a chat prompt (invariant 1) into *tokens (malloc'd); L says how */
static recur_status tokenize_text(const vocab *v, const char *text, size_t len, recur_token **tokens,
                                  int32_t *n_tokens, tok_layout *L, char *err, size_t err_len) {
    L->b = 0;
    L->e = len;
    size_t bl = 0, el = 0;
    if (vocab_add_bos(v) && starts_with_token(v, vocab_bos(v), text, len, false, &bl)) L->b = bl;
    if (vocab_add_eos(v) && starts_with_token(v, vocab_eos(v), text + L->b, L->e - L->b, true, &el)) L->e -= el;
    int n = vocab_tokenize(v, text + L->b, L->e - L->b, NULL, 0, true, true);
    if (n < 0) return rc_fail(err, err_len, RECUR_E_INVALID, "the prompt could not be tokenized");
    *tokens = malloc(((size_t)n + 1) * sizeof **tokens);
    if (!*tokens) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    *n_tokens = vocab_tokenize(v, text + L->b, L->e - L->b, *tokens, n, true, true);
    L->added_bos = vocab_add_bos(v) && *n_tokens > 0 && (*tokens)[0] == vocab_bos(v);
    L->added_eos = vocab_add_eos(v) && *n_tokens > 0 && (*tokens)[*n_tokens - 1] == vocab_eos(v);
    return RECUR_OK;
}

static recur_status tokenize(const vocab *v, chat_prompt *cp, bool add_gen, const json_t *messages, char *err,
                             size_t err_len) {
    tok_layout L = {.add_gen = add_gen};
    recur_status st = tokenize_text(v, cp->text, cp->text_len, &cp->tokens, &cp->n_tokens, &L, err, err_len);
    if (st) return st;
    if (token_spans(v, cp, &L, messages)) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    return RECUR_OK;
}

static bool ends_in_open_think(const char *s, size_t n) {
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n' || s[n - 1] == '\t' || s[n - 1] == '\r')) n--;
    return n >= 7 && !memcmp(s + n - 7, "<think>", 7);
}

recur_status chat_apply(const jinja_template *t, const vocab *v, const chat_params *p, chat_prompt *out,
                        char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    if (!t || !v || !p || !json_is_array(p->messages))
        return rc_fail(err, err_len, RECUR_E_INVALID, "chat_apply: a template, a vocab and a messages array are needed");
    size_t n = json_array_size(p->messages);
    recur_status st = render_n(t, v, p, n, p->add_generation_prompt, &out->text, &out->text_len, err, err_len);
    if (st) return st;
    out->n_messages = (int32_t)n;
    out->msg_tokens = calloc(n + 1, sizeof *out->msg_tokens);
    out->msg_text = calloc(n + 1, sizeof *out->msg_text);
    out->msg_content = calloc(n + 1, sizeof *out->msg_content);
    out->think_open = ends_in_open_think(out->text, out->text_len);
    if (!out->msg_tokens || !out->msg_text || !out->msg_content) st = rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    if (!st && (st = text_spans(t, v, p, out))) rc_fail(err, err_len, st, "out of memory");
    if (!st) out->reply_split_byte = reply_split(t, v, p, out);
    if (!st) st = tokenize(v, out, p->add_generation_prompt, p->messages, err, err_len);
    if (st) chat_prompt_free(out);
    return st;
}

recur_status chat_reply_tokens(const jinja_template *t, const vocab *v, const chat_params *p, const json_t *reply,
                               recur_token **out, int32_t *n_out, char *err, size_t err_len) {
    *out = NULL;
    *n_out = 0;
    if (!t || !v || !p || !json_is_array(p->messages) || !json_is_object(reply))
        return rc_fail(err, err_len, RECUR_E_INVALID, "chat_reply_tokens: a template, a vocab, messages and a reply are needed");
    json_t *m = next_turn_messages(p, json_deep_copy(reply));
    if (!m) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    chat_params q = *p;
    q.messages = m;
    char *txt = NULL;
    size_t len = 0;
    recur_status st = render_n(t, v, &q, json_array_size(m), false, &txt, &len, err, err_len);
    tok_layout L;
    if (!st) st = tokenize_text(v, txt, len, out, n_out, &L, err, err_len);
    free(txt);
    json_decref(m);
    return st;
}

void chat_prompt_free(chat_prompt *p) {
    if (!p) return;
    free(p->text);
    free(p->tokens);
    free(p->msg_tokens);
    free(p->msg_text);
    free(p->msg_content);
    memset(p, 0, sizeof *p);
}

/* ---- reasoning ------------------------------------------------------------------------------ */

static bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static void trim(const char **s, size_t *n) {
    while (*n && is_space(**s)) { (*s)++; (*n)--; }
    while (*n && is_space((*s)[*n - 1])) (*n)--;
}

chat_reasoning chat_split_reasoning(const char *text, size_t len, bool think_open) {
    chat_reasoning r = {.reasoning = text, .content = text, .content_len = len};
    size_t i = 0;
    while (i < len && is_space(text[i])) i++;
    bool tag = len - i >= 7 && !memcmp(text + i, "<think>", 7);
    if (!tag && !think_open) return r;
    size_t b = tag ? i + 7 : 0;
    const char *close = len > b ? memmem(text + b, len - b, "</think>", 8) : NULL;
    r.found = true;
    r.closed = close != NULL;
    r.reasoning = text + b;
    r.reasoning_len = close ? (size_t)(close - text) - b : len - b;
    trim(&r.reasoning, &r.reasoning_len);
    r.content = close ? close + 8 : text + len;
    r.content_len = close ? len - (size_t)(close + 8 - text) : 0;
    trim(&r.content, &r.content_len);
    return r;
}
