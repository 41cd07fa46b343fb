/* jinja_parse.c — statements: the template as a tree of BODY/TEXT/OUTPUT/IF/FOR/SET/MACRO
 * nodes (see jinja_internal.h for each node's layout), and jinja_parse / jinja_free.
 *
 * Tags: if/elif/else/endif, for/else/endfor (`for a, b in x if cond`), set (`set x = e`,
 * `set ns.attr = e`, `set a, b = e`, `set x %}...{% endset`), macro/endmacro, break,
 * continue, do, filter/endfilter, generation/endgeneration (HF's assistant-mask tag: its body
 * is rendered as is). call, include, import, extends and block are refused by name.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

/* ---- parser helpers --------------------------------------------------------------------- */

bool jp_fail(jparser *p, const jtok *at, const char *fmt, ...) {
    if (p->failed) return false;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->failed = true;
    p->st = rc_fail(p->err, p->err_len, RECUR_E_INVALID, "line %d, column %d: %s", at->line, at->col, msg);
    return false;
}

bool jp_nomem(jparser *p) {
    if (!p->failed) p->st = rc_fail(p->err, p->err_len, RECUR_E_NOMEM, "out of memory");
    p->failed = true;
    return false;
}

const jtok *jp_peek(const jparser *p) { return &p->t[p->pos]; }

const jtok *jp_next(jparser *p) {
    const jtok *k = &p->t[p->pos];
    if (p->pos + 1 < p->n) p->pos++;   /* JT_EOF stays */
    return k;
}

bool jp_is_op(const jparser *p, int op) {
    const jtok *k = jp_peek(p);
    return k->t == JT_OP && k->op == op;
}

bool jp_is_name(const jparser *p, const char *name) {
    const jtok *k = jp_peek(p);
    return k->t == JT_NAME && strlen(name) == k->len && !memcmp(k->s, name, k->len);
}

static const char *op_name(int op, char buf[4]) {
    switch (op) {
    case JTO_EQ: return "==";
    case JTO_NE: return "!=";
    case JTO_LE: return "<=";
    case JTO_GE: return ">=";
    case JTO_FLOORDIV: return "//";
    case JTO_POW: return "**";
    default: buf[0] = (char)op; buf[1] = 0; return buf;
    }
}

bool jp_expect_op(jparser *p, int op) {
    if (jp_is_op(p, op)) { jp_next(p); return true; }
    char b[4];
    return jp_fail(p, jp_peek(p), "expected '%s'", op_name(op, b));
}

jnode *jp_node(jparser *p, jn_kind k, const jtok *at, int n_kid) {
    if (p->failed) return NULL;
    jnode *n = jarena_alloc(p->a, sizeof *n);
    if (n && n_kid) n->kid = jarena_alloc(p->a, (size_t)n_kid * sizeof *n->kid);
    if (!n || (n_kid && !n->kid)) { jp_nomem(p); return NULL; }
    n->kind = k;
    n->n_kid = n_kid;
    n->line = at->line;
    n->col = at->col;
    return n;
}

jstr *jp_str(jparser *p, const char *s, size_t len) {
    jstr *r = jstr_immortal(p->a, s, len);
    if (!r) jp_nomem(p);
    return r;
}

static bool expect_block_end(jparser *p) {
    if (jp_peek(p)->t == JT_BLOCK_END) { jp_next(p); return true; }
    return jp_fail(p, jp_peek(p), "expected '%%}'");
}

static jstr *expect_name(jparser *p) {
    const jtok *k = jp_peek(p);
    if (k->t != JT_NAME) { jp_fail(p, k, "expected a name"); return NULL; }
    jp_next(p);
    return jp_str(p, k->s, k->len);
}

/* ---- bodies ----------------------------------------------------------------------------- */

typedef struct stmt_vec {
    jnode **v;
    int     n, cap;
} stmt_vec;

static jnode *statement(jparser *p, const jtok *at);

