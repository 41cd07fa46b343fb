/* recur-cli — one-shot and interactive generation from the command line.
 *
 *   recur-cli -m model.gguf -p "Once upon a time" -n 64 --temp 0
 *
 * With no -m it runs the default model (models/default.gguf, random weights), writing it with
 * recur-gguf synth on first use. For black-box checks: --prompt-tokens, --logits-out and
 * --greedy-out (see --help). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "recur.h"
#include "cli.h"
#include "default_model.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: recur-cli [options]\n"
        "  -m, --model FILE        GGUF model (default: " RECUR_DEFAULT_MODEL ", random weights, written on first use)\n"
        "  -p, --prompt TEXT       prompt text\n"
        "  --prompt-tokens IDS     prompt as token ids, e.g. 1,5,9 (no BOS is added)\n"
        "  -n, --n-predict N       tokens to generate (default 64; 0 = none)\n"
        "  --temp T                temperature (default 0.8; 0 = greedy)\n"
        "  --top-k K               top-k (default 40; 0 = off)\n"
        "  --top-p P               top-p (default 0.95; 1 = off)\n"
        "  --min-p P               min-p (default 0.05; 0 = off)\n"
        "  --typical P             locally typical sampling (default 1.0; 1 = off)\n"
        "  --min-keep N            top-p, min-p and typical keep at least N tokens (default 0 = 1)\n"
        "  --repeat-penalty R      penalize repeated tokens (default 1.0; 1 = off)\n"
        "  --repeat-last-n N       tokens the penalties look back on (default 64; 0 = off, -1 = all)\n"
        "  --presence-penalty P    subtracted once from each repeated token's logit (default 0 = off)\n"
        "  --frequency-penalty F   subtracted per occurrence (default 0 = off)\n"
        "  -l, --logit-bias ID(+/-)BIAS  add BIAS to token ID's logit, e.g. 15043+1 or 2-inf (bans it)\n"
        "  --seed N                sampler seed (default 24301)\n"
        "  -t, --threads N         kernel threads (default: all cores)\n"
        "  -c, --ctx-size N        context size (default: the model's, at most 4096)\n"
        "  -b, --batch-size N      tokens per decode call (default 512)\n"
        "  -ub, --ubatch-size N    tokens evaluated together (default 512)\n"
        "  --q8-order ggml|block   sum order of Q8_0 weights: ggml (llama.cpp's bits, default) or\n"
        "                          block (faster prompts, other rounding)\n"
        "  -i, --interactive       after the prompt, read more text from stdin, line by line\n"
        "  --ignore-eos            do not stop at end-of-generation tokens\n"
        "  --logits-out FILE       write float32 logits of every prompt position [n_prompt][n_vocab]\n"
        "  --greedy-out FILE       write the generated ids, one per line\n"
        "  -q, --quiet             print only the generated text\n"
        "  -h, --help              this text\n");
}

/* -l ID+BIAS or ID-BIAS, llama.cpp's format; BIAS may be inf. */
static int parse_bias(cli_opts *o, const char *v) {
    char *end;
    errno = 0;
    const long id = strtol(v, &end, 10);
    const char sign = *end;
    float bias = 0;
    if (end != v && !errno && id >= 0 && id <= INT32_MAX && (sign == '+' || sign == '-')) {
        const char *num = end + 1;
        bias = strtof(num, &end);
        if (end == num || *end) end = NULL;
    } else {
        end = NULL;
    }
    if (!end) {
        fprintf(stderr, "recur-cli: --logit-bias wants TOKEN_ID(+/-)BIAS, e.g. 15043+1, not '%s'\n", v);
        return 2;
    }
    if (o->n_bias == CLI_MAX_BIAS) {
        fprintf(stderr, "recur-cli: at most %d --logit-bias options\n", CLI_MAX_BIAS);
        return 2;
    }
    o->bias[o->n_bias++] = (recur_logit_bias){ (recur_token)id, sign == '-' ? -bias : bias };
    return 0;
}

