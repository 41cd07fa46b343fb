/* jinja_filters.c — Jinja2's filters as the chat templates use them, plus the common ones.
 *
 * String filters take str(value) first (as Jinja2's soft_str does), so `none | trim` is
 * "None" and `undefined | trim` is "". `tojson` is HF's: json.dumps(ensure_ascii=False,
 * indent=..., sort_keys=...). `safe` returns its input (autoescape is off). Sorting is stable
 * and, like Jinja2's, case-insensitive unless case_sensitive=true.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

typedef bool (*filter_fn)(jrs *r, const jnode *at, jv in, jargs *a, jv *out);

static bool argc_max(jrs *r, const jnode *at, const jargs *a, int n, const char *name) {
    if (a->n_pos <= n) return true;
    return jrs_fail(r, at, RECUR_E_INVALID, "filter '%s' takes at most %d arguments", name, n);
}

static bool arg_bool(const jargs *a, int pos, const char *name, bool def) {
    const jv *v = jargs_get(a, pos, name);
    return v ? jv_truthy(*v) : def;
}

/* ---- attribute paths ("a.b.0") and sort keys ------------------------------------------------- */

static bool get_path(jrs *r, const jnode *at, jv item, const jstr *path, jv *out) {
    jv cur = jv_ref(item);
    for (size_t b = 0; b <= path->len && !r->failed;) {
        const char *dot = memchr(path->s + b, '.', path->len - b);
        size_t e = dot ? (size_t)(dot - path->s) : path->len;
        bool digits = e > b;
        for (size_t i = b; i < e; i++) digits &= path->s[i] >= '0' && path->s[i] <= '9';
        jv key = digits ? jv_int(strtoll(path->s + b, NULL, 10)) : jv_str(r, path->s + b, e - b), next;
        bool ok = jeval_getitem(r, at, cur, key, &next);
        jv_drop(key);
        jv_drop(cur);
        if (!ok) return false;
        cur = next;
        b = e + 1;
    }
    *out = cur;
    return !r->failed;
}

static jv sort_key(jrs *r, const jnode *at, jv item, const jstr *attr, bool case_sensitive) {
    jv k = jv_ref(item);
    if (attr) {
        jv_drop(k);
        if (!get_path(r, at, item, attr, &k)) return jv_undef();
    }
    if (!case_sensitive && k.t == JV_STR) {
        jv low = jstr_case(r, k.u.s, JCASE_LOWER);
        jv_drop(k);
        return low;
    }
    return k;
}

/* Stable merge sort of idx[0..n) by keys[idx]; false when two keys do not compare. */
static bool msort(jrs *r, const jnode *at, const jv *keys, size_t *idx, size_t *tmp, size_t n, bool rev) {
    if (n < 2) return true;
    size_t h = n / 2;
    if (!msort(r, at, keys, idx, tmp, h, rev) || !msort(r, at, keys, idx + h, tmp, n - h, rev)) return false;
    size_t i = 0, j = h, o = 0;
    while (i < h && j < n) {
        int c;
        if (!jv_compare(r, at, keys[idx[j]], keys[idx[i]], &c)) return false;
        tmp[o++] = (rev ? c > 0 : c < 0) ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[o++] = idx[i++];
    while (j < n) tmp[o++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return true;
}

/* items sorted by their key (attr or the item itself); *out is a new list */
static bool sorted(jrs *r, const jnode *at, const jlist *l, const jv *keys, bool rev, jv *out) {
    size_t n = l->n, *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    bool ok = idx && tmp;
    if (!ok) jrs_nomem(r);
    for (size_t i = 0; ok && i < n; i++) idx[i] = i;
    if (ok) ok = msort(r, at, keys, idx, tmp, n, rev);
    if (ok) {
        *out = jv_list(r, n);
        for (size_t i = 0; i < n; i++) jlist_push(r, *out, jv_ref(l->items[idx[i]]));
    }
    free(idx);
    free(tmp);
    return ok && !r->failed;
}

static jv *make_keys(jrs *r, const jnode *at, const jlist *l, const jstr *attr, bool cs) {
    jv *keys = calloc(l->n + 1, sizeof *keys);
    if (!keys) { jrs_nomem(r); return NULL; }
    for (size_t i = 0; i < l->n && !r->failed; i++) keys[i] = sort_key(r, at, l->items[i], attr, cs);
    return keys;
}

static void free_keys(jv *keys, size_t n) {
    for (size_t i = 0; keys && i < n; i++) jv_drop(keys[i]);
    free(keys);
}

static const jstr *attr_arg(const jargs *a, int pos) {
    const jv *v = jargs_get(a, pos, "attribute");
    return v && v->t == JV_STR ? v->u.s : NULL;
}

/* ---- sequences ------------------------------------------------------------------------------ */

static bool f_length(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)a;
    if (in.t == JV_STR) *out = jv_int((int64_t)jutf8_count(in.u.s->s, in.u.s->len));
    else if (in.t == JV_LIST) *out = jv_int((int64_t)in.u.l->n);
    else if (in.t == JV_DICT || in.t == JV_NS) *out = jv_int((int64_t)in.u.d->n);
    else if (in.t == JV_UNDEF) *out = jv_int(0);
    else return jrs_fail(r, at, RECUR_E_INVALID, "object of type '%s' has no len()", jv_type_name(in));
    return true;
}

static bool f_list(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)a;
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    if (!l.u.l->tuple) { *out = l; return true; }
    jv fresh = jv_list(r, l.u.l->n);
    for (size_t i = 0; i < l.u.l->n; i++) jlist_push(r, fresh, jv_ref(l.u.l->items[i]));
    jv_drop(l);
    *out = fresh;
    return !r->failed;
}

