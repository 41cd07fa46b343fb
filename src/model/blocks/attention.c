/* attention.c — causal self-attention with GQA over the F16 KV cells.
 *
 * Follows llama.cpp's non-flash path closely: K and V are stored as F16, the query is rounded
 * to F16 before q·k, the scores are scaled by 1/sqrt(head_dim) and soft-maxed in F32, and the
 * probabilities are rounded to F16 before they weight V. The sums are done in the order of
 * llama.cpp's AVX-512 kernels (dot_f16_f32, op_softmax with ggml's vectorised exp,
 * att_weighted_v), so that its logits are reproduced to the last bit. The output gate's
 * sigmoid is ggml's sigmoid op: libm's expf.
 *
 * Determinism: each (token, head) output is computed by one thread, reading the sequence's
 * positions 0..pos in increasing order, whatever cells they live in. */
#include <math.h>
#include <string.h>

#include "model/forward.h"
#include "tensor/fp16.h"
#include "tensor/ops.h"

typedef struct att_job {
    const struct recur_model *m;
    model_fwd *f;
    int        kv_layer;
} att_job;

/* V rows are summed in chunks of ATT_DV_CHUNK values, 16 partial sums each (stack). */
#define ATT_DV_CHUNK 64

/* out[d] = sum over positions p of pr[p] * v_p[d] in llama.cpp's order (its tinyBLAS F16
 * kernel on AVX-512): position p goes to lane p % 16 with an FMA, positions in increasing
 * order, and the 16 lanes are reduced as _mm512_reduce_add_ps does. */
static void att_weighted_v(const att_job *j, int32_t t, int g, const float *pr, int32_t n_ctx, float *out) {
    model_fwd *f = j->f;
    const int dv = j->m->hp.head_dim_v;
    float lane[16][ATT_DV_CHUNK];
    for (int d0 = 0; d0 < dv; d0 += ATT_DV_CHUNK) {
        const int nd = dv - d0 < ATT_DV_CHUNK ? dv - d0 : ATT_DV_CHUNK;
        memset(lane, 0, sizeof lane);
        for (int32_t p = 0; p < n_ctx; p++) {
            const int32_t c = kv_seq_cell(f->kv, f->seq[t], p);
            if (c < 0) continue;
            f->kern->axpy_f16(nd, pr[p], kv_v_row(f->kv, j->kv_layer, c) + (int64_t)g * dv + d0, lane[p % 16]);
        }
        for (int d = 0; d < nd; d++) {
            float h[8], q[4];
            for (int l = 0; l < 8; l++) h[l] = lane[l][d] + lane[l + 8][d];
            for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
            out[d0 + d] = (q[0] + q[2]) + (q[1] + q[3]);
        }
    }
}

/* One (token, head): scores over the sequence's context, softmax, weighted sum of V.
 * The scores row is padded with -inf to a multiple of 16, as llama.cpp's padded KV view is,
 * so the softmax sums the same chunks. */
static void att_one(const att_job *j, int32_t t, int h, float *ws) {
    const model_hparams *hp = &j->m->hp;
    model_fwd *f = j->f;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const int g = h / (hp->n_head / hp->n_head_kv);
    const int32_t n_ctx = f->pos[t] + 1;
    const int32_t n_pad = (n_ctx + 15) & ~15;
    float *qr = ws;                       /* [dk] query rounded to F16 */
    float *sc = ws + dk;                  /* [n_pad] scores, then probabilities (n_pad <= n_cells
                                           * + 15: within att_ws_floats) */
    uint16_t *q16 = (uint16_t *)(sc + kv_n_cells(f->kv));  /* [dk], dead once scores exist */
    float *out = f->att + (int64_t)t * hp->n_head * dv + (int64_t)h * dv;

    f->kern->f32_to_f16_row(f->q + (int64_t)t * hp->n_head * dk + (int64_t)h * dk, q16, dk);
    f->kern->to_float[GGUF_T_F16](q16, qr, dk);

    const float scale = 1.0f / sqrtf((float)dk);
    for (int32_t p = 0; p < n_ctx; p++) {
        const int32_t c = kv_seq_cell(f->kv, f->seq[t], p);
        sc[p] = c < 0 ? -INFINITY
                      : f->kern->dot_f16_f32(dk, kv_k_row(f->kv, j->kv_layer, c) + (int64_t)g * dk, qr) * scale;
    }
    for (int32_t p = n_ctx; p < n_pad; p++) sc[p] = -INFINITY;
    op_softmax(f->kern, sc, n_pad);
    for (int32_t p = 0; p < n_ctx; p++) sc[p] = rt_f16_to_f32(rt_f32_to_f16(sc[p]));
    att_weighted_v(j, t, g, sc, n_ctx, out);
}

