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

#include "chat/chat.h"
#include "chat/jinja.h"
#include "gguf/gguf.h"
#include "vocab/vocab.h"

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
    EXPECT("{{ 2.5 | round }} {{ 3.5 | round }} {{ 7 | round }} {{ 2.1 | round(method='ceil') }}", NULL, "2.0 4.0 7 3.0");
    EXPECT("{{ '%s=%d (%5.2f) %r %%' % ('k', 3, 2.5, 'q') }}|{{ '%-3s|' % 'a' }}|{{ '%s and %s' | format(1, none) }}",
           NULL, "k=3 ( 2.50) 'q' %|a  ||1 and None");
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
    EXPECT_ERR("{{ '%s %s' % ('a',) }}", NULL, "not enough arguments");
    EXPECT_ERR("{{ '%d' % 'x' }}", NULL, "a number is required");
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
    /* deep expressions inside deep recursion: the combined nesting bound keeps the C stack small */
    char deep[2048] = "{% macro f(n) %}{{ ";
    for (int i = 0; i < 100; i++) strcat(deep, "[");
    strcat(deep, "f(n + 1)");
    for (int i = 0; i < 100; i++) strcat(deep, "]");
    strcat(deep, " }}{% endmacro %}{{ f(0) }}");
    EXPECT_ERR(deep, NULL, "evaluation nested more than");
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

/* ---- the chat layer ----------------------------------------------------------------------- */

typedef struct loaded {
    gguf_file      *g;
    vocab          *v;
    jinja_template *t;
} loaded;

static void load_vocab(const char *name, loaded *L) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/vocab/%s", RECUR_TESTDATA, name);
    assert_int_equal(gguf_open(path, &L->g, err, sizeof err), RECUR_OK);
    assert_int_equal(vocab_load(L->g, &L->v, err, sizeof err), RECUR_OK);
    char *src = chat_template_from_gguf(L->g, NULL);
    assert_non_null(src);
    L->t = jinja_parse(src, strlen(src), err, sizeof err);
    free(src);
    assert_non_null(L->t);
}

static void unload(loaded *L) {
    jinja_free(L->t);
    vocab_free(L->v);
    gguf_close(L->g);
}

/* the text of tokens [b, e), pieces rendered with special = true */
static char *detok(const vocab *v, const recur_token *t, int32_t b, int32_t e) {
    size_t n = 0, cap = 64;
    char *s = malloc(cap), piece[512];
    for (int32_t k = b; k < e; k++) {
        int len = vocab_token_to_piece(v, t[k], piece, sizeof piece, true);
        assert_true(len >= 0 && len < (int)sizeof piece);
        if (n + (size_t)len + 1 > cap) s = realloc(s, cap = 2 * (n + (size_t)len + 1));
        memcpy(s + n, piece, (size_t)len);
        n += (size_t)len;
    }
    s[n] = 0;
    return s;
}

/* every invariant of chat.h on one prompt; each message's tokens decode to its text */
static void check_prompt(const vocab *v, const chat_prompt *cp) {
    assert_true(cp->spans_exact);
    int32_t prev = 0;
    size_t tprev = 0;
    for (int32_t i = 0; i < cp->n_messages; i++) {
        assert_int_equal(cp->msg_tokens[i].begin, prev);
        assert_true(cp->msg_tokens[i].end >= prev);
        assert_int_equal(cp->msg_text[i].begin, tprev);
        char *got = detok(v, cp->tokens, cp->msg_tokens[i].begin, cp->msg_tokens[i].end);
        size_t tl = cp->msg_text[i].end - cp->msg_text[i].begin;
        if (strlen(got) != tl || memcmp(got, cp->text + cp->msg_text[i].begin, tl)) {
            printf("  message %d: tokens give \"%s\", text is \"%.*s\"\n", i, got, (int)tl, cp->text + cp->msg_text[i].begin);
            fail();
        }
        free(got);
        prev = cp->msg_tokens[i].end;
        tprev = cp->msg_text[i].end;
    }
    assert_int_equal(cp->gen_prompt.begin, prev);
    assert_int_equal(cp->gen_prompt.end, cp->n_tokens);
    /* the tokens are those of the whole text */
    recur_token *all = malloc(((size_t)cp->n_tokens + 8) * sizeof *all);
    int n = vocab_tokenize(v, cp->text, cp->text_len, all, cp->n_tokens + 8, false, true);
    assert_int_equal(n, cp->n_tokens);
    assert_memory_equal(all, cp->tokens, (size_t)n * sizeof *all);
    free(all);
}

