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
 * Memory: neighbouring rows read side by side are interleaved streams that jump ahead by the
 * group's size at every row end, which the hardware prefetchers of the Zen 5 machine this was
 * measured on follow badly (two such streams read at well under half the speed of one).
 *  - Q8_0 takes rows r, r + n/4, r + n/2, r + 3n/4 together: four streams that each run
 *    straight through their quarter of the memory. With 2 threads on a 570 MB matrix: 66-71
 *    GB/s, against 59-64 for two such streams (r, r + n/2) and 43-45 for neighbouring pairs
 *    with software prefetch, so no prefetch is needed.
 *  - Q4_K, compute-bound at ~29 GB/s a core even in cache, keeps eight neighbouring rows and
 *    prefetches the bytes of the rows that follow in address order, PF_DIST ahead, as many
 *    bytes per step as the group consumes (never past the last row); eight streams an eighth
 *    apart measured a little slower (38-39 against 40-42 GB/s).
 *
 * Q8_0 (dot_q8_0's order, tensor_impl.h rt_hsum8_ggml): a 512-bit register holds the same
 * block of two rows (lanes 0-7: one, 8-15: the other), as gemm_avx512.c's pair tiles do with the roles
 * of weights and activations swapped: the weight bytes become unsigned by w ^ 0x80 = w + 128,
 * and dpbusd starts from −128 · Σ4 x (computed once per block for all rows), which gives
 * Σ4 x·w exactly (integers, |sum| < 2^17). Lane l of a row then takes, block by block in
 * order, one FMA of that exact sum (as float) times the product of the two fp16 scales (exact
 * in float, so the vector product equals dot_q8_0's scalar one); the lanes are reduced by
 * x86_hsum_ps. That is dot_q8_0 lane for lane: it pairs two blocks per 512-bit step but still
 * FMAs them into its 8-lane accumulator one block after the other, and its sign trick gives
 * the same exact sums for every activation the quantizer produces (|x| <= 127). */
#include "tensor/x86/simd_x86.h"

#define PF_DIST 8192   /* bytes of software prefetch ahead of the rows being read */
#define PF_HINT _MM_HINT_T0

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: rt_f16_to_f32's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

/* Rows r, r + q, r + 2q, r + 3q (q = n_rows / 4) side by side, as two pairs sharing the
 * activation side: four streams that each run straight through a quarter of the memory, which
 * the hardware prefetchers follow at full speed. *y0, and y1..y3 where not NULL (a row given
 * four times is computed four times and stored once). */
static inline void q8_quad(int64_t nb, const uint8_t *w0, const uint8_t *w1, const uint8_t *w2, const uint8_t *w3,
                           const uint8_t *x, float *y0, float *y1, float *y2, float *y3) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + off + Q8_0_QS)));
        const __m512i nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xv));
        const __m512 dx = _mm512_set1_ps(x86_f16(x + off));
        const uint8_t *a0 = w0 + off, *a1 = w1 + off, *a2 = w2 + off, *a3 = w3 + off;
        const __m512i wa = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a0 + Q8_0_QS))),
                                              _mm256_loadu_si256((const __m256i *)(a1 + Q8_0_QS)), 1);
        const __m512i wb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a2 + Q8_0_QS))),
                                              _mm256_loadu_si256((const __m256i *)(a3 + Q8_0_QS)), 1);
        const __m512 sa = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, _mm512_xor_si512(wa, bias), xv));
        const __m512 sb = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, _mm512_xor_si512(wb, bias), xv));
        const __m512 da = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(a0), _mm256_castsi256_si128(bcast_h(a1)), 1));
        const __m512 db = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(a2), _mm256_castsi256_si128(bcast_h(a3)), 1));
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(da, dx), sa, acc0);
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(db, dx), sb, acc1);
    }
    *y0 = x86_hsum_ps(_mm512_castps512_ps256(acc0));
    if (y1) *y1 = x86_hsum_ps(_mm512_extractf32x8_ps(acc0, 1));
    if (y2) *y2 = x86_hsum_ps(_mm512_castps512_ps256(acc1));
    if (y3) *y3 = x86_hsum_ps(_mm512_extractf32x8_ps(acc1, 1));
}

static void gemv_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, float *y) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 4;
    for (int64_t r = 0; r < q; r++)
        q8_quad(nb, W + (size_t)r * ws, W + (size_t)(r + q) * ws, W + (size_t)(r + 2 * q) * ws, W + (size_t)(r + 3 * q) * ws,
                x, y + r, y + r + q, y + r + 2 * q, y + r + 3 * q);
    for (int64_t r = 4 * q; r < n_rows; r++) {   /* the 0-3 rows left, one at a time */
        const uint8_t *row = W + (size_t)r * ws;
        q8_quad(nb, row, row, row, row, x, y + r, NULL, NULL, NULL);
    }
}

