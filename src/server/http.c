/* http.c — libmicrohttpd glue: the daemon, request bodies, CORS, the API key, the loading
 * gate and response helpers. Routing is srv_routes.c's job.
 *
 * libmicrohttpd runs one thread per connection, so a handler may block on its task's events;
 * it polls its socket between waits (srv_client_gone) to cancel the task of a client that left.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/err.h"
#include "server/srv.h"

/* Per-connection state of one request (libmicrohttpd's con_cls). */
typedef struct http_conn {
    char   *body;
    size_t  len, cap;
    bool    too_large;
} http_conn;

bool srv_client_gone(int fd) {
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

/* ---- responses ------------------------------------------------------------------------------ */

static void add_cors(struct MHD_Connection *c, struct MHD_Response *resp) {
    /* llama-server's default (--cors-origins "*" with credentials): echo the Origin */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", origin && *origin ? origin : "*");
    MHD_add_response_header(resp, "Server", "recur");
}

static int queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *resp) {
    if (!resp) return MHD_NO;
    add_cors(c, resp);
    enum MHD_Result rc = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static int reply_text(struct MHD_Connection *c, unsigned status, const char *ctype, const char *text, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    if (resp && ctype) MHD_add_response_header(resp, "Content-Type", ctype);
    return queue(c, status, resp);
}

int srv_reply_text(srv_req *r, unsigned status, const char *ctype, const char *text, size_t len) {
    return reply_text(r->conn, status, ctype, text, len);
}

static int reply_json_conn(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!s) return reply_text(c, 500, "text/plain", "out of memory", 13);
    int rc = reply_text(c, status, "application/json; charset=utf-8", s, strlen(s));
    free(s);
    return rc;
}

int srv_reply_json(srv_req *r, unsigned status, json_t *body) { return reply_json_conn(r->conn, status, body); }

const char *srv_error_type(unsigned status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 500: return "server_error";
    case 501: return "not_supported_error";
    case 503: return "unavailable_error";
    default:  return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

json_t *srv_error_json(unsigned status, const char *type, const char *message) {
    return json_pack("{s:{s:i, s:s, s:s}}", "error", "code", (int)status, "message", message ? message : "",
                     "type", type ? type : srv_error_type(status));
}

static int reply_error_conn(struct MHD_Connection *c, unsigned status, const char *type, const char *message) {
    return reply_json_conn(c, status, srv_error_json(status, type, message));
}

int srv_reply_error_type(srv_req *r, unsigned status, const char *type, const char *message) {
    return reply_error_conn(r->conn, status, type, message);
}

int srv_reply_error(srv_req *r, unsigned status, const char *message) {
    return reply_error_conn(r->conn, status, NULL, message);
}

/* ---- the API key ----------------------------------------------------------------------------- */

/* Equal strings, in a time that depends on the lengths only (no early exit on a mismatch). */
static bool const_time_eq(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b), n = la > lb ? la : lb;
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < n; i++) {
        unsigned char x = i < la ? (unsigned char)a[i] : 0, y = i < lb ? (unsigned char)b[i] : 0;
        diff |= x ^ y;
    }
    return diff == 0;
}

static bool authorized(const srv_server *s, struct MHD_Connection *c, const char *path) {
    if (s->o.n_api_keys == 0) return true;
    if (!strcmp(path, "/health") || !strcmp(path, "/v1/health")) return true;
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!key || !*key) key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    if (!key) return false;
    if (!strncmp(key, "Bearer ", 7)) key += 7;
    bool ok = false;
    for (int i = 0; i < s->o.n_api_keys; i++) ok |= const_time_eq(key, s->o.api_keys[i]);
    return ok;
}

/* ---- the access handler ------------------------------------------------------------------- */

static int preflight(struct MHD_Connection *c) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/html");
    MHD_add_response_header(resp, "Access-Control-Allow-Credentials", "true");
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers", "*");
    return queue(c, 200, resp);
}

/* Appends upload data; false once the body is over the limit. */
static bool body_append(http_conn *hc, const char *data, size_t n, size_t max) {
    if (hc->too_large || hc->len + n > max) { hc->too_large = true; return false; }
    if (hc->len + n + 1 > hc->cap) {
        size_t cap = hc->cap ? hc->cap : 4096;
        while (cap < hc->len + n + 1) cap *= 2;
        char *nb = realloc(hc->body, cap);
        if (!nb) { hc->too_large = true; return false; }
        hc->body = nb;
        hc->cap = cap;
    }
    memcpy(hc->body + hc->len, data, n);
    hc->len += n;
    hc->body[hc->len] = 0;
    return true;
}

static int too_large(struct MHD_Connection *c) {
    return reply_error_conn(c, 413, "invalid_request_error", "request body too large");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv_server *s = cls;
    http_conn *hc = *con_cls;
    if (!hc) {
        if (!(hc = calloc(1, sizeof *hc))) return MHD_NO;
        *con_cls = hc;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            hc->too_large = true;
            return (enum MHD_Result)too_large(c);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!hc->too_large && !body_append(hc, upload, *upload_size, s->o.max_body)) {
            *upload_size = 0;
            return (enum MHD_Result)too_large(c);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (hc->too_large) return MHD_YES;   /* the 413 is already queued */
    if (!strcmp(method, "OPTIONS")) return (enum MHD_Result)preflight(c);
    if (!atomic_load(&s->ready)) return (enum MHD_Result)reply_error_conn(c, 503, "unavailable_error", "Loading model");
    if (!authorized(s, c, url)) {
        fprintf(stderr, "recur-server: unauthorized: Invalid API Key (%s %s)\n", method, url);
        return (enum MHD_Result)reply_error_conn(c, 401, "authentication_error", "Invalid API Key");
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    srv_req r = { .s = s, .conn = c, .method = method, .path = url, .body = hc->body ? hc->body : "",
                  .body_len = hc->len, .fd = ci ? ci->connect_fd : -1 };
    return (enum MHD_Result)srv_route(&r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls; (void)c; (void)toe;
    http_conn *hc = *con_cls;
    if (hc) { free(hc->body); free(hc); }
    *con_cls = NULL;
}

/* ---- the daemon ------------------------------------------------------------------------------ */

recur_status srv_http_start(srv_server *s, char *err, size_t err_len) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->o.port);
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE }, *ai = NULL;
    int gai = getaddrinfo(s->o.host, port, &hints, &ai);
    if (gai) return rc_fail(err, err_len, RECUR_E_IO, "cannot resolve --host '%s': %s", s->o.host, gai_strerror(gai));
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)s->o.port, NULL, NULL, on_request, s,
                                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.timeout_s,
                                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) return rc_fail(err, err_len, RECUR_E_IO, "cannot listen on %s:%d (in use, or not allowed)", s->o.host, s->o.port);
    s->mhd = d;
    return RECUR_OK;
}

int srv_http_port(const srv_server *s) {
    const union MHD_DaemonInfo *di = s->mhd ? MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    return di ? di->port : s->o.port;
}

void srv_http_stop(srv_server *s) {
    pthread_rwlock_wrlock(&s->life);
    sched *sc = s->sched;
    s->sched = NULL;
    pthread_rwlock_unlock(&s->life);
    sched_free(sc);   /* every task gets its terminal event: blocked handlers return */
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
