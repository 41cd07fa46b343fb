/* model_load.c — opening a GGUF model: common hyperparameters, weight binding, the vocab. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "model/model.h"
#include "tensor/tensor.h"

/* ---- hyperparameters --------------------------------------------------------------------- */

/* "{arch}.suffix" */
static void arch_key(const struct recur_model *m, const char *suffix, char *key, size_t n) {
    snprintf(key, n, "%s.%s", m->hp.arch, suffix);
}

/* An integer key that may be stored as a scalar or a per-layer array (all equal here). */
static recur_status get_layer_int(const struct recur_model *m, const char *suffix, bool required,
                                  int64_t def, int64_t lo, int64_t hi, int32_t *out,
                                  char *err, size_t err_len) {
    char key[128];
    arch_key(m, suffix, key, sizeof key);
    int64_t v = def;
    gguf_arr a;
    if (gguf_get_arr(m->g, key, &a)) {
        if (a.n == 0 || a.elem_type == GGUF_KV_STRING)
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s: empty or non-numeric array", key);
        v = gguf_arr_int(&a, 0);
        for (uint64_t i = 1; i < a.n; i++)
            if (gguf_arr_int(&a, i) != v)
                return rc_fail(err, err_len, RECUR_E_UNSUPPORTED,
                               "model: key %s: per-layer values differ (not supported for arch %s)", key, m->hp.arch);
    } else if (!gguf_get_int(m->g, key, &v)) {
        if (gguf_find_key(m->g, key) >= 0)
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s has type %s, expected an integer", key,
                           gguf_kv_type_name(gguf_kv_type_of(m->g, gguf_find_key(m->g, key))));
        if (required) return rc_fail(err, err_len, RECUR_E_FORMAT, "model: required key %s is missing", key);
        v = def;
    }
    if (v < lo || v > hi)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s = %lld outside %lld..%lld", key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return RECUR_OK;
}

/* An integer key that may be a scalar (every layer) or an array of n values, into out[n]. */
static recur_status get_layer_ints(const struct recur_model *m, const char *suffix, int64_t def, int64_t lo,
                                   int64_t hi, int n, int32_t *out, char *err, size_t err_len) {
    char key[128];
    arch_key(m, suffix, key, sizeof key);
    gguf_arr a;
    int64_t v = def;
    const bool arr = gguf_get_arr(m->g, key, &a);
    if (arr && (a.n != (uint64_t)n || a.elem_type == GGUF_KV_STRING))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s: expected %d numbers", key, n);
    if (!arr && !gguf_get_int(m->g, key, &v) && gguf_find_key(m->g, key) >= 0)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s is not an integer", key);
    for (int i = 0; i < n; i++) {
        const int64_t x = arr ? gguf_arr_int(&a, (uint64_t)i) : v;
        if (x < lo || x > hi)
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s = %lld outside %lld..%lld", key,
                           (long long)x, (long long)lo, (long long)hi);
        out[i] = (int32_t)x;
    }
    return RECUR_OK;
}

static float get_float(const struct recur_model *m, const char *suffix, float def) {
    char key[128];
    arch_key(m, suffix, key, sizeof key);
    double v;
    return gguf_get_float(m->g, key, &v) ? (float)v : def;
}

