/* srv.h — recur-server's HTTP side: options, the shared server state, and what the request
 * handlers share (request parsing, generation, response formatting).
 *
 * Threads: libmicrohttpd runs one thread per connection; each handler parses its request,
 * submits a task to the scheduler (sched.h) and blocks on the task's events (task.h), checking
 * every SRV_POLL_MS that its client is still connected (a client that is gone cancels its task).
 *
 * Invariants:
 *  1. Before `ready` is true, every request but OPTIONS gets 503 "Loading model" (as
 *     llama-server). model, vocab, tmpl and sched are written once before ready is set and are
 *     read-only afterwards.
 *  2. Shutdown takes `life` for writing and clears sched; handlers hold it for reading around
 *     every sched_* call, so no handler ever calls into a freed scheduler.
 *  3. What handlers call on the shared model is reentrant: tokenizing and detokenizing are pure
 *     (vocab.h invariant 2) and a parsed Jinja template may be rendered from many threads at once
 *     (jinja.h invariant 1); no lock is needed for them.
 */
#ifndef RECUR_SERVER_SRV_H
#define RECUR_SERVER_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "chat/jinja.h"
#include "recur.h"
#include "server/sched.h"
#include "server/task.h"
#include "vocab/vocab.h"

#define SRV_POLL_MS 50               /* how often a waiting handler checks its client */
#define SRV_BUILD_INFO "b1-recur"    /* system_fingerprint and /props build_info ("b...") */

typedef enum srv_reasoning {
    SRV_REASONING_AUTO = 0,          /* = deepseek: <think> blocks go to reasoning_content */
    SRV_REASONING_NONE,              /* thoughts stay in content */
    SRV_REASONING_DEEPSEEK,
    SRV_REASONING_DEEPSEEK_LEGACY,   /* <think> kept in content, reasoning_content filled too */
} srv_reasoning;

/* Parses "auto" "none" "deepseek" "deepseek-legacy"; -1 when unknown. */
int srv_reasoning_parse(const char *s);

typedef struct srv_opts {
    const char  *host;               /* --host (127.0.0.1) */
    int          port;               /* --port (8080) */
    char       **api_keys;           /* --api-key / --api-key-file; none: no auth */
    int          n_api_keys;
    bool         metrics;            /* --metrics: GET /metrics */
    bool         slots;              /* GET /slots (off with --no-slots) */
    bool         jinja;              /* --jinja (on) */
    int          timeout_s;          /* --timeout: idle connection timeout */
    size_t       max_body;           /* request body limit in bytes */
    const char  *alias;              /* -a: the model id shown; NULL: the file name */
    const char  *model_path;
    /* request defaults (--temp, --top-k, --top-p, --min-p, --seed, -n) */
    recur_sampler_params sampling;
    bool         seed_random;        /* --seed -1 (default): each request draws a seed */
    int32_t      n_predict;
    srv_reasoning reasoning;         /* --reasoning-format */
    const char  *slot_save_path;     /* --slot-save-path DIR: POST /slots/{id}?action=...; NULL: off */
    char       **ban_strings;        /* --banned-string-file: banned in every request without its own */
    int          n_ban_strings;
    int32_t      banned_n;           /* --banned-n (1) */
} srv_opts;

typedef struct srv_server {
    srv_opts          o;
    atomic_bool       ready;         /* the model is loaded and the scheduler runs */
    recur_model      *model;
    const vocab      *vocab;
    jinja_template   *tmpl;          /* the chat template */
    char             *tmpl_src;
    sched            *sched;         /* NULL once shut down (under life) */
    pthread_rwlock_t  life;
    atomic_uint_fast64_t next_id;    /* task ids */
    time_t            created;
    void             *mhd;           /* struct MHD_Daemon */
} srv_server;

/* ---- http.c -------------------------------------------------------------------------------- */

/* Starts listening on o.host:o.port (requests get 503 until ready). s must stay valid until
 * srv_http_stop. RECUR_E_IO when the address cannot be bound. */
recur_status srv_http_start(srv_server *s, char *err, size_t err_len);
/* Stops the scheduler (every task ends, cancelled), then the HTTP daemon. */
void srv_http_stop(srv_server *s);
/* The port actually bound (useful with --port 0). */
int srv_http_port(const srv_server *s);

