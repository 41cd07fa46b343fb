/* jinja_eval.c — expressions: names, literals, lookups (Jinja2's getattr/getitem with
 * Python's indexing and slicing), operators with Python's typing rules, calls.
 *
 * Lookups follow Jinja2 with the default Undefined: a missing key, attribute or index gives
 * undefined; looking anything up *on* an undefined value is an error, as is using it in
 * arithmetic or calling it. `and`/`or` return an operand, as in Python.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

static bool fail_type(jrs *r, const jnode *at, const char *op, jv a, jv b) {
    if (a.t == JV_UNDEF || b.t == JV_UNDEF)
        return jrs_fail(r, at, RECUR_E_INVALID, "undefined value used with '%s'", op);
    return jrs_fail(r, at, RECUR_E_INVALID, "unsupported operand types for %s: '%s' and '%s'", op,
                    jv_type_name(a), jv_type_name(b));
}

/* ---- lookups ----------------------------------------------------------------------------- */

bool jeval_getattr(jrs *r, const jnode *at, jv obj, const char *name, size_t len, jv *out) {
    *out = jv_undef();
    if (obj.t == JV_UNDEF)
        return jrs_fail(r, at, RECUR_E_INVALID, "cannot read attribute '%.*s' of an undefined value", (int)len, name);
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        const jv *v = jdict_get_str(obj.u.d, name, len);
        if (v) *out = jv_ref(*v);
    }
    return true;
}

/* A Python index (negative from the end) into [0, n); false when out of range. */
static bool py_index(int64_t i, size_t n, size_t *out) {
    if (i < 0) i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n) return false;
    *out = (size_t)i;
    return true;
}

static bool str_is_ascii(const jstr *s) {
    for (size_t i = 0; i < s->len; i++)
        if ((unsigned char)s->s[i] >= 0x80) return false;
    return true;
}

static bool str_index(jrs *r, const jnode *at, const jstr *s, int64_t i, jv *out) {
    if (!jrs_work(r, at, s->len)) return false;
    size_t n = str_is_ascii(s) ? s->len : jutf8_count(s->s, s->len), k;
    if (!py_index(i, n, &k)) return true;
    size_t b = n == s->len ? k : jutf8_offset(s->s, s->len, k);
    size_t e = n == s->len ? k + 1 : jutf8_offset(s->s, s->len, k + 1);
    *out = jv_str(r, s->s + b, e - b);
    return !r->failed;
}

bool jeval_getitem(jrs *r, const jnode *at, jv obj, jv key, jv *out) {
    *out = jv_undef();
    if (obj.t == JV_UNDEF) return jrs_fail(r, at, RECUR_E_INVALID, "cannot index an undefined value");
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        const jv *v = jdict_get(obj.u.d, key);
        if (v) *out = jv_ref(*v);
        return true;
    }
    if (key.t != JV_INT && key.t != JV_BOOL) return true;
    int64_t i = key.t == JV_INT ? key.u.i : key.u.b;
    size_t k;
    if (obj.t == JV_LIST && py_index(i, obj.u.l->n, &k)) *out = jv_ref(obj.u.l->items[k]);
    if (obj.t == JV_STR) return str_index(r, at, obj.u.s, i, out);
    return true;
}

/* ---- slicing ---------------------------------------------------------------------------- */

static bool slice_bound(jrs *r, const jnode *at, const jnode *n, int64_t *out, bool *given) {
    *given = false;
    if (!n) return true;
    jv v;
    if (!jeval(r, n, &v)) return false;
    if (v.t == JV_NONE) return true;
    if (v.t != JV_INT && v.t != JV_BOOL) {
        jv_drop(v);
        return jrs_fail(r, at, RECUR_E_INVALID, "slice indices must be integers or None");
    }
    *out = v.t == JV_INT ? v.u.i : v.u.b;
    *given = true;
    return true;
}

