/* gguf_synth_plan.c — what llama.cpp's converter writes, per architecture: the {arch}.* keys
 * (in the order convert_hf_to_gguf.py sets them) and the tensor names and shapes (GGUF order:
 * {n_in, n_out}; experts {n_in, n_out, n_expert}).
 *
 * Facts (conversion/{llama,qwen,mamba,lfm2}.py, src/models/<arch>.cpp; ARCHITECTURES.md):
 *  - qwen35 / qwen35moe / qwen3next: layer il < n_layer is Gated DeltaNet unless
 *    (il + 1) % full_attention_interval == 0; MTP blocks (converted by default) follow the
 *    main stack as full-attention blocks plus nextn.{eh_proj,enorm,hnorm,shared_head_norm},
 *    and block_count counts them (nextn_predict_layers says how many).
 *  - mamba / mamba2: no attention (head_count 0, feed_forward_length 0), context 2^20.
 *  - lfm2: head_count_kv is a per-layer int32 array, 0 for short-conv layers; the final norm
 *    is named token_embd_norm; head_dim = n_embd / n_head (no key_length key).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf_synth.h"

/* ---- tensor lists ------------------------------------------------------------------------ */

typedef struct plan {
    synth_tensor *t;
    int           n;
    char          pfx[32];   /* "blk.N." of the layer being planned */
} plan;

/* Appends a tensor of up to 3 dims (trailing zero dims are absent). */
static void add(plan *pl, const char *name, int64_t ne0, int64_t ne1, int64_t ne2) {
    synth_tensor *x = &pl->t[pl->n++];
    snprintf(x->name, sizeof x->name, "%s%s", pl->pfx, name);
    x->n_dims = ne2 ? 3 : ne1 ? 2 : 1;
    x->ne[0] = ne0;
    x->ne[1] = ne1 ? ne1 : 1;
    x->ne[2] = ne2 ? ne2 : 1;
    x->ne[3] = 1;
}

static void set_layer(plan *pl, int il) {
    if (il < 0) pl->pfx[0] = 0;
    else snprintf(pl->pfx, sizeof pl->pfx, "blk.%d.", il);
}

static void add_globals(plan *pl, const synth_preset *p, const char *final_norm) {
    set_layer(pl, -1);
    add(pl, "token_embd.weight", p->n_embd, p->n_vocab, 0);
    if (!p->tied) add(pl, "output.weight", p->n_embd, p->n_vocab, 0);
    add(pl, final_norm, p->n_embd, 0, 0);
}

static void add_swiglu(plan *pl, int64_t E, int64_t ff) {
    add(pl, "ffn_gate.weight", E, ff, 0);
    add(pl, "ffn_up.weight", E, ff, 0);
    add(pl, "ffn_down.weight", ff, E, 0);
}

/* Q/K/V/O of an attention layer; gated (qwen35*): attn_q gives per head [q | gate]. */
static void add_attention(plan *pl, const synth_preset *p, bool gated, bool qk_norm) {
    const int64_t E = p->n_embd, D = p->head_dim, Q = (int64_t)p->n_head * D, KV = (int64_t)p->n_head_kv * D;
    add(pl, "attn_q.weight", E, gated ? 2 * Q : Q, 0);
    add(pl, "attn_k.weight", E, KV, 0);
    add(pl, "attn_v.weight", E, KV, 0);
    add(pl, "attn_output.weight", Q, E, 0);
    if (qk_norm) {
        add(pl, "attn_q_norm.weight", D, 0, 0);
        add(pl, "attn_k_norm.weight", D, 0, 0);
    }
}

static int plan_llama(const synth_preset *p, plan *pl) {
    const bool qwen3 = !strcmp(p->arch, "qwen3");
    add_globals(pl, p, "output_norm.weight");
    for (int il = 0; il < p->n_layer; il++) {
        set_layer(pl, il);
        add(pl, "attn_norm.weight", p->n_embd, 0, 0);
        add_attention(pl, p, false, qwen3);
        add(pl, "ffn_norm.weight", p->n_embd, 0, 0);
        add_swiglu(pl, p->n_embd, p->n_ff);
    }
    return pl->n;
}

/* ---- Qwen3.5 / Qwen3-Next ------------------------------------------------------------------ */

