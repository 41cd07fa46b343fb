/* att_ref.c — the scalar oracle of the attention tiles (tensor.h att_scores4, att_wsum4,
 * att_wsumt4):
 * each output is the one-row helpers' (rt_dot_f16_f32, rt_axpy_f16 into 16 per-lane rows,
 * rt_hsum16_ggml), row by row, so a SIMD table that matches these bits computes every row
 * exactly as if it were alone. */
#include <math.h>

#include "tensor/fp16.h"
#include "tensor/tensor_impl.h"

void rt_att_scores4(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4], const int32_t n_ctx[4],
                    float scale, float *const s[4], bool cold) {
    (void)cold;
    for (int i = 0; i < nr; i++)
        for (int32_t p = 0; p < n_ctx[i]; p++) s[i][p] = k[p] ? rt_dot_f16_f32(dk, k[p], q[i]) * scale : -INFINITY;
}

void rt_att_wsum4(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4], const int32_t n_ctx[4],
                  float *const out[4], bool cold) {
    (void)cold;
    for (int i = 0; i < nr; i++)
        for (int64_t d = 0; d < dv; d++) {
            float lane[16] = { 0 };
            for (int32_t p = 0; p < n_ctx[i]; p++)
                if (v[p]) lane[p % 16] = fmaf(pr[i][p], rt_f16_to_f32(v[p][d]), lane[p % 16]);
            out[i][d] = rt_hsum16_ggml(lane);
        }
}

/* Over a transposed V: a position without a row holds +0 there and adds pr * +0 to its lane,
 * which leaves the lane as rt_att_wsum4's skipping does (pr finite; a lane never holds -0). */
void rt_att_wsumt4(int nr, int64_t dv, const uint16_t *vt, int64_t ldv, const float *const pr[4],
                   const int32_t n_ctx[4], float *const out[4]) {
    for (int i = 0; i < nr; i++)
        for (int64_t d = 0; d < dv; d++) {
            float lane[16] = { 0 };
            for (int32_t p = 0; p < n_ctx[i]; p++) lane[p % 16] = fmaf(pr[i][p], rt_f16_to_f32(vt[d * ldv + p]), lane[p % 16]);
            out[i][d] = rt_hsum16_ggml(lane);
        }
}

void rt_f16_cols(int32_t n, int64_t dv, const uint16_t *const *rows, uint16_t *dst, int64_t ld) {
    for (int32_t j = 0; j < n; j++)
        for (int64_t d = 0; d < dv; d++) dst[d * ld + j] = rows[j] ? rows[j][d] : 0;
}