recur_status model_read_common_hparams(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    recur_status st;
    int32_t n_block = 0, n_nextn = 0;
    hp->rope_base = get_float(m, "rope.freq_base", 10000.0f);
    hp->rms_eps = get_float(m, "attention.layer_norm_rms_epsilon", 1e-5f);
#define GET(sfx, req, def, lo, hi, dst) \
    if ((st = get_layer_int(m, sfx, req, def, lo, hi, dst, err, err_len))) return st
    GET("context_length", true, 0, 1, 1 << 30, &hp->n_ctx_train);
    GET("embedding_length", true, 0, 1, 1 << 20, &hp->n_embd);
    GET("block_count", true, 0, 1, MODEL_MAX_LAYERS, &n_block);
    GET("nextn_predict_layers", false, 0, 0, n_block - 1, &n_nextn);
    GET("attention.head_count", true, 0, 0, 1 << 14, &hp->n_head);
    char moe_key[128];   /* MoE models may leave feed_forward_length out */
    arch_key(m, "expert_count", moe_key, sizeof moe_key);
    GET("feed_forward_length", gguf_find_key(m->g, moe_key) < 0, 0, 0, 1 << 24, &hp->n_ff);
    hp->n_layer = n_block - n_nextn;
    if ((st = get_layer_ints(m, "attention.head_count_kv", hp->n_head, 0, hp->n_head, n_block, hp->head_kv, err,
                             err_len)))
        return st;
    hp->n_head_kv = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        if (hp->head_kv[il] && hp->n_head_kv && hp->head_kv[il] != hp->n_head_kv)
            return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: head_count_kv differs between layers");
        if (hp->head_kv[il]) hp->n_head_kv = hp->head_kv[il];
    }
    if (hp->n_head == 0)   /* no attention: no head or rope keys */
        return hp->rms_eps > 0 ? RECUR_OK
                               : rc_fail(err, err_len, RECUR_E_FORMAT, "model: layer_norm_rms_epsilon not positive");
    GET("attention.key_length", false, hp->n_embd / hp->n_head, 1, 1 << 14, &hp->head_dim_k);
    GET("attention.value_length", false, hp->head_dim_k, 1, 1 << 14, &hp->head_dim_v);
    GET("rope.dimension_count", false, hp->head_dim_k, 2, hp->head_dim_k, &hp->n_rot);
#undef GET
    if (hp->n_head_kv && hp->n_head % hp->n_head_kv)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: head_count %d is not a multiple of head_count_kv %d",
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot % 2)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: rope.dimension_count %d is odd", hp->n_rot);
    hp->rope_freq_scale = 1.0f;
    char key[128];
    gguf_str stype;
    arch_key(m, "rope.scaling.type", key, sizeof key);
    if (gguf_get_str(m->g, key, &stype) && !gguf_str_eq(stype, "none")) {
        const float factor = get_float(m, "rope.scaling.factor", 1.0f);
        if (gguf_str_eq(stype, "linear") && factor > 0) hp->rope_freq_scale = 1.0f / factor;
        else if (factor != 1.0f)
            return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: rope scaling '%.*s' is not supported yet",
                           (int)stype.len, stype.ptr);
    }
    if (!(hp->rope_base > 0) || !(hp->rms_eps > 0))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: rope.freq_base or layer_norm_rms_epsilon not positive");
    return RECUR_OK;
}

recur_status model_read_ssm_hparams(struct recur_model *m, bool mamba2, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    recur_status st;
#define GET(sfx, req, def, lo, hi, dst) \
    if ((st = get_layer_int(m, sfx, req, def, lo, hi, dst, err, err_len))) return st
    GET("ssm.conv_kernel", true, 0, 1, 64, &hp->ssm_d_conv);
    GET("ssm.inner_size", true, 0, 1, 1 << 20, &hp->ssm_d_inner);
    GET("ssm.state_size", true, 0, 1, 1 << 12, &hp->ssm_d_state);
    GET("ssm.time_step_rank", true, 0, 1, 1 << 20, &hp->ssm_dt_rank);
    GET("ssm.group_count", false, 1, 1, 1 << 12, &hp->ssm_n_group);
#undef GET
    const int64_t di = hp->ssm_d_inner, ds = hp->ssm_d_state, ng = hp->ssm_n_group;
    if (mamba2 && (di % hp->ssm_dt_rank || di % ng || hp->ssm_dt_rank % ng))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: ssm.inner_size %d, time_step_rank %d, group_count %d "
                       "do not divide", hp->ssm_d_inner, hp->ssm_dt_rank, hp->ssm_n_group);
    hp->rs_n_conv = (int32_t)(mamba2 ? di + 2 * ng * ds : di);
    hp->rs_n_in = (int32_t)(mamba2 ? 2 * di + 2 * ng * ds + hp->ssm_dt_rank : 2 * di);
    hp->rs_n_ssm = di * ds;
    for (int il = 0; il < hp->n_layer; il++) hp->recurrent[il] = true;
    return RECUR_OK;
}

