/* float_avx512.c — AVX-512 dot products of the float types and the attention helpers.
 *
 * Dots: 4 accumulators of 16 lanes over blocks of 64 elements, then one accumulator over
 * blocks of 16, then a masked block for the tail; summed in that fixed order (depends only
 * on n: invariant 1). Any n >= 0, no alignment. (BF16: bf16_avx512.c, ggml's vdpbf16ps order.) */
#include "tensor/x86/simd_x86.h"

static inline __mmask16 tail_mask(int64_t rem) { return (__mmask16)((1u << rem) - 1u); }

/* Element loaders: 16 floats from element i of a row (masked: zeros past the mask). */
static inline __m512 ld_f32(const void *p, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}
static inline __m512 ld_f16(const void *p, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
}

typedef __m512 (*ld_fn)(const void *p, int64_t i, __mmask16 m);

/* rt_hsum16_ggml of 16 lanes: lane l + lane l+8, then x86_hsum_ps (GCC's _mm512_reduce_add_ps
 * tree, written out: another compiler's may differ, and float_avx2.c repeats this order). */
static inline float hsum16(__m512 acc) {
    return x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1)));
}

/* The shared body of every float dot; always inlined, so la/lb become direct loads. */
static inline __attribute__((always_inline)) float dot_body(int64_t n, const void *a, const void *b,
                                                            ld_fn la, ld_fn lb) {
    const __mmask16 all = 0xFFFF;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(la(a, i, all), lb(b, i, all), s0);
        s1 = _mm512_fmadd_ps(la(a, i + 16, all), lb(b, i + 16, all), s1);
        s2 = _mm512_fmadd_ps(la(a, i + 32, all), lb(b, i + 32, all), s2);
        s3 = _mm512_fmadd_ps(la(a, i + 48, all), lb(b, i + 48, all), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(la(a, i, all), lb(b, i, all), s0);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        s1 = _mm512_fmadd_ps(la(a, i, m), lb(b, i, m), s1);
    }
    return hsum16(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

static float dot_f32_f32(int64_t n, const float *a, const float *b) { return dot_body(n, a, b, ld_f32, ld_f32); }
static float vec_dot_f32(int64_t n, const void *w, const void *x) { return dot_body(n, w, x, ld_f32, ld_f32); }
static float vec_dot_f16(int64_t n, const void *w, const void *x) { return dot_body(n, w, x, ld_f16, ld_f16); }


/* Bytes ahead that each F16 row stream of gemv_f16 is fetched (the Q8_0 streams' distance). */
#define F16_PF X86_Q8_PF

/* dot_body(ld_f16, ld_f16) of rows w[0..3] against x, side by side: each row's accumulators
 * take exactly its FMAs in its order, and its sum the same reduction, so y[j] is vec_dot_f16's
 * bits; x's 16 elements are loaded and widened once for the four rows, and each row stream is
 * fetched F16_PF bytes ahead (a line every 32 elements). y[j] NULL: not stored. */
static inline __attribute__((always_inline)) void f16_rows4(int64_t n, const uint8_t *const w[4], const uint16_t *x,
                                                            float *const y[4]) {
    const __mmask16 all = 0xFFFF;
    __m512 s[4][4];
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512 xv[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) xv[c] = ld_f16(x, i + 16 * c, all);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            _mm_prefetch((const char *)(w[j] + 2 * i + F16_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(w[j] + 2 * i + F16_PF + 64), _MM_HINT_T0);
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) s[j][c] = _mm512_fmadd_ps(ld_f16(w[j], i + 16 * c, all), xv[c], s[j][c]);
        }
    }
    for (; i + 16 <= n; i += 16) {
        const __m512 xv = ld_f16(x, i, all);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) s[j][0] = _mm512_fmadd_ps(ld_f16(w[j], i, all), xv, s[j][0]);
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 xv = ld_f16(x, i, m);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) s[j][1] = _mm512_fmadd_ps(ld_f16(w[j], i, m), xv, s[j][1]);
    }
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)
        if (y[j]) *y[j] = hsum16(_mm512_add_ps(_mm512_add_ps(s[j][0], s[j][1]), _mm512_add_ps(s[j][2], s[j][3])));
}

/* gemv[F16]: group r < q = n_rows / 4 is rows r, r + q, r + 2q, r + 3q (four streams, each
 * straight through a quarter of the matrix, as gemv_q8_0's); group q the 0-3 rows left, one
 * at a time (given four times, stored once). Row by row, vec_dot_f16's bits. */
static void gemv_f16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                     float *y) {
    const uint8_t *W = w;
    const int64_t q = n_rows / 4, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++)
        f16_rows4(n, (const uint8_t *const[4]){ W + (size_t)r * ws, W + (size_t)(r + q) * ws, W + (size_t)(r + 2 * q) * ws,
                                                W + (size_t)(r + 3 * q) * ws },
                  x, (float *const[4]){ y + r, y + r + q, y + r + 2 * q, y + r + 3 * q });
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) {
        const uint8_t *row = W + (size_t)r * ws;
        f16_rows4(n, (const uint8_t *const[4]){ row, row, row, row }, x, (float *const[4]){ y + r, NULL, NULL, NULL });
    }
}

