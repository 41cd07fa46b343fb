/* gemv_q5k_avx2.c — many Q5_K weight rows × one Q8_K activation row on AVX2 (tensor.h, gemv):
 * the single-token matmul of token generation, over the file's layout.
 *
 * Every y[r] performs exactly the AVX2 table's Q5_K dot (dot_avx2.c rt_dot_q5_K_avx2): per
 * block, lane L of the exact integer sum Σ_j sc[2j]·Σ lo·y + sc[2j+1]·Σ hi·y over the four
 * 64-element chunks j (lane L: bytes 4L..4L+3 of the chunk's 32 qs bytes) is converted to
 * float and FMAed with d·yd into an 8-lane accumulator, and lane k of the exact min sum
 * m[k]·(bs[2k] + bs[2k+1]) with dmin·yd into another; then x86_hsum_ps(acc) −
 * x86_hsum_ps(accm). The lanes are the same integers reached in fewer operations: sub-block
 * b's fifth bit (bit b of qh) goes to bit 4 of its byte in one 16-bit shift by 4 − b (left) or
 * b − 4 (right, at most 3: bit 4 of a byte only ever receives a bit of the same byte) and one
 * mask, where the dot shifts it down, masks and shifts it up.
 *
 * Four rows run side by side (simd_x86.h X86_GEMV_ROWS4_TWINS), each stream fetched Q5_PF
 * bytes ahead by software (the distance the AVX-512 table's file-layout Q5_K kernel took); the block's
 * activation sums and scale are loaded once for the four. The lean twin goes without the
 * prefetch.
 *
 * Measured on the Zen 5 machine (programs outside the repo):
 *  - one thread, the matrix in L2 (1024 x 1024 and 256 x 3072), best of 200 calls: the dot row
 *    by row 25.1-26.5 GB/s, this kernel 26.5-28.6, its lean twin 27.2-28.7. It is bound by its
 *    vector work, a quarter of which is the fifth bits: without them (wrong sums) it read at
 *    34-36. Taking the chunks outermost, the four rows' operands kept in registers across
 *    them, read at 19-20 (spills);
 *  - recur-bench tg128 -r 3 with RECUR_ISA=avx2, qwen3-0.6b Q5_K_M, 5 alternating pairs
 *    against the dot row by row: the median token 0.90-1.04x the time (median 0.98x), in
 *    minutes whose memory speed moved by a third. */
#include "tensor/x86/simd_x86.h"

#define Q5_PF 4096

/* The 32 five-bit values of sub-block b's half of a chunk: the nibbles nib (low or high,
 * already shifted down; other bits set) with bit b of h at bit 4. */
static inline __m256i q5a_vals(__m256i nib, __m256i h, int b) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    const __m256i hb = b < 4 ? _mm256_slli_epi16(h, 4 - b) : b > 4 ? _mm256_srli_epi16(h, b - 4) : h;
    return _mm256_or_si256(_mm256_and_si256(nib, m4), _mm256_and_si256(hb, b4));
}

/* One block of one row: the dot's 8 integer lanes and its 8 min lanes. */
static inline __attribute__((always_inline)) void q5a_block(const uint8_t *a, const int8_t *y, __m256i bs,
                                                             __m256i *isum, __m256i *imin) {
    uint64_t sc, m;
    rt_k4_scales_u64(a + Q5_K_SCALES, &sc, &m);
    const __m256i s = x86_u8x8_to_i16x2(sc);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QH));
    __m256i sum = _mm256_setzero_si256();
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QS + 32 * j));
        const __m256i lo = q5a_vals(q, h, 2 * j), hi = q5a_vals(_mm256_srli_epi16(q, 4), h, 2 * j + 1);
        const __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y + 64 * j)));
        const __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 64 * j + 32)));
        sum = _mm256_add_epi32(sum, _mm256_add_epi32(_mm256_madd_epi16(p0, x86_bcast_i16(s, 2 * j)),
                                                     _mm256_madd_epi16(p1, x86_bcast_i16(s, 2 * j + 1))));
    }
    *isum = sum;
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m));
    *imin = _mm256_madd_epi16(bs, _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8)));
}

/* Rows w[0..R) against x; y[k] for each; pf: each row's bytes fetched Q5_PF ahead. */
static inline __attribute__((always_inline)) void q5a_rows(int R, int64_t nb, const uint8_t *const *w,
                                                            const uint8_t *x, float *const *y, bool pf) {
    __m256 acc[4], accm[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) acc[r] = accm[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const int8_t *yq = (const int8_t *)(b + Q8_K_QS);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS));
        const float yd = rd_f32(b);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const uint8_t *a = w[r] + (size_t)i * Q5_K_BYTES;
            if (pf)   /* three lines a block cover its 176 bytes as the blocks pass */
                for (int o = 0; o < 192; o += 64) _mm_prefetch((const char *)(a + Q5_PF + o), _MM_HINT_T0);
            __m256i isum, imin;
            q5a_block(a, yq, bs, &isum, &imin);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a) * yd), _mm256_cvtepi32_ps(isum), acc[r]);
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a + Q5_K_DMIN) * yd), _mm256_cvtepi32_ps(imin), accm[r]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) *y[r] = x86_hsum_ps(acc[r]) - x86_hsum_ps(accm[r]);
}

X86_GEMV_ROWS4_TWINS(gemv_q5_K, q5a_rows, QK_K)

void rt_fill_gemv_q5k_avx2(tensor_kernels *k) {
    k->gemv[GGUF_T_Q5_K] = (tensor_gemv){ gemv_q5_K, 4, gemv_q5_K_lean, 0, NULL, 0 };
}
