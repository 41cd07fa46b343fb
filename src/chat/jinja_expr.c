/* jinja_expr.c — expressions, with Jinja2's grammar and precedence (lowest first):
 *
 *   cond     or ('if' or ('else' cond)?)*
 *   or/and   and ('or' and)* ;  not ('and' not)*
 *   not      'not' not | compare
 *   compare  math1 ((== != < <= > >= in, not in) math1)*
 *   math1    concat (('+' | '-') concat)*        concat  math2 ('~' math2)*
 *   math2    pow (('*' | '/' | '//' | '%') pow)*  pow     unary ('**' unary)*
 *   unary    ('-' | '+') unary | primary postfix* ; then filters/tests: ('|' f | 'is' t | call)*
 *
 * so `a + b | trim` trims b, `not x is defined` is not (x is defined), and `-x | abs` is
 * abs(-x) as in Jinja2.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/jinja_internal.h"

typedef struct jnvec {
    jnode **v;
    jstr  **names;
    int     n, cap;
} jnvec;

static bool vec_push(jparser *p, jnvec *vec, jnode *n, jstr *name) {
    if (!n) return false;
    if (vec->n == vec->cap) {
        int cap = vec->cap ? vec->cap * 2 : 8;
        jnode **v = realloc(vec->v, (size_t)cap * sizeof *v);
        if (!v) return jp_nomem(p);
        vec->v = v;
        jstr **nm = realloc(vec->names, (size_t)cap * sizeof *nm);
        if (!nm) return jp_nomem(p);
        vec->names = nm;
        vec->cap = cap;
    }
    vec->v[vec->n] = n;
    vec->names[vec->n++] = name;
    return true;
}

/* A node of kind k whose kids are `first` (a slot kept even when NULL, if has_first) then vec. */
static jnode *vec_node(jparser *p, jn_kind k, const jtok *at, bool has_first, jnode *first, jnvec *vec,
                       bool with_names) {
    int off = has_first ? 1 : 0;
    jnode *n = jp_node(p, k, at, vec->n + off);
    if (n && with_names) {
        n->names = jarena_alloc(p->a, (size_t)(vec->n + off) * sizeof *n->names);
        if (!n->names) n = NULL, jp_nomem(p);
    }
    if (n) {
        if (has_first) n->kid[0] = first;
        for (int i = 0; i < vec->n; i++) {
            n->kid[i + off] = vec->v[i];
            if (with_names) n->names[i + off] = vec->names[i];
        }
    }
    free(vec->v);
    free(vec->names);
    return n;
}

static jnode *unary(jparser *p, bool with_filter);

static jnode *binop(jparser *p, const jtok *at, jn_kind k, int op, jnode *l, jnode *r) {
    if (!l || !r) return NULL;
    jnode *n = jp_node(p, k, at, 2);
    if (!n) return NULL;
    n->op = op;
    n->kid[0] = l;
    n->kid[1] = r;
    return n;
}

/* ---- primaries ------------------------------------------------------------------------- */

static jnode *literal(jparser *p, const jtok *at, jv v) {
    jnode *n = jp_node(p, JN_LIT, at, 0);
    if (n) n->lit = v;
    return n;
}

static jnode *string_lit(jparser *p) {
    const jtok *at = jp_peek(p);
    size_t total = 0;
    for (size_t i = p->pos; i < p->n && p->t[i].t == JT_STRING; i++) total += p->t[i].len;
    char *buf = jarena_alloc(p->a, total + 1);
    if (!buf) { jp_nomem(p); return NULL; }
    size_t o = 0;
    while (jp_peek(p)->t == JT_STRING) {
        const jtok *k = jp_next(p);
        memcpy(buf + o, k->s, k->len);
        o += k->len;
    }
    jstr *s = jp_str(p, buf, o);
    if (!s) return NULL;
    jv v = {.t = JV_STR, .u.s = s};
    return literal(p, at, v);
}

