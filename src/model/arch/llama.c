/* llama.c — the `llama` architecture: RMSNorm, GQA attention with NORM RoPE (the converter
 * pre-permutes Q/K rows), SwiGLU FFN; optional rope_freqs (Llama-3.1 scaling) and
 * attn_output.bias. */
#include "model/forward.h"
#include "model/model.h"

static recur_status llama_hparams(struct recur_model *m, char *err, size_t err_len) {
    (void)err; (void)err_len;
    m->hp.rope_kind = OP_ROPE_NORM;
    return RECUR_OK;
}

static recur_status llama_bind(struct recur_model *m, char *err, size_t err_len) {
    return model_bind_llama_like(m, false, err, err_len);
}

/* Shared with qwen3: pre-norm attention + SwiGLU FFN, layer after layer. */
void llama_like_forward(const struct recur_model *m, model_fwd *f) {
    for (int il = 0; il < m->hp.n_layer; il++) {
        const model_layer *L = &m->w.layers[il];
        fwd_rmsnorm_rows(f, f->xb, f->x, &L->attn_norm, m->hp.n_embd, m->hp.rms_eps);
        block_attention(m, f, L, il);
        if (il == m->hp.n_layer - 1 && !fwd_keep_out_rows(f, m->hp.n_embd)) break;   /* rows no output reads */
        block_ffn_swiglu(m, f, L);
    }
}

const model_arch model_arch_llama = { "llama", llama_hparams, llama_bind, llama_like_forward };
