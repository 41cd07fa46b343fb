/* forward.h — the state of one ubatch while it passes through the layers (internal).
 *
 * The context (model/context.c) fills the inputs and owns every buffer, sized worst-case at
 * context creation: a forward pass allocates nothing. Rows are token-major: buffer[t][...]. */
#ifndef RECUR_MODEL_FORWARD_H
#define RECUR_MODEL_FORWARD_H

#include <stdint.h>

#include "core/threadpool.h"
#include "core/timing.h"
#include "memory/kv.h"
#include "memory/rs.h"
#include "model/model.h"
#include "tensor/tensor.h"

typedef struct model_fwd {
    /* inputs of this ubatch */
    int32_t             n_tok;
    const recur_token  *token;    /* [n_tok] */
    const recur_pos    *pos;      /* [n_tok] */
    const recur_seq_id *seq;      /* [n_tok] */
    const int32_t      *cell;     /* [n_tok] KV cell each token writes (attention models) */
    /* the rows whose final hidden state is read (the logits rows), ascending, n_out of them;
     * NULL: every row. See fwd_keep_out_rows. */
    const int32_t      *out_tok;
    int32_t             n_out;

    /* activations */
    float *x;        /* [n_tok][n_embd] residual stream */
    float *xb;       /* [n_tok][n_embd] normalised input of a block */
    float *tmp;      /* [n_tok][n_embd] block output before the residual add */
    float *q;        /* [n_tok][n_head * head_dim_k] */
    float *k;        /* [n_tok][n_head_kv * head_dim_k] */
    float *v;        /* [n_tok][n_head_kv * head_dim_v] */
    float *att;      /* [n_tok][n_head * head_dim_v] */
    float *qg;       /* [n_tok][2 * n_head * head_dim_k] gated attention: per head [q | gate] */
    float *hb;       /* [n_tok][n_ff] */
    float *hb2;      /* [n_tok][n_ff] */
    float *rope;     /* [n_tok][n_rot] cos/sin pairs per token */
    float *att_ws;   /* [n_threads][att_ws_floats] per-thread attention workspace */
    int64_t att_ws_floats;
    void  *mm_scratch;   /* quantized activations for tensor_matmul */
    /* recurrent layers */
    float *r_in;     /* [n_tok][rs_n_in] in-projection */
    float *r_conv;   /* [n_tok][rs_n_conv] conv output */
    float *r_xdb;    /* [n_tok][dt_rank + 2 d_state] mamba: dt | B | C; DeltaNet: beta, alpha */
    float *r_dt;     /* [n_tok][d_inner] mamba: dt */
    float *r_y;      /* [n_tok][d_inner] mixer output before the out-projection */
    /* MoE */
    float *moe;      /* [n_tok][n_expert] router logits, then probabilities */
    float *moe_g;    /* [n_tok] shared-expert gate */
    float *moe_y;    /* [n_tok · n_expert_used][n_embd] the expert outputs, in expert order (moe_pos) */
    float *moe_gate; /* [n_tok · n_expert_used][n_ff_exp] gate, then SwiGLU rows, in expert order */
    float *moe_up;   /* [n_tok · n_expert_used][n_ff_exp] up rows, in expert order */
    float *moe_w;    /* [n_tok][n_expert_used] the selections' weights */
    int32_t *moe_sel;   /* [n_tok][n_expert_used] the selected experts, largest first */
    int32_t *moe_tok;   /* [n_tok · n_expert_used] the token of each row in expert order */
    int32_t *moe_pos;   /* [n_tok · n_expert_used] (token, selection) pair -> its row in expert order */
    tensor_mm_group *moe_grp;   /* [n_expert] the experts with rows, for tensor_matmul_grouped */

    /* snapshot capture (recur_decode_capture): NULL when no token of this ubatch is captured;
     * else cap[t] is NULL or where the state of token t's sequence right after token t goes
     * (the layout of one sequence's whole state, rs.h invariant 3). See fwd_capture_conv. */
    float *const *cap;   /* [n_tok] */

    /* recur_ctx_set_profile's counters (NULL: not profiling): the steps below add their time */
    recur_profile        *prof;
    tp_times              prof_tp;   /* the pool's job times at the last fwd_prof_start */

    /* tools */
    kv_cache             *kv;     /* NULL without attention layers */
    rs_state             *rs;     /* NULL without recurrent layers */
    tp_pool              *pool;
    const tensor_kernels *kern;
} model_fwd;

