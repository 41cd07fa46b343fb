/* bf16_avx512.c — the BF16 x BF16 dot in ggml's order (rt_dot_bf16, dot_ref.c): for rows that
 * are a multiple of RT_BF16_BLOCK, one 16-lane vdpbf16ps accumulator (tinyBLAS on an
 * AVX512_BF16 CPU); other lengths take the scalar reference (ggml's fallback order; rare).
 * With the instruction the lane step is vdpbf16ps itself; without it, the same step with
 * FMAs: subnormal inputs read as zero, the odd pair fused first, then the even pair, each
 * result with subnormals flushed (bit-identical to the instruction and to dot_ref.c). */
#include "tensor/x86/simd_x86.h"

static inline __m512 daz16(__m512i v) {
    const __mmask16 normal = _mm512_test_epi32_mask(v, _mm512_set1_epi32(0x7F800000));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(normal, _mm512_and_si512(v, _mm512_set1_epi32(INT32_MIN)), v));
}

static inline __m512 ftz16(__m512 r) {
    const __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(r), _mm512_set1_ps(0x1p-126f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(tiny, r, _mm512_and_ps(r, _mm512_set1_ps(-0.0f)));
}

static inline __m512 step_fma(__m512 acc, __m512i a, __m512i b) {
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    acc = ftz16(_mm512_fmadd_ps(daz16(_mm512_and_si512(a, hi)), daz16(_mm512_and_si512(b, hi)), acc));
    return ftz16(_mm512_fmadd_ps(daz16(_mm512_slli_epi32(a, 16)), daz16(_mm512_slli_epi32(b, 16)), acc));
}

static inline __m512 step_native(__m512 acc, __m512i a, __m512i b) {
    return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

typedef __m512 (*step_fn)(__m512 acc, __m512i a, __m512i b);

static inline __attribute__((always_inline)) float dot_body(int64_t n, const void *w, const void *x, step_fn step) {
    if (n % RT_BF16_BLOCK != 0) return rt_dot_bf16(n, w, x);
    const uint8_t *a = w, *b = x;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK)
        acc = step(acc, _mm512_loadu_si512(a + 2 * i), _mm512_loadu_si512(b + 2 * i));
    float l[16];
    _mm512_storeu_ps(l, acc);
    return rt_hsum16_ggml(l);
}

static inline float hsum16(__m512 acc) {
    float l[16];
    _mm512_storeu_ps(l, acc);
    return rt_hsum16_ggml(l);
}

/* Four activation rows against one weight row: four independent accumulator chains (the
 * single chain of one dot is latency-bound), each with dot_body's operations. */
static inline __attribute__((always_inline)) void dot4_body(int64_t n, const void *w, const void *x, size_t xs,
                                                            float out[4], step_fn step) {
    const uint8_t *a = w, *b = x;
    if (n % RT_BF16_BLOCK != 0) {
        for (int j = 0; j < 4; j++) out[j] = rt_dot_bf16(n, w, b + j * xs);
        return;
    }
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
        const __m512i va = _mm512_loadu_si512(a + 2 * i);
        c0 = step(c0, va, _mm512_loadu_si512(b + 2 * i));
        c1 = step(c1, va, _mm512_loadu_si512(b + xs + 2 * i));
        c2 = step(c2, va, _mm512_loadu_si512(b + 2 * xs + 2 * i));
        c3 = step(c3, va, _mm512_loadu_si512(b + 3 * xs + 2 * i));
    }
    out[0] = hsum16(c0);
    out[1] = hsum16(c1);
    out[2] = hsum16(c2);
    out[3] = hsum16(c3);
}

static float dot_fma(int64_t n, const void *w, const void *x) { return dot_body(n, w, x, step_fma); }
static float dot_native(int64_t n, const void *w, const void *x) { return dot_body(n, w, x, step_native); }
static void dot4_fma(int64_t n, const void *w, const void *x, size_t xs, float out[4]) {
    dot4_body(n, w, x, xs, out, step_fma);
}
static void dot4_native(int64_t n, const void *w, const void *x, size_t xs, float out[4]) {
    dot4_body(n, w, x, xs, out, step_native);
}

/* Bytes ahead that each BF16 row stream of gemv_bf16_native is fetched (the Q8_0 streams'). */
#define BF16_PF X86_Q8_PF

/* gemv[BF16] with vdpbf16ps: group r < q = n_rows / 4 is rows r, r + q, r + 2q, r + 3q, four
 * streams each straight through a quarter of the matrix (gemv_q8_0's), each row with its own
 * accumulator chain taking dot_body's steps in its order (so vec_dot's bits), x's vector
 * loaded once for the four, every stream fetched BF16_PF bytes ahead; group q is the 0-3 rows
 * left, one dot each, as are rows whose length the dot takes to the scalar reference. One row
 * at a time, a dot is one vdpbf16ps chain, bound by the instruction's latency rather than by
 * memory: this keeps four chains in flight. */
static void gemv_bf16_native(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                             const void *x, float *y) {
    const uint8_t *W = w, *X = x;
    const int64_t q = n_rows / 4, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *a0 = W + (size_t)r * ws, *a1 = W + (size_t)(r + q) * ws;
        const uint8_t *a2 = W + (size_t)(r + 2 * q) * ws, *a3 = W + (size_t)(r + 3 * q) * ws;
        if (n % RT_BF16_BLOCK != 0) {
            y[r] = dot_native(n, a0, X), y[r + q] = dot_native(n, a1, X);
            y[r + 2 * q] = dot_native(n, a2, X), y[r + 3 * q] = dot_native(n, a3, X);
            continue;
        }
        __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
        for (int64_t i = 0; i < n; i += RT_BF16_BLOCK) {
            const size_t o = (size_t)(2 * i);
            _mm_prefetch((const char *)(a0 + o + BF16_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(a1 + o + BF16_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(a2 + o + BF16_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(a3 + o + BF16_PF), _MM_HINT_T0);
            const __m512i xv = _mm512_loadu_si512(X + o);
            c0 = step_native(c0, _mm512_loadu_si512(a0 + o), xv);
            c1 = step_native(c1, _mm512_loadu_si512(a1 + o), xv);
            c2 = step_native(c2, _mm512_loadu_si512(a2 + o), xv);
            c3 = step_native(c3, _mm512_loadu_si512(a3 + o), xv);
        }
        y[r] = hsum16(c0), y[r + q] = hsum16(c1), y[r + 2 * q] = hsum16(c2), y[r + 3 * q] = hsum16(c3);
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = dot_native(n, W + (size_t)r * ws, X);
}

void rt_fill_bf16_avx512(tensor_kernels *k, bool native) {
    k->vec_dot[GGUF_T_BF16] = native ? dot_native : dot_fma;
    k->vec_dot4[GGUF_T_BF16] = native ? dot4_native : dot4_fma;
    /* vdpbf16ps tiles (gemm_f16_avx512.c), or the AVX2 tiles of the same FMA steps */
    k->gemm[GGUF_T_BF16] = native ? rt_gemm_bf16_avx512 : rt_gemm_bf16_avx2;
    k->gemv[GGUF_T_BF16] = native ? (tensor_gemv){ gemv_bf16_native, 4, NULL, 0, NULL, 0 }
                                  : (tensor_gemv){ rt_gemv_bf16_avx2, RT_GEMV_BF16_GROUP, NULL, 0, NULL, 0 };
}