static const char *k_conv =
    "[{\"role\": \"system\", \"content\": \"You are terse.\"},"
    " {\"role\": \"user\", \"content\": \"Hi \u00e9t\u00e9 \u4f60\u597d!\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>\\nhmm\\n</think>\\n\\nHello.\"},"
    " {\"role\": \"user\", \"content\": \"What's the weather in Paris?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    "   {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"t\\\": 18}\"}]";

static void test_chat_spans_qwen3(void **state) {
    (void)state;
    loaded L;
    load_vocab("qwen3-vocab.gguf", &L);
    json_t *msgs = json_loads(k_conv, 0, NULL), *kw = json_pack("{s:b}", "enable_thinking", 0);
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]", 0, NULL);
    assert_non_null(msgs);
    for (int variant = 0; variant < 4; variant++) {
        chat_params p = {.messages = msgs, .add_generation_prompt = variant & 1, .tools = variant & 2 ? tools : NULL,
                         .kwargs = kw};
        chat_prompt cp;
        char err[256];
        assert_int_equal(chat_apply(L.t, L.v, &p, &cp, err, sizeof err), RECUR_OK);
        assert_int_equal(cp.n_messages, 6);
        check_prompt(L.v, &cp);
        char *gen = detok(L.v, cp.tokens, cp.gen_prompt.begin, cp.gen_prompt.end);
        assert_string_equal(gen, variant & 1 ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "");
        free(gen);
        assert_non_null(memmem(cp.text + cp.msg_text[1].begin, cp.msg_text[1].end - cp.msg_text[1].begin,
                               "Hi \u00e9t\u00e9", strlen("Hi \u00e9t\u00e9")));
        assert_false(cp.think_open);
        /* each message's part starts its own turn, even the re-rendered assistant turns */
        for (int32_t i = 1; i < cp.n_messages; i++) {
            const char *part = cp.text + cp.msg_text[i].begin;
            assert_true(!strncmp(part, "<|im_start|>", 12) || !strncmp(part, "\n<tool_response>", 16));
        }
        assert_non_null(memmem(cp.text + cp.msg_text[2].begin, cp.msg_text[2].end - cp.msg_text[2].begin, "Hello.", 6));
        /* where a message's content starts, and where a past reply stops agreeing with the
         * generation prompt (Qwen3 drops the empty <think> block from past replies) */
        char *c1 = detok(L.v, cp.tokens, cp.msg_content[1], cp.msg_tokens[1].end);
        assert_int_equal(strncmp(c1, "Hi ", 3), 0);
        free(c1);
        char *c3 = detok(L.v, cp.tokens, cp.msg_content[3], cp.msg_tokens[3].end);
        assert_int_equal(strncmp(c3, "What's", 6), 0);
        free(c3);
        if (variant & 1) {
            assert_true(cp.gen_reply > cp.gen_prompt.begin && cp.gen_reply < cp.gen_prompt.end);
            char *head = detok(L.v, cp.tokens, cp.gen_prompt.begin, cp.gen_reply);
            assert_string_equal(head, "<|im_start|>assistant\n");
            free(head);
        }
        chat_prompt_free(&cp);
    }
    /* a conversation of one message, and a template error */
    json_t *one = json_loads("[{\"role\": \"user\", \"content\": \"x\"}]", 0, NULL);
    chat_params p1 = {.messages = one, .add_generation_prompt = true};
    chat_prompt cp;
    char err[256];
    assert_int_equal(chat_apply(L.t, L.v, &p1, &cp, err, sizeof err), RECUR_OK);
    check_prompt(L.v, &cp);
    assert_int_equal(cp.msg_tokens[0].begin, 0);
    chat_prompt_free(&cp);
    chat_params bad = {.messages = kw};
    assert_int_equal(chat_apply(L.t, L.v, &bad, &cp, err, sizeof err), RECUR_E_INVALID);
    json_decref(one);
    json_decref(tools);
    json_decref(msgs);
    json_decref(kw);
    unload(&L);
}

/* the message spans of msgs (JSON) rendered with t over L's vocab are exactly the
 * expected texts, and every non-empty content starts at its message's msg_content token */