static bool first_last(jrs *r, const jnode *at, jv in, jv *out, bool last) {
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    if (l.u.l->n) *out = jv_ref(l.u.l->items[last ? l.u.l->n - 1 : 0]);
    jv_drop(l);
    return true;
}

static bool f_first(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)a; return first_last(r, at, in, out, false); }
static bool f_last(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)a; return first_last(r, at, in, out, true); }

static bool f_reverse(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)a;
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    jbuf b = {0};
    jv res = in.t == JV_STR ? jv_undef() : jv_list(r, l.u.l->n);
    for (size_t i = l.u.l->n; i-- > 0 && !r->failed;) {
        if (in.t == JV_STR) jbuf_add(r, &b, l.u.l->items[i].u.s->s, l.u.l->items[i].u.s->len);
        else jlist_push(r, res, jv_ref(l.u.l->items[i]));
    }
    jv_drop(l);
    *out = in.t == JV_STR ? jv_str_buf(r, &b) : res;
    return !r->failed;
}

static bool f_join(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *sep = jargs_get(a, 0, "d");
    const jstr *attr = attr_arg(a, 1);
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    jbuf b = {0};
    for (size_t i = 0; i < l.u.l->n && !r->failed; i++) {
        jv x = l.u.l->items[i], y = jv_undef();
        if (i && sep) jv_write_str(r, &b, *sep);
        if (attr && !get_path(r, at, x, attr, &y)) break;
        jv_write_str(r, &b, attr ? y : x);
        jv_drop(y);
    }
    jv_drop(l);
    if (r->failed) { jbuf_free(&b); return false; }
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

static bool f_sort(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    jv *keys = make_keys(r, at, l.u.l, attr_arg(a, 2), arg_bool(a, 1, "case_sensitive", false));
    if (keys && !r->failed) sorted(r, at, l.u.l, keys, arg_bool(a, 0, "reverse", false), out);
    free_keys(keys, l.u.l->n);
    jv_drop(l);
    return !r->failed;
}

static bool f_dictsort(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    bool cs = arg_bool(a, 0, "case_sensitive", false), rev = arg_bool(a, 2, "reverse", false);
    const jv *by = jargs_get(a, 1, "by");
    bool by_value = by && by->t == JV_STR && !strcmp(by->u.s->s, "value");
    if (in.t != JV_DICT) return jrs_fail(r, at, RECUR_E_INVALID, "dictsort: not a mapping");
    jv pairs;
    bool found;
    if (!jmethod_call(r, at, in, "items", a, &pairs, &found)) return false;
    jv *keys = calloc(pairs.u.l->n + 1, sizeof *keys);
    if (!keys) { jv_drop(pairs); return jrs_nomem(r); }
    for (size_t i = 0; i < pairs.u.l->n; i++)
        keys[i] = sort_key(r, at, pairs.u.l->items[i].u.l->items[by_value ? 1 : 0], NULL, cs);
    if (!r->failed) sorted(r, at, pairs.u.l, keys, rev, out);
    free_keys(keys, pairs.u.l->n);
    jv_drop(pairs);
    return !r->failed;
}

static bool f_unique(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    jv *keys = make_keys(r, at, l.u.l, attr_arg(a, 1), arg_bool(a, 0, "case_sensitive", false));
    *out = jv_list(r, 0);
    for (size_t i = 0; keys && i < l.u.l->n && !r->failed; i++) {
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++) seen = jv_equal(keys[k], keys[i]);
        if (!seen) jlist_push(r, *out, jv_ref(l.u.l->items[i]));
    }
    free_keys(keys, l.u.l->n);
    jv_drop(l);
    return !r->failed;
}

