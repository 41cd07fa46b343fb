/* exp_ref.c — the exponential of ggml's vectorised CPU kernels, one float at a time.
 *
 * ggml computes the exps of its softmax, SiLU and SwiGLU rows with a vector expf (the
 * published algorithm of Arm's optimized-routines: n = round(x·log2 e), b = x − n·ln 2 in two
 * parts, a degree-5 polynomial p(b) ≈ e^b, then p(b)·2^n). It differs from libm's correctly
 * rounded expf in the last bit on a small fraction of inputs, and llama.cpp's logits carry
 * those bits, so recur reproduces the lane computation of ggml's AVX-512 build exactly:
 *
 *   z = fma(x, log2e, 1.5·2^23);  n = z − 1.5·2^23          (round to nearest even, |x| < 2^22)
 *   b = fma(−n, ln2_lo, fma(−n, ln2_hi, x));  u = b·b
 *   j = fma(fma(fma(c5, b, c4), u, fma(c3, b, c2)), u, fma(c1, b, 1))
 *   e = j · 2^n, rounded once (AVX-512 scalef);  |n| > 192: 0 for n < 0, +inf for n > 0.
 *
 * The AVX2 build of ggml uses a different final step (k + k·j', with its own overflow path),
 * so its bits differ from these; the reference vectors come from the AVX-512 build.
 * Every kernel table (scalar, x86/exp_avx2.c, x86/exp_avx512.c) gives these bits exactly. */
#include <math.h>

#include "tensor/tensor_impl.h"

/* 2^k as a float, for -126 <= k <= 127. */
static inline float pow2i(int k) {
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float rt_vexpf(float x) {
    const float z = fmaf(x, RT_VEXP_LOG2E, RT_VEXP_SHIFT);
    const float n = z - RT_VEXP_SHIFT;
    if (isnan(n)) return x + x;                     /* NaN in, quiet NaN out */
    if (fabsf(n) > RT_VEXP_BIG) return n > 0.0f ? INFINITY : 0.0f;
    const float b = fmaf(-n, RT_VEXP_LN2_LO, fmaf(-n, RT_VEXP_LN2_HI, x));
    const float u = b * b;
    const float j = fmaf(fmaf(fmaf(RT_VEXP_C5, b, RT_VEXP_C4), u, fmaf(RT_VEXP_C3, b, RT_VEXP_C2)), u,
                         fmaf(RT_VEXP_C1, b, 1.0f));
    /* j·2^k with a single rounding (what scalef does): j ∈ [0.7, 1.5] times 2^(k/2) is exact
     * (|k/2| <= 96 keeps it normal), so only the second product rounds, to a subnormal, an
     * infinity or a normal alike. */
    const int k = (int)n, k1 = k / 2;
    return (j * pow2i(k1)) * pow2i(k - k1);
}

void rt_exp_f32(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = rt_vexpf(x[i]);
}

double rt_exp_sum_f32(int64_t n, float *x, float max) {
    double sum = 0.0;
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) x[i + j] = rt_vexpf(x[i + j] - max);
        sum += (double)rt_hsum16_ggml(x + i);
    }
    return sum;
}

float rt_max_f32(int64_t n, const float *x) {
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++) max = x[i] > max ? x[i] : max;
    return max;
}

void rt_silu_f32(int64_t n, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + rt_vexpf(0.0f - x[i]));
}

void rt_swiglu_f32(int64_t n, const float *x, const float *g, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = (x[i] / (1.0f + rt_vexpf(0.0f - x[i]))) * g[i];
}