static void expect_spans(loaded *L, const jinja_template *t, const char *msgs_json, bool add_gen,
                         const char *const *want) {
    json_t *msgs = json_loads(msgs_json, 0, NULL);
    assert_non_null(msgs);
    chat_params p = {.messages = msgs, .add_generation_prompt = add_gen};
    chat_prompt cp;
    char err[256];
    assert_int_equal(chat_apply(t, L->v, &p, &cp, err, sizeof err), RECUR_OK);
    check_prompt(L->v, &cp);
    for (int32_t i = 0; i < cp.n_messages; i++) {
        size_t tl = cp.msg_text[i].end - cp.msg_text[i].begin;
        if (tl != strlen(want[i]) || memcmp(cp.text + cp.msg_text[i].begin, want[i], tl)) {
            printf("  message %d is \"%.*s\", expected \"%s\"\n", i, (int)tl, cp.text + cp.msg_text[i].begin, want[i]);
            fail();
        }
        const char *c = json_string_value(json_object_get(json_array_get(msgs, (size_t)i), "content"));
        if (c && *c && tl) {
            char *got = detok(L->v, cp.tokens, cp.msg_content[i], cp.msg_tokens[i].end);
            assert_int_equal(strncmp(got, c, strlen(c)), 0);
            free(got);
        }
    }
    chat_prompt_free(&cp);
    json_decref(msgs);
}

/* Qwen3.5 renders the last reply after the last user message with a <think> block that it drops
 * once a user message follows. An empty reply (a random model's, or one whose text was all
 * reasoning) is "<|im_start|>assistant\n<|im_end|>\n" in the full text but ends in
 * "\n<think>\n\n</think>\n\n<|im_end|>\n" rendered last: the two agree up to the "<" that
 * "<think>" and "<|im_end|>" share, so the end-of-turn text starts before they stop agreeing, and
 * the next empty reply ends in the same "\n<|im_end|>\n": the reply must not swallow the turns
 * after it (which would move the checkpoints at the next user message's start and content). */
static void test_chat_spans_empty_replies(void **state) {
    (void)state;
    loaded L;
    load_vocab("qwen3-vocab.gguf", &L);
    size_t len;
    char *src = read_file(TMPL_DIR "/jinja/Qwen3.5-27B.jinja", &len), err[256];
    assert_non_null(src);
    jinja_template *t = jinja_parse(src, len, err, sizeof err);
    free(src);
    assert_non_null(t);
    const char *conv =
        "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"first question\"},"
        " {\"role\": \"assistant\", \"content\": \"\"}, {\"role\": \"user\", \"content\": \"second question\"},"
        " {\"role\": \"assistant\", \"content\": \"\"}, {\"role\": \"user\", \"content\": \"third question\"}]";
    /* (a lone system message does not render: "No user query found", so it merges into the next) */
    const char *const want[] = {
        "", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nfirst question<|im_end|>\n",
        "<|im_start|>assistant\n<|im_end|>\n", "<|im_start|>user\nsecond question<|im_end|>\n",
        "<|im_start|>assistant\n<|im_end|>\n", "<|im_start|>user\nthird question<|im_end|>\n",
    };
    expect_spans(&L, t, conv, true, want);
    expect_spans(&L, t, conv, false, want);
    /* the same user message twice and a final empty reply that renders with its <think> block:
     * the first reply ends at its own end-of-turn, not at the longer match of the last one */
    const char *twice = "[{\"role\": \"user\", \"content\": \"same\"}, {\"role\": \"assistant\", \"content\": \"\"},"
                        " {\"role\": \"user\", \"content\": \"same\"}, {\"role\": \"assistant\", \"content\": \"\"}]";
    const char *const want2[] = {
        "<|im_start|>user\nsame<|im_end|>\n", "<|im_start|>assistant\n<|im_end|>\n",
        "<|im_start|>user\nsame<|im_end|>\n", "<|im_start|>assistant\n<think>\n\n</think>\n\n<|im_end|>\n",
    };
    expect_spans(&L, t, twice, false, want2);
    jinja_free(t);
    unload(&L);
}

/* Phi-3.5 ends a conversation without a generation prompt with EOS, which a longer one has only
 * at its very end: a prefix rendering agrees with the full text but for that trailer, and the
 * message ends before it (not at a later "...t|>"-like tail: every message would move by one). */
