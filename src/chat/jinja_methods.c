/* jinja_methods.c — Python str and dict methods callable from templates (s.startswith('x'),
 * s.split(), d.get('k'), d.items(), ...), the shared string helpers the filters use, and the
 * global functions: range, namespace, dict, raise_exception, strftime_now.
 *
 * Case mapping is ASCII-only (Python maps all of Unicode); stripping and whitespace splitting
 * use Python's Unicode whitespace.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- string helpers ----------------------------------------------------------------------- */

static bool in_set(uint32_t cp, const jstr *chars) {
    if (!chars) return jis_pyspace(cp);
    uint32_t c;
    for (size_t i = 0, k; i < chars->len; i += k) {
        k = jutf8_decode(chars->s + i, chars->len - i, &c);
        if (c == cp) return true;
    }
    return false;
}

jv jstr_strip(jrs *r, const jstr *s, const jstr *chars, int mode) {
    size_t b = 0, e = s->len, k;
    uint32_t cp;
    while ((mode & 1) && b < e && in_set((k = jutf8_decode(s->s + b, e - b, &cp), cp), chars)) b += k;
    while ((mode & 2) && e > b) {
        size_t p = e - 1;
        while (p > b && ((unsigned char)s->s[p] & 0xC0) == 0x80) p--;
        jutf8_decode(s->s + p, e - p, &cp);
        if (!in_set(cp, chars)) break;
        e = p;
    }
    return jv_str(r, s->s + b, e - b);
}

static char lower_c(char c) { return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c; }
static char upper_c(char c) { return c >= 'a' && c <= 'z' ? (char)(c - 32) : c; }

jv jstr_case(jrs *r, const jstr *s, int how) {
    jv v = jv_str(r, s->s, s->len);
    if (v.t != JV_STR) return v;
    char *p = v.u.s->s;
    bool start = true;
    for (size_t i = 0; i < s->len; i++) {
        char c = p[i];
        switch (how) {
        case JCASE_LOWER: p[i] = lower_c(c); break;
        case JCASE_UPPER: p[i] = upper_c(c); break;
        case JCASE_CAPITALIZE: p[i] = i == 0 ? upper_c(c) : lower_c(c); break;
        default:   /* title, as Jinja2's filter: words start after - space ( { [ < */
            p[i] = start ? upper_c(c) : lower_c(c);
            start = strchr("- \t\n\r\f\v({[<", c) != NULL && c != 0;
            break;
        }
    }
    return v;
}

jv jstr_replace(jrs *r, const jnode *at, const jstr *s, const jstr *old, const jstr *rep, int64_t count) {
    jbuf b = {0};
    if (!jrs_work(r, at, s->len)) return jv_undef();
    size_t i = 0;
    int64_t done = 0;
    if (old->len == 0) {   /* Python inserts rep before every character and at the end */
        uint32_t cp;
        while ((count < 0 || done < count) && !r->failed) {
            jbuf_add(r, &b, rep->s, rep->len);
            done++;
            if (i >= s->len) break;
            size_t k = jutf8_decode(s->s + i, s->len - i, &cp);
            jbuf_add(r, &b, s->s + i, k);
            i += k;
        }
    } else {
        const char *hit;
        while ((count < 0 || done < count) && !r->failed &&
               (hit = memmem(s->s + i, s->len - i, old->s, old->len)) != NULL) {
            jbuf_add(r, &b, s->s + i, (size_t)(hit - s->s) - i);
            jbuf_add(r, &b, rep->s, rep->len);
            i = (size_t)(hit - s->s) + old->len;
            done++;
        }
    }
    jbuf_add(r, &b, s->s + i, s->len - i);
    if (r->failed) { jbuf_free(&b); return jv_undef(); }
    return jv_str_buf(r, &b);
}