static int64_t adjust(int64_t i, int64_t len, int64_t step) {
    if (i < 0) {
        i += len;
        if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
        i = step < 0 ? len - 1 : len;
    }
    return i;
}

static bool eval_slice(jrs *r, const jnode *n, jv *out) {
    jv obj;
    int64_t b = 0, e = 0, step = 1;
    bool hb, he, hs;
    if (!jeval(r, n->kid[0], &obj)) return false;
    if (!slice_bound(r, n, n->kid[1], &b, &hb) || !slice_bound(r, n, n->kid[2], &e, &he) ||
        !slice_bound(r, n, n->kid[3], &step, &hs))
        goto fail;
    if (step == 0) { jrs_fail(r, n, RECUR_E_INVALID, "slice step cannot be zero"); goto fail; }
    if (obj.t != JV_LIST && obj.t != JV_STR) {
        if (obj.t != JV_UNDEF) jrs_fail(r, n, RECUR_E_INVALID, "'%s' object is not subscriptable", jv_type_name(obj));
        else jrs_fail(r, n, RECUR_E_INVALID, "cannot slice an undefined value");
        goto fail;
    }
    const jstr *s = obj.t == JV_STR ? obj.u.s : NULL;
    if (s && !jrs_work(r, n, s->len)) goto fail;
    size_t *off = NULL;   /* byte offset of each code point of a non-ASCII string, and the end */
    int64_t len = (int64_t)(s ? s->len : obj.u.l->n);
    if (s && !str_is_ascii(s)) {
        len = (int64_t)jutf8_count(s->s, s->len);
        if (!(off = malloc(((size_t)len + 1) * sizeof *off))) { jrs_nomem(r); goto fail; }
        uint32_t cp;
        off[0] = 0;
        for (int64_t i = 0; i < len; i++) off[i + 1] = off[i] + jutf8_decode(s->s + off[i], s->len - off[i], &cp);
    }
    b = hb ? adjust(b, len, step) : step < 0 ? len - 1 : 0;
    e = he ? adjust(e, len, step) : step < 0 ? -1 : len;
    jbuf buf = {0};
    *out = obj.t == JV_LIST ? jv_list(r, 0) : jv_undef();
    if (obj.t == JV_LIST && !r->failed) out->u.l->tuple = obj.u.l->tuple;
    for (int64_t i = b; !r->failed && (step > 0 ? i < e : i > e); i += step) {
        if (obj.t == JV_LIST) jlist_push(r, *out, jv_ref(obj.u.l->items[i]));
        else if (off) jbuf_add(r, &buf, s->s + off[i], off[i + 1] - off[i]);
        else jbuf_add(r, &buf, s->s + i, 1);
        if (step > 0 ? e - i - step <= 0 : (i - e) + step <= 0) break;   /* i + step would pass e */
    }
    free(off);
    if (obj.t == JV_STR) *out = jv_str_buf(r, &buf);
    jv_drop(obj);
    return !r->failed;
fail:
    jv_drop(obj);
    return false;
}

/* ---- arithmetic -------------------------------------------------------------------------- */

static bool is_intlike(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.u.i : v.u.b; }

static bool repeat(jrs *r, const jnode *at, jv seq, int64_t times, jv *out) {
    if (times < 0) times = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s->len && (uint64_t)times > r->max_str / seq.u.s->len)
            return jrs_fail(r, at, RECUR_E_FULL, "string longer than %zu bytes", r->max_str);
        jbuf b = {0};
        for (int64_t i = 0; i < times && !r->failed; i++) jbuf_add(r, &b, seq.u.s->s, seq.u.s->len);
        *out = jv_str_buf(r, &b);
        return !r->failed;
    }
    if (seq.u.l->n && (uint64_t)times > r->max_iters / seq.u.l->n)
        return jrs_fail(r, at, RECUR_E_FULL, "list longer than %llu items", (unsigned long long)r->max_iters);
    *out = jv_list(r, 0);
    for (int64_t i = 0; i < times && !r->failed; i++)
        for (size_t k = 0; k < seq.u.l->n; k++) jlist_push(r, *out, jv_ref(seq.u.l->items[k]));
    return !r->failed;
}

