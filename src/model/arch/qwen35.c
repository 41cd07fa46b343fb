/* qwen35.c — the `qwen35`, `qwen35moe` and `qwen3next` architectures: hybrids of Gated DeltaNet
 * layers (model/blocks/deltanet.c) and gated GQA attention layers (per-head q/k RMSNorm, partial
 * NEOX RoPE — Qwen3.5's IMROPE reduces to it for text — and a sigmoid output gate).
 *   h = x + Mixer(RMSNorm(x)·attn_norm);  out = h + FFN(RMSNorm(h)·post_attention_norm)
 * FFN: dense SwiGLU (qwen35) or MoE with a gated shared expert (model/blocks/moe.c).
 * Layer kind: attention.recurrent_layers when present, else recurrent iff
 * (il + 1) % full_attention_interval != 0. MTP (nextn) layers after the main stack are not run.
 * Norm weights already include the +1 of HF's zero-centred RMSNorm (converter). */
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "model/forward.h"
#include "model/model.h"

static recur_status qwen35_layer_kinds(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    char key[96];
    gguf_arr a;
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", hp->arch);
    if (gguf_get_arr(m->g, key, &a)) {
        if (a.n < (uint64_t)hp->n_layer || a.elem_type == GGUF_KV_STRING)
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s: expected %d flags", key, hp->n_layer);
        for (int il = 0; il < hp->n_layer; il++) hp->recurrent[il] = gguf_arr_int(&a, (uint64_t)il) != 0;
        return RECUR_OK;
    }
    int64_t interval = 4;
    snprintf(key, sizeof key, "%s.full_attention_interval", hp->arch);
    if (gguf_find_key(m->g, key) >= 0 && (!gguf_get_int(m->g, key, &interval) || interval < 1 || interval > 1024))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s is not an integer in 1..1024", key);
    for (int il = 0; il < hp->n_layer; il++) hp->recurrent[il] = (il + 1) % interval != 0;
    return RECUR_OK;
}

static recur_status qwen35_hparams(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    recur_status st = model_read_ssm_hparams(m, false, err, err_len);
    if (st) return st;
    const int64_t d = hp->ssm_d_state, nk = hp->ssm_n_group, nv = hp->ssm_dt_rank;
    if (nv % nk || hp->ssm_d_inner != nv * d)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: ssm.time_step_rank %d, group_count %d, state_size %d, "
                       "inner_size %d do not fit a DeltaNet", hp->ssm_dt_rank, hp->ssm_n_group, hp->ssm_d_state,
                       hp->ssm_d_inner);
    if (hp->n_head == 0 || hp->head_dim_k != hp->head_dim_v)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: %s needs attention heads with key_length == "
                       "value_length", hp->arch);
    hp->rope_kind = OP_ROPE_NEOX;
    hp->attn_gated = true;
    hp->ssm_grouped = strcmp(hp->arch, "qwen3next") == 0;
    hp->rs_n_conv = hp->rs_n_in = (int32_t)(2 * nk * d + hp->ssm_d_inner);
    hp->rs_n_ssm = (int64_t)hp->ssm_d_inner * d;
    if ((st = qwen35_layer_kinds(m, err, err_len))) return st;
    return strcmp(hp->arch, "qwen35") ? model_read_moe_hparams(m, err, err_len) : RECUR_OK;
}

static recur_status qwen35_bind_layer(struct recur_model *m, int il, char *err, size_t err_len) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->w.layers[il];
    const int64_t E = hp->n_embd, D = hp->head_dim_k, H = hp->n_head, Hkv = hp->n_head_kv;
    const int64_t nv = hp->ssm_dt_rank, di = hp->ssm_d_inner;
    recur_status st;
