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
 * positions 0..pos in increasing order, whatever cells they live in. For speed, up to 4 rows
 * of one sequence sharing a KV head (GQA heads, consecutive tokens) are computed together so
 * each K/V row load serves all of them (dot4_f16_f32, axpy4_f16); this changes no row's
 * operations or their order (att_group), so the grouping, like the thread split, cannot
 * change a bit. */
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
/* Query rows computed together: each K/V row loaded serves this many (dot4_f16_f32,
 * axpy4_f16). */
#define ATT_ROWS 4

/* One query row (token t, head h) of a group, and its slice of the thread's workspace. */
typedef struct att_row {
    int32_t t, n_ctx;   /* n_ctx: positions 0..n_ctx-1 of the token's sequence are visible */
    int     h;
    float  *qr;         /* [dk] query rounded to F16 */
    float  *sc;         /* [n_pad] scores, then probabilities */
    float  *out;        /* [dv] into f->att */
} att_row;

/* The 16-lane reduction of one output chunk: lane l + lane l+8, then pairs, as
 * _mm512_reduce_add_ps does. */
static void att_reduce_lanes(float lane[16][ATT_DV_CHUNK], int nd, float *out) {
    for (int d = 0; d < nd; d++) {
        float h[8], q[4];
        for (int l = 0; l < 8; l++) h[l] = lane[l][d] + lane[l + 8][d];
        for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
        out[d] = (q[0] + q[2]) + (q[1] + q[3]);
    }
}

/* out[d] = sum over positions p of pr[p] * v_p[d] in llama.cpp's order (its tinyBLAS F16
 * kernel on AVX-512): position p goes to lane p % 16 with an FMA, positions in increasing
 * order, and the 16 lanes are reduced as _mm512_reduce_add_ps does. Done for the nr rows of
 * a group at once: where all ATT_ROWS rows see position p, one axpy4_f16 (per element the same
 * fmaf as axpy_f16) serves them; elsewhere each visible row takes its own axpy_f16. Either
 * way every row's lanes receive the same FMAs in the same order as alone. */
static void att_weighted_v(const att_job *j, const att_row *r, int nr, int g, int32_t n_min, int32_t n_max) {
    model_fwd *f = j->f;
    const int dv = j->m->hp.head_dim_v;
    const recur_seq_id seq = f->seq[r[0].t];
    float lane[ATT_ROWS][16][ATT_DV_CHUNK];
    for (int d0 = 0; d0 < dv; d0 += ATT_DV_CHUNK) {
        const int nd = dv - d0 < ATT_DV_CHUNK ? dv - d0 : ATT_DV_CHUNK;
        memset(lane, 0, sizeof lane);
        for (int32_t p = 0; p < n_max; p++) {
            const int32_t c = kv_seq_cell(f->kv, seq, p);
            if (c < 0) continue;
            const uint16_t *v = kv_v_row(f->kv, j->kv_layer, c) + (int64_t)g * dv + d0;
            if (nr == ATT_ROWS && p < n_min) {
                const float al[ATT_ROWS] = { r[0].sc[p], r[1].sc[p], r[2].sc[p], r[3].sc[p] };
                float *const y[ATT_ROWS] = { lane[0][p % 16], lane[1][p % 16], lane[2][p % 16], lane[3][p % 16] };
                f->kern->axpy4_f16(nd, al, v, y);
                continue;
            }
            for (int i = 0; i < nr; i++)
                if (p < r[i].n_ctx) f->kern->axpy_f16(nd, r[i].sc[p], v, lane[i][p % 16]);
        }
        for (int i = 0; i < nr; i++) att_reduce_lanes(lane[i], nd, r[i].out + d0);
    }
}

/* Scores of the group's rows over their contexts (scaled q·k). Same split as att_weighted_v:
 * dot4_f16_f32 where all ATT_ROWS rows see p, else one dot_f16_f32 per visible row. */
static void att_scores(const att_job *j, const att_row *r, int nr, int g, int32_t n_min, int32_t n_max) {
    model_fwd *f = j->f;
    const int dk = j->m->hp.head_dim_k;
    const recur_seq_id seq = f->seq[r[0].t];
    const float scale = 1.0f / sqrtf((float)dk);
    for (int32_t p = 0; p < n_max; p++) {
        const int32_t c = kv_seq_cell(f->kv, seq, p);
        if (c < 0) {
            for (int i = 0; i < nr; i++)
                if (p < r[i].n_ctx) r[i].sc[p] = -INFINITY;
            continue;
        }
        const uint16_t *k = kv_k_row(f->kv, j->kv_layer, c) + (int64_t)g * dk;
        if (nr == ATT_ROWS && p < n_min) {
            const float *const q[ATT_ROWS] = { r[0].qr, r[1].qr, r[2].qr, r[3].qr };
            float d[ATT_ROWS];
            f->kern->dot4_f16_f32(dk, k, q, d);
            for (int i = 0; i < ATT_ROWS; i++) r[i].sc[p] = d[i] * scale;
            continue;
        }
        for (int i = 0; i < nr; i++)
            if (p < r[i].n_ctx) r[i].sc[p] = f->kern->dot_f16_f32(dk, k, r[i].qr) * scale;
    }
}