static bool concat_seq(jrs *r, jv a, jv b, jv *out) {
    if (a.t == JV_STR) {
        jbuf buf = {0};
        if (jbuf_add(r, &buf, a.u.s->s, a.u.s->len) && jbuf_add(r, &buf, b.u.s->s, b.u.s->len))
            *out = jv_str_buf(r, &buf);
        else jbuf_free(&buf);
        return !r->failed;
    }
    *out = jv_list(r, a.u.l->n + b.u.l->n);
    if (!r->failed) out->u.l->tuple = a.u.l->tuple;
    for (size_t i = 0; i < a.u.l->n; i++) jlist_push(r, *out, jv_ref(a.u.l->items[i]));
    for (size_t i = 0; i < b.u.l->n; i++) jlist_push(r, *out, jv_ref(b.u.l->items[i]));
    return !r->failed;
}

static bool int_op(jrs *r, const jnode *at, int op, int64_t a, int64_t b, jv *out) {
    int64_t v = 0;
    bool ovf = false;
    switch (op) {
    case JOP_ADD: ovf = __builtin_add_overflow(a, b, &v); break;
    case JOP_SUB: ovf = __builtin_sub_overflow(a, b, &v); break;
    case JOP_MUL: ovf = __builtin_mul_overflow(a, b, &v); break;
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (b == 0) return jrs_fail(r, at, RECUR_E_INVALID, "integer division or modulo by zero");
        if (a == INT64_MIN && b == -1) { ovf = true; break; }
        v = op == JOP_FLOORDIV ? a / b - ((a % b != 0) && ((a < 0) != (b < 0))) : a % b;
        if (op == JOP_MOD && v != 0 && ((v < 0) != (b < 0))) v += b;
        break;
    case JOP_POW:
        v = 1;
        for (int64_t i = 0; i < b && !ovf; i++) ovf = __builtin_mul_overflow(v, a, &v);
        if (a == 0 || a == 1 || a == -1) ovf = false, v = a == 0 ? (b == 0) : a == 1 ? 1 : (b % 2 ? -1 : 1);
        break;
    default: return false;
    }
    if (ovf) return jrs_fail(r, at, RECUR_E_INVALID, "integer overflow");
    *out = jv_int(v);
    return true;
}

static bool float_op(jrs *r, const jnode *at, int op, double a, double b, jv *out) {
    double v;
    switch (op) {
    case JOP_ADD: v = a + b; break;
    case JOP_SUB: v = a - b; break;
    case JOP_MUL: v = a * b; break;
    case JOP_DIV:
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (b == 0) return jrs_fail(r, at, RECUR_E_INVALID, "division by zero");
        v = op == JOP_DIV ? a / b : op == JOP_FLOORDIV ? floor(a / b) : fmod(a, b);
        if (op == JOP_MOD && v != 0 && ((v < 0) != (b < 0))) v += b;
        break;
    case JOP_POW: v = pow(a, b); break;
    default: return false;
    }
    *out = jv_float(v);
    return true;
}

static const char *op_text(int op) {
    static const char *const t[] = {"?", "+", "-", "*", "/", "//", "%", "**", "~"};
    return op >= JOP_ADD && op <= JOP_CONCAT ? t[op] : "?";
}