/* [a, b, ...] / (a, b, ...) / {k: v, ...}: items up to the closing bracket */
static jnode *collection(jparser *p, jn_kind k, int close) {
    const jtok *at = jp_next(p);
    jnvec vec = {0};
    while (!jp_is_op(p, close)) {
        if (vec.n && !jp_expect_op(p, ',')) goto fail;
        if (jp_is_op(p, close)) break;
        if (!vec_push(p, &vec, jp_expr(p), NULL)) goto fail;
        if (k == JN_DICT && (!jp_expect_op(p, ':') || !vec_push(p, &vec, jp_expr(p), NULL))) goto fail;
    }
    jp_next(p);
    return vec_node(p, k, at, false, NULL, &vec, false);
fail:
    free(vec.v);
    free(vec.names);
    return NULL;
}

static jnode *paren(jparser *p) {
    const jtok *at = jp_peek(p);
    if (p->pos + 1 < p->n && p->t[p->pos + 1].t == JT_OP && p->t[p->pos + 1].op == ')')
        return collection(p, JN_TUPLE, ')');   /* () */
    jp_next(p);
    jnode *first = jp_expr(p);
    if (!first) return NULL;
    if (jp_is_op(p, ')')) { jp_next(p); return first; }
    if (!jp_is_op(p, ',')) { jp_fail(p, jp_peek(p), "expected ')' or ','"); return NULL; }
    jnvec vec = {0};
    while (jp_is_op(p, ',')) {
        jp_next(p);
        if (jp_is_op(p, ')')) break;
        if (!vec_push(p, &vec, jp_expr(p), NULL)) { free(vec.v); free(vec.names); return NULL; }
    }
    if (!jp_expect_op(p, ')')) { free(vec.v); free(vec.names); return NULL; }
    return vec_node(p, JN_TUPLE, at, true, first, &vec, false);
}