static bool name_in(const jtok *k, const char *const *names) {
    for (int i = 0; names && names[i]; i++)
        if (k->t == JT_NAME && strlen(names[i]) == k->len && !memcmp(names[i], k->s, k->len)) return true;
    return false;
}

static jnode *one_item(jparser *p, const jtok *k) {
    if (k->t == JT_TEXT) {
        jp_next(p);
        jnode *n = jp_node(p, JN_TEXT, k, 0);
        if (n) { n->text = k->s; n->text_len = k->len; }
        return n;
    }
    if (k->t == JT_VAR_BEGIN) {
        jp_next(p);
        jnode *e = jp_tuple(p, true), *n = e ? jp_node(p, JN_OUTPUT, k, 1) : NULL;
        if (!n) return NULL;
        n->kid[0] = e;
        if (jp_peek(p)->t != JT_VAR_END) { jp_fail(p, jp_peek(p), "expected '}}'"); return NULL; }
        jp_next(p);
        return n;
    }
    jp_next(p);   /* JT_BLOCK_BEGIN */
    return statement(p, k);
}

/* Statements up to a `{% NAME` with NAME in ends (NULL-terminated; NULL = up to the end of
 * the template). Leaves the parser after NAME and sets *which to it. */
static jnode *body(jparser *p, const char *const *ends, const char **which) {
    const jtok *at = jp_peek(p);
    stmt_vec sv = {0};
    if (++p->depth > JMAX_NEST) { jp_fail(p, at, "blocks nested too deeply"); return NULL; }
    for (;;) {
        const jtok *k = jp_peek(p);
        if (k->t == JT_EOF) {
            if (ends) {
                int last = 0;
                while (ends[last + 1]) last++;
                jp_fail(p, k, "unexpected end of template: '%s' missing", ends[last]);
                goto fail;
            }
            break;
        }
        if (k->t == JT_BLOCK_BEGIN && p->pos + 1 < p->n && name_in(&p->t[p->pos + 1], ends)) {
            jp_next(p);
            const jtok *nm = jp_next(p);
            for (int i = 0; ends[i]; i++)
                if (strlen(ends[i]) == nm->len && !memcmp(ends[i], nm->s, nm->len)) *which = ends[i];
            break;
        }
        jnode *s = one_item(p, k);
        if (!s) goto fail;
        if (sv.n == sv.cap) {
            int cap = sv.cap ? sv.cap * 2 : 16;
            jnode **v = realloc(sv.v, (size_t)cap * sizeof *v);
            if (!v) { jp_nomem(p); goto fail; }
            sv.v = v;
            sv.cap = cap;
        }
        sv.v[sv.n++] = s;
    }
    p->depth--;
    jnode *n = jp_node(p, JN_BODY, at, sv.n);
    if (n && sv.n) memcpy(n->kid, sv.v, (size_t)sv.n * sizeof *sv.v);
    free(sv.v);
    return n;
fail:
    free(sv.v);
    return NULL;
}

/* A body that must end with exactly `{% end %}` (no else branches). */
static jnode *body_to(jparser *p, const char *end) {
    const char *ends[] = {end, NULL}, *which = NULL;
    jnode *b = body(p, ends, &which);
    return b && expect_block_end(p) ? b : NULL;
}

/* ---- statements ------------------------------------------------------------------------- */

static jnode *st_if(jparser *p, const jtok *at) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jnode *n = jp_node(p, JN_IF, at, 3);
    if (!n || !(n->kid[0] = jp_tuple(p, true)) || !expect_block_end(p)) return NULL;
    const char *which = NULL;
    if (!(n->kid[1] = body(p, ends, &which))) return NULL;
    if (!strcmp(which, "elif")) {
        n->kid[2] = st_if(p, at);
        return n->kid[2] ? n : NULL;
    }
    if (!expect_block_end(p)) return NULL;
    if (!strcmp(which, "else") && !(n->kid[2] = body_to(p, "endif"))) return NULL;
    return n;
}