static bool binop(jrs *r, const jnode *at, int op, jv a, jv b, jv *out) {
    if (op == JOP_CONCAT) {
        jbuf buf = {0};
        if (jv_write_str(r, &buf, a) && jv_write_str(r, &buf, b)) *out = jv_str_buf(r, &buf);
        else jbuf_free(&buf);
        return !r->failed;
    }
    if (jv_is_number(a) && jv_is_number(b)) {
        if (is_intlike(a) && is_intlike(b) && op != JOP_DIV && !(op == JOP_POW && ival(b) < 0))
            return int_op(r, at, op, ival(a), ival(b), out);
        return float_op(r, at, op, jv_num(a), jv_num(b), out);
    }
    bool seq_a = a.t == JV_STR || a.t == JV_LIST, seq_b = b.t == JV_STR || b.t == JV_LIST;
    if (op == JOP_ADD && seq_a && a.t == b.t && (a.t == JV_STR || a.u.l->tuple == b.u.l->tuple))
        return concat_seq(r, a, b, out);
    if (op == JOP_MOD && a.t == JV_STR) {
        *out = jstr_percent(r, at, a.u.s, b);
        return !r->failed;
    }
    if (op == JOP_MUL && seq_a && is_intlike(b)) return repeat(r, at, a, ival(b), out);
    if (op == JOP_MUL && seq_b && is_intlike(a)) return repeat(r, at, b, ival(a), out);
    return fail_type(r, at, op_text(op), a, b);
}

/* ---- comparisons ------------------------------------------------------------------------ */

static bool contains(jrs *r, const jnode *at, jv item, jv box, bool *out) {
    *out = false;
    switch (box.t) {
    case JV_UNDEF: return true;
    case JV_STR:
        if (item.t != JV_STR)
            return jrs_fail(r, at, RECUR_E_INVALID, "'in <string>' requires string as left operand, not %s",
                            jv_type_name(item));
        if (!jrs_work(r, at, box.u.s->len)) return false;
        *out = item.u.s->len == 0 || memmem(box.u.s->s, box.u.s->len, item.u.s->s, item.u.s->len) != NULL;
        return true;
    case JV_LIST:
        for (size_t i = 0; i < box.u.l->n && !*out; i++) *out = jv_equal(item, box.u.l->items[i]);
        return true;
    case JV_DICT: *out = jdict_get(box.u.d, item) != NULL; return true;
    default:
        return jrs_fail(r, at, RECUR_E_INVALID, "argument of type '%s' is not iterable", jv_type_name(box));
    }
}

static bool compare_one(jrs *r, const jnode *at, int op, jv a, jv b, bool *out) {
    int c = 0;
    switch (op) {
    case JOP_EQ: *out = jv_equal(a, b); return true;
    case JOP_NE: *out = !jv_equal(a, b); return true;
    case JOP_IN: return contains(r, at, a, b, out);
    case JOP_NOTIN:
        if (!contains(r, at, a, b, out)) return false;
        *out = !*out;
        return true;
    default: break;
    }
    if (!jv_compare(r, at, a, b, &c)) return false;
    *out = op == JOP_LT ? c < 0 : op == JOP_LE ? c <= 0 : op == JOP_GT ? c > 0 : c >= 0;
    return true;
}

static bool eval_compare(jrs *r, const jnode *n, jv *out) {
    jv a, b;
    bool res = true;
    if (!jeval(r, n->kid[0], &a)) return false;
    for (int i = 1; i < n->n_kid && res; i++) {
        if (!jeval(r, n->kid[i], &b)) { jv_drop(a); return false; }
        bool ok = compare_one(r, n, n->ops[i - 1], a, b, &res);
        jv_drop(a);
        a = b;
        if (!ok) { jv_drop(a); return false; }
    }
    jv_drop(a);
    *out = jv_bool(res);
    return true;
}

/* ---- calls ----------------------------------------------------------------------------- */

void jargs_free(jargs *a) {
    for (int i = 0; i < a->n_pos; i++) jv_drop(a->pos[i]);
    for (int i = 0; i < a->n_kw; i++) jv_drop(a->kw[i]);
    a->n_pos = a->n_kw = 0;
}

