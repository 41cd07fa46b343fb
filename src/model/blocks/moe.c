/* moe.c — the mixture-of-experts feed-forward of qwen35moe / qwen3next (llama.cpp's
 * build_moe_ffn with softmax gating, ARCHITECTURES.md §2.4):
 *   p = softmax(ffn_gate_inp · n);  E = the n_expert_used largest p (in decreasing order)
 *   w_e = p_e / max(Σ_E p, 6.1e-5) (× expert_weights_scale when it is not 0 or 1)
 *   moe = Σ_{e∈E} w_e · down_e(silu(gate_e · n) ⊙ up_e · n)   (summed in the order of E)
 *   shared = down_sh(silu(gate_sh · n) ⊙ up_sh · n) · sigmoid(ffn_gate_inp_shexp · n)
 *   x += moe + shared,  n = RMSNorm(x)·post_attention_norm
 * The tokens of a ubatch that chose an expert go through it in one matmul: tensor_matmul's
 * results do not depend on the other rows of a call, so this equals ggml's grouped mul_mat_id
 * bit for bit, and each token's experts are summed in its selection order as there. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "model/forward.h"
#include "tensor/ops.h"

recur_status model_read_moe_hparams(struct recur_model *m, char *err, size_t err_len) {
    model_hparams *hp = &m->hp;
    const char *keys[4] = { "expert_count", "expert_used_count", "expert_feed_forward_length",
                            "expert_shared_feed_forward_length" };
    int32_t *dst[4] = { &hp->n_expert, &hp->n_expert_used, &hp->n_ff_exp, &hp->n_ff_shexp };
    for (int i = 0; i < 4; i++) {
        char key[96];
        int64_t v = 0;
        snprintf(key, sizeof key, "%s.%s", hp->arch, keys[i]);
        if ((!gguf_get_int(m->g, key, &v) && i < 3) || v < 0 || v > (1 << 24))
            return rc_fail(err, err_len, RECUR_E_FORMAT, "model: key %s missing or out of range", key);
        *dst[i] = (int32_t)v;
    }
    if (hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert || hp->n_expert > 4096)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: expert_used_count %d / expert_count %d invalid",
                       hp->n_expert_used, hp->n_expert);
    char key[96];
    double s = 0;
    snprintf(key, sizeof key, "%s.expert_weights_scale", hp->arch);
    hp->expert_weights_scale = gguf_get_float(m->g, key, &s) ? (float)s : 0.0f;
    if (hp->n_ff_shexp == 0) hp->n_ff_shexp = hp->n_ff;
    if (hp->n_ff < hp->n_ff_exp) hp->n_ff = hp->n_ff_exp;     /* hb / hb2 hold either */
    if (hp->n_ff < hp->n_ff_shexp) hp->n_ff = hp->n_ff_shexp;
    return RECUR_OK;
}

/* A 3-D expert tensor {ne0, ne1, n_expert}. */
static recur_status bind_exps(struct recur_model *m, model_w *w, const char *fmt, int il, int64_t ne0, int64_t ne1,
                              char *err, size_t err_len) {
    char name[GGUF_MAX_NAME + 16];
    snprintf(name, sizeof name, fmt, il);
    const gguf_tensor *t = gguf_find_tensor(m->g, name);
    if (!t) return rc_fail(err, err_len, RECUR_E_FORMAT, "model: tensor '%s' is missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != m->hp.n_expert || t->ne[3] != 1)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "model: tensor '%s' has shape {%lld, %lld, %lld}, expected "
                       "{%lld, %lld, %d}", name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)ne0, (long long)ne1, m->hp.n_expert);
    if (!tensor_type_supported(t->type))
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED, "model: tensor '%s' has type %s, not supported yet", name,
                       gguf_type_name(t->type));
    w->type = t->type;
    w->data = t->data;
    memcpy(w->ne, t->ne, sizeof w->ne);
    return RECUR_OK;
}

recur_status model_bind_moe(struct recur_model *m, int il, char *err, size_t err_len) {
    const model_hparams *hp = &m->hp;
    model_layer *L = &m->w.layers[il];
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp;
    recur_status st;
    if ((st = model_bind(m, &L->ffn_gate_inp, "blk.%d.ffn_gate_inp.weight", il, E, hp->n_expert, true, err, err_len)) ||
        (st = bind_exps(m, &L->ffn_gate_exps, "blk.%d.ffn_gate_exps.weight", il, E, F, err, err_len)) ||
        (st = bind_exps(m, &L->ffn_up_exps, "blk.%d.ffn_up_exps.weight", il, E, F, err, err_len)) ||
        (st = bind_exps(m, &L->ffn_down_exps, "blk.%d.ffn_down_exps.weight", il, F, E, err, err_len)) ||
        (st = model_bind(m, &L->ffn_up_shexp, "blk.%d.ffn_up_shexp.weight", il, E, S, false, err, err_len)))
        return st;
    if (!L->ffn_up_shexp.data) return RECUR_OK;
    if ((st = model_bind(m, &L->ffn_gate_inp_shexp, "blk.%d.ffn_gate_inp_shexp.weight", il, E, 0, true, err,
                         err_len)) ||
        (st = model_bind(m, &L->ffn_gate_shexp, "blk.%d.ffn_gate_shexp.weight", il, E, S, true, err, err_len)) ||
        (st = model_bind(m, &L->ffn_down_shexp, "blk.%d.ffn_down_shexp.weight", il, S, E, true, err, err_len)))
        return st;
    return RECUR_OK;
}