static int parse_args(int argc, char **argv, cli_opts *o) {
    *o = (cli_opts){ .n_predict = 64, .n_batch = 512, .n_ubatch = 512, .sp = recur_sampler_default_params() };
    o->sp.seed = 24301;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define FLAG(s, l) (strcmp(a, s) == 0 || strcmp(a, l) == 0)
#define NEED() do { if (!v) { fprintf(stderr, "recur-cli: %s needs a value\n", a); return 2; } i++; } while (0)
        if (FLAG("-h", "--help")) { usage(stdout); return 1; }
        else if (FLAG("-m", "--model")) { NEED(); o->model = v; }
        else if (FLAG("-p", "--prompt")) { NEED(); o->prompt = v; }
        else if (FLAG("--prompt-tokens", "--prompt-tokens")) { NEED(); o->prompt_tokens = v; }
        else if (FLAG("-n", "--n-predict")) { NEED(); o->n_predict = atoi(v); }
        else if (FLAG("--temp", "--temperature")) { NEED(); o->sp.temp = strtof(v, NULL); }
        else if (FLAG("--top-k", "--top-k")) { NEED(); o->sp.top_k = atoi(v); }
        else if (FLAG("--top-p", "--top-p")) { NEED(); o->sp.top_p = strtof(v, NULL); }
        else if (FLAG("--min-p", "--min-p")) { NEED(); o->sp.min_p = strtof(v, NULL); }
        else if (FLAG("--typical", "--typical-p")) { NEED(); o->sp.typical_p = strtof(v, NULL); }
        else if (FLAG("--min-keep", "--min-keep")) { NEED(); o->sp.min_keep = atoi(v); }
        else if (FLAG("--repeat-penalty", "--repeat-penalty")) { NEED(); o->sp.penalty_repeat = strtof(v, NULL); }
        else if (FLAG("--repeat-last-n", "--repeat-last-n")) { NEED(); o->sp.penalty_last_n = atoi(v); }
        else if (FLAG("--presence-penalty", "--presence-penalty")) { NEED(); o->sp.penalty_present = strtof(v, NULL); }
        else if (FLAG("--frequency-penalty", "--frequency-penalty")) { NEED(); o->sp.penalty_freq = strtof(v, NULL); }
        else if (FLAG("-l", "--logit-bias")) { NEED(); if (parse_bias(o, v)) return 2; }
        else if (FLAG("--seed", "-s")) { NEED(); o->sp.seed = strtoull(v, NULL, 10); }
        else if (FLAG("-t", "--threads")) { NEED(); o->n_threads = atoi(v); }
        else if (FLAG("-c", "--ctx-size")) { NEED(); o->n_ctx = atoi(v); }
        else if (FLAG("-b", "--batch-size")) { NEED(); o->n_batch = atoi(v); }
        else if (FLAG("-ub", "--ubatch-size")) { NEED(); o->n_ubatch = atoi(v); }
        else if (FLAG("--q8-order", "--q8-order")) {
            NEED();
            const int q = recur_q8_order_parse(v);
            if (q < 0) { fprintf(stderr, "recur-cli: --q8-order takes ggml or block, not '%s'\n", v); return 2; }
            o->q8_order = (uint32_t)q;
        }
        else if (FLAG("-i", "--interactive")) o->interactive = true;
        else if (FLAG("--ignore-eos", "--ignore-eos")) o->ignore_eos = true;
        else if (FLAG("-q", "--quiet")) o->quiet = true;
        else if (FLAG("--logits-out", "--logits-out")) { NEED(); o->logits_out = v; }
        else if (FLAG("--greedy-out", "--greedy-out")) { NEED(); o->greedy_out = v; }
        else { fprintf(stderr, "recur-cli: unknown option '%s' (see --help)\n", a); return 2; }
#undef FLAG
#undef NEED
    }
    if (o->n_predict < 0 || o->n_batch < 1 || o->n_ubatch < 1 || o->n_ctx < 0) {
        fprintf(stderr, "recur-cli: -n, -b, -ub and -c must not be negative\n");
        return 2;
    }
    if (o->sp.penalty_last_n < -1 || o->sp.min_keep < 0) {
        fprintf(stderr, "recur-cli: --repeat-last-n must be -1 or more, --min-keep 0 or more\n");
        return 2;
    }
    o->sp.logit_bias = o->bias;
    o->sp.n_logit_bias = o->n_bias;
    return 0;
}

static int parse_ids(const char *s, recur_token **out) {
    int n = 0, cap = 16;
    recur_token *ids = malloc(cap * sizeof *ids);
    while (ids && *s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) { free(ids); return -1; }
        if (n == cap && !(ids = realloc(ids, (size_t)(cap *= 2) * sizeof *ids))) return -1;
        ids[n++] = (recur_token)v;
        s = end;
        while (*s == ',' || *s == ' ') s++;
    }
    *out = ids;
    return ids ? n : -1;
}

int tokenize_alloc(const recur_model *m, const char *text, bool add_special, recur_token **out) {
    const size_t len = strlen(text);
    int cap = (int)len + 8;
    recur_token *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return -1;
    int n = recur_tokenize(m, text, len, ids, cap, add_special, false);
    if (n > cap) {
        recur_token *bigger = realloc(ids, (size_t)n * sizeof *ids);
        if (!bigger) { free(ids); return -1; }
        ids = bigger;
        n = recur_tokenize(m, text, len, ids, n, add_special, false);
    }
    if (n < 0) { free(ids); return -1; }
    *out = ids;
    return n;
}

int main(int argc, char **argv) {
    cli_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    if (!o.model) {
        if (tool_default_model(argv[0], "recur-cli")) return 1;
        o.model = RECUR_DEFAULT_MODEL;
    }
    recur_init();
    char err[512];
    recur_model *m;
    if (recur_model_load(o.model, NULL, &m, err, sizeof err)) {
        fprintf(stderr, "recur-cli: %s\n", err);
        return 1;
    }
    if (!o.quiet) cli_banner(m, &o);
    recur_token *ids = NULL;
    int n = 0;
    if (o.prompt_tokens) n = parse_ids(o.prompt_tokens, &ids);
    else n = tokenize_alloc(m, o.prompt ? o.prompt : "", true, &ids);
    if (n < 0) {
        fprintf(stderr, "recur-cli: cannot read the prompt (bad --prompt-tokens, or this vocabulary cannot tokenize text yet)\n");
        recur_model_free(m);
        return 1;
    }
    rc = cli_run(m, &o, ids, n);
    free(ids);
    recur_model_free(m);
    return rc;
}
