/* mamba2.c — the `mamba2` architecture: as mamba with the Mamba-2 mixer (scalar decay per head,
 * B/C shared by groups of heads, grouped RMSNorm before ssm_out); model/blocks/mamba.c. */
#include "core/err.h"
#include "model/forward.h"
#include "model/model.h"

static recur_status mamba2_hparams(struct recur_model *m, char *err, size_t err_len) {
    return model_read_ssm_hparams(m, true, err, err_len);
}

static recur_status mamba2_bind(struct recur_model *m, char *err, size_t err_len) {
    const model_hparams *hp = &m->hp;
    model_weights *W = &m->w;
    const int64_t E = hp->n_embd, di = hp->ssm_d_inner, nh = hp->ssm_dt_rank, ng = hp->ssm_n_group;
    recur_status st;
    if ((st = model_bind_globals(m, "output_norm.weight", err, err_len))) return st;
#define BIND(w, name, il, a, b, f32) \
    if ((st = model_bind_f32(m, w, name, il, a, b, f32, err, err_len))) return st
    for (int il = 0; il < hp->n_layer; il++) {
        model_layer *L = &W->layers[il];
        BIND(&L->attn_norm, "blk.%d.attn_norm.weight", il, E, 0, true);
        BIND(&L->ssm_in, "blk.%d.ssm_in.weight", il, E, hp->rs_n_in, false);
        BIND(&L->ssm_conv1d, "blk.%d.ssm_conv1d.weight", il, hp->ssm_d_conv, hp->rs_n_conv, true);
        BIND(&L->ssm_conv1d_b, "blk.%d.ssm_conv1d.bias", il, hp->rs_n_conv, 0, true);
        BIND(&L->ssm_dt_b, "blk.%d.ssm_dt.bias", il, nh, 0, true);
        BIND(&L->ssm_a, "blk.%d.ssm_a", il, 1, nh, true);
        BIND(&L->ssm_d, "blk.%d.ssm_d", il, 1, nh, true);
        BIND(&L->ssm_norm, "blk.%d.ssm_norm.weight", il, di / ng, ng, true);
        BIND(&L->ssm_out, "blk.%d.ssm_out.weight", il, di, E, false);
    }
#undef BIND
    return RECUR_OK;
}

static void mamba2_forward(const struct recur_model *m, model_fwd *f) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->w.layers[il];
        fwd_rmsnorm_rows(f, f->xb, f->x, &L->attn_norm, m->hp.n_embd, m->hp.rms_eps);
        block_mamba2(m, f, L, m->hp.rs_index[il]);
    }
}

const model_arch model_arch_mamba2 = { "mamba2", mamba2_hparams, mamba2_bind, mamba2_forward };