/* The routing of token t: its n_expert_used experts (largest probability first, lowest index
 * on ties) into moe_sel and their weights into moe_w. */
static void moe_route(const struct recur_model *m, model_fwd *f, int32_t t) {
    const model_hparams *hp = &m->hp;
    const int64_t ne = hp->n_expert, k = hp->n_expert_used;
    float *p = f->moe + (int64_t)t * ne, *w = f->moe_w + t * k;
    int32_t *sel = f->moe_sel + t * k;
    op_softmax(f->kern, p, ne);
    double sum = 0;
    for (int64_t i = 0; i < k; i++) {
        int32_t best = -1;
        for (int64_t e = 0; e < ne; e++) {
            bool used = false;
            for (int64_t j = 0; j < i; j++) used |= sel[j] == e;
            if (!used && (best < 0 || p[e] > p[best])) best = (int32_t)e;
        }
        sel[i] = best;
        w[i] = p[best];
        sum += w[i];
    }
    float s = (float)sum;
    if (s < 6.103515625e-5f) s = 6.103515625e-5f;
    for (int64_t i = 0; i < k; i++) {
        w[i] = w[i] / s;
        if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f) w[i] *= hp->expert_weights_scale;
    }
}

/* One expert's rows of a stacked [n_expert][rows][cols] weight. */
static const void *expert_w(const model_w *w, int e) {
    return (const char *)w->data + (size_t)e * w->ne[1] * tensor_row_bytes(w->type, w->ne[0]);
}

typedef struct moe_job {
    const struct recur_model *m;
    model_fwd                *f;
    const model_layer        *L;
} moe_job;

/* The routing of the share's tokens (each token's on its own). */
static void moe_route_job(void *arg, int ith, int nth) {
    const moe_job *j = arg;
    long lo, hi;
    tp_split(j->f->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++) moe_route(j->m, j->f, (int32_t)t);
}

/* The experts with rows as groups of tensor_matmul_grouped (W[0] from w0, W[1] from w1);
 * end[e]: the end of expert e's rows in expert order. Returns the group count. */
static int moe_groups(model_fwd *f, const int32_t *end, int64_t ne, const model_w *w0, const model_w *w1) {
    int n = 0;
    for (int64_t e = 0; e < ne; e++) {
        const int64_t row0 = e ? end[e - 1] : 0, cnt = end[e] - row0;   /* a token picks an expert once */
        if (cnt)
            f->moe_grp[n++] = (tensor_mm_group){ { expert_w(w0, (int)e), expert_w(w1, (int)e) }, row0, cnt };
    }
    return n;
}

/* Every (token, selection) pair through its expert, the pairs sorted by expert (each
 * expert's weights read once per ubatch, not once per token): gate and up of all the experts
 * in one grouped matmul (the token rows gathered as they are quantized), SwiGLU row by row,
 * down in another. Row r of moe_gate / moe_up / moe_y is token moe_tok[r]'s; pair q's row is
 * moe_pos[q]. tensor_matmul_grouped gives each expert's rows the bits one tensor_matmul per
 * expert would, with a few jobs instead of six per expert (a 512-token ubatch gives a
 * 256-expert layer's experts ~16 tokens each, short matmuls whose barriers add up). */