static bool minmax(jrs *r, const jnode *at, jv in, jargs *a, jv *out, bool max) {
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    jv *keys = make_keys(r, at, l.u.l, attr_arg(a, 1), arg_bool(a, 0, "case_sensitive", false));
    size_t best = 0;
    for (size_t i = 1; keys && i < l.u.l->n && !r->failed; i++) {
        int c;
        if (jv_compare(r, at, keys[i], keys[best], &c) && (max ? c > 0 : c < 0)) best = i;
    }
    if (keys && l.u.l->n && !r->failed) *out = jv_ref(l.u.l->items[best]);
    free_keys(keys, l.u.l->n);
    jv_drop(l);
    return !r->failed;
}

static bool f_min(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return minmax(r, at, in, a, out, false); }
static bool f_max(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return minmax(r, at, in, a, out, true); }

static bool f_sum(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jstr *attr = attr_arg(a, 0);
    const jv *start = jargs_get(a, 1, "start");
    jv l, acc = start ? jv_ref(*start) : jv_int(0);
    if (!jv_iter_list(r, at, in, &l)) { jv_drop(acc); return false; }
    for (size_t i = 0; i < l.u.l->n && !r->failed; i++) {
        jv x = jv_ref(l.u.l->items[i]);
        if (attr) { jv_drop(x); if (!get_path(r, at, l.u.l->items[i], attr, &x)) break; }
        if (!jv_is_number(acc) || !jv_is_number(x)) {
            jrs_fail(r, at, RECUR_E_INVALID, "sum: unsupported operand types '%s' and '%s'", jv_type_name(acc), jv_type_name(x));
        } else if (acc.t == JV_FLOAT || x.t == JV_FLOAT) {
            acc = jv_float(jv_num(acc) + jv_num(x));
        } else {
            int64_t s;
            if (__builtin_add_overflow(acc.t == JV_INT ? acc.u.i : acc.u.b, x.t == JV_INT ? x.u.i : x.u.b, &s))
                jrs_fail(r, at, RECUR_E_INVALID, "integer overflow");
            acc = jv_int(s);
        }
        jv_drop(x);
    }
    jv_drop(l);
    *out = acc;
    return !r->failed;
}

/* ---- select / reject / map ---------------------------------------------------------------- */

/* select(test, args...) / reject / selectattr(attr, test, args...) / rejectattr */
static bool select_impl(jrs *r, const jnode *at, jv in, jargs *a, jv *out, bool by_attr, bool keep) {
    int t0 = by_attr ? 1 : 0;
    const jv *attr = by_attr ? jargs_get(a, 0, NULL) : NULL, *test = jargs_get(a, t0, NULL);
    if ((by_attr && (!attr || attr->t != JV_STR)) || (test && test->t != JV_STR))
        return jrs_fail(r, at, RECUR_E_INVALID, "select filters take an attribute and a test name");
    jargs ta = {.n_pos = a->n_pos > t0 + 1 ? a->n_pos - t0 - 1 : 0};
    for (int i = 0; i < ta.n_pos; i++) ta.pos[i] = a->pos[t0 + 1 + i];
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    *out = jv_list(r, 0);
    for (size_t i = 0; i < l.u.l->n && !r->failed; i++) {
        jv x = l.u.l->items[i], y = jv_undef();
        if (attr && !get_path(r, at, x, attr->u.s, &y)) break;
        bool hit;
        if (test) jtest_apply(r, at, test->u.s->s, attr ? y : x, &ta, &hit);
        else hit = jv_truthy(attr ? y : x);
        if (!r->failed && hit == keep) jlist_push(r, *out, jv_ref(x));
        jv_drop(y);
    }
    jv_drop(l);
    return !r->failed;
}

static bool f_select(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return select_impl(r, at, in, a, out, false, true); }
static bool f_reject(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return select_impl(r, at, in, a, out, false, false); }
static bool f_selectattr(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return select_impl(r, at, in, a, out, true, true); }
static bool f_rejectattr(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return select_impl(r, at, in, a, out, true, false); }

