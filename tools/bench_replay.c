/* bench_replay.c — `recur-bench replay`: runs scripted chat workloads against a recur-server it
 * starts itself, and prints per request the prompt tokens the server evaluated (timings.prompt_n)
 * against the fewest it could have (bench_replay.h, invariant 2), TTFT, cache_n and the prompt
 * cache's size from /metrics.
 *
 *   recur-bench replay --server build/recur-server -m model.gguf [--workload append|...|all]
 *
 * Every workload gets a fresh server (its -np, and --slot-save-path for restart), so that one
 * workload's cache never helps the next. */
#include <curl/curl.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_replay.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: recur-bench replay --server PATH -m MODEL [options]\n"
        "Starts PATH (a recur-server) and drives it through scripted chat workloads; prints per request\n"
        "the prompt tokens evaluated vs the fewest possible (the tokens after the true divergence point).\n"
        "  --server PATH          the recur-server binary\n"
        "  -m, --model FILE       the model it serves\n"
        "  --server-arg ARG       one more argument for the server (repeatable; one argv element each,\n"
        "                         e.g. --server-arg -t --server-arg 2); they come last, so they override\n"
        "  --port P               the server's port (default 0: any free port)\n"
        "  --workload W           append, regenerate, edit-last, edit-earlier, strip-reasoning, agents,\n"
        "                         restart, or all (default all)\n"
        "  --system-tokens N      tokens of the shared system prompt (default 3000)\n"
        "  --turns N              user turns of append (default 10)\n"
        "  --n-predict N          tokens generated per request (default 16; temperature 0)\n"
        "  --seed N               seed of every request (default 42)\n"
        "  --ctx N                -c (context per slot) given to the server (default 8192)\n"
        "  --ready-timeout S      seconds to wait for the server's /health (default 120)\n"
        "  --think-ms N           pause N ms before each request that follows a reply (a user reading\n"
        "                         and typing: the server's idle-time work, e.g. predicted replies, runs\n"
        "                         then; default 0, back to back)\n"
        "  --format md|json       output (default md)\n"
        "  -h, --help             this text\n");
}

static int parse_int(const char *flag, const char *v, int lo, int hi, int *out) {
    char *end;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "recur-bench replay: bad value '%s' for %s\n", v, flag);
        return 2;
    }
    *out = (int)x;
    return 0;
}

static int parse_args(int argc, char **argv, rp_opts *o) {
    *o = (rp_opts){ .workload = "all", .system_tokens = 3000, .n_predict = 16, .turns = 10, .ctx = 8192,
                    .seed = 42, .ready_s = 120 };
    int rc = 0, seed = 42;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 1; }
        if (!v) { fprintf(stderr, "recur-bench replay: unknown option or missing value '%s' (see --help)\n", a); return 2; }
        i++;
        if (!strcmp(a, "--format")) {
            if (strcmp(v, "md") && strcmp(v, "json")) { fprintf(stderr, "recur-bench replay: --format md or json\n"); return 2; }
            o->json = !strcmp(v, "json");
        }
        else if (!strcmp(a, "--server")) o->server = v;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--server-arg")) {
            if (o->n_server_args == RP_MAX_SERVER_ARGS) { fprintf(stderr, "recur-bench replay: too many --server-arg\n"); return 2; }
            o->server_args[o->n_server_args++] = v;
        }
        else if (!strcmp(a, "--port")) rc = parse_int(a, v, 0, 65535, &o->port);
        else if (!strcmp(a, "--workload")) o->workload = v;
        else if (!strcmp(a, "--system-tokens")) rc = parse_int(a, v, 1, 1 << 20, &o->system_tokens);
        else if (!strcmp(a, "--turns")) rc = parse_int(a, v, 1, 1000, &o->turns);
        else if (!strcmp(a, "--n-predict")) rc = parse_int(a, v, 1, 1 << 16, &o->n_predict);
        else if (!strcmp(a, "--think-ms")) rc = parse_int(a, v, 0, 3600 * 1000, &o->think_ms);
        else if (!strcmp(a, "--seed")) { rc = parse_int(a, v, 0, 1 << 30, &seed); o->seed = (uint32_t)seed; }
        else if (!strcmp(a, "--ctx")) rc = parse_int(a, v, 16, 1 << 24, &o->ctx);
        else if (!strcmp(a, "--ready-timeout")) rc = parse_int(a, v, 1, 86400, &o->ready_s);
        else { fprintf(stderr, "recur-bench replay: unknown option '%s' (see --help)\n", a); return 2; }
    }
    if (rc) return rc;
    if (!o->server || !o->model) { fprintf(stderr, "recur-bench replay: --server PATH and -m MODEL are needed\n"); return 2; }
    bool known = !strcmp(o->workload, "all");
    for (int i = 0; i < rp_n_workloads; i++) known = known || !strcmp(o->workload, rp_workloads[i].name);
    if (!known) { fprintf(stderr, "recur-bench replay: unknown workload '%s' (see --help)\n", o->workload); return 2; }
    return 0;
}