/* rt_dot_f16_f32's order: one 16-lane accumulator (lanes past a tail keep their value),
 * reduced as rt_hsum16_ggml (written out: the compiler's reduce intrinsic may differ). */
static float dot_f16_f32(int64_t n, const uint16_t *a, const float *b) {
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(ld_f16(a, i, 0xFFFF), ld_f32(b, i, 0xFFFF), acc);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        acc = _mm512_mask3_fmadd_ps(ld_f16(a, i, m), ld_f32(b, i, m), acc, m);
    }
    return hsum16(acc);
}

/* dot_f16_f32 four times over one F16 row: each accumulator sees exactly the FMAs (masked
 * tail included) and the reduction of the one-row kernel. */
static void dot4_f16_f32(int64_t n, const uint16_t *a, const float *const b[4], float out[4]) {
    __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 k = ld_f16(a, i, 0xFFFF);
        c0 = _mm512_fmadd_ps(k, ld_f32(b[0], i, 0xFFFF), c0);
        c1 = _mm512_fmadd_ps(k, ld_f32(b[1], i, 0xFFFF), c1);
        c2 = _mm512_fmadd_ps(k, ld_f32(b[2], i, 0xFFFF), c2);
        c3 = _mm512_fmadd_ps(k, ld_f32(b[3], i, 0xFFFF), c3);
    }
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        const __m512 k = ld_f16(a, i, m);
        c0 = _mm512_mask3_fmadd_ps(k, ld_f32(b[0], i, m), c0, m);
        c1 = _mm512_mask3_fmadd_ps(k, ld_f32(b[1], i, m), c1, m);
        c2 = _mm512_mask3_fmadd_ps(k, ld_f32(b[2], i, m), c2, m);
        c3 = _mm512_mask3_fmadd_ps(k, ld_f32(b[3], i, m), c3, m);
    }
    out[0] = hsum16(c0);
    out[1] = hsum16(c1);
    out[2] = hsum16(c2);
    out[3] = hsum16(c3);
}

/* y = fmaf(alpha, x, y) per element: identical to the scalar reference. */
static void axpy_f16(int64_t n, float alpha, const uint16_t *x, float *y) {
    const __m512 va = _mm512_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512 y0 = _mm512_fmadd_ps(va, ld_f16(x, i, 0xFFFF), _mm512_loadu_ps(y + i));
        const __m512 y1 = _mm512_fmadd_ps(va, ld_f16(x, i + 16, 0xFFFF), _mm512_loadu_ps(y + i + 16));
        _mm512_storeu_ps(y + i, y0);
        _mm512_storeu_ps(y + i + 16, y1);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, ld_f16(x, i, m), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* axpy_f16 into four rows: the same per-element fmaf, x loaded and converted once. */
static void axpy4_f16(int64_t n, const float alpha[4], const uint16_t *x, float *const y[4]) {
    const __m512 a0 = _mm512_set1_ps(alpha[0]), a1 = _mm512_set1_ps(alpha[1]);
    const __m512 a2 = _mm512_set1_ps(alpha[2]), a3 = _mm512_set1_ps(alpha[3]);
    float *y0 = y[0], *y1 = y[1], *y2 = y[2], *y3 = y[3];
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : tail_mask(n - i);
        const __m512 v = ld_f16(x, i, m);
        _mm512_mask_storeu_ps(y0 + i, m, _mm512_fmadd_ps(a0, v, _mm512_maskz_loadu_ps(m, y0 + i)));
        _mm512_mask_storeu_ps(y1 + i, m, _mm512_fmadd_ps(a1, v, _mm512_maskz_loadu_ps(m, y1 + i)));
        _mm512_mask_storeu_ps(y2 + i, m, _mm512_fmadd_ps(a2, v, _mm512_maskz_loadu_ps(m, y2 + i)));
        _mm512_mask_storeu_ps(y3 + i, m, _mm512_fmadd_ps(a3, v, _mm512_maskz_loadu_ps(m, y3 + i)));
    }
}

void rt_fill_float_avx512(tensor_kernels *k) {
    k->vec_dot[GGUF_T_F32] = vec_dot_f32;
    k->vec_dot[GGUF_T_F16] = vec_dot_f16;
    k->gemv[GGUF_T_F16] = (tensor_gemv){ gemv_f16, 4, NULL, 0, NULL, 0 };
    k->dot_f16_f32 = dot_f16_f32;
    k->axpy_f16 = axpy_f16;
    k->dot4_f16_f32 = dot4_f16_f32;
    k->axpy4_f16 = axpy4_f16;
    k->dot_f32 = dot_f32_f32;
}
