/* jinja_exec.c — statements, scopes, macro calls and jinja_render.
 *
 * Scopes follow Jinja2: the context's variables sit in a globals scope under the template's
 * root scope; `set` writes the innermost scope; each for-loop iteration runs in a fresh scope
 * (so nothing set inside a loop is seen after it — use a namespace); `if` makes no scope; a
 * macro call runs in a fresh scope whose parent is the root (it sees top-level variables as
 * they are at call time, not the caller's locals).
 */
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

static bool exec(jrs *r, const jnode *n);

/* ---- scopes ------------------------------------------------------------------------------ */

bool jscope_set(jrs *r, jscope *s, jstr *name, jv v) {
    for (size_t i = 0; i < s->n; i++) {
        if (s->e[i].name->len == name->len && !memcmp(s->e[i].name->s, name->s, name->len)) {
            jv_drop(s->e[i].v);
            s->e[i].v = v;
            return true;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        jscope_ent *e = realloc(s->e, cap * sizeof *e);
        if (!e) { jv_drop(v); return jrs_nomem(r); }
        s->e = e;
        s->cap = cap;
    }
    jv nv = {.t = JV_STR, .u.s = name};
    jv_ref(nv);
    s->e[s->n].name = name;
    s->e[s->n++].v = v;
    return true;
}

const jv *jscope_lookup(const jrs *r, const char *name, size_t len) {
    for (const jscope *s = r->cur; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (s->e[i].name->len == len && !memcmp(s->e[i].name->s, name, len)) return &s->e[i].v;
    return NULL;
}

static void scope_clear(jscope *s) {
    for (size_t i = 0; i < s->n; i++) {
        jv nv = {.t = JV_STR, .u.s = s->e[i].name};
        jv_drop(nv);
        jv_drop(s->e[i].v);
    }
    free(s->e);
    s->e = NULL;
    s->n = s->cap = 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static bool count_iter(jrs *r, const jnode *at) {
    if (++r->iters <= r->max_iters) return true;
    return jrs_fail(r, at, RECUR_E_FULL, "more than %llu loop iterations and macro calls",
                    (unsigned long long)r->max_iters);
}

/* Binds targets names[0..k) to v: one name takes v, several unpack a sequence. */
static bool bind(jrs *r, const jnode *at, jscope *s, jstr *const *names, int k, jv v) {
    if (k == 1) return jscope_set(r, s, names[0], v);
    jv items;
    bool ok = jv_iter_list(r, at, v, &items);
    jv_drop(v);
    if (!ok) return false;
    if (items.u.l->n != (size_t)k) {
        jrs_fail(r, at, RECUR_E_INVALID, "cannot unpack %zu values into %d names", items.u.l->n, k);
        jv_drop(items);
        return false;
    }
    for (int i = 0; i < k && ok; i++) ok = jscope_set(r, s, names[i], jv_ref(items.u.l->items[i]));
    jv_drop(items);
    return ok;
}

bool jv_iter_list(jrs *r, const jnode *at, jv v, jv *out) {
    *out = jv_undef();
    if (v.t == JV_LIST) { *out = jv_ref(v); return true; }
    if (v.t == JV_UNDEF) { *out = jv_list(r, 0); return !r->failed; }
    if (v.t == JV_DICT) {
        *out = jv_list(r, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jlist_push(r, *out, jv_ref(v.u.d->keys[i]));
        return !r->failed;
    }
    if (v.t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "'%s' object is not iterable", jv_type_name(v));
    *out = jv_list(r, 0);
    uint32_t cp;
    for (size_t i = 0, k; i < v.u.s->len && !r->failed; i += k) {
        k = jutf8_decode(v.u.s->s + i, v.u.s->len - i, &cp);
        jlist_push(r, *out, jv_str(r, v.u.s->s + i, k));
    }
    return !r->failed;
}

/* Runs body with its output captured into *out (a string). */
static bool capture(jrs *r, const jnode *body, jv *out) {
    jbuf buf = {0}, *saved = r->out;
    r->out = &buf;
    bool ok = jexec_body(r, body);
    r->out = saved;
    if (!ok) { jbuf_free(&buf); return false; }
    *out = jv_str_buf(r, &buf);
    return !r->failed;
}

/* Applies a filter chain whose innermost operand is NULL (set blocks, filter blocks) to in. */
static bool apply_chain(jrs *r, const jnode *f, jv in, jv *out) {
    jv x = in;
    if (f->kid[0] && !apply_chain(r, f->kid[0], in, &x)) return false;
    jargs a;
    if (!jeval_args(r, f, 1, &a)) { jv_drop(x); return false; }
    bool ok = jfilter_apply(r, f, f->name->s, x, &a, out);
    jargs_free(&a);
    jv_drop(x);
    return ok && !r->failed;
}

/* ---- for ---------------------------------------------------------------------------------- */

static bool filter_items(jrs *r, const jnode *n, jv *items) {
    jv kept = jv_list(r, 0);
    for (size_t i = 0; i < items->u.l->n && !r->failed; i++) {
        jscope s = {.parent = r->cur};
        jv c = jv_undef();
        if (count_iter(r, n) && bind(r, n, &s, n->names, n->n_targets, jv_ref(items->u.l->items[i]))) {
            r->cur = &s;
            jeval(r, n->kid[1], &c);
            r->cur = s.parent;
        }
        if (!r->failed && jv_truthy(c)) jlist_push(r, kept, jv_ref(items->u.l->items[i]));
        jv_drop(c);
        scope_clear(&s);
    }
    jv_drop(*items);
    *items = kept;
    return !r->failed;
}

enum { L_INDEX, L_INDEX0, L_REVINDEX, L_REVINDEX0, L_FIRST, L_LAST, L_LENGTH, L_PREV, L_NEXT, L_DEPTH,
       L_DEPTH0, L_N };

static jv loop_object(jrs *r, const jv *keys, const jlist *l, size_t i) {
    size_t n = l->n;
    jv d = jv_dict(r);
    jv vals[L_N] = {jv_int((int64_t)i + 1), jv_int((int64_t)i), jv_int((int64_t)(n - i)),
                    jv_int((int64_t)(n - i - 1)), jv_bool(i == 0), jv_bool(i + 1 == n), jv_int((int64_t)n),
                    i > 0 ? jv_ref(l->items[i - 1]) : jv_undef(),
                    i + 1 < n ? jv_ref(l->items[i + 1]) : jv_undef(), jv_int(1), jv_int(0)};
    for (int k = 0; k < L_N; k++) {
        if (vals[k].t == JV_UNDEF) continue;   /* previtem/nextitem absent: undefined */
        jdict_set(r, d, jv_ref(keys[k]), vals[k]);
    }
    return d;
}

static bool run_iterations(jrs *r, const jnode *n, const jlist *l, const jv *keys) {
    for (size_t i = 0; i < l->n && !r->failed; i++) {
        if (!count_iter(r, n)) break;
        jscope s = {.parent = r->cur};
        if (bind(r, n, &s, n->names, n->n_targets, jv_ref(l->items[i])) &&
            jscope_set(r, &s, keys[L_N].u.s, loop_object(r, keys, l, i))) {
            r->cur = &s;
            jexec_body(r, n->kid[2]);
            r->cur = s.parent;
        }
        scope_clear(&s);
        int ctl = r->loop_ctl;
        r->loop_ctl = 0;
        if (ctl == JN_BREAK) break;
    }
    return !r->failed;
}

static bool exec_for(jrs *r, const jnode *n) {
    static const char *const names[L_N + 1] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                               "length", "previtem", "nextitem", "depth", "depth0", "loop"};
    jv seq, items;
    if (!jeval(r, n->kid[0], &seq)) return false;
    bool ok = jv_iter_list(r, n, seq, &items);
    jv_drop(seq);
    if (!ok || (n->kid[1] && !filter_items(r, n, &items))) { jv_drop(items); return false; }
    if (items.u.l->n == 0) {
        jv_drop(items);
        return n->kid[3] ? jexec_body(r, n->kid[3]) : true;
    }
    jv keys[L_N + 1];
    int k = 0;
    for (; k <= L_N; k++)
        if ((keys[k] = jv_cstr(r, names[k])).t != JV_STR) break;
    if (k > L_N) run_iterations(r, n, items.u.l, keys);
    for (int i = 0; i < k; i++) jv_drop(keys[i]);
    jv_drop(items);
    return !r->failed;
}

/* ---- set ---------------------------------------------------------------------------------- */

static bool exec_set(jrs *r, const jnode *n) {
    jv v;
    if (n->kind == JN_SET_BLOCK) {
        jv body;
        if (!capture(r, n->kid[0], &body)) return false;
        if (!n->kid[1]) v = body;
        else if (!apply_chain(r, n->kid[1], body, &v)) return false;
        return jscope_set(r, r->cur, n->names[0], v);
    }
    if (!jeval(r, n->kid[0], &v)) return false;
    if (!n->kid[1]) return bind(r, n, r->cur, n->names, n->n_targets, v);
    const jnode *attr = n->kid[1];
    const jv *ns = jscope_lookup(r, attr->kid[0]->name->s, attr->kid[0]->name->len);
    if (!ns || ns->t != JV_NS) {
        jv_drop(v);
        return jrs_fail(r, n, RECUR_E_INVALID, "cannot assign attribute on non-namespace object '%s'",
                        attr->kid[0]->name->s);
    }
    jv key = {.t = JV_STR, .u.s = attr->name};
    return jdict_set(r, *ns, key, v);
}

/* ---- macros ------------------------------------------------------------------------------- */

static bool bind_params(jrs *r, const jnode *at, const jnode *m, jargs *a, jscope *s) {
    int np = m->n_targets;
    for (int i = 0; i < np && !r->failed; i++) {
        const jv *v = jargs_get(a, i, m->names[i]->s);
        if (v && i < a->n_pos && jargs_get(a, -1, m->names[i]->s))
            return jrs_fail(r, at, RECUR_E_INVALID, "macro '%s' got multiple values for '%s'", m->name->s,
                            m->names[i]->s);
        jv x = jv_undef();
        if (v) x = jv_ref(*v);
        else if (m->kid[i] && !jeval(r, m->kid[i], &x)) return false;
        if (!jscope_set(r, s, m->names[i], x)) return false;
    }
    jv va = jv_list(r, 0), kw = jv_dict(r);
    for (int i = np; i < a->n_pos; i++) jlist_push(r, va, jv_ref(a->pos[i]));
    for (int i = 0; i < a->n_kw; i++) {
        bool is_param = false;
        for (int k = 0; k < np; k++) is_param |= !strcmp(m->names[k]->s, a->kw_name[i]->s);
        jv key = {.t = JV_STR, .u.s = a->kw_name[i]};
        if (!is_param) jdict_set(r, kw, key, jv_ref(a->kw[i]));
    }
    jv kn = jv_cstr(r, "kwargs"), vn = jv_cstr(r, "varargs");
    bool ok = !r->failed && jscope_set(r, s, vn.u.s, va) && jscope_set(r, s, kn.u.s, kw);
    if (!ok) { jv_drop(va); jv_drop(kw); }
    jv_drop(kn);
    jv_drop(vn);
    return ok;
}

bool jcall_macro(jrs *r, const jnode *at, const jnode *m, jargs *a, jv *out) {
    if (r->depth >= r->max_depth)
        return jrs_fail(r, at, RECUR_E_FULL, "macro calls nested deeper than %d", r->max_depth);
    if (!count_iter(r, at)) return false;
    jscope s = {.parent = r->root}, *saved = r->cur;
    r->cur = &s;
    r->depth++;
    bool ok = bind_params(r, at, m, a, &s) && capture(r, m->kid[m->n_targets], out);
    r->depth--;
    r->cur = saved;
    r->loop_ctl = 0;
    scope_clear(&s);
    return ok;
}

/* ---- statements --------------------------------------------------------------------------- */

static bool exec_output(jrs *r, const jnode *n) {
    jv v;
    if (!jeval(r, n->kid[0], &v)) return false;
    bool ok = jv_write_str(r, r->out, v);
    jv_drop(v);
    return ok;
}

static bool exec(jrs *r, const jnode *n) {
    jv v;
    switch (n->kind) {
    case JN_TEXT: return jbuf_add(r, r->out, n->text, n->text_len);
    case JN_OUTPUT: return exec_output(r, n);
    case JN_IF:
        if (!jeval(r, n->kid[0], &v)) return false;
        bool t = jv_truthy(v);
        jv_drop(v);
        if (t) return jexec_body(r, n->kid[1]);
        return n->kid[2] ? exec(r, n->kid[2]) : true;
    case JN_FOR: return exec_for(r, n);
    case JN_SET:
    case JN_SET_BLOCK: return exec_set(r, n);
    case JN_MACRO: v.t = JV_MACRO; v.u.m = n; return jscope_set(r, r->cur, n->name, v);
    case JN_BREAK:
    case JN_CONTINUE: r->loop_ctl = n->kind; return true;
    case JN_DO:
        if (!jeval(r, n->kid[0], &v)) return false;
        jv_drop(v);
        return true;
    case JN_FILTER_BLOCK: {
        jv body, res;
        if (!capture(r, n->kid[0], &body) || !apply_chain(r, n->kid[1], body, &res)) return false;
        bool ok = jv_write_str(r, r->out, res);
        jv_drop(res);
        return ok;
    }
    case JN_BODY: return jexec_body(r, n);
    default: return jrs_fail(r, n, RECUR_E_INVALID, "not a statement");
    }
}

bool jexec_body(jrs *r, const jnode *body) {
    if (++r->nest > JMAX_EVAL_NEST) {
        r->nest--;
        return jrs_fail(r, body, RECUR_E_FULL, "evaluation nested more than %d deep", JMAX_EVAL_NEST);
    }
    bool ok = true;
    for (int i = 0; i < body->n_kid && ok; i++) {
        ok = exec(r, body->kid[i]);
        if (r->loop_ctl) break;
    }
    r->nest--;
    return ok && !r->failed;
}

/* ---- entry point ---------------------------------------------------------------------------- */

static bool load_context(jrs *r, jscope *globals, const json_t *ctx) {
    if (!ctx) return true;
    if (!json_is_object(ctx)) return jrs_fail(r, NULL, RECUR_E_INVALID, "the context must be a JSON object");
    const char *k;
    json_t *val;
    json_object_foreach((json_t *)ctx, k, val) {
        jv name = jv_cstr(r, k), v = jv_from_json(r, val, 0);
        if (r->failed) { jv_drop(name); jv_drop(v); return false; }
        bool ok = jscope_set(r, globals, name.u.s, v);
        jv_drop(name);
        if (!ok) return false;
    }
    return true;
}

static void init_state(jrs *r, const jinja_render_opts *o, char *err, size_t err_len) {
    memset(r, 0, sizeof *r);
    r->err = err;
    r->err_len = err_len;
    r->max_str = o && o->max_output ? o->max_output : JINJA_DEFAULT_MAX_OUTPUT;
    r->max_iters = o && o->max_iterations ? o->max_iterations : JINJA_DEFAULT_MAX_ITERS;
    r->max_depth = o && o->max_depth > 0 ? o->max_depth : JINJA_DEFAULT_MAX_DEPTH;
    r->max_work = o && o->max_work ? o->max_work : JINJA_DEFAULT_MAX_WORK;
    if (o && o->now) {
        r->now = *o->now;
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &r->now);
    }
}

recur_status jinja_render(const jinja_template *t, const json_t *context, const jinja_render_opts *o,
                          char **out, size_t *out_len, char *err, size_t err_len) {
    if (out) *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !out) return rc_fail(err, err_len, RECUR_E_INVALID, "jinja_render: no template or output");
    jrs r;
    init_state(&r, o, err, err_len);
    jscope globals = {0}, root = {.parent = &globals};
    jbuf buf = {0};
    r.root = r.cur = &root;
    r.out = &buf;
    if (load_context(&r, &globals, context)) jexec_body(&r, t->root);
    scope_clear(&root);
    scope_clear(&globals);
    jrs_clear_namespaces(&r);
    if (!r.failed && !buf.p && !(buf.p = calloc(1, 1))) jrs_nomem(&r);
    if (r.failed) {
        jbuf_free(&buf);
        return r.st;
    }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return RECUR_OK;
}
