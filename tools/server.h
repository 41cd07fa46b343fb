/* server.h — recur-server's options, shared by its two files. */
#ifndef RECUR_TOOLS_SERVER_H
#define RECUR_TOOLS_SERVER_H

#include <stdbool.h>
#include <stdio.h>

#include "recur.h"
#include "server/srv.h"

#include "default_model.h"

typedef struct server_args {
    const char *model, *alias, *host, *chat_template_file, *slot_save_path, *cache_dir;
    int         port, n_ctx, n_slots, n_threads, n_batch, n_ubatch, timeout_s;
    uint32_t    q8_order;     /* --q8-order (recur_q8_order) */
    char      **api_keys;
    int         n_api_keys;
    char      **ban_strings;       /* --banned-string-file */
    int         n_ban_strings, banned_n;
    bool        jinja, metrics, slots, cache_prompt;
    /* stored for the checkpoint / prompt cache issues */
    int         ctx_checkpoints, ctx_checkpoints_interval, cache_ram_mib;
    int         reasoning;         /* srv_reasoning */
    long long   seed;              /* -1: random per request */
    int         n_predict;
    recur_sampler_params sampling;
} server_args;

void server_args_default(server_args *a);
/* 0: run; 1: --help was printed (exit 0); 2: a bad flag (the message was printed). Unless 0,
 * nothing is left allocated. */
int  server_args_parse(int argc, char **argv, server_args *a);
void server_args_free(server_args *a);   /* the API keys and banned strings */
void server_usage(FILE *f);

#endif
