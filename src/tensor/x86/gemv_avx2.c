/* gemv_avx2.c — single-token matmuls of the AVX2 table (tensor.h gemv): Q4_K in ggml's
 * repacked order (tensor_impl.h rt_dot_q4_K_rp), eight rows at a time.
 *
 * The rows are not repacked (weights are used in place from the mapping); instead two rows are
 * interleaved in registers by qword unpacks: for rows (r0, r1) and chunk j (64 elements: 32
 * bytes of nibbles), a = [r0.q0 r1.q0 | r0.q2 r1.q2] and b = [r0.q1 r1.q1 | r0.q3 r1.q3]
 * (qword k: bytes 8k..8k+7), so one maddubs against the chunk's activations laid out the same
 * way ([y.q0 y.q0 | y.q2 y.q2]: one vpermq, shared by all rows) serves both rows, and the
 * per-row sums come out of a shared reduction instead of a horizontal sum per row. In int16,
 * a lane of a + b sums 4 products of a nibble (<= 15) and an activation (|y| <= 128): |.| <=
 * 7680, exact; madd by the sub-block scale (<= 63) gives exact int32. Then, lane r of 8-lane
 * vectors being row r, acc = fma(chunk sum, d·yd, acc) and accm = fma(min sum, dmin·yd, accm)
 * chunk by chunk: every row's chains are rt_dot_q4_K_rp's, so the bits are its bits.
 * One thread, 512 x 1024 Q4_K in L2, min of 10 alternating runs (gq outside the repo): the
 * earlier four-row form with a hadd tree and two 4x4 float transposes per block 18.7 us,
 * this one 13.2 (the AVX-512 table: 10.9). */
#include <string.h>

#include "tensor/x86/simd_x86.h"

/* byte index of sub-block s's scale for words 0-3 (row 2p) and 4-7 (row 2p+1) of a 128-bit lane,
 * high bytes zero */
static inline __m256i k4s_idx(int s) {
    const __m128i i = _mm_setr_epi8((char)s, -128, (char)s, -128, (char)s, -128, (char)s, -128, (char)(8 + s), -128,
                                    (char)(8 + s), -128, (char)(8 + s), -128, (char)(8 + s), -128);
    return _mm256_broadcastsi128_si256(i);
}

/* Chunk j of a pair of rows (r0, r1): dwords [r0 r0 r1 r1 | r0 r0 r1 r1], whose sum per row is
 * sc[2j]·Σ lo·y + sc[2j+1]·Σ hi·y, exactly. ya/yb: the chunk's activations of the low (lo) and
 * high (hi) nibbles, qwords [q0 q0 q2 q2] / [q1 q1 q3 q3]. */
static inline __m256i k4_pair_chunk(const uint8_t *q0, const uint8_t *q1, __m256i ya_lo, __m256i yb_lo, __m256i ya_hi,
                                    __m256i yb_hi, __m256i s_lo, __m256i s_hi) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i r0 = _mm256_loadu_si256((const __m256i *)q0), r1 = _mm256_loadu_si256((const __m256i *)q1);
    const __m256i a = _mm256_unpacklo_epi64(r0, r1), b = _mm256_unpackhi_epi64(r0, r1);
    const __m256i lo = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(a, m4), ya_lo),
                                        _mm256_maddubs_epi16(_mm256_and_si256(b, m4), yb_lo));
    const __m256i hi = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), ya_hi),
                                        _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), yb_hi));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, s_lo), _mm256_madd_epi16(hi, s_hi));
}

/* dot_q4_K_rp for eight rows (lane r: row r; the mins' lanes hold rows [0 2 4 6 1 3 5 7] until
 * the last step, which puts them back in order before acc - accm). */
