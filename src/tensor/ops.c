#include "tensor/ops.h"

#include <math.h>

#include "tensor/tensor_impl.h"

/* y = (x * scale) * w. Groups of 4 load everything before storing (y may be x), so the
 * compiler may pack each group into one vector op: the same products, element by element. */
static void rms_apply(float *y, const float *x, const float *w, int64_t n, double sum, float eps) {
    const float scale = 1.0f / sqrtf((float)(sum / (double)n) + eps);
    int64_t i = 0;
    if (w) {
        for (; i + 4 <= n; i += 4) {
            const float a0 = x[i] * scale, a1 = x[i + 1] * scale, a2 = x[i + 2] * scale, a3 = x[i + 3] * scale;
            const float b0 = a0 * w[i], b1 = a1 * w[i + 1], b2 = a2 * w[i + 2], b3 = a3 * w[i + 3];
            y[i] = b0;
            y[i + 1] = b1;
            y[i + 2] = b2;
            y[i + 3] = b3;
        }
        for (; i < n; i++) y[i] = (x[i] * scale) * w[i];
    } else {
        for (; i < n; i++) y[i] = x[i] * scale;
    }
}

void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum;
    rt_sumsq_rows(n, x, n, 1, &sum);
    rms_apply(y, x, w, n, sum, eps);
}

/* Rows whose sums the kernel table finds at once (sumsq_rows: several rows side by side, each
 * its serial sum), before they are scaled. */
#define OP_SUM_ROWS 32

void op_rmsnorm_rows(const tensor_kernels *k, float *y, const float *x, const float *w, int64_t n, int64_t rows,
                     int64_t stride, float eps) {
    double s[OP_SUM_ROWS];
    /* A token's matmuls stream the weights through the caches between two norms, so w is
     * cold: its lines are asked for here and arrive while the sums (serial chains) run. */
    for (int64_t i = 0; w && i < n; i += 64 / (int64_t)sizeof *w) __builtin_prefetch(w + i);
    for (int64_t r0 = 0; r0 < rows; r0 += OP_SUM_ROWS) {
        const int64_t nr = rows - r0 < OP_SUM_ROWS ? rows - r0 : OP_SUM_ROWS;
        k->sumsq_rows(n, x + r0 * stride, stride, nr, s);
        for (int64_t r = 0; r < nr; r++) rms_apply(y + (r0 + r) * stride, x + (r0 + r) * stride, w, n, s[r], eps);
    }
}

/* x /= max(||x||, eps) with the serial sum s */
static void l2_apply(float *x, int64_t n, double s, float eps) {
    const float scale = 1.0f / fmaxf(sqrtf((float)s), eps);
    for (int64_t i = 0; i < n; i++) x[i] *= scale;
}

void op_l2norm(float *x, int64_t n, float eps) {
    double sum;
    rt_sumsq_rows(n, x, n, 1, &sum);
    l2_apply(x, n, sum, eps);
}

/* As op_rmsnorm_rows: four rows' sums side by side, each in index order. */
void op_l2norm_rows(const tensor_kernels *k, float *x, int64_t n, int64_t rows, float eps) {
    double s[OP_SUM_ROWS];
    for (int64_t r0 = 0; r0 < rows; r0 += OP_SUM_ROWS) {
        const int64_t nr = rows - r0 < OP_SUM_ROWS ? rows - r0 : OP_SUM_ROWS;
        k->sumsq_rows(n, x + r0 * n, n, nr, s);
        for (int64_t r = 0; r < nr; r++) l2_apply(x + (r0 + r) * n, n, s[r], eps);
    }
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

void op_rope_apply(const tensor_kernels *k, float *head, const float *cos_sin, int n_rot, op_rope_kind kind) {
    k->rope_f32(head, cos_sin, n_rot, kind == OP_ROPE_NEOX);   /* ggml's contractions: rope_ref.c */
}

/* ggml_vec_soft_max_f32 on AVX-512: exps in chunks of 16 (the vectorised exp) whose float
 * sums (reduced as _mm512_reduce_add_ps) are added in double, the tail element by element
 * (libm's expf) in double; then (op_softmax) one multiplication by (float)(1/sum). */
float op_softmax_exp(const tensor_kernels *k, float *x, int64_t n) {
    const float max = k->max_f32(n, x);   /* the table's: a pass of 16-lane maxima, not of 4 */
    const int64_t nv = n - n % OP_GGML_LANES;
    double sum = nv > 0 ? k->exp_sum_f32(nv, x, max) : 0.0;
    for (int64_t i = nv; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += (double)x[i];
    }
    return (float)(1.0 / sum);
}

void op_softmax(const tensor_kernels *k, float *x, int64_t n) {
    const float inv = op_softmax_exp(k, x, n);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void op_silu_part(const tensor_kernels *k, float *y, const float *x, int64_t n, int64_t lo, int64_t hi) {
    const int64_t nv = n - n % OP_GGML_LANES, mid = hi < nv ? hi : nv;
    if (lo < mid) k->silu_f32(mid - lo, x + lo, y + lo);
    for (int64_t i = lo > nv ? lo : nv; i < hi; i++) y[i] = op_silu1(x[i]);
}

void op_swiglu_part(const tensor_kernels *k, float *y, const float *x, const float *g, int64_t n, int64_t lo,
                    int64_t hi) {
    const int64_t nv = n - n % OP_GGML_LANES, mid = hi < nv ? hi : nv;
    if (lo < mid) k->swiglu_f32(mid - lo, x + lo, g + lo, y + lo);
    for (int64_t i = lo > nv ? lo : nv; i < hi; i++) y[i] = op_silu1(x[i]) * g[i];
}

void op_add(float *restrict y, const float *restrict x, int64_t n) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {   /* four independent adds: -O2 makes them one vector add */
        y[i] += x[i];
        y[i + 1] += x[i + 1];
        y[i + 2] += x[i + 2];
        y[i + 3] += x[i + 3];
    }
    for (; i < n; i++) y[i] += x[i];
}
