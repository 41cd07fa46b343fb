/* quant_avx2.c — AVX2 activation quantizers (Q8_0, Q8_K, F16, BF16) and F16/BF16 to_float.
 *
 * Every function produces exactly the bytes (or floats) of its scalar reference in
 * quant_ref.c: the same IEEE operations in the same order per element (max is exact in any
 * order; d, id and iscale are computed in scalar code), and round-to-nearest-even exactly as the
 * scalar code. Contract as the scalar ones: n a multiple of the block size, no
 * alignment, no overlap. */
#include "tensor/x86/simd_x86.h"

/* 32 int32 lanes (4 vectors, element order) -> 32 int8 (saturating; the values fit). */
static inline __m256i pack_i32_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    const __m256i v = _mm256_packs_epi16(ab, cd);     /* lane-interleaved dwords */
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void from_float_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES, src += QK8_0) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(src + 8 * k);
            m = _mm256_max_ps(m, x86_abs_ps(v[k]));
        }
        const float amax = x86_hmax_ps(m);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        wr_u16(b, rt_f32_to_f16(d));
        __m256i q[4];
        for (int k = 0; k < 4; k++)
            q[k] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id)),
                                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        _mm256_storeu_si256((__m256i *)(b + Q8_0_QS), pack_i32_i8(q[0], q[1], q[2], q[3]));
    }
}

/* The first element of x[0..256) whose magnitude equals amax (the scalar loop's choice). */
static float first_of_magnitude(const float *x, float amax) {
    const __m256 a = _mm256_set1_ps(amax);
    for (int k = 0; k < QK_K; k += 8) {
        const int mask = _mm256_movemask_ps(_mm256_cmp_ps(x86_abs_ps(_mm256_loadu_ps(x + k)), a, _CMP_EQ_OQ));
        if (mask) return x[k + __builtin_ctz((unsigned)mask)];
    }
    return 0.0f;   /* unreachable for finite input */
}

/* bsums of 32 int8 (two groups of 16) via sad against zero of the bytes biased by 128. */
static inline void bsums32(__m256i q, int16_t out[2]) {
    const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(q, _mm256_set1_epi8((char)0x80)),
                                      _mm256_setzero_si256());
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, s);
    out[0] = (int16_t)((int)(t[0] + t[1]) - 2048);
    out[1] = (int16_t)((int)(t[2] + t[3]) - 2048);
}

static void from_float_q8_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, src += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K; k += 8) m = _mm256_max_ps(m, x86_abs_ps(_mm256_loadu_ps(src + k)));
        const float amax = x86_hmax_ps(m);
        if (amax == 0.0f) {
            memset(b, 0, Q8_K_BYTES);
            continue;
        }
        const float iscale = -127.0f / first_of_magnitude(src, amax);
        const __m256 is = _mm256_set1_ps(iscale);
        int16_t bs[16];
        for (int k = 0; k < QK_K; k += 32) {
            __m256i q[4];
            for (int l = 0; l < 4; l++) {
                const __m256i v = x86_nearest_int(_mm256_mul_ps(is, _mm256_loadu_ps(src + k + 8 * l)));
                q[l] = _mm256_min_epi32(v, _mm256_set1_epi32(127));
            }
            const __m256i p = pack_i32_i8(q[0], q[1], q[2], q[3]);
            _mm256_storeu_si256((__m256i *)(b + Q8_K_QS + k), p);
            bsums32(p, bs + k / 16);
        }
        memcpy(b + Q8_K_BSUMS, bs, sizeof bs);
        wr_f32(b, 1.0f / iscale);
    }
}

static void from_float_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(x86_canon_nan(_mm256_loadu_ps(src + i)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128((__m128i *)(d + 2 * i), h);
    }
    for (; i < n; i++) wr_u16(d + 2 * i, rt_f32_to_f16(src[i]));
}

static void f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
    from_float_f16(src, dst, n);
}

static void from_float_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i a = x86_bf16_round(_mm256_loadu_ps(src + i));
        const __m256i b = x86_bf16_round(_mm256_loadu_ps(src + i + 8));
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
        _mm256_storeu_si256((__m256i *)(d + 2 * i), p);
    }
    for (; i < n; i++) wr_u16(d + 2 * i, rt_f32_to_bf16(src[i]));
}

static void to_float_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    for (; i < n; i++) dst[i] = rd_f16(s + 2 * i);
}

static void to_float_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = rt_bf16_to_f32(rd_u16(s + 2 * i));
}

static void scale_round_f16(int64_t n, float *x, float s) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(x86_canon_nan(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) x[i] = rt_f16_to_f32(rt_f32_to_f16(x[i] * s));
}

void rt_fill_quant_avx2(tensor_kernels *k) {
    k->scale_round_f16 = scale_round_f16;
    k->from_float[GGUF_T_Q8_0] = from_float_q8_0;
    k->from_float[GGUF_T_Q8_K] = from_float_q8_K;
    k->from_float[GGUF_T_F16] = from_float_f16;
    k->from_float[GGUF_T_BF16] = from_float_bf16;
    k->to_float[GGUF_T_F16] = to_float_f16;
    k->to_float[GGUF_T_BF16] = to_float_bf16;
    k->f32_to_f16_row = f32_to_f16_row;
}