static jnode *primary(jparser *p) {
    const jtok *k = jp_peek(p);
    switch (k->t) {
    case JT_NAME: {
        jp_next(p);
        static const struct { const char *s; int v; } kw[] = {
            {"true", 1}, {"True", 1}, {"false", 0}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
            if (strlen(kw[i].s) == k->len && !memcmp(kw[i].s, k->s, k->len))
                return literal(p, k, kw[i].v == 2 ? jv_none() : jv_bool(kw[i].v));
        jnode *n = jp_node(p, JN_NAME, k, 0);
        if (n && !(n->name = jp_str(p, k->s, k->len))) return NULL;
        return n;
    }
    case JT_STRING: return string_lit(p);
    case JT_INT: jp_next(p); return literal(p, k, jv_int(k->i));
    case JT_FLOAT: jp_next(p); return literal(p, k, jv_float(k->f));
    case JT_OP:
        if (k->op == '(') return paren(p);
        if (k->op == '[') return collection(p, JN_LIST, ']');
        if (k->op == '{') return collection(p, JN_DICT, '}');
        break;
    default: break;
    }
    if (k->t == JT_OP) {
        static const char *const two[] = {"==", "!=", "<=", ">=", "//", "**"};
        char b[2] = {(char)k->op, 0};
        jp_fail(p, k, "unexpected '%s'", k->op >= JTO_EQ ? two[k->op - JTO_EQ] : b);
    } else {
        jp_fail(p, k, "unexpected %s", k->t == JT_EOF ? "end of template" : k->t == JT_VAR_END ? "'}}'"
                : k->t == JT_BLOCK_END ? "'%}'" : "token");
    }
    return NULL;
}

/* ---- postfix: .attr [index] [a:b:c] (args) --------------------------------------------- */

static bool call_args(jparser *p, jnvec *vec) {
    jp_next(p);   /* ( */
    while (!jp_is_op(p, ')')) {
        if (vec->n && !jp_expect_op(p, ',')) return false;
        if (jp_is_op(p, ')')) break;
        if (jp_is_op(p, '*')) return jp_fail(p, jp_peek(p), "*args and **kwargs are not supported");
        jstr *kw = NULL;
        const jtok *k = jp_peek(p);
        if (k->t == JT_NAME && p->pos + 1 < p->n && p->t[p->pos + 1].t == JT_OP && p->t[p->pos + 1].op == '=') {
            if (!(kw = jp_str(p, k->s, k->len))) return false;
            jp_next(p);
            jp_next(p);
        } else if (vec->n && vec->names[vec->n - 1]) {
            return jp_fail(p, k, "positional argument after keyword argument");
        }
        if (!vec_push(p, vec, jp_expr(p), kw)) return false;
        if (vec->n > JMAX_ARGS) return jp_fail(p, k, "more than %d arguments", JMAX_ARGS);
    }
    jp_next(p);
    return true;
}

static jnode *call(jparser *p, jnode *callee, jn_kind k, const jtok *at) {
    jnvec vec = {0};
    if (jp_is_op(p, '(') && !call_args(p, &vec)) {
        free(vec.v);
        free(vec.names);
        return NULL;
    }
    jnode *n = vec_node(p, k, at, true, callee, &vec, true);
    if (n && k == JN_CALL) { n->line = callee->line; n->col = callee->col; }   /* report calls at the callee */
    return n;
}

static jnode *subscript(jparser *p, jnode *obj) {
    const jtok *at = jp_next(p);   /* [ */
    jnode *part[3] = {NULL, NULL, NULL};
    int n_part = 0;
    bool is_slice = false;
    for (;;) {
        if (!jp_is_op(p, ':') && !jp_is_op(p, ']') && !(part[n_part] = jp_expr(p))) return NULL;
        if (!jp_is_op(p, ':') || n_part == 2) break;
        jp_next(p);
        is_slice = true;
        n_part++;
    }
    if (!jp_expect_op(p, ']')) return NULL;
    if (!is_slice) {
        if (!part[0]) { jp_fail(p, at, "empty subscript"); return NULL; }
        return binop(p, at, JN_ITEM, 0, obj, part[0]);
    }
    jnode *n = jp_node(p, JN_SLICE, at, 4);
    if (!n) return NULL;
    n->kid[0] = obj;
    for (int i = 0; i < 3; i++) n->kid[i + 1] = part[i];
    return n;
}

static jnode *postfix(jparser *p, jnode *n) {
    while (n) {
        const jtok *at = jp_peek(p);
        if (jp_is_op(p, '.')) {
            jp_next(p);
            const jtok *k = jp_next(p);
            if (k->t == JT_INT) {
                n = binop(p, at, JN_ITEM, 0, n, literal(p, k, jv_int(k->i)));
            } else if (k->t == JT_NAME) {
                jnode *a = jp_node(p, JN_ATTR, at, 1);
                if (!a || !(a->name = jp_str(p, k->s, k->len))) return NULL;
                a->kid[0] = n;
                n = a;
            } else {
                jp_fail(p, k, "expected an attribute name after '.'");
                return NULL;
            }
        } else if (jp_is_op(p, '[')) {
            n = subscript(p, n);
        } else if (jp_is_op(p, '(')) {
            n = call(p, n, JN_CALL, at);
        } else {
            break;
        }
    }
    return n;
}

/* ---- filters and tests ------------------------------------------------------------------- */

static jstr *dotted_name(jparser *p) {
    const jtok *k = jp_next(p);
    if (k->t != JT_NAME) { jp_fail(p, k, "expected a name"); return NULL; }
    const char *b = k->s;
    size_t len = k->len;
    while (jp_is_op(p, '.') && p->pos + 1 < p->n && p->t[p->pos + 1].t == JT_NAME) {
        jp_next(p);
        const jtok *m = jp_next(p);
        len = (size_t)(m->s + m->len - b);
    }
    return jp_str(p, b, len);
}

static jnode *test(jparser *p, jnode *operand) {
    const jtok *at = jp_next(p);   /* is */
    bool neg = false;
    if (jp_is_name(p, "not")) { jp_next(p); neg = true; }
    jstr *name = dotted_name(p);
    if (!name) return NULL;
    jnode *n;
    const jtok *k = jp_peek(p);
    bool bare_arg = (k->t == JT_NAME || k->t == JT_STRING || k->t == JT_INT || k->t == JT_FLOAT ||
                     (k->t == JT_OP && (k->op == '[' || k->op == '{'))) &&
                    !jp_is_name(p, "else") && !jp_is_name(p, "or") && !jp_is_name(p, "and") &&
                    !jp_is_name(p, "if") && !jp_is_name(p, "is");
    if (bare_arg) {
        jnode *arg = postfix(p, primary(p));
        if (!arg) return NULL;
        n = jp_node(p, JN_TEST, at, 2);
        if (n && !(n->names = jarena_alloc(p->a, 2 * sizeof *n->names))) { jp_nomem(p); return NULL; }
        if (n) n->kid[1] = arg;
    } else {
        n = call(p, operand, JN_TEST, at);
    }
    if (!n) return NULL;
    n->kid[0] = operand;
    n->name = name;
    n->neg = neg;
    return n;
}

jnode *jp_filter_chain(jparser *p, jnode *operand, bool bare_first) {
    while (bare_first || jp_is_op(p, '|')) {
        const jtok *at = bare_first ? jp_peek(p) : jp_next(p);
        bare_first = false;
        jstr *name = dotted_name(p);
        if (!name) return NULL;
        jnode *n = call(p, operand, JN_FILTER, at);
        if (!n) return NULL;
        n->name = name;
        operand = n;
    }
    return operand;
}

static jnode *filter_expr(jparser *p, jnode *n) {
    while (n) {
        if (jp_is_op(p, '|')) {
            n = jp_filter_chain(p, n, false);
        } else if (jp_is_name(p, "is")) {
            n = test(p, n);
        } else if (jp_is_op(p, '(')) {
            n = call(p, n, JN_CALL, jp_peek(p));
        } else {
            break;
        }
    }
    return n;
}

/* ---- operators ------------------------------------------------------------------------- */

static jnode *unary(jparser *p, bool with_filter) {
    if (++p->depth > JMAX_NEST) { jp_fail(p, jp_peek(p), "expression nested too deeply"); return NULL; }
    const jtok *at = jp_peek(p);
    jnode *n;
    if (jp_is_op(p, '-') || jp_is_op(p, '+')) {
        jp_next(p);
        jnode *x = unary(p, false);
        n = x ? jp_node(p, at->op == '-' ? JN_NEG : JN_POS, at, 1) : NULL;
        if (n) n->kid[0] = x;
    } else {
        n = primary(p);
    }
    n = postfix(p, n);
    if (with_filter) n = filter_expr(p, n);
    p->depth--;
    return n;
}

typedef struct opmap { int tok; int op; } opmap;

static int op_of(const jparser *p, const opmap *m, size_t n) {
    const jtok *k = jp_peek(p);
    if (k->t != JT_OP) return 0;
    for (size_t i = 0; i < n; i++)
        if (m[i].tok == k->op) return m[i].op;
    return 0;
}

static jnode *power(jparser *p) {
    jnode *l = unary(p, true);
    while (l && jp_is_op(p, JTO_POW)) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_BINOP, JOP_POW, l, unary(p, true));
    }
    return l;
}

