/* srv_ban.c — a request's banned strings and regexes into a srv_ban_cfg (fields in srv_ban.h). */
#include "server/srv_ban.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/srv.h"

void srv_ban_cfg_free(srv_ban_cfg *c) {
    if (!c) return;
    sample_ban_free(c->set);
    free(c);
}

static const json_t *present(const json_t *o, const char *k) {
    const json_t *v = json_object_get(o, k);
    return v && !json_is_null(v) ? v : NULL;
}

/* Patterns taken so far (SRV_BAN_MAX_*). */
typedef struct ban_total {
    size_t bytes;
} ban_total;

static recur_status add_one(sample_ban *set, sample_ban_kind kind, const char *k, const char *pat, size_t len,
                            ban_total *t, char *err, size_t err_len) {
    if (len > SRV_BAN_MAX_LEN)
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field '%s': a banned string or regex is at most %d bytes, got %zu",
                       k, SRV_BAN_MAX_LEN, len);
    if ((t->bytes += len) > SRV_BAN_MAX_BYTES)
        return rc_fail(err, err_len, RECUR_E_INVALID,
                       "Field '%s': banned strings and regexes are at most %d bytes in all, got more", k,
                       SRV_BAN_MAX_BYTES);
    return sample_ban_add(set, kind, pat, len, err, err_len);
}

/* Adds the strings of array field k (non-strings skipped, as ik_llama). */
static recur_status add_array(sample_ban *set, const json_t *body, const char *k, sample_ban_kind kind, ban_total *t,
                              char *err, size_t err_len) {
    const json_t *a = present(body, k);
    if (!a) return RECUR_OK;
    if (!json_is_array(a)) return rc_fail(err, err_len, RECUR_E_INVALID, "Field '%s': must be an array of strings", k);
    size_t i;
    const json_t *v;
    json_array_foreach(a, i, v) {
        if (!json_is_string(v)) continue;
        const recur_status st = add_one(set, kind, k, json_string_value(v), json_string_length(v), t, err, err_len);
        if (st) return st;
    }
    return RECUR_OK;
}

static recur_status get_i32(const json_t *b, const char *k, int32_t *v, int64_t lo, int64_t hi, char *err,
                            size_t err_len) {
    int64_t x = *v;
    const recur_status st = srv_get_int(b, k, &x, err, err_len);
    if (st) return st;
    if (x < lo || x > hi)
        return rc_fail(err, err_len, RECUR_E_INVALID, "Field '%s': Value must be between %lld <= value <= %lld, but got %lld",
                       k, (long long)lo, (long long)hi, (long long)x);
    *v = (int32_t)x;
    return RECUR_OK;
}

static size_t array_len(const json_t *body, const char *k) {
    const json_t *a = present(body, k);
    return json_is_array(a) ? json_array_size(a) : 0;
}

static recur_status parse_patterns(const json_t *body, char *const *file_strings, int n_file, sample_ban *set,
                                   char *err, size_t err_len) {
    const bool own = present(body, "banned_strings") != NULL;
    const size_t n = (own ? array_len(body, "banned_strings") : (size_t)n_file) + array_len(body, "banned_regex") +
                     array_len(body, "banned_regex_case_insensitive");
    if (n > SRV_BAN_MAX_PATTERNS)
        return rc_fail(err, err_len, RECUR_E_INVALID,
                       "Fields 'banned_strings', 'banned_regex', 'banned_regex_case_insensitive': at most %d patterns "
                       "in all, got %zu", SRV_BAN_MAX_PATTERNS, n);
    ban_total t = { 0 };
    recur_status st = RECUR_OK;
    if (own) st = add_array(set, body, "banned_strings", SAMPLE_BAN_STRING, &t, err, err_len);
    for (int i = 0; !own && !st && i < n_file; i++)
        st = add_one(set, SAMPLE_BAN_STRING, "banned_strings", file_strings[i], strlen(file_strings[i]), &t, err,
                     err_len);
    if (!st) st = add_array(set, body, "banned_regex", SAMPLE_BAN_REGEX, &t, err, err_len);
    if (!st) st = add_array(set, body, "banned_regex_case_insensitive", SAMPLE_BAN_REGEX_CI, &t, err, err_len);
    return st;
}

recur_status srv_ban_parse(const json_t *body, char *const *file_strings, int n_file, int32_t banned_n_default,
                           srv_ban_cfg **out, char *err, size_t err_len) {
    *out = NULL;
    if (!present(body, "banned_strings") && n_file == 0 && !present(body, "banned_regex") &&
        !present(body, "banned_regex_case_insensitive"))
        return RECUR_OK;   /* the common request: nothing to compile */
    srv_ban_cfg *c = calloc(1, sizeof *c);
    if (!c || !(c->set = sample_ban_new())) {
        free(c);
        return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory (banned strings)");
    }
    c->banned_n = banned_n_default;
    c->rewind_count_max = -1;
    int32_t window = 0;
    double bias = -999.0;
    recur_status st = parse_patterns(body, file_strings, n_file, c->set, err, err_len);
    if (!st) st = get_i32(body, "banned_n", &c->banned_n, -1, INT32_MAX, err, err_len);
    if (!st) st = get_i32(body, "rewind_count_max", &c->rewind_count_max, -1, INT32_MAX, err, err_len);
    if (!st) st = get_i32(body, "banbuffer_size", &window, 0, SRV_BAN_WINDOW_MAX, err, err_len);
    if (!st) st = srv_get_num(body, "banned_bias", &bias, err, err_len);
    if (!st) st = srv_get_bool(body, "saturate_predict", &c->saturate_predict, err, err_len);
    if (!st && isnan(bias)) st = rc_fail(err, err_len, RECUR_E_INVALID, "Field 'banned_bias': must be a number");
    if (st || sample_ban_count(c->set) == 0) {
        srv_ban_cfg_free(c);
        return st;
    }
    c->bias = (float)bias;
    /* ik_llama: the longest pattern in bytes + 1 tokens (a token has at least one byte) */
    const size_t longest = sample_ban_max_len(c->set) + 1;
    c->window = window > 0 ? window : longest < SRV_BAN_WINDOW_MAX ? (int32_t)longest : SRV_BAN_WINDOW_MAX;
    *out = c;
    return RECUR_OK;
}