bool jeval_args(jrs *r, const jnode *n, int first, jargs *a) {
    a->n_pos = a->n_kw = 0;
    for (int i = first; i < n->n_kid; i++) {
        jv v;
        if (!jeval(r, n->kid[i], &v)) { jargs_free(a); return false; }
        if (n->names && n->names[i]) {
            a->kw_name[a->n_kw] = n->names[i];
            a->kw[a->n_kw++] = v;
        } else {
            a->pos[a->n_pos++] = v;
        }
    }
    return true;
}

const jv *jargs_get(const jargs *a, int pos, const char *name) {
    if (pos >= 0 && pos < a->n_pos) return &a->pos[pos];
    for (int i = 0; name && i < a->n_kw; i++)
        if (!strcmp(a->kw_name[i]->s, name)) return &a->kw[i];
    return NULL;
}

bool jcall_value(jrs *r, const jnode *at, jv callee, jargs *a, jv *out) {
    *out = jv_undef();
    if (callee.t == JV_MACRO) return jcall_macro(r, at, callee.u.m, a, out);
    if (callee.t == JV_FUNC) return jglobal_call(r, at, callee.u.fn, a, out);
    if (callee.t == JV_UNDEF) return jrs_fail(r, at, RECUR_E_INVALID, "an undefined value is not callable");
    return jrs_fail(r, at, RECUR_E_INVALID, "'%s' object is not callable", jv_type_name(callee));
}

static bool eval_call(jrs *r, const jnode *n, jv *out) {
    const jnode *f = n->kid[0];
    jv callee = jv_undef(), self = jv_undef();
    jargs a;
    bool ok = false, found = false;
    if (f->kind == JN_ATTR) {
        if (!jeval(r, f->kid[0], &self)) return false;
        if (!jeval_args(r, n, 1, &a)) { jv_drop(self); return false; }
        ok = jmethod_call(r, n, self, f->name->s, &a, out, &found);
        if (!found && !r->failed && jeval_getattr(r, f, self, f->name->s, f->name->len, &callee))
            ok = jcall_value(r, n, callee, &a, out);
    } else {
        if (!jeval(r, f, &callee)) return false;
        if (!jeval_args(r, n, 1, &a)) { jv_drop(callee); return false; }
        ok = jcall_value(r, n, callee, &a, out);
    }
    jargs_free(&a);
    jv_drop(callee);
    jv_drop(self);
    return ok && !r->failed;
}

static bool eval_filter_or_test(jrs *r, const jnode *n, jv *out) {
    jv in;
    jargs a;
    if (!jeval(r, n->kid[0], &in)) return false;
    if (!jeval_args(r, n, 1, &a)) { jv_drop(in); return false; }
    bool ok, res = false;
    if (n->kind == JN_FILTER) {
        ok = jfilter_apply(r, n, n->name->s, in, &a, out);
    } else {
        ok = jtest_apply(r, n, n->name->s, in, &a, &res);
        *out = jv_bool(res != n->neg);
    }
    jargs_free(&a);
    jv_drop(in);
    return ok && !r->failed;
}

/* ---- the dispatcher ---------------------------------------------------------------------- */

static bool eval_collection(jrs *r, const jnode *n, jv *out) {
    *out = n->kind == JN_DICT ? jv_dict(r) : jv_list(r, (size_t)n->n_kid);
    if (n->kind == JN_TUPLE && !r->failed) out->u.l->tuple = true;
    for (int i = 0; i < n->n_kid && !r->failed; i++) {
        jv v, k;
        if (!jeval(r, n->kid[i], &v)) break;
        if (n->kind != JN_DICT) { jlist_push(r, *out, v); continue; }
        k = v;
        if (!jeval(r, n->kid[++i], &v)) { jv_drop(k); break; }
        jdict_set(r, *out, k, v);
    }
    if (r->failed) { jv_drop(*out); *out = jv_undef(); }
    return !r->failed;
}

