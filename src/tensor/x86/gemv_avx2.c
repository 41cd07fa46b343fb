/* gemv_avx2.c — single-token matmuls of the AVX2 table (tensor.h gemv): Q4_K in ggml's
 * repacked order (tensor_impl.h rt_dot_q4_K_rp) and Q5_K in the same order (rt_dot_q5_K_rp:
 * the fifth bits joined to the nibbles), four rows at a time.
 *
 * The rows are not repacked (weights are used in place from the mapping); instead two rows are
 * interleaved in registers by qword unpacks: for rows (r0, r1) and chunk j (64 elements: 32
 * bytes of nibbles), a = [r0.q0 r1.q0 | r0.q2 r1.q2] and b = [r0.q1 r1.q1 | r0.q3 r1.q3]
 * (qword k: bytes 8k..8k+7), so one maddubs against the chunk's activations laid out the same
 * way ([y.q0 y.q0 | y.q2 y.q2]: one vpermq, shared by all rows) serves both rows, and the
 * per-row sums come out of a shared reduction instead of a horizontal sum per row. In int16,
 * a lane of a + b sums 4 products of a nibble (<= 15) and an activation (|y| <= 128): |.| <=
 * 7680, exact; madd by the sub-block scale (<= 63) gives exact int32. Then, lane r of 4-lane
 * vectors being row r, acc = fma(chunk sum, d·yd, acc) and accm = fma(min sum, dmin·yd, accm)
 * chunk by chunk: every row's chains are rt_dot_q4_K_rp's, so the bits are its bits.
 * One thread, 512 x 1024 Q4_K in L2, min of 10 alternating runs (gq outside the repo): the
 * earlier four-row form with a hadd tree and two 4x4 float transposes per block 18.7 us,
 * this form over eight rows 13.2 (the AVX-512 table: 10.9); over four rows (q4k_rp4) 1.04x
 * faster again. */
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
static inline __attribute__((always_inline)) __m256i k4_pair_chunk(const uint8_t *q0, const uint8_t *q1, __m256i ya_lo,
                                                                   __m256i yb_lo, __m256i ya_hi, __m256i yb_hi,
                                                                   __m256i s_lo, __m256i s_hi, bool q5, __m256i ha,
                                                                   __m256i hb, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i r0 = _mm256_loadu_si256((const __m256i *)q0), r1 = _mm256_loadu_si256((const __m256i *)q1);
    const __m256i a = _mm256_unpacklo_epi64(r0, r1), b = _mm256_unpackhi_epi64(r0, r1);
    __m256i al = _mm256_and_si256(a, m4), bl = _mm256_and_si256(b, m4);
    __m256i ah = _mm256_and_si256(_mm256_srli_epi16(a, 4), m4), bh = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
    if (q5) {   /* Q5_K: ha, hb the rows' qh bytes paired as their qs are; bit 2j (low), 2j+1 (high) */
        al = _mm256_or_si256(al, x86_bit_to_4(ha, 2 * j));
        bl = _mm256_or_si256(bl, x86_bit_to_4(hb, 2 * j));
        ah = _mm256_or_si256(ah, x86_bit_to_4(ha, 2 * j + 1));
        bh = _mm256_or_si256(bh, x86_bit_to_4(hb, 2 * j + 1));
    }
    const __m256i lo = _mm256_add_epi16(_mm256_maddubs_epi16(al, ya_lo), _mm256_maddubs_epi16(bl, yb_lo));
    const __m256i hi = _mm256_add_epi16(_mm256_maddubs_epi16(ah, ya_hi), _mm256_maddubs_epi16(bh, yb_hi));
    return _mm256_add_epi32(_mm256_madd_epi16(lo, s_lo), _mm256_madd_epi16(hi, s_hi));
}

/* dot_q4_K_rp for four rows, two pairs (lane r: row r). Four rather than eight: the eight-row
 * form's loop body (~650 instructions, spills included) was twice the core's reorder window,
 * so the next block's loads waited behind its arithmetic (simd_x86.h x86_kq_rows); four rows
 * also spill less. In-process A/B, AVX2 table, 2 threads, 100-200 alternating rounds: 248320 x
 * 1024 out of cache 1.08-1.14x, 200 matrices of 1024 x 2048 1.13x, 100 of 3584 x 1024
 * 1.03-1.06x; one thread in cache 1.04x. */