/* One conversion of a printf-style format: spec is "%[flags][width][.prec]" + conv. */
static bool percent_one(jrs *r, const jnode *at, jbuf *b, const char *spec, size_t sl, char conv, jv v) {
    char f[48], tmp[512];
    snprintf(f, sizeof f, "%.*s", (int)(sl < 40 ? sl : 40), spec);
    size_t n = strlen(f);
    if (conv == 's' || conv == 'r') {
        jbuf t = {0};
        bool ok = conv == 's' ? jv_write_str(r, &t, v) : jv_write_repr(r, &t, v);
        int w = atoi(f + strspn(f + 1, "-+ #0") + 1);
        bool left = strchr(f, '-') != NULL;
        size_t len = t.n, pad = w > 0 && (size_t)w > len ? (size_t)w - len : 0;
        for (size_t i = 0; ok && !left && i < pad; i++) ok = jbuf_addc(r, b, ' ');
        ok = ok && jbuf_add(r, b, t.p ? t.p : "", len);
        for (size_t i = 0; ok && left && i < pad; i++) ok = jbuf_addc(r, b, ' ');
        jbuf_free(&t);
        return ok;
    }
    if (!jv_is_number(v)) return jrs_fail(r, at, RECUR_E_INVALID, "%%%c format: a number is required, not %s", conv, jv_type_name(v));
    bool is_int = strchr("dioxX", conv) != NULL;
    if (is_int) snprintf(f + n, sizeof f - n, "ll%c", conv == 'i' ? 'd' : conv);
    else snprintf(f + n, sizeof f - n, "%c", conv);
    long long iv = v.t == JV_FLOAT ? (long long)v.u.f : v.t == JV_INT ? v.u.i : v.u.b;
    int len = is_int ? snprintf(tmp, sizeof tmp, f, iv) : snprintf(tmp, sizeof tmp, f, jv_num(v));
    if (len < 0 || (size_t)len >= sizeof tmp) return jrs_fail(r, at, RECUR_E_INVALID, "format result too long");
    return jbuf_add(r, b, tmp, (size_t)len);
}

jv jstr_percent(jrs *r, const jnode *at, const jstr *fmt, jv args) {
    bool multi = args.t == JV_LIST && args.u.l->tuple;
    size_t used = 0, n_args = multi ? args.u.l->n : 1;
    jbuf b = {0};
    for (size_t i = 0; i < fmt->len && !r->failed; i++) {
        if (fmt->s[i] != '%') { jbuf_addc(r, &b, fmt->s[i]); continue; }
        size_t j = i + 1;
        j += strspn(fmt->s + j, "-+ #0");
        size_t digits = 0;
        for (; j < fmt->len && ((fmt->s[j] >= '0' && fmt->s[j] <= '9') || fmt->s[j] == '.'); j++) digits++;
        char conv = j < fmt->len ? fmt->s[j] : 0;
        if (conv == '%') { jbuf_addc(r, &b, '%'); i = j; continue; }
        if (!conv || !strchr("srdiFfeEgGxXo", conv)) { jrs_fail(r, at, RECUR_E_INVALID, "unsupported format character"); break; }
        if (digits > 5 || memchr(fmt->s + i, '.', j - i) != memrchr(fmt->s + i, '.', j - i)) {
            jrs_fail(r, at, RECUR_E_INVALID, "bad width or precision in a format");
            break;
        }
        if (used >= n_args) { jrs_fail(r, at, RECUR_E_INVALID, "not enough arguments for format string"); break; }
        jv v = multi ? args.u.l->items[used] : args;
        used++;
        percent_one(r, at, &b, fmt->s + i, j - i, conv == 'F' ? 'f' : conv, v);
        i = j;
    }
    if (!r->failed && used < n_args)
        jrs_fail(r, at, RECUR_E_INVALID, "not all arguments converted during string formatting");
    if (r->failed) { jbuf_free(&b); return jv_undef(); }
    return jv_str_buf(r, &b);
}

/* ---- str methods ---------------------------------------------------------------------------- */

typedef bool (*method_fn)(jrs *r, const jnode *at, jv self, jargs *a, jv *out);

static const jstr *str_arg(jrs *r, const jnode *at, const jargs *a, int pos, const char *name, bool required) {
    const jv *v = jargs_get(a, pos, name);
    if (v && v->t == JV_STR) return v->u.s;
    if (v && v->t == JV_NONE && !required) return NULL;
    if (v || required) jrs_fail(r, at, RECUR_E_INVALID, "argument %d must be a string", pos + 1);
    return NULL;
}

static bool affix_one(const jstr *s, const jstr *x, bool end) {
    if (x->len > s->len) return false;
    return !memcmp(s->s + (end ? s->len - x->len : 0), x->s, x->len);
}

