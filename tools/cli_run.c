/* cli_run.c — recur-cli's evaluation loop: prompt, generation, interactive turns, speeds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

typedef struct cli_state {
    recur_model   *m;
    recur_ctx     *ctx;
    recur_sampler *smp;
    recur_detok   *detok;
    const cli_opts *o;
    FILE          *logits_f, *greedy_f;
    recur_pos      n_past;
    /* timings (microseconds) and counts */
    int64_t        t_prompt_us, t_gen_us;
    int64_t        n_prompt_eval, n_gen;
    recur_token   *buf_tok;
    recur_pos     *buf_pos;
    recur_seq_id  *buf_seq;
    int8_t        *buf_out;
} cli_state;

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void cli_banner(const recur_model *m, const cli_opts *o) {
    char desc[256], name[256] = "";
    recur_model_desc(m, desc, sizeof desc);
    recur_model_meta_str(m, "general.name", name, sizeof name);
    fprintf(stderr, "recur-cli: %s\nrecur-cli: %s | cpu %s\n", o->model, desc, recur_cpu_isa());
    if (strstr(name, "random weights"))
        fprintf(stderr,
                "recur-cli: NOTE: this model has RANDOM weights (written by recur-gguf synth): its text is noise.\n"
                "recur-cli: Pass a real GGUF to get real text:  recur-cli -m path/to/model.gguf -p \"...\"\n");
}

/* Evaluates tokens [0, n) at positions n_past.. in batches of n_batch. When all_logits, every
 * row's logits go to the logits file; the last row's logits stay readable afterwards. */
static int eval_tokens(cli_state *s, const recur_token *toks, int n, bool all_logits) {
    const int nb = s->o->n_batch;
    char err[512];
    for (int i0 = 0; i0 < n; i0 += nb) {
        const int k = n - i0 < nb ? n - i0 : nb;
        for (int j = 0; j < k; j++) {
            s->buf_tok[j] = toks[i0 + j];
            s->buf_pos[j] = s->n_past + i0 + j;
            s->buf_seq[j] = 0;
            s->buf_out[j] = all_logits || i0 + j == n - 1;
        }
        recur_batch b = { k, s->buf_tok, s->buf_pos, s->buf_seq, s->buf_out };
        if (recur_decode(s->ctx, &b, err, sizeof err)) {
            fprintf(stderr, "recur-cli: %s\n", err);
            return 1;
        }
        if (all_logits && s->logits_f) {
            for (int j = 0; j < k; j++)
                fwrite(recur_get_logits(s->ctx, j), sizeof(float), (size_t)recur_model_n_vocab(s->m), s->logits_f);
        }
    }
    s->n_past += n;
    return 0;
}

static void emit(cli_state *s, recur_token t) {
    char out[1024];
    int n = recur_detok_push(s->detok, t, out, sizeof out);
    if (n > 0) fwrite(out, 1, (size_t)n, stdout);
    fflush(stdout);
}

/* Samples and evaluates up to n_predict tokens after the current logits. */
static int generate(cli_state *s, int32_t last_row) {
    const float *logits = recur_get_logits(s->ctx, last_row);
    for (int i = 0; i < s->o->n_predict; i++) {
        const recur_token t = recur_sampler_sample(s->smp, logits);
        recur_sampler_accept(s->smp, t);
        if (s->greedy_f) fprintf(s->greedy_f, "%d\n", t);
        if (!s->o->ignore_eos && recur_token_is_eog(s->m, t)) break;
        emit(s, t);
        const int64_t t0 = now_us();
        if (eval_tokens(s, &t, 1, false)) return 1;
        s->t_gen_us += now_us() - t0;
        s->n_gen++;
        logits = recur_get_logits(s->ctx, 0);
    }
    char out[64];
    int n = recur_detok_flush(s->detok, out, sizeof out);
    if (n > 0) fwrite(out, 1, (size_t)n, stdout);
    return 0;
}

static int prompt_and_generate(cli_state *s, const recur_token *toks, int n, bool all_logits) {
    const int64_t t0 = now_us();
    if (eval_tokens(s, toks, n, all_logits)) return 1;
    for (int i = 0; i < n; i++) recur_sampler_accept(s->smp, toks[i]);   /* the penalties see the prompt, as in llama-server */
    s->t_prompt_us += now_us() - t0;
    s->n_prompt_eval += n;
    const int last = (n - 1) % s->o->n_batch;
    return generate(s, last);
}

