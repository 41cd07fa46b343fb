/* jinja_tests.c — Jinja2's tests (`x is defined`, `x is sequence`, `x is equalto 3`, ...),
 * with Python's notions: a bool is a number and an integer; a str, list or dict is a
 * sequence (it has len and []); a str, list, dict or undefined is iterable.
 */
#include <string.h>

#include "chat/jinja_internal.h"

typedef bool (*test_fn)(jrs *r, const jnode *at, jv in, const jv *arg, bool *out);

static bool t_defined(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    (void)r, (void)at, (void)arg;
    *out = in.t != JV_UNDEF;
    return true;
}

static bool t_undefined(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    (void)r, (void)at, (void)arg;
    *out = in.t == JV_UNDEF;
    return true;
}

#define SIMPLE_TEST(fname, expr)                                                   \
    static bool fname(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) { \
        (void)r, (void)at, (void)arg, (void)in;                                    \
        *out = (expr);                                                             \
        return true;                                                               \
    }

SIMPLE_TEST(t_none, in.t == JV_NONE)
SIMPLE_TEST(t_boolean, in.t == JV_BOOL)
SIMPLE_TEST(t_false, in.t == JV_BOOL && !in.u.b)
SIMPLE_TEST(t_true, in.t == JV_BOOL && in.u.b)
SIMPLE_TEST(t_integer, in.t == JV_INT)
SIMPLE_TEST(t_float, in.t == JV_FLOAT)
SIMPLE_TEST(t_number, jv_is_number(in))
SIMPLE_TEST(t_string, in.t == JV_STR)
SIMPLE_TEST(t_mapping, in.t == JV_DICT)
SIMPLE_TEST(t_iterable, in.t == JV_STR || in.t == JV_LIST || in.t == JV_DICT || in.t == JV_UNDEF)
SIMPLE_TEST(t_sequence, in.t == JV_STR || in.t == JV_LIST || in.t == JV_DICT || in.t == JV_UNDEF)
SIMPLE_TEST(t_callable, in.t == JV_MACRO || in.t == JV_FUNC)
SIMPLE_TEST(t_escaped, false)

static bool need_arg(jrs *r, const jnode *at, const jv *arg) {
    return arg ? true : jrs_fail(r, at, RECUR_E_INVALID, "this test needs an argument");
}

static bool t_sameas(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    if (!need_arg(r, at, arg)) return false;
    bool scalar = in.t == JV_NONE || in.t == JV_BOOL || in.t == JV_UNDEF;
    *out = in.t == arg->t && (scalar ? jv_equal(in, *arg) : in.t == JV_STR ? in.u.s == arg->u.s
                              : (in.t == JV_INT || in.t == JV_FLOAT) ? jv_equal(in, *arg) : in.u.l == arg->u.l);
    return true;
}

static bool t_eq(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    if (!need_arg(r, at, arg)) return false;
    *out = jv_equal(in, *arg);
    return true;
}

static bool t_ne(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    if (!need_arg(r, at, arg)) return false;
    *out = !jv_equal(in, *arg);
    return true;
}

static bool cmp_test(jrs *r, const jnode *at, jv in, const jv *arg, int *c) {
    return need_arg(r, at, arg) && jv_compare(r, at, in, *arg, c);
}

static bool t_lt(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    int c;
    if (!cmp_test(r, at, in, arg, &c)) return false;
    *out = c < 0;
    return true;
}

static bool t_le(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    int c;
    if (!cmp_test(r, at, in, arg, &c)) return false;
    *out = c <= 0;
    return true;
}

static bool t_gt(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    int c;
    if (!cmp_test(r, at, in, arg, &c)) return false;
    *out = c > 0;
    return true;
}

static bool t_ge(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    int c;
    if (!cmp_test(r, at, in, arg, &c)) return false;
    *out = c >= 0;
    return true;
}