recur_status model_layout(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    hp->n_layer_kv = hp->n_layer_rs = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        hp->kv_index[il] = hp->rs_index[il] = -1;
        if (hp->recurrent[il]) {
            hp->rs_index[il] = hp->n_layer_rs++;
        } else if (hp->head_kv[il] == 0 || hp->n_head == 0) {
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: attention layer %d has no heads", il);
        } else {
            hp->kv_index[il] = hp->n_layer_kv++;
        }
    }
    if (hp->n_layer_rs && hp->ssm_d_conv < 1)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: recurrent layers without a conv kernel length");
    return RECUR_OK;
}

/* ---- weight binding ---------------------------------------------------------------------- */

recur_status model_bind(struct recur_model *m, model_w *w, const char *name_fmt, int il, int64_t ne0,
                        int64_t ne1, bool required, char *err, size_t err_len) {
    char name[GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, name_fmt, il);
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    if (!t) {
        if (!required) return RECUR_OK;
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: tensor '%s' is missing", name);
    }
    const int64_t want[4] = { ne0, ne1 ? ne1 : 1, 1, 1 };
    if (t->ne[0] != want[0] || t->ne[1] != want[1] || t->ne[2] != 1 || t->ne[3] != 1)
        return rc_fail(err, err_len, RECUR_E_FORMAT,
                       "model: tensor '%s' has shape {%lld, %lld, %lld, %lld}, expected {%lld, %lld}", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)want[0], (long long)want[1]);
    if (!tensor_type_supported(t->type))
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: tensor '%s' has type %s, not supported yet", name,
                       gguf_type_name(t->type));
    if (ne1 == 0 && t->type != GGUF_T_F32)
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: 1-D tensor '%s' has type %s, expected F32", name,
                       gguf_type_name(t->type));
    w->type = t->type;
    w->data = t->data;
    memcpy(w->ne, t->ne, sizeof w->ne);
    model_repack(m, w, strcmp(name, "token_embd.weight") == 0);   /* the embedding's rows are looked up */
    return RECUR_OK;
}

recur_status model_bind_f32(struct recur_model *m, model_w *w, const char *name_fmt, int il, int64_t ne0,
                            int64_t ne1, bool f32, char *err, size_t err_len) {
    recur_status st = model_bind(m, w, name_fmt, il, ne0, ne1, true, err, err_len);
    if (st || !f32 || w->type == GGUF_T_F32) return st;
    char name[GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, name_fmt, il);
    return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: tensor '%s' has type %s, expected F32", name,
                   gguf_type_name(w->type));
}

recur_status model_bind_globals(struct recur_model *m, const char *final_norm, char *err, size_t err_len) {
    model_weights *W = &m->w;
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    recur_status st;
    if ((st = model_bind(m, &W->token_embd, "token_embd.weight", 0, E, V, true, err, err_len))) return st;
    if ((st = model_bind(m, &W->output_norm, final_norm, 0, E, 0, true, err, err_len))) return st;
    if ((st = model_bind(m, &W->output, "output.weight", 0, E, V, false, err, err_len))) return st;
    if (!W->output.data) {
        W->output = W->token_embd;
        m->hp.tied_output = true;
    }
    return RECUR_OK;
}

