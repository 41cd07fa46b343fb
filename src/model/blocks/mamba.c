/* mamba.c — the Mamba-1 and Mamba-2 mixers (selective scan), llama.cpp semantics.
 *
 * Mamba-1: x | z = ssm_in · u;  x = silu(conv(x) + conv_b);  dt | B | C = ssm_x · x;
 *          dt = ssm_dt · dt + dt_b;  Δ = softplus(dt)                          (per channel c)
 *          h[c][n] = h[c][n] · exp(Δ_c A[c][n]) + B[n] Δ_c x_c;  y_c = Σ_n h[c][n] C[n] + D_c x_c
 *          out = ssm_out · (y ⊙ silu(z))
 * Mamba-2: z | xBC | dt = ssm_in · u;  xBC = silu(conv(xBC) + conv_b);  x | B | C = xBC
 *          (x: n_head × head_dim, B, C: n_group × d_state);  Δ_h = softplus(dt_h + dt_b_h),
 *          dA = exp(Δ_h A_h), group g = h / (n_head / n_group);
 *          h[h][p][n] = h · dA + B[g][n] x[h][p] Δ_h;  y[h][p] = Σ_n h C[g][n] + D_h x[h][p]
 *          y = grouped RMSNorm(y ⊙ silu(z)) · ssm_norm;  out = ssm_out · y
 *
 * The state of recurrent layer l of a sequence is [d_inner][d_state] (the SSM) and (K-1) rows
 * of the conv input (rs.h). Tokens are stepped one at a time in ubatch order, each with the
 * state of its own sequence; threads split channels (Mamba-1) or heads (Mamba-2), so results
 * never depend on the thread count or on the batch. The sums follow ggml's CPU kernels
 * (ssm_conv, ssm_scan; Mamba-2's d_state sum as its AVX-512 loop: 64 lanes, then reduced: the kernel table's
 * ssm2_rows). */
#include <math.h>
#include <string.h>

#include "model/forward.h"
#include "tensor/ops.h"

typedef struct mb_job {
    const struct recur_model *m;
    model_fwd                *f;
    const model_layer        *L;
    int                       rs_layer;
    int64_t                   conv_off;   /* where the conv input starts in an r_in row */
} mb_job;

/* Shares for a scan job over n_heads heads: more than threads (a thread the OS holds back
 * then delays fewer heads), each head still in one share. */
static int mb_scan_shares(const model_fwd *f, int64_t n_heads) {
    const int64_t n = 4 * (int64_t)tp_n_threads(f->pool);
    return (int)(n < n_heads ? n : n_heads);
}

static float softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* conv + bias + silu of channels [lo, hi) for every token: in rows of in_stride floats at
 * in_off, out rows of rs_n_conv floats; a piece of tokens at a time, so the bias and silu
 * find the conv output in cache. */
static void conv_tokens(const mb_job *j, int64_t in_stride, int64_t in_off, long lo, long hi) {
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t C = hp->rs_n_conv;
    const float *bias = j->L->ssm_conv1d_b.data;
    for (int32_t t0 = 0; t0 < f->n_tok; t0 += FWD_CONV_PIECE) {
        const int32_t t1 = f->n_tok - t0 < FWD_CONV_PIECE ? f->n_tok : t0 + FWD_CONV_PIECE;
        fwd_conv_tokens(f, j->rs_layer, j->L->ssm_conv1d.data, hp->ssm_d_conv, C, lo, hi, t0, t1, f->r_in + in_off,
                        in_stride, f->r_conv);
        for (int32_t t = t0; t < t1; t++) {
            float *out = f->r_conv + (int64_t)t * C;
            op_add(out + lo, bias + lo, hi - lo);
            op_silu_part(f->kern, out, out, C, lo, hi);
        }
    }
}

static void mamba_conv_job(void *arg, int ith, int nth) {
    const mb_job *j = arg;
    long lo, hi;
    tp_split(j->m->hp.rs_n_conv, ith, nth, 16, &lo, &hi);
    conv_tokens(j, j->m->hp.rs_n_in, j->conv_off, lo, hi);
}

/* Mamba-1 scan of channels [lo, hi): y = (scan + D x) ⊙ silu(z) into r_y; the softplus of dt
 * is the kernel's (tensor.h ssm1_step). */