static jnode *math2(jparser *p) {
    static const opmap m[] = {{'*', JOP_MUL}, {'/', JOP_DIV}, {JTO_FLOORDIV, JOP_FLOORDIV}, {'%', JOP_MOD}};
    jnode *l = power(p);
    int op;
    while (l && (op = op_of(p, m, 4))) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_BINOP, op, l, power(p));
    }
    return l;
}

static jnode *concat(jparser *p) {
    jnode *l = math2(p);
    while (l && jp_is_op(p, '~')) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_BINOP, JOP_CONCAT, l, math2(p));
    }
    return l;
}

static jnode *math1(jparser *p) {
    static const opmap m[] = {{'+', JOP_ADD}, {'-', JOP_SUB}};
    jnode *l = concat(p);
    int op;
    while (l && (op = op_of(p, m, 2))) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_BINOP, op, l, concat(p));
    }
    return l;
}

static int compare_op(jparser *p) {
    static const opmap m[] = {{JTO_EQ, JOP_EQ}, {JTO_NE, JOP_NE}, {'<', JOP_LT}, {JTO_LE, JOP_LE},
                              {'>', JOP_GT}, {JTO_GE, JOP_GE}};
    int op = op_of(p, m, 6);
    if (op) { jp_next(p); return op; }
    if (jp_is_name(p, "in")) { jp_next(p); return JOP_IN; }
    if (jp_is_name(p, "not") && p->pos + 1 < p->n && p->t[p->pos + 1].t == JT_NAME &&
        p->t[p->pos + 1].len == 2 && !memcmp(p->t[p->pos + 1].s, "in", 2)) {
        jp_next(p);
        jp_next(p);
        return JOP_NOTIN;
    }
    return 0;
}