static bool t_in(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    if (!need_arg(r, at, arg)) return false;
    *out = false;
    if (arg->t == JV_STR) {
        if (in.t != JV_STR) return jrs_fail(r, at, RECUR_E_INVALID, "'in <string>' requires string as left operand");
        *out = in.u.s->len == 0 || memmem(arg->u.s->s, arg->u.s->len, in.u.s->s, in.u.s->len);
    } else if (arg->t == JV_LIST) {
        for (size_t i = 0; i < arg->u.l->n && !*out; i++) *out = jv_equal(in, arg->u.l->items[i]);
    } else if (arg->t == JV_DICT) {
        *out = jdict_get(arg->u.d, in) != NULL;
    } else if (arg->t != JV_UNDEF) {
        return jrs_fail(r, at, RECUR_E_INVALID, "argument of type '%s' is not iterable", jv_type_name(*arg));
    }
    return true;
}

static bool int_arg(jrs *r, const jnode *at, jv v, int64_t *out) {
    if (v.t == JV_INT || v.t == JV_BOOL) { *out = v.t == JV_INT ? v.u.i : v.u.b; return true; }
    return jrs_fail(r, at, RECUR_E_INVALID, "expected an integer, got '%s'", jv_type_name(v));
}

static bool t_odd(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    (void)arg;
    int64_t i = 0;
    if (!int_arg(r, at, in, &i)) return false;
    *out = i % 2 != 0;
    return true;
}

static bool t_even(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    (void)arg;
    int64_t i = 0;
    if (!int_arg(r, at, in, &i)) return false;
    *out = i % 2 == 0;
    return true;
}

static bool t_divisibleby(jrs *r, const jnode *at, jv in, const jv *arg, bool *out) {
    int64_t i = 0, d = 1;
    if (!need_arg(r, at, arg) || !int_arg(r, at, in, &i) || !int_arg(r, at, *arg, &d)) return false;
    if (d == 0) return jrs_fail(r, at, RECUR_E_INVALID, "integer division or modulo by zero");
    *out = d == -1 || i % d == 0;
    return true;
}

static bool case_test(jv in, bool want_lower) {
    if (in.t != JV_STR) return false;
    bool cased = false;
    for (size_t i = 0; i < in.u.s->len; i++) {
        char c = in.u.s->s[i];
        if ((want_lower && c >= 'A' && c <= 'Z') || (!want_lower && c >= 'a' && c <= 'z')) return false;
        cased |= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    }
    return cased;
}

SIMPLE_TEST(t_lower, case_test(in, true))
SIMPLE_TEST(t_upper, case_test(in, false))

static const struct { const char *name; test_fn fn; } k_tests[] = {
    {"defined", t_defined}, {"undefined", t_undefined}, {"none", t_none}, {"boolean", t_boolean},
    {"false", t_false}, {"true", t_true}, {"integer", t_integer}, {"float", t_float},
    {"number", t_number}, {"string", t_string}, {"mapping", t_mapping}, {"iterable", t_iterable},
    {"sequence", t_sequence}, {"callable", t_callable}, {"escaped", t_escaped}, {"sameas", t_sameas},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"ne", t_ne}, {"!=", t_ne}, {"lt", t_lt},
    {"lessthan", t_lt}, {"<", t_lt}, {"le", t_le}, {"<=", t_le}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"ge", t_ge}, {">=", t_ge}, {"in", t_in}, {"odd", t_odd}, {"even", t_even},
    {"divisibleby", t_divisibleby}, {"lower", t_lower}, {"upper", t_upper},
};

static test_fn find_test(const char *name) {
    for (size_t i = 0; i < sizeof k_tests / sizeof k_tests[0]; i++)
        if (!strcmp(k_tests[i].name, name)) return k_tests[i].fn;
    return NULL;
}

bool jtest_apply(jrs *r, const jnode *at, const char *name, jv in, jargs *a, bool *out) {
    *out = false;
    test_fn fn = find_test(name);
    if (!fn) return jrs_fail(r, at, RECUR_E_INVALID, "no test named '%s'", name);
    if (a->n_pos > 1 || a->n_kw > 0) return jrs_fail(r, at, RECUR_E_INVALID, "test '%s': too many arguments", name);
    return fn(r, at, in, a->n_pos ? &a->pos[0] : NULL, out);
}
