/* jinja_value.c — the value type: arena, reference counts, strings, lists, dicts, namespaces,
 * truthiness, equality and order with Python's rules, UTF-8 helpers, render-state errors.
 *
 * Nesting of lists and dicts is capped at JMAX_VALUE_DEPTH when they are built, so the
 * recursive walks (free, equality, printing) have a bounded depth. Namespaces are leaves for
 * those walks: they compare by identity and print without their contents.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- arena ------------------------------------------------------------------------------ */

struct jarena_blk {
    jarena_blk *next;
    size_t      used, cap;
    _Alignas(16) unsigned char data[];
};

void *jarena_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    jarena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 16384 ? n : 16384;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    for (jarena_blk *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
}

/* ---- render-state errors -------------------------------------------------------------------- */

bool jrs_fail(jrs *r, const jnode *at, recur_status st, const char *fmt, ...) {
    if (r->failed) return false;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->failed = true;
    r->st = rc_fail(r->err, r->err_len, st, "line %d, column %d: %s", at ? at->line : 0, at ? at->col : 0, msg);
    return false;
}

bool jrs_nomem(jrs *r) {
    if (!r->failed) r->st = rc_fail(r->err, r->err_len, RECUR_E_NOMEM, "out of memory");
    r->failed = true;
    return false;
}

bool jrs_work(jrs *r, const jnode *at, uint64_t n) {
    r->work += n;
    if (r->work <= r->max_work) return true;
    return jrs_fail(r, at, RECUR_E_FULL, "render work budget exceeded (%llu bytes built)",
                    (unsigned long long)r->max_work);
}

/* ---- reference counts ---------------------------------------------------------------------- */

static uint32_t *rc_of(jv v) {
    switch (v.t) {
    case JV_STR: return &v.u.s->rc;
    case JV_LIST: return &v.u.l->rc;
    case JV_DICT:
    case JV_NS: return &v.u.d->rc;
    default: return NULL;
    }
}

jv jv_ref(jv v) {
    uint32_t *rc = rc_of(v);
    if (rc && *rc) ++*rc;
    return v;
}

void jv_drop(jv v) {
    uint32_t *rc = rc_of(v);
    if (!rc || !*rc || --*rc) return;
    if (v.t == JV_STR) {
        free(v.u.s);
    } else if (v.t == JV_LIST) {
        for (size_t i = 0; i < v.u.l->n; i++) jv_drop(v.u.l->items[i]);
        free(v.u.l->items);
        free(v.u.l);
    } else {
        for (size_t i = 0; i < v.u.d->n; i++) { jv_drop(v.u.d->keys[i]); jv_drop(v.u.d->vals[i]); }
        free(v.u.d->keys);
        free(v.u.d->vals);
        free(v.u.d);
    }
}

/* ---- types ------------------------------------------------------------------------------- */

const char *jv_type_name(jv v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict", "Namespace", "Macro", "function"};
    if (v.t == JV_LIST && v.u.l->tuple) return "tuple";
    return names[v.t];
}

bool jv_is_number(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }

double jv_num(jv v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.t == JV_BOOL ? (double)v.u.b : 0;
}

bool jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s->len != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool dict_equal(const jdict *a, const jdict *b) {
    if (a->n != b->n) return false;
    for (size_t i = 0; i < a->n; i++) {
        const jv *o = jdict_get(b, a->keys[i]);
        if (!o || !jv_equal(a->vals[i], *o)) return false;
    }
    return true;
}

bool jv_equal(jv a, jv b) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT)
            return (a.t == JV_INT ? a.u.i : a.u.b) == (b.t == JV_INT ? b.u.i : b.u.b);
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case JV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_equal(a.u.l->items[i], b.u.l->items[i])) return false;
        return true;
    case JV_DICT: return dict_equal(a.u.d, b.u.d);
    case JV_NS: return a.u.d == b.u.d;
    case JV_MACRO: return a.u.m == b.u.m;
    case JV_FUNC: return a.u.fn == b.u.fn;
    default: return false;
    }
}

