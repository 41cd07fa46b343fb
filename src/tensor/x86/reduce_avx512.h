/* reduce_avx512.h — steps of the 16-lane reduction tree (rt_hsum16_ggml / x86_hsum_ps's
 * order) for several sums side by side, for the AVX-512 files: every add takes the same two
 * operands as the one-sum tree, only more sums share each shuffle and add. */
#ifndef RECUR_TENSOR_REDUCE_AVX512_H
#define RECUR_TENSOR_REDUCE_AVX512_H

#include "tensor/x86/simd_x86.h"

/* [a.lo 8 + a.hi 8 | b.lo 8 + b.hi 8]: the 256-bit step of the tree for two sums. */
static inline __m512 x86_red_halves(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* From [w0 | w1] and [w2 | w3] (8 lanes each): 128-bit lane q holds w_q.lo 4 + w_q.hi 4,
 * the 128-bit step of x86_hsum_ps for four sums. */
static inline __m512 x86_red_quarters(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* r[4i + j] = rt_hsum16_ggml(a[4j + i]): every level adds lane k and lane k + half of each
 * accumulator, as the tree does, only four or more accumulators per instruction (halves,
 * quarters, then q0 + q2 and q1 + q3, then their sum). (A blend for one of each level's two
 * shuffles, where the layout allows it: the attention tiles no faster.) */
static inline __m512 x86_reduce16(const __m512 a[16]) {
    __m512 z[8], u[4], s[2];
    _Pragma("GCC unroll 8")
    for (int m = 0; m < 8; m++) z[m] = x86_red_halves(a[2 * m], a[2 * m + 1]);
    _Pragma("GCC unroll 4")
    for (int n = 0; n < 4; n++) u[n] = x86_red_quarters(z[2 * n], z[2 * n + 1]);   /* 128-bit lane c: a[4n + c] */
    _Pragma("GCC unroll 2")
    for (int k = 0; k < 2; k++)
        s[k] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(u[2 * k], u[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(s[0], s[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

#endif