static jnode *compare(jparser *p) {
    const jtok *at = jp_peek(p);
    jnode *first = math1(p);
    if (!first) return NULL;
    jnvec vec = {0};
    int ops[JMAX_ARGS];
    int op;
    while ((op = compare_op(p))) {
        if (vec.n == JMAX_ARGS) { jp_fail(p, at, "comparison chain too long"); goto fail; }
        ops[vec.n] = op;
        if (!vec_push(p, &vec, math1(p), NULL)) goto fail;
    }
    if (!vec.n) return first;
    int n_ops = vec.n;
    jnode *n = vec_node(p, JN_COMPARE, at, true, first, &vec, false);
    if (!n) return NULL;
    if (!(n->ops = jarena_alloc(p->a, (size_t)n_ops * sizeof *n->ops))) {
        jp_nomem(p);
        return NULL;
    }
    memcpy(n->ops, ops, (size_t)n_ops * sizeof *ops);
    return n;
fail:
    free(vec.v);
    free(vec.names);
    return NULL;
}

static jnode *not_expr(jparser *p) {
    if (!jp_is_name(p, "not")) return compare(p);
    const jtok *at = jp_next(p);
    if (++p->depth > JMAX_NEST) { jp_fail(p, at, "expression nested too deeply"); return NULL; }
    jnode *x = not_expr(p);
    p->depth--;
    jnode *n = x ? jp_node(p, JN_NOT, at, 1) : NULL;
    if (n) n->kid[0] = x;
    return n;
}

static jnode *and_expr(jparser *p) {
    jnode *l = not_expr(p);
    while (l && jp_is_name(p, "and")) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_AND, 0, l, not_expr(p));
    }
    return l;
}

static jnode *or_expr(jparser *p) {
    jnode *l = and_expr(p);
    while (l && jp_is_name(p, "or")) {
        const jtok *at = jp_next(p);
        l = binop(p, at, JN_OR, 0, l, and_expr(p));
    }
    return l;
}

jnode *jp_expr_noif(jparser *p) { return or_expr(p); }

jnode *jp_expr(jparser *p) {
    if (++p->depth > JMAX_NEST) { jp_fail(p, jp_peek(p), "expression nested too deeply"); return NULL; }
    jnode *e = or_expr(p);
    while (e && jp_is_name(p, "if")) {
        const jtok *at = jp_next(p);
        jnode *cond = or_expr(p), *other = NULL;
        if (!cond) return NULL;
        if (jp_is_name(p, "else")) {
            jp_next(p);
            if (!(other = jp_expr(p))) return NULL;
        }
        jnode *n = jp_node(p, JN_COND, at, 3);
        if (!n) return NULL;
        n->kid[0] = e;
        n->kid[1] = cond;
        n->kid[2] = other;
        e = n;
    }
    p->depth--;
    return e;
}

jnode *jp_tuple(jparser *p, bool allow_cond) {
    const jtok *at = jp_peek(p);
    jnode *first = allow_cond ? jp_expr(p) : jp_expr_noif(p);
    if (!first || !jp_is_op(p, ',')) return first;
    jnvec vec = {0};
    while (jp_is_op(p, ',')) {
        jp_next(p);
        const jtok *k = jp_peek(p);
        if (k->t == JT_BLOCK_END || k->t == JT_VAR_END || (k->t == JT_OP && k->op == ')')) break;
        if (!vec_push(p, &vec, allow_cond ? jp_expr(p) : jp_expr_noif(p), NULL)) {
            free(vec.v);
            free(vec.names);
            return NULL;
        }
    }
    return vec_node(p, JN_TUPLE, at, true, first, &vec, false);
}