bool jv_compare(jrs *r, const jnode *at, jv a, jv b, int *out) {
    if (jv_is_number(a) && jv_is_number(b)) {
        if (a.t == JV_INT && b.t == JV_INT) *out = (a.u.i > b.u.i) - (a.u.i < b.u.i);
        else *out = (jv_num(a) > jv_num(b)) - (jv_num(a) < jv_num(b));
        return true;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        *out = c ? (c > 0) - (c < 0) : (a.u.s->len > b.u.s->len) - (a.u.s->len < b.u.s->len);
        return true;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && a.u.l->tuple == b.u.l->tuple) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_equal(a.u.l->items[i], b.u.l->items[i])) continue;
            return jv_compare(r, at, a.u.l->items[i], b.u.l->items[i], out);
        }
        *out = (a.u.l->n > b.u.l->n) - (a.u.l->n < b.u.l->n);
        return true;
    }
    return jrs_fail(r, at, RECUR_E_INVALID, "'<' not supported between instances of '%s' and '%s'",
                    jv_type_name(a), jv_type_name(b));
}

/* ---- strings ----------------------------------------------------------------------------- */

jv jv_str(jrs *r, const char *s, size_t len) {
    if (r->failed) return jv_undef();
    if (len > r->max_str) {
        jrs_fail(r, NULL, RECUR_E_FULL, "string longer than %zu bytes", r->max_str);
        return jv_undef();
    }
    if (!jrs_work(r, NULL, len)) return jv_undef();
    jstr *p = malloc(sizeof *p + len + 1);
    if (!p) { jrs_nomem(r); return jv_undef(); }
    p->rc = 1;
    p->len = len;
    if (len) memcpy(p->s, s, len);
    p->s[len] = 0;
    jv v = {.t = JV_STR, .u.s = p};
    return v;
}

jv jv_cstr(jrs *r, const char *s) { return jv_str(r, s, strlen(s)); }

jv jv_str_buf(jrs *r, jbuf *b) {
    jv v = jv_str(r, b->p ? b->p : "", b->n);
    jbuf_free(b);
    return v;
}

jstr *jstr_immortal(jarena *a, const char *s, size_t len) {
    jstr *p = jarena_alloc(a, sizeof *p + len + 1);
    if (!p) return NULL;
    p->rc = 0;
    p->len = len;
    if (len) memcpy(p->s, s, len);
    p->s[len] = 0;
    return p;
}

/* ---- lists and dicts --------------------------------------------------------------------------- */

jv jv_list(jrs *r, size_t cap) {
    if (r->failed) return jv_undef();
    jlist *l = calloc(1, sizeof *l);
    if (!l || (cap && !(l->items = malloc(cap * sizeof *l->items)))) {
        free(l);
        jrs_nomem(r);
        return jv_undef();
    }
    l->rc = 1;
    l->depth = 1;
    l->cap = cap;
    jv v = {.t = JV_LIST, .u.l = l};
    return v;
}

static uint32_t depth_of(jv v) {
    return v.t == JV_LIST ? v.u.l->depth : v.t == JV_DICT ? v.u.d->depth : 0;
}

static bool deep_enough(jrs *r, uint32_t *depth, jv item) {
    uint32_t d = depth_of(item) + 1;
    if (d > JMAX_VALUE_DEPTH)
        return jrs_fail(r, NULL, RECUR_E_FULL, "value nested more than %d deep", JMAX_VALUE_DEPTH);
    if (d > *depth) *depth = d;
    return true;
}

bool jlist_push(jrs *r, jv list, jv item) {
    jlist *l = list.u.l;
    if (r->failed || !deep_enough(r, &l->depth, item)) { jv_drop(item); return false; }
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *v = realloc(l->items, cap * sizeof *v);
        if (!v) { jv_drop(item); return jrs_nomem(r); }
        l->items = v;
        l->cap = cap;
    }
    l->items[l->n++] = item;
    return true;
}