/* One request as the handlers see it. */
typedef struct srv_req {
    srv_server  *s;
    void        *conn;               /* struct MHD_Connection */
    const char  *method, *path;
    const char  *body;               /* NUL-terminated */
    size_t       body_len;
    int          fd;                 /* the client socket, for disconnect checks */
} srv_req;

/* True when the client has closed its side of the connection. */
bool srv_client_gone(int fd);

/* Responses (each returns the libmicrohttpd result of queueing it; CORS headers added). */
int srv_reply_json(srv_req *r, unsigned status, json_t *body);        /* steals body */
int srv_reply_text(srv_req *r, unsigned status, const char *ctype, const char *text, size_t len);
/* {"error":{"code","message","type"}} with the type llama-server uses for this status. */
int srv_reply_error(srv_req *r, unsigned status, const char *message);
int srv_reply_error_type(srv_req *r, unsigned status, const char *type, const char *message);
/* An SSE response reading from the stream (see srv_stream.c); takes ownership of st. */
struct srv_stream;
int srv_reply_stream(srv_req *r, struct srv_stream *st);

/* ---- srv_params.c: request fields --------------------------------------------------------- */

typedef enum srv_fmt {
    SRV_FMT_NATIVE = 0,              /* /completion */
    SRV_FMT_OAI_CMPL,                /* /v1/completions */
    SRV_FMT_OAI_CHAT,                /* /v1/chat/completions */
} srv_fmt;

/* What a generation request asks for besides the task params. */
typedef struct srv_gen_opts {
    srv_fmt       fmt;
    bool          stream;
    bool          include_usage;     /* stream_options.include_usage */
    bool          return_tokens;
    int32_t       n_probs;
    srv_reasoning reasoning;
    bool          think_open;        /* the chat prompt ends inside <think> */
    char          id[48];            /* chatcmpl-... / cmpl-... */
    time_t        created;
    char          model[256];
    char         *prompt_text;       /* native responses' "prompt" (malloc'd) */
    json_t       *settings;          /* native responses' generation_settings */
    json_t       *chat_body;         /* chat: the request (a reference), to predict the next turn */
} srv_gen_opts;

void srv_gen_opts_free(srv_gen_opts *g);

/* Fills t->params and g from the request body (server defaults for what is absent; null means
 * absent). RECUR_E_INVALID with a message for a wrongly typed or out-of-range field. */
recur_status srv_params_parse(srv_server *s, const json_t *body, srv_task *t, srv_gen_opts *g,
                              char *err, size_t err_len);

/* JSON helpers that check types: RECUR_E_INVALID ("Field 'x': ...") when present with the
 * wrong type; the value untouched when absent or null. */
recur_status srv_get_bool(const json_t *o, const char *k, bool *v, char *err, size_t err_len);
recur_status srv_get_int(const json_t *o, const char *k, int64_t *v, char *err, size_t err_len);
recur_status srv_get_num(const json_t *o, const char *k, double *v, char *err, size_t err_len);
recur_status srv_get_str(const json_t *o, const char *k, const char **v, char *err, size_t err_len);

/* Tokenizes text (malloc'd ids into *out). Returns the count, -1 on failure. */
int srv_tokenize(const srv_server *s, const char *text, size_t len, bool add_special, bool parse_special,
                 recur_token **out);
/* The text of tokens (detokenized as llama-server's /detokenize). malloc'd, NULL on failure. */
char *srv_detokenize(const srv_server *s, const recur_token *t, int n, size_t *len);
/* The piece of one token (special tokens rendered) into a malloc'd string. */
char *srv_piece(const srv_server *s, recur_token t, size_t *len);

/* ---- srv_gen.c: running a task and formatting its results --------------------------------- */

/* The next event of t, or NULL when the client (socket fd) went away: t is then cancelled. */
srv_event *srv_wait_event(srv_task *t, int fd);
/* A JSON string of text; invalid UTF-8 bytes become U+FFFD. */
json_t *srv_json_str(const char *text, size_t len);

/* Validates the prompt size, submits t and answers: streamed (SSE) or once the task is done.
 * Takes the reference on t and ownership of g's members. */
int srv_gen_run(srv_req *r, srv_task *t, srv_gen_opts *g);

/* llama-server's error type for an HTTP status. */
const char *srv_error_type(unsigned status);
/* The HTTP status for a failed task's status. */
unsigned srv_status_http(recur_status st);
json_t *srv_error_json(unsigned status, const char *type, const char *message);