static inline __attribute__((always_inline)) __m256 k4_rp4(int64_t nb, const uint8_t *const *wr, const uint8_t *x,
                                                            bool q5) {
    const size_t qs_off = q5 ? Q5_K_QS : Q4_K_QS;
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const size_t blk = (size_t)i * (q5 ? Q5_K_BYTES : Q4_K_BYTES);
        __m256i sc[2];
        __m128i mm[2];
        uint32_t hd[4];
        _Pragma("GCC unroll 2")
        for (int p = 0; p < 2; p++) {
            uint64_t s0, m0, s1, m1;
            rt_k4_scales_u64(wr[2 * p] + blk + Q4_K_SCALES, &s0, &m0);
            rt_k4_scales_u64(wr[2 * p + 1] + blk + Q4_K_SCALES, &s1, &m1);
            sc[p] = _mm256_broadcastsi128_si256(_mm_set_epi64x((long long)s1, (long long)s0));
            mm[p] = _mm_set_epi64x((long long)m1, (long long)m0);
            memcpy(&hd[2 * p], wr[2 * p] + blk, 4);
            memcpy(&hd[2 * p + 1], wr[2 * p + 1] + blk, 4);
        }
        __m256i ha[2], hb[2];   /* Q5_K: each pair's qh bytes, unpacked as k4_pair_chunk's qs */
        _Pragma("GCC unroll 2")
        for (int p = 0; p < 2; p++) {
            ha[p] = hb[p] = _mm256_setzero_si256();
            if (!q5) continue;
            const __m256i g0 = _mm256_loadu_si256((const __m256i *)(wr[2 * p] + blk + Q5_K_QH));
            const __m256i g1 = _mm256_loadu_si256((const __m256i *)(wr[2 * p + 1] + blk + Q5_K_QH));
            ha[p] = _mm256_unpacklo_epi64(g0, g1);
            hb[p] = _mm256_unpackhi_epi64(g0, g1);
        }
        __m128i cs[4];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            const __m256i ylo = _mm256_loadu_si256((const __m256i *)(y + 64 * j));
            const __m256i yhi = _mm256_loadu_si256((const __m256i *)(y + 64 * j + 32));
            const __m256i ya_lo = _mm256_permute4x64_epi64(ylo, 0xA0), yb_lo = _mm256_permute4x64_epi64(ylo, 0xF5);
            const __m256i ya_hi = _mm256_permute4x64_epi64(yhi, 0xA0), yb_hi = _mm256_permute4x64_epi64(yhi, 0xF5);
            const __m256i i_lo = k4s_idx(2 * j), i_hi = k4s_idx(2 * j + 1);
            __m256i c[2];
            _Pragma("GCC unroll 2")
            for (int p = 0; p < 2; p++)
                c[p] = k4_pair_chunk(wr[2 * p] + blk + qs_off + 32 * j, wr[2 * p + 1] + blk + qs_off + 32 * j, ya_lo,
                                     yb_lo, ya_hi, yb_hi, _mm256_shuffle_epi8(sc[p], i_lo), _mm256_shuffle_epi8(sc[p], i_hi),
                                     q5, ha[p], hb[p], j);
            const __m256i x0 = _mm256_hadd_epi32(c[0], c[1]);   /* [r0 r1 r2 r3 | r0 r1 r2 r3] partial */
            cs[j] = _mm_add_epi32(_mm256_castsi256_si128(x0), _mm256_extracti128_si256(x0, 1));
        }
        const __m256i bp = _mm256_broadcastsi128_si256(_mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS)),
                                                                      _mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS + 16))));
        const __m256i mp0 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mm[0]), bp);   /* [r0 j0..3 | r1 j0..3] */
        const __m256i mp1 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mm[1]), bp);   /* [r2 j0..3 | r3 j0..3] */
        const __m256i g = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        const __m256i m01 = _mm256_permutevar8x32_epi32(_mm256_unpacklo_epi32(mp0, mp1), g);   /* [j0 r0-3 | j1 r0-3] */
        const __m256i m23 = _mm256_permutevar8x32_epi32(_mm256_unpackhi_epi32(mp0, mp1), g);
        const __m128i mn[4] = { _mm256_castsi256_si128(m01), _mm256_extracti128_si256(m01, 1), _mm256_castsi256_si128(m23),
                                _mm256_extracti128_si256(m23, 1) };
        const __m128i h = _mm_loadu_si128((const __m128i *)hd);   /* words: d0 dm0 d1 dm1 ... */
        const __m128i dq = _mm_shuffle_epi8(h, _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
        const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(dq), _mm256_set1_ps(rd_f32(b)));
        const __m128 d = _mm256_castps256_ps128(dd), dm = _mm256_extractf128_ps(dd, 1);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            acc = _mm_fmadd_ps(_mm_cvtepi32_ps(cs[j]), d, acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(mn[j]), dm, accm);
        }
    }
    return _mm256_zextps128_ps256(_mm_sub_ps(acc, accm));
}

static __m256 q4k_rp4(int64_t nb, const uint8_t *const *wr, const uint8_t *x) { return k4_rp4(nb, wr, x, false); }

static __m256 q5k_rp4(int64_t nb, const uint8_t *const *wr, const uint8_t *x) { return k4_rp4(nb, wr, x, true); }

/* Rows in groups of four (x86_kq_rows: four straight streams). */
static void gemv_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                         const void *x, float *y) {
    x86_kq_rows(4, 1, q4k_rp4, n, w, ws, n_rows, g0, g1, x, y);
}

/* Q5_K (rt_dot_q5_K_rp, the AVX2 table's Q5_K order) the same way, the fifth bits joined in. */
static void gemv_q5_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                         const void *x, float *y) {
    x86_kq_rows(4, 1, q5k_rp4, n, w, ws, n_rows, g0, g1, x, y);
}

void rt_fill_gemv_avx2(tensor_kernels *k) {
    k->gemv_q4_K_rp = (tensor_gemv){ gemv_q4_K_rp, 4, NULL, 0, NULL, 0 };
    k->gemv[GGUF_T_Q5_K] = (tensor_gemv){ gemv_q5_K_rp, 4, NULL, 0, NULL, 0 };
}
