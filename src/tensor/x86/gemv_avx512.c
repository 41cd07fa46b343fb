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
 *    with software prefetch; a software prefetch far ahead in each stream adds 4-13 % where
 *    memory is fast (Q8_PF).
 *  - Q4_K takes rows 4r..4r+3 and their twins n/2 further on together: two streams of four
 *    neighbouring rows, with a software prefetch that walks each stream's memory in order
 *    (gemv_q4_K_rp); Q6_K rows r + k·n/4 as Q8_0 (q6k_quad).
 *  Each of these has a lean twin (tensor.h tensor_gemv.lean) that goes easier on memory: Q8_0
 *  and Q6_K two streams (rows r, r + n/2) without software prefetch, Q4_K the same streams
 *  without it. When the machine's neighbours keep memory busy, the twins read faster;
 *  tensor/prefetch.c picks one of the two by timing the calls.
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

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: rt_f16_to_f32's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

/* Software prefetch distance of the Q8_0 streams. The hardware prefetchers follow the four
 * streams, but not far enough ahead when memory is fast: on this machine (2 cores of a Zen 5
 * EPYC, 55-75 GB/s), in-process A/B (`ab`, outside the repo, 2 threads, alternating rounds,
 * medians of the per-round ratios) of 2048 bytes ahead against none: 248320 x 1024 (an
 * output head) 1.07-1.09x, 40 matrices of 6144 x 1024 1.06-1.14x, 60 of 1024 x 3584
 * 1.07-1.13x, 100 of 2048 x 1024 1.12x; 1536 and 3072 bytes 1.04-1.13x, 512 bytes 0.91-0.94x;
 * in L2 (one thread, 256 x 1024) 0.87x, where generation does not run. */
#define Q8_PF X86_Q8_PF
/* The activation side of each block (−128 · Σ4 x and the scale as a float) made once per call
 * instead of once per block and row quad: 79.3-79.8 against 76.8-77.3 GB/s in L2 (one thread,
 * 256 x 1024, a program outside the repo); not kept, since from memory (2 threads, 600 MB) the
 * kernel already reads at a plain read's rate in the same minutes (51.7-53.4 against 49.0-49.7
 * GB/s): its vector work is not the limit there. */

/* Software prefetch distance of the Q4_K streams (gemv_q4_K_rp): 4608 bytes = 8 rows of 1024
 * elements ahead. recur-bench tg64, 8 alternating rounds against 2304 and 9216: 0.97x, 0.93x. */
#define Q4_PF 4608

/* Rows r, r + q, r + 2q, r + 3q (q = n_rows / 4) side by side, as two pairs sharing the
 * activation side: four streams that each run straight through a quarter of the memory, which
 * the hardware prefetchers follow (with Q8_PF's help). *y0, and y1..y3 where not NULL (a row given
 * four times is computed four times and stored once). Without `quad`, the first pair alone
 * (w0, w1 into y0, y1; w2, w3 not read). */
