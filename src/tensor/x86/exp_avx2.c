/* exp_avx2.c — rt_vexpf (exp_ref.c) on 8 lanes. AVX2 has no scalef: j·2^n is done as the
 * scalar reference does it, (j·2^(k>>1))·2^(k−(k>>1)) with an exact first product, so the
 * only rounding is the second one, as in scalef. The lanes with |n| > 192 (and NaN lanes,
 * whose j is NaN) never use the exponent bits they produce. Any n >= 0, no alignment, y may
 * alias the inputs. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

/* 2^k for -126 <= k <= 127 in every lane. */
static inline __m256 pow2i8(__m256i k) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

static inline __m256 vexp8(__m256 x) {
    const __m256 shift = _mm256_set1_ps(RT_VEXP_SHIFT);
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(RT_VEXP_LOG2E), shift), shift);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(RT_VEXP_LN2_LO),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(RT_VEXP_LN2_HI), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p45 = _mm256_fmadd_ps(_mm256_set1_ps(RT_VEXP_C5), b, _mm256_set1_ps(RT_VEXP_C4));
    const __m256 p23 = _mm256_fmadd_ps(_mm256_set1_ps(RT_VEXP_C3), b, _mm256_set1_ps(RT_VEXP_C2));
    const __m256 p01 = _mm256_fmadd_ps(_mm256_set1_ps(RT_VEXP_C1), b, _mm256_set1_ps(1.0f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(p45, u, p23), u, p01);
    const __m256i k = _mm256_cvttps_epi32(n), k1 = _mm256_srai_epi32(k, 1);
    const __m256 e = _mm256_mul_ps(_mm256_mul_ps(j, pow2i8(k1)), pow2i8(_mm256_sub_epi32(k, k1)));
    const __m256 big = _mm256_cmp_ps(x86_abs_ps(n), _mm256_set1_ps(RT_VEXP_BIG), _CMP_GT_OQ);
    if (!_mm256_movemask_ps(big)) return e;
    const __m256 pos = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ);
    return _mm256_blendv_ps(e, _mm256_and_ps(pos, _mm256_set1_ps(INFINITY)), big);
}

static inline __m256 silu8(__m256 x) {
    const __m256 e = vexp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* Tails: one partial block through a stack copy (lanes are independent). */
static void exp_f32(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, vexp8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = { 0 };
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, vexp8(_mm256_loadu_ps(t)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

static void silu_f32(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        float t[8] = { 0 };
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, silu8(_mm256_loadu_ps(t)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

static void swiglu_f32(int64_t n, const float *x, const float *g, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(x + i)), _mm256_loadu_ps(g + i)));
    if (i < n) {
        float t[8] = { 0 }, s[8] = { 0 };
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        memcpy(s, g + i, (size_t)(n - i) * sizeof(float));
        _mm256_storeu_ps(t, _mm256_mul_ps(silu8(_mm256_loadu_ps(t)), _mm256_loadu_ps(s)));
        memcpy(y + i, t, (size_t)(n - i) * sizeof(float));
    }
}

/* rt_exp_sum_f32: each chunk's sum as rt_hsum16_ggml (lane l + lane l+8, then x86_hsum_ps). */
static double exp_sum_f32(int64_t n, float *x, float max) {
    const __m256 m = _mm256_set1_ps(max);
    double sum = 0.0;
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        const __m256 lo = vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        const __m256 hi = vexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
        _mm256_storeu_ps(x + i, lo);
        _mm256_storeu_ps(x + i + 8, hi);
        sum += (double)x86_hsum_ps(_mm256_add_ps(lo, hi));
    }
    return sum;
}

/* rt_max_f32: four vectors of running maxima (max(x, m) keeps m where x is NaN), the tail
 * element by element. */
static float max_f32(int64_t n, const float *x) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 m[4] = { ninf, ninf, ninf, ninf };
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int j = 0; j < 4; j++) m[j] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * j), m[j]);
    float l[8], max = -INFINITY;
    _mm256_storeu_ps(l, _mm256_max_ps(_mm256_max_ps(m[0], m[1]), _mm256_max_ps(m[2], m[3])));
    for (int j = 0; j < 8; j++) max = l[j] > max ? l[j] : max;
    for (; i < n; i++) max = x[i] > max ? x[i] : max;
    return max;
}

void rt_fill_exp_avx2(tensor_kernels *k) {
    k->exp_sum_f32 = exp_sum_f32;
    k->max_f32 = max_f32;
    k->exp_f32 = exp_f32;
    k->silu_f32 = silu_f32;
    k->swiglu_f32 = swiglu_f32;
}