static void add_deltanet(plan *pl, const synth_preset *p, bool next) {
    const int64_t E = p->n_embd, nv = p->ssm_dt_rank, di = p->ssm_inner;
    const int64_t conv = 2 * (int64_t)p->ssm_groups * p->ssm_state + di;   /* q | k | v channels */
    add(pl, "attn_qkv.weight", E, conv, 0);
    add(pl, "attn_gate.weight", E, di, 0);
    add(pl, "ssm_conv1d.weight", p->ssm_conv, conv, 0);
    add(pl, "ssm_dt.bias", nv, 0, 0);
    add(pl, "ssm_a", nv, 0, 0);
    if (next) {
        add(pl, "ssm_ba.weight", E, 2 * nv, 0);
    } else {
        add(pl, "ssm_beta.weight", E, nv, 0);
        add(pl, "ssm_alpha.weight", E, nv, 0);
    }
    add(pl, "ssm_norm.weight", p->ssm_state, 0, 0);
    add(pl, "ssm_out.weight", di, E, 0);
}

/* Router, experts {in, out, n_expert}, and the shared expert gated by a one-output linear
 * (the converter keeps its HF shape [1, n_embd], i.e. {n_embd, 1}). */
static void add_moe(plan *pl, const synth_preset *p) {
    const int64_t E = p->n_embd, F = p->n_ff_exp, X = p->n_expert, S = p->n_ff_shexp;
    add(pl, "ffn_gate_inp.weight", E, X, 0);
    add(pl, "ffn_gate_exps.weight", E, F, X);
    add(pl, "ffn_up_exps.weight", E, F, X);
    add(pl, "ffn_down_exps.weight", F, E, X);
    add(pl, "ffn_gate_inp_shexp.weight", E, 1, 0);
    add(pl, "ffn_gate_shexp.weight", E, S, 0);
    add(pl, "ffn_up_shexp.weight", E, S, 0);
    add(pl, "ffn_down_shexp.weight", S, E, 0);
}

static int plan_qwen35(const synth_preset *p, plan *pl) {
    const bool next = !strcmp(p->arch, "qwen3next");
    const int64_t E = p->n_embd;
    add_globals(pl, p, "output_norm.weight");
    for (int il = 0; il < p->n_layer + p->n_nextn; il++) {
        const bool mtp = il >= p->n_layer;
        const bool recurrent = !mtp && (il + 1) % p->full_attn != 0;
        set_layer(pl, il);
        add(pl, "attn_norm.weight", E, 0, 0);
        add(pl, "post_attention_norm.weight", E, 0, 0);
        if (recurrent) add_deltanet(pl, p, next);
        else add_attention(pl, p, true, true);
        if (p->n_expert) add_moe(pl, p);
        else add_swiglu(pl, E, p->n_ff);
        if (mtp) {   /* HF mtp.fc / pre_fc_norm_embedding / pre_fc_norm_hidden / norm */
            add(pl, "nextn.eh_proj.weight", 2 * E, E, 0);
            add(pl, "nextn.enorm.weight", E, 0, 0);
            add(pl, "nextn.hnorm.weight", E, 0, 0);
            add(pl, "nextn.shared_head_norm.weight", E, 0, 0);
        }
    }
    return pl->n;
}

/* ---- Mamba, Mamba-2, LFM2 -------------------------------------------------------------------- */

static int plan_mamba(const synth_preset *p, plan *pl) {
    const int64_t E = p->n_embd, di = p->ssm_inner, ds = p->ssm_state, r = p->ssm_dt_rank;
    add_globals(pl, p, "output_norm.weight");
    for (int il = 0; il < p->n_layer; il++) {
        set_layer(pl, il);
        add(pl, "attn_norm.weight", E, 0, 0);
        add(pl, "ssm_in.weight", E, 2 * di, 0);                  /* x | z */
        add(pl, "ssm_conv1d.weight", p->ssm_conv, di, 0);
        add(pl, "ssm_conv1d.bias", di, 0, 0);
        add(pl, "ssm_x.weight", di, r + 2 * ds, 0);              /* dt | B | C */
        add(pl, "ssm_dt.weight", r, di, 0);
        add(pl, "ssm_dt.bias", di, 0, 0);
        add(pl, "ssm_a", ds, di, 0);
        add(pl, "ssm_d", di, 0, 0);
        add(pl, "ssm_out.weight", di, E, 0);
    }
    return pl->n;
}

