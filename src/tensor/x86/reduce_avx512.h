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

#endif