static inline __attribute__((always_inline)) void q8_rows(int64_t nb, const uint8_t *w0, const uint8_t *w1,
                                                          const uint8_t *w2, const uint8_t *w3, const uint8_t *x,
                                                          float *y0, float *y1, float *y2, float *y3, bool pf,
                                                          bool quad) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0;
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x + off + Q8_0_QS)));
        const __m512i nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, xv));
        const __m512 dx = _mm512_set1_ps(x86_f16(x + off));
        const uint8_t *a0 = w0 + off, *a1 = w1 + off, *a2 = w2 + off, *a3 = w3 + off;
        if (pf && (b & 1)) {   /* a line a stream every other block (68 bytes), Q8_PF bytes ahead */
            _mm_prefetch((const char *)(a0 + Q8_PF), _MM_HINT_T0);
            _mm_prefetch((const char *)(a1 + Q8_PF), _MM_HINT_T0);
            if (quad) _mm_prefetch((const char *)(a2 + Q8_PF), _MM_HINT_T0);
            if (quad) _mm_prefetch((const char *)(a3 + Q8_PF), _MM_HINT_T0);
        }
        const __m512i wa = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a0 + Q8_0_QS))),
                                              _mm256_loadu_si256((const __m256i *)(a1 + Q8_0_QS)), 1);
        const __m512 sa = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, _mm512_xor_si512(wa, bias), xv));
        const __m512 da = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(a0), _mm256_castsi256_si128(bcast_h(a1)), 1));
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(da, dx), sa, acc0);
        if (!quad) continue;
        const __m512i wb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a2 + Q8_0_QS))),
                                              _mm256_loadu_si256((const __m256i *)(a3 + Q8_0_QS)), 1);
        const __m512 sb = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, _mm512_xor_si512(wb, bias), xv));
        const __m512 db = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(a2), _mm256_castsi256_si128(bcast_h(a3)), 1));
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(db, dx), sb, acc1);
    }
    *y0 = x86_hsum_ps(_mm512_castps512_ps256(acc0));
    if (y1) *y1 = x86_hsum_ps(_mm512_extractf32x8_ps(acc0, 1));
    if (!quad) return;
    if (y2) *y2 = x86_hsum_ps(_mm512_castps512_ps256(acc1));
    if (y3) *y3 = x86_hsum_ps(_mm512_extractf32x8_ps(acc1, 1));
}

static inline __attribute__((always_inline)) void gemv_q8_0_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                               int64_t g0, int64_t g1, const void *x, float *y,
                                                               bool pf) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 4, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++)
        q8_rows(nb, W + (size_t)r * ws, W + (size_t)(r + q) * ws, W + (size_t)(r + 2 * q) * ws,
                W + (size_t)(r + 3 * q) * ws, x, y + r, y + r + q, y + r + 2 * q, y + r + 3 * q, pf, true);
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) {   /* group q: the 0-3 rows left, one at a time */
        const uint8_t *row = W + (size_t)r * ws;
        q8_rows(nb, row, row, row, row, x, y + r, NULL, NULL, NULL, pf, true);
    }
}

static void gemv_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                      float *y) {
    gemv_q8_0_pf(n, w, ws, n_rows, g0, g1, x, y, true);
}

/* gemv_q8_0's lean twin: rows r and r + n/2 (group r; an odd last row is group n/2), two
 * streams and no software prefetch. While the machine's neighbours keep memory busy this reads
 * faster than four streams without prefetch (recur's per-token A/B, ABBA in one process, 150
 * quads, outside the repo: qwen3-0.6b Q8_0 0.97x the time a token twice, qwen35-0.8b Q8_0
 * 0.98x); where memory is idle, four streams with the prefetch read faster (Q8_PF). */
static void gemv_q8_0_pair(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                           const void *x, float *y) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 2, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *w0 = W + (size_t)r * ws, *w1 = W + (size_t)(r + q) * ws;
        q8_rows(nb, w0, w1, w0, w1, x, y + r, y + r + q, NULL, NULL, false, false);
    }
    if (g1 > q && n_rows % 2) {
        const uint8_t *row = W + (size_t)(n_rows - 1) * ws;
        q8_rows(nb, row, row, row, row, x, y + n_rows - 1, NULL, NULL, NULL, false, false);
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
 * the activation's float scale) are one IEEE multiply per lane, as in the scalar code. */

/* The first 16 bytes (d, dmin, the 12 scale bytes) of block `blk` of rows wr[4g..4g+3], one
 * row per 128-bit lane. */
static inline __m512i q4k_heads(const uint8_t *const *wr, int g, size_t blk) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(wr[4 * g] + blk)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(wr[4 * g + 1] + blk)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(wr[4 * g + 2] + blk)), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(wr[4 * g + 3] + blk)), 3);
}

/* rt_k4_scales_u64 for the four rows of q4k_heads at once: 128-bit lane m becomes
 * [sc[0..8) | m[0..8)] of row 4g+m. With the dwords of a lane [dd, w0, w1, w2]:
 * sc_lo = w0 & 0x3f.., sc_hi = (w2 & 0x0f..) | ((w0 >> 2) & 0x30..), m_lo = w1 & 0x3f..,
 * m_hi = ((w2 >> 4) & 0x0f..) | ((w1 >> 2) & 0x30..). */
