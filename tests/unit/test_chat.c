/* test_chat.c — the Jinja engine and the chat layer.
 *
 * 1. Every case of RECUR_TESTDATA/templates/cases/<template>/NN_name.json is rendered with its
 *    template and compared byte for byte with "expected" (or must fail where "error" is set).
 *    Pass counts per template are printed; the test fails unless all pass.
 * 2. Unit tests of the engine: whitespace control, loops, macros, filters, errors with line
 *    and column, and the bounds (recursion, output size, iterations).
 * 3. The chat layer with the Qwen3 vocab: message spans, BOS handling, reasoning split.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "chat/jinja.h"

#define CASES_DIR RECUR_TESTDATA "/templates/cases"
#define TMPL_DIR  RECUR_TESTDATA "/templates"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *len = (size_t)n; }
    return buf;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* sorted entries of dir (not . and ..); caller frees */
static int list_dir(const char *dir, char ***out) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0, cap = 0;
    char **v = NULL;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) v = realloc(v, (size_t)(cap = cap ? cap * 2 : 32) * sizeof *v);
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(v, (size_t)n, sizeof *v, cmp_names);
    *out = v;
    return n;
}

/* Renders one case file; returns 1 when it passes. */
static int run_case(const char *path, char *why, size_t why_len) {
    json_error_t je;
    json_t *c = json_load_file(path, 0, &je);
    if (!c) { snprintf(why, why_len, "bad JSON: %s", je.text); return 0; }
    const char *tf = json_string_value(json_object_get(c, "template_file"));
    const char *now = json_string_value(json_object_get(c, "strftime_now"));
    json_t *expected = json_object_get(c, "expected"), *error = json_object_get(c, "error");
    char tpath[1024];
    snprintf(tpath, sizeof tpath, "%s/%s", TMPL_DIR, tf ? tf : "?");
    size_t tlen;
    char *src = read_file(tpath, &tlen), err[512] = "";
    int ok = 0;
    jinja_template *t = src ? jinja_parse(src, tlen, err, sizeof err) : NULL;
    if (t) {
        struct tm tm = {0};
        if (now) strptime(now, "%Y-%m-%dT%H:%M:%S", &tm);
        jinja_render_opts o = {.now = now ? &tm : NULL};
        char *out = NULL;
        size_t out_len = 0;
        recur_status st = jinja_render(t, json_object_get(c, "context"), &o, &out, &out_len, err, sizeof err);
        if (!json_is_null(error) && error) {
            ok = st != RECUR_OK;
            if (!ok) snprintf(why, why_len, "rendered, but the case expects an error");
        } else if (st != RECUR_OK) {
            snprintf(why, why_len, "error: %.400s", err);
        } else {
            const char *want = json_string_value(expected);
            size_t wl = json_string_length(expected), i = 0;
            while (i < wl && i < out_len && want[i] == out[i]) i++;
            ok = wl == out_len && i == wl;
            if (!ok)
                snprintf(why, why_len, "differs at byte %zu (len %zu vs %zu): got \"%.60s\" want \"%.60s\"", i,
                         out_len, wl, out + i, want + (i < wl ? i : wl));
        }
        free(out);
    } else {
        snprintf(why, why_len, "parse: %.400s", src ? err : "template file missing");
    }
    jinja_free(t);
    free(src);
    json_decref(c);
    return ok;
}

static void test_template_cases(void **state) {
    (void)state;
    char **tmpls;
    int nt = list_dir(CASES_DIR, &tmpls), total = 0, passed = 0;
    assert_true(nt > 0);
    for (int i = 0; i < nt; i++) {
        char dir[1024], **cases;
        snprintf(dir, sizeof dir, "%s/%s", CASES_DIR, tmpls[i]);
        int nc = list_dir(dir, &cases), p = 0;
        for (int k = 0; k < nc; k++) {
            char path[2048], why[512] = "";
            snprintf(path, sizeof path, "%s/%s", dir, cases[k]);
            int ok = run_case(path, why, sizeof why);
            p += ok;
            if (!ok) printf("  FAIL %s/%s: %s\n", tmpls[i], cases[k], why);
            free(cases[k]);
        }
        free(cases);
        printf("  %-45s %2d/%2d\n", tmpls[i], p, nc);
        total += nc;
        passed += p;
        free(tmpls[i]);
    }
    free(tmpls);
    printf("  template cases: %d/%d passed\n", passed, total);
    assert_int_equal(passed, total);
}

