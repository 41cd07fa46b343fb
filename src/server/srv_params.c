/* srv_params.c — request fields into task params, with llama-server's names, aliases, defaults
 * and limits (server-schema.cpp): null means absent; a known field of the wrong type is a 400;
 * soft limits clamp (top_p to [0, 1], temperature to >= 0), hard limits refuse. */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/timing.h"
#include "server/srv.h"
#include "server/srv_ban.h"

int srv_reasoning_parse(const char *s) {
    if (!strcmp(s, "auto")) return SRV_REASONING_AUTO;
    if (!strcmp(s, "none")) return SRV_REASONING_NONE;
    if (!strcmp(s, "deepseek")) return SRV_REASONING_DEEPSEEK;
    if (!strcmp(s, "deepseek-legacy")) return SRV_REASONING_DEEPSEEK_LEGACY;
    return -1;
}

static const char *reasoning_name(srv_reasoning r) {
    static const char *names[] = { "auto", "none", "deepseek", "deepseek-legacy" };
    return names[r];
}

/* ---- typed getters ---------------------------------------------------------------------------- */

static const json_t *present(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

static recur_status type_err(const char *k, const char *want, char *err, size_t err_len) {
    return rc_fail(err, err_len, RECUR_E_INVALID, "Field '%s': must be %s", k, want);
}

recur_status srv_get_bool(const json_t *o, const char *k, bool *v, char *err, size_t err_len) {
    const json_t *j = present(o, k);
    if (!j) return RECUR_OK;
    if (!json_is_boolean(j)) return type_err(k, "a boolean", err, err_len);
    *v = json_is_true(j);
    return RECUR_OK;
}

recur_status srv_get_int(const json_t *o, const char *k, int64_t *v, char *err, size_t err_len) {
    const json_t *j = present(o, k);
    if (!j) return RECUR_OK;
    if (!json_is_number(j)) return type_err(k, "a number", err, err_len);
    double d = json_number_value(j);
    if (!(d >= -9.2e18 && d <= 9.2e18)) return type_err(k, "a finite number", err, err_len);
    *v = json_is_integer(j) ? (int64_t)json_integer_value(j) : (int64_t)d;
    return RECUR_OK;
}

recur_status srv_get_num(const json_t *o, const char *k, double *v, char *err, size_t err_len) {
    const json_t *j = present(o, k);
    if (!j) return RECUR_OK;
    if (!json_is_number(j)) return type_err(k, "a number", err, err_len);
    *v = json_number_value(j);
    return RECUR_OK;
}

recur_status srv_get_str(const json_t *o, const char *k, const char **v, char *err, size_t err_len) {
    const json_t *j = present(o, k);
    if (!j) return RECUR_OK;
    if (!json_is_string(j)) return type_err(k, "a string", err, err_len);
    *v = json_string_value(j);
    return RECUR_OK;
}

/* a float field clamped to [lo, hi] */
static recur_status get_float(const json_t *o, const char *k, float *v, double lo, double hi, char *err, size_t err_len) {
    double d = *v;
    recur_status st = srv_get_num(o, k, &d, err, err_len);
    if (st) return st;
    if (isnan(d)) return type_err(k, "a number", err, err_len);
    *v = (float)(d < lo ? lo : d > hi ? hi : d);
    return RECUR_OK;
}

/* an int field; [lo, hi] refuses out-of-range values (hard) or clamps (soft) */
static recur_status get_i32(const json_t *o, const char *k, int32_t *v, int64_t lo, int64_t hi, bool hard,
                            char *err, size_t err_len) {
    int64_t x = *v;
    recur_status st = srv_get_int(o, k, &x, err, err_len);
    if (st) return st;
    if (x < lo || x > hi) {
        if (hard)
            return rc_fail(err, err_len, RECUR_E_INVALID, "Field '%s': Value must be between %lld <= value <= %lld, but got %lld",
                           k, (long long)lo, (long long)hi, (long long)x);
        x = x < lo ? lo : hi;
    }
    *v = (int32_t)x;
    return RECUR_OK;
}

/* ---- tokens ----------------------------------------------------------------------------------- */

int srv_tokenize(const srv_server *s, const char *text, size_t len, bool add_special, bool parse_special,
                 recur_token **out) {
    int cap = (int)(len < 1u << 28 ? len : 1u << 28) + 8;
    recur_token *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    int n = vocab_tokenize(s->vocab, text, len, ids, cap, add_special, parse_special);
    if (n > cap) {
        recur_token *bigger = realloc(ids, (size_t)n * sizeof *ids);
        if (!bigger) { free(ids); return -1; }
        ids = bigger;
        n = vocab_tokenize(s->vocab, text, len, ids, n, add_special, parse_special);
    }
    if (n < 0) { free(ids); return -1; }
    *out = ids;
    return n;
}

char *srv_detokenize(const srv_server *s, const recur_token *t, int n, size_t *len) {
    int cap = 64 + 8 * n, got;
    char *buf = malloc((size_t)cap);
    if (!buf) return NULL;
    got = vocab_detokenize(s->vocab, t, n, buf, cap, false, false);
    if (got >= cap) {
        char *nb = realloc(buf, (size_t)got + 1);
        if (!nb) { free(buf); return NULL; }
        buf = nb;
        cap = got + 1;
        got = vocab_detokenize(s->vocab, t, n, buf, cap, false, false);
    }
    if (got < 0) { free(buf); return NULL; }
    buf[got] = 0;
    if (len) *len = (size_t)got;
    return buf;
}

char *srv_piece(const srv_server *s, recur_token t, size_t *len) {
    char small[256];
    int n = vocab_token_to_piece(s->vocab, t, small, sizeof small, true);
    if (n < 0) n = 0;
    char *out = malloc((size_t)n + 1);
    if (!out) return NULL;
    if (n <= (int)sizeof small) memcpy(out, small, (size_t)n);
    else vocab_token_to_piece(s->vocab, t, out, n, true);
    out[n] = 0;
    if (len) *len = (size_t)n;
    return out;
}

/* ---- stop strings and logit bias ------------------------------------------------------------ */

/* Limits on what one request may ask of the scheduler thread, which serves every slot: each
 * decoded token is checked against every stop string (time ~ count x length, and the held-back
 * search ~ length^2 at worst); every probability is a JSON object per token. 400 beyond them. */
#define SRV_MAX_STOP     256          /* stop strings per request (OpenAI allows 4) */
#define SRV_MAX_STOP_LEN 256          /* bytes per stop string */
#define SRV_MAX_N_PROBS  100          /* n_probs / logprobs / top_logprobs (OpenAI: 20) */

static recur_status parse_stop(const json_t *body, srv_task_params *p, char *err, size_t err_len) {
    const json_t *j = present(body, "stop");
    if (!j) return RECUR_OK;
    if (!json_is_string(j) && !json_is_array(j)) return type_err("stop", "a string or an array of strings", err, err_len);
    size_t n = json_is_string(j) ? 1 : json_array_size(j);
    if (n > SRV_MAX_STOP)
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'stop': at most %d stop strings, got %zu", SRV_MAX_STOP, n);
    p->stop = calloc(n ? n : 1, sizeof *p->stop);
    if (!p->stop) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const json_t *w = json_is_string(j) ? j : json_array_get(j, i);
        if (!json_is_string(w)) return type_err("stop", "a string or an array of strings", err, err_len);
        if (json_string_length(w) > SRV_MAX_STOP_LEN)
            return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'stop': a stop string is at most %d bytes, got %zu",
                           SRV_MAX_STOP_LEN, json_string_length(w));
        if (!json_string_length(w)) continue;   /* empty words are dropped, as llama-server does */
        if (!(p->stop[p->n_stop] = strdup(json_string_value(w)))) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
        p->n_stop++;
    }
    return RECUR_OK;
}