recur_status model_bind_llama_like(struct recur_model *m, bool qk_norm, char *err, size_t err_len) {
    const model_hparams *hp = &m->hp;
    model_weights *W = &m->w;
    const int64_t E = hp->n_embd, V = hp->n_vocab;
    const int64_t nq = (int64_t)hp->n_head * hp->head_dim_k, nk = (int64_t)hp->n_head_kv * hp->head_dim_k;
    const int64_t nv = (int64_t)hp->n_head_kv * hp->head_dim_v, no = (int64_t)hp->n_head * hp->head_dim_v;
    recur_status st;
#define BIND(w, name, il, a, b, req) \
    if ((st = model_bind(m, w, name, il, a, b, req, err, err_len))) return st
    BIND(&W->token_embd, "token_embd.weight", 0, E, V, true);
    BIND(&W->output_norm, "output_norm.weight", 0, E, 0, true);
    BIND(&W->output, "output.weight", 0, E, V, false);
    BIND(&W->rope_freqs, "rope_freqs.weight", 0, hp->n_rot / 2, 0, false);
    if (!W->output.data) { W->output = W->token_embd; m->hp.tied_output = true; }
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &W->layers[il];
        BIND(&L->attn_norm, "blk.%d.attn_norm.weight", il, E, 0, true);
        BIND(&L->wq, "blk.%d.attn_q.weight", il, E, nq, true);
        BIND(&L->wk, "blk.%d.attn_k.weight", il, E, nk, true);
        BIND(&L->wv, "blk.%d.attn_v.weight", il, E, nv, true);
        BIND(&L->wo, "blk.%d.attn_output.weight", il, no, E, true);
        BIND(&L->bo, "blk.%d.attn_output.bias", il, E, 0, false);
        BIND(&L->q_norm, "blk.%d.attn_q_norm.weight", il, hp->head_dim_k, 0, qk_norm);
        BIND(&L->k_norm, "blk.%d.attn_k_norm.weight", il, hp->head_dim_k, 0, qk_norm);
        BIND(&L->ffn_norm, "blk.%d.ffn_norm.weight", il, E, 0, true);
        BIND(&L->ffn_gate, "blk.%d.ffn_gate.weight", il, E, hp->n_ff, true);
        BIND(&L->ffn_up, "blk.%d.ffn_up.weight", il, E, hp->n_ff, true);
        BIND(&L->ffn_down, "blk.%d.ffn_down.weight", il, hp->n_ff, E, true);
    }
#undef BIND
    return RECUR_OK;
}

/* ---- open / close ------------------------------------------------------------------------ */

static void model_tally(struct recur_model *m) {
    uint64_t bytes_by_type[GGUF_T_COUNT] = { 0 };
    for (int64_t i = 0; i < gguf_n_tensors(m->g); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        m->n_bytes += t->nbytes;
        if (t->n_dims >= 2 && t->type < GGUF_T_COUNT) bytes_by_type[t->type] += t->nbytes;
    }
    for (uint32_t ty = 0; ty < GGUF_T_COUNT; ty++)
        if (bytes_by_type[ty] > bytes_by_type[m->file_type]) m->file_type = ty;
}

