/* bench_replay_http.c — recur-bench replay's two ends of the wire: the recur-server child
 * process (started with its log in a scratch folder, ready when /health answers 200, stopped
 * with SIGTERM) and a libcurl client for JSON requests and the SSE stream of a chat completion.
 *
 * TTFT is measured here, client side: from just before curl sends the request to the first
 * byte of the streamed body (recur-server sends its headers and the first chunk together, when
 * the first token is sampled). */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_replay.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* ---- the server process --------------------------------------------------------------------- */

void rp_server_log_tail(const rp_server *s, char *buf, size_t len) {
    buf[0] = 0;
    FILE *f = fopen(s->log, "r");
    if (!f) return;
    char all[8192];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof all - 1 ? size - (long)sizeof all + 1 : 0, SEEK_SET);
    size_t n = fread(all, 1, sizeof all - 1, f);
    fclose(f);
    all[n] = 0;
    /* the last 3 lines */
    int lines = 0;
    char *p = all + n;
    while (p > all && lines < 4) if (*--p == '\n') lines++;
    snprintf(buf, len, "%s", p + (*p == '\n'));
    for (char *q = buf; *q; q++) if (*q == '\n') *q = ' ';
    for (size_t k = strlen(buf); k > 0 && buf[k - 1] == ' '; k--) buf[k - 1] = 0;
}

/* The port printed in the log as "listening on http://HOST:PORT", 0 until then. */
static int log_port(const char *log) {
    FILE *f = fopen(log, "r");
    if (!f) return 0;
    char line[512];
    int port = 0;
    while (!port && fgets(line, sizeof line, f)) {
        const char *p = strstr(line, "listening on http://");
        const char *colon = p ? strrchr(p, ':') : NULL;
        if (colon) port = atoi(colon + 1);
    }
    fclose(f);
    return port;
}

static pid_t spawn(const char *const *argv, const char *log) {
    const pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* the child: its output to the log; SIGTERM when the bench dies, so no server is left */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); }
    execv(argv[0], (char *const *)argv);
    fprintf(stderr, "recur-bench replay: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Waits for the port in the log (port 0) and /health = 200, while the child lives. */
static int wait_ready(rp_server *s, int port, int timeout_s, char *err, size_t err_len) {
    const double t_end = now_ms() + 1e3 * timeout_s;
    for (;;) {
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            s->pid = 0;
            char tail[512];
            rp_server_log_tail(s, tail, sizeof tail);
            snprintf(err, err_len, "the server exited (status %d) before it was ready: %s",
                     WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), tail);
            return 1;
        }
        if (!s->port) s->port = port ? port : log_port(s->log);
        if (s->port) {
            snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d", s->port);
            long code = 0;
            char *body = NULL, e[128];
            rp_http(s, "GET", "/health", NULL, &code, &body, e, sizeof e);
            free(body);
            if (code == 200) return 0;
        }
        if (now_ms() > t_end) {
            snprintf(err, err_len, "the server was not ready after %d s (see %s)", timeout_s, s->log);
            return 1;
        }
        usleep(50 * 1000);
    }
}

int rp_server_start(rp_server *s, const rp_opts *o, int n_slots, bool slot_save, char *err, size_t err_len) {
    char port[16], np[16], ctx[16];
    const char *argv[RP_MAX_SERVER_ARGS + 20];
    int n = 0;
    snprintf(port, sizeof port, "%d", o->port);
    snprintf(np, sizeof np, "%d", n_slots);
    snprintf(ctx, sizeof ctx, "%d", o->ctx);
    argv[n++] = o->server;
    argv[n++] = "-m"; argv[n++] = o->model;
    argv[n++] = "--port"; argv[n++] = port;
    argv[n++] = "--metrics";
    argv[n++] = "-np"; argv[n++] = np;
    argv[n++] = "-c"; argv[n++] = ctx;
    if (slot_save) { argv[n++] = "--slot-save-path"; argv[n++] = s->dir; }
    for (int i = 0; i < o->n_server_args; i++) argv[n++] = o->server_args[i];
    argv[n] = NULL;
    snprintf(s->log, sizeof s->log, "%.200s/%.31s-%d.log", s->dir, s->name, ++s->n_starts);
    if (!s->curl && !(s->curl = curl_easy_init())) {
        snprintf(err, err_len, "curl_easy_init failed");
        return 1;
    }
    s->port = 0;
    s->pid = spawn(argv, s->log);
    if (s->pid < 0) {
        s->pid = 0;
        snprintf(err, err_len, "fork: %s", strerror(errno));
        return 1;
    }
    if (wait_ready(s, o->port, o->ready_s, err, err_len)) {
        rp_server_stop(s);
        return 1;
    }
    return 0;
}