static inline __m512i q4k_unpack_scales(__m512i h) {
    const __m512i p = _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xA5);   /* w0 w0 w1 w1 */
    const __m512i w2 = _mm512_shuffle_epi32(h, (_MM_PERM_ENUM)0xFF);  /* w2 w2 w2 w2 */
    const __m512i lo6 = _mm512_set4_epi32(0, 0x3f3f3f3f, 0, 0x3f3f3f3f);
    const __m512i lo4 = _mm512_set4_epi32(0x0f0f0f0f, 0, 0x0f0f0f0f, 0);
    const __m512i top2 = _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0);
    const __m512i w2s = _mm512_srlv_epi32(w2, _mm512_set4_epi32(4, 4, 0, 0));
    return _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(p, lo6), _mm512_and_si512(w2s, lo4)),
                           _mm512_and_si512(_mm512_srli_epi32(p, 2), top2));
}

/* One row's block: the exact sums of its 8 sub-blocks, partly reduced: z[h] holds sub-blocks
 * 4h..4h+3 in its 128-bit blocks, 4 lanes each, the odd (high-nibble) ones times 16. The high
 * nibbles are taken in place (q & 0xF0, no shift); a 128-bit block of the low nibbles (lo) and
 * one of the high (hi) hold half a sub-block each, so A = [lo.b0 hi.b0 lo.b2 hi.b2] and
 * B = [lo.b1 hi.b1 lo.b3 hi.b3] line the two halves of every sub-block up lane for lane and
 * one dpbusd chain sums both. y[2h], y[2h+1]: the activations of A and B (the even and odd
 * 16-byte blocks of y[128h..128h+128)). Nibbles are u8 (high ones up to 240) and activations
 * s8: every sum is exact (|lane| <= 8·240·128). */
static inline __attribute__((always_inline)) void q4k_row_sums(const uint8_t *a, bool q5, const __m512i y[4],
                                                                 __m512i z[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), zero = _mm512_setzero_si512();
    const __m512i ia = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), ib = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    __m512i qh = zero;
    if (q5) qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a + Q5_K_QH)));
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m512i q = _mm512_loadu_si512(a + (q5 ? Q5_K_QS : Q4_K_QS) + 64 * h);
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_andnot_si512(m4, q);
        if (q5) {   /* Q5_K: the high nibbles shifted down, then bit 4 from qh (bit 2j: chunk j's low) */
            const __m512i sh = _mm512_setr_epi64(4 * h, 4 * h, 4 * h, 4 * h, 4 * h + 2, 4 * h + 2, 4 * h + 2, 4 * h + 2);
            const __m512i b0 = _mm512_slli_epi16(_mm512_srlv_epi64(qh, sh), 4);
            const __m512i b1 = _mm512_slli_epi16(_mm512_srlv_epi64(qh, _mm512_add_epi64(sh, _mm512_set1_epi64(1))), 4);
            const __m512i bit4 = _mm512_set1_epi8(0x10);
            lo = _mm512_ternarylogic_epi32(lo, b0, bit4, 0xF8);   /* lo | (b0 & 0x10) */
            hi = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), b1, bit4, 0xF8);
        }
        z[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, _mm512_permutex2var_epi64(lo, ia, hi), y[2 * h]),
                                   _mm512_permutex2var_epi64(lo, ib, hi), y[2 * h + 1]);
    }
}

/* Lane 4i + m = the sum of the 4 lanes of 128-bit block i of input m (a, b, c, d = m 0..3):
 * four rows' q4k_row_sums z[h] give lane 4i + m = sub-block 4h + i of row m. Integer
 * additions: any order gives the same exact sums. */