static bool eval_unary(jrs *r, const jnode *n, jv *out) {
    jv x;
    if (!jeval(r, n->kid[0], &x)) return false;
    if (n->kind == JN_NOT) {
        *out = jv_bool(!jv_truthy(x));
    } else if (!jv_is_number(x)) {
        jrs_fail(r, n, RECUR_E_INVALID, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+',
                 jv_type_name(x));
    } else if (n->kind == JN_POS) {
        *out = x.t == JV_BOOL ? jv_int(x.u.b) : x;
    } else if (x.t == JV_FLOAT) {
        *out = jv_float(-x.u.f);
    } else if (ival(x) == INT64_MIN) {
        jrs_fail(r, n, RECUR_E_INVALID, "integer overflow");
    } else {
        *out = jv_int(-ival(x));
    }
    jv_drop(x);
    return !r->failed;
}

static bool eval_binop(jrs *r, const jnode *n, jv *out) {
    jv a, b;
    if (!jeval(r, n->kid[0], &a)) return false;
    if (n->kind == JN_AND || n->kind == JN_OR) {
        if (jv_truthy(a) == (n->kind == JN_OR)) { *out = a; return true; }
        jv_drop(a);
        return jeval(r, n->kid[1], out);
    }
    if (!jeval(r, n->kid[1], &b)) { jv_drop(a); return false; }
    bool ok = n->kind == JN_ITEM ? jeval_getitem(r, n, a, b, out) : binop(r, n, n->op, a, b, out);
    jv_drop(a);
    jv_drop(b);
    return ok && !r->failed;
}

static bool eval_name(jrs *r, const jnode *n, jv *out) {
    const jv *v = jscope_lookup(r, n->name->s, n->name->len);
    if (v) { *out = jv_ref(*v); return true; }
    int fn = jglobal_find(n->name->s, n->name->len);
    if (fn) { out->t = JV_FUNC; out->u.fn = fn; }
    return true;
}

static bool eval_node(jrs *r, const jnode *n, jv *out) {
    switch (n->kind) {
    case JN_LIT: *out = jv_ref(n->lit); return true;
    case JN_NAME: return eval_name(r, n, out);
    case JN_LIST:
    case JN_TUPLE:
    case JN_DICT: return eval_collection(r, n, out);
    case JN_ATTR: {
        jv obj;
        if (!jeval(r, n->kid[0], &obj)) return false;
        bool ok = jeval_getattr(r, n, obj, n->name->s, n->name->len, out);
        jv_drop(obj);
        return ok;
    }
    case JN_ITEM:
    case JN_BINOP:
    case JN_AND:
    case JN_OR: return eval_binop(r, n, out);
    case JN_SLICE: return eval_slice(r, n, out);
    case JN_CALL: return eval_call(r, n, out);
    case JN_FILTER:
    case JN_TEST: return eval_filter_or_test(r, n, out);
    case JN_NEG:
    case JN_POS:
    case JN_NOT: return eval_unary(r, n, out);
    case JN_COMPARE: return eval_compare(r, n, out);
    case JN_COND: {
        jv c;
        if (!jeval(r, n->kid[1], &c)) return false;
        bool t = jv_truthy(c);
        jv_drop(c);
        if (t) return jeval(r, n->kid[0], out);
        return n->kid[2] ? jeval(r, n->kid[2], out) : true;
    }
    default: return jrs_fail(r, n, RECUR_E_INVALID, "not an expression");
    }
}

bool jeval(jrs *r, const jnode *n, jv *out) {
    *out = jv_undef();
    if (r->failed) return false;
    if (++r->nest > JMAX_EVAL_NEST) {
        r->nest--;
        return jrs_fail(r, n, RECUR_E_FULL, "evaluation nested more than %d deep", JMAX_EVAL_NEST);
    }
    bool ok = eval_node(r, n, out);
    r->nest--;
    return ok;
}