/* Final results, and the pieces streaming uses. */
typedef struct srv_result {
    char        *text;               /* all generated text so far */
    size_t       len, cap;
    recur_token *tokens;
    int32_t      n_tokens, cap_tokens;
    json_t      *probs;              /* completion_probabilities entries, or NULL */
    srv_stats    stats;
    int32_t      n_prompt;
} srv_result;

void    srv_result_free(srv_result *res);
/* Appends an event's text, token and probabilities. false when out of memory. */
bool    srv_result_add(srv_server *s, srv_result *res, const srv_event *ev, bool want_probs);
json_t *srv_probs_json(srv_server *s, const srv_token_probs *p);
json_t *srv_timings_json(const srv_stats *st);
json_t *srv_usage_json(const srv_result *res);
const char *srv_finish_reason(srv_stop_type st);
/* The native final object; content is what to put in "content" (all text, or the stream's
 * last piece). */
json_t *srv_native_final(srv_server *s, const srv_gen_opts *g, const srv_result *res, const char *content,
                         size_t content_len, bool with_probs);

/* ---- srv_stream.c ------------------------------------------------------------------------- */

/* A stream over t (whose first event was already taken). On success it owns t's reference, g's
 * members and first; NULL (out of memory) takes nothing. */
struct srv_stream *srv_stream_new(srv_server *s, srv_task *t, srv_gen_opts *g, srv_event *first, int fd);

/* ---- srv_chat.c: messages -> prompt, reasoning split -------------------------------------- */

/* Validates body.messages (and tools, chat_template_kwargs) and renders them into a prompt.
 * *status is the HTTP status on failure (400 bad messages, 500 template error). */
recur_status srv_chat_prompt(srv_server *s, const json_t *body, bool add_generation_prompt, char **text,
                             size_t *text_len, recur_token **tokens, int32_t *n_tokens, bool *think_open,
                             srv_task *hints, unsigned *status, char *err, size_t err_len);
/* The chat message of a finished generation ({role, content, reasoning_content?}). */
json_t *srv_chat_message(const srv_gen_opts *g, const char *text, size_t len);
/* After a chat response with this message text (before the client can see it): tells the
 * scheduler how the client will send the reply back (sched_submit_reply), so that a
 * checkpoint can be derived where that diverges from the generated tokens. No-op without
 * g->chat_body, when the request did not cache its prompt, or the task did not end normally. */
void srv_chat_reply_submit(srv_server *s, const srv_gen_opts *g, const srv_task *t, const srv_result *res);

/* Incremental reasoning/content split for streaming. */
typedef struct srv_split_state {
    size_t sent_reasoning, sent_content;
} srv_split_state;
/* The new reasoning and content deltas of text (all generated text so far; final = no more
 * text follows). Deltas are malloc'd (NULL when empty). */
void srv_chat_split_deltas(const srv_gen_opts *g, srv_split_state *st, const char *text, size_t len, bool final,
                           char **reasoning, char **content);

/* ---- srv_routes.c / srv_info.c: the endpoints ---------------------------------------------- */

int srv_route(srv_req *r);

/* body.prompt of /completion and /v1/completions into t->prompt / t->n_prompt, and *text (the
 * prompt as text, malloc'd; NULL when out of memory). *status is the HTTP status on failure
 * (400, or 501 for several prompts / multimodal data). */
recur_status srv_prompt_parse(srv_server *s, const json_t *body, srv_task *t, char **text, unsigned *status,
                              char *err, size_t err_len);

int srv_h_completion(srv_req *r, json_t *body, srv_fmt fmt);
int srv_h_chat(srv_req *r, json_t *body);
int srv_h_tokenize(srv_req *r, json_t *body);
int srv_h_detokenize(srv_req *r, json_t *body);
int srv_h_apply_template(srv_req *r, json_t *body);
int srv_h_health(srv_req *r);
int srv_h_models(srv_req *r);
int srv_h_props(srv_req *r);
int srv_h_slots(srv_req *r);
/* POST /slots/{id}?action=save|restore|erase (srv_slots.c); id_text is what follows "/slots/". */
int srv_h_slot_action(srv_req *r, const char *id_text);
int srv_h_metrics(srv_req *r);

/* The model id shown to clients (alias, or the model file's base name). */
const char *srv_model_name(const srv_server *s);

#endif