static inline __m512i reduce4_i32(__m512i a, __m512i b, __m512i c, __m512i d) {
    const __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    const __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* Word indices for q4k_rp_group's permutex2var_epi16 over two vectors (32 words each). */
static const int16_t q4k_min_words[32] = { 16, 18, 20, 22, 48, 50, 52, 54, 17, 19, 21, 23, 49, 51, 53, 55,
                                           24, 26, 28, 30, 56, 58, 60, 62, 25, 27, 29, 31, 57, 59, 61, 63 };
static const int16_t q4k_d_words[32] = { 0, 8, 16, 24, 32, 40, 48, 56, 1, 9, 17, 25, 33, 41, 49, 57 };

/* dot_q4_K_rp (tensor_impl.h rt_dot_q4_K_rp) for eight rows. Per block: each sub-block's exact
 * sum (dpbusd, then a reduction shared by four rows), times its scale (an int32 multiply after
 * the reduction), chunk j = sub-blocks 2j + 2j+1; the min sums mn[j] = m[2j]·(bs[4j]+bs[4j+1]) +
 * m[2j+1]·(bs[4j+2]+bs[4j+3]) with one madd for 8 rows x 2 chunks; then acc = fma(cs[j], d·yd,
 * acc), accm = fma(mn[j], dmin·yd, accm) for j = 0..3 (lane r: row r's scalar chain); acc − accm. */
static inline __attribute__((always_inline)) __m256 q4k_rp_group_pf(int64_t nb, const uint8_t *const *wr,
                                                                     const uint8_t *x, bool q5, bool pf) {
    const size_t bytes = q5 ? Q5_K_BYTES : Q4_K_BYTES;
    /* 4x4 dword transpose of the 128-bit lanes: block k = dword k of lanes 0-3 */
    const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    /* in a block [row m: bytes 4m..4m+3], byte 4i + m <- byte 4m + i (a 4x4 byte transpose) */
    const __m512i bt = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    /* Q4_K: the even (low-nibble) sub-blocks' scales times 16, as their sums lack the factor */
    const __m512i x16 = q5 ? _mm512_setzero_si512() : _mm512_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0);
    /* mins: word 8j + 4g + m <- row 4g+m's m[2j], m[2j+1] (T_g words 16 + 2m + j, 24 + 2m + j - 2) */
    const __m512i mw = _mm512_loadu_si512(q4k_min_words);
    /* d and dmin: words 0-7 = d of rows 0-7 (word 8m of head vector g), 8-15 = dmin */
    const __m512i dw = _mm512_loadu_si512(q4k_d_words);
    /* chunk pairs: blocks [C0.b0 C1.b0 C0.b2 C1.b2] and [C0.b1 C1.b1 C0.b3 C1.b3] (qwords) */
    const __m512i ca = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), cb = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i pi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const size_t blk = (size_t)i * bytes;
        /* each stream's four rows are one run of memory read four blocks at a time: the lines of
         * those four blocks, Q4_PF bytes further on (gemv_q4_K_rp) */
        for (int k = 0; pf && k < 8; k += 4) {
            const uint8_t *ahead = wr[k] + Q4_PF + 4 * blk;
            for (int o = 0; o < 4 * (int)bytes; o += 64) _mm_prefetch((const char *)(ahead + o), _MM_HINT_T0);
        }
        __m512i y[4];
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            const __m512i y0 = _mm512_loadu_si512(b + Q8_K_QS + 128 * h), y1 = _mm512_loadu_si512(b + Q8_K_QS + 128 * h + 64);
            y[2 * h] = _mm512_shuffle_i32x4(y0, y1, 0x88);
            y[2 * h + 1] = _mm512_shuffle_i32x4(y0, y1, 0xDD);
        }
        /* bsum pairs: ps[k] = bs[2k] + bs[2k+1] (|.| <= 32·128: exact in int16) */
        const __m512i ps = _mm512_castsi128_si512(_mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS)),
                                                                 _mm_loadu_si128((const __m128i *)(b + Q8_K_BSUMS + 16))));
        const __m512i h0 = q4k_heads(wr, 0, blk), h1 = q4k_heads(wr, 1, blk);
        const __m512i t0 = _mm512_permutexvar_epi32(tr, q4k_unpack_scales(h0));
        const __m512i t1 = _mm512_permutexvar_epi32(tr, q4k_unpack_scales(h1));
        __m512i c[2][2];   /* [h][g]: 16 x sub-block 4h+i of row 4g+m times its scale, lane 4i + m */
        _Pragma("GCC unroll 2")
        for (int g = 0; g < 2; g++) {   /* four rows at a time: their partial sums fit in registers */
            __m512i z[4][2];
            _Pragma("GCC unroll 4")
            for (int r = 0; r < 4; r++) q4k_row_sums(wr[4 * g + r] + blk, q5, y, z[r]);
            const __m512i s = _mm512_shuffle_epi8(g ? t1 : t0, bt);
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                const __m512i sc = _mm512_sllv_epi32(_mm512_cvtepu8_epi32(h ? _mm512_extracti32x4_epi32(s, 1) : _mm512_castsi512_si128(s)), x16);
                c[h][g] = _mm512_mullo_epi32(reduce4_i32(z[0][h], z[1][h], z[2][h], z[3][h]), sc);
            }
        }
        /* [chunk 2h rows 0-7 | chunk 2h+1 rows 0-7], Q4_K's divided by 16 (exact: every term has the factor) */
        const __m512 cs01 = _mm512_cvtepi32_ps(_mm512_srai_epi32(
            _mm512_add_epi32(_mm512_permutex2var_epi64(c[0][0], ca, c[0][1]), _mm512_permutex2var_epi64(c[0][0], cb, c[0][1])), q5 ? 0 : 4));
        const __m512 cs23 = _mm512_cvtepi32_ps(_mm512_srai_epi32(
            _mm512_add_epi32(_mm512_permutex2var_epi64(c[1][0], ca, c[1][1]), _mm512_permutex2var_epi64(c[1][0], cb, c[1][1])), q5 ? 0 : 4));
        /* mins: bytes 16j + 2r + e = m[2j+e] of row r; ps pairs (ps[2j], ps[2j+1]) per dword */
        const __m512i mb = _mm512_permutex2var_epi16(t0, mw, t1);
        const __m512i mn01 = _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_castsi512_si256(mb)), _mm512_permutexvar_epi32(pi, ps));
        const __m512i mn23 = _mm512_madd_epi16(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(mb, 1)),
                                               _mm512_permutexvar_epi32(_mm512_add_epi32(pi, _mm512_set1_epi32(2)), ps));
        const __m512 mf01 = _mm512_cvtepi32_ps(mn01), mf23 = _mm512_cvtepi32_ps(mn23);
        const __m512 dd = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(h0, dw, h1))),
                                        _mm512_set1_ps(rd_f32(b)));
        const __m256 d = _mm512_castps512_ps256(dd), dm = _mm512_extractf32x8_ps(dd, 1);
        acc = _mm256_fmadd_ps(_mm512_castps512_ps256(cs01), d, acc);
        accm = _mm256_fmadd_ps(_mm512_castps512_ps256(mf01), dm, accm);
        acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(cs01, 1), d, acc);
        accm = _mm256_fmadd_ps(_mm512_extractf32x8_ps(mf01, 1), dm, accm);
        acc = _mm256_fmadd_ps(_mm512_castps512_ps256(cs23), d, acc);
        accm = _mm256_fmadd_ps(_mm512_castps512_ps256(mf23), dm, accm);
        acc = _mm256_fmadd_ps(_mm512_extractf32x8_ps(cs23, 1), d, acc);
        accm = _mm256_fmadd_ps(_mm512_extractf32x8_ps(mf23, 1), dm, accm);
    }
    return _mm256_sub_ps(acc, accm);
}

