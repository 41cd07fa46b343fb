/* fuzz_request.c — libFuzzer target for request bodies: the input is the body of a POST, parsed
 * as recur-server's routes parse it (json_loadb, JSON_DECODE_ANY, objects only), then handed to
 * every parser a route runs before it submits a task, with no HTTP in between:
 *  - /completion and /v1/completions: srv_prompt_parse + srv_params_parse (both formats);
 *  - /v1/chat/completions and /apply-template: srv_chat_prompt (messages, tools, kwargs through
 *    the Qwen3 chat template) + srv_params_parse, and the reply side of the rendered text
 *    (srv_chat_message, streamed reasoning/content deltas);
 *  - /tokenize and /detokenize: the fields, srv_tokenize, srv_piece, srv_detokenize.
 * What a parser accepts must then be usable: the sampler is built from the parsed params and
 * draws a token, the stop strings are searched, the native generation_settings serialize.
 * Any crash, leak, UB report or hang is a bug; so is an accepted token id outside the
 * vocabulary (abort).
 *
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_request
 *   /tmp/build-fuzz/fuzz_request -dict=tests/fuzz/request.dict /tmp/req-corpus \
 *       /tmp/build-fuzz/fuzz_corpus/request
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "model/model.h"
#include "sample/stop.h"
#include "server/srv.h"

#define MODEL RECUR_TESTDATA "/models/pub-qwen3-Q8_0.gguf"
#define TEMPLATE RECUR_TESTDATA "/templates/jinja/Qwen-Qwen3-0.6B.jinja"

static volatile uint64_t g_sink;

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = calloc(1, 1 << 20);
    size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* The server the parsers see: the model's vocab, its template, recur-server's defaults. */
static srv_server *server(void) {
    static srv_server s;
    static bool ready;
    if (ready) return &s;
    char err[512];
    recur_model *m = NULL;
    char *src = read_all(TEMPLATE);
    if (!src || recur_model_load(MODEL, NULL, &m, err, sizeof err)) abort();   /* the test data must load */
    s.model = m;
    s.vocab = m->vocab;
    if (!(s.tmpl = jinja_parse(src, strlen(src), err, sizeof err))) abort();
    s.tmpl_src = src;
    s.o.sampling = recur_sampler_default_params();
    s.o.n_predict = -1;
    s.o.seed_random = true;
    s.o.jinja = true;
    s.o.max_body = 32u << 20;
    ready = true;
    return &s;
}

static void check_ids(const srv_server *s, const recur_token *ids, int n) {
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab_n_tokens(s->vocab)) abort();
}

/* What the scheduler does with accepted params: a sampler, one draw, the stop-string search. */
static void use_params(srv_server *s, const srv_task *t, const char *text, size_t len) {
    const srv_task_params *p = &t->params;
    const int32_t n_vocab = vocab_n_tokens(s->vocab);
    for (int32_t i = 0; i < p->sampling.n_logit_bias; i++)
        if (p->sampling.logit_bias[i].token < 0 || p->sampling.logit_bias[i].token >= n_vocab) abort();
    if (p->n_probs < 0 || p->id_slot < -1) abort();
    recur_sampler *smp = recur_sampler_new(&p->sampling, n_vocab);
    if (!smp) abort();   /* validated params must make a sampler */
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits) abort();
    for (int32_t i = 0; i < n_vocab; i++) logits[i] = (float)((i * 37) % 101) / 10.0f;
    for (int32_t i = 0; i < t->n_prompt && i < 64; i++) recur_sampler_accept(smp, t->prompt[i]);
    const recur_token tok = recur_sampler_sample(smp, logits);
    if (tok < 0 || tok >= n_vocab) abort();
    recur_sampler_free(smp);
    free(logits);
    size_t at = 0, safe = 0;
    if (p->n_stop > 0 && text) {
        const int k = sample_stop_find(text, len, 0, (const char *const *)p->stop, p->n_stop, &at, &safe);
        if (k >= p->n_stop || at > len || safe > len) abort();
    }
}