static bool f_map(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jstr *attr = attr_arg(a, -1);
    const jv *def = jargs_get(a, -1, "default"), *fname = jargs_get(a, 0, NULL);
    if (!attr && (!fname || fname->t != JV_STR)) return jrs_fail(r, at, RECUR_E_INVALID, "map needs a filter name or attribute=");
    jargs fa = {.n_pos = attr ? 0 : a->n_pos - 1};
    for (int i = 0; i < fa.n_pos; i++) fa.pos[i] = a->pos[i + 1];
    jv l;
    if (!jv_iter_list(r, at, in, &l)) return false;
    *out = jv_list(r, l.u.l->n);
    for (size_t i = 0; i < l.u.l->n && !r->failed; i++) {
        jv y = jv_undef();
        if (attr) {
            if (get_path(r, at, l.u.l->items[i], attr, &y) && y.t == JV_UNDEF && def) y = jv_ref(*def);
        } else {
            jfilter_apply(r, at, fname->u.s->s, l.u.l->items[i], &fa, &y);
        }
        if (r->failed) { jv_drop(y); break; }
        jlist_push(r, *out, y);
    }
    jv_drop(l);
    return !r->failed;
}

static bool f_items(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    bool found;
    if (in.t == JV_UNDEF) { *out = jv_list(r, 0); return !r->failed; }
    if (in.t != JV_DICT) return jrs_fail(r, at, RECUR_E_INVALID, "can only get item pairs from a mapping");
    return jmethod_call(r, at, in, "items", a, out, &found);
}

static bool f_default(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)r, (void)at;
    const jv *def = jargs_get(a, 0, "default_value");
    bool use = in.t == JV_UNDEF || (arg_bool(a, 1, "boolean", false) && !jv_truthy(in));
    *out = use ? (def ? jv_ref(*def) : jv_str(r, "", 0)) : jv_ref(in);
    return !r->failed;
}

static bool f_attr(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *name = jargs_get(a, 0, NULL);
    if (!name || name->t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "attr needs a name");
    return jeval_getattr(r, at, in, name->u.s->s, name->u.s->len, out);
}

static bool f_safe(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)r, (void)at, (void)a;
    *out = jv_ref(in);
    return true;
}

/* ---- strings --------------------------------------------------------------------------------- */

static bool f_string(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)at, (void)a;
    *out = jv_to_str(r, in);
    return !r->failed;
}

/* applies fn to str(in) */
static bool on_str(jrs *r, jv in, jv *out, int how, const jstr *chars, int mode) {
    jv s = jv_to_str(r, in);
    if (s.t != JV_STR) return false;
    *out = mode ? jstr_strip(r, s.u.s, chars, mode) : jstr_case(r, s.u.s, how);
    jv_drop(s);
    return !r->failed;
}

static bool f_trim(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *c = jargs_get(a, 0, "chars");
    if (c && c->t != JV_STR && c->t != JV_NONE) return jrs_fail(r, at, RECUR_E_INVALID, "trim: chars must be a string");
    return on_str(r, in, out, 0, c && c->t == JV_STR ? c->u.s : NULL, 3);
}

