/* srv_load.c — what the server needs before it answers: the model, its chat template (the
 * --chat-template-file, else the GGUF's tokenizer.chat_template, else ChatML as llama-server
 * falls back to) and the scheduler. Runs while HTTP already answers 503 "Loading model". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"
#include "model/model.h"
#include "server/srv.h"
#include "server/srv_load.h"

static const char CHATML[] =
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}";

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

static recur_status load_template(srv_server *s, const char *file, char *err, size_t err_len) {
    char *src = file ? read_file(file) : chat_template_from_gguf(s->model->g, NULL);
    if (file && !src) return rc_fail(err, err_len, RECUR_E_IO, "cannot read --chat-template-file '%s'", file);
    if (!src) {
        fprintf(stderr, "recur-server: the model has no chat template: using ChatML (pass --chat-template-file)\n");
        if (!(src = strdup(CHATML))) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    }
    char perr[512];
    s->tmpl = jinja_parse(src, strlen(src), perr, sizeof perr);
    if (!s->tmpl) {
        recur_status st = rc_fail(err, err_len, RECUR_E_INVALID, "chat template%s%s: %s", file ? " " : "", file ? file : "", perr);
        free(src);
        return st;
    }
    s->tmpl_src = src;
    return RECUR_OK;
}

recur_status srv_load(srv_server *s, const char *model_path, const char *tmpl_file, sched_params *sp, char *err,
                      size_t err_len) {
    recur_model *m = NULL;
    recur_status st = recur_model_load(model_path, NULL, &m, err, err_len);
    if (st) return st;
    s->model = m;
    s->vocab = m->vocab;
    if ((st = load_template(s, tmpl_file, err, err_len))) return st;
    if (sp->n_ctx_slot <= 0) {
        int train = recur_model_n_ctx_train(m);
        sp->n_ctx_slot = train > 0 && train < 4096 ? train : 4096;
    }
    sched *sc = NULL;
    if ((st = sched_new(m, sp, &sc, err, err_len))) return st;
    pthread_rwlock_wrlock(&s->life);
    s->sched = sc;
    pthread_rwlock_unlock(&s->life);
    return RECUR_OK;
}

void srv_unload(srv_server *s) {
    jinja_free(s->tmpl);
    free(s->tmpl_src);
    recur_model_free(s->model);
    s->tmpl = NULL;
    s->tmpl_src = NULL;
    s->model = NULL;
    s->vocab = NULL;
}