static __m256 q4k_rp_group(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    return q4k_rp_group_pf(nb, wr, x, false, true);
}

static __m256 q4k_rp_group_lean(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    return q4k_rp_group_pf(nb, wr, x, false, false);
}

static __m256 q5k_rp_group(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    return q4k_rp_group_pf(nb, wr, x, true, true);
}

static __m256 q5k_rp_group_lean(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    return q4k_rp_group_pf(nb, wr, x, true, false);
}

/* Group r (of q = n_rows / 8): rows 4r..4r+3 and 4q + 4r..4q + 4r+3, lanes 0-7 (x86_kq_rows with
 * P = 4). Eight straight streams (rows r + k·q, the
 * earlier form) made the hardware prefetchers of the Zen 5 machine read at ~0.75x of two (a read
 * loop alone, in-process A/B, 2 threads); two streams of neighbouring rows, whose four rows are
 * read side by side, need the software prefetch over their run of memory (q4k_rp_group).
 * recur-bench tg64, 8 alternating rounds against the eight streams: qwen35-0.8b Q4_K_M 87.8 ->
 * 92.4 t/s (8 won), qwen3-0.6b Q4_K_M 107.1 -> 114.8 (6 won). */
static void gemv_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                         const void *x, float *y) {
    x86_kq_rows(8, 4, q4k_rp_group, n, w, ws, n_rows, g0, g1, x, y);
}