static void test_chat_spans_eos_trailer(void **state) {
    (void)state;
    loaded L;
    load_vocab("qwen3-vocab.gguf", &L);
    size_t len, eos_len;
    char *src = read_file(TMPL_DIR "/jinja/microsoft-Phi-3.5-mini-instruct.jinja", &len), err[256];
    assert_non_null(src);
    jinja_template *t = jinja_parse(src, len, err, sizeof err);
    free(src);
    assert_non_null(t);
    const char *eos = vocab_token_text(L.v, vocab_eos(L.v), &eos_len);
    assert_true(eos_len > 0);
    const char *conv =
        "[{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"first question\"},"
        " {\"role\": \"assistant\", \"content\": \"an answer\"}, {\"role\": \"user\", \"content\": \"second question\"}]";
    char last[128];
    snprintf(last, sizeof last, "<|user|>\nsecond question<|end|>\n%.*s", (int)eos_len, eos);
    const char *want[] = {
        "<|system|>\nBe brief.<|end|>\n", "<|user|>\nfirst question<|end|>\n",
        "<|assistant|>\nan answer<|end|>\n", "<|user|>\nsecond question<|end|>\n",
    };
    expect_spans(&L, t, conv, true, want);
    want[3] = last;   /* no generation prompt: the last message runs to the end */
    expect_spans(&L, t, conv, false, want);
    jinja_free(t);
    unload(&L);
}

static void test_chat_bos(void **state) {
    (void)state;
    loaded L;
    load_vocab("llama3-vocab.gguf", &L);   /* adds BOS; its template writes bos_token too */
    json_t *msgs = json_loads(k_conv, 0, NULL);
    json_array_remove(msgs, 5);
    json_array_remove(msgs, 4);
    chat_params p = {.messages = msgs, .add_generation_prompt = true};
    chat_prompt cp;
    char err[256];
    assert_int_equal(chat_apply(L.t, L.v, &p, &cp, err, sizeof err), RECUR_OK);
    assert_true(cp.n_tokens > 2);
    assert_int_equal(cp.tokens[0], vocab_bos(L.v));
    assert_int_not_equal(cp.tokens[1], vocab_bos(L.v));   /* no doubled BOS */
    assert_true(cp.spans_exact);
    assert_int_equal(cp.msg_tokens[0].begin, 0);
    assert_int_equal(cp.gen_prompt.end, cp.n_tokens);
    for (int32_t i = 1; i < cp.n_messages; i++) {
        char *got = detok(L.v, cp.tokens, cp.msg_tokens[i].begin, cp.msg_tokens[i].end);
        size_t tl = cp.msg_text[i].end - cp.msg_text[i].begin;
        assert_int_equal(strlen(got), tl);
        assert_memory_equal(got, cp.text + cp.msg_text[i].begin, tl);
        free(got);
    }
    chat_prompt_free(&cp);
    /* chat_render_context fills in bos_token/eos_token */
    char *out;
    jinja_template *t = jinja_parse("{{ bos_token }}|{{ eos_token }}", 31, err, sizeof err);
    assert_int_equal(chat_render_context(t, L.v, NULL, NULL, &out, NULL, err, sizeof err), RECUR_OK);
    assert_string_equal(out, "<|begin_of_text|>|<|end_of_text|>");
    free(out);
    jinja_free(t);
    json_decref(msgs);
    unload(&L);
}

static void expect_split(const char *text, bool open, const char *reasoning, const char *content, bool closed) {
    chat_reasoning r = chat_split_reasoning(text, strlen(text), open);
    assert_int_equal(r.reasoning_len, strlen(reasoning));
    assert_memory_equal(r.reasoning, reasoning, r.reasoning_len);
    assert_int_equal(r.content_len, strlen(content));
    assert_memory_equal(r.content, content, r.content_len);
    assert_int_equal(r.closed, closed);
}

static void test_reasoning_split(void **state) {
    (void)state;
    expect_split("<think>\nLet me think.\n</think>\n\nThe answer.", false, "Let me think.", "The answer.", true);
    expect_split("  <think>a</think>b", false, "a", "b", true);
    expect_split("Plain answer.", false, "", "Plain answer.", false);
    expect_split("Plain <think>x</think>", false, "", "Plain <think>x</think>", false);
    expect_split("\nreasoning only so far", true, "reasoning only so far", "", false);
    expect_split("r</think>\n\nc", true, "r", "c", true);
    expect_split("<think>unfinished", false, "unfinished", "", false);
    expect_split("", false, "", "", false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_cases), cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_values),         cmocka_unit_test(test_loops),
        cmocka_unit_test(test_macros_and_set), cmocka_unit_test(test_filters),
        cmocka_unit_test(test_methods),        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_bounds),         cmocka_unit_test(test_chat_spans_qwen3),
        cmocka_unit_test(test_chat_bos),       cmocka_unit_test(test_reasoning_split),
        cmocka_unit_test(test_chat_spans_empty_replies), cmocka_unit_test(test_chat_spans_eos_trailer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
