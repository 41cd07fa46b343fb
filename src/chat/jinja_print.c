/* jinja_print.c — values as text, as Python writes them: str() and repr() (None, True, 1.0,
 * ['a', 'b'], {'k': 1}), json.dumps(ensure_ascii=False) for `tojson`, and the JSON input.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- buffers ----------------------------------------------------------------------------- */

bool jbuf_add(jrs *r, jbuf *b, const char *s, size_t n) {
    if (r->failed) return false;
    if (n > r->max_str || b->n > r->max_str - n)
        return jrs_fail(r, NULL, RECUR_E_FULL, "output or string longer than %zu bytes", r->max_str);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return jrs_nomem(r);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool jbuf_addc(jrs *r, jbuf *b, char c) { return jbuf_add(r, b, &c, 1); }

bool jbuf_addf(jrs *r, jbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return jrs_fail(r, NULL, RECUR_E_INVALID, "formatting failed");
    return jbuf_add(r, b, tmp, (size_t)n);
}

void jbuf_free(jbuf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---- numbers ------------------------------------------------------------------------------- */

/* Places the shortest round-trip digits of |f| in Python's repr layout. */
static void layout_float(const char *digits, int nd, int exp, bool neg, char *buf, size_t n) {
    char out[64];
    size_t o = 0;
    if (neg) out[o++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[o++] = '0';
            for (int i = 0; i < nd; i++) out[o++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++) out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > exp + 1) for (int i = exp + 1; i < nd; i++) out[o++] = digits[i];
            else out[o++] = '0';
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++) out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    snprintf(buf, n, "%s", out);
}

bool jfloat_repr(double f, char *buf, size_t n) {
    if (isnan(f)) { snprintf(buf, n, "nan"); return true; }
    if (isinf(f)) { snprintf(buf, n, f < 0 ? "-inf" : "inf"); return true; }
    char tmp[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX */
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[24];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.' && nd < 20) digits[nd++] = *p;
    int exp = *p == 'e' ? atoi(p + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    layout_float(digits, nd, exp, neg, buf, n);
    return true;
}

/* ---- str / repr ------------------------------------------------------------------------------ */

static bool write_repr(jrs *r, jbuf *b, jv v, int depth);

static bool repr_string(jrs *r, jbuf *b, const jstr *s) {
    bool has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jbuf_addc(r, b, q)) return false;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        bool ok;
        if (c == '\\' || c == (unsigned char)q) ok = jbuf_addc(r, b, '\\') && jbuf_addc(r, b, (char)c);
        else if (c == '\n') ok = jbuf_add(r, b, "\\n", 2);
        else if (c == '\r') ok = jbuf_add(r, b, "\\r", 2);
        else if (c == '\t') ok = jbuf_add(r, b, "\\t", 2);
        else if (c < 0x20 || c == 0x7F) ok = jbuf_addf(r, b, "\\x%02x", c);
        else ok = jbuf_addc(r, b, (char)c);
        if (!ok) return false;
    }
    return jbuf_addc(r, b, q);
}

static bool repr_items(jrs *r, jbuf *b, const jv *items, size_t n, int depth) {
    for (size_t i = 0; i < n; i++)
        if ((i && !jbuf_add(r, b, ", ", 2)) || !write_repr(r, b, items[i], depth + 1)) return false;
    return true;
}

static bool repr_dict(jrs *r, jbuf *b, const jdict *d, int depth) {
    if (!jbuf_addc(r, b, '{')) return false;
    for (size_t i = 0; i < d->n; i++) {
        if ((i && !jbuf_add(r, b, ", ", 2)) || !write_repr(r, b, d->keys[i], depth + 1) ||
            !jbuf_add(r, b, ": ", 2) || !write_repr(r, b, d->vals[i], depth + 1))
            return false;
    }
    return jbuf_addc(r, b, '}');
}

static bool write_repr(jrs *r, jbuf *b, jv v, int depth) {
    if (depth > JMAX_VALUE_DEPTH)
        return jrs_fail(r, NULL, RECUR_E_FULL, "value nested more than %d deep", JMAX_VALUE_DEPTH);
    switch (v.t) {
    case JV_UNDEF: return jbuf_add(r, b, "Undefined", 9);
    case JV_STR: return repr_string(r, b, v.u.s);
    case JV_LIST: {
        bool t = v.u.l->tuple;
        if (!jbuf_addc(r, b, t ? '(' : '[') || !repr_items(r, b, v.u.l->items, v.u.l->n, depth)) return false;
        if (t && v.u.l->n == 1 && !jbuf_addc(r, b, ',')) return false;
        return jbuf_addc(r, b, t ? ')' : ']');
    }
    case JV_DICT: return repr_dict(r, b, v.u.d, depth);
    case JV_NS:
        return jbuf_add(r, b, "<Namespace ", 11) && repr_dict(r, b, v.u.d, depth) && jbuf_addc(r, b, '>');
    default: return jv_write_str(r, b, v);
    }
}

bool jv_write_repr(jrs *r, jbuf *b, jv v) { return write_repr(r, b, v, 0); }

bool jv_write_str(jrs *r, jbuf *b, jv v) {
    char tmp[64];
    switch (v.t) {
    case JV_UNDEF: return true;
    case JV_NONE: return jbuf_add(r, b, "None", 4);
    case JV_BOOL: return v.u.b ? jbuf_add(r, b, "True", 4) : jbuf_add(r, b, "False", 5);
    case JV_INT: return jbuf_addf(r, b, "%lld", (long long)v.u.i);
    case JV_FLOAT: jfloat_repr(v.u.f, tmp, sizeof tmp); return jbuf_add(r, b, tmp, strlen(tmp));
    case JV_STR: return jbuf_add(r, b, v.u.s->s, v.u.s->len);
    case JV_MACRO: return jbuf_addf(r, b, "<Macro '%.60s'>", v.u.m->name->s);
    case JV_FUNC: return jbuf_add(r, b, "<function>", 10);
    default: return write_repr(r, b, v, 0);
    }
}

jv jv_to_str(jrs *r, jv v) {
    if (v.t == JV_STR) return jv_ref(v);
    jbuf b = {0};
    if (!jv_write_str(r, &b, v)) { jbuf_free(&b); return jv_undef(); }
    return jv_str_buf(r, &b);
}

/* ---- JSON -------------------------------------------------------------------------------- */

static bool json_str(jrs *r, jbuf *b, const char *s, size_t len) {
    if (!jbuf_addc(r, b, '"')) return false;
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (!jbuf_add(r, b, s + run, i - run)) return false;
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (!(e ? jbuf_add(r, b, e, 2) : jbuf_addf(r, b, "\\u%04x", c))) return false;
        run = i + 1;
    }
    return jbuf_add(r, b, s + run, len - run) && jbuf_addc(r, b, '"');
}