static void gemv_q4_K_rp_lean(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                              const void *x, float *y) {
    x86_kq_rows(8, 4, q4k_rp_group_lean, n, w, ws, n_rows, g0, g1, x, y);
}

/* Q5_K (rt_dot_q5_K_rp: the AVX-512 table's Q5_K order) the same way, the fifth bits joined to
 * the nibbles before the dpbusd (Q4_PF: the same distance in bytes). */
static void gemv_q5_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                         const void *x, float *y) {
    x86_kq_rows(8, 4, q5k_rp_group, n, w, ws, n_rows, g0, g1, x, y);
}

static void gemv_q5_K_rp_lean(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                              const void *x, float *y) {
    x86_kq_rows(8, 4, q5k_rp_group_lean, n, w, ws, n_rows, g0, g1, x, y);
}

/* ---- Q6_K (rt_dot_q6_K's order): four rows per group, one float lane per row -------------
 *
 * rt_dot_q6_K sums a block exactly in integers (sumi = sum over the 16 sub-blocks of
 * sc[k] · sum (q - 32)·y) and then runs one scalar chain s = fmaf((float)sumi, d·yd, s). Here
 * the 6-bit values q (0..63, u8) are dotted with the activations by dpbusd (exact), two dpbusd
 * results are packed to int16 and multiplied by their sub-blocks' scales in pairs (madd-style
 * dpwssd, one more adds −32·bsum·scale), and the 16 lanes of four rows are summed into four
 * lanes by one shared reduction; lane r then takes row r's chain step. (The earlier form,
 * reducing each sub-block to one lane and multiplying after, cost ~15 % more in cache.) */

/* Word indices spreading 16 int16 per-sub-block values over a packed pair of q6k_row's dpbusd
 * results for half h: in 128-bit lane l, words 0-3 take sub-block 8h + l, words 4-7 sub-block
 * 8h + 4 + l. */
static const int16_t q6k_sb_words[2][32] = {
    { 0, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 5, 5, 5, 5, 2, 2, 2, 2, 6, 6, 6, 6, 3, 3, 3, 3, 7, 7, 7, 7 },
    { 8, 8, 8, 8, 12, 12, 12, 12, 9, 9, 9, 9, 13, 13, 13, 13, 10, 10, 10, 10, 14, 14, 14, 14, 11, 11, 11, 11, 15, 15, 15, 15 },
};

/* One row's block: 16 lanes whose sum is sumi. y4[4]: the block's activations (y[0..64),
 * y[64..128), ...); bs8: −8·bsum as 16 words, the upper 256 bits 0. The correction
 * −32·bsum·scale is one dpwssd of 4·scale (|.| <= 512) by bs8 (in L2, 1.06x against two dpwssd
 * by −8·bsum spread four words a sub-block as the scales are). The dpbusd lanes (4 products of
 * q <= 63 and |y| <= 128: |lane| <= 32256) fit int16, so two results pack into one vector
 * without saturating, and dpwssd multiplies pairs of them by the sub-block's scale and adds:
 * every step exact in int32 (|sumi| < 2^28). */
