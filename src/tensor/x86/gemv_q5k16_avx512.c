/* gemv_q5k16_avx512.c — Q5_K rows packed 16 to a group (tensor.h tensor_q5_K_r16_pack) × one
 * Q8_K activation row: the single-token matmul over a packed matrix, one int32 / float lane per
 * row.
 *
 * Every y[r] performs the AVX-512 table's Q5_K dot (dot_avx512.c rt_dot_q5_K_avx512; its
 * scalar twin over the packed bytes is q5k_r16.c rt_dot_q5_K_r16) in its order: per block, the
 * dot's 16 int32 lanes L (elements 4(L%8)..+3 of the even sub-blocks for L < 8, of the odd ones
 * for L >= 8, each chunk's times its scale, summed over the 4 chunks: exact) each FMAed with
 * d·yd into a float chain of their own, and 8 min lanes into 8 more; then the dot's two trees.
 * Here the 16 + 8 chains of a row are lane r of 24 vectors, and the trees are vector adds.
 *
 * The packing puts 4 qs bytes of each of the 16 rows side by side, so a 64-byte load holds the
 * low nibbles of one lane L < 8 of the 16 rows and the high ones of lane L + 8 for one chunk.
 * A nibble's fifth bit comes from a 64-bit mask (one bit per byte of the vector: a masked byte
 * add of 16), its products in one maddubs against the 4 activations (broadcast), and its scale
 * with them in one dpwssd (a row's 16-bit scale twice in its lane): no sums across lanes, no
 * per-row scale unpacking. The file-layout kernel (gemv_q5k_avx512.c) takes ~2.3x the vector
 * operations a row, and read at 43 GB/s with its 720 KB matrix in L2 on one thread (Zen 5) —
 * below what memory gives two threads; this one at 74-78 GB/s (a program outside the repo,
 * 1024 x 512 and 3072 x 256, best of 200 calls). In a model (recur-bench -p 512 -n 128 -r 2,
 * 2 threads, 5 rounds alternating with RECUR_NO_REPACK=q5): qwen3-0.6b Q5_K_M tg128 96-103 ->
 * 106-119 t/s (5 of 5 won), qwen35-0.8b Q5_K_M 73-81 -> 83-86 (5 of 5); the Q5_K matmuls
 * read at 51-54 GB/s against 35-39 (--profile, the same minute). */
#include "tensor/x86/simd_x86.h"

/* Two blocks ahead, as gemv_q4k16_avx512.c's R16_PF. */
#define Q5R16_PF (2 * TENSOR_Q5R16_BLOCK)

static inline __mmask64 q5r16_mask(const uint8_t *p) {
    uint64_t m;
    memcpy(&m, p, 8);
    return (__mmask64)m;
}

/* Rows 0..15 of the packed group at w (nb blocks) against x: y[0..16). */
static inline __attribute__((always_inline)) void q5r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                              bool pf) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16), twice = _mm512_set1_epi32(0x00010001);
    __m512 acc[16], accm[8];
    _Pragma("GCC unroll 16")
    for (int l = 0; l < 16; l++) acc[l] = _mm512_setzero_ps();
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 8; k++) accm[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q5R16_BLOCK, *b = x + (size_t)i * Q8_K_BYTES;
        for (int o = 0; pf && o < TENSOR_Q5R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q5R16_PF + o), _MM_HINT_T0);
        const __m512 yd = _mm512_set1_ps(rd_f32(b));
        const __m512 dyd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q5R16_D))), yd);
        const __m512 dmyd = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q5R16_DMIN))), yd);
        __m512i sc[2], mc[2];   /* the 16 rows' scales and mins, sub-blocks 0-3 and 4-7 */
        x86_r16_k4_scales(h + Q5R16_SCALES, sc, mc);
        /* the min lanes: m[k]·(bsums 2k + 2k+1), exact */
        const uint8_t *bs = b + Q8_K_BSUMS;
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) {
            const __m512i mk = x86_u8_lane_epi32(mc[k / 4], k & 3);
            const __m512i mn = _mm512_mullo_epi32(mk, _mm512_set1_epi32(rd_i16(bs + 4 * k) + rd_i16(bs + 4 * k + 2)));
            accm[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mn), dmyd, accm[k]);
        }
        /* sub-block sb's scale as two int16 in each row's lane (dpwssd's pair) */
        __m512i sp[8];
        _Pragma("GCC unroll 8")
        for (int sb = 0; sb < 8; sb++) sp[sb] = _mm512_mullo_epi32(x86_u8_lane_epi32(sc[sb / 4], sb & 3), twice);
        const int8_t *yq = (const int8_t *)(b + Q8_K_QS);
        _Pragma("GCC unroll 8")
        for (int u = 0; u < 8; u++) {
            __m512i slo = _mm512_setzero_si512(), shi = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m512i v = x86_load512_once(h + Q5R16_QS + 64 * (8 * j + u));
                const uint8_t *mk = h + Q5R16_QH + 16 * (8 * j + u);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                lo = _mm512_mask_add_epi8(lo, q5r16_mask(mk), lo, c16);
                hi = _mm512_mask_add_epi8(hi, q5r16_mask(mk + 8), hi, c16);
                slo = _mm512_dpwssd_epi32(slo, _mm512_maddubs_epi16(lo, x86_bcast4(yq + 64 * j + 4 * u)), sp[2 * j]);
                shi = _mm512_dpwssd_epi32(shi, _mm512_maddubs_epi16(hi, x86_bcast4(yq + 64 * j + 32 + 4 * u)),
                                          sp[2 * j + 1]);
            }
            acc[u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(slo), dyd, acc[u]);
            acc[8 + u] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(shi), dyd, acc[8 + u]);
        }
    }
    /* the dot's trees (rt_hsum16_ggml, rt_hsum8_ggml), lane by lane */
    __m512 q[4], mq[4];
    _Pragma("GCC unroll 4")
    for (int l = 0; l < 4; l++) {
        q[l] = _mm512_add_ps(_mm512_add_ps(acc[l], acc[l + 8]), _mm512_add_ps(acc[l + 4], acc[l + 12]));
        mq[l] = _mm512_add_ps(accm[l], accm[l + 4]);
    }
    const __m512 s = _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3]));
    const __m512 sm = _mm512_add_ps(_mm512_add_ps(mq[0], mq[2]), _mm512_add_ps(mq[1], mq[3]));
    _mm512_storeu_ps(y, _mm512_sub_ps(s, sm));
}

X86_GEMV_R16_TWINS(gemv_q5_K_r16, q5r16_group, QK_K)

void rt_fill_gemv_q5k16_avx512(tensor_kernels *k) {
    k->gemv_q5_K_r16 = (tensor_gemv){ gemv_q5_K_r16, TENSOR_R16_ROWS, gemv_q5_K_r16_lean, 0, NULL, 0 };
    k->q5_K_r16_native = true;
}