/* ---- tokens --------------------------------------------------------------------------------- */

static int json_tokens(const json_t *arr, int32_t **toks, int *n) {
    size_t k = json_array_size(arr), i;
    *toks = malloc((k ? k : 1) * sizeof **toks);
    if (!*toks) return 1;
    const json_t *el;
    json_array_foreach(arr, i, el) (*toks)[i] = (int32_t)json_integer_value(json_is_object(el) ? json_object_get(el, "id") : el);
    *n = (int)k;
    return 0;
}

/* The texts of the specials /tokenize adds with add_special (BOS before, EOS after), from the
 * difference between tokenizing "x" with and without it. */
static int probe_specials(rp_run *r, char *err, size_t err_len) {
    json_t *res[2] = { NULL, NULL };
    for (int k = 0; k < 2; k++) {
        json_t *req = json_pack("{s:s, s:b, s:b}", "content", "x", "add_special", k, "with_pieces", 1);
        long st;
        int rc = rp_post_json(&r->srv, "/tokenize", req, &st, &res[k], err, err_len);
        json_decref(req);
        if (rc) { json_decref(res[0]); json_decref(res[1]); return 1; }
    }
    const json_t *a = json_object_get(res[0], "tokens"), *b = json_object_get(res[1], "tokens");
    const size_t na = json_array_size(a), nb = json_array_size(b);
    const json_t *first = json_array_get(b, 0), *last = json_array_get(b, nb - 1);
    const bool bos = nb > na && json_integer_value(json_object_get(first, "id")) !=
                                json_integer_value(json_object_get(json_array_get(a, 0), "id"));
    const bool eos = nb > na + bos;
    if (bos && json_is_string(json_object_get(first, "piece"))) r->bos = strdup(json_string_value(json_object_get(first, "piece")));
    if (eos && json_is_string(json_object_get(last, "piece"))) r->eos = strdup(json_string_value(json_object_get(last, "piece")));
    json_decref(res[0]);
    json_decref(res[1]);
    return 0;
}

/* The server tokenizes a chat prompt (srv_chat_prompt -> chat_apply) as /tokenize does with
 * add_special and parse_special on, after cutting a BOS text at the start and an EOS text at
 * the end when the tokenizer adds those tokens itself (so that they are not doubled). We do the
 * same to the text /apply-template renders for the same body: the same tokens, which the row
 * checks against the server's usage.prompt_tokens. (Sending the tokens to /completion instead
 * would be exact by construction, but a chat request is what clients send, and the server may
 * place its cache checkpoints at the message boundaries only a chat request carries.) */
