/* conv.c — the causal depthwise conv of the recurrent blocks over a ubatch (forward.h
 * fwd_conv_tokens): tokens go in runs of one sequence, so a channel's weights and state stay
 * in registers across a run (tensor.h conv_run); a run ends where a snapshot is captured, as
 * the capture copies the state right after that token. */
#include "model/forward.h"

void fwd_conv_tokens(model_fwd *f, int rs_layer, const float *w, int K, int64_t C, int64_t lo, int64_t hi,
                     int32_t t0, int32_t t1, const float *in, int64_t in_stride, float *out) {
    for (int32_t t = t0; t < t1;) {
        int32_t e = t + 1;
        while (e < t1 && f->seq[e] == f->seq[t] && !(f->cap && f->cap[e - 1])) e++;
        f->kern->conv_run(rs_conv(f->rs, rs_layer, f->seq[t]), w, K, C, lo, hi, e - t, in + (int64_t)t * in_stride,
                          in_stride, out + (int64_t)t * C, C);
        fwd_capture_conv(f, rs_layer, e - 1, C, lo, hi);
        t = e;
    }
}
