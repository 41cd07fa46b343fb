/* model.h — hyperparameters, weights and the per-architecture hooks (internal to librecur).
 *
 * A recur_model owns its gguf_file (weights are used in place from the mapping, never
 * copied, but for the Q4_K and Q6_K matrices model/repack.c rearranges in its own memory) and its
 * vocab. Architectures live one per file in model/arch/ and are found by name in one table
 * (model_arch_find). Each provides three hooks:
 *   hparams  reads the arch-specific keys into model_hparams (common keys are read before),
 *   bind     binds every tensor by name, checking types and shapes,
 *   forward  evaluates one ubatch through all layers (model/forward.h gives the shared state).
 */
#ifndef RECUR_MODEL_H
#define RECUR_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "recur.h"
#include "tensor/ops.h"
#include "vocab/vocab.h"

#define MODEL_MAX_LAYERS 512

/* A weight: a view of a GGUF tensor. data == NULL when an optional tensor is absent. */
typedef struct model_w {
    uint32_t    type;       /* GGUF_T_* */
    const void *data;
    int64_t     ne[GGUF_MAX_DIMS];
    bool        r16;        /* Q4_K, Q6_K, Q8_0, Q4_0 or Q5_K packed 16 rows to a group at data (model/repack.c) */
} model_w;

/* The wtype tensor_matmul and tensor_get_row take for w (packed: TENSOR_T_Q4_K_R16,
 * TENSOR_T_Q6_K_R16, TENSOR_T_Q8_0_R16, TENSOR_T_Q4_0_R16 or TENSOR_T_Q5_K_R16). */
static inline uint32_t model_w_wtype(const model_w *w) {
    return w->r16 ? TENSOR_T_R16(w->type) : w->type;
}

typedef struct model_hparams {
    char     arch[32];
    int32_t  n_vocab;
    int32_t  n_embd;
    int32_t  n_layer;       /* layers of the main stack (block_count - nextn layers) */
    int32_t  n_head;        /* 0 for models without attention (mamba) */
    int32_t  n_head_kv;     /* the attention layers' value (all equal); 0 when none */
    int32_t  head_dim_k;    /* attention.key_length */
    int32_t  head_dim_v;    /* attention.value_length */
    int32_t  n_ff;
    int32_t  n_rot;         /* rope.dimension_count */
    int32_t  n_ctx_train;
    float    rope_base;
    float    rope_freq_scale;   /* 1 / linear rope scaling factor */
    float    rms_eps;
    op_rope_kind rope_kind;
    bool     tied_output;   /* no output.weight: the lm head is token_embd */

    /* per layer (the arch's hparams hook sets `recurrent`; model_layout fills the rest) */
    int32_t  head_kv[MODEL_MAX_LAYERS];    /* attention.head_count_kv of the layer (0: recurrent) */
    bool     recurrent[MODEL_MAX_LAYERS];  /* a recurrent (conv / SSM) layer, no KV */
    int32_t  kv_index[MODEL_MAX_LAYERS];   /* index among the attention layers, -1 */
    int32_t  rs_index[MODEL_MAX_LAYERS];   /* index among the recurrent layers, -1 */
    int32_t  n_layer_kv;                   /* attention layers */
    int32_t  n_layer_rs;                   /* recurrent layers */

    /* recurrent layers (ssm.* keys; LFM2: shortconv.l_cache) */
    int32_t  ssm_d_conv;    /* conv kernel length K */
    int32_t  ssm_d_inner;   /* mamba: inner size; lfm2: n_embd */
    int32_t  ssm_d_state;
    int32_t  ssm_dt_rank;   /* mamba: dt rank; mamba2: SSM heads */
    int32_t  ssm_n_group;
    int32_t  rs_n_in;       /* width of the in-projection of a recurrent layer */
    int32_t  rs_n_conv;     /* channels of the conv (its state is (K-1) rows of them) */
    int64_t  rs_n_ssm;      /* SSM-state floats per layer and sequence */

    /* qwen35 / qwen35moe / qwen3next */
    bool     attn_gated;    /* attn_q gives per head [q | gate]; output *= sigmoid(gate) */
    bool     ssm_grouped;   /* DeltaNet v head h uses k head h / (n_v/n_k) (qwen3next), else h % n_k */
    int32_t  n_expert;      /* MoE (0: dense FFN) */
    int32_t  n_expert_used;
    int32_t  n_ff_exp;      /* expert_feed_forward_length */
    int32_t  n_ff_shexp;    /* expert_shared_feed_forward_length (0: no shared expert) */
    float    expert_weights_scale;   /* 0 or 1: none */
} model_hparams;

