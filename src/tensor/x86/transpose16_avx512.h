/* transpose16_avx512.h — 16 Q8_0 weight rows' block as 8 vectors with a lane per row, for the
 * AVX-512 files whose prompt gemms put a row in each lane (gemm_avx512.c, q8blk_avx512.c). */
#ifndef RECUR_TENSOR_TRANSPOSE16_AVX512_H
#define RECUR_TENSOR_TRANSPOSE16_AVX512_H

#include "tensor/x86/simd_x86.h"

/* The 32 bytes at row[r] + off of 16 rows as 8 vectors, lane r of out[j] = row r's bytes
 * 4j..4j+3: rows r and r+8 share a register (its two halves), then one 8x8 transposition of
 * 32-bit words per half. The loops are unrolled by hand (pragmas): left as loops, GCC kept the
 * arrays on the stack. */
static inline __attribute__((always_inline)) void x86_transpose16(const uint8_t *const *row, size_t off, __m512i out[8]) {
    __m512i z[8], t[8], u[8];
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++)
        z[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row[k] + off))),
                                  _mm256_loadu_si256((const __m256i *)(row[k + 8] + off)), 1);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm512_unpacklo_epi32(z[k], z[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(z[k], z[k + 1]);
    }
    _Pragma("GCC unroll 2")
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        u[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        u[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        u[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    /* u[0..3] hold rows 0-3 (and 8-11), u[4..7] rows 4-7 (12-15); 128-bit lane l of each
     * half holds chunks 4l..4l+3 */
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    _Pragma("GCC unroll 4")
    for (int k = 0; k < 4; k++) {
        out[k] = _mm512_permutex2var_epi64(u[k], lo, u[k + 4]);
        out[k + 4] = _mm512_permutex2var_epi64(u[k], hi, u[k + 4]);
    }
}

#endif