/* ---- Q4_K (dot_q4_K_rp's order): eight rows per group, one float lane per row ------------
 *
 * dot_q4_K_rp computes exact integer sums per 64-element chunk and then runs SCALAR float
 * chains: acc = fmaf((float)isum, d*yd, acc) (and accm likewise). Here the
 * integer sums of eight rows are computed as those dots compute them (exact, so any order of
 * integer additions gives the same value) and gathered into the eight lanes of a vector, and
 * each chain step is one vector FMA whose lane r performs row r's scalar step: the same
 * operation on the same operands, hence the same bits. The scale products (fp16 scale times
 * the activation's float scale) are one IEEE multiply per lane, as in the scalar code.
 * (Q6_K was tried the same way, with rt_dot_q6_K_avx512's integer part: slower than the
 * row-by-row dot from memory on this machine, so the table keeps the dot.) */

#define KQ_ROWS 8

/* t[j] lane r = the exact int32 sum of the 16 lanes of s[j][r], for 4 chunks x 8 rows at once:
 * each level adds two vectors' halves (128-bit blocks, then lanes) so one instruction serves
 * several sums; integer additions, so any order gives the same values. */
static inline void hsum_4x8x16(const __m512i s[4][KQ_ROWS], __m256i t[4]) {
    __m512i a[4][4], b[4][2], c[4], e[2];
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)
        _Pragma("GCC unroll 4")
        for (int m = 0; m < 4; m++)   /* blocks 0-1: row 2m (8 lanes), 2-3: row 2m+1 */
            a[j][m] = _mm512_add_epi32(_mm512_shuffle_i32x4(s[j][2 * m], s[j][2 * m + 1], 0x44),
                                       _mm512_shuffle_i32x4(s[j][2 * m], s[j][2 * m + 1], 0xEE));
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++)   /* block k: row 4h + k (4 lanes) */
            b[j][h] = _mm512_add_epi32(_mm512_shuffle_i32x4(a[j][2 * h], a[j][2 * h + 1], 0x88),
                                       _mm512_shuffle_i32x4(a[j][2 * h], a[j][2 * h + 1], 0xDD));
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++)   /* block k: rows k, k+4, k, k+4 (2 lanes each, interleaved) */
        c[j] = _mm512_add_epi32(_mm512_unpacklo_epi32(b[j][0], b[j][1]), _mm512_unpackhi_epi32(b[j][0], b[j][1]));
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++)   /* block k: row k and k+4 of chunk 2h, then of chunk 2h+1 */
        e[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(c[2 * h], c[2 * h + 1]),
                                _mm512_unpackhi_epi64(c[2 * h], c[2 * h + 1]));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m512i r = _mm512_permutexvar_epi32(idx, e[h]);
        t[2 * h] = _mm512_castsi512_si256(r);
        t[2 * h + 1] = _mm512_extracti64x4_epi64(r, 1);
    }
}

/* The fp16 field at offset `off` of block `blk` of the eight rows, as floats. */
static inline __m256 rows_f16(const uint8_t *const *wr, size_t blk, size_t off) {
    const __m128i h = _mm_setr_epi16((short)rd_u16(wr[0] + blk + off), (short)rd_u16(wr[1] + blk + off),
                                     (short)rd_u16(wr[2] + blk + off), (short)rd_u16(wr[3] + blk + off),
                                     (short)rd_u16(wr[4] + blk + off), (short)rd_u16(wr[5] + blk + off),
                                     (short)rd_u16(wr[6] + blk + off), (short)rd_u16(wr[7] + blk + off));
    return _mm256_cvtph_ps(h);
}

/* Prefetch the group's next bytes: `step` bytes from pf (if below end). */
static inline void kq_prefetch(const uint8_t *pf, size_t step, const uint8_t *end) {
    if (pf >= end) return;
    for (size_t l = 0; l < step + 63; l += 64) _mm_prefetch((const char *)(pf + l), PF_HINT);
}

/* Rows wr[0..7] in groups over [r, n_rows): full groups, then a last group with its missing
 * rows given as the last real row (computed, not stored). */
typedef __m256 (*kq_group_fn)(int64_t nb, const uint8_t *const *wr, const uint8_t *x, const uint8_t *pf,
                              size_t pf_step, const uint8_t *end);

static inline void kq_rows(kq_group_fn g, size_t bbytes, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows,
                           const uint8_t *x, float *y) {
    const int64_t nb = n / QK_K;
    const uint8_t *end = W + (size_t)n_rows * ws, *wr[KQ_ROWS];
    for (int64_t r = 0; r < n_rows; r += KQ_ROWS) {
        const int64_t m = n_rows - r < KQ_ROWS ? n_rows - r : KQ_ROWS;
        for (int i = 0; i < KQ_ROWS; i++) wr[i] = W + (size_t)(r + (i < m ? i : m - 1)) * ws;
        const __m256 v = g(nb, wr, x, wr[0] + PF_DIST, KQ_ROWS * bbytes, end);
        if (m == KQ_ROWS) {
            _mm256_storeu_ps(y + r, v);
        } else {
            _mm256_mask_storeu_ps(y + r, (__mmask8)((1u << m) - 1), v);
        }
    }
}

