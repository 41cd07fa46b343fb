/* bench_replay.h — `recur-bench replay`: scripted multi-turn chat workloads against a
 * recur-server that the tool starts (and restarts) itself, measuring per request how many
 * prompt tokens the server evaluated against the fewest it could have.
 *
 *   bench_replay.c       options, the run of each workload, the per-request measurement
 *   bench_replay_http.c  libcurl client (JSON, SSE) and the server process (start, stop)
 *   bench_replay_work.c  the workloads (append, regenerate, edit-last, ...)
 *   bench_replay_out.c   md / json report
 *
 * Invariants:
 *  1. The prompt tokens of a request are the tokens the server evaluates for it: the chat
 *     request's messages rendered by the server's /apply-template, then tokenized by /tokenize
 *     exactly as the server tokenizes a chat prompt (see rp_prompt_tokens); the row shows the
 *     server's own prompt token count beside ours and flags any difference.
 *  2. The minimum of a request is n_prompt - the longest common prefix of its tokens with any
 *     token sequence the server evaluated before in this workload (restarts included): an
 *     earlier prompt followed by the generated tokens that were fed back (every returned token
 *     but the last when generation stopped on the length limit: that one was sampled, never
 *     evaluated). A prompt that is a prefix of one of them (an identical resend) has minimum 0.
 *  3. A server that is started is always stopped (SIGTERM, wait, then SIGKILL), on every path;
 *     its child also gets SIGTERM when this process dies (PR_SET_PDEATHSIG).
 */
#ifndef RECUR_TOOLS_BENCH_REPLAY_H
#define RECUR_TOOLS_BENCH_REPLAY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define RP_MAX_SERVER_ARGS 64
#define RP_MAX_ROWS        256

typedef struct rp_opts {
    const char *server;                          /* --server: the recur-server binary */
    const char *model;                           /* -m */
    const char *server_args[RP_MAX_SERVER_ARGS]; /* --server-arg, each one argv element */
    int         n_server_args;
    int         port;                            /* --port (0: any free port) */
    const char *workload;                        /* --workload NAME|all */
    int         system_tokens;                   /* --system-tokens */
    int         n_predict;                       /* --n-predict */
    int         turns;                           /* --turns: user turns of append */
    int         ctx;                             /* --ctx: -c given to the server */
    uint32_t    seed;                            /* --seed of every request */
    bool        json;                            /* --format json */
    int         ready_s;                         /* --ready-timeout: seconds to wait for /health */
    int         think_ms;                        /* --think-ms: pause before a follow-up request */
} rp_opts;

/* ---- bench_replay_http.c: the server process and the HTTP client ----------------------------- */

typedef struct rp_server {
    pid_t  pid;                  /* 0: not running */
    int    port;
    char   url[64];              /* http://127.0.0.1:PORT */
    char   dir[256];             /* scratch folder: the server's log, its --slot-save-path */
    char   name[32];             /* the workload: its logs are dir/NAME-N.log, N counting starts */
    char   log[320];
    int    n_starts;
    void  *curl;                 /* CURL * */
} rp_server;

/* Starts o->server -m o->model --port P --metrics -np n_slots -c o->ctx [--slot-save-path dir]
 * plus o->server_args (last, so they override), waits for /health = 200. s->dir must be set (an
 * existing folder). Returns 0, or 1 with err set (the server is then stopped). */
int  rp_server_start(rp_server *s, const rp_opts *o, int n_slots, bool slot_save, char *err, size_t err_len);
/* SIGTERM, waits up to 10 s, then SIGKILL. No-op when not running. */
void rp_server_stop(rp_server *s);
/* The last lines of the server's log, for error messages. */
void rp_server_log_tail(const rp_server *s, char *buf, size_t len);

/* One HTTP exchange. *status is the HTTP status (0: no answer, err says why); *body the
 * malloc'd response text (NUL-terminated). Returns 0 when an answer came. */
int rp_http(rp_server *s, const char *method, const char *path, const char *body, long *status, char **resp,
            char *err, size_t err_len);
/* POST of a JSON body; *resp the parsed answer (NULL when not JSON). Returns 0 on HTTP 200. */
int rp_post_json(rp_server *s, const char *path, const json_t *req, long *status, json_t **resp, char *err,
                 size_t err_len);

