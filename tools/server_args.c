/* server_args.c — recur-server's flags, named and meaning what llama-server's do (except -c,
 * which is the context of EACH slot here). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "server/srv_ban.h"

void server_usage(FILE *f) {
    fprintf(f,
        "usage: recur-server [options]\n"
        "\n"
        "An HTTP server with llama-server's API (OpenAI-compatible /v1/chat/completions, /v1/completions,\n"
        "native /completion, /tokenize, /detokenize, /apply-template, /props, /slots, /metrics, /health).\n"
        "\n"
        "model and memory:\n"
        "  -m,  --model FILE              GGUF model (default: " RECUR_DEFAULT_MODEL ", random weights, written on first use)\n"
        "  -a,  --alias NAME              model name shown by /v1/models and in responses (default: the file name)\n"
        "  -c,  --ctx-size N              context of EACH slot in tokens (llama-server divides -c among the slots;\n"
        "                                 recur gives every slot N). 0 = the model's training context, at most 4096\n"
        "  -np, --parallel N              slots: requests decoded together (default 4)\n"
        "  -t,  --threads N               kernel threads (default: all cores)\n"
        "  -b,  --batch-size N            most tokens per decode step, all slots together (default 2048)\n"
        "  -ub, --ubatch-size N           tokens evaluated together (default 512)\n"
        "  --q8-order ggml|block          sum order of Q8_0 weights: ggml (llama.cpp's bits, default)\n"
        "                                 or block (faster prompts, other rounding)\n"
        "       --no-cache-prompt         never reuse a slot's previous tokens (default: reuse)\n"
        "       --ctx-checkpoints N       prompt-cache checkpoints kept per conversation path (default 32)\n"
        "       --ctx-checkpoints-interval N  a checkpoint every N generated tokens, and the ladder spacing of\n"
        "                                 prompts without messages (default 512; 0: none)\n"
        "       --cache-ram MIB           prompt cache budget for all slots (default 8192; -1 unlimited, 0 off)\n"
        "       --cache-dir DIR           keep the prompt cache in DIR/prompt-cache.bin: loaded at start,\n"
        "                                 written when idle (2 s) and at exit\n"
        "       --slot-save-path DIR      where POST /slots/{id}?action=save|restore files live\n"
        "\n"
        "HTTP:\n"
        "       --host HOST               address to listen on (default 127.0.0.1)\n"
        "       --port N                  port (default 8080; 0 = any free port, printed at start)\n"
        "       --api-key KEY[,KEY...]    require 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (/health stays public)\n"
        "       --api-key-file FILE       API keys, one per line ('#' starts a comment line)\n"
        "  -to, --timeout N               idle connection timeout in seconds (default 3600)\n"
        "       --metrics                 enable GET /metrics (Prometheus)\n"
        "       --slots / --no-slots      enable / disable GET /slots (default on)\n"
        "\n"
        "chat:\n"
        "       --chat-template-file FILE Jinja chat template (default: the model's, else ChatML)\n"
        "       --jinja / --no-jinja      Jinja templates with tools (default on; --no-jinja refuses 'tools')\n"
        "       --reasoning-format F      auto | none | deepseek | deepseek-legacy: where <think> text goes (default auto)\n"
        "\n"
        "request defaults (each request may override them):\n"
        "       --temp T                  temperature (default 0.8; 0 = greedy)\n"
        "       --top-k N                 top-k (default 40; 0 = off)\n"
        "       --top-p P                 top-p (default 0.95; 1 = off)\n"
        "       --min-p P                 min-p (default 0.05; 0 = off)\n"
        "  -s,  --seed N                  sampler seed (default -1 = random per request)\n"
        "  -n,  --n-predict N             tokens to generate (default -1 = until EOS or the slot is full)\n"
        "       --banned-string-file FILE banned strings, one a line ('\"' removed, empty lines skipped): generation\n"
        "                                 rewinds and resamples where one would appear (requests with their own\n"
        "                                 banned_strings replace the list)\n"
        "       --banned-n N              tokens banned where a banned string starts (default 1; -1 = all of it)\n"
        "\n"
        "  -h,  --help                    this text\n");
}

static bool parse_long(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_float(const char *s, float *out) {
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end) return false;
    *out = v;
    return true;
}

static bool add_key(server_args *a, const char *k, size_t n) {
    while (n && (k[n - 1] == '\r' || k[n - 1] == '\n' || k[n - 1] == ' ')) n--;
    if (!n) return true;
    char **nk = realloc(a->api_keys, (size_t)(a->n_api_keys + 1) * sizeof *nk);
    if (!nk) return false;
    a->api_keys = nk;
    if (!(a->api_keys[a->n_api_keys] = strndup(k, n))) return false;
    a->n_api_keys++;
    return true;
}

static bool keys_csv(server_args *a, const char *v) {
    for (const char *p = v;;) {
        const char *c = strchr(p, ',');
        if (!add_key(a, p, c ? (size_t)(c - p) : strlen(p))) return false;
        if (!c) return true;
        p = c + 1;
    }
}

static bool keys_file(server_args *a, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[4096];
    bool ok = true;
    while (ok && fgets(line, sizeof line, f))
        if (line[0] != '#') ok = add_key(a, line, strlen(line));
    fclose(f);
    return ok;
}

/* ik_llama.cpp's --banned-string-file: one string a line, every '"' removed, empty lines skipped;
 * within the per-request limits (srv_ban.h), since the list applies to every request */