static void att_job_fn(void *arg, int ith, int nth) {
    const att_job *j = arg;
    model_fwd *f = j->f;
    const long n = (long)f->n_tok * j->m->hp.n_head;
    long lo, hi;
    tp_split(n, ith, nth, 1, &lo, &hi);
    float *ws = f->att_ws + (int64_t)ith * f->att_ws_floats;
    for (long i = lo; i < hi; i++) att_one(j, (int32_t)(i / j->m->hp.n_head), (int)(i % j->m->hp.n_head), ws);
}

/* Per-head RMSNorm (qwen3 q/k norm) and RoPE of the ubatch's q and k, then K/V into cells. */
static void att_prepare(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    const model_hparams *hp = &m->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    for (int32_t t = 0; t < f->n_tok; t++) {
        float *q = f->q + (int64_t)t * hp->n_head * dk;
        float *k = f->k + (int64_t)t * hp->n_head_kv * dk;
        const float *cs = f->rope + (int64_t)t * hp->n_rot;
        for (int h = 0; h < hp->n_head; h++) {
            if (L->q_norm.data) op_rmsnorm(q + h * dk, q + h * dk, L->q_norm.data, dk, hp->rms_eps);
            op_rope_apply(q + h * dk, cs, hp->n_rot, hp->rope_kind);
        }
        for (int h = 0; h < hp->n_head_kv; h++) {
            if (L->k_norm.data) op_rmsnorm(k + h * dk, k + h * dk, L->k_norm.data, dk, hp->rms_eps);
            op_rope_apply(k + h * dk, cs, hp->n_rot, hp->rope_kind);
        }
        f->kern->f32_to_f16_row(k, kv_k_row(f->kv, kv_layer, f->cell[t]), (int64_t)hp->n_head_kv * dk);
        f->kern->f32_to_f16_row(f->v + (int64_t)t * hp->n_head_kv * dv, kv_v_row(f->kv, kv_layer, f->cell[t]),
                                (int64_t)hp->n_head_kv * dv);
    }
}

/* RMSNorm + RoPE of q and k, K/V into cells, then every (token, head) output into f->att. */
static void att_run(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    att_prepare(m, f, L, kv_layer);
    att_job j = { m, f, kv_layer };
    /* a small job runs on the caller alone: waking the workers would cost more */
    const double work = (double)f->n_tok * m->hp.n_head * (f->pos[f->n_tok - 1] + 1) * m->hp.head_dim_k;
    tp_run(work < (1 << 18) ? NULL : f->pool, att_job_fn, &j);
}

void block_attention(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    fwd_matmul(f, &L->wq, f->xb, f->q);
    fwd_matmul(f, &L->wk, f->xb, f->k);
    fwd_matmul(f, &L->wv, f->xb, f->v);
    att_run(m, f, L, kv_layer);
    fwd_matmul(f, &L->wo, f->att, f->tmp);
    if (L->bo.data) {
        for (int32_t t = 0; t < f->n_tok; t++) op_add(f->tmp + (int64_t)t * m->hp.n_embd, L->bo.data, m->hp.n_embd);
    }
    fwd_add_rows(f, f->x, f->tmp, m->hp.n_embd);
}

void block_attention_gated(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    const model_hparams *hp = &m->hp;
    const int64_t H = hp->n_head, D = hp->head_dim_k, dv = hp->head_dim_v;
    fwd_matmul(f, &L->wq, f->xb, f->qg);
    for (int32_t t = 0; t < f->n_tok; t++)
        for (int64_t h = 0; h < H; h++)
            memcpy(f->q + (t * H + h) * D, f->qg + t * 2 * H * D + h * 2 * D, (size_t)D * sizeof(float));
    fwd_matmul(f, &L->wk, f->xb, f->k);
    fwd_matmul(f, &L->wv, f->xb, f->v);
    att_run(m, f, L, kv_layer);
    for (int32_t t = 0; t < f->n_tok; t++)   /* output gate (dv == D for these models) */
        for (int64_t h = 0; h < H; h++) {
            const float *g = f->qg + t * 2 * H * D + h * 2 * D + D;
            float *o = f->att + (t * H + h) * dv;
            for (int64_t e = 0; e < dv; e++) o[e] *= 1.0f / (1.0f + expf(-g[e]));
        }
    fwd_matmul(f, &L->wo, f->att, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}
