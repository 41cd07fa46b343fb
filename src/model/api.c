/* api.c — library initialisation and the model/vocab getters of recur.h. */
#include <stdio.h>
#include <stdlib.h>

#include <string.h>
#include <xxhash.h>

#include "model/model.h"
#include "tensor/tensor.h"

void recur_init(void) { tensor_init(); }

const char *recur_cpu_isa(void) {
    recur_init();
    return tensor_kernels_active()->isa;
}

const char *recur_prefetch_mode(void) {
    recur_init();
    return tensor_gemv_prefetch_name(tensor_gemv_prefetch_get());
}

recur_status recur_prefetch_set(const char *mode) {
    recur_init();
    const int m = tensor_gemv_prefetch_parse(mode);
    if (m < 0) return RECUR_E_INVALID;
    tensor_gemv_prefetch_set(m);
    return RECUR_OK;
}

void recur_prefetch_calls(uint64_t *with_prefetch, uint64_t *without) {
    uint64_t c[2];
    tensor_gemv_prefetch_stats(c);
    if (with_prefetch) *with_prefetch = c[0];
    if (without) *without = c[1];
}

const char *recur_q8_order_name(uint32_t q8_order) {
    return q8_order == RECUR_Q8_GGML ? "ggml" : q8_order == RECUR_Q8_BLOCK ? "block" : "?";
}

int recur_q8_order_parse(const char *name) {
    if (strcmp(name, "ggml") == 0) return RECUR_Q8_GGML;
    if (strcmp(name, "block") == 0) return RECUR_Q8_BLOCK;
    return -1;
}

const char *recur_prof_kind_name(recur_prof_kind kind) {
    static const char *const names[RECUR_PROF_KINDS] = { "matmul", "attention", "recurrent",
                                                         "norm",   "elementwise", "other" };
    return kind >= 0 && kind < RECUR_PROF_KINDS ? names[kind] : NULL;
}

int recur_model_n_vocab(const recur_model *m) { return m->hp.n_vocab ? m->hp.n_vocab : vocab_n_tokens(m->vocab); }
int recur_model_n_embd(const recur_model *m) { return m->hp.n_embd; }
int recur_model_n_layer(const recur_model *m) { return m->hp.n_layer; }
int recur_model_n_ctx_train(const recur_model *m) { return m->hp.n_ctx_train; }
uint64_t recur_model_n_params(const recur_model *m) { return m->n_params; }
uint64_t recur_model_size_bytes(const recur_model *m) { return m->n_bytes; }
const char *recur_model_arch(const recur_model *m) { return m->hp.arch; }

void recur_model_desc(const recur_model *m, char *buf, size_t buf_len) {
    snprintf(buf, buf_len, "%s %d layers, %d embd, %s, %.1fM params, %.1f MiB", m->hp.arch, m->hp.n_layer,
             m->hp.n_embd, gguf_type_name(m->file_type), (double)m->n_params / 1e6, (double)m->n_bytes / 1048576.0);
}

/* The sizes context.c gives rs_new and kv_new: per recurrent layer (K-1) conv rows of
 * rs_n_conv channels plus rs_n_ssm floats; per attention layer one K and one V row of
 * n_head_kv heads, F16. */
size_t recur_model_state_bytes(const recur_model *m) {
    const model_hparams *hp = &m->hp;
    if (hp->n_layer_rs <= 0) return 0;
    const size_t per_layer = (size_t)(hp->ssm_d_conv - 1) * (size_t)hp->rs_n_conv + (size_t)hp->rs_n_ssm;
    return (size_t)hp->n_layer_rs * per_layer * sizeof(float);
}

size_t recur_model_kv_bytes_per_token(const recur_model *m) {
    const model_hparams *hp = &m->hp;
    if (hp->n_layer_kv <= 0) return 0;
    const size_t row = (size_t)hp->n_head_kv * ((size_t)hp->head_dim_k + (size_t)hp->head_dim_v);
    return (size_t)hp->n_layer_kv * row * sizeof(uint16_t);
}

recur_token recur_token_bos(const recur_model *m) { return vocab_bos(m->vocab); }
recur_token recur_token_eos(const recur_model *m) { return vocab_eos(m->vocab); }
bool recur_token_is_eog(const recur_model *m, recur_token t) { return vocab_is_eog(m->vocab, t); }
bool recur_vocab_add_bos(const recur_model *m) { return vocab_add_bos(m->vocab); }

int recur_tokenize(const recur_model *m, const char *text, size_t text_len, recur_token *tokens, int max_tokens,
                   bool add_special, bool parse_special) {
    return vocab_tokenize(m->vocab, text, text_len, tokens, max_tokens, add_special, parse_special);
}

int recur_token_to_piece(const recur_model *m, recur_token t, char *buf, int buf_len, bool special) {
    return vocab_token_to_piece(m->vocab, t, buf, buf_len, special);
}

/* ---- streaming detokenizer --------------------------------------------------------------- */

struct recur_detok {
    const recur_model *m;
    bool               special;
    vocab_stream       st;
};

recur_detok *recur_detok_new(const recur_model *m, bool special) {
    recur_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->m = m;
    d->special = special;
    vocab_stream_init(&d->st);
    return d;
}

void recur_detok_free(recur_detok *d) { free(d); }

int recur_detok_max_bytes(const recur_model *m) { return 16 + 3 * vocab_max_piece_len(m->vocab); }

int recur_detok_push(recur_detok *d, recur_token t, char *out, int out_cap) {
    return vocab_stream_push(d->m->vocab, &d->st, t, d->special, out, out_cap);
}