static bool affix(jrs *r, const jnode *at, jv self, jargs *a, jv *out, bool end) {
    const jv *x = jargs_get(a, 0, NULL);
    bool hit = false;
    if (x && x->t == JV_STR) {
        hit = affix_one(self.u.s, x->u.s, end);
    } else if (x && x->t == JV_LIST && x->u.l->tuple) {
        for (size_t i = 0; i < x->u.l->n && !hit; i++) {
            if (x->u.l->items[i].t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "tuple items must be str");
            hit = affix_one(self.u.s, x->u.l->items[i].u.s, end);
        }
    } else {
        return jrs_fail(r, at, RECUR_E_INVALID, "%s argument must be str or a tuple of str",
                        end ? "endswith" : "startswith");
    }
    *out = jv_bool(hit);
    return true;
}

static bool m_startswith(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { return affix(r, at, self, a, out, false); }
static bool m_endswith(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { return affix(r, at, self, a, out, true); }

static bool strip_m(jrs *r, const jnode *at, jv self, jargs *a, jv *out, int mode) {
    const jstr *chars = str_arg(r, at, a, 0, "chars", false);
    if (r->failed) return false;
    *out = jstr_strip(r, self.u.s, chars, mode);
    return !r->failed;
}

static bool m_strip(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { return strip_m(r, at, self, a, out, 3); }
static bool m_lstrip(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { return strip_m(r, at, self, a, out, 1); }
static bool m_rstrip(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { return strip_m(r, at, self, a, out, 2); }

/* str.split(None, maxsplit): runs of whitespace, ends ignored */
static void split_ws(jrs *r, const jstr *s, int64_t maxsplit, jv list) {
    size_t i = 0, k;
    uint32_t cp;
    for (int64_t n = 0; !r->failed;) {
        while (i < s->len && jis_pyspace((k = jutf8_decode(s->s + i, s->len - i, &cp), cp))) i += k;
        if (i >= s->len) return;
        size_t b = i;
        if (maxsplit >= 0 && n >= maxsplit) {
            jv rest = jstr_strip(r, s, NULL, 2);
            if (rest.t == JV_STR) jlist_push(r, list, jv_str(r, rest.u.s->s + b, rest.u.s->len - b));
            jv_drop(rest);
            return;
        }
        while (i < s->len && !jis_pyspace((k = jutf8_decode(s->s + i, s->len - i, &cp), cp))) i += k;
        jlist_push(r, list, jv_str(r, s->s + b, i - b));
        n++;
    }
}

static bool m_split(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jstr *s = self.u.s, *sep = str_arg(r, at, a, 0, "sep", false);
    const jv *mv = jargs_get(a, 1, "maxsplit");
    int64_t maxsplit = mv && mv->t == JV_INT ? mv->u.i : -1;
    if (r->failed || !jrs_work(r, at, s->len)) return false;
    if (sep && sep->len == 0) return jrs_fail(r, at, RECUR_E_INVALID, "empty separator");
    *out = jv_list(r, 0);
    if (!sep) {
        split_ws(r, s, maxsplit, *out);
        return !r->failed;
    }
    size_t i = 0;
    const char *hit;
    for (int64_t n = 0; (maxsplit < 0 || n < maxsplit) && (hit = memmem(s->s + i, s->len - i, sep->s, sep->len)); n++) {
        jlist_push(r, *out, jv_str(r, s->s + i, (size_t)(hit - s->s) - i));
        i = (size_t)(hit - s->s) + sep->len;
    }
    jlist_push(r, *out, jv_str(r, s->s + i, s->len - i));
    return !r->failed;
}

static bool m_splitlines(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    (void)a;
    const jstr *s = self.u.s;
    if (!jrs_work(r, at, s->len)) return false;
    *out = jv_list(r, 0);
    size_t b = 0;
    for (size_t i = 0; i < s->len && !r->failed; i++) {
        if (s->s[i] != '\n' && s->s[i] != '\r') continue;
        jlist_push(r, *out, jv_str(r, s->s + b, i - b));
        if (s->s[i] == '\r' && i + 1 < s->len && s->s[i + 1] == '\n') i++;
        b = i + 1;
    }
    if (b < s->len) jlist_push(r, *out, jv_str(r, s->s + b, s->len - b));
    return !r->failed;
}

static bool m_replace(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jstr *old = str_arg(r, at, a, 0, "old", true), *rep = str_arg(r, at, a, 1, "new", true);
    const jv *cv = jargs_get(a, 2, "count");
    if (r->failed) return false;
    *out = jstr_replace(r, at, self.u.s, old, rep, cv && cv->t == JV_INT ? cv->u.i : -1);
    return !r->failed;
}

static bool case_m(jrs *r, jv self, jv *out, int how) {
    *out = jstr_case(r, self.u.s, how);
    return !r->failed;
}

static bool m_upper(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return case_m(r, self, out, JCASE_UPPER); }
static bool m_lower(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return case_m(r, self, out, JCASE_LOWER); }
static bool m_title(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return case_m(r, self, out, JCASE_TITLE); }
static bool m_capitalize(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return case_m(r, self, out, JCASE_CAPITALIZE); }

static bool m_find(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jstr *x = str_arg(r, at, a, 0, "sub", true);
    if (r->failed || !jrs_work(r, at, self.u.s->len)) return false;
    const char *hit = memmem(self.u.s->s, self.u.s->len, x->s, x->len);
    *out = jv_int(hit ? (int64_t)jutf8_count(self.u.s->s, (size_t)(hit - self.u.s->s)) : -1);
    return true;
}

static bool m_count(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jstr *x = str_arg(r, at, a, 0, "sub", true), *s = self.u.s;
    if (r->failed || !jrs_work(r, at, s->len)) return false;
    if (x->len == 0) { *out = jv_int((int64_t)jutf8_count(s->s, s->len) + 1); return true; }
    int64_t n = 0;
    for (const char *p = s->s; (p = memmem(p, s->len - (size_t)(p - s->s), x->s, x->len)); p += x->len) n++;
    *out = jv_int(n);
    return true;
}

static bool m_join(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jv *seq = jargs_get(a, 0, NULL);
    jv items;
    if (!seq) return jrs_fail(r, at, RECUR_E_INVALID, "join() takes one argument");
    if (!jv_iter_list(r, at, *seq, &items)) return false;
    jbuf b = {0};
    for (size_t i = 0; i < items.u.l->n && !r->failed; i++) {
        jv x = items.u.l->items[i];
        if (x.t != JV_STR) { jrs_fail(r, at, RECUR_E_INVALID, "sequence item %zu: expected str", i); break; }
        if (i) jbuf_add(r, &b, self.u.s->s, self.u.s->len);
        jbuf_add(r, &b, x.u.s->s, x.u.s->len);
    }
    jv_drop(items);
    if (r->failed) { jbuf_free(&b); return false; }
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

static bool char_class(jv self, int cls) {
    const jstr *s = self.u.s;
    if (!s->len) return false;
    uint32_t cp;
    for (size_t i = 0, k; i < s->len; i += k) {
        k = jutf8_decode(s->s + i, s->len - i, &cp);
        bool ok = cls == 0 ? (cp >= '0' && cp <= '9') : cls == 1 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z')
                : cls == 2 ? jis_pyspace(cp) : ((cp >= '0' && cp <= '9') || ((cp | 32) >= 'a' && (cp | 32) <= 'z'));
        if (!ok) return false;
    }
    return true;
}

static bool m_isdigit(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)r, (void)at, (void)a; *out = jv_bool(char_class(self, 0)); return true; }
static bool m_isalpha(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)r, (void)at, (void)a; *out = jv_bool(char_class(self, 1)); return true; }
static bool m_isspace(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)r, (void)at, (void)a; *out = jv_bool(char_class(self, 2)); return true; }
static bool m_isalnum(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)r, (void)at, (void)a; *out = jv_bool(char_class(self, 3)); return true; }

/* str.format with {} / {0} / {name} fields (no format specs) */
static bool m_format(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jstr *s = self.u.s;
    jbuf b = {0};
    int auto_i = 0;
    for (size_t i = 0; i < s->len && !r->failed; i++) {
        char c = s->s[i];
        if ((c == '{' || c == '}') && i + 1 < s->len && s->s[i + 1] == c) { jbuf_addc(r, &b, c); i++; continue; }
        if (c != '{') { jbuf_addc(r, &b, c); continue; }
        const char *close = memchr(s->s + i, '}', s->len - i);
        if (!close) { jrs_fail(r, at, RECUR_E_INVALID, "format: single '{'"); break; }
        size_t fl = (size_t)(close - s->s) - i - 1;
        char field[64];
        snprintf(field, sizeof field, "%.*s", (int)(fl < 63 ? fl : 63), s->s + i + 1);
        const jv *v = !fl ? jargs_get(a, auto_i++, NULL) : (field[0] >= '0' && field[0] <= '9')
                      ? jargs_get(a, atoi(field), NULL) : jargs_get(a, -1, field);
        if (!v) { jrs_fail(r, at, RECUR_E_INVALID, "format: no argument for '{%s}'", field); break; }
        jv_write_str(r, &b, *v);
        i += fl + 1;
    }
    if (r->failed) { jbuf_free(&b); return false; }
    *out = jv_str_buf(r, &b);
    return !r->failed;
}

/* ---- dict methods ------------------------------------------------------------------------- */

static bool m_items(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    (void)at, (void)a;
    const jdict *d = self.u.d;
    *out = jv_list(r, d->n);
    for (size_t i = 0; i < d->n && !r->failed; i++) {
        jv pair = jv_list(r, 2);
        if (pair.t != JV_LIST) break;
        pair.u.l->tuple = true;
        jlist_push(r, pair, jv_ref(d->keys[i]));
        jlist_push(r, pair, jv_ref(d->vals[i]));
        jlist_push(r, *out, pair);
    }
    return !r->failed;
}

static bool dict_column(jrs *r, jv self, jv *out, bool keys) {
    const jdict *d = self.u.d;
    *out = jv_list(r, d->n);
    for (size_t i = 0; i < d->n && !r->failed; i++) jlist_push(r, *out, jv_ref(keys ? d->keys[i] : d->vals[i]));
    return !r->failed;
}

static bool m_keys(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return dict_column(r, self, out, true); }
static bool m_values(jrs *r, const jnode *at, jv self, jargs *a, jv *out) { (void)at, (void)a; return dict_column(r, self, out, false); }

static bool m_get(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jv *k = jargs_get(a, 0, "key"), *def = jargs_get(a, 1, "default");
    if (!k) return jrs_fail(r, at, RECUR_E_INVALID, "get() needs a key");
    const jv *v = jdict_get(self.u.d, *k);
    *out = v ? jv_ref(*v) : def ? jv_ref(*def) : jv_none();
    return true;
}

/* loop.cycle(a, b, ...): the argument at loop.index0 modulo the count */
static bool m_cycle(jrs *r, const jnode *at, jv self, jargs *a, jv *out) {
    const jv *i = jdict_get_str(self.u.d, "index0", 6);
    if (!i || i->t != JV_INT) return jrs_fail(r, at, RECUR_E_INVALID, "cycle() is a method of loop");
    if (!a->n_pos) return jrs_fail(r, at, RECUR_E_INVALID, "cycle() needs at least one argument");
    *out = jv_ref(a->pos[i->u.i % a->n_pos]);
    return true;
}

static const struct { jv_type t; const char *name; method_fn fn; } k_methods[] = {
    {JV_STR, "startswith", m_startswith}, {JV_STR, "endswith", m_endswith}, {JV_STR, "strip", m_strip},
    {JV_STR, "lstrip", m_lstrip}, {JV_STR, "rstrip", m_rstrip}, {JV_STR, "split", m_split},
    {JV_STR, "splitlines", m_splitlines}, {JV_STR, "replace", m_replace}, {JV_STR, "upper", m_upper},
    {JV_STR, "lower", m_lower}, {JV_STR, "title", m_title}, {JV_STR, "capitalize", m_capitalize},
    {JV_STR, "find", m_find}, {JV_STR, "count", m_count}, {JV_STR, "join", m_join},
    {JV_STR, "isdigit", m_isdigit}, {JV_STR, "isalpha", m_isalpha}, {JV_STR, "isspace", m_isspace},
    {JV_STR, "isalnum", m_isalnum}, {JV_STR, "format", m_format},
    {JV_DICT, "items", m_items}, {JV_DICT, "keys", m_keys}, {JV_DICT, "values", m_values},
    {JV_DICT, "get", m_get}, {JV_DICT, "cycle", m_cycle},
};

bool jmethod_call(jrs *r, const jnode *at, jv self, const char *name, jargs *a, jv *out, bool *found) {
    *found = false;
    *out = jv_undef();
    for (size_t i = 0; i < sizeof k_methods / sizeof k_methods[0]; i++) {
        if (k_methods[i].t != self.t || strcmp(k_methods[i].name, name)) continue;
        *found = true;
        return k_methods[i].fn(r, at, self, a, out);
    }
    return true;
}

/* ---- globals ------------------------------------------------------------------------------ */

static bool g_range(jrs *r, const jnode *at, jargs *a, jv *out) {
    int64_t v[3] = {0, 0, 1};
    if (a->n_pos < 1 || a->n_pos > 3 || a->n_kw) return jrs_fail(r, at, RECUR_E_INVALID, "range() takes 1 to 3 integers");
    for (int i = 0; i < a->n_pos; i++) {
        jv x = a->pos[i];
        if (x.t != JV_INT && x.t != JV_BOOL) return jrs_fail(r, at, RECUR_E_INVALID, "range() arguments must be integers");
        v[a->n_pos == 1 ? 1 : i] = x.t == JV_INT ? x.u.i : x.u.b;
    }
    if (v[2] == 0) return jrs_fail(r, at, RECUR_E_INVALID, "range() step must not be zero");
    double n = v[2] > 0 ? ((double)v[1] - (double)v[0]) / (double)v[2] : ((double)v[0] - (double)v[1]) / -(double)v[2];
    if (n > (double)r->max_iters) return jrs_fail(r, at, RECUR_E_FULL, "range() of more than %llu items",
                                                  (unsigned long long)r->max_iters);
    *out = jv_list(r, 0);
    for (int64_t i = v[0]; !r->failed && (v[2] > 0 ? i < v[1] : i > v[1]); i += v[2]) {
        jlist_push(r, *out, jv_int(i));
        if (v[2] > 0 ? v[1] - i <= v[2] : i - v[1] <= -v[2]) break;
    }
    return !r->failed;
}

/* namespace(dict?, **kw) and dict(dict?, **kw) */
static bool g_mapping(jrs *r, const jnode *at, jargs *a, jv *out, bool ns) {
    if (a->n_pos > 1 || (a->n_pos == 1 && a->pos[0].t != JV_DICT))
        return jrs_fail(r, at, RECUR_E_INVALID, "%s() takes a mapping and keyword arguments", ns ? "namespace" : "dict");
    *out = ns ? jv_namespace(r) : jv_dict(r);
    if (a->n_pos == 1)
        for (size_t i = 0; i < a->pos[0].u.d->n && !r->failed; i++)
            jdict_set(r, *out, jv_ref(a->pos[0].u.d->keys[i]), jv_ref(a->pos[0].u.d->vals[i]));
    for (int i = 0; i < a->n_kw && !r->failed; i++) {
        jv key = {.t = JV_STR, .u.s = a->kw_name[i]};
        jdict_set(r, *out, jv_ref(key), jv_ref(a->kw[i]));
    }
    return !r->failed;
}

static bool g_strftime(jrs *r, const jnode *at, jargs *a, jv *out) {
    const jv *f = jargs_get(a, 0, "format");
    if (!f || f->t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "strftime_now() takes a format string");
    char buf[512];
    size_t n = f->u.s->len ? strftime(buf, sizeof buf, f->u.s->s, &r->now) : 0;
    if (!n && f->u.s->len) return jrs_fail(r, at, RECUR_E_INVALID, "strftime_now(): result too long or empty");
    *out = jv_str(r, buf, n);
    return !r->failed;
}

bool jglobal_call(jrs *r, const jnode *at, int fn, jargs *a, jv *out) {
    *out = jv_undef();
    switch (fn) {
    case JFN_RANGE: return g_range(r, at, a, out);
    case JFN_NAMESPACE: return g_mapping(r, at, a, out, true);
    case JFN_DICT: return g_mapping(r, at, a, out, false);
    case JFN_STRFTIME: return g_strftime(r, at, a, out);
    case JFN_RAISE: {
        const jv *m = jargs_get(a, 0, NULL);
        jbuf b = {0};
        if (m) jv_write_str(r, &b, *m);
        jrs_fail(r, at, RECUR_E_INVALID, "raise_exception: %.400s", b.p ? b.p : "");
        jbuf_free(&b);
        return false;
    }
    default: return jrs_fail(r, at, RECUR_E_INVALID, "unknown function");
    }
}

int jglobal_find(const char *name, size_t len) {
    static const struct { const char *name; int fn; } k[] = {
        {"range", JFN_RANGE}, {"namespace", JFN_NAMESPACE}, {"dict", JFN_DICT},
        {"raise_exception", JFN_RAISE}, {"strftime_now", JFN_STRFTIME}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strlen(k[i].name) == len && !memcmp(k[i].name, name, len)) return k[i].fn;
    return 0;
}
