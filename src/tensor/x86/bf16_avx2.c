/* bf16_avx2.c — rt_dot_bf16 (dot_ref.c) with AVX2: the 16 vdpbf16ps lanes as two 8-lane
 * halves (elements 0-15 and 16-31 of each block of RT_BF16_BLOCK), the lane step done with
 * FMAs (subnormal inputs read as zero, odd pair first, results flushed), then the 16 lanes
 * reduced as rt_hsum16_ggml. Other lengths take the scalar reference. Bit-identical to it. */
#include "tensor/x86/simd_x86.h"

static inline __m256 daz8(__m256i v) {
    const __m256i zexp = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
    return _mm256_castsi256_ps(_mm256_blendv_epi8(v, _mm256_and_si256(v, _mm256_set1_epi32(INT32_MIN)), zexp));
}

static inline __m256 ftz8(__m256 r) {
    const __m256 tiny = _mm256_cmp_ps(x86_abs_ps(r), _mm256_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm256_blendv_ps(r, _mm256_and_ps(r, _mm256_set1_ps(-0.0f)), tiny);
}

static inline __m256 step8(__m256 acc, const uint8_t *pa, const uint8_t *pb) {
    const __m256i a = _mm256_loadu_si256((const __m256i *)pa), b = _mm256_loadu_si256((const __m256i *)pb);
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    acc = ftz8(_mm256_fmadd_ps(daz8(_mm256_and_si256(a, hi)), daz8(_mm256_and_si256(b, hi)), acc));
    return ftz8(_mm256_fmadd_ps(daz8(_mm256_slli_epi32(a, 16)), daz8(_mm256_slli_epi32(b, 16)), acc));
}

static float vec_dot_bf16(int64_t n, const void *w, const void *x) {
    if (n % RT_BF16_BLOCK != 0) return rt_dot_bf16(n, w, x);
    const uint8_t *a = w, *b = x;
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
        lo = step8(lo, a + 2 * i, b + 2 * i);
        hi = step8(hi, a + 2 * i + 32, b + 2 * i + 32);
    }
    float l[16];
    _mm256_storeu_ps(l, lo);
    _mm256_storeu_ps(l + 8, hi);
    return rt_hsum16_ggml(l);
}

void rt_fill_bf16_avx2(tensor_kernels *k) { k->vec_dot[GGUF_T_BF16] = vec_dot_bf16; }
