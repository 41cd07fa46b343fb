/* exp_avx512.c — rt_vexpf (exp_ref.c) on 16 lanes: the same operations, with scalef doing
 * the final j·2^n in one rounding. Lanes are independent, so a masked tail gives the same
 * bits as full blocks; any n >= 0, no alignment, y may alias the inputs. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

static inline __mmask16 tail_mask(int64_t rem) { return (__mmask16)((1u << rem) - 1u); }

static inline __m512 vexp16(__m512 x) {
    const __m512 shift = _mm512_set1_ps(RT_VEXP_SHIFT);
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(RT_VEXP_LOG2E), shift), shift);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(RT_VEXP_LN2_LO),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(RT_VEXP_LN2_HI), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 p45 = _mm512_fmadd_ps(_mm512_set1_ps(RT_VEXP_C5), b, _mm512_set1_ps(RT_VEXP_C4));
    const __m512 p23 = _mm512_fmadd_ps(_mm512_set1_ps(RT_VEXP_C3), b, _mm512_set1_ps(RT_VEXP_C2));
    const __m512 p01 = _mm512_fmadd_ps(_mm512_set1_ps(RT_VEXP_C1), b, _mm512_set1_ps(1.0f));
    const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(p45, u, p23), u, p01);
    const __m512 e = _mm512_scalef_ps(j, n);
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(RT_VEXP_BIG), _CMP_GT_OQ);
    if (!big) return e;
    const __mmask16 pos = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_GT_OQ);
    const __m512 sat = _mm512_mask_blend_ps(pos, _mm512_setzero_ps(), _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(big, e, sat);
}

static inline __m512 silu16(__m512 x) {
    const __m512 e = vexp16(_mm512_sub_ps(_mm512_setzero_ps(), x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static void exp_f32(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, vexp16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, vexp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static void silu_f32(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, silu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, silu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static void swiglu_f32(int64_t n, const float *x, const float *g, float *y) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(x + i)), _mm512_loadu_ps(g + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 s = silu16(_mm512_maskz_loadu_ps(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, g + i)));
    }
}

/* rt_exp_sum_f32: each chunk's sum as rt_hsum16_ggml (lane l + lane l+8, then x86_hsum_ps). */
static double exp_sum_f32(int64_t n, float *x, float max) {
    const __m512 m = _mm512_set1_ps(max);
    double sum = 0.0;
    for (int64_t i = 0; i + 16 <= n; i += 16) {
        const __m512 e = vexp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), m));
        _mm512_storeu_ps(x + i, e);
        sum += (double)x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(e), _mm512_extractf32x8_ps(e, 1)));
    }
    return sum;
}

/* rt_max_f32: four vectors of running maxima (max(x, m) keeps m where x is NaN), the tail
 * masked in as -INFINITY. */
static float max_f32(int64_t n, const float *x) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    __m512 m[4] = { ninf, ninf, ninf, ninf };
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++) m[j] = _mm512_max_ps(_mm512_loadu_ps(x + i + 16 * j), m[j]);
    for (; i + 16 <= n; i += 16) m[0] = _mm512_max_ps(_mm512_loadu_ps(x + i), m[0]);
    if (i < n) m[1] = _mm512_max_ps(_mm512_mask_loadu_ps(ninf, tail_mask(n - i), x + i), m[1]);
    return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(m[0], m[1]), _mm512_max_ps(m[2], m[3])));
}

void rt_fill_exp_avx512(tensor_kernels *k) {
    k->exp_sum_f32 = exp_sum_f32;
    k->max_f32 = max_f32;
    k->exp_f32 = exp_f32;
    k->silu_f32 = silu_f32;
    k->swiglu_f32 = swiglu_f32;
}