static inline __m512i q6k_row(const uint8_t *a, const __m512i y4[4], __m512i bs8) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30), zero = _mm512_setzero_si512();
    /* qh bits of parts 0 | 1 to bits 4-5: shift left by 4 | 2; of parts 2 | 3: right by 0 | 2
     * (16-bit shifts: what crosses into the neighbouring byte is masked off) */
    const __m512i sl = _mm512_setr_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004,
                                         0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002);
    const __m512i sr = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                         0x0002000200020002);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + Q6_K_SCALES)));
    const __m512i sc16 = _mm512_castsi256_si512(sc);
    /* −32·bsum·scale summed: pairs of 4·sc (|.| <= 512) times −8·bsum (bs8's upper half is 0) */
    __m512i acc = _mm512_dpwssd_epi32(zero, _mm512_castsi256_si512(_mm256_slli_epi16(sc, 2)), bs8);
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        /* elements 128h + j (va) and 128h + 64 + j (vb), j < 64: ql[64h + j] low / high nibble,
         * qh[32h + j % 32] bits 2·(j / 32) / 4 + 2·(j / 32) */
        const __m512i ql = _mm512_loadu_si512(a + Q6_K_QL + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a + Q6_K_QH + 32 * h)));
        const __m512i va = _mm512_ternarylogic_epi32(_mm512_and_si512(ql, m4), _mm512_sllv_epi16(qh, sl), m30, 0xF8);
        const __m512i vb = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                                     _mm512_srlv_epi16(qh, sr), m30, 0xF8);
        /* 128-bit lane l: words 0-3 sub-block 8h + l (va), 4-7 sub-block 8h + 4 + l (vb) */
        const __m512i p = _mm512_packs_epi32(_mm512_dpbusd_epi32(zero, va, y4[2 * h]), _mm512_dpbusd_epi32(zero, vb, y4[2 * h + 1]));
        acc = _mm512_dpwssd_epi32(acc, p, _mm512_permutexvar_epi16(_mm512_loadu_si512(q6k_sb_words[h]), sc16));
    }
    return acc;
}

/* Four rows per group (x86_kq_rows with G = 4, P = 1): rows r, r + q, r + 2q, r + 3q (q =
 * n_rows / 4), four streams that each run straight through a quarter of the memory, as
 * q8_quad's. The activation side (y, −8·bsum) is loaded once for four rows and one
 * reduce4_i32 brings their 4 × 16 lanes down to 4: fewer instructions a row, which is what
 * bounds this kernel wherever the bytes come fast. Against two rows (r, r + n/2), 2 threads
 * unless said, `gq`/`gq2` outside the repo (alternating runs): in L2 (one thread, 1024 x
 * 1024) 29.5 -> 25.1 us, 1.17x; in L3 (two of 6144 x 1024) 53-56 -> 63-67 GB/s best, 1.2x
 * on average; from memory while the machine's neighbours held it at ~35 GB/s, 60 matrices
 * of 1024 x 3072 0.99x, an output head of 151936 x 1024 1.03x (medians of in-process
 * ratios). Eight rows side by side (an earlier form) run a loop body of ~370 instructions,
 * longer than the core's reorder window, and read slower out of cache; a software prefetch
 * 2048 or 4096 bytes ahead in each stream gave 0.94-0.98x from memory. */
/* The activation side of Q8_K block b for q6k_row: y4 (its four 64-byte parts), and −8·bsum
 * (|.| <= 8·2048: int16) as 16 words, the upper half 0 (the return value). */
static inline __m512i q6k_act(const uint8_t *b, __m512i y4[4]) {
    for (int k = 0; k < 4; k++) y4[k] = _mm512_loadu_si512(b + Q8_K_QS + 64 * k);
    return _mm512_zextsi256_si512(
        _mm256_mullo_epi16(_mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS)), _mm256_set1_epi16(-8)));
}