static bool ban_file(server_args *a, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    char line[4 * SRV_BAN_MAX_LEN];
    const char *why = NULL;
    size_t total = 0;
    while (!why && fgets(line, sizeof line, f)) {
        size_t n = 0;
        bool eol = false;
        for (const char *c = line; *c; c++) {
            eol |= *c == '\n';
            if (*c != '"' && *c != '\n' && *c != '\r') line[n++] = *c;
        }
        char **nb = NULL;
        if (n > SRV_BAN_MAX_LEN || (!eol && !feof(f))) why = "a line is longer than one banned string may be";
        else if (!n) continue;
        else if (a->n_ban_strings >= SRV_BAN_MAX_PATTERNS) why = "more strings than a request may have";
        else if ((total += n) > SRV_BAN_MAX_BYTES) why = "more bytes in all than a request may have";
        else if (!(nb = realloc(a->ban_strings, (size_t)(a->n_ban_strings + 1) * sizeof *nb))) why = "out of memory";
        else if (!((a->ban_strings = nb)[a->n_ban_strings] = strndup(line, n))) why = "out of memory";
        else a->n_ban_strings++;
    }
    fclose(f);
    if (why)
        fprintf(stderr, "recur-server: --banned-string-file %s: %s (at most %d strings of %d bytes, %d bytes in all)\n",
                path, why, SRV_BAN_MAX_PATTERNS, SRV_BAN_MAX_LEN, SRV_BAN_MAX_BYTES);
    return !why;
}

void server_args_default(server_args *a) {
    *a = (server_args){ .host = "127.0.0.1", .port = 8080, .n_slots = 4, .n_batch = 2048, .n_ubatch = 512,
                        .timeout_s = 3600, .jinja = true, .slots = true, .cache_prompt = true,
                        .ctx_checkpoints = 32, .ctx_checkpoints_interval = 512, .cache_ram_mib = 8192, .seed = -1,
                        .n_predict = -1, .banned_n = 1,
                        .sampling = recur_sampler_default_params() };
}