void rp_server_stop(rp_server *s) {
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status;
        bool gone = false;
        for (int i = 0; i < 200 && !gone; i++) {
            gone = waitpid(s->pid, &status, WNOHANG) == s->pid;
            if (!gone) usleep(50 * 1000);
        }
        if (!gone) {
            fprintf(stderr, "recur-bench replay: the server did not stop in 10 s after SIGTERM: SIGKILL\n");
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
        }
        s->pid = 0;
    }
    if (s->curl) curl_easy_cleanup(s->curl);
    s->curl = NULL;
}

/* ---- plain requests ------------------------------------------------------------------------- */

typedef struct rp_buf {
    char  *p;
    size_t n, cap;
    bool   oom;
} rp_buf;

static void buf_add(rp_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = true; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *cls) {
    buf_add(cls, data, size * nmemb);
    return ((rp_buf *)cls)->oom ? 0 : size * nmemb;
}

/* The common options of a request on s's handle. */
static void setup(rp_server *s, const char *method, const char *path, const char *body, struct curl_slist *hdr) {
    CURL *c = s->curl;
    char url[512];
    snprintf(url, sizeof url, "%s%s", s->url, path);
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 3600L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    if (strcmp(method, "GET") && strcmp(method, "POST")) curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
}

int rp_http(rp_server *s, const char *method, const char *path, const char *body, long *status, char **resp,
            char *err, size_t err_len) {
    *status = 0;
    *resp = NULL;
    if (!s->curl || !s->url[0]) {
        snprintf(err, err_len, "no server");
        return 1;
    }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    rp_buf b = {0};
    setup(s, method, path, body, hdr);
    curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &b);
    CURLcode rc = curl_easy_perform(s->curl);
    curl_slist_free_all(hdr);
    if (rc != CURLE_OK) {
        snprintf(err, err_len, "%s %s: %s", method, path, curl_easy_strerror(rc));
        free(b.p);
        return 1;
    }
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, status);
    *resp = b.p ? b.p : strdup("");
    return 0;
}

int rp_post_json(rp_server *s, const char *path, const json_t *req, long *status, json_t **resp, char *err,
                 size_t err_len) {
    *resp = NULL;
    char *body = json_dumps(req, JSON_COMPACT), *text = NULL;
    if (!body) { snprintf(err, err_len, "out of memory"); return 1; }
    int rc = rp_http(s, "POST", path, body, status, &text, err, err_len);
    free(body);
    if (rc) return 1;
    *resp = json_loads(text, 0, NULL);
    if (*status != 200) {
        const char *msg = json_string_value(json_object_get(json_object_get(*resp, "error"), "message"));
        snprintf(err, err_len, "HTTP %ld %.160s", *status, msg ? msg : text);
    }
    free(text);
    return *status == 200 ? 0 : 1;
}

/* ---- the chat stream ------------------------------------------------------------------------ */

typedef struct sse_state {
    rp_reply *out;
    rp_buf    raw;               /* bytes not yet split into events */
    rp_buf    content, reasoning;
    double    t0;
    bool      first, done, oom;
    int       cap_tokens;
} sse_state;

static void add_token(sse_state *st, int32_t id) {
    rp_reply *o = st->out;
    if (o->n_tokens == st->cap_tokens) {
        int cap = st->cap_tokens ? st->cap_tokens * 2 : 64;
        int32_t *nt = realloc(o->tokens, (size_t)cap * sizeof *nt);
        if (!nt) { st->oom = true; return; }
        o->tokens = nt;
        st->cap_tokens = cap;
    }
    o->tokens[o->n_tokens++] = id;
}