static void mamba_scan_job(void *arg, int ith, int nth) {
    const mb_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t di = hp->ssm_d_inner, ds = hp->ssm_d_state, nx = hp->ssm_dt_rank + 2 * ds;
    const float *A = j->L->ssm_a.data, *D = j->L->ssm_d.data;
    long lo, hi;
    tp_split(di, ith, nth, 16, &lo, &hi);
    for (int32_t t = 0; t < f->n_tok; t++) {
        float *s = rs_ssm(f->rs, j->rs_layer, f->seq[t]), *y = f->r_y + t * di;
        const float *x = f->r_conv + t * di, *z = f->r_in + t * 2 * di + di, *dt = f->r_dt + t * di;
        const float *B = f->r_xdb + t * nx + hp->ssm_dt_rank, *Cm = B + ds;
        f->kern->ssm1_step(ds, hi - lo, s + lo * ds, A + lo * ds, B, Cm, dt + lo, x + lo, y + lo);
        for (long c = lo; c < hi; c++) y[c] = y[c] + x[c] * D[c];
        op_swiglu_part(f->kern, f->r_y + t * di, z, f->r_y + t * di, di, lo, hi);   /* rows of d_inner */
        fwd_capture_ssm(f, j->rs_layer, t, lo * ds, hi * ds);
    }
}

void block_mamba(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer) {
    const model_hparams *hp = &m->hp;
    const int64_t di = hp->ssm_d_inner, r = hp->ssm_dt_rank, nx = r + 2 * (int64_t)hp->ssm_d_state;
    mb_job j = { m, f, L, rs_layer, 0 };   /* x | z */
    fwd_matmul(f, &L->ssm_in, f->xb, f->r_in);
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, mamba_conv_job, &j, 0);
    fwd_matmul(f, &L->ssm_x, f->r_conv, f->r_xdb);
    for (int32_t t = 0; t < f->n_tok; t++)   /* dt rows, packed for the matmul (r_y is free now) */
        memcpy(f->r_y + t * r, f->r_xdb + t * nx, (size_t)r * sizeof(float));
    fwd_matmul(f, &L->ssm_dt, f->r_y, f->r_dt);
    for (int32_t t = 0; t < f->n_tok; t++) op_add(f->r_dt + t * di, L->ssm_dt_b.data, di);
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, mamba_scan_job, &j, 0);
    fwd_matmul(f, &L->ssm_out, f->r_y, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}

/* Mamba-2 scan of heads [lo, hi): y = (scan + D x) ⊙ silu(z) into r_y (normed afterwards).
 * Tokens go in runs of one sequence that end at a captured token (as fwd_conv_tokens), at most
 * SCAN_RUN long, and within a run head by head: the run's x, B and C rows stay in cache while
 * the heads pass, and a head's state while the run's tokens pass (heads are independent: the
 * order of (head, token) pairs across heads changes no bit). Heads outermost instead read the
 * ubatch's x, B and C rows once per head, from memory: mamba2-370m pp512 scan 1.76-2.00 s ->
 * 1.51-1.61 per 5 runs (pool timer, 3 alternating pairs). A run goes to the kernel in one
 * call where the table has ssm2_tokens, which keeps a row's state in registers through the
 * run's tokens: pp512 1.11-1.15x (6 alternating pairs, recur-bench -r 3); AVX2's keeps an
 * eighth of 4 rows' state in registers at a time (scan_avx2.c). */
#define SCAN_RUN 16