static void run_completion(srv_server *s, const json_t *body, srv_fmt fmt) {
    char err[512];
    unsigned status = 400;
    srv_task *t = srv_task_new(1);
    srv_gen_opts g = { .fmt = fmt };
    if (!t) return;
    recur_status st = srv_prompt_parse(s, body, t, &g.prompt_text, &status, err, sizeof err);
    if (!st) st = srv_params_parse(s, body, t, &g, err, sizeof err);
    if (!st) {
        check_ids(s, t->prompt, t->n_prompt);
        use_params(s, t, g.prompt_text, g.prompt_text ? strlen(g.prompt_text) : 0);
        char *settings = g.settings ? json_dumps(g.settings, JSON_COMPACT) : NULL;
        if (fmt == SRV_FMT_NATIVE && !settings) abort();
        free(settings);
    }
    srv_task_unref(t);
    srv_gen_opts_free(&g);
}

static void run_chat(srv_server *s, const json_t *body) {
    char err[1024], *text = NULL;
    size_t len = 0;
    recur_token *toks = NULL;
    int32_t n = 0;
    unsigned status = 400;
    srv_gen_opts g = { .fmt = SRV_FMT_OAI_CHAT };
    srv_task *hints = srv_task_new(3);   /* the prompt cache's checkpoint hints are made too */
    recur_status st = srv_chat_prompt(s, body, true, &text, &len, &toks, &n, &g.think_open, hints, &status, err,
                                      sizeof err);
    if (!st) check_ids(s, toks, n);
    for (int32_t i = 0; !st && hints && i < hints->n_ckpt_at; i++)   /* increasing, inside the prompt */
        if (hints->ckpt_at[i] < 0 || hints->ckpt_at[i] >= n - 1 || (i && hints->ckpt_at[i] <= hints->ckpt_at[i - 1]))
            abort();
    srv_task_unref(hints);
    free(toks);
    if (st) return;
    srv_task *t = srv_task_new(2);
    if (t && !srv_params_parse(s, body, t, &g, err, sizeof err)) use_params(s, t, text, len);
    srv_task_unref(t);
    /* the rendered prompt as if it were generated text: the final message and the stream */
    json_t *m = srv_chat_message(&g, text, len);
    g_sink += m != NULL;
    json_decref(m);
    srv_split_state ss = {0};
    for (size_t end = 0;; end = end + 7 < len ? end + 7 : len) {
        char *r = NULL, *c = NULL;
        srv_chat_split_deltas(&g, &ss, text, end, end == len, &r, &c);
        free(r);
        free(c);
        if (end == len) break;
    }
    free(text);
    srv_gen_opts_free(&g);
}

static void run_tokens(srv_server *s, const json_t *body) {
    char err[256];
    const char *content = NULL;
    bool add_special = false, parse_special = true;
    if (!srv_get_str(body, "content", &content, err, sizeof err) &&
        !srv_get_bool(body, "add_special", &add_special, err, sizeof err) &&
        !srv_get_bool(body, "parse_special", &parse_special, err, sizeof err) && content) {
        recur_token *ids = NULL;
        const int n = srv_tokenize(s, content, strlen(content), add_special, parse_special, &ids);
        if (n >= 0) check_ids(s, ids, n);
        for (int i = 0; i < n && i < 256; i++) {
            size_t plen = 0;
            free(srv_piece(s, ids[i], &plen));
        }
        free(ids);
    }
    const json_t *toks = json_object_get(body, "tokens");
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0, k = 0;
    recur_token *ids = malloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; ids && i < n; i++) {
        const json_t *el = json_array_get(toks, i);
        json_int_t v = json_is_integer(el) ? json_integer_value(el) : -1;
        if (v >= 0 && v < vocab_n_tokens(s->vocab)) ids[k++] = (recur_token)v;
    }
    size_t len = 0;
    if (ids) free(srv_detokenize(s, ids, (int)k, &len));
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    srv_server *s = server();
    json_error_t je;
    json_t *body = json_loadb((const char *)data, size, JSON_DECODE_ANY, &je);
    if (!body) return 0;
    if (json_is_object(body)) {
        run_completion(s, body, SRV_FMT_NATIVE);
        run_completion(s, body, SRV_FMT_OAI_CMPL);
        run_chat(s, body);
        run_tokens(s, body);
    }
    json_decref(body);
    return 0;
}