static __m256 q4k_rp8(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const size_t blk = (size_t)i * Q4_K_BYTES;
        /* scales and mins of the 8 rows; pair p: [row 2p | row 2p+1] in each 128-bit lane */
        __m256i sc[4];
        __m128i mm[4];
        uint32_t hd[8];
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 4; p++) {
            uint64_t s0, m0, s1, m1;
            rt_k4_scales_u64(wr[2 * p] + blk + Q4_K_SCALES, &s0, &m0);
            rt_k4_scales_u64(wr[2 * p + 1] + blk + Q4_K_SCALES, &s1, &m1);
            sc[p] = _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)s1, (long long)s0));
            mm[p] = _mm_set_epi64x((long long)m1, (long long)m0);
            memcpy(&hd[2 * p], wr[2 * p] + blk, 4);
            memcpy(&hd[2 * p + 1], wr[2 * p + 1] + blk, 4);
        }
        __m256i cs[4];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            const __m256i ylo = _mm256_loadu_si256((const __m256i *)(y + 64 * j));
            const __m256i yhi = _mm256_loadu_si256((const __m256i *)(y + 64 * j + 32));
            const __m256i ya_lo = _mm256_permute4x64_epi64(ylo, 0xA0), yb_lo = _mm256_permute4x64_epi64(ylo, 0xF5);
            const __m256i ya_hi = _mm256_permute4x64_epi64(yhi, 0xA0), yb_hi = _mm256_permute4x64_epi64(yhi, 0xF5);
            const __m256i i_lo = k4s_idx(2 * j), i_hi = k4s_idx(2 * j + 1);
            __m256i c[4];
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++)
                c[p] = k4_pair_chunk(wr[2 * p] + blk + Q4_K_QS + 32 * j, wr[2 * p + 1] + blk + Q4_K_QS + 32 * j, ya_lo,
                                     yb_lo, ya_hi, yb_hi, _mm256_shuffle_epi8(sc[p], i_lo), _mm256_shuffle_epi8(sc[p], i_hi));
            /* [r0 r1 r2 r3 | r0 r1 r2 r3] partial, then rows 4-7: add the halves */
            const __m256i x0 = _mm256_hadd_epi32(c[0], c[1]), x1 = _mm256_hadd_epi32(c[2], c[3]);
            cs[j] = _mm256_add_epi32(_mm256_permute2x128_si256(x0, x1, 0x20), _mm256_permute2x128_si256(x0, x1, 0x31));
        }
        /* mins: [mn_r(2p) j0..3 | mn_r(2p+1) j0..3], then transposed to lanes [0 2 4 6 1 3 5 7] */
        const __m256i bp = _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS)),
                                                                      _mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS + 16))));
        __m256i mp[4];
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 4; p++) mp[p] = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mm[p]), bp);
        const __m256i l01 = _mm256_unpacklo_epi32(mp[0], mp[1]), h01 = _mm256_unpackhi_epi32(mp[0], mp[1]);
        const __m256i l23 = _mm256_unpacklo_epi32(mp[2], mp[3]), h23 = _mm256_unpackhi_epi32(mp[2], mp[3]);
        const __m256i mn[4] = { _mm256_unpacklo_epi64(l01, l23), _mm256_unpackhi_epi64(l01, l23),
                                _mm256_unpacklo_epi64(h01, h23), _mm256_unpackhi_epi64(h01, h23) };
        /* d (row order) and dmin (lanes [0 2 4 6 1 3 5 7]) times yd */
        const __m256i h = _mm256_loadu_si256((const __m256i *)hd);   /* words: d0 dm0 d1 dm1 ... */
        const __m256i ev = _mm256_shuffle_epi8(h, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                                                   0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
        const __m256i dq = _mm256_permute4x64_epi64(ev, 0xD8);   /* [d0-3 d4-7 | dm0-3 dm4-7] */
        const __m256 yd = _mm256_set1_ps(rd_f32(b));
        const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(dq)), yd);
        const __m256 dm = _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(dq, 1)),
                                                                 _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7)), yd);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(cs[j]), d, acc);
            accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mn[j]), dm, accm);
        }
    }
    return _mm256_sub_ps(acc, _mm256_permutevar8x32_ps(accm, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

/* Rows in groups of eight (x86_kq_rows: eight straight streams, as the AVX-512 table). */
static void gemv_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, float *y) {
    x86_kq_rows(8, q4k_rp8, n, w, ws, n_rows, x, y);
}

void rt_fill_gemv_avx2(tensor_kernels *k) {
    k->gemv_q4_K_rp = gemv_q4_K_rp;
}