static bool f_lower(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)at, (void)a; return on_str(r, in, out, JCASE_LOWER, NULL, 0); }
static bool f_upper(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)at, (void)a; return on_str(r, in, out, JCASE_UPPER, NULL, 0); }
static bool f_title(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)at, (void)a; return on_str(r, in, out, JCASE_TITLE, NULL, 0); }
static bool f_capitalize(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { (void)at, (void)a; return on_str(r, in, out, JCASE_CAPITALIZE, NULL, 0); }

static bool f_replace(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *old = jargs_get(a, 0, "old"), *rep = jargs_get(a, 1, "new"), *cnt = jargs_get(a, 2, "count");
    if (!old || !rep || old->t != JV_STR || rep->t != JV_STR)
        return jrs_fail(r, at, RECUR_E_INVALID, "replace needs two strings");
    jv s = jv_to_str(r, in);
    if (s.t != JV_STR) return false;
    *out = jstr_replace(r, at, s.u.s, old->u.s, rep->u.s, cnt && cnt->t == JV_INT ? cnt->u.i : -1);
    jv_drop(s);
    return !r->failed;
}

static bool f_tojson(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *ind = jargs_get(a, 0, "indent");
    int indent = -1;
    if (ind && ind->t == JV_INT) indent = ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : (int)ind->u.i;
    else if (ind && ind->t != JV_NONE) return jrs_fail(r, at, RECUR_E_INVALID, "tojson: indent must be an integer");
    jbuf b = {0};
    if (!jv_write_json(r, at, &b, in, indent, arg_bool(a, -1, "sort_keys", false))) { jbuf_free(&b); return false; }
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

static bool f_escape(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)a;
    jv s = jv_to_str(r, in);
    if (s.t != JV_STR) return false;
    jbuf b = {0};
    for (size_t i = 0; i < s.u.s->len && !r->failed; i++) {
        char c = s.u.s->s[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) jbuf_add(r, &b, e, strlen(e));
        else jbuf_addc(r, &b, c);
    }
    jv_drop(s);
    (void)at;
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

/* Jinja2's indent: lines after the first (and the first with first=true) get the prefix;
 * blank lines only with blank=true. */
static bool f_indent(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *w = jargs_get(a, 0, "width");
    bool first = arg_bool(a, 1, "first", false), blank = arg_bool(a, 2, "blank", false);
    jbuf pre = {0}, b = {0};
    if (w && w->t == JV_STR) jbuf_add(r, &pre, w->u.s->s, w->u.s->len);
    else for (int64_t i = 0; i < (w && w->t == JV_INT ? w->u.i : 4) && i < 256; i++) jbuf_addc(r, &pre, ' ');
    jv s = jv_to_str(r, in), lines = jv_undef();
    jargs none = {0};
    bool found;
    if (s.t == JV_STR && jmethod_call(r, at, s, "splitlines", &none, &lines, &found)) {
        for (size_t i = 0; i < lines.u.l->n && !r->failed; i++) {
            const jstr *ln = lines.u.l->items[i].u.s;
            if (i) jbuf_addc(r, &b, '\n');
            if ((i || first) && (ln->len || blank)) jbuf_add(r, &b, pre.p ? pre.p : "", pre.n);
            jbuf_add(r, &b, ln->s, ln->len);
        }
        if (s.u.s->len && (s.u.s->s[s.u.s->len - 1] == '\n') && !r->failed) {
            jbuf_addc(r, &b, '\n');
            if (blank) jbuf_add(r, &b, pre.p ? pre.p : "", pre.n);
        }
        if (!lines.u.l->n && first && !r->failed) jbuf_add(r, &b, pre.p ? pre.p : "", pre.n);
    }
    jv_drop(lines);
    jv_drop(s);
    jbuf_free(&pre);
    if (r->failed) { jbuf_free(&b); return false; }
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

static bool f_wordcount(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)at, (void)a;
    jv s = jv_to_str(r, in);
    if (s.t != JV_STR) return false;
    int64_t n = 0;
    bool in_word = false;
    for (size_t i = 0; i < s.u.s->len; i++) {
        unsigned char c = (unsigned char)s.u.s->s[i];
        bool w = c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z');
        n += w && !in_word;
        in_word = w;
    }
    jv_drop(s);
    *out = jv_int(n);
    return true;
}

/* ---- numbers ----------------------------------------------------------------------------- */

static bool parse_num(const jstr *s, bool want_int, jv *out) {
    char *end;
    jv t = {0};
    const char *p = s->s;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (want_int) {
        long long v = strtoll(p, &end, 10);
        if (end != p && *end == 0) { *out = jv_int(v); return true; }
    }
    double d = strtod(p, &end);
    if (end == p || (*end && strspn(end, " \t\n") != strlen(end)) || (want_int && !isfinite(d))) return false;
    t = want_int ? jv_int(d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN : (int64_t)d) : jv_float(d);
    *out = t;
    return true;
}

static bool to_number(jrs *r, const jnode *at, jv in, jargs *a, jv *out, bool want_int) {
    const jv *def = jargs_get(a, 0, "default");
    if (want_int && in.t == JV_FLOAT && isfinite(in.u.f) && fabs(in.u.f) < 9.2e18) { *out = jv_int((int64_t)in.u.f); return true; }
    if (jv_is_number(in) && in.t != JV_FLOAT) { *out = want_int ? jv_int(in.t == JV_INT ? in.u.i : in.u.b) : jv_float(jv_num(in)); return true; }
    if (!want_int && in.t == JV_FLOAT) { *out = in; return true; }
    if (in.t == JV_STR && parse_num(in.u.s, want_int, out)) return true;
    (void)at;
    *out = def ? jv_ref(*def) : want_int ? jv_int(0) : jv_float(0);
    return !r->failed;
}

static bool f_int(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return to_number(r, at, in, a, out, true); }
static bool f_float(jrs *r, const jnode *at, jv in, jargs *a, jv *out) { return to_number(r, at, in, a, out, false); }

static bool f_abs(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    (void)a;
    if (!jv_is_number(in)) return jrs_fail(r, at, RECUR_E_INVALID, "bad operand type for abs(): '%s'", jv_type_name(in));
    if (in.t == JV_FLOAT) { *out = jv_float(fabs(in.u.f)); return true; }
    int64_t v = in.t == JV_INT ? in.u.i : in.u.b;
    if (v == INT64_MIN) return jrs_fail(r, at, RECUR_E_INVALID, "integer overflow");
    *out = jv_int(v < 0 ? -v : v);
    return true;
}

/* Jinja2's round: 'common' is Python's round() (half to even; an int stays an int when the
 * precision is not negative), 'ceil'/'floor' give floats. */
static bool f_round(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    const jv *p = jargs_get(a, 0, "precision"), *m = jargs_get(a, 1, "method");
    if (!jv_is_number(in)) return jrs_fail(r, at, RECUR_E_INVALID, "round: not a number");
    int prec = p && p->t == JV_INT ? (int)(p->u.i > 15 ? 15 : p->u.i < -15 ? -15 : p->u.i) : 0;
    const char *method = m && m->t == JV_STR ? m->u.s->s : "common";
    bool common = !strcmp(method, "common");
    if (common && in.t != JV_FLOAT && prec >= 0) { *out = jv_int(in.t == JV_INT ? in.u.i : in.u.b); return true; }
    double f = pow(10, prec), x = jv_num(in) * f;
    if (common) x = nearbyint(x);
    else if (!strcmp(method, "ceil")) x = ceil(x);
    else if (!strcmp(method, "floor")) x = floor(x);
    else return jrs_fail(r, at, RECUR_E_INVALID, "round: method must be common, ceil or floor");
    x /= f;
    *out = common && in.t != JV_FLOAT ? jv_int((int64_t)x) : jv_float(x);
    return true;
}

/* "%s and %s" | format(a, b) */
static bool f_format(jrs *r, const jnode *at, jv in, jargs *a, jv *out) {
    if (in.t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "format: the value must be a string");
    jv args = jv_list(r, (size_t)a->n_pos);
    if (r->failed) return false;
    args.u.l->tuple = true;
    for (int i = 0; i < a->n_pos; i++) jlist_push(r, args, jv_ref(a->pos[i]));
    *out = jstr_percent(r, at, in.u.s, args);
    jv_drop(args);
    return !r->failed;
}

static const struct { const char *name; filter_fn fn; } k_filters[] = {
    {"length", f_length}, {"count", f_length}, {"list", f_list}, {"first", f_first}, {"last", f_last},
    {"reverse", f_reverse}, {"join", f_join}, {"sort", f_sort}, {"dictsort", f_dictsort},
    {"unique", f_unique}, {"min", f_min}, {"max", f_max}, {"sum", f_sum}, {"select", f_select},
    {"reject", f_reject}, {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"map", f_map},
    {"items", f_items}, {"default", f_default}, {"d", f_default}, {"attr", f_attr}, {"safe", f_safe},
    {"string", f_string}, {"trim", f_trim}, {"lower", f_lower}, {"upper", f_upper}, {"title", f_title},
    {"capitalize", f_capitalize}, {"replace", f_replace}, {"tojson", f_tojson}, {"escape", f_escape},
    {"e", f_escape}, {"indent", f_indent}, {"wordcount", f_wordcount}, {"int", f_int}, {"float", f_float},
    {"abs", f_abs}, {"round", f_round}, {"format", f_format},
};

bool jfilter_apply(jrs *r, const jnode *at, const char *name, jv in, jargs *a, jv *out) {
    *out = jv_undef();
    for (size_t i = 0; i < sizeof k_filters / sizeof k_filters[0]; i++) {
        if (strcmp(k_filters[i].name, name)) continue;
        if (!argc_max(r, at, a, JMAX_ARGS, name)) return false;
        bool ok = k_filters[i].fn(r, at, in, a, out);
        if (!ok || r->failed) { jv_drop(*out); *out = jv_undef(); return false; }
        return true;
    }
    return jrs_fail(r, at, RECUR_E_INVALID, "no filter named '%s'", name);
}
