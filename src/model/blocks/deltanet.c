/* deltanet.c — the Gated DeltaNet mixer of qwen35 / qwen35moe / qwen3next (llama.cpp semantics,
 * ARCHITECTURES.md §2.4).
 *
 *   mixed = attn_qkv · u  (q: n_k heads | k: n_k heads | v: n_v heads, d_k = d_v = ssm.state_size)
 *   z = attn_gate · u;  beta_h = sigmoid(b_h);  g_h = ssm_a[h] · softplus(a_h + dt_bias[h])
 *   c = silu(conv_K(mixed))  (causal depthwise, no bias);  q, k: L2-normalised per head
 *   per v head h (k head kh = h mod n_k, or h / (n_v/n_k) for qwen3next):
 *       S ← S·exp(g);  δ[j] = (v[j] − Σ_i S[i][j] k[i])·beta;  S[i][j] += k[i] δ[j]
 *       o[j] = (Σ_i S[i][j] q[i]) / sqrt(d_k)
 *   y_h = RMSNorm(o_h)·ssm_norm ⊙ silu(z_h);  out = ssm_out · y
 *
 * State per layer and sequence: S as llama.cpp stores it, [h][j][i] (row j = value index, over
 * the key index i), F32, plus the K-1 previous conv inputs (rs.h). Tokens are stepped one at a
 * time in ubatch order, each with its own sequence's state, so the state after every token
 * exists; threads split conv channels, then v heads: results never depend on the thread count
 * or the batch. The sums follow ggml's fused GATED_DELTA_NET CPU kernel (its AVX-512
 * ggml_vec_dot_f32: 4 x 16 lanes with FMAs over blocks of 64, reduced as GGML_F32x16_REDUCE;
 * the output is scaled after the dot, as the fused op does): the kernel table's gdn_step. */
#include <math.h>
#include <string.h>

#include "model/forward.h"
#include "tensor/ops.h"

typedef struct dn_job {
    const struct recur_model *m;
    model_fwd                *f;
    const model_layer        *L;
    int                       rs_layer;
} dn_job;

/* Shares for a scan job over n_heads heads: more than threads (a thread the OS holds back
 * then delays fewer heads), each head still in one share. */
static int dn_scan_shares(const model_fwd *f, int64_t n_heads) {
    const int64_t n = 4 * (int64_t)tp_n_threads(f->pool);
    return (int)(n < n_heads ? n : n_heads);
}

static float dn_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* Causal conv (no bias) + silu of channels [lo, hi) for every token: r_in rows into r_conv,
 * a piece of tokens at a time (the silu finds the conv output in cache). */
static void dn_conv_job(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t C = hp->rs_n_conv;
    long lo, hi;
    tp_split(C, ith, nth, 16, &lo, &hi);
    for (int32_t t0 = 0; t0 < f->n_tok; t0 += FWD_CONV_PIECE) {
        const int32_t t1 = f->n_tok - t0 < FWD_CONV_PIECE ? f->n_tok : t0 + FWD_CONV_PIECE;
        fwd_conv_tokens(f, j->rs_layer, j->L->ssm_conv1d.data, hp->ssm_d_conv, C, lo, hi, t0, t1, f->r_in,
                        hp->rs_n_in, f->r_conv);
        for (int32_t t = t0; t < t1; t++) {
            float *out = f->r_conv + (int64_t)t * C;
            op_silu_part(f->kern, out, out, C, lo, hi);
        }
    }
}

/* The raw beta and alpha of v head h of token t: two [n_tok][n_v] blocks in r_xdb, or
 * qwen3next's fused ssm_ba rows [n_tok][n_k][b(r) | a(r)]. */
static void dn_ba(const dn_job *j, int32_t t, int64_t h, float *b, float *a) {
    const model_hparams *hp = &j->m->hp;
    const int64_t nv = hp->ssm_dt_rank, nk = hp->ssm_n_group, r = nv / nk;
    const float *x = j->f->r_xdb;
    if (j->L->ssm_ba.data) {
        const float *row = x + (int64_t)t * 2 * nv + (h / r) * 2 * r;
        *b = row[h % r];
        *a = row[r + h % r];
    } else {
        *b = x[(int64_t)t * nv + h];
        *a = x[(int64_t)j->f->n_tok * nv + (int64_t)t * nv + h];
    }
}

/* The delta rule and the gated norm of v heads [lo, hi) for every token, in order. Heads
 * outermost: a head's state stays in cache while the ubatch's tokens pass (the heads are
 * independent, so the order of (head, token) pairs across heads changes no bit). */