typedef struct bias_list {
    recur_logit_bias *v;
    int32_t n, cap;
} bias_list;

static bool bias_push(bias_list *l, recur_token t, float b) {
    if (l->n == l->cap) {
        int32_t cap = l->cap ? l->cap * 2 : 16;
        recur_logit_bias *nv = realloc(l->v, (size_t)cap * sizeof *nv);
        if (!nv) return false;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = (recur_logit_bias){ t, b };
    return true;
}

/* a number, or false (ban); anything else is skipped, as llama-server does */
static bool bias_value(const json_t *v, float *b) {
    if (json_is_number(v)) { *b = (float)json_number_value(v); return true; }
    if (json_is_false(v)) { *b = -INFINITY; return true; }
    return false;
}

/* key: a token id, or text whose tokens (no specials) all get the bias */
static bool bias_key(srv_server *s, bias_list *l, const char *key, bool is_id, long id, float b) {
    int n_vocab = vocab_n_tokens(s->vocab);
    if (is_id) return id < 0 || id >= n_vocab || bias_push(l, (recur_token)id, b);
    recur_token *ids = NULL;
    int n = srv_tokenize(s, key, strlen(key), false, false, &ids);
    bool ok = n >= 0;
    for (int i = 0; ok && i < n; i++) ok = bias_push(l, ids[i], b);
    free(ids);
    return ok;
}

static recur_status parse_logit_bias(srv_server *s, const json_t *body, srv_task_params *p, char *err, size_t err_len) {
    const json_t *j = present(body, "logit_bias");
    if (!j) return RECUR_OK;
    if (!json_is_array(j) && !json_is_object(j)) return type_err("logit_bias", "an array or an object", err, err_len);
    bias_list l = {0};
    bool ok = true;
    float b;
    if (json_is_array(j)) {
        size_t i;
        const json_t *el;
        json_array_foreach(j, i, el) {
            if (!ok) break;
            if (!json_is_array(el) || json_array_size(el) != 2 || !bias_value(json_array_get(el, 1), &b)) continue;
            const json_t *k = json_array_get(el, 0);
            if (json_is_integer(k)) ok = bias_key(s, &l, NULL, true, (long)json_integer_value(k), b);
            else if (json_is_string(k)) ok = bias_key(s, &l, json_string_value(k), false, 0, b);
        }
    } else {
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)j, key, v) {
            if (!ok) break;
            if (!bias_value(v, &b)) continue;
            char *end;
            long id = strtol(key, &end, 10);
            ok = bias_key(s, &l, key, *key && !*end, id, b);
        }
    }
    if (!ok) { free(l.v); return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory"); }
    /* more entries than tokens is never needed (one entry per token says it all) and would
     * make every sampling step of the scheduler walk them */
    if (l.n > vocab_n_tokens(s->vocab)) {
        free(l.v);
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'logit_bias': %d entries, more than the %d tokens of the vocabulary",
                       (int)l.n, (int)vocab_n_tokens(s->vocab));
    }
    p->sampling.logit_bias = l.v;
    p->sampling.n_logit_bias = l.n;
    return RECUR_OK;
}