int recur_detok_flush(recur_detok *d, char *out, int out_cap) { return vocab_stream_flush(&d->st, out, out_cap); }

/* ---- metadata ---------------------------------------------------------------------------- */

int recur_model_meta_str(const recur_model *m, const char *key, char *buf, size_t buf_len) {
    const int64_t i = gguf_find_key(m->g, key);
    if (i < 0) return -1;
    gguf_str s;
    int64_t iv;
    double fv;
    gguf_arr a;
    if (buf_len) buf[0] = 0;
    if (gguf_kv_str(m->g, i, &s)) return snprintf(buf, buf_len, "%.*s", (int)s.len, s.ptr);
    if (gguf_kv_int(m->g, i, &iv)) return snprintf(buf, buf_len, "%lld", (long long)iv);
    if (gguf_kv_float(m->g, i, &fv)) return snprintf(buf, buf_len, "%g", fv);
    if (gguf_kv_arr(m->g, i, &a))
        return snprintf(buf, buf_len, "[%s x %llu]", gguf_kv_type_name(a.elem_type), (unsigned long long)a.n);
    return snprintf(buf, buf_len, "?");
}

/* XXH3 of the hyperparameters (field by field: no padding bytes) and of every tensor's name,
 * type and shape, chained through the seed. */
uint64_t recur_model_id(const recur_model *m) {
    const model_hparams *hp = &m->hp;
    uint64_t h = XXH3_64bits(hp->arch, strnlen(hp->arch, sizeof hp->arch));
    const int64_t v[] = { hp->n_vocab, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim_k,
                          hp->head_dim_v, hp->n_ff, hp->n_rot, hp->n_ctx_train, (int64_t)hp->rope_kind,
                          hp->tied_output, hp->ssm_d_conv, hp->ssm_d_inner, hp->ssm_d_state, hp->ssm_dt_rank,
                          hp->ssm_n_group, hp->rs_n_in, hp->rs_n_conv, hp->rs_n_ssm, hp->n_layer_kv, hp->n_layer_rs };
    h = XXH3_64bits_withSeed(v, sizeof v, h);
    const float fv[] = { hp->rope_base, hp->rope_freq_scale, hp->rms_eps };
    h = XXH3_64bits_withSeed(fv, sizeof fv, h);
    for (int il = 0; il < hp->n_layer && il < MODEL_MAX_LAYERS; il++) {
        const int32_t lv[2] = { hp->head_kv[il], hp->recurrent[il] };
        h = XXH3_64bits_withSeed(lv, sizeof lv, h);
    }
    const int64_t nt = m->g ? gguf_n_tensors(m->g) : 0;
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        h = XXH3_64bits_withSeed(t->name, strlen(t->name), h);
        const int64_t tv[2 + GGUF_MAX_DIMS] = { t->type, t->n_dims, t->ne[0], t->ne[1], t->ne[2], t->ne[3] };
        h = XXH3_64bits_withSeed(tv, sizeof tv, h);
    }
    return h;
}

/* ---- cost of one token (recur.h: recur_model_token_cost) --------------------------------- */

static void cost_add(recur_model_cost *c, const model_hparams *hp, const model_w *w) {
    uint64_t bytes = 0;
    if (!w->data || !gguf_tensor_nbytes(w->type, w->ne, &bytes)) return;
    uint64_t elems = (uint64_t)(w->ne[0] * w->ne[1] * w->ne[2] * w->ne[3]);
    if (w->ne[2] > 1 && hp->n_expert > 0 && w->ne[2] == hp->n_expert) {   /* experts: the used share */
        bytes = bytes / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
        elems = elems / (uint64_t)hp->n_expert * (uint64_t)hp->n_expert_used;
    }
    c->weight_bytes += bytes;
    if (w->ne[0] > 1 && w->ne[1] > 1) c->weight_macs += elems;
}

recur_model_cost recur_model_token_cost(const recur_model *m) {
    const model_hparams *hp = &m->hp;
    recur_model_cost c = { 0 };
    /* model_layer holds nothing but model_w fields, so it is walked as an array of them */
    _Static_assert(sizeof(model_layer) % sizeof(model_w) == 0, "model_layer must hold only model_w fields");
    const size_t n_fields = sizeof(model_layer) / sizeof(model_w);
    for (int il = 0; m->w.layers && il < hp->n_layer; il++) {
        const model_w *f = (const model_w *)&m->w.layers[il];
        for (size_t k = 0; k < n_fields; k++) cost_add(&c, hp, &f[k]);
    }
    cost_add(&c, hp, &m->w.output_norm);
    const recur_model_cost before = c;
    cost_add(&c, hp, &m->w.output);
    c.head_bytes = c.weight_bytes - before.weight_bytes;
    c.head_macs = c.weight_macs - before.weight_macs;
    uint64_t emb = 0;   /* one row of the embedding, when it is not the lm head */
    if (m->w.token_embd.data && m->w.token_embd.data != m->w.output.data && m->w.token_embd.ne[1] > 0 &&
        gguf_tensor_nbytes(m->w.token_embd.type, m->w.token_embd.ne, &emb))
        c.weight_bytes += emb / (uint64_t)m->w.token_embd.ne[1];
    c.attn_macs_per_pos = (uint64_t)hp->n_layer_kv * (uint64_t)hp->n_head * (uint64_t)(hp->head_dim_k + hp->head_dim_v);
    c.state_macs = 3u * (uint64_t)hp->n_layer_rs * (uint64_t)hp->rs_n_ssm;
    c.n_layer_recurrent = hp->n_layer_rs;
    return c;
}