/* Profiling (recur_ctx_set_profile): a step of `kind` that began at fwd_prof_start's time adds
 * its wall time, and the pool's job times since (tp_get_times), at fwd_prof_stop; a matmul
 * step, at fwd_prof_matmul, also the weight bytes it read, under its kind of call: its n
 * matrices w (experts: a MoE layer's expert tensors, whose first matrix is one expert's). All
 * do nothing unless the context profiles. */
static inline int64_t fwd_prof_start(model_fwd *f) {
    if (!f->prof) return 0;
    /* steps do not nest, except in the decode's own span (OTHER), which takes no pool times */
    f->prof_tp = tp_get_times(f->pool);
    return rc_time_ns();
}
void fwd_prof_stop(model_fwd *f, recur_prof_kind kind, int64_t t0);
void fwd_prof_matmul(model_fwd *f, int64_t t0, const model_w *const *w, int n, bool experts, uint64_t bytes);
/* The bytes of w's first matrix (ne[0] x ne[1]; an expert tensor holds ne[2] of them). */
uint64_t fwd_w_bytes(const model_w *w);
/* tp_run_n(pool, fn, arg, n_shares) (pool NULL: on the caller; n_shares 0: one per thread, as
 * tp_run), profiled as `kind`. Blocks run their jobs through it. */
void fwd_job(model_fwd *f, recur_prof_kind kind, tp_pool *pool, tp_job_fn fn, void *arg, int n_shares);

/* Y[n_tok][w.ne[1]] = X[n_tok][w.ne[0]] * W^T */
void fwd_matmul(model_fwd *f, const model_w *w, const float *X, float *Y);
/* fwd_matmul of each w[i] into Y[i] over the same X (equal ne[0]) as one job
 * (tensor_matmul_n: X quantized once, one barrier); the same values. n <= TENSOR_MM_MAX. */
void fwd_matmul_n(model_fwd *f, const float *X, int n, const model_w *const *w, float *const *Y);
/* out[t] = rmsnorm(in[t]) * w for every token row (n floats per row). */
void fwd_rmsnorm_rows(model_fwd *f, float *out, const float *in, const model_w *w, int64_t n, float eps);
/* x[t] += y[t] for every token row. */
void fwd_add_rows(model_fwd *f, float *x, const float *y, int64_t n);
/* Before the last layer's feed-forward: the rows no output reads are dropped (as llama.cpp
 * does with its output ids), rows f->out_tok moved to the front of f->x and n_tok set to
 * n_out; true when a row is left. Rows are independent in a feed-forward, so each kept row
 * gets the same bits. After it only row-wise work may follow (token, pos, seq, cell and cap
 * no longer match the rows). */
bool fwd_keep_out_rows(model_fwd *f, int64_t n_embd);
/* g = swiglu(g, u) on each of n_rows rows of n (ops.h op_swiglu), rows split among the
 * threads. */
void fwd_swiglu_rows(model_fwd *f, float *g, const float *u, int64_t n, int64_t n_rows);

/* ---- blocks (model/blocks/) ---- */

/* Self-attention of a llama-family layer: reads f->xb, adds the output to f->x.
 * kv_layer is the index of this layer among the attention layers. */
void block_attention(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer);
/* Gated attention (qwen35, qwen3next): as block_attention with attn_q giving per head
 * [q | gate]; the heads' output is multiplied by sigmoid(gate) before attn_output. */