/* Weights of one transformer layer (llama-family names; absent ones have data == NULL). */
typedef struct model_layer {
    model_w attn_norm;      /* {n_embd} */
    model_w wq;             /* {n_embd, n_head*head_dim_k} */
    model_w wk;             /* {n_embd, n_head_kv*head_dim_k} */
    model_w wv;             /* {n_embd, n_head_kv*head_dim_v} */
    model_w wo;             /* {n_head*head_dim_v, n_embd} */
    model_w bo;             /* {n_embd} optional attn_output.bias */
    model_w q_norm;         /* {head_dim_k} qwen3 */
    model_w k_norm;         /* {head_dim_k} qwen3 */
    model_w ffn_norm;       /* {n_embd} */
    model_w ffn_gate;       /* {n_embd, n_ff} */
    model_w ffn_up;         /* {n_embd, n_ff} */
    model_w ffn_down;       /* {n_ff, n_embd} */
    /* recurrent layers: mamba / mamba2 (ssm_*) and lfm2 shortconv (in_proj, conv, out_proj
     * are bound to ssm_in, ssm_conv1d, ssm_out) */
    model_w ssm_in;         /* {n_embd, rs_n_in} */
    model_w ssm_conv1d;     /* {K, rs_n_conv} */
    model_w ssm_conv1d_b;   /* {rs_n_conv} */
    model_w ssm_x;          /* mamba: {d_inner, dt_rank + 2 d_state} */
    model_w ssm_dt;         /* mamba: {dt_rank, d_inner} */
    model_w ssm_dt_b;       /* {d_inner} mamba, {n_head} mamba2 */
    model_w ssm_a;          /* {d_state, d_inner} mamba, {1, n_head} mamba2 */
    model_w ssm_d;          /* {d_inner} mamba, {1, n_head} mamba2 */
    model_w ssm_norm;       /* mamba2: {d_inner / n_group, n_group} */
    model_w ssm_out;        /* {d_inner, n_embd} */
    /* Gated DeltaNet (qwen35*, qwen3next): attn_qkv, the z projection, beta / alpha */
    model_w wqkv;           /* {n_embd, 2 n_k d_k + d_inner} */
    model_w attn_gate;      /* {n_embd, d_inner} */
    model_w ssm_beta;       /* {n_embd, n_v} */
    model_w ssm_alpha;      /* {n_embd, n_v} */
    model_w ssm_ba;         /* qwen3next {n_embd, 2 n_v}: per k group [b(r) | a(r)] */
    /* MoE FFN: experts are 3-D {in, out, n_expert} (ne[2] holds n_expert) */
    model_w ffn_gate_inp;       /* {n_embd, n_expert} */
    model_w ffn_gate_exps;      /* {n_embd, n_ff_exp, n_expert} */
    model_w ffn_up_exps;        /* {n_embd, n_ff_exp, n_expert} */
    model_w ffn_down_exps;      /* {n_ff_exp, n_embd, n_expert} */
    model_w ffn_gate_inp_shexp; /* {n_embd} (one output) */
    model_w ffn_gate_shexp;     /* {n_embd, n_ff_shexp} */
    model_w ffn_up_shexp;       /* {n_embd, n_ff_shexp} */
    model_w ffn_down_shexp;     /* {n_ff_shexp, n_embd} */
} model_layer;

typedef struct model_weights {
    model_w      token_embd;    /* {n_embd, n_vocab} */
    model_w      output_norm;   /* {n_embd} */
    model_w      output;        /* {n_embd, n_vocab}; = token_embd when tied */
    model_w      rope_freqs;    /* {n_rot/2} optional (llama3 rope scaling) */
    model_layer *layers;        /* [n_layer] */
} model_weights;

struct recur_model;
struct model_fwd;

