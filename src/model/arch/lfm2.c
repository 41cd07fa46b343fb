/* lfm2.c — the `lfm2` architecture (Liquid LFM2): hybrid of gated short-convolution layers
 * (head_count_kv == 0) and GQA attention layers with per-head q/k RMSNorm and NEOX RoPE.
 *   h = x + Op(RMSNorm(x)·attn_norm);  out = h + SwiGLU-FFN(RMSNorm(h)·ffn_norm)
 * The final norm is the tensor named token_embd_norm. Short conv: model/blocks/shortconv.c. */
#include <stdio.h>

#include "core/err.h"
#include "model/forward.h"
#include "model/model.h"

static recur_status lfm2_hparams(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    char key[64];
    snprintf(key, sizeof key, "%s.shortconv.l_cache", hp->arch);
    int64_t l_cache = 0;
    if (!gguf_get_int(m->g, key, &l_cache) || l_cache < 2 || l_cache > 64)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s missing or outside 2..64", key);
    if (hp->n_head == 0) return rc_fail(err, err_len, RECUR_E_FORMAT, "model: lfm2 needs attention.head_count");
    hp->rope_kind = OP_ROPE_NEOX;
    hp->ssm_d_conv = (int32_t)l_cache;
    hp->ssm_d_inner = hp->n_embd;
    hp->rs_n_in = 3 * hp->n_embd;
    hp->rs_n_conv = hp->n_embd;
    hp->rs_n_ssm = 0;
    for (int il = 0; il < hp->n_layer; il++) hp->recurrent[il] = hp->head_kv[il] == 0;
    return RECUR_OK;
}

static recur_status lfm2_bind_layer(struct recur_model *m, int il, char *err, size_t err_len) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->w.layers[il];
    const int64_t E = hp->n_embd, nq = (int64_t)hp->n_head * hp->head_dim_k;
    const int64_t nk = (int64_t)hp->n_head_kv * hp->head_dim_k, nv = (int64_t)hp->n_head_kv * hp->head_dim_v;
    recur_status st;
#define BIND(w, name, a, b, f32) \
    if ((st = model_bind_f32(m, w, name, il, a, b, f32, err, err_len))) return st
    BIND(&L->attn_norm, "blk.%d.attn_norm.weight", E, 0, true);
    BIND(&L->ffn_norm, "blk.%d.ffn_norm.weight", E, 0, true);
    BIND(&L->ffn_gate, "blk.%d.ffn_gate.weight", E, hp->n_ff, false);
    BIND(&L->ffn_up, "blk.%d.ffn_up.weight", E, hp->n_ff, false);
    BIND(&L->ffn_down, "blk.%d.ffn_down.weight", hp->n_ff, E, false);
    if (hp->recurrent[il]) {
        BIND(&L->ssm_in, "blk.%d.shortconv.in_proj.weight", E, 3 * E, false);
        BIND(&L->ssm_conv1d, "blk.%d.shortconv.conv.weight", hp->ssm_d_conv, E, true);
        BIND(&L->ssm_out, "blk.%d.shortconv.out_proj.weight", E, E, false);
        return RECUR_OK;
    }
    BIND(&L->wq, "blk.%d.attn_q.weight", E, nq, false);
    BIND(&L->wk, "blk.%d.attn_k.weight", E, nk, false);
    BIND(&L->wv, "blk.%d.attn_v.weight", E, nv, false);
    BIND(&L->wo, "blk.%d.attn_output.weight", (int64_t)hp->n_head * hp->head_dim_v, E, false);
    BIND(&L->q_norm, "blk.%d.attn_q_norm.weight", hp->head_dim_k, 0, true);
    BIND(&L->k_norm, "blk.%d.attn_k_norm.weight", hp->head_dim_k, 0, true);
#undef BIND
    return RECUR_OK;
}

static recur_status lfm2_bind(struct recur_model *m, char *err, size_t err_len) {
    recur_status st = model_bind_globals(m, "token_embd_norm.weight", err, err_len);
    for (int il = 0; !st && il < m->hp.n_layer; il++) st = lfm2_bind_layer(m, il, err, err_len);
    return st;
}

static void lfm2_forward(const struct recur_model *m, model_fwd *f) {
    const model_hparams *hp = &m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->w.layers[il];
        fwd_rmsnorm_rows(f, f->xb, f->x, &L->attn_norm, hp->n_embd, hp->rms_eps);
        if (hp->recurrent[il]) block_shortconv(m, f, L, hp->rs_index[il]);
        else block_attention(m, f, L, hp->kv_index[il]);
        if (il == hp->n_layer - 1 && !fwd_keep_out_rows(f, hp->n_embd)) break;   /* rows no output reads */
        block_ffn_swiglu(m, f, L);
    }
}

const model_arch model_arch_lfm2 = { "lfm2", lfm2_hparams, lfm2_bind, lfm2_forward };
