#include "tensor/ops.h"

#include <math.h>

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
    }
}

void op_l2norm(float *x, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float scale = 1.0f / fmaxf(sqrtf((float)sum), eps);
    for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

void op_rope_cache(float *cos_sin, int32_t pos, int n_rot, float base, float freq_scale,
                   const float *freq_factors) {
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int i = 0; i < n_rot / 2; i++) {
        const float t = freq_scale * (freq_factors ? theta / freq_factors[i] : theta);
        cos_sin[2 * i] = cosf(t);
        cos_sin[2 * i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void op_rope_apply(float *head, const float *cos_sin, int n_rot, op_rope_kind kind) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const int a = kind == OP_ROPE_NEOX ? i : 2 * i;
        const int b = kind == OP_ROPE_NEOX ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = head[a], x1 = head[b];
        /* the contractions of ggml's build (GCC, -ffp-contract=fast): bit-exact with it */
        head[a] = fmaf(x0, c, -(x1 * s));
        head[b] = fmaf(x0, s, x1 * c);
    }
}

/* ggml_vec_soft_max_f32 on AVX-512: exps in chunks of 16 whose float sums (reduced as
 * _mm512_reduce_add_ps) are added in double, the tail element by element in double; then one
 * multiplication by (float)(1/sum). ggml computes the chunk exps with its own vectorised
 * expf approximation; libm's expf is used here (a last-bit difference on some values). */
void op_softmax(float *x, int64_t n) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int l = 0; l < 16; l++) x[i + l] = expf(x[i + l] - max);
        float h[8], q[4];
        for (int l = 0; l < 8; l++) h[l] = x[i + l] + x[i + l + 8];
        for (int l = 0; l < 4; l++) q[l] = h[l] + h[l + 4];
        sum += (double)((q[0] + q[2]) + (q[1] + q[3]));
    }
    for (; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) x[i] *= inv;
}

void op_silu(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = op_silu1(x[i]);
}

void op_swiglu(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) g[i] = op_silu1(g[i]) * u[i];
}

void op_add(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}