int rp_prompt_tokens(rp_run *r, const json_t *req, int32_t **toks, int *n, char **text, char *err, size_t err_len) {
    long st;
    json_t *res = NULL;
    *toks = NULL;
    *text = NULL;
    if (rp_post_json(&r->srv, "/apply-template", req, &st, &res, err, err_len)) { json_decref(res); return 1; }
    const char *p = json_string_value(json_object_get(res, "prompt"));
    if (!p) { json_decref(res); snprintf(err, err_len, "/apply-template: no prompt"); return 1; }
    *text = strdup(p);
    size_t b = 0, e = strlen(p);
    if (r->bos && !strncmp(p, r->bos, strlen(r->bos))) b = strlen(r->bos);
    if (r->eos && e - b >= strlen(r->eos) && !strcmp(p + e - strlen(r->eos), r->eos)) e -= strlen(r->eos);
    json_t *treq = json_pack("{s:s%, s:b, s:b}", "content", p + b, e - b, "add_special", 1, "parse_special", 1);
    json_decref(res);
    res = NULL;
    int rc = rp_post_json(&r->srv, "/tokenize", treq, &st, &res, err, err_len);
    json_decref(treq);
    if (!rc) rc = json_tokens(json_object_get(res, "tokens"), toks, n);
    json_decref(res);
    return rc;
}

/* ---- history: what the server evaluated -------------------------------------------------------- */

static int hist_lcp(const rp_run *r, const int32_t *t, int n) {
    int best = 0;
    for (int h = 0; h < r->n_hist; h++) {
        const rp_seq *s = &r->hist[h];
        int i = 0;
        while (i < n && i < s->n && s->t[i] == t[i]) i++;
        if (i > best) best = i;
    }
    return best;
}

static void hist_add(rp_run *r, const int32_t *prompt, int n, const int32_t *gen, int n_gen) {
    if (r->n_hist == r->cap_hist) {
        int cap = r->cap_hist ? r->cap_hist * 2 : 16;
        rp_seq *nh = realloc(r->hist, (size_t)cap * sizeof *nh);
        if (!nh) return;   /* the minimum is then larger than it could be: never smaller */
        r->hist = nh;
        r->cap_hist = cap;
    }
    rp_seq s = { malloc((size_t)(n + n_gen + 1) * sizeof *s.t), n + n_gen };
    if (!s.t) return;
    memcpy(s.t, prompt, (size_t)n * sizeof *s.t);
    if (n_gen > 0) memcpy(s.t + n, gen, (size_t)n_gen * sizeof *s.t);
    r->hist[r->n_hist++] = s;
}

/* ---- rows ----------------------------------------------------------------------------------- */

/* recur:cache_bytes from /metrics, or "-" (the prompt cache is not there yet, or no metrics). */
static void cache_bytes(rp_run *r, char *out, size_t len) {
    long st;
    char *body = NULL, err[128];
    snprintf(out, len, "-");
    if (!r->srv.pid) return;
    if (rp_http(&r->srv, "GET", "/metrics", NULL, &st, &body, err, sizeof err) || st != 200) { free(body); return; }
    for (char *line = body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, "recur:cache_bytes", 17) || (line[17] != ' ' && line[17] != '{')) continue;
        const char *v = strchr(line + 17, ' ');
        if (v) snprintf(out, len, "%.*s", (int)strcspn(v + 1, " \n"), v + 1);
        break;
    }
    free(body);
}

void rp_action(rp_run *r, const char *step, const char *fmt, ...) {
    rp_row *row = rp_report_row(r->rep);
    if (!row) return;
    row->request = false;
    snprintf(row->step, sizeof row->step, "%s", step);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(row->note, sizeof row->note, fmt, ap);
    va_end(ap);
    cache_bytes(r, row->cache_bytes, sizeof row->cache_bytes);
}

static void vnote(rp_row *row, const char *fmt, va_list ap) {
    size_t n = strlen(row->note);
    if (n && n + 2 < sizeof row->note) { strcpy(row->note + n, "; "); n += 2; }
    vsnprintf(row->note + n, sizeof row->note - n, fmt, ap);
}

