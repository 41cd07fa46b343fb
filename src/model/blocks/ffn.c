/* ffn.c — the SwiGLU feed-forward block: x += down(silu(gate·n) ⊙ up·n), n = RMSNorm(x)·ffn_norm. */
#include "model/forward.h"
#include "tensor/ops.h"

void block_ffn_swiglu(const struct recur_model *m, model_fwd *f, const model_layer *L) {
    const model_hparams *hp = &m->hp;
    fwd_rmsnorm_rows(f, f->xb, f->x, &L->ffn_norm, hp->n_embd, hp->rms_eps);
    fwd_matmul_n(f, f->xb, 2, (const model_w *[]){ &L->ffn_gate, &L->ffn_up }, (float *[]){ f->hb, f->hb2 });
    fwd_swiglu_rows(f, f->hb, f->hb2, hp->n_ff, f->n_tok);
    fwd_matmul(f, &L->ffn_down, f->hb, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}