static recur_status model_open(struct recur_model *m, const char *path, const recur_model_params *p,
                               char *err, size_t err_len) {
    recur_status st = gguf_open(path, &m->g, err, err_len);
    if (st == RECUR_E_FORMAT && err && err_len) {
        /* name the file (a truncated download, a wrong path): programs print this line alone */
        char why[512];
        snprintf(why, sizeof why, "%s", err);
        return rc_fail(err, err_len, st, "%s: %s", path, why);
    }
    if (st) return st;
    if ((st = vocab_load(m->g, &m->vocab, err, err_len))) return st;
    gguf_str arch;
    if (!gguf_get_str(m->g, "general.architecture", &arch))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: general.architecture is missing");
    if (arch.len >= sizeof m->hp.arch) arch.len = sizeof m->hp.arch - 1;
    memcpy(m->hp.arch, arch.ptr, arch.len);
    m->hp.arch[arch.len] = 0;
    if (p->vocab_only) return RECUR_OK;
    /* RECUR_NO_REPACK: unset, empty or 0 packs; "q6", "q8", "q6,q8", "q40" or "q5" leave those types
     * unpacked (to compare); anything else packs none. RECUR_REPACK_Q8=1 packs Q8_0 where the
     * table has the packed kernel but prefers the file's layout (to compare). */
    const char *nr = getenv("RECUR_NO_REPACK"), *rq8 = getenv("RECUR_REPACK_Q8");
    const bool q6_off = nr && (strcmp(nr, "q6") == 0 || strcmp(nr, "q6,q8") == 0);
    const bool q8_off = nr && (strcmp(nr, "q8") == 0 || strcmp(nr, "q6,q8") == 0);
    const bool q40_off = nr && strcmp(nr, "q40") == 0;
    const bool q5_off = nr && strcmp(nr, "q5") == 0;
    const tensor_kernels *kt = tensor_kernels_active();
    m->repack = !p->no_repack && !(nr && *nr && strcmp(nr, "0") != 0 && !q6_off && !q8_off && !q40_off && !q5_off) &&
                tensor_q4_K_r16_preferred(kt);
    m->repack_q6 = m->repack && !q6_off && tensor_q6_K_r16_preferred(kt);
    m->repack_q8 = m->repack && !q8_off &&
                   (tensor_q8_0_r16_preferred(kt) || (rq8 && strcmp(rq8, "1") == 0 && kt->q8_0_r16_native));
    m->repack_q40 = m->repack && !q40_off && tensor_q4_0_r16_preferred(kt);
    m->repack_q5 = m->repack && !q5_off && tensor_q5_K_r16_preferred(kt);
    m->repack_q5_fives = m->repack_q5 && kt->q5_K_r16_fives;
    /* every page now, in 2 MiB pages where it can (gguf_map.c), as decode reads them all; and
     * before packing unmaps the packed matrices' pages */
    gguf_map_all(m->g);
    m->arch = model_arch_find(m->hp.arch);
    if (!m->arch)
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: architecture '%s' is not supported (supported: %s)",
                       m->hp.arch, model_arch_list());
    if ((st = model_read_common_hparams(m, err, err_len))) return st;
    const gguf_tensor *emb = gguf_find_tensor(m->g, "token_embd.weight");
    if (!emb) return rc_fail(err, err_len, RECUR_E_FORMAT, "model: tensor 'token_embd.weight' is missing");
    if (emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: token_embd has %lld rows", (long long)emb->ne[1]);
    m->hp.n_vocab = (int32_t)emb->ne[1];
    if (vocab_n_tokens(m->vocab) > m->hp.n_vocab)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: the vocabulary has %d tokens but token_embd only %d rows",
                       vocab_n_tokens(m->vocab), m->hp.n_vocab);
    if ((st = m->arch->hparams(m, err, err_len))) return st;
    if ((st = model_layout(m, err, err_len))) return st;
    m->w.layers = calloc((size_t)m->hp.n_layer, sizeof *m->w.layers);
    if (!m->w.layers) return rc_fail(err, err_len, RECUR_E_NOMEM, "model: out of memory");
    if ((st = m->arch->bind(m, err, err_len))) return st;
    model_tally(m);
    return RECUR_OK;
}

recur_status recur_model_load(const char *path, const recur_model_params *params, recur_model **out,
                              char *err, size_t err_len) {
    recur_init();
    *out = NULL;
    const recur_model_params def = recur_model_default_params();
    recur_model *m = calloc(1, sizeof *m);
    if (!m) return rc_fail(err, err_len, RECUR_E_NOMEM, "model: out of memory");
    recur_status st = model_open(m, path, params ? params : &def, err, err_len);
    if (st) {
        recur_model_free(m);
        return st;
    }
    *out = m;
    return RECUR_OK;
}

void recur_model_free(recur_model *m) {
    if (!m) return;
    vocab_free(m->vocab);
    free(m->w.layers);
    model_repack_free(m);
    gguf_close(m->g);
    free(m);
}

recur_model_params recur_model_default_params(void) {
    recur_model_params p = { .vocab_only = false, .no_repack = false };
    return p;
}
