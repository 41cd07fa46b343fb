/* shortconv.c — LFM2's gated short convolution (its conv: fwd_conv_tokens, the kernel table's conv_run).
 *
 *   B, C, x = split3(in_proj · u)         (order B | C | x)
 *   y_t     = conv_K(B ⊙ x)_t             (depthwise, causal; state = the K-1 previous B ⊙ x)
 *   out     = out_proj · (C ⊙ y)          (no bias, no activation)
 *
 * Tokens are stepped one at a time in ubatch order (each sequence's tokens come in position
 * order), each with the state of its own sequence; threads split the channels, so the result
 * never depends on the thread count or on the batch. */
#include <math.h>

#include "model/forward.h"
#include "tensor/ops.h"

typedef struct sc_job {
    const struct recur_model *m;
    model_fwd                *f;
    const model_layer        *L;
    int                       rs_layer;
} sc_job;

static void shortconv_job(void *arg, int ith, int nth) {
    const sc_job *j = arg;
    model_fwd *f = j->f;
    const int64_t E = j->m->hp.n_embd;
    const int K = j->m->hp.ssm_d_conv;
    long lo, hi;
    tp_split((long)E, ith, nth, 16, &lo, &hi);
    for (int32_t t = 0; t < f->n_tok; t++) {   /* B ⊙ x of every token, then the conv in place */
        const float *bcx = f->r_in + (int64_t)t * 3 * E;
        float *bx = f->r_conv + (int64_t)t * E;
        for (long ch = lo; ch < hi; ch++) bx[ch] = bcx[ch] * bcx[2 * E + ch];
    }
    fwd_conv_tokens(f, j->rs_layer, j->L->ssm_conv1d.data, K, E, lo, hi, 0, f->n_tok, f->r_conv, E, f->r_conv);
    for (int32_t t = 0; t < f->n_tok; t++) {
        const float *bcx = f->r_in + (int64_t)t * 3 * E, *bx = f->r_conv + (int64_t)t * E;
        float *y = f->r_y + (int64_t)t * E;
        for (long ch = lo; ch < hi; ch++) y[ch] = bcx[E + ch] * bx[ch];
    }
}

void block_shortconv(const struct recur_model *m, model_fwd *f, const model_layer *L, int rs_layer) {
    fwd_matmul(f, &L->ssm_in, f->xb, f->r_in);
    sc_job j = { m, f, L, rs_layer };
    fwd_job(f, RECUR_PROF_RECURRENT, f->pool, shortconv_job, &j, 0);
    fwd_matmul(f, &L->ssm_out, f->r_y, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, m->hp.n_embd);
}
