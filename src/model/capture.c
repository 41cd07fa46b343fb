/* capture.c — the snapshot capture hooks the recurrent blocks call after each token
 * (forward.h). The destination has the layout of one sequence's whole state, so a layer's
 * part sits at the same offset as in rs (rs_conv / rs_ssm minus rs_seq_state). */
#include <string.h>

#include "model/forward.h"

void fwd_capture_conv(model_fwd *f, int rs_layer, int32_t t, int64_t C, int64_t lo, int64_t hi) {
    if (!f->cap || !f->cap[t] || hi <= lo) return;
    const recur_seq_id seq = f->seq[t];
    const float *src = rs_conv(f->rs, rs_layer, seq);
    float *dst = f->cap[t] + (src - rs_seq_state(f->rs, seq));
    const int64_t rows = rs_n_conv(f->rs) / C;
    for (int64_t k = 0; k < rows; k++)
        memcpy(dst + k * C + lo, src + k * C + lo, (size_t)(hi - lo) * sizeof(float));
}

void fwd_capture_ssm(model_fwd *f, int rs_layer, int32_t t, int64_t lo, int64_t hi) {
    float *dst = fwd_capture_ssm_at(f, rs_layer, t);
    if (!dst || hi <= lo) return;
    memcpy(dst + lo, rs_ssm(f->rs, rs_layer, f->seq[t]) + lo, (size_t)(hi - lo) * sizeof(float));
}

float *fwd_capture_ssm_at(const model_fwd *f, int rs_layer, int32_t t) {
    if (!f->cap || !f->cap[t]) return NULL;
    const recur_seq_id seq = f->seq[t];
    return f->cap[t] + (rs_ssm(f->rs, rs_layer, seq) - rs_seq_state(f->rs, seq));
}

bool fwd_seq_goes_on(const model_fwd *f, int32_t t) {
    for (int32_t u = t + 1; u < f->n_tok; u++)
        if (f->seq[u] == f->seq[t]) return true;
    return false;
}

int32_t fwd_seq_prev(const model_fwd *f, int32_t t) {
    for (int32_t u = t - 1; u >= 0; u--)
        if (f->seq[u] == f->seq[t]) return u;
    return -1;
}