typedef struct json_opts {
    const jnode *at;
    int          indent;   /* < 0: one line */
    bool         sort_keys;
} json_opts;

static bool json_value(jrs *r, jbuf *b, jv v, const json_opts *o, int level);

static bool json_newline(jrs *r, jbuf *b, const json_opts *o, int level) {
    if (!jbuf_addc(r, b, '\n')) return false;
    for (int i = 0; i < o->indent * level; i++)
        if (!jbuf_addc(r, b, ' ')) return false;
    return true;
}

static bool json_sep(jrs *r, jbuf *b, const json_opts *o, size_t i, int level) {
    if (o->indent < 0) return !i || jbuf_add(r, b, ", ", 2);
    return (!i || jbuf_addc(r, b, ',')) && json_newline(r, b, o, level + 1);
}

static bool json_key(jrs *r, jbuf *b, jv k, const json_opts *o) {
    if (k.t == JV_STR) return json_str(r, b, k.u.s->s, k.u.s->len);
    if (k.t == JV_INT || k.t == JV_FLOAT || k.t == JV_BOOL || k.t == JV_NONE) {
        jbuf t = {0};
        bool ok = json_value(r, &t, k, o, 0) && json_str(r, b, t.p, t.n);
        jbuf_free(&t);
        return ok;
    }
    return jrs_fail(r, o->at, RECUR_E_INVALID, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
}

/* dict entries in order, or sorted by key when asked (stable insertion sort of indices) */
static bool json_dict(jrs *r, jbuf *b, const jdict *d, const json_opts *o, int level) {
    if (!d->n) return jbuf_add(r, b, "{}", 2);
    size_t *idx = malloc(d->n * sizeof *idx);
    if (!idx) return jrs_nomem(r);
    for (size_t i = 0; i < d->n; i++) {
        size_t j = i;
        int c = 0;
        while (o->sort_keys && j > 0 && jv_compare(r, o->at, d->keys[idx[j - 1]], d->keys[i], &c) && c > 0) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    bool ok = !r->failed && jbuf_addc(r, b, '{');
    for (size_t i = 0; ok && i < d->n; i++)
        ok = json_sep(r, b, o, i, level) && json_key(r, b, d->keys[idx[i]], o) && jbuf_add(r, b, ": ", 2) &&
             json_value(r, b, d->vals[idx[i]], o, level + 1);
    free(idx);
    return ok && (o->indent < 0 || json_newline(r, b, o, level)) && jbuf_addc(r, b, '}');
}

static bool json_value(jrs *r, jbuf *b, jv v, const json_opts *o, int level) {
    char tmp[64];
    if (level > JMAX_VALUE_DEPTH)
        return jrs_fail(r, o->at, RECUR_E_FULL, "value nested more than %d deep", JMAX_VALUE_DEPTH);
    switch (v.t) {
    case JV_NONE: return jbuf_add(r, b, "null", 4);
    case JV_BOOL: return v.u.b ? jbuf_add(r, b, "true", 4) : jbuf_add(r, b, "false", 5);
    case JV_INT: return jbuf_addf(r, b, "%lld", (long long)v.u.i);
    case JV_FLOAT:
        if (isnan(v.u.f)) return jbuf_add(r, b, "NaN", 3);
        if (isinf(v.u.f)) return v.u.f < 0 ? jbuf_add(r, b, "-Infinity", 9) : jbuf_add(r, b, "Infinity", 8);
        jfloat_repr(v.u.f, tmp, sizeof tmp);
        return jbuf_add(r, b, tmp, strlen(tmp));
    case JV_STR: return json_str(r, b, v.u.s->s, v.u.s->len);
    case JV_LIST:
        if (!v.u.l->n) return jbuf_add(r, b, "[]", 2);
        if (!jbuf_addc(r, b, '[')) return false;
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!json_sep(r, b, o, i, level) || !json_value(r, b, v.u.l->items[i], o, level + 1)) return false;
        return (o->indent < 0 || json_newline(r, b, o, level)) && jbuf_addc(r, b, ']');
    case JV_DICT: return json_dict(r, b, v.u.d, o, level);
    default:
        return jrs_fail(r, o->at, RECUR_E_INVALID, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

bool jv_write_json(jrs *r, const jnode *at, jbuf *b, jv v, int indent, bool sort_keys) {
    json_opts o = {.at = at, .indent = indent, .sort_keys = sort_keys};
    return json_value(r, b, v, &o, 0);
}

jv jv_from_json(jrs *r, const json_t *j, int depth) {
    if (depth > JMAX_VALUE_DEPTH) {
        jrs_fail(r, NULL, RECUR_E_FULL, "input nested more than %d deep", JMAX_VALUE_DEPTH);
        return jv_undef();
    }
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv d = jv_dict(r);
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)j, k, val) {
            if (!jdict_set(r, d, jv_cstr(r, k), jv_from_json(r, val, depth + 1))) break;
        }
        if (r->failed) { jv_drop(d); return jv_undef(); }
        return d;
    }
    case JSON_ARRAY: {
        jv l = jv_list(r, json_array_size(j));
        for (size_t i = 0; i < json_array_size(j) && !r->failed; i++)
            jlist_push(r, l, jv_from_json(r, json_array_get(j, i), depth + 1));
        if (r->failed) { jv_drop(l); return jv_undef(); }
        return l;
    }
    case JSON_STRING: return jv_str(r, json_string_value(j), json_string_length(j));
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    default: return jv_none();
    }
}