static void note(rp_row *row, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(rp_row *row, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vnote(row, fmt, ap);
    va_end(ap);
}

void rp_note(rp_run *r, const char *fmt, ...) {
    if (!r->rep->n_rows) return;
    va_list ap;
    va_start(ap, fmt);
    vnote(&r->rep->rows[r->rep->n_rows - 1], fmt, ap);
    va_end(ap);
}

static json_t *chat_request(const rp_run *r, json_t *messages) {
    return json_pack("{s:O, s:i, s:f, s:i, s:b, s:{s:b}, s:b, s:i}", "messages", messages, "n_predict",
                     r->o->n_predict, "temperature", 0.0, "seed", (int)r->o->seed, "stream", 1, "stream_options",
                     "include_usage", 1, "logprobs", 1, "top_logprobs", 1);
}

/* The reply as the assistant message a chat client appends. */
static void append_reply(json_t *messages, const rp_reply *rep, bool keep_reasoning) {
    json_t *m = json_pack("{s:s, s:s}", "role", "assistant", "content", rep->content);
    if (keep_reasoning && rep->reasoning[0]) json_object_set_new(m, "reasoning_content", json_string(rep->reasoning));
    json_array_append_new(messages, m);
}

/* Fills row from a finished reply, and records what the server evaluated. */
static void measured(rp_run *r, rp_row *row, const rp_reply *rep, const int32_t *toks, int n) {
    row->n_prompt_server = rep->usage_prompt;
    row->evaluated = rep->prompt_n;
    row->cache_n = rep->cache_n;
    row->ttft_ms = rep->ttft_ms;
    row->prompt_ms = rep->prompt_ms;
    if (rep->usage_prompt >= 0 && rep->usage_prompt != n)
        note(row, "prompt tokens: server %d, ours %d: the minimum is not exact", rep->usage_prompt, n);
    /* the last sampled token of a length-limited reply was never evaluated (invariant 2) */
    int n_gen = rep->n_tokens - (!strcmp(rep->finish, "length") && rep->n_tokens > 0);
    if (rep->n_tokens == 0 && (rep->content[0] || rep->reasoning[0])) note(row, "no token ids came back (logprobs)");
    hist_add(r, toks, n, rep->tokens, n_gen);
    cache_bytes(r, row->cache_bytes, sizeof row->cache_bytes);
}

/* --think-ms before a request whose messages hold a reply already (not a conversation's first). */
static void think(const rp_run *r, json_t *messages) {
    if (r->o->think_ms <= 0) return;
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && !strcmp(role, "assistant")) {
            const struct timespec ts = { r->o->think_ms / 1000, (long)(r->o->think_ms % 1000) * 1000000L };
            nanosleep(&ts, NULL);
            return;
        }
    }
}

int rp_turn(rp_run *r, json_t *messages, const char *step, bool keep_reasoning, rp_reply *reply) {
    char err[512];
    think(r, messages);
    rp_row *row = rp_report_row(r->rep);
    if (!row) return 1;
    *row = (rp_row){ .request = true, .n_prompt_server = -1, .evaluated = -1, .cache_n = -1, .minimum = -1,
                     .ttft_ms = -1, .prompt_ms = -1 };
    snprintf(row->step, sizeof row->step, "%s", step);
    snprintf(row->cache_bytes, sizeof row->cache_bytes, "-");
    json_t *req = chat_request(r, messages);
    int32_t *toks = NULL;
    int n = 0, rc = 1;
    char *text = NULL;
    rp_reply rep = {0};
    if (!req) {
        note(row, "out of memory");
    } else if (rp_prompt_tokens(r, req, &toks, &n, &text, err, sizeof err)) {
        note(row, "tokens: %s", err);
    } else {
        row->n_prompt = n;
        row->minimum = n - hist_lcp(r, toks, n);
        if (rp_chat_stream(&r->srv, req, &rep, err, sizeof err)) {
            char tail[256];
            rp_server_log_tail(&r->srv, tail, sizeof tail);
            note(row, "%s%s%s", err, tail[0] ? " | server: " : "", tail);
        } else {
            measured(r, row, &rep, toks, n);
            append_reply(messages, &rep, keep_reasoning);
            rc = 0;
        }
    }
    if (rc) r->rep->failed = true;
    if (reply && !rc) *reply = rep;
    else rp_reply_free(&rep);
    json_decref(req);
    free(toks);
    free(text);
    return rc;
}