/* ---- engine unit tests ---------------------------------------------------------------------- */

/* Renders src with the JSON context ctx; returns the status, output in *out (or NULL). */
static recur_status render_o(const char *src, const char *ctx, const jinja_render_opts *o, char **out,
                             char *err, size_t err_len) {
    *out = NULL;
    jinja_template *t = jinja_parse(src, strlen(src), err, err_len);
    if (!t) return RECUR_E_INVALID;
    json_t *c = ctx ? json_loads(ctx, 0, NULL) : NULL;
    recur_status st = jinja_render(t, c, o, out, NULL, err, err_len);
    json_decref(c);
    jinja_free(t);
    return st;
}

/* expects src rendered with ctx to give want */
#define EXPECT(src, ctx, want) expect_render(src, ctx, want, __LINE__)
static void expect_render(const char *src, const char *ctx, const char *want, int line) {
    char *out, err[512] = "";
    recur_status st = render_o(src, ctx, NULL, &out, err, sizeof err);
    if (st != RECUR_OK || strcmp(out, want)) {
        printf("  line %d: template %s\n    got  %s%s%s\n    want \"%s\"\n", line, src, st ? "error: " : "\"",
               st ? err : out, st ? "" : "\"", want);
        fail();
    }
    free(out);
}

/* expects an error whose message contains `part` */
#define EXPECT_ERR(src, ctx, part) expect_err(src, ctx, part, __LINE__)
static void expect_err(const char *src, const char *ctx, const char *part, int line) {
    char *out, err[512] = "";
    recur_status st = render_o(src, ctx, NULL, &out, err, sizeof err);
    if (st == RECUR_OK || !strstr(err, part)) {
        printf("  line %d: template %s\n    got %s \"%s\", want an error with \"%s\"\n", line, src,
               st ? "error" : "output", st ? err : out, part);
        fail();
    }
    free(out);
}