jv jv_dict(jrs *r) {
    if (r->failed) return jv_undef();
    jdict *d = calloc(1, sizeof *d);
    if (!d) { jrs_nomem(r); return jv_undef(); }
    d->rc = 1;
    d->depth = 1;
    jv v = {.t = JV_DICT, .u.d = d};
    return v;
}

jv jv_namespace(jrs *r) {
    if (r->n_ns >= JMAX_NAMESPACES) {
        jrs_fail(r, NULL, RECUR_E_FULL, "more than %d namespaces", JMAX_NAMESPACES);
        return jv_undef();
    }
    if (r->n_ns == r->cap_ns) {
        size_t cap = r->cap_ns ? r->cap_ns * 2 : 16;
        jdict **v = realloc(r->ns_all, cap * sizeof *v);
        if (!v) { jrs_nomem(r); return jv_undef(); }
        r->ns_all = v;
        r->cap_ns = cap;
    }
    jv d = jv_dict(r);
    if (d.t != JV_DICT) return d;
    d.t = JV_NS;
    d.u.d->rc = 2;   /* one for the caller, one for r->ns_all */
    r->ns_all[r->n_ns++] = d.u.d;
    return d;
}

void jrs_clear_namespaces(jrs *r) {
    for (size_t i = 0; i < r->n_ns; i++) {
        jdict *d = r->ns_all[i];
        for (size_t k = 0; k < d->n; k++) { jv_drop(d->keys[k]); jv_drop(d->vals[k]); }
        d->n = 0;
    }
    for (size_t i = 0; i < r->n_ns; i++) {
        jv v = {.t = JV_NS, .u.d = r->ns_all[i]};
        jv_drop(v);
    }
    free(r->ns_all);
    r->ns_all = NULL;
    r->n_ns = r->cap_ns = 0;
}

const jv *jdict_get_str(const jdict *d, const char *s, size_t len) {
    for (size_t i = 0; i < d->n; i++) {
        jv k = d->keys[i];
        if (k.t == JV_STR && k.u.s->len == len && !memcmp(k.u.s->s, s, len)) return &d->vals[i];
    }
    return NULL;
}

const jv *jdict_get(const jdict *d, jv key) {
    if (key.t == JV_STR) return jdict_get_str(d, key.u.s->s, key.u.s->len);
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->keys[i], key)) return &d->vals[i];
    return NULL;
}

bool jdict_set(jrs *r, jv dict, jv key, jv val) {
    jdict *d = dict.u.d;
    if (r->failed || (dict.t == JV_DICT && !deep_enough(r, &d->depth, val))) goto fail;
    jv *old = (jv *)jdict_get(d, key);
    if (old) {
        jv_drop(*old);
        *old = val;
        jv_drop(key);
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jv *k = realloc(d->keys, cap * sizeof *k);
        if (k) d->keys = k;
        jv *v = k ? realloc(d->vals, cap * sizeof *v) : NULL;
        if (!v) { jrs_nomem(r); goto fail; }
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n++] = val;
    return true;
fail:
    jv_drop(key);
    jv_drop(val);
    return false;
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

size_t jutf8_decode(const char *s, size_t len, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c = u[0];
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || n > len) { *cp = c; return 1; }   /* invalid: one byte, as itself */
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (size_t i = 1; i < n; i++) {
        if ((u[i] & 0xC0) != 0x80) { *cp = c; return 1; }
        v = (v << 6) | (u[i] & 0x3F);
    }
    *cp = v;
    return n;
}

size_t jutf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t jutf8_count(const char *s, size_t len) {
    size_t n = 0;
    uint32_t cp;
    for (size_t i = 0; i < len; i += jutf8_decode(s + i, len - i, &cp)) n++;
    return n;
}

size_t jutf8_offset(const char *s, size_t len, size_t cp_index) {
    size_t i = 0;
    uint32_t cp;
    for (size_t k = 0; k < cp_index && i < len; k++) i += jutf8_decode(s + i, len - i, &cp);
    return i;
}

bool jis_pyspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}