int rp_restart(rp_run *r) {
    char err[512];
    rp_server_stop(&r->srv);
    if (rp_server_start(&r->srv, r->o, r->n_slots, r->slot_save, err, sizeof err)) {
        rp_action(r, "restart", "the server did not come back: %s", err);
        r->rep->failed = true;
        return 1;
    }
    rp_action(r, "restart", "SIGTERM, then started again with the same arguments");
    return 0;
}

/* ---- the run -------------------------------------------------------------------------------- */

static void run_free(rp_run *r) {
    rp_server_stop(&r->srv);
    for (int i = 0; i < r->n_hist; i++) free(r->hist[i].t);
    free(r->hist);
    free(r->bos);
    free(r->eos);
    free(r->system);
}

static void run_workload(const rp_opts *o, const rp_workload *w, rp_workload_report *rep, const char *dir) {
    char err[512];
    rp_run r = { .o = o, .n_slots = w->n_slots, .slot_save = w->slot_save, .rep = rep };
    snprintf(r.srv.dir, sizeof r.srv.dir, "%s", dir);
    snprintf(r.srv.name, sizeof r.srv.name, "%s", w->name);
    snprintf(rep->name, sizeof rep->name, "%s", w->name);
    snprintf(rep->setup, sizeof rep->setup, "-np %d, -c %d, system prompt %d tokens, n_predict %d%s", w->n_slots,
             o->ctx, o->system_tokens, o->n_predict, w->slot_save ? ", --slot-save-path" : "");
    if (o->think_ms) {
        const size_t len = strlen(rep->setup);
        snprintf(rep->setup + len, sizeof rep->setup - len, ", think %d ms", o->think_ms);
    }
    if (o->n_server_args) {
        size_t len = strlen(rep->setup);
        for (int i = 0; i < o->n_server_args && len + 2 < sizeof rep->setup; i++)
            len += (size_t)snprintf(rep->setup + len, sizeof rep->setup - len, "%s%s", i ? " " : ", server args: ", o->server_args[i]);
    }
    if (rp_server_start(&r.srv, o, w->n_slots, w->slot_save, err, sizeof err) || probe_specials(&r, err, sizeof err) ||
        !(r.system = rp_system_text(&r, o->system_tokens, err, sizeof err))) {
        rp_action(&r, "start", "%s", err);
        rep->failed = true;
    } else {
        fprintf(stderr, "recur-bench replay: %s (%s)\n", w->name, r.srv.url);
        w->run(&r);
    }
    run_free(&r);
}

int bench_replay_main(int argc, char **argv) {
    rp_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) { fprintf(stderr, "recur-bench replay: curl_global_init failed\n"); return 1; }
    const char *tmp = getenv("TMPDIR");
    char dir[256];
    snprintf(dir, sizeof dir, "%s/recur-replay-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) { perror("recur-bench replay: mkdtemp"); return 1; }
    rp_workload_report *reps = calloc((size_t)rp_n_workloads, sizeof *reps);
    if (!reps) return 1;
    int n = 0;
    bool failed = false;
    for (int i = 0; i < rp_n_workloads; i++) {
        if (strcmp(o.workload, "all") && strcmp(o.workload, rp_workloads[i].name)) continue;
        run_workload(&o, &rp_workloads[i], &reps[n], dir);
        failed = failed || reps[n].failed;
        n++;
    }
    if (o.json) rp_report_json(reps, n, &o);
    else rp_report_md(reps, n);
    free(reps);
    /* the scratch folder: the servers' logs, what slot save wrote (kept when a run failed) */
    DIR *d = failed ? NULL : opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_type == DT_REG) unlink(path);
    }
    if (d) closedir(d);
    if (failed || rmdir(dir)) fprintf(stderr, "recur-bench replay: the servers' logs are in %s\n", dir);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
