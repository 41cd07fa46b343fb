/* gemv_avx512.c — many weight rows × one activation row (tensor.h, gemv): the single-token
 * matmul of token generation, which reads every weight byte once and is memory-bound.
 *
 * Contract (tensor_gemv_fn): y[r] = dot(n, w + r*w_stride, x) for r < n_rows, bit-identical
 * to the dot tensor_matmul_dot names for the weight (the same operations in the same order);
 * any n (a multiple of the block size), any n_rows >= 0, unaligned rows and strides; y must
 * not alias w or x.
 *
 * Why a kernel of its own: one row at a time is latency-bound (dot_q8_0 has one FMA chain and
 * scalar scale work per row). Here several rows run side by side, each with its own
 * accumulator, and the activation side of a block (its bytes, its correction, its scale) is
 * loaded once for all of them.
 *
 * Q8_0 (dot_q8_0's order, tensor_impl.h rt_hsum8_ggml): a 512-bit register holds the same
 * block of two rows (lanes 0-7: row r, 8-15: row r+1), as gemm_avx512.c does with the roles
 * of weights and activations swapped: the weight bytes become unsigned by w ^ 0x80 = w + 128,
 * and dpbusd starts from −128 · Σ4 x (computed once per block for all rows), which gives
 * Σ4 x·w exactly (integers, |sum| < 2^17). Lane l of a row then takes, block by block in
 * order, one FMA of that exact sum (as float) times the product of the two fp16 scales (exact
 * in float, so the vector product equals dot_q8_0's scalar one); the lanes are reduced by
 * x86_hsum_ps. That is dot_q8_0 lane for lane: it pairs two blocks per 512-bit step but still
 * FMAs them into its 8-lane accumulator one block after the other, and its sign trick gives
 * the same exact sums for every activation the quantizer produces (|x| <= 127). */
#include "tensor/x86/simd_x86.h"

#ifndef Q8_PAIRS
#define Q8_PAIRS 1   /* row pairs in flight: independent FMA chains sharing each x block */
#endif
#ifndef PF_DIST
#define PF_DIST 8192 /* bytes of software prefetch ahead of the rows being read */
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
#endif

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: rt_f16_to_f32's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

/* P row pairs (rows wr[2p], wr[2p+1]) over every block; y[2p], y[2p+1] (the odd one only when
 * `store_hi`: a lone last row is passed twice). pf: the next bytes to prefetch, pf_step per
 * block, up to pf_end. */
static inline __attribute__((always_inline)) void q8_pairs(int P, int64_t nb, const uint8_t *const *wr,
                                                            const uint8_t *x, float *y, bool store_hi,
                                                            const uint8_t *pf, size_t pf_step, const uint8_t *pf_end) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc[Q8_PAIRS];
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, pf += pf_step) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        if (pf < pf_end) {
            _Pragma("GCC unroll 8")
            for (size_t l = 0; l < pf_step + 63; l += 64) _mm_prefetch((const char *)(pf + l), PF_HINT);
        }
        const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + off + Q8_0_QS)));
        const __m512i nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xv));
        const __m512 dx = _mm512_set1_ps(x86_f16(x + off));
        _Pragma("GCC unroll 8")
        for (int p = 0; p < P; p++) {
            const uint8_t *w0 = wr[2 * p] + off, *w1 = wr[2 * p + 1] + off;
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + Q8_0_QS))),
                                                 _mm256_loadu_si256((const __m256i *)(w1 + Q8_0_QS)), 1);
            const __m512 s = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, _mm512_xor_si512(w, bias), xv));
            const __m512 dw = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(w0), _mm256_castsi256_si128(bcast_h(w1)), 1));
            acc[p] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), s, acc[p]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++) {
        y[2 * p] = x86_hsum_ps(_mm512_castps512_ps256(acc[p]));
        if (p + 1 < P || store_hi) y[2 * p + 1] = x86_hsum_ps(_mm512_extractf32x8_ps(acc[p], 1));
    }
}

static void gemv_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, float *y) {
    const uint8_t *W = w, *end = W + (size_t)n_rows * ws;
    const int64_t nb = n / QK8_0;
    const size_t pf_step = 2 * Q8_PAIRS * Q8_0_BYTES;   /* the group's bytes per block */
    const uint8_t *wr[2 * Q8_PAIRS];
    int64_t r = 0;
    for (; r + 2 * Q8_PAIRS <= n_rows; r += 2 * Q8_PAIRS) {
        for (int i = 0; i < 2 * Q8_PAIRS; i++) wr[i] = W + (size_t)(r + i) * ws;
        q8_pairs(Q8_PAIRS, nb, wr, x, y + r, true, wr[0] + PF_DIST, pf_step, end);
    }
    const int64_t left = n_rows - r;   /* fewer rows than a group: pairs, the last maybe half */
    if (left == 0) return;
    for (int i = 0; i < 2 * Q8_PAIRS; i++) wr[i] = W + (size_t)(r + (i < left ? i : left - 1)) * ws;
    const bool even = left % 2 == 0;
    switch ((left + 1) / 2) {
#if Q8_PAIRS > 3
    case 4: q8_pairs(4, nb, wr, x, y + r, even, NULL, 0, NULL); break;
#endif
#if Q8_PAIRS > 2
    case 3: q8_pairs(3, nb, wr, x, y + r, even, NULL, 0, NULL); break;
#endif
#if Q8_PAIRS > 1
    case 2: q8_pairs(2, nb, wr, x, y + r, even, NULL, 0, NULL); break;
#endif
    default: q8_pairs(1, nb, wr, x, y + r, even, NULL, 0, NULL); break;
    }
}

void rt_fill_gemv_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q8_0] = gemv_q8_0;
}