static int plan_mamba2(const synth_preset *p, plan *pl) {
    const int64_t E = p->n_embd, di = p->ssm_inner, ng = p->ssm_groups, nh = p->ssm_dt_rank;
    const int64_t conv = di + 2 * ng * p->ssm_state;                /* x | B | C */
    add_globals(pl, p, "output_norm.weight");
    for (int il = 0; il < p->n_layer; il++) {
        set_layer(pl, il);
        add(pl, "attn_norm.weight", E, 0, 0);
        add(pl, "ssm_in.weight", E, di + conv + nh, 0);          /* z | xBC | dt */
        add(pl, "ssm_conv1d.weight", p->ssm_conv, conv, 0);
        add(pl, "ssm_conv1d.bias", conv, 0, 0);
        add(pl, "ssm_dt.bias", nh, 0, 0);
        add(pl, "ssm_a", 1, nh, 0);
        add(pl, "ssm_d", 1, nh, 0);
        add(pl, "ssm_norm.weight", di / ng, ng, 0);
        add(pl, "ssm_out.weight", di, E, 0);
    }
    return pl->n;
}

static int plan_lfm2(const synth_preset *p, plan *pl) {
    const int64_t E = p->n_embd;
    add_globals(pl, p, "token_embd_norm.weight");
    for (int il = 0; il < p->n_layer; il++) {
        set_layer(pl, il);
        add(pl, "attn_norm.weight", E, 0, 0);
        if (p->attn_layers >> il & 1) {
            add_attention(pl, p, false, true);
        } else {
            add(pl, "shortconv.conv.weight", p->ssm_conv, E, 0);
            add(pl, "shortconv.in_proj.weight", E, 3 * E, 0);    /* B | C | x */
            add(pl, "shortconv.out_proj.weight", E, E, 0);
        }
        add(pl, "ffn_norm.weight", E, 0, 0);
        add_swiglu(pl, E, p->n_ff);
    }
    return pl->n;
}

static const struct {
    const char *arch;
    int (*plan)(const synth_preset *p, plan *pl);
} k_plans[] = {
    {"llama", plan_llama},         {"qwen3", plan_llama},   {"qwen35", plan_qwen35},
    {"qwen35moe", plan_qwen35},    {"qwen3next", plan_qwen35}, {"mamba", plan_mamba},
    {"mamba2", plan_mamba2},       {"lfm2", plan_lfm2},
};

int synth_plan(const synth_preset *p, synth_tensor **out) {
    *out = NULL;
    for (size_t i = 0; i < sizeof k_plans / sizeof k_plans[0]; i++) {
        if (strcmp(k_plans[i].arch, p->arch)) continue;
        /* no block has more than 24 tensors */
        plan pl = {.t = malloc((size_t)(4 + 24 * (p->n_layer + p->n_nextn)) * sizeof *pl.t)};
        if (!pl.t) return -1;
        *out = pl.t;
        return k_plans[i].plan(p, &pl);
    }
    return -1;
}

/* ---- hyperparameters ------------------------------------------------------------------------ */

typedef struct keys {
    gguf_writer        *w;
    const synth_preset *p;
    recur_status        st;
    char                buf[128];   /* the key being set (the writer copies it) */
} keys;

static const char *key(keys *k, const char *suffix) {
    snprintf(k->buf, sizeof k->buf, "%s.%s", k->p->arch, suffix);
    return k->buf;
}

static void u32(keys *k, const char *suffix, int v) { k->st |= gguf_writer_set_u32(k->w, key(k, suffix), (uint32_t)v); }
static void f32(keys *k, const char *suffix, float v) { k->st |= gguf_writer_set_f32(k->w, key(k, suffix), v); }

/* TextModel.set_gguf_parameters: the keys every converted model starts with. */
static void base_keys(keys *k, bool ff) {
    const synth_preset *p = k->p;
    u32(k, "block_count", p->n_layer + p->n_nextn);
    u32(k, "context_length", p->n_ctx);
    u32(k, "embedding_length", p->n_embd);
    if (ff) u32(k, "feed_forward_length", p->n_ff);
    u32(k, "attention.head_count", p->n_head);
}

static void put_llama(keys *k) {
    const synth_preset *p = k->p;
    base_keys(k, true);
    u32(k, "attention.head_count_kv", p->n_head_kv);
    f32(k, "rope.freq_base", p->rope_base);
    f32(k, "attention.layer_norm_rms_epsilon", p->eps);
    if (!strcmp(p->arch, "qwen3")) {          /* Qwen3 configs carry head_dim */
        u32(k, "attention.key_length", p->head_dim);
        u32(k, "attention.value_length", p->head_dim);
    } else {                                  /* LlamaModel writes both always */
        u32(k, "rope.dimension_count", p->head_dim);
        u32(k, "vocab_size", p->n_vocab);
    }
}

