/* gguf_chat.c — the tokenizer and the chat template of a GGUF file from the command line:
 *
 *   recur-gguf render -m FILE --context JSON|@FILE [--template FILE] [--now Y-M-DTH:M:S]
 *       prints the prompt the template renders (the model's tokenizer.chat_template unless
 *       --template is given; -m may then be left out: bos_token/eos_token are "")
 *   recur-gguf tokenize -m FILE [--add-special] [--parse-special] TEXT
 *       prints the ids as a JSON array
 *   recur-gguf detokenize -m FILE [--no-special] [--remove-special] IDS
 *       IDS is "1,2,3" or a JSON array; prints the text (special tokens shown unless
 *       --no-special)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "gguf/gguf.h"
#include "gguf_tool.h"
#include "vocab/vocab.h"

typedef struct chat_args {
    const char *model, *context, *tmpl, *now, *text;
    bool        add_special, parse_special, no_special, remove_special;
} chat_args;

/* Parses argv (argv[0] is the subcommand) into a; `--` ends the options. */
static int parse_args(int argc, char **argv, chat_args *a, const char *usage) {
    bool opts = true;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        if (opts && !strcmp(o, "--")) { opts = false; continue; }
        if (!opts) {
            if (a->text) { fprintf(stderr, "recur-gguf: unexpected argument '%s'\n", o); return 2; }
            a->text = o;
            continue;
        }
        const char **val = !strcmp(o, "-m") || !strcmp(o, "--model") ? &a->model
                         : !strcmp(o, "--context") ? &a->context : !strcmp(o, "--template") ? &a->tmpl
                         : !strcmp(o, "--now") ? &a->now : NULL;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) { printf("usage: recur-gguf %s\n", usage); exit(0); }
        if (val) {
            if (i + 1 >= argc) { fprintf(stderr, "recur-gguf: %s needs a value\n", o); return 2; }
            *val = argv[++i];
        } else if (!strcmp(o, "--add-special")) a->add_special = true;
        else if (!strcmp(o, "--parse-special")) a->parse_special = true;
        else if (!strcmp(o, "--no-special")) a->no_special = true;
        else if (!strcmp(o, "--remove-special")) a->remove_special = true;
        else if (o[0] == '-' && o[1] && !a->text) { fprintf(stderr, "recur-gguf: unknown option '%s'\nusage: recur-gguf %s\n", o, usage); return 2; }
        else if (!a->text) a->text = o;
        else { fprintf(stderr, "recur-gguf: unexpected argument '%s'\n", o); return 2; }
    }
    return 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (cap - n - 1 == 0) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (buf) { buf[n] = 0; *len = n; }
    return buf;
}

typedef struct model_files {
    gguf_file *g;
    vocab     *v;
} model_files;

static int open_model(const char *path, model_files *m) {
    char err[512];
    if (gguf_open(path, &m->g, err, sizeof err) || vocab_load(m->g, &m->v, err, sizeof err)) {
        fprintf(stderr, "recur-gguf: %s\n", err);
        gguf_close(m->g);
        m->g = NULL;
        return 1;
    }
    return 0;
}

static void close_model(model_files *m) {
    vocab_free(m->v);
    gguf_close(m->g);
}

/* ---- render -------------------------------------------------------------------------------- */

static json_t *load_context(const char *arg) {
    json_error_t je;
    json_t *j = arg[0] == '@' ? json_load_file(arg + 1, 0, &je) : json_loads(arg, 0, &je);
    if (!j) fprintf(stderr, "recur-gguf: --context: %s (line %d, column %d)\n", je.text, je.line, je.column);
    else if (!json_is_object(j)) { fprintf(stderr, "recur-gguf: --context must be a JSON object\n"); json_decref(j); j = NULL; }
    return j;
}

static char *template_source(const chat_args *a, const model_files *m) {
    if (a->tmpl) {
        size_t n;
        char *s = read_all(a->tmpl, &n);
        if (!s) fprintf(stderr, "recur-gguf: cannot read template '%s'\n", a->tmpl);
        return s;
    }
    char *s = chat_template_from_gguf(m->g, NULL);
    if (!s) fprintf(stderr, "recur-gguf: '%s' has no tokenizer.chat_template (use --template)\n", a->model);
    return s;
}