static void test_whitespace(void **state) {
    (void)state;
    EXPECT("a\n", NULL, "a");                                  /* one trailing newline dropped */
    EXPECT("a\n\n", NULL, "a\n");
    EXPECT("a\r\nb", NULL, "a\nb");                           /* newlines normalised */
    EXPECT("  {% if true %}\nX\n  {% endif %}\nY", NULL, "X\nY");   /* lstrip + trim_blocks */
    EXPECT("  {{ 'v' }}\n", NULL, "  v");                     /* no lstrip/trim for {{ }} */
    EXPECT("a  {%- if true -%}  b  {%- endif %}", NULL, "ab");
    EXPECT("a {{- ' x ' -}} b", NULL, "a x b");
    EXPECT("x  {%+ if true %}y{% endif %}", NULL, "x  y");
    EXPECT("{% if true +%}\ny{% endif %}", NULL, "\ny");
    EXPECT("a\n  {# c #}\nb", NULL, "a\nb");
    EXPECT("a {#- c -#} b", NULL, "ab");
    EXPECT("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    EXPECT("{% generation %}body{% endgeneration %}", NULL, "body");
    EXPECT("{{ '%}' }}", NULL, "%}");
    EXPECT("{{ {'a': {'b': 1}}['a']['b'] }}", NULL, "1");
}

static void test_values(void **state) {
    (void)state;
    EXPECT("{{ none }} {{ true }} {{ 1.0 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1.5e-5 }}", NULL,
           "None True 1.0 1e+20 0.30000000000000004 1.5e-05");
    EXPECT("{{ [1, 'a', none, false, 2.5] }} {{ {'k': 'v'} }} {{ (1,) }}", NULL,
           "[1, 'a', None, False, 2.5] {'k': 'v'} (1,)");
    EXPECT("{{ \"it's\" }}{{ [\"it's\"] }}", NULL, "it's[\"it's\"]");
    EXPECT("{{ x }}|{{ x.y is defined }}", "{\"x\": {}}", "{}|False");
    EXPECT("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 2 }} {{ 1 ~ 'x' }}",
           NULL, "3 -4 2 3.5 1024 abab 1x");
    EXPECT("{{ 1 < 2 < 3 }} {{ 'a' in 'cat' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}", NULL,
           "True True True True");
    EXPECT("{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ not none }}", NULL, "b b True");
    EXPECT("{{ 'yes' if x else 'no' }}{{ 'z' if false }}", "{\"x\": 1}", "yes");
    EXPECT("{{ s[::-1] }} {{ s[1:] }} {{ s[-2:] }} {{ l[::2] }} {{ l[5:1:-2] }}",
           "{\"s\": \"h\u00e9llo\", \"l\": [0,1,2,3,4,5]}", "oll\u00e9h \u00e9llo lo [0, 2, 4] [5, 3]");
    EXPECT("{{ m == {'b': 2, 'a': 1} }} {{ [1, 2] == [1, 2] }} {{ 1 == 1.0 }} {{ 1 == true }}",
           "{\"m\": {\"a\": 1, \"b\": 2}}", "True True True True");
}

static void test_loops(void **state) {
    (void)state;
    EXPECT("{% for x in 'abc' %}{{ loop.index }}{{ x }}{{ loop.revindex0 }}{% if not loop.last %},{% endif %}{% endfor %}",
           NULL, "1a2,2b1,3c0");
    EXPECT("{% for x in [1,2,3] %}{{ loop.previtem is defined }}{{ loop.nextitem }}{{ loop.length }};{% endfor %}",
           NULL, "False23;True33;True3;");
    EXPECT("{% for x in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT("{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ loop.length }} {% endfor %}", NULL, "04 34 64 94 ");
    EXPECT("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 3 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           NULL, "013");
    EXPECT("{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %}", "{\"d\": {\"b\": 1, \"a\": [2]}}", "b=1;a=[2];");
    EXPECT("{% for k, v in d.items() %}{{ k }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
           "{\"d\": {\"x\": 1, \"y\": 2}}", "xyxy");
    EXPECT("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}", NULL, "1");
    EXPECT("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}",
           NULL, "4");
    EXPECT("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}",
           NULL, "121|122|");
    EXPECT("{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL, "aba");
    EXPECT("{% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}", NULL, "37");
    EXPECT("{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}", NULL, "531");
}

static void test_macros_and_set(void **state) {
    (void)state;
    EXPECT("{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}]{% endmacro %}{{ m(1) }}{{ m(1, c=3) }}{{ m(1, 2, 3) }}",
           NULL, "[1BNone][1B3][123]");
    EXPECT("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}", NULL, "321");
    EXPECT("{% macro m() %}  x  {% endmacro %}[{{ m() | trim }}]", NULL, "[x]");
    EXPECT("{% set top = 't' %}{% macro m() %}{{ top }}{{ local is defined }}{% endmacro %}"
           "{% for local in [1] %}{{ m() }}{% endfor %}", NULL, "tFalse");
    EXPECT("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, k=2) }}", NULL, "[1]{'k': 2}");
    EXPECT("{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21");
    EXPECT("{% set x %}in {{ 'block' }}{% endset %}[{{ x }}]", NULL, "[in block]");
    EXPECT("{% set x | upper %}shout{% endset %}{{ x }}", NULL, "SHOUT");
    EXPECT("{% filter upper %}abc{% endfilter %}", NULL, "ABC");
    EXPECT("{% if false %}a{% elif true %}b{% else %}c{% endif %}", NULL, "b");
    EXPECT("{% set d = dict(a=1) %}{{ d.a }}{{ d.get('z', 'def') }}{{ d.get('z') }}", NULL, "1defNone");
    EXPECT("{{ strftime_now('%Y') | length }}", NULL, "4");
}

static void test_filters(void **state) {
    (void)state;
    EXPECT("{{ x | tojson }}", "{\"x\": {\"b\": [1, 2.5, null, true], \"a\": \"\u00e9\\\"\\n\\u0001\"}}",
           "{\"b\": [1, 2.5, null, true], \"a\": \"\u00e9\\\"\\n\\u0001\"}");
    EXPECT("{{ x | tojson(indent=2) }}", "{\"x\": {\"a\": [1], \"e\": {}}}", "{\n  \"a\": [\n    1\n  ],\n  \"e\": {}\n}");
    EXPECT("{{ x | tojson(sort_keys=true) }}", "{\"x\": {\"b\": 1, \"a\": 2}}", "{\"a\": 2, \"b\": 1}");
    EXPECT("{{ l | map(attribute='n') | join(',') }}", "{\"l\": [{\"n\": 1}, {\"n\": 2}]}", "1,2");
    EXPECT("{{ l | selectattr('r', 'equalto', 'u') | map(attribute='c') | list }}",
           "{\"l\": [{\"r\": \"u\", \"c\": 1}, {\"r\": \"a\", \"c\": 2}, {\"r\": \"u\", \"c\": 3}]}", "[1, 3]");
    EXPECT("{{ l | rejectattr('x') | length }}{{ l | selectattr('x') | first }}", "{\"l\": [{\"x\": 0}, {\"x\": 5}]}",
           "1{'x': 5}");
    EXPECT("{{ ['a', 'c', 'b'] | reject('equalto', 'c') | join }}{{ [3, 1, 2] | sort | list }}", NULL, "ab[1, 2, 3]");
    EXPECT("{{ ['a', 'A', 'b'] | unique | list }}{{ ['b', 'A', 'a'] | sort }}{{ [1, 3, 2] | max }}", NULL,
           "['a', 'b']['A', 'a', 'b']3");
    EXPECT("{% for k, v in {'b': 1, 'A': 2} | dictsort %}{{ k }}{% endfor %}", NULL, "Ab");
    EXPECT("{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ none | string }}|{{ 'ab' | upper }}|{{ 'hello world' | title }}",
           NULL, "x|a|None|AB|Hello World");
    EXPECT("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}", NULL, "a\n  b\n\n  c|  a\n  b");
    EXPECT("{{ '3' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ 2.5 | int }} {{ -3 | abs }} {{ 2.567 | round(2) }}",
           NULL, "4 0 2.5 2 3 2.57");
    EXPECT("{{ u | default('d') }}{{ '' | default('e', true) }}{{ none | default('n') }}", NULL, "deNone");
    EXPECT("{{ 'h\u00e9' | length }} {{ [1, 2] | last }} {{ 'abc' | first }} {{ 'abc' | reverse }} {{ 'a-b' | replace('-', '+') }}",
           NULL, "2 2 a cba a+b");
    EXPECT("{{ [1, 2, 3] | sum }} {{ '<a&b>' | e }} {{ 'x' | safe }} {{ 'one two' | wordcount }}", NULL,
           "6 &lt;a&amp;b&gt; x 2");
    EXPECT("{{ ['a', 'b'] | map('upper') | join('-') }}", NULL, "A-B");
}

static void test_methods(void **state) {
    (void)state;
    EXPECT("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }}", NULL,
           "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c']");
    EXPECT("{{ '\n\nx\n'.strip('\n') }}|{{ 'xyx'.lstrip('x') }}|{{ '  y '.rstrip() }}|", NULL, "x|yx|  y|");
    EXPECT("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.upper() }}{{ 'A'.lower() }}", NULL,
           "TrueTrueABCa");
    EXPECT("{{ '{} and {name}'.format(1, name='n') }} {{ 'aXbX'.replace('X', '') }} {{ '-'.join(['a', 'b']) }}",
           NULL, "1 and n ab a-b");
    EXPECT("{{ 'banana'.count('a') }}{{ 'banana'.find('n') }}{{ '12'.isdigit() }}", NULL, "32True");
}

static void test_errors(void **state) {
    (void)state;
    EXPECT_ERR("{% if %}x{% endif %}", NULL, "line 1, column 7");
    EXPECT_ERR("a\n{% for x in y %}", NULL, "endfor");
    EXPECT_ERR("a\n  {{ x +* }}", NULL, "line 2, column 9: unexpected '*'");
    EXPECT_ERR("{{ x == }}", NULL, "line 1, column 9: unexpected '}}'");
    EXPECT_ERR("{{ 'abc }}", NULL, "unterminated string");
    EXPECT_ERR("{% frobnicate %}", NULL, "unknown or unsupported tag 'frobnicate'");
    EXPECT_ERR("{% break %}", NULL, "outside a loop");
    EXPECT_ERR("line one\n{{ raise_exception('boom') }}", NULL, "line 2, column 4: raise_exception: boom");
    EXPECT_ERR("{{ x.y.z }}", NULL, "undefined");
    EXPECT_ERR("{{ 'a' + 1 }}", NULL, "unsupported operand types for +: 'str' and 'int'");
    EXPECT_ERR("{{ 1 // 0 }}", NULL, "by zero");
    EXPECT_ERR("{{ 1 | nosuchfilter }}", NULL, "no filter named 'nosuchfilter'");
    EXPECT_ERR("{{ 1 is nosuchtest }}", NULL, "no test named");
    EXPECT_ERR("{{ none.x() }}", NULL, "not callable");
    EXPECT_ERR("{% set x = 1 %}{% set x.y = 2 %}", NULL, "non-namespace");
    EXPECT_ERR("{{ [1, 2][::0] }}", NULL, "step cannot be zero");
    EXPECT_ERR("{% for a, b in [1] %}{% endfor %}", NULL, "not iterable");
    EXPECT_ERR("{{ 9223372036854775807 + 1 }}", NULL, "overflow");
    EXPECT_ERR("{{ undefined_thing() }}", NULL, "not callable");
    char big[4096] = "{{ ";
    for (int i = 0; i < 1000; i++) strcat(big, "(");
    strcat(big, "1");
    for (int i = 0; i < 1000; i++) strcat(big, ")");
    strcat(big, " }}");
    EXPECT_ERR(big, NULL, "nested too deeply");
}

static void test_bounds(void **state) {
    (void)state;
    /* a macro that calls itself forever stops at the depth bound, cleanly */
    EXPECT_ERR("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, "nested deeper than");
    EXPECT_ERR("{% for i in range(100000000) %}{% endfor %}", NULL, "range() of more than");
    EXPECT_ERR("{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}", NULL,
               "loop iterations");
    EXPECT_ERR("{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               NULL, "longer than");
    EXPECT_ERR("{{ 'x' * 100000000 }}", NULL, "longer than");
    EXPECT_ERR("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' * 10 }}{% endfor %}", NULL, "longer than");
    EXPECT_ERR("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}{% endfor %}", NULL,
               "nested more than");
    EXPECT_ERR("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", NULL, "nested more than");
    /* explicit small bounds */
    char *out, err[256];
    jinja_render_opts o = {.max_output = 10};
    assert_int_equal(render_o("{{ 'x' * 11 }}", NULL, &o, &out, err, sizeof err), RECUR_E_FULL);
    assert_null(out);
    jinja_render_opts o2 = {.max_iterations = 5};
    assert_int_equal(render_o("{% for i in range(6) %}{% endfor %}", NULL, &o2, &out, err, sizeof err), RECUR_E_FULL);
    jinja_render_opts o3 = {.max_depth = 3};
    assert_int_equal(render_o("{% macro f(n) %}{{ f(n + 1) if n < 3 }}{% endmacro %}{{ f(0) }}", NULL, &o3, &out,
                              err, sizeof err), RECUR_E_FULL);
    assert_int_equal(render_o("{% macro f(n) %}{{ f(n + 1) if n < 2 }}{% endmacro %}{{ f(0) }}", NULL, &o3, &out,
                              err, sizeof err), RECUR_OK);
    free(out);
    jinja_render_opts o4 = {.max_work = 1000};
    assert_int_equal(render_o("{% for i in range(100) %}{% set s = 'abcdefghijklmnopqrstuvwxyz' ~ i %}{% endfor %}",
                              NULL, &o4, &out, err, sizeof err), RECUR_E_FULL);
    assert_non_null(strstr(err, "work budget"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_cases), cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_values),         cmocka_unit_test(test_loops),
        cmocka_unit_test(test_macros_and_set), cmocka_unit_test(test_filters),
        cmocka_unit_test(test_methods),        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