/* ---- the whole request ------------------------------------------------------------------------- */

static uint64_t random_seed(void) {
    uint64_t v = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) v = (uint64_t)rc_time_us() * 0x9E3779B97F4A7C15ull;
    if (fd >= 0) close(fd);
    return v & 0xffffffffu;   /* llama-server's seeds are 32-bit */
}

static recur_status parse_sampling(const json_t *b, recur_sampler_params *sp, char *err, size_t err_len) {
    recur_status st;
    if ((st = get_float(b, "temperature", &sp->temp, 0, INFINITY, err, err_len)) ||
        (st = get_i32(b, "top_k", &sp->top_k, 0, INT32_MAX, false, err, err_len)) ||
        (st = get_float(b, "top_p", &sp->top_p, 0, 1, err, err_len)) ||
        (st = get_float(b, "min_p", &sp->min_p, 0, 1, err, err_len)) ||
        (st = get_float(b, "typical_p", &sp->typical_p, -INFINITY, INFINITY, err, err_len)) ||
        (st = get_i32(b, "repeat_last_n", &sp->penalty_last_n, -1, INT32_MAX, true, err, err_len)) ||
        (st = get_float(b, "repeat_penalty", &sp->penalty_repeat, -INFINITY, INFINITY, err, err_len)) ||
        (st = get_float(b, "presence_penalty", &sp->penalty_present, -INFINITY, INFINITY, err, err_len)) ||
        (st = get_float(b, "frequency_penalty", &sp->penalty_freq, -INFINITY, INFINITY, err, err_len)) ||
        (st = get_i32(b, "min_keep", &sp->min_keep, 0, INT32_MAX, true, err, err_len)))
        return st;
    return RECUR_OK;
}