static int render_with(const chat_args *a, const model_files *m, const json_t *ctx) {
    char err[1024], *src = template_source(a, m), *out = NULL;
    if (!src) return 1;
    struct tm tm = {0};
    if (a->now && !strptime(a->now, "%Y-%m-%dT%H:%M:%S", &tm)) {
        fprintf(stderr, "recur-gguf: --now wants YYYY-MM-DDTHH:MM:SS\n");
        free(src);
        return 2;
    }
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    free(src);
    size_t len = 0;
    recur_status st = t ? chat_render_context(t, m->v, ctx, a->now ? &tm : NULL, &out, &len, err, sizeof err)
                        : RECUR_E_INVALID;
    jinja_free(t);
    if (st) {
        fprintf(stderr, "recur-gguf: template: %s\n", err);
        return 1;
    }
    fwrite(out, 1, len, stdout);
    free(out);
    return 0;
}

int cmd_render(int argc, char **argv) {
    static const char usage[] = "render -m FILE --context JSON|@FILE [--template FILE] [--now YYYY-MM-DDTHH:MM:SS]";
    chat_args a = {0};
    int rc = parse_args(argc, argv, &a, usage);
    if (rc) return rc;
    if (!a.context || (!a.model && !a.tmpl) || a.text) {
        fprintf(stderr, "usage: recur-gguf %s\n", usage);
        return 2;
    }
    model_files m = {0};
    if (a.model && open_model(a.model, &m)) return 1;
    json_t *ctx = load_context(a.context);
    rc = ctx ? render_with(&a, &m, ctx) : 1;
    json_decref(ctx);
    close_model(&m);
    return rc;
}

/* ---- tokenize / detokenize --------------------------------------------------------------------- */

int cmd_tokenize(int argc, char **argv) {
    static const char usage[] = "tokenize -m FILE [--add-special] [--parse-special] TEXT";
    chat_args a = {0};
    int rc = parse_args(argc, argv, &a, usage);
    if (rc) return rc;
    if (!a.model || !a.text) { fprintf(stderr, "usage: recur-gguf %s\n", usage); return 2; }
    model_files m = {0};
    if (open_model(a.model, &m)) return 1;
    size_t len = strlen(a.text);
    int n = vocab_tokenize(m.v, a.text, len, NULL, 0, a.add_special, a.parse_special);
    recur_token *ids = n >= 0 ? malloc(((size_t)n + 1) * sizeof *ids) : NULL;
    if (ids) n = vocab_tokenize(m.v, a.text, len, ids, n, a.add_special, a.parse_special);
    if (!ids) {
        fprintf(stderr, "recur-gguf: tokenizing failed\n");
        rc = 1;
    } else {
        putchar('[');
        for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
        puts("]");
    }
    free(ids);
    close_model(&m);
    return rc;
}

/* "1,2,3", "1 2 3" or "[1, 2, 3]" into ids (malloc'd); -1 on a bad list */
static int parse_ids(const char *s, recur_token **out) {
    size_t cap = 16;
    int n = 0;
    recur_token *v = malloc(cap * sizeof *v);
    const char *p = s;
    while (v && *p) {
        while (*p == ' ' || *p == ',' || *p == '[' || *p == ']' || *p == '\n' || *p == '\t') p++;
        if (!*p) break;
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x < 0 || x > INT32_MAX) { free(v); return -1; }
        if ((size_t)n == cap) {
            recur_token *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) { free(v); return -1; }
            v = nv;
        }
        v[n++] = (recur_token)x;
        p = end;
    }
    *out = v;
    return v ? n : -1;
}

int cmd_detokenize(int argc, char **argv) {
    static const char usage[] = "detokenize -m FILE [--no-special] [--remove-special] IDS";
    chat_args a = {0};
    int rc = parse_args(argc, argv, &a, usage);
    if (rc) return rc;
    if (!a.model || !a.text) { fprintf(stderr, "usage: recur-gguf %s\n", usage); return 2; }
    recur_token *ids = NULL;
    int n = parse_ids(a.text, &ids);
    if (n < 0) { fprintf(stderr, "recur-gguf: IDS must be non-negative integers (\"1,2,3\" or \"[1, 2, 3]\")\n"); return 2; }
    model_files m = {0};
    if (open_model(a.model, &m)) { free(ids); return 1; }
    int len = vocab_detokenize(m.v, ids, n, NULL, 0, a.remove_special, !a.no_special);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (buf) len = vocab_detokenize(m.v, ids, n, buf, len + 1, a.remove_special, !a.no_special);
    if (!buf || len < 0) {
        fprintf(stderr, "recur-gguf: cannot detokenize: a token id is out of range (the vocab has %d)\n",
                vocab_n_tokens(m.v));
        rc = 1;
    } else {
        fwrite(buf, 1, (size_t)len, stdout);
    }
    free(buf);
    free(ids);
    close_model(&m);
    return rc;
}