/* one flag with a value; 0 ok, 2 bad value, -1 not this kind of flag */
static int value_flag(server_args *a, const char *f, const char *v) {
    long long x;
#define IS(s, l) (!strcmp(f, s) || !strcmp(f, l))
#define INT(dst, lo, hi) (parse_long(v, lo, hi, &x) ? ((dst) = (int)x, 0) : 2)
#define FLT(dst) (parse_float(v, &(dst)) ? 0 : 2)
    if (IS("-m", "--model")) { a->model = v; return 0; }
    if (IS("-a", "--alias")) { a->alias = v; return 0; }
    if (IS("-c", "--ctx-size")) return INT(a->n_ctx, 0, 1 << 24);
    if (IS("-np", "--parallel")) return INT(a->n_slots, 1, 256);
    if (IS("-t", "--threads")) return INT(a->n_threads, 0, 4096);
    if (IS("-b", "--batch-size")) return INT(a->n_batch, 1, 1 << 20);
    if (IS("-ub", "--ubatch-size")) return INT(a->n_ubatch, 1, 1 << 20);
    if (IS("--q8-order", "--q8-order")) {
        const int q = recur_q8_order_parse(v);
        if (q < 0) return 2;
        a->q8_order = (uint32_t)q;
        return 0;
    }
    if (IS("--host", "--host")) { a->host = v; return 0; }
    if (IS("--port", "--port")) return INT(a->port, 0, 65535);
    if (IS("--api-key", "--api-key")) return keys_csv(a, v) ? 0 : 2;
    if (IS("--api-key-file", "--api-key-file")) return keys_file(a, v) ? 0 : 2;
    if (IS("-to", "--timeout")) return INT(a->timeout_s, 0, 1 << 30);
    if (IS("--chat-template-file", "--chat-template-file")) { a->chat_template_file = v; return 0; }
    if (IS("--slot-save-path", "--slot-save-path")) { a->slot_save_path = v; return 0; }
    if (IS("--cache-dir", "--cache-dir")) { a->cache_dir = v; return 0; }
    if (IS("-ctxcp", "--ctx-checkpoints")) return INT(a->ctx_checkpoints, 0, 1 << 20);
    if (IS("--ctx-checkpoints-interval", "--ctx-checkpoints-interval")) return INT(a->ctx_checkpoints_interval, 0, 1 << 30);
    if (IS("-cram", "--cache-ram")) return INT(a->cache_ram_mib, -1, 1 << 30);
    if (IS("--reasoning-format", "--reasoning-format")) return (a->reasoning = srv_reasoning_parse(v)) < 0 ? 2 : 0;
    if (IS("--temp", "--temperature")) return FLT(a->sampling.temp);
    if (IS("--top-k", "--top-k")) return INT(a->sampling.top_k, 0, 1 << 30);
    if (IS("--top-p", "--top-p")) return FLT(a->sampling.top_p);
    if (IS("--min-p", "--min-p")) return FLT(a->sampling.min_p);
    if (IS("-s", "--seed")) return parse_long(v, -1, 0xffffffffll, &x) ? (a->seed = x, 0) : 2;
    if (IS("-n", "--n-predict")) return INT(a->n_predict, -1, 1 << 30);
    if (IS("--banned-string-file", "--banned-string-file")) return ban_file(a, v) ? 0 : 2;
    if (IS("--banned-n", "--banned-n")) return INT(a->banned_n, -1, 1 << 30);
    if (IS("--predict", "--predict")) return INT(a->n_predict, -1, 1 << 30);
#undef IS
#undef INT
#undef FLT
    return -1;
}

static int switch_flag(server_args *a, const char *f) {
    if (!strcmp(f, "--jinja")) a->jinja = true;
    else if (!strcmp(f, "--no-jinja")) a->jinja = false;
    else if (!strcmp(f, "--metrics")) a->metrics = true;
    else if (!strcmp(f, "--slots")) a->slots = true;
    else if (!strcmp(f, "--no-slots")) a->slots = false;
    else if (!strcmp(f, "--cache-prompt")) a->cache_prompt = true;
    else if (!strcmp(f, "--no-cache-prompt")) a->cache_prompt = false;
    else return -1;
    return 0;
}

static int parse_flags(int argc, char **argv, server_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) { server_usage(stdout); return 1; }
        if (switch_flag(a, f) == 0) continue;
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = value_flag(a, f, v ? v : "");
        if (rc < 0) {
            fprintf(stderr, "recur-server: unknown option '%s' (see --help)\n", f);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "recur-server: %s needs a value (see --help)\n", f);
            return 2;
        }
        if (rc) {
            fprintf(stderr, "recur-server: bad value '%s' for %s (see --help)\n", v, f);
            return 2;
        }
        i++;
    }
    if (a->reasoning < 0) a->reasoning = 0;
    return 0;
}

void server_args_free(server_args *a) {
    for (int i = 0; i < a->n_api_keys; i++) free(a->api_keys[i]);
    free(a->api_keys);
    for (int i = 0; i < a->n_ban_strings; i++) free(a->ban_strings[i]);
    free(a->ban_strings);
    a->api_keys = a->ban_strings = NULL;
    a->n_api_keys = a->n_ban_strings = 0;
}

int server_args_parse(int argc, char **argv, server_args *a) {
    server_args_default(a);
    const int rc = parse_flags(argc, argv, a);
    if (rc) server_args_free(a);   /* the caller only exits: nothing left for a leak checker */
    return rc;
}