/* Q4_K chunk j (64 elements: sub-blocks 2j, 2j+1) as 16 int32 lanes: nibbles times the
 * activations (maddubs: u8 x s8 pairs, |sum| <= 2·15·128, exact), times the sub-block scales
 * (madd), as dot_avx512.c's k4_chunk. */
static inline __m512i q4k_chunk(const uint8_t *qs, __m512i y, __m512i sc) {
    /* the 32 bytes in both halves (a load, no shuffle), the upper half shifted by a nibble */
    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qs));
    const __m512i v = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xFFFF0000u, q, 4), _mm512_set1_epi8(0x0F));
    return _mm512_madd_epi16(_mm512_maddubs_epi16(v, y), sc);
}

/* int16 lanes 0-15 = s[k], 16-31 = s[k+1], from the 8 int16 in the low 128 bits of s16. */
static inline __m512i kq_scale_pair(__m512i s16, int k) {
    const __m512i idx = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)k)), s16);
}

/* dot_q4_K_rp (tensor_impl.h rt_dot_q4_K_rp) for eight rows: per block, chunk j's exact sum
 * cs[j] and min sum mn[j] (m[2j]·(bs[4j]+bs[4j+1]) + m[2j+1]·(bs[4j+2]+bs[4j+3])), then
 * acc = fma(cs[j], d·yd, acc), accm = fma(mn[j], dmin·yd, accm) for j = 0..3; acc − accm. */
static __m256 q4k_rp_group(int64_t nb, const uint8_t *const *wr, const uint8_t *x, const uint8_t *pf,
                           size_t pf_step, const uint8_t *end) {
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, pf += pf_step) {
        kq_prefetch(pf, pf_step, end);
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const size_t blk = (size_t)i * Q4_K_BYTES;
        __m512i yv[4];
        for (int j = 0; j < 4; j++) yv[j] = _mm512_loadu_si512(b + Q8_K_QS + 64 * j);
        /* bsum pairs: ps[k] = bs[2k] + bs[2k+1] (|.| <= 32·128: exact in int16) */
        const __m128i ps = _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS)),
                                          _mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS + 16)));
        __m512i cs[4][KQ_ROWS];
        __m256i mn[KQ_ROWS / 2];
        __m128i mr[KQ_ROWS];
        _Pragma("GCC unroll 8")
        for (int r = 0; r < KQ_ROWS; r++) {
            const uint8_t *a = wr[r] + blk;
            uint64_t sc, m;
            rt_k4_scales_u64(a + Q4_K_SCALES, &sc, &m);
            const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) cs[j][r] = q4k_chunk(a + Q4_K_QS + 32 * j, yv[j], kq_scale_pair(s16, 2 * j));
            mr[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m)), ps);
        }
        /* mins: 8 rows x 4 chunks -> 4 vectors of 8 rows (4x4 transposes, rows r and r+4) */
        for (int r = 0; r < 4; r++) mn[r] = _mm256_set_m128i(mr[r + 4], mr[r]);
        const __m256i t0 = _mm256_unpacklo_epi32(mn[0], mn[1]), t1 = _mm256_unpacklo_epi32(mn[2], mn[3]);
        const __m256i t2 = _mm256_unpackhi_epi32(mn[0], mn[1]), t3 = _mm256_unpackhi_epi32(mn[2], mn[3]);
        const __m256i mj[4] = { _mm256_unpacklo_epi64(t0, t1), _mm256_unpackhi_epi64(t0, t1),
                                _mm256_unpacklo_epi64(t2, t3), _mm256_unpackhi_epi64(t2, t3) };
        const __m256 yd = _mm256_set1_ps(rd_f32(b));
        const __m256 d = _mm256_mul_ps(rows_f16(wr, blk, 0), yd), dm = _mm256_mul_ps(rows_f16(wr, blk, Q4_K_DMIN), yd);
        __m256i tot[4];
        hsum_4x8x16(cs, tot);
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot[j]), d, acc);
            accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mj[j]), dm, accm);
        }
    }
    return _mm256_sub_ps(acc, accm);
}

static void gemv_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, float *y) {
    kq_rows(q4k_rp_group, Q4_K_BYTES, n, w, ws, n_rows, x, y);
}

void rt_fill_gemv_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q8_0] = gemv_q8_0;
    k->gemv_q4_K_rp = gemv_q4_K_rp;
}