/* names [, names]* (optionally in parentheses) into n->names */
static bool targets(jparser *p, jnode *n, const char *what) {
    jstr *t[JMAX_ARGS];
    int k = 0;
    bool paren = jp_is_op(p, '(');
    if (paren) jp_next(p);
    do {
        if (k && !jp_expect_op(p, ',')) return false;
        if (k == JMAX_ARGS) return jp_fail(p, jp_peek(p), "too many %s targets", what);
        if (!(t[k++] = expect_name(p))) return false;
    } while (jp_is_op(p, ','));
    if (paren && !jp_expect_op(p, ')')) return false;
    if (!(n->names = jarena_alloc(p->a, (size_t)k * sizeof *n->names))) return jp_nomem(p);
    memcpy(n->names, t, (size_t)k * sizeof *t);
    n->n_targets = k;
    return true;
}

static jnode *st_for(jparser *p, const jtok *at) {
    static const char *const ends[] = {"else", "endfor", NULL};
    jnode *n = jp_node(p, JN_FOR, at, 4);
    if (!n || !targets(p, n, "loop")) return NULL;
    if (!jp_is_name(p, "in")) { jp_fail(p, jp_peek(p), "expected 'in'"); return NULL; }
    jp_next(p);
    if (!(n->kid[0] = jp_tuple(p, false))) return NULL;
    if (jp_is_name(p, "if")) {
        jp_next(p);
        if (!(n->kid[1] = jp_expr(p))) return NULL;
    }
    if (jp_is_name(p, "recursive")) { jp_fail(p, jp_peek(p), "recursive loops are not supported"); return NULL; }
    if (!expect_block_end(p)) return NULL;
    const char *which = NULL;
    p->loops++;
    n->kid[2] = body(p, ends, &which);
    p->loops--;
    if (!n->kid[2] || !expect_block_end(p)) return NULL;
    if (!strcmp(which, "else") && !(n->kid[3] = body_to(p, "endfor"))) return NULL;
    return n;
}

static jnode *st_set(jparser *p, const jtok *at) {
    jnode *n = jp_node(p, JN_SET, at, 2);
    if (!n) return NULL;
    const jtok *k = jp_peek(p);
    if (k->t == JT_NAME && p->pos + 1 < p->n && p->t[p->pos + 1].t == JT_OP && p->t[p->pos + 1].op == '.') {
        jnode *obj = jp_node(p, JN_NAME, k, 0), *attr = jp_node(p, JN_ATTR, k, 1);
        if (!attr || !(obj->name = expect_name(p)) || !jp_expect_op(p, '.') || !(attr->name = expect_name(p)))
            return NULL;
        attr->kid[0] = obj;
        n->kid[1] = attr;
    } else if (!targets(p, n, "assignment")) {
        return NULL;
    }
    if (jp_is_op(p, '=')) {
        jp_next(p);
        if (!(n->kid[0] = jp_tuple(p, true))) return NULL;
        return expect_block_end(p) ? n : NULL;
    }
    if (n->kid[1] || n->n_targets != 1) { jp_fail(p, jp_peek(p), "expected '='"); return NULL; }
    n->kind = JN_SET_BLOCK;
    if (jp_is_op(p, '|') && !(n->kid[1] = jp_filter_chain(p, NULL, false))) return NULL;
    if (!expect_block_end(p)) return NULL;
    return (n->kid[0] = body_to(p, "endset")) ? n : NULL;
}