/* n_predict and its aliases (the first present wins, as llama-server's alias order) */
static recur_status parse_n_predict(const json_t *b, int32_t *n, char *err, size_t err_len) {
    static const char *names[] = { "n_predict", "max_completion_tokens", "max_tokens" };
    for (int i = 0; i < 3; i++)
        if (present(b, names[i])) return get_i32(b, names[i], n, -1, INT32_MAX, true, err, err_len);
    return RECUR_OK;
}

/* n_probs; the OAI forms: logprobs (bool, chat) + top_logprobs, or logprobs (int, completions) */
static recur_status parse_probs(const json_t *b, srv_gen_opts *g, char *err, size_t err_len) {
    recur_status st;
    const json_t *lp = present(b, "logprobs");
    if (g->fmt == SRV_FMT_OAI_CHAT) {
        bool on = false;
        if ((st = srv_get_bool(b, "logprobs", &on, err, err_len))) return st;
        if (on) {
            g->n_probs = 20;
            return get_i32(b, "top_logprobs", &g->n_probs, 0, SRV_MAX_N_PROBS, true, err, err_len);
        }
        if (present(b, "top_logprobs"))
            return rc_fail(err, err_len, RECUR_E_INVALID, "top_logprobs requires logprobs to be set to true");
    }
    if (present(b, "n_probs")) return get_i32(b, "n_probs", &g->n_probs, 0, SRV_MAX_N_PROBS, true, err, err_len);
    if (lp && g->fmt != SRV_FMT_OAI_CHAT) return get_i32(b, "logprobs", &g->n_probs, 0, SRV_MAX_N_PROBS, true, err, err_len);
    return RECUR_OK;
}

static json_t *settings_json(const srv_task_params *p, const srv_gen_opts *g) {
    const recur_sampler_params *sp = &p->sampling;
    json_t *stop = json_array(), *lb = json_array();
    for (int32_t i = 0; i < p->n_stop; i++) json_array_append_new(stop, json_string(p->stop[i]));
    for (int32_t i = 0; i < sp->n_logit_bias; i++) {
        float b = sp->logit_bias[i].bias;
        json_array_append_new(lb, json_pack("{s:o, s:i}", "bias", isfinite(b) ? json_real(b) : json_null(),
                                            "token", (int)sp->logit_bias[i].token));
    }
    return json_pack("{s:I, s:f, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f, s:i, s:i, s:b, s:b, s:b, s:o, s:o, s:i, s:s}",
                     "seed", (json_int_t)sp->seed, "temperature", (double)sp->temp, "top_k", (int)sp->top_k,
                     "top_p", (double)sp->top_p, "min_p", (double)sp->min_p, "typical_p", (double)sp->typical_p,
                     "repeat_last_n", (int)sp->penalty_last_n, "repeat_penalty", (double)sp->penalty_repeat,
                     "presence_penalty", (double)sp->penalty_present, "frequency_penalty", (double)sp->penalty_freq,
                     "n_predict", (int)p->n_predict, "n_probs", (int)p->n_probs, "ignore_eos", p->ignore_eos,
                     "stream", g->stream, "cache_prompt", p->cache_prompt, "stop", stop, "logit_bias", lb,
                     "min_keep", (int)sp->min_keep, "reasoning_format", reasoning_name(g->reasoning));
}