/* Qwen3_5(Moe)TextModel / Qwen3NextModel: TextModel keys, Qwen2MoeModel's expert sizes, the
 * MTP mixin's nextn_predict_layers, then Qwen3NextModel's ssm.* keys. */
static void put_qwen35(keys *k) {
    const synth_preset *p = k->p;
    base_keys(k, p->n_ff > 0);
    u32(k, "attention.head_count_kv", p->n_head_kv);
    if (strcmp(p->arch, "qwen3next")) {       /* Qwen3.5: mrope_section, padded to 4 */
        int32_t s[4];
        for (int i = 0; i < 4; i++) s[i] = p->rope_sections[i];
        k->st |= gguf_writer_set_arr(k->w, key(k, "rope.dimension_sections"), GGUF_KV_INT32, s, 4);
    }
    f32(k, "rope.freq_base", p->rope_base);
    f32(k, "attention.layer_norm_rms_epsilon", p->eps);
    if (p->n_expert) {
        u32(k, "expert_count", p->n_expert);
        u32(k, "expert_used_count", p->n_expert_used);
    }
    u32(k, "attention.key_length", p->head_dim);
    u32(k, "attention.value_length", p->head_dim);
    if (p->n_expert) {
        u32(k, "expert_feed_forward_length", p->n_ff_exp);
        u32(k, "expert_shared_feed_forward_length", p->n_ff_shexp);
    }
    if (p->n_nextn) u32(k, "nextn_predict_layers", p->n_nextn);
    u32(k, "ssm.conv_kernel", p->ssm_conv);
    u32(k, "ssm.state_size", p->ssm_state);
    u32(k, "ssm.group_count", p->ssm_groups);
    u32(k, "ssm.time_step_rank", p->ssm_dt_rank);
    u32(k, "ssm.inner_size", p->ssm_inner);
    u32(k, "full_attention_interval", p->full_attn);
    u32(k, "rope.dimension_count", p->n_rot);
}

/* MambaModel / Mamba2Model write their own list (no TextModel keys). */
static void put_mamba(keys *k) {
    const synth_preset *p = k->p;
    const bool m2 = !strcmp(p->arch, "mamba2");
    u32(k, "context_length", p->n_ctx);
    u32(k, "embedding_length", p->n_embd);
    u32(k, "feed_forward_length", 0);
    u32(k, "attention.head_count", 0);
    u32(k, "block_count", p->n_layer);
    u32(k, "ssm.conv_kernel", p->ssm_conv);
    u32(k, "ssm.inner_size", p->ssm_inner);
    u32(k, "ssm.state_size", p->ssm_state);
    u32(k, "ssm.time_step_rank", p->ssm_dt_rank);
    if (m2) u32(k, "ssm.group_count", p->ssm_groups);
    f32(k, "attention.layer_norm_rms_epsilon", p->eps);
    if (!m2) k->st |= gguf_writer_set_bool(k->w, key(k, "ssm.dt_b_c_rms"), false);
}

static void put_lfm2(keys *k) {
    const synth_preset *p = k->p;
    int32_t kv[64];   /* attn_layers has 64 bits */
    const int n = p->n_layer < 64 ? p->n_layer : 64;
    for (int il = 0; il < n; il++) kv[il] = p->attn_layers >> il & 1 ? p->n_head_kv : 0;
    base_keys(k, true);
    k->st |= gguf_writer_set_arr(k->w, key(k, "attention.head_count_kv"), GGUF_KV_INT32, kv, (uint64_t)n);
    f32(k, "rope.freq_base", p->rope_base);
    u32(k, "vocab_size", p->n_vocab);
    u32(k, "shortconv.l_cache", p->ssm_conv);
    f32(k, "attention.layer_norm_rms_epsilon", p->eps);
}

recur_status synth_put_hparams(gguf_writer *w, const synth_preset *p) {
    keys k = {.w = w, .p = p};
    if (!strcmp(p->arch, "llama") || !strcmp(p->arch, "qwen3")) put_llama(&k);
    else if (!strncmp(p->arch, "qwen3", 5)) put_qwen35(&k);
    else if (!strncmp(p->arch, "mamba", 5)) put_mamba(&k);
    else if (!strcmp(p->arch, "lfm2")) put_lfm2(&k);
    else return RECUR_E_INVALID;
    return k.st ? RECUR_E_NOMEM : RECUR_OK;
}