static jnode *st_macro(jparser *p, const jtok *at) {
    jstr *name = expect_name(p), *params[JMAX_ARGS];
    jnode *defs[JMAX_ARGS];
    int k = 0;
    if (!name || !jp_expect_op(p, '(')) return NULL;
    while (!jp_is_op(p, ')')) {
        if (k && !jp_expect_op(p, ',')) return NULL;
        if (k == JMAX_ARGS) { jp_fail(p, jp_peek(p), "more than %d macro parameters", JMAX_ARGS); return NULL; }
        defs[k] = NULL;
        if (!(params[k] = expect_name(p))) return NULL;
        if (jp_is_op(p, '=')) {
            jp_next(p);
            if (!(defs[k] = jp_expr(p))) return NULL;
        }
        k++;
    }
    jp_next(p);
    jnode *n = jp_node(p, JN_MACRO, at, k + 1);
    if (!n || !expect_block_end(p)) return NULL;
    if (!(n->names = jarena_alloc(p->a, (size_t)(k + 1) * sizeof *n->names))) { jp_nomem(p); return NULL; }
    n->name = name;
    n->n_targets = k;
    for (int i = 0; i < k; i++) { n->names[i] = params[i]; n->kid[i] = defs[i]; }
    int loops = p->loops;
    p->loops = 0;
    n->kid[k] = body_to(p, "endmacro");
    p->loops = loops;
    return n->kid[k] ? n : NULL;
}

static jnode *st_simple(jparser *p, const jtok *at, jn_kind k) {
    if (p->loops == 0) { jp_fail(p, at, "'%s' outside a loop", k == JN_BREAK ? "break" : "continue"); return NULL; }
    jnode *n = jp_node(p, k, at, 0);
    return n && expect_block_end(p) ? n : NULL;
}

static jnode *st_filter(jparser *p, const jtok *at) {
    jnode *n = jp_node(p, JN_FILTER_BLOCK, at, 2);
    if (!n || !(n->kid[1] = jp_filter_chain(p, NULL, true)) || !expect_block_end(p)) return NULL;
    return (n->kid[0] = body_to(p, "endfilter")) ? n : NULL;
}

static jnode *statement(jparser *p, const jtok *at) {
    const jtok *k = jp_next(p);
    if (k->t != JT_NAME) { jp_fail(p, k, "expected a tag name"); return NULL; }
    char nm[32];
    snprintf(nm, sizeof nm, "%.*s", (int)(k->len < 31 ? k->len : 31), k->s);
    if (!strcmp(nm, "if")) return st_if(p, at);
    if (!strcmp(nm, "for")) return st_for(p, at);
    if (!strcmp(nm, "set")) return st_set(p, at);
    if (!strcmp(nm, "macro")) return st_macro(p, at);
    if (!strcmp(nm, "break")) return st_simple(p, at, JN_BREAK);
    if (!strcmp(nm, "continue")) return st_simple(p, at, JN_CONTINUE);
    if (!strcmp(nm, "filter")) return st_filter(p, at);
    if (!strcmp(nm, "generation")) return expect_block_end(p) ? body_to(p, "endgeneration") : NULL;
    if (!strcmp(nm, "do")) {
        jnode *n = jp_node(p, JN_DO, at, 1);
        if (!n || !(n->kid[0] = jp_tuple(p, true))) return NULL;
        return expect_block_end(p) ? n : NULL;
    }
    jp_fail(p, k, "unknown or unsupported tag '%s'", nm);
    return NULL;
}

/* ---- entry points ------------------------------------------------------------------------ */

/* Copies src with \r\n and \r turned into \n and one trailing newline dropped (Jinja2). */
static char *normalise(const char *src, size_t len, size_t *out_len) {
    char *s = malloc(len + 1);
    if (!s) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[o++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[o++] = src[i];
        }
    }
    if (o && s[o - 1] == '\n') o--;
    s[o] = 0;
    *out_len = o;
    return s;
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t err_len) {
    jinja_template *t = calloc(1, sizeof *t);
    size_t n = 0;
    if (!t || !(t->src = normalise(src ? src : "", src ? len : 0, &n))) {
        free(t);
        rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
        return NULL;
    }
    jtoks toks = {0};
    if (jlex(t->src, n, &t->arena, &toks, err, err_len) != RECUR_OK) {
        free(toks.v);
        jinja_free(t);
        return NULL;
    }
    jparser p = {.t = toks.v, .n = toks.n, .a = &t->arena, .err = err, .err_len = err_len};
    const char *which = NULL;
    t->root = body(&p, NULL, &which);
    free(toks.v);
    if (!t->root) {
        jinja_free(t);
        return NULL;
    }
    return t;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t->src);
    free(t);
}
