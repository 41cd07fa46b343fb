/* qwen3.c — the `qwen3` architecture: as llama plus per-head RMSNorm of q and k before RoPE,
 * NEOX RoPE on unpermuted weights. */
#include "model/forward.h"
#include "model/model.h"

static recur_status qwen3_hparams(struct recur_model *m, char *err, size_t err_len) {
    (void)err; (void)err_len;
    m->hp.rope_kind = OP_ROPE_NEOX;
    return RECUR_OK;
}

static recur_status qwen3_bind(struct recur_model *m, char *err, size_t err_len) {
    return model_bind_llama_like(m, true, err, err_len);
}

const model_arch model_arch_qwen3 = { "qwen3", qwen3_hparams, qwen3_bind, llama_like_forward };