/* nr (<= ATT_ROWS) rows of one sequence sharing KV head g: scores, softmax, weighted sum of
 * V. Each row's scores row is padded with -inf to a multiple of 16, as llama.cpp's padded KV
 * view is, so the softmax sums the same chunks. q16 is a [dk] F16 scratch. */
static void att_group(const att_job *j, att_row *r, int nr, int g, uint16_t *q16) {
    const model_hparams *hp = &j->m->hp;
    model_fwd *f = j->f;
    const int dk = hp->head_dim_k;
    int32_t n_min = r[0].n_ctx, n_max = r[0].n_ctx;
    for (int i = 0; i < nr; i++) {
        f->kern->f32_to_f16_row(f->q + (int64_t)r[i].t * hp->n_head * dk + (int64_t)r[i].h * dk, q16, dk);
        f->kern->to_float[GGUF_T_F16](q16, r[i].qr, dk);
        if (r[i].n_ctx < n_min) n_min = r[i].n_ctx;
        if (r[i].n_ctx > n_max) n_max = r[i].n_ctx;
    }
    att_scores(j, r, nr, g, n_min, n_max);
    for (int i = 0; i < nr; i++) {
        float *sc = r[i].sc;
        const int32_t n_ctx = r[i].n_ctx, n_pad = (n_ctx + 15) & ~15;
        for (int32_t p = n_ctx; p < n_pad; p++) sc[p] = -INFINITY;
        op_softmax(f->kern, sc, n_pad);
        for (int32_t p = 0; p < n_ctx; p++) sc[p] = rt_f16_to_f32(rt_f32_to_f16(sc[p]));
    }
    att_weighted_v(j, r, nr, g, n_min, n_max);
}

/* Work units: a block of tb consecutive tokens times the r query heads of one KV head, with
 * tb * r a multiple of ATT_ROWS (tb = ATT_ROWS / gcd(r, ATT_ROWS)). A unit's rows, token by
 * token, go in groups of ATT_ROWS; a group closes early where the sequence changes (rows of
 * a group share the cells). Grouping changes no row's operations (att_group), so outputs do
 * not depend on it, nor on the thread split. */
static void att_job_fn(void *arg, int ith, int nth) {
    const att_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v, r = hp->n_head / hp->n_head_kv;
    const int tb = r % 4 == 0 ? 1 : r % 2 == 0 ? 2 : 4;
    const long n_blk = (f->n_tok + tb - 1) / tb;
    long lo, hi;
    tp_split(n_blk * hp->n_head_kv, ith, nth, 1, &lo, &hi);
    /* workspace: ATT_ROWS slots of [qr dk][sc n_cells + 16], then q16 */
    const int64_t slot = dk + (int64_t)kv_n_cells(f->kv) + 16;
    float *ws = f->att_ws + (int64_t)ith * f->att_ws_floats;
    uint16_t *q16 = (uint16_t *)(ws + ATT_ROWS * slot);
    for (long u = lo; u < hi; u++) {
        const int g = (int)(u % hp->n_head_kv);
        const int32_t t0 = (int32_t)(u / hp->n_head_kv) * tb;
        const int32_t t1 = t0 + tb < f->n_tok ? t0 + tb : f->n_tok;
        att_row rows[ATT_ROWS];
        int nr = 0;
        for (int32_t t = t0; t < t1; t++) {
            for (int h = g * r; h < (g + 1) * r; h++) {
                if (nr == ATT_ROWS || (nr > 0 && f->seq[t] != f->seq[rows[0].t])) {
                    att_group(j, rows, nr, g, q16);
                    nr = 0;
                }
                float *w = ws + nr * slot;
                rows[nr++] = (att_row){ .t = t, .n_ctx = f->pos[t] + 1, .h = h, .qr = w, .sc = w + dk,
                                        .out = f->att + (int64_t)t * hp->n_head * dv + (int64_t)h * dv };
            }
        }
        if (nr > 0) att_group(j, rows, nr, g, q16);
    }
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