#define BIND(w, name, a, b, f32) \
    if ((st = model_bind_f32(m, w, name, il, a, b, f32, err, err_len))) return st
    BIND(&L->attn_norm, "blk.%d.attn_norm.weight", E, 0, true);
    BIND(&L->ffn_norm, "blk.%d.post_attention_norm.weight", E, 0, true);
    if (hp->n_expert) {
        if ((st = model_bind_moe(m, il, err, err_len))) return st;
    } else {
        BIND(&L->ffn_gate, "blk.%d.ffn_gate.weight", E, hp->n_ff, false);
        BIND(&L->ffn_up, "blk.%d.ffn_up.weight", E, hp->n_ff, false);
        BIND(&L->ffn_down, "blk.%d.ffn_down.weight", hp->n_ff, E, false);
    }
    if (!hp->recurrent[il]) {
        BIND(&L->wq, "blk.%d.attn_q.weight", E, 2 * H * D, false);
        BIND(&L->wk, "blk.%d.attn_k.weight", E, Hkv * D, false);
        BIND(&L->wv, "blk.%d.attn_v.weight", E, Hkv * D, false);
        BIND(&L->wo, "blk.%d.attn_output.weight", H * D, E, false);
        BIND(&L->q_norm, "blk.%d.attn_q_norm.weight", D, 0, true);
        BIND(&L->k_norm, "blk.%d.attn_k_norm.weight", D, 0, true);
        return RECUR_OK;
    }
    BIND(&L->wqkv, "blk.%d.attn_qkv.weight", E, hp->rs_n_in, false);
    BIND(&L->attn_gate, "blk.%d.attn_gate.weight", E, di, false);
    BIND(&L->ssm_conv1d, "blk.%d.ssm_conv1d.weight", hp->ssm_d_conv, hp->rs_n_conv, true);
    BIND(&L->ssm_dt_b, "blk.%d.ssm_dt.bias", nv, 0, true);
    BIND(&L->ssm_a, "blk.%d.ssm_a", nv, 0, true);
    BIND(&L->ssm_norm, "blk.%d.ssm_norm.weight", hp->ssm_d_state, 0, true);
    BIND(&L->ssm_out, "blk.%d.ssm_out.weight", di, E, false);
    if (hp->ssm_grouped) {
        BIND(&L->ssm_ba, "blk.%d.ssm_ba.weight", E, 2 * nv, false);
    } else {
        BIND(&L->ssm_beta, "blk.%d.ssm_beta.weight", E, nv, false);
        BIND(&L->ssm_alpha, "blk.%d.ssm_alpha.weight", E, nv, false);
    }
#undef BIND
    return RECUR_OK;
}

static recur_status qwen35_bind(struct recur_model *m, char *err, size_t err_len) {
    recur_status st = model_bind_globals(m, "output_norm.weight", err, err_len);
    for (int il = 0; !st && il < m->hp.n_layer; il++) st = qwen35_bind_layer(m, il, err, err_len);
    return st;
}

static void qwen35_forward(const struct recur_model *m, model_fwd *f) {
    const model_hparams *hp = &m->hp;
    for (int il = 0; il < hp->n_layer; il++) {
        const model_layer *L = &m->w.layers[il];
        fwd_rmsnorm_rows(f, f->xb, f->x, &L->attn_norm, hp->n_embd, hp->rms_eps);
        if (hp->recurrent[il]) block_deltanet(m, f, L, hp->rs_index[il]);
        else block_attention_gated(m, f, L, hp->kv_index[il]);
        if (il == hp->n_layer - 1 && !fwd_keep_out_rows(f, hp->n_embd)) break;   /* rows no output reads */
        if (hp->n_expert) block_ffn_moe(m, f, L);
        else block_ffn_swiglu(m, f, L);
    }
}

const model_arch model_arch_qwen35 = { "qwen35", qwen35_hparams, qwen35_bind, qwen35_forward };
const model_arch model_arch_qwen35moe = { "qwen35moe", qwen35_hparams, qwen35_bind, qwen35_forward };
const model_arch model_arch_qwen3next = { "qwen3next", qwen35_hparams, qwen35_bind, qwen35_forward };