/* One `data: {...}` event of an OAI chat stream. */
static void on_event(sse_state *st, const char *data) {
    rp_reply *o = st->out;
    if (!strcmp(data, "[DONE]")) { st->done = true; return; }
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    const json_t *e = json_object_get(j, "error");
    if (e) {
        const char *msg = json_string_value(json_object_get(e, "message"));
        snprintf(o->error, sizeof o->error, "%s", msg ? msg : "error event");
    }
    const json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    const json_t *d = json_object_get(ch, "delta");
    const char *c = json_string_value(json_object_get(d, "content")), *r = json_string_value(json_object_get(d, "reasoning_content"));
    if (c) buf_add(&st->content, c, strlen(c));
    if (r) buf_add(&st->reasoning, r, strlen(r));
    size_t i;
    const json_t *lp;
    json_array_foreach(json_object_get(json_object_get(ch, "logprobs"), "content"), i, lp)
        add_token(st, (int32_t)json_integer_value(json_object_get(lp, "id")));
    const char *fin = json_string_value(json_object_get(ch, "finish_reason"));
    if (fin) snprintf(o->finish, sizeof o->finish, "%s", fin);
    const json_t *u = json_object_get(j, "usage"), *t = json_object_get(j, "timings");
    if (u) o->usage_prompt = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    if (t) {
        o->prompt_n = (int)json_integer_value(json_object_get(t, "prompt_n"));
        o->cache_n = (int)json_integer_value(json_object_get(t, "cache_n"));
        o->prompt_ms = json_number_value(json_object_get(t, "prompt_ms"));
    }
    json_decref(j);
}

static size_t on_stream(char *data, size_t size, size_t nmemb, void *cls) {
    sse_state *st = cls;
    const size_t n = size * nmemb;
    if (!st->first && n) {
        st->first = true;
        st->out->ttft_ms = now_ms() - st->t0;
    }
    buf_add(&st->raw, data, n);
    if (st->raw.oom) return 0;
    /* events end with a blank line; `:` comment lines (keep-alive pings) are skipped */
    char *end;
    while (st->raw.p && (end = strstr(st->raw.p, "\n\n"))) {
        *end = 0;
        if (!strncmp(st->raw.p, "data: ", 6)) on_event(st, st->raw.p + 6);
        const size_t used = (size_t)(end + 2 - st->raw.p);
        memmove(st->raw.p, end + 2, st->raw.n - used + 1);
        st->raw.n -= used;
    }
    return st->oom || st->content.oom || st->reasoning.oom ? 0 : n;
}

int rp_chat_stream(rp_server *s, const json_t *req, rp_reply *out, char *err, size_t err_len) {
    *out = (rp_reply){ .usage_prompt = -1, .prompt_n = -1, .cache_n = -1, .ttft_ms = -1 };
    if (!s->curl) { snprintf(err, err_len, "no server"); return 1; }
    char *body = json_dumps(req, JSON_COMPACT);
    if (!body) { snprintf(err, err_len, "out of memory"); return 1; }
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    sse_state st = { .out = out };
    setup(s, "POST", "/v1/chat/completions", body, hdr);
    curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_stream);
    curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &st);
    st.t0 = now_ms();
    CURLcode rc = curl_easy_perform(s->curl);
    curl_slist_free_all(hdr);
    free(body);
    curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &out->status);
    out->content = st.content.p ? st.content.p : strdup("");
    out->reasoning = st.reasoning.p ? st.reasoning.p : strdup("");
    int fail = 0;
    if (rc != CURLE_OK) {
        snprintf(err, err_len, "chat request: %s", curl_easy_strerror(rc));
        fail = 1;
    } else if (out->status != 200) {
        /* an error before the first chunk is a plain JSON answer */
        json_t *j = st.raw.p ? json_loads(st.raw.p, 0, NULL) : NULL;
        const char *msg = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        snprintf(err, err_len, "HTTP %ld %.160s", out->status, msg ? msg : st.raw.p ? st.raw.p : "");
        json_decref(j);
        fail = 1;
    } else if (out->error[0]) {
        snprintf(err, err_len, "error event: %s", out->error);
        fail = 1;
    } else if (!st.done || out->prompt_n < 0) {
        snprintf(err, err_len, "the stream ended without [DONE] or timings");
        fail = 1;
    }
    free(st.raw.p);
    return fail;
}

void rp_reply_free(rp_reply *r) {
    if (!r) return;
    free(r->content);
    free(r->reasoning);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