void block_attention_gated(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer);
/* Gated DeltaNet mixer (model/blocks/deltanet.c): reads f->xb, adds the output to f->x. */
void block_deltanet(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer);

/* MoE feed-forward with an optional gated shared expert (model/blocks/moe.c). */
void block_ffn_moe(const struct recur_model *m, model_fwd *f, const model_layer *L);

/* SwiGLU feed-forward: x += down(silu(gate(norm(x))) * up(norm(x))). */
void block_ffn_swiglu(const struct recur_model *m, model_fwd *f, const model_layer *L);

/* LFM2 short convolution: reads f->xb, adds out_proj(C ⊙ conv(B ⊙ x)) to f->x. */
void block_shortconv(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer);
/* Mamba-1 / Mamba-2 mixers: read f->xb, add the output to f->x. */
void block_mamba(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer);
void block_mamba2(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer);

/* The causal conv of the recurrent blocks (model/blocks/conv.c): channels [lo, hi) of C for
 * tokens [t0, t1) of the ubatch, row t of in (in_stride floats apart) into row t of out (C
 * apart), each token with its sequence's conv state in rs layer rs_layer and the weights w (K
 * per channel): the kernel table's conv_run over each run of one sequence's tokens that ends
 * at a captured token or at t1, then fwd_capture_conv for the run's last token (the others
 * capture nothing). The same bits as a conv_step per token, so a block may go through its
 * tokens in pieces (in order) and work on each piece while it is in cache. */
void fwd_conv_tokens(model_fwd *f, int rs_layer, const float *w, int K, int64_t C, int64_t lo, int64_t hi,
                     int32_t t0, int32_t t1, const float *in, int64_t in_stride, float *out);
/* Tokens per piece for the blocks that finish their conv output piece by piece: 16 tokens of
 * a few thousand channels stay in L2. */
#define FWD_CONV_PIECE 16

/* ---- capture hooks (model/capture.c) ----
 * A recurrent block calls these right after it has stepped token t's state, for the slice the
 * calling thread stepped; threads own disjoint slices, so the hooks are thread-safe. They do
 * nothing (one test) unless f->cap && f->cap[t]. Every recurrent block must call them for every
 * token and every part of its state, or captured snapshots miss that part:
 *   fwd_capture_conv: after the conv state of token t's sequence in rs layer rs_layer was
 *     stepped for channels [lo, hi) of C (the conv state is (K-1) rows of C channels);
 *   fwd_capture_ssm: after floats [lo, hi) of that layer's SSM (or delta) state were stepped.
 * fwd_conv_tokens (shortconv.c, mamba.c, deltanet.c) calls fwd_capture_conv after each run of
 * tokens, which ends at every captured token; the scans call fwd_capture_ssm with the float
 * range of the channels or heads they own after each token. */
void fwd_capture_conv(model_fwd *f, int rs_layer, int32_t t, int64_t C, int64_t lo, int64_t hi);
void fwd_capture_ssm(model_fwd *f, int rs_layer, int32_t t, int64_t lo, int64_t hi);
/* Instead of stepping in place and copying, a scan may write token t's SSM state straight into
 * its capture and start the sequence's next run from there, when the sequence goes on after t
 * in this ubatch (then the run after t writes the state back where rs keeps it). These say
 * where: fwd_capture_ssm_at, that layer's SSM state in token t's capture (NULL when t is not
 * captured); fwd_seq_goes_on, whether a later token of the ubatch is of t's sequence;
 * fwd_seq_prev, the last token before t of t's sequence (-1: none). */
float  *fwd_capture_ssm_at(const model_fwd *f, int rs_layer, int32_t t);
bool    fwd_seq_goes_on(const model_fwd *f, int32_t t);
int32_t fwd_seq_prev(const model_fwd *f, int32_t t);

/* The llama-family layer loop (model/arch/llama.c), shared by llama and qwen3. */
void llama_like_forward(const struct recur_model *m, model_fwd *f);

#endif