recur_status srv_params_parse(srv_server *s, const json_t *b, srv_task *t, srv_gen_opts *g, char *err, size_t err_len) {
    srv_task_params *p = &t->params;
    p->sampling = s->o.sampling;
    p->sampling.logit_bias = NULL;
    p->sampling.n_logit_bias = 0;
    p->n_predict = s->o.n_predict;
    g->reasoning = s->o.reasoning;
    int64_t seed = s->o.seed_random ? -1 : (int64_t)s->o.sampling.seed, id_slot = -1;
    const char *rf = NULL;
    recur_status st;
    json_t *so = json_object_get(b, "stream_options");
    if ((st = srv_get_bool(b, "stream", &g->stream, err, err_len)) ||
        (st = srv_get_bool(b, "cache_prompt", &p->cache_prompt, err, err_len)) ||
        (st = srv_get_bool(b, "return_tokens", &g->return_tokens, err, err_len)) ||
        (st = srv_get_bool(b, "ignore_eos", &p->ignore_eos, err, err_len)) ||
        (st = srv_get_int(b, "seed", &seed, err, err_len)) ||
        (st = srv_get_int(b, "id_slot", &id_slot, err, err_len)) ||
        (st = srv_get_str(b, "reasoning_format", &rf, err, err_len)) ||
        (st = parse_sampling(b, &p->sampling, err, err_len)) ||
        (st = parse_n_predict(b, &p->n_predict, err, err_len)) ||
        (st = parse_probs(b, g, err, err_len)) ||
        (st = parse_stop(b, p, err, err_len)) ||
        (st = parse_logit_bias(s, b, p, err, err_len)) ||
        (st = srv_ban_parse(b, s->o.ban_strings, s->o.n_ban_strings, s->o.banned_n, &p->ban, err, err_len)))
        return st;
    int64_t n_cmpl = 1;
    if ((st = srv_get_int(b, "n_cmpl", &n_cmpl, err, err_len)) ||
        (!present(b, "n_cmpl") && (st = srv_get_int(b, "n", &n_cmpl, err, err_len))))
        return st;
    if (n_cmpl != 1) return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "Field 'n': only one completion per request is supported");
    if (so && json_is_object(so) && (st = srv_get_bool(so, "include_usage", &g->include_usage, err, err_len))) return st;
    if (rf) {
        int r = srv_reasoning_parse(rf);
        if (r < 0) return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'reasoning_format': unknown format '%s'", rf);
        g->reasoning = (srv_reasoning)r;
    }
    if (id_slot < -1 || id_slot > INT32_MAX) return rc_fail(err, err_len, RECUR_E_INVALID, "Field 'id_slot': invalid slot id");
    p->id_slot = (int32_t)id_slot;
    p->n_probs = g->n_probs;
    /* llama-server: -1 (or any value >= 2^32) is a random seed */
    p->sampling.seed = seed < 0 || seed > 0xffffffffll ? random_seed() : (uint64_t)seed;
    if (g->fmt == SRV_FMT_NATIVE && !(g->settings = settings_json(p, g)))
        return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    return RECUR_OK;
}

void srv_gen_opts_free(srv_gen_opts *g) {
    free(g->prompt_text);
    json_decref(g->settings);
    json_decref(g->chat_body);
    g->prompt_text = NULL;
    g->settings = NULL;
    g->chat_body = NULL;
}