/* What a streamed chat completion gave. */
typedef struct rp_reply {
    long     status;             /* HTTP status */
    char    *content, *reasoning;
    int32_t *tokens;             /* generated token ids (from logprobs), in order */
    int      n_tokens;
    char     finish[16];
    int      usage_prompt;       /* usage.prompt_tokens, -1 absent */
    int      prompt_n, cache_n;  /* timings, -1 absent */
    double   prompt_ms;
    double   ttft_ms;            /* client side: request sent -> first streamed event */
    char     error[256];         /* an error answer or event */
} rp_reply;

/* POSTs req to /v1/chat/completions with stream on; fills out. Returns 0 when the stream ended
 * with a usage chunk and no error. */
int  rp_chat_stream(rp_server *s, const json_t *req, rp_reply *out, char *err, size_t err_len);
void rp_reply_free(rp_reply *r);

/* ---- bench_replay_out.c: the report -------------------------------------------------------- */

typedef struct rp_row {
    char   step[48];
    bool   request;              /* false: an action row (save, restart, ...) with only a note */
    int    n_prompt;             /* ours */
    int    n_prompt_server;      /* usage.prompt_tokens, -1 absent */
    int    evaluated, cache_n;   /* timings.prompt_n / cache_n, -1 absent */
    int    minimum;
    double ttft_ms, prompt_ms;
    char   cache_bytes[32];      /* recur:cache_bytes from /metrics, "-" when absent */
    char   note[200];
} rp_row;

typedef struct rp_workload_report {
    char   name[32];
    char   setup[160];           /* e.g. "-np 1, system prompt 3000 tokens" */
    rp_row rows[RP_MAX_ROWS];
    int    n_rows;
    bool   failed;
} rp_workload_report;

rp_row *rp_report_row(rp_workload_report *w);          /* a new zeroed row; NULL when full */
void    rp_report_md(const rp_workload_report *w, int n);
void    rp_report_json(const rp_workload_report *w, int n, const rp_opts *o);
/* Sums over the request rows: evaluated, minimum, excess (evaluated rows only). */
void    rp_report_sums(const rp_workload_report *w, long *evaluated, long *minimum, long *excess);

/* ---- bench_replay.c: one run of a workload ------------------------------------------------- */

typedef struct rp_seq {
    int32_t *t;
    int      n;
} rp_seq;

/* What a workload function works with. */
typedef struct rp_run {
    const rp_opts      *o;
    rp_server           srv;
    int                 n_slots;
    bool                slot_save;   /* the server gets --slot-save-path (restart) */
    rp_workload_report *rep;
    rp_seq             *hist;    /* evaluated sequences (invariant 2) */
    int                 n_hist, cap_hist;
    char               *bos, *eos;   /* texts of the specials the tokenizer adds (NULL: none) */
    char               *system;  /* the shared system prompt text */
} rp_run;

/* Sends messages as one chat turn (step names the row), measures it, and appends the
 * assistant's reply to messages (with reasoning_content when keep_reasoning and the server
 * split some). Returns 0, or 1 when the request failed (the row says why). reply may be NULL. */
int  rp_turn(rp_run *r, json_t *messages, const char *step, bool keep_reasoning, rp_reply *reply);
/* Appends to the note of the last row. */
void rp_note(rp_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An action row (save, restart, ...) with a note. */
void rp_action(rp_run *r, const char *step, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Restarts the server (same arguments); 0 or 1 (the row says why). */
int  rp_restart(rp_run *r);
/* Prompt text -> the tokens the server evaluates for it (invariant 1). */
int  rp_prompt_tokens(rp_run *r, const json_t *req, int32_t **toks, int *n, char **text, char *err, size_t err_len);

/* ---- bench_replay_work.c: the workloads ---------------------------------------------------- */

typedef struct rp_workload {
    const char *name;
    int         n_slots;         /* -np of its server */
    bool        slot_save;       /* its server gets --slot-save-path */
    int       (*run)(rp_run *r);
} rp_workload;

extern const rp_workload rp_workloads[];
extern const int         rp_n_workloads;

/* Deterministic text (malloc'd): the system prompt of about n_tokens tokens of the server's
 * tokenizer, from a fixed word list (NULL with err set when the server cannot tokenize), and
 * user message k of a conversation (agent and variant change the words). */
char *rp_system_text(rp_run *r, int n_tokens, char *err, size_t err_len);
char *rp_user_text(int agent, int k, int variant);

#endif