static void mamba2_scan_job(void *arg, int ith, int nth) {
    const mb_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t di = hp->ssm_d_inner, ds = hp->ssm_d_state, nh = hp->ssm_dt_rank, ng = hp->ssm_n_group;
    const int64_t hd = di / nh, nin = hp->rs_n_in, nc = hp->rs_n_conv;
    const float *A = j->L->ssm_a.data, *D = j->L->ssm_d.data, *dt_b = j->L->ssm_dt_b.data;
    long lo, hi;
    tp_split_tapered(nh, ith, nth, 1, &lo, &hi);
    /* ggml's swiglu rows are head_dim long; when that is a multiple of OP_GGML_LANES, the rows
     * of adjacent heads in one call get the same per-element operations (ops.h) */
    const bool whole = hd % OP_GGML_LANES == 0;
    for (int32_t t0 = 0; t0 < f->n_tok;) {
        int32_t t1 = t0 + 1;
        while (t1 < f->n_tok && t1 - t0 < SCAN_RUN && f->seq[t1] == f->seq[t0] && !(f->cap && f->cap[t1 - 1])) t1++;
        /* The state comes from where the sequence's last run left it and goes where rs keeps
         * it, except that a run ending at a captured token the sequence goes on from writes
         * into the capture itself, and the next run reads it there: no copy (forward.h).
         * Copying 8 checkpoints of 49 MiB cost mamba2-370m pp512 1.3-2.9 % of its time. */
        float *live = rs_ssm(f->rs, j->rs_layer, f->seq[t0]);
        const int32_t prev = f->cap ? fwd_seq_prev(f, t0) : -1;   /* the scans only where there are captures */
        const float *from = prev >= 0 ? fwd_capture_ssm_at(f, j->rs_layer, prev) : NULL;
        float *to = f->cap && fwd_seq_goes_on(f, t1 - 1) ? fwd_capture_ssm_at(f, j->rs_layer, t1 - 1) : NULL;
        const float *s_in = from ? from : live;
        float *s = to ? to : live;
        for (long h = lo; h < hi; h++) {
            const int64_t g = h / (nh / ng);
            float dsp[SCAN_RUN], dA[SCAN_RUN];
            for (int32_t t = t0; t < t1; t++) {
                const float *dt = f->r_in + t * nin + 2 * di + 2 * ng * ds;
                dsp[t - t0] = softplus(dt[h] + dt_b[h]);
                dA[t - t0] = expf(dsp[t - t0] * A[h]);
            }
            const float *x0 = f->r_conv + t0 * nc;
            if (f->kern->ssm2_tokens)   /* the run's tokens in one call: the state stays in registers (AVX2: L1) */
                f->kern->ssm2_tokens(ds, hd, t1 - t0, s_in + h * hd * ds, s + h * hd * ds, x0 + di + g * ds,
                                     x0 + di + ng * ds + g * ds, x0 + h * hd, nc, dA, dsp, f->r_y + t0 * di + h * hd,
                                     di);
            else if (s_in != s)   /* token by token in place: the state where the run ends first */
                memcpy(s + h * hd * ds, s_in + h * hd * ds, (size_t)(hd * ds) * sizeof(float));
            for (int32_t t = t0; t < t1; t++) {
                const float *x = f->r_conv + t * nc, *z = f->r_in + t * nin, *xh = x + h * hd;
                float *yh = f->r_y + t * di + h * hd;
                if (!f->kern->ssm2_tokens)
                    f->kern->ssm2_rows(ds, hd, s + h * hd * ds, x + di + g * ds, x + di + ng * ds + g * ds, dA[t - t0],
                                       dsp[t - t0], xh, yh);
                for (int64_t p = 0; p < hd; p++) yh[p] = yh[p] + xh[p] * D[h];
                if (!whole) op_swiglu(f->kern, yh, z + h * hd, yh, hd);   /* ggml's swiglu rows: head_dim */
            }
            if (!to) fwd_capture_ssm(f, j->rs_layer, t1 - 1, h * hd * ds, (h + 1) * hd * ds);   /* while in cache */
        }
        t0 = t1;
    }
    if (whole)   /* the share's heads are adjacent: one call per token, not one per head */
        for (int32_t t = 0; t < f->n_tok; t++) {
            float *y = f->r_y + t * di + lo * hd;
            op_swiglu(f->kern, y, f->r_in + t * nin + lo * hd, y, (hi - lo) * hd);
        }
}

/* The grouped RMSNorm of the r_y rows of tokens [lo, hi): each row is one op_rmsnorm (a serial
 * double sum), so tokens are split over threads. */
static void mamba2_norm_job(void *arg, int ith, int nth) {
    const mb_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int64_t di = hp->ssm_d_inner, gs = di / hp->ssm_n_group;
    long lo, hi;
    tp_split(f->n_tok, ith, nth, 1, &lo, &hi);
    if (hp->ssm_n_group == 1) {   /* one weight: the rows are contiguous */
        op_rmsnorm_rows(f->kern, f->r_y + lo * di, f->r_y + lo * di, j->L->ssm_norm.data, di, hi - lo, di, hp->rms_eps);
        return;
    }
    for (long t = lo; t < hi; t++)
        for (int64_t g = 0; g < hp->ssm_n_group; g++)
            op_rmsnorm(f->r_y + t * di + g * gs, f->r_y + t * di + g * gs, (const float *)j->L->ssm_norm.data + g * gs,
                       gs, hp->rms_eps);
}

void block_mamba2(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer) {
    const model_hparams *hp = &m->hp;
    const int64_t di = hp->ssm_d_inner;
    mb_job j = { m, f, L, rs_layer, di };   /* z | xBC | dt */
    fwd_matmul(f, &L->ssm_in, f->xb, f->r_in);
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, mamba_conv_job, &j, 0);
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, mamba2_scan_job, &j, mb_scan_shares(f, hp->ssm_dt_rank));
    fwd_job(f, RECUR_PROF_RECURRENT, f->n_tok > 1 ? f->pool : NULL, mamba2_norm_job, &j, 0);
    fwd_matmul(f, &L->ssm_out, f->r_y, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}