static __m256 q6k_quad(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const size_t blk = (size_t)i * Q6_K_BYTES;
        __m512i y4[4];
        const __m512i bs8 = q6k_act(b, y4);
        /* lane 4i + m: the sum of 128-bit block i of row m's lanes; then the four blocks */
        const __m512i r4 = reduce4_i32(q6k_row(wr[0] + blk, y4, bs8), q6k_row(wr[1] + blk, y4, bs8),
                                       q6k_row(wr[2] + blk, y4, bs8), q6k_row(wr[3] + blk, y4, bs8));
        const __m256i r8 = _mm256_add_epi32(_mm512_castsi512_si256(r4), _mm512_extracti64x4_epi64(r4, 1));
        const __m128i sumi = _mm_add_epi32(_mm256_castsi256_si128(r8), _mm256_extracti128_si256(r8, 1));
        const __m128i dh = _mm_setr_epi16((short)rd_u16(wr[0] + blk + Q6_K_D), (short)rd_u16(wr[1] + blk + Q6_K_D),
                                          (short)rd_u16(wr[2] + blk + Q6_K_D), (short)rd_u16(wr[3] + blk + Q6_K_D),
                                          0, 0, 0, 0);
        const __m128 d = _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(rd_f32(b)));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(sumi), d, acc);
    }
    return _mm256_zextps128_ps256(acc);
}

static void gemv_q6_K(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                      const void *x, float *y) {
    x86_kq_rows(4, 1, q6k_quad, n, w, ws, n_rows, g0, g1, x, y);
}

/* Lanes 0 and 1 = the sums of the 16 lanes of p0 and of p1 (exact integer additions). */
static inline __m128i hsum2_i32(__m512i p0, __m512i p1) {
    /* lanes 0-7: p0's halves added, 8-15: p1's */
    const __m512i q = _mm512_add_epi32(_mm512_shuffle_i32x4(p0, p1, 0x44), _mm512_shuffle_i32x4(p0, p1, 0xEE));
    /* blocks 0 and 2: p0's and p1's four partial sums */
    const __m512i r = _mm512_add_epi32(q, _mm512_shuffle_i32x4(q, q, 0xB1));
    const __m512i t = _mm512_add_epi32(r, _mm512_shuffle_epi32(r, (_MM_PERM_ENUM)0x4E));
    const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, (_MM_PERM_ENUM)0xB1));
    return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_zextsi128_si512(_mm_setr_epi32(0, 8, 0, 0)), u));
}

/* Two rows per group, r and r + n/2 (x86_kq_rows with G = 2): two streams where q6k_quad reads
 * four. gemv_q6_K's lean twin: while the machine's neighbours keep memory busy, two streams
 * read faster than four (recur's per-token A/B, ABBA in one process, 150 quads, outside the
 * repo, the two-row kernel of 9bfe618 against q6k_quad: qwen35-0.8b Q4_K_M 0.96-1.00x the time
 * a token in 7 runs, qwen3-0.6b Q4_K_M 0.97-1.00x in 6); q6k_quad does more per instruction
 * (in L2 1.17x). */
static __m256 q6k_pair(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const size_t blk = (size_t)i * Q6_K_BYTES;
        __m512i y4[4];
        const __m512i bs8 = q6k_act(b, y4);
        const __m512i p0 = q6k_row(wr[0] + blk, y4, bs8), p1 = q6k_row(wr[1] + blk, y4, bs8);
        const __m128i dh = _mm_setr_epi16((short)rd_u16(wr[0] + blk + Q6_K_D), (short)rd_u16(wr[1] + blk + Q6_K_D),
                                          0, 0, 0, 0, 0, 0);
        const __m128 d = _mm_mul_ps(_mm_cvtph_ps(dh), _mm_set1_ps(rd_f32(b)));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(hsum2_i32(p0, p1)), d, acc);
    }
    return _mm256_zextps128_ps256(acc);
}

static void gemv_q6_K_pair(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                           const void *x, float *y) {
    x86_kq_rows(2, 1, q6k_pair, n, w, ws, n_rows, g0, g1, x, y);
}

void rt_fill_gemv_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q8_0] = (tensor_gemv){ gemv_q8_0, 4, gemv_q8_0_pair, 2, NULL, 0 };
    k->gemv_q4_K_rp = (tensor_gemv){ gemv_q4_K_rp, 8, gemv_q4_K_rp_lean, 0, NULL, 0 };
    k->gemv[GGUF_T_Q5_K] = (tensor_gemv){ gemv_q5_K_rp, 8, gemv_q5_K_rp_lean, 0, NULL, 0 };
    k->gemv[GGUF_T_Q6_K] = (tensor_gemv){ gemv_q6_K, 4, gemv_q6_K_pair, 2, NULL, 0 };
}
