/* cli.h — recur-cli's options, shared by its two files. */
#ifndef RECUR_TOOLS_CLI_H
#define RECUR_TOOLS_CLI_H

#include <stdbool.h>

#include "recur.h"

#include "default_model.h"
#define CLI_MAX_BIAS  64

typedef struct cli_opts {
    const char   *model;
    const char   *prompt;
    const char   *prompt_tokens;
    const char   *logits_out;
    const char   *greedy_out;
    int           n_predict;
    int           n_ctx, n_batch, n_ubatch, n_threads;
    uint32_t      q8_order;            /* recur_q8_order */
    bool          interactive, ignore_eos, quiet;
    recur_sampler_params sp;           /* sp.logit_bias points at bias */
    recur_logit_bias     bias[CLI_MAX_BIAS];
    int                  n_bias;
} cli_opts;

/* Tokenizes text into a malloc'd array; returns the count or -1. */
int tokenize_alloc(const recur_model *m, const char *text, bool add_special, recur_token **out);

/* Prints what is running, and a warning when the model has random weights. */
void cli_banner(const recur_model *m, const cli_opts *o);
/* Evaluates the prompt, generates, and (with -i) continues with lines from stdin. */
int cli_run(recur_model *m, const cli_opts *o, const recur_token *prompt, int n_prompt);

#endif
