/* quant_avx512.c — AVX-512 activation quantizers (Q8_0, Q8_K, F16, BF16), F16/BF16
 * to_float and the f32 -> f16 row conversion.
 *
 * Every function produces exactly the bytes (or floats) of its scalar reference
 * (quant_ref.c), as in quant_avx2.c: same IEEE operations per element, scale factors
 * computed in scalar code, round-to-nearest-even exactly as the scalar code. Tails of the float types
 * use masked loads and stores. Contract as the scalar ones. */
#include "tensor/x86/simd_x86.h"

#define RN_EXACT (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

static inline __mmask16 tail_mask(int64_t rem) { return (__mmask16)((1u << rem) - 1u); }

static void from_float_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES, src += QK8_0) {
        const __m512 v0 = _mm512_loadu_ps(src), v1 = _mm512_loadu_ps(src + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        wr_u16(b, rt_f32_to_f16(d));
        const __m512 vid = _mm512_set1_ps(id);
        const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvt_roundps_epi32(_mm512_mul_ps(v0, vid), RN_EXACT));
        const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvt_roundps_epi32(_mm512_mul_ps(v1, vid), RN_EXACT));
        _mm_storeu_si128((__m128i *)(b + Q8_0_QS), q0);
        _mm_storeu_si128((__m128i *)(b + Q8_0_QS + 16), q1);
    }
}

static void from_float_q8_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, src += QK_K) {
        __m512 m = _mm512_setzero_ps();
        for (int k = 0; k < QK_K; k += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(src + k)));
        const float amax = _mm512_reduce_max_ps(m);
        if (amax == 0.0f) {
            memset(b, 0, Q8_K_BYTES);
            continue;
        }
        float max = 0.0f;   /* the first element of largest magnitude, as the scalar loop */
        for (int k = 0; k < QK_K; k += 16) {
            const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(src + k)),
                                                    _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (eq) { max = src[k + __builtin_ctz((unsigned)eq)]; break; }
        }
        const float iscale = -127.0f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        int16_t bs[16];
        for (int k = 0; k < QK_K; k += 16) {
            const __m512 t = _mm512_add_ps(_mm512_mul_ps(is, _mm512_loadu_ps(src + k)), _mm512_set1_ps(12582912.0f));
            __m512i q = _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32(0x007fffff));
            q = _mm512_min_epi32(_mm512_sub_epi32(q, _mm512_set1_epi32(0x00400000)), _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(b + Q8_K_QS + k), _mm512_cvtsepi32_epi8(q));
            bs[k / 16] = (int16_t)_mm512_reduce_add_epi32(q);
        }
        memcpy(b + Q8_K_BSUMS, bs, sizeof bs);
        wr_f32(b, 1.0f / iscale);
    }
}

/* rt_f32_to_f16 on 16 lanes (NaN canonicalized first, see x86_canon_nan). */
static inline __m256i f16x16(__m512 v) {
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    const __m512 q = _mm512_or_ps(_mm512_and_ps(v, _mm512_set1_ps(-0.0f)),
                                  _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)));
    return _mm512_cvtps_ph(_mm512_mask_mov_ps(v, nan, q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static void from_float_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(d + 2 * i), f16x16(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(d + 2 * i, m, f16x16(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

static void f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
    from_float_f16(src, dst, n);
}

/* rt_f32_to_bf16 on 16 lanes. */
static inline __m256i bf16x16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64)));
    return _mm512_cvtepi32_epi16(r);
}

static void from_float_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(d + 2 * i), bf16x16(_mm512_loadu_ps(src + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm256_mask_storeu_epi16(d + 2 * i, m, bf16x16(_mm512_maskz_loadu_ps(m, src + i)));
    }
}

static void to_float_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * i))));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s + 2 * i)));
    }
}

static void to_float_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
        _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s + 2 * i));
        _mm512_mask_storeu_ps(dst + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
    }
}

static void scale_round_f16(int64_t n, float *x, float s) {
    const __m512 vs = _mm512_set1_ps(s);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, _mm512_cvtph_ps(f16x16(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs))));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, _mm512_cvtph_ps(f16x16(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs))));
    }
}

void rt_fill_quant_avx512(tensor_kernels *k) {
    k->scale_round_f16 = scale_round_f16;
    k->from_float[GGUF_T_Q8_0] = from_float_q8_0;
    k->from_float[GGUF_T_Q8_K] = from_float_q8_K;
    k->from_float[GGUF_T_F16] = from_float_f16;
    k->from_float[GGUF_T_BF16] = from_float_bf16;
    k->to_float[GGUF_T_F16] = to_float_f16;
    k->to_float[GGUF_T_BF16] = to_float_bf16;
    k->f32_to_f16_row = f32_to_f16_row;
}