static void dn_delta_job(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t d = hp->ssm_d_state, nk = hp->ssm_n_group, nv = hp->ssm_dt_rank, di = hp->ssm_d_inner;
    const int64_t C = hp->rs_n_conv, r = nv / nk;
    const float *A = j->L->ssm_a.data, *dt_b = j->L->ssm_dt_b.data, *nw = j->L->ssm_norm.data;
    const float scale = 1.0f / sqrtf((float)d);
    long lo, hi;
    tp_split_tapered(nv, ith, nth, 1, &lo, &hi);
    for (long h = lo; h < hi; h++) {
        const int64_t kh = hp->ssm_grouped ? h / r : h % nk;
        for (int32_t t = 0; t < f->n_tok; t++) {
            float *S = rs_ssm(f->rs, j->rs_layer, f->seq[t]) + h * d * d;
            const float *q = f->r_conv + (int64_t)t * C, *k = q + nk * d, *v = k + nk * d;
            float b, a;
            dn_ba(j, t, h, &b, &a);
            const float beta = 1.0f / (1.0f + expf(-b)), g = dn_softplus(a + dt_b[h]) * A[h];
            float *o = f->r_y + (int64_t)t * di + h * d;
            f->kern->gdn_step(d, S, q + kh * d, k + kh * d, v + h * d, expf(g), beta, scale, o);
            fwd_capture_ssm(f, j->rs_layer, t, h * d * d, (h + 1) * d * d);
        }
        /* The gated norm of the head's rows once its scan is done: several tokens' norms side
         * by side (each row's bits as alone); then ggml's silu op on rows of d times o, as
         * swiglu: silu(z) * o is the same product (tensor.h: swiglu_f32 is silu_f32 times g). */
        float *o = f->r_y + h * d;
        op_rmsnorm_rows(f->kern, o, o, nw, d, f->n_tok, di, hp->rms_eps);
        for (int32_t t = 0; t < f->n_tok; t++)
            op_swiglu(f->kern, o + (int64_t)t * di, f->r_dt + (int64_t)t * di + h * d, o + (int64_t)t * di, d);
    }
}

/* The L2 norms of the q and k heads of tokens [lo, hi) (ggml_l2_norm, eps = rms eps): each is
 * a serial double sum, so tokens are split over threads. */
static void dn_l2norm_job(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t d = hp->ssm_d_state, nk = hp->ssm_n_group, C = hp->rs_n_conv;
    long lo, hi;
    tp_split(f->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++) op_l2norm_rows(f->kern, f->r_conv + t * C, d, 2 * nk, hp->rms_eps);
}

/* A decode step's three jobs measured (qwen35-0.8b tg128, 2 threads, a timer outside the repo):
 * conv 10-11 us a layer, the L2 norms 4-5 (the caller alone), the delta rule 53-57 (the
 * state's 1 MiB read and written). One job doing all three for a share of the k heads and
 * the v heads reading them (no barrier between, each q and k row normed by the thread that
 * wrote it) ran slower: 80.6 against 72.8 us a layer (Q8_0), 66.5 against 59.6 (Q4_K_M);
 * tokens alternating in runs of 8, 1.008-1.013x the time a token. */
void block_deltanet(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer) {
    const model_hparams *hp = &m->hp;
    const int64_t nv = hp->ssm_dt_rank;
    dn_job j = { m, f, L, rs_layer };
    /* qkv, z (the output gate) and beta/alpha in one job */
    if (L->ssm_ba.data)
        fwd_matmul_n(f, f->xb, 3, (const model_w *[]){ &L->wqkv, &L->attn_gate, &L->ssm_ba },
                     (float *[]){ f->r_in, f->r_dt, f->r_xdb });
    else
        fwd_matmul_n(f, f->xb, 4, (const model_w *[]){ &L->wqkv, &L->attn_gate, &L->ssm_beta, &L->ssm_alpha },
                     (float *[]){ f->r_in, f->r_dt, f->r_xdb, f->r_xdb + (int64_t)f->n_tok * nv });
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, dn_conv_job, &j, 0);
    fwd_job(f, RECUR_PROF_RECURRENT, f->n_tok > 1 ? f->pool : NULL, dn_l2norm_job, &j, 0);
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, dn_delta_job, &j, dn_scan_shares(f, nv));
    fwd_matmul(f, &L->ssm_out, f->r_y, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}