typedef struct model_arch {
    const char *name;
    recur_status (*hparams)(struct recur_model *m, char *err, size_t err_len);
    recur_status (*bind)(struct recur_model *m, char *err, size_t err_len);
    /* Evaluates the ubatch held in f through every layer, leaving the final hidden states
     * (before the output norm) in f->x. */
    void (*forward)(const struct recur_model *m, struct model_fwd *f);
} model_arch;

struct recur_model {
    gguf_file         *g;
    const model_arch  *arch;
    model_hparams      hp;
    model_weights      w;
    vocab             *vocab;
    uint64_t           n_params;
    uint64_t           n_bytes;
    uint32_t           file_type;   /* dominant weight type, for descriptions */
    bool               repack;      /* model_bind packs what it can (model/repack.c): Q4_K */
    bool               repack_q6;   /* and Q6_K */
    bool               repack_q8;   /* and Q8_0 */
    bool               repack_q40;  /* and Q4_0 */
    bool               repack_q5;   /* and Q5_K */
    bool               repack_q5_fives;   /* in the five-byte layout (the table's q5_K_r16_fives) */
    void             **packed;      /* the packed weights' arena chunks [n_packed] */
    int                n_packed, cap_packed;
    uint8_t           *pack_at;     /* the free part of the last chunk */
    size_t             pack_left;
};

/* The architecture table (model/arch/arch_table.c). NULL when unknown. */
const model_arch *model_arch_find(const char *name);
/* Comma-separated list of the supported architecture names. */
const char *model_arch_list(void);

/* Reads the keys every architecture shares ({arch}.embedding_length, ...). */
recur_status model_read_common_hparams(struct recur_model *m, char *err, size_t err_len);

/* Reads the ssm.* keys into hp (mamba, mamba2). */
recur_status model_read_ssm_hparams(struct recur_model *m, bool mamba2, char *err, size_t err_len);
/* Reads the MoE keys (expert_count, ...) into hp (model/blocks/moe.c). */
recur_status model_read_moe_hparams(struct recur_model *m, char *err, size_t err_len);
/* Binds the MoE tensors of layer il (router, 3-D experts, optional shared expert). */
recur_status model_bind_moe(struct recur_model *m, int il, char *err, size_t err_len);
/* Fills kv_index / rs_index / n_layer_kv / n_layer_rs from `recurrent` (after the arch hook). */
recur_status model_layout(struct recur_model *m, char *err, size_t err_len);

/* Packs w (just bound) 16 rows to a group when it is a matrix of a multiple of 16 rows and
 * Q4_K (m->repack; not where `lookup`: rows looked up one by one, the token embedding) or
 * Q6_K or Q8_0 (m->repack_q6, m->repack_q8; tensor_get_row reads their packed rows) or Q4_0
 * or Q5_K (m->repack_q40, m->repack_q5; not where `lookup`)
 * (model/repack.c); a weight that cannot be packed (or no memory) stays as bound, or, when
 * its 2 MiB pages of the file are mostly packed ones', is copied next to them. */
void model_repack(struct recur_model *m, model_w *w, bool lookup);
/* Frees the packed buffers. */
void model_repack_free(struct recur_model *m);

/* Binds a tensor by printf-style name (il is substituted for %d when the name has one),
 * checking that its shape is {ne0, ne1} (ne1 = 0 for 1-D) and its type is computable.
 * A missing optional tensor leaves w->data NULL and succeeds. */
recur_status model_bind(struct recur_model *m, model_w *w, const char *name_fmt, int il,
                        int64_t ne0, int64_t ne1, bool required, char *err, size_t err_len);

/* model_bind of a required tensor; with f32, it must be F32 (read directly, not by a matmul). */
recur_status model_bind_f32(struct recur_model *m, model_w *w, const char *name_fmt, int il, int64_t ne0,
                            int64_t ne1, bool f32, char *err, size_t err_len);
/* Binds token_embd, the final norm (named final_norm) and output (tied to token_embd when absent). */
recur_status model_bind_globals(struct recur_model *m, const char *final_norm, char *err, size_t err_len);

/* Binds the tensors of a llama-family layer stack (shared by llama and qwen3). */
recur_status model_bind_llama_like(struct recur_model *m, bool qk_norm, char *err, size_t err_len);

#endif