static int interactive_loop(cli_state *s) {
    char line[8192];
    for (;;) {
        fputs("\n> ", stdout);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) break;
        recur_token *ids = NULL;
        const int n = tokenize_alloc(s->m, line, false, &ids);
        if (n < 0) { fprintf(stderr, "recur-cli: cannot tokenize the input\n"); return 1; }
        int rc = n ? prompt_and_generate(s, ids, n, false) : 0;
        free(ids);
        if (rc) return rc;
    }
    return 0;
}

static void report(const cli_state *s) {
    if (s->o->quiet) return;
    const double tp = (double)s->t_prompt_us / 1e3, tg = (double)s->t_gen_us / 1e3;
    fprintf(stderr, "\nrecur-cli: prompt     %6lld tokens in %9.1f ms = %8.2f tokens/s\n",
            (long long)s->n_prompt_eval, tp, tp > 0 ? (double)s->n_prompt_eval * 1e3 / tp : 0.0);
    fprintf(stderr, "recur-cli: generation %6lld tokens in %9.1f ms = %8.2f tokens/s (%d threads)\n",
            (long long)s->n_gen, tg, tg > 0 ? (double)s->n_gen * 1e3 / tg : 0.0,
            recur_ctx_params_of(s->ctx)->n_threads);
}

static int open_outputs(cli_state *s) {
    if (s->o->logits_out && !(s->logits_f = fopen(s->o->logits_out, "wb"))) {
        perror(s->o->logits_out);
        return 1;
    }
    if (s->o->greedy_out && !(s->greedy_f = fopen(s->o->greedy_out, "w"))) {
        perror(s->o->greedy_out);
        return 1;
    }
    return 0;
}

static void close_state(cli_state *s) {
    if (s->logits_f) fclose(s->logits_f);
    if (s->greedy_f) fclose(s->greedy_f);
    recur_detok_free(s->detok);
    recur_sampler_free(s->smp);
    recur_ctx_free(s->ctx);
    free(s->buf_tok);
    free(s->buf_pos);
    free(s->buf_seq);
    free(s->buf_out);
}

int cli_run(recur_model *m, const cli_opts *o, const recur_token *prompt, int n_prompt) {
    if (n_prompt < 1) {
        fprintf(stderr, "recur-cli: the prompt is empty (give -p TEXT or --prompt-tokens IDS)\n");
        return 1;
    }
    for (int i = 0; i < o->n_bias; i++) {
        if (o->bias[i].token >= recur_model_n_vocab(m)) {
            fprintf(stderr, "recur-cli: --logit-bias token %d is outside the vocabulary (%d tokens)\n", o->bias[i].token,
                    recur_model_n_vocab(m));
            return 1;
        }
    }
    cli_state s = { .m = m, .o = o };
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = (uint32_t)o->n_ctx;
    cp.n_batch = (uint32_t)o->n_batch;
    cp.n_ubatch = (uint32_t)o->n_ubatch;
    cp.n_threads = o->n_threads;
    cp.q8_order = o->q8_order;
    char err[512];
    int rc = 1;
    s.buf_tok = malloc((size_t)o->n_batch * sizeof *s.buf_tok);
    s.buf_pos = malloc((size_t)o->n_batch * sizeof *s.buf_pos);
    s.buf_seq = malloc((size_t)o->n_batch * sizeof *s.buf_seq);
    s.buf_out = malloc((size_t)o->n_batch);
    if (recur_ctx_new(m, &cp, &s.ctx, err, sizeof err)) {
        fprintf(stderr, "recur-cli: %s\n", err);
    } else if (!s.buf_tok || !s.buf_pos || !s.buf_seq || !s.buf_out ||
               !(s.smp = recur_sampler_new(&o->sp, recur_model_n_vocab(m))) || !(s.detok = recur_detok_new(m, false))) {
        fprintf(stderr, "recur-cli: out of memory\n");
    } else if (!open_outputs(&s)) {
        if (!o->quiet && o->prompt) fputs(o->prompt, stdout);
        rc = prompt_and_generate(&s, prompt, n_prompt, o->logits_out != NULL);
        if (!rc && o->interactive) rc = interactive_loop(&s);
        fputc('\n', stdout);
        report(&s);
    }
    close_state(&s);
    return rc;
}