static void moe_experts(const struct recur_model *m, model_fwd *f, const model_layer *L) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, ne = hp->n_expert, k = hp->n_expert_used;
    const int64_t pairs = (int64_t)f->n_tok * k;
    int32_t start[4097];   /* a counting sort of the pairs by expert (n_expert <= 4096) */
    memset(start, 0, (size_t)(ne + 1) * sizeof start[0]);
    for (int64_t q = 0; q < pairs; q++) start[f->moe_sel[q] + 1]++;
    for (int64_t e = 0; e < ne; e++) start[e + 1] += start[e];
    for (int64_t q = 0; q < pairs; q++) {   /* a pair's rows keep token order within its expert */
        const int32_t r = start[f->moe_sel[q]]++;
        f->moe_pos[q] = r;
        f->moe_tok[r] = (int32_t)(q / k);
    }
    const int n = moe_groups(f, start, ne, &L->ffn_gate_exps, &L->ffn_up_exps);   /* start[e]: expert e's end */
    int64_t t0 = fwd_prof_start(f);
    if (L->ffn_gate_exps.type == L->ffn_up_exps.type) {
        tensor_matmul_grouped(f->pool, f->kern, L->ffn_gate_exps.type, E, F, f->moe_grp, n, 2, f->xb, f->moe_tok, pairs,
                              (float *[]){ f->moe_gate, f->moe_up }, f->mm_scratch);
    } else {   /* mixed types: one call each (the second takes the up matrices) */
        tensor_matmul_grouped(f->pool, f->kern, L->ffn_gate_exps.type, E, F, f->moe_grp, n, 1, f->xb, f->moe_tok, pairs,
                              (float *[]){ f->moe_gate }, f->mm_scratch);
        for (int g = 0; g < n; g++) f->moe_grp[g].W[0] = f->moe_grp[g].W[1];
        tensor_matmul_grouped(f->pool, f->kern, L->ffn_up_exps.type, E, F, f->moe_grp, n, 1, f->xb, f->moe_tok, pairs,
                              (float *[]){ f->moe_up }, f->mm_scratch);
    }
    fwd_prof_matmul(f, t0, (const model_w *[]){ &L->ffn_gate_exps, &L->ffn_up_exps }, 2, true,
                    (fwd_w_bytes(&L->ffn_gate_exps) + fwd_w_bytes(&L->ffn_up_exps)) * (uint64_t)n);
    fwd_swiglu_rows(f, f->moe_gate, f->moe_up, F, pairs);
    moe_groups(f, start, ne, &L->ffn_down_exps, &L->ffn_down_exps);
    t0 = fwd_prof_start(f);
    tensor_matmul_grouped(f->pool, f->kern, L->ffn_down_exps.type, F, E, f->moe_grp, n, 1, f->moe_gate, NULL, pairs,
                          (float *[]){ f->moe_y }, f->mm_scratch);
    fwd_prof_matmul(f, t0, (const model_w *[]){ &L->ffn_down_exps }, 1, true, fwd_w_bytes(&L->ffn_down_exps) * (uint64_t)n);
}

/* x += each token's experts (summed in its selection order) + its gated shared expert. */
static void moe_combine_job(void *arg, int ith, int nth) {
    const moe_job *j = arg;
    model_fwd *f = j->f;
    const int64_t E = j->m->hp.n_embd, k = j->m->hp.n_expert_used;
    const bool shared = j->L->ffn_up_shexp.data != NULL;
    long lo, hi;
    tp_split(f->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float *x = f->x + t * E;
        const float *sh = f->tmp + t * E, *w = f->moe_w + t * k;
        const int32_t *pos = f->moe_pos + t * k;
        const float g = shared ? 1.0f / (1.0f + expf(-f->moe_g[t])) : 0.0f;
        for (int64_t d = 0; d < E; d++) {
            float acc = f->moe_y[pos[0] * E + d] * w[0];
            for (int64_t i = 1; i < k; i++) acc = acc + f->moe_y[pos[i] * E + d] * w[i];
            if (shared) {
                const float sg = sh[d] * g;   /* its own statement: rounded before the sum */
                x[d] += acc + sg;
            } else {
                x[d] += acc;
            }
        }
    }
}

void block_ffn_moe(const struct recur_model *m, model_fwd *f, const model_layer *L) {
    const model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, S = hp->n_ff_shexp;
    moe_job j = { m, f, L };
    tp_pool *pool = f->n_tok > 1 ? f->pool : NULL;
    fwd_rmsnorm_rows(f, f->xb, f->x, &L->ffn_norm, E, hp->rms_eps);
    if (!L->ffn_up_shexp.data) {
        fwd_matmul(f, &L->ffn_gate_inp, f->xb, f->moe);
    } else {   /* the shared expert into tmp (its gate applied in moe_combine_job); the router in
                * the same job (first: the big matrices, whose type decides which run together) */
        fwd_matmul_n(f, f->xb, 4,
                     (const model_w *[]){ &L->ffn_gate_shexp, &L->ffn_up_shexp, &L->ffn_gate_inp,
                                          &L->ffn_gate_inp_shexp },
                     (float *[]){ f->hb, f->hb2, f->moe, f->moe_g });
        fwd_swiglu_rows(f, f->hb, f->hb2, S, f->n_tok);
        fwd_matmul(f, &L->ffn_down_shexp, f->hb, f->tmp);
    }
    fwd_job(f, RECUR_PROF_OTHER, pool, moe_route_job, &j, 0);
    moe_experts(m, f, L);
    fwd_job(f, RECUR_PROF_ELEMENTWISE, pool, moe_combine_job, &j, 0);
}
