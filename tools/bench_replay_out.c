/* bench_replay_out.c — the report of `recur-bench replay`: per workload a markdown table (one row
 * per request or action) and a summary line, or all of it as one JSON object. A value that is
 * absent (an action row, a failed request, no recur:cache_bytes in /metrics) prints as "-" in md
 * and null in json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_replay.h"

#define N_COLS 9

static const char *const HEAD[N_COLS] = { "step", "n_prompt", "evaluated", "minimum", "excess", "ttft ms",
                                          "cache_n", "cache bytes", "note" };
static const bool RIGHT[N_COLS] = { false, true, true, true, true, true, true, true, false };

rp_row *rp_report_row(rp_workload_report *w) {
    if (w->n_rows == RP_MAX_ROWS) return NULL;
    rp_row *r = &w->rows[w->n_rows++];
    memset(r, 0, sizeof *r);
    snprintf(r->cache_bytes, sizeof r->cache_bytes, "-");
    return r;
}

static bool measured(const rp_row *r) { return r->request && r->evaluated >= 0 && r->minimum >= 0; }

void rp_report_sums(const rp_workload_report *w, long *evaluated, long *minimum, long *excess) {
    *evaluated = *minimum = *excess = 0;
    for (int i = 0; i < w->n_rows; i++) {
        const rp_row *r = &w->rows[i];
        if (!measured(r)) continue;
        *evaluated += r->evaluated;
        *minimum += r->minimum;
        *excess += r->evaluated - r->minimum;
    }
}

/* ---- md ------------------------------------------------------------------------------------- */

static void num(char *buf, size_t len, int v) {
    if (v < 0) snprintf(buf, len, "-");
    else snprintf(buf, len, "%d", v);
}

static void cells(const rp_row *r, char c[N_COLS][224]) {
    snprintf(c[0], sizeof c[0], "%s", r->step);
    for (int k = 1; k < N_COLS; k++) snprintf(c[k], sizeof c[k], "-");
    if (r->request) {
        if (r->n_prompt > 0) num(c[1], sizeof c[1], r->n_prompt);
        num(c[2], sizeof c[2], r->evaluated);
        num(c[3], sizeof c[3], r->minimum);
        if (measured(r)) snprintf(c[4], sizeof c[4], "%d", r->evaluated - r->minimum);
        if (r->ttft_ms >= 0) snprintf(c[5], sizeof c[5], "%.1f", r->ttft_ms);
        num(c[6], sizeof c[6], r->cache_n);
    }
    snprintf(c[7], sizeof c[7], "%s", r->cache_bytes);
    snprintf(c[8], sizeof c[8], "%s", r->note);
    /* a '|' in a note would split its cell */
    for (char *p = c[8]; *p; p++) if (*p == '|') *p = '/';
}

static void md_line(char c[N_COLS][224], const int *width) {
    for (int k = 0; k < N_COLS; k++) printf(RIGHT[k] ? "| %*s " : "| %-*s ", width[k], c[k]);
    printf("|\n");
}

static void md_table(const rp_workload_report *w) {
    int width[N_COLS];
    char c[N_COLS][224];
    for (int k = 0; k < N_COLS; k++) width[k] = (int)strlen(HEAD[k]);
    for (int i = 0; i < w->n_rows; i++) {
        cells(&w->rows[i], c);
        for (int k = 0; k < N_COLS; k++) if ((int)strlen(c[k]) > width[k]) width[k] = (int)strlen(c[k]);
    }
    for (int k = 0; k < N_COLS; k++) snprintf(c[k], sizeof c[k], "%s", HEAD[k]);
    md_line(c, width);
    for (int k = 0; k < N_COLS; k++) {
        printf("| ");
        for (int j = 0; j < width[k] - (RIGHT[k] ? 1 : 0); j++) putchar('-');
        printf(RIGHT[k] ? ": " : " ");
    }
    printf("|\n");
    for (int i = 0; i < w->n_rows; i++) {
        cells(&w->rows[i], c);
        md_line(c, width);
    }
}

void rp_report_md(const rp_workload_report *w, int n) {
    for (int i = 0; i < n; i++) {
        long ev, mn, ex;
        rp_report_sums(&w[i], &ev, &mn, &ex);
        printf("%sreplay %s (%s)\n\n", i ? "\n" : "", w[i].name, w[i].setup);
        md_table(&w[i]);
        printf("\n%s: excess %ld, evaluated %ld, minimum %ld%s\n", w[i].name, ex, ev, mn,
               w[i].failed ? " (failed: see the notes)" : "");
    }
    printf("\nttft: client side, from sending the request to the first streamed byte; evaluated = timings.prompt_n,\n"
           "minimum = prompt tokens after the longest prefix the server evaluated before (excess = evaluated - minimum)\n");
}

/* ---- json ----------------------------------------------------------------------------------- */

static json_t *int_or_null(int v) { return v >= 0 ? json_integer(v) : json_null(); }

static json_t *row_json(const rp_row *r) {
    char *end;
    const long long cb = strtoll(r->cache_bytes, &end, 10);
    const bool has_cb = end != r->cache_bytes && !*end;
    return json_pack("{s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:s}", "step", r->step, "request",
                     r->request, "n_prompt", r->request ? int_or_null(r->n_prompt) : json_null(),
                     "n_prompt_server", int_or_null(r->n_prompt_server), "evaluated", r->request ? int_or_null(r->evaluated) : json_null(),
                     "minimum", r->request ? int_or_null(r->minimum) : json_null(),
                     "excess", measured(r) ? json_integer(r->evaluated - r->minimum) : json_null(),
                     "ttft_ms", r->request && r->ttft_ms >= 0 ? json_real(r->ttft_ms) : json_null(),
                     "prompt_ms", r->request && r->prompt_ms >= 0 ? json_real(r->prompt_ms) : json_null(),
                     "cache_n", r->request ? int_or_null(r->cache_n) : json_null(),
                     "cache_bytes", has_cb ? json_integer(cb) : json_null(), "note", r->note);
}

void rp_report_json(const rp_workload_report *w, int n, const rp_opts *o) {
    json_t *arr = json_array();
    for (int i = 0; i < n; i++) {
        long ev, mn, ex;
        rp_report_sums(&w[i], &ev, &mn, &ex);
        json_t *rows = json_array();
        for (int k = 0; k < w[i].n_rows; k++) json_array_append_new(rows, row_json(&w[i].rows[k]));
        json_array_append_new(arr, json_pack("{s:s, s:s, s:b, s:I, s:I, s:I, s:o}", "workload", w[i].name, "setup",
                                             w[i].setup, "failed", w[i].failed, "evaluated", (json_int_t)ev,
                                             "minimum", (json_int_t)mn, "excess", (json_int_t)ex, "requests", rows));
    }
    json_t *top = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:s, s:o}", "server", o->server, "model", o->model,
                            "system_tokens", o->system_tokens, "n_predict", o->n_predict, "seed", (int)o->seed,
                            "think_ms", o->think_ms,
                            "ttft", "client side: request sent to the first streamed byte", "workloads", arr);
    if (top) json_dumpf(top, stdout, JSON_INDENT(2));
    printf("\n");
    json_decref(top);
}
