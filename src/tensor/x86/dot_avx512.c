/* dot_avx512.c — AVX-512 (F/BW/VL/DQ + VNNI) dot products of the quantized weight types,
 * IQ4_XS's prompt gemm and single-token kernel (the same bits as its dot), and the AVX-512
 * table.
 *
 * Contract as dot_avx2.c: n a multiple of the block size, unaligned loads only, exact
 * integer parts per block, float FMA of the block scales into 16-lane accumulators reduced
 * at the end in a fixed order (invariant 1). Q8_0/Q4_0 take two blocks per 512-bit step
 * and finish an odd block with 256-bit code (Q8_0 then FMAs each block into one 8-lane
 * accumulator, ggml's order); Q4_K keeps the AVX2 table's dot (ggml's lane order, same bits
 * as the scalar reference); Q5_K takes rt_dot_q5_K_rp's order (Q4_K's repacked one: exact
 * chunk sums, scalar float chains), so that its gemm can run one output element per lane;
 * Q6_K/IQ4_XS take 64 elements per step: maddubs (u8 x s8 -> s16 pairs, no saturation for
 * these ranges) then VNNI dpwssd with the sub-block scales, one int32 accumulator per block. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

static inline float hsum512(__m512 v) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return x86_hsum_ps(s);
}

static inline __m512 dup2_ps(float lo, float hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(lo)), _mm256_set1_ps(hi), 1);
}

static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* |x| (u8) and y with x's sign, for dpbusd / maddubs of two signed byte vectors. */
static inline __m512i neg_where(__m512i y, __m512i x) {
    return _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(x), _mm512_setzero_si512(), y);
}

/* Two 16-byte nibble groups at p0, p1 -> [lo(p0), hi(p0), lo(p1), hi(p1)] (4 x 16 bytes). */
static inline __m512i unpack_nib_x2(const uint8_t *p0, const uint8_t *p1) {
    const __m128i q0 = _mm_loadu_si128((const __m128i *)p0), q1 = _mm_loadu_si128((const __m128i *)p1);
    const __m512i t = join256(_mm256_set_m128i(q0, q0), _mm256_set_m128i(q1, q1));
    const long long f = 0x0004000400040004LL;   /* shift the 16-bit lanes of 128-bit lanes 1, 3 by 4 */
    const __m512i s = _mm512_srlv_epi16(t, _mm512_set_epi64(f, f, 0, 0, f, f, 0, 0));
    return _mm512_and_si512(s, _mm512_set1_epi8(0x0F));
}

static inline __m512i ld512_blocks(const uint8_t *p, size_t stride) {
    return join256(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)(p + stride)));
}

/* rt_dot_q8_0's order (tensor_impl.h): the integer parts of two blocks per 512-bit step,
 * then one 8-lane FMA per block into a single accumulator, blocks in order. */
static float dot_q8_0(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2, a += 2 * Q8_0_BYTES, b += 2 * Q8_0_BYTES) {
        const __m512i qa = ld512_blocks(a + Q8_0_QS, Q8_0_BYTES);
        const __m512i qb = ld512_blocks(b + Q8_0_QS, Q8_0_BYTES);
        const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(qa), neg_where(qb, qa));
        const __m512 pf = _mm512_cvtepi32_ps(p);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a) * x86_f16(b)), _mm512_castps512_ps256(pf), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a + Q8_0_BYTES) * x86_f16(b + Q8_0_BYTES)),
                              _mm512_extractf32x8_ps(pf, 1), acc);
    }
    if (i < nb) {
        const __m256i p = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)),
                                     _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a) * x86_f16(b)), _mm256_cvtepi32_ps(p), acc);
    }
    return x86_hsum_ps(acc);
}

/* dot_q8_0 for four activation rows at once: the weight blocks are loaded once and the four
 * accumulators are independent FMA chains; each performs exactly dot_q8_0's operations. */
static void dot4_q8_0(int64_t n, const void *w, const void *x, size_t xs, float out[4]) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2, a += 2 * Q8_0_BYTES, b += 2 * Q8_0_BYTES) {
        const __m512i qa = ld512_blocks(a + Q8_0_QS, Q8_0_BYTES);
        const __m512i ua = _mm512_abs_epi8(qa);
        const float d0 = x86_f16(a), d1 = x86_f16(a + Q8_0_BYTES);
        for (int j = 0; j < 4; j++) {
            const uint8_t *bj = b + j * xs;
            const __m512i qb = ld512_blocks(bj + Q8_0_QS, Q8_0_BYTES);
            const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ua, neg_where(qb, qa)));
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d0 * x86_f16(bj)), _mm512_castps512_ps256(pf), acc[j]);
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(d1 * x86_f16(bj + Q8_0_BYTES)), _mm512_extractf32x8_ps(pf, 1),
                                     acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) {
        if (i < nb) {
            const uint8_t *bj = b + j * xs;
            const __m256i p = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)),
                                         _mm256_loadu_si256((const __m256i *)(bj + Q8_0_QS)));
            acc[j] = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a) * x86_f16(bj)), _mm256_cvtepi32_ps(p), acc[j]);
        }
        out[j] = x86_hsum_ps(acc[j]);
    }
}

static float dot_q4_0(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK4_0;
    const __m512i eight = _mm512_set1_epi8(8);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2, a += 2 * Q4_0_BYTES, b += 2 * Q8_0_BYTES) {
        const __m512i q = unpack_nib_x2(a + Q4_0_QS, a + Q4_0_BYTES + Q4_0_QS);   /* 0..15 */
        const __m512i y = ld512_blocks(b + Q8_0_QS, Q8_0_BYTES);
        const __m512i z = _mm512_setzero_si512();
        const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(z, q, y), _mm512_dpbusd_epi32(z, eight, y));
        const __m512 d = dup2_ps(x86_f16(a) * x86_f16(b), x86_f16(a + Q4_0_BYTES) * x86_f16(b + Q8_0_BYTES));
        acc = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(p), acc);
    }
    float s = hsum512(acc);
    if (i < nb) {
        const __m256i q = _mm256_sub_epi8(x86_unpack_nib16(a + Q4_0_QS), _mm256_set1_epi8(8));
        const __m256i p = x86_dot_i8(q, _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)));
        s += x86_hsum_ps(_mm256_mul_ps(_mm256_set1_ps(x86_f16(a) * x86_f16(b)), _mm256_cvtepi32_ps(p)));
    }
    return s;
}

/* int16 lanes 0-15 = s[k], 16-31 = s[k+1], from the 8 int16 in the low 128 bits of s16. */
static inline __m512i scale_pair(__m512i s16, int k) {
    const __m512i idx = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)k)), s16);
}

/* Chunk j (64 elements: sub-blocks 2j, 2j+1) of a Q4_K/Q5_K block as 16 int32 lanes; h holds
 * the fifth bits, pre-shifted so bit 2j of a byte serves both halves (zero for Q4_K). */
static inline __m512i k4_chunk(const uint8_t *qs, __m512i h, const int8_t *y, __m512i s16, int j) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    __m512i v = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(0x0F));
    const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(h, 2 * j), _mm512_set1_epi8(1));
    v = _mm512_or_si512(v, _mm512_slli_epi16(hb, 4));
    const __m512i p16 = _mm512_maddubs_epi16(v, _mm512_loadu_si512(y + 64 * j));
    return _mm512_madd_epi16(p16, scale_pair(s16, 2 * j));
}

static inline __m256i fold512(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

/* rt_dot_q4_K_rp's order (ggml's repacked gemm; Q5_K: rt_dot_q5_K_rp, qh not NULL): the
 * integer chunk sums here, the float chains as in the scalar reference, so the bits are the same. */
static inline float k4_rp(int64_t n, const uint8_t *a, size_t bytes, size_t qh_off, size_t qs_off, bool q5,
                          const uint8_t *b) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, a += bytes, b += Q8_K_BYTES) {
        uint64_t sc, mm;
        rt_k4_scales_u64(a + Q4_K_SCALES, &sc, &mm);
        uint8_t m[8];
        memcpy(m, &mm, 8);
        const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        __m512i h = _mm512_setzero_si512();
        if (q5) {
            const __m256i h256 = _mm256_loadu_si256((const __m256i *)(a + qh_off));
            h = join256(h256, _mm256_srli_epi16(h256, 1));
        }
        const uint8_t *qs = a + qs_off;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const float yd = rd_f32(b);
        const float d = x86_f16(a) * yd, dmin = x86_f16(a + Q4_K_DMIN) * yd;
        int32_t cs[4];
        _mm_storeu_si128((__m128i *)cs, x86_hsum4_epi32(fold512(k4_chunk(qs, h, y, s16, 0)), fold512(k4_chunk(qs, h, y, s16, 1)),
                                                    fold512(k4_chunk(qs, h, y, s16, 2)), fold512(k4_chunk(qs, h, y, s16, 3))));
        for (int j = 0; j < 4; j++) {
            acc = fmaf((float)cs[j], d, acc);
            accm = fmaf((float)rt_q4_K_rp_min(b, m, j), dmin, accm);
        }
    }
    return acc - accm;
}

float rt_dot_q4_K_rp_avx512(int64_t n, const void *w, const void *x) {
    return k4_rp(n, w, Q4_K_BYTES, 0, Q4_K_QS, false, x);
}

float rt_dot_q5_K_rp_avx512(int64_t n, const void *w, const void *x) {
    return k4_rp(n, w, Q5_K_BYTES, Q5_K_QH, Q5_K_QS, true, x);
}

/* int16 lanes 8g..8g+7 = s[k+g] for g < 4, from the 16 int16 scales in the low 256 bits. */
static inline __m512i scale_quad(__m512i s16, int k) {
    const __m512i idx = _mm512_srli_epi16(_mm512_set_epi16(
        31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16,
        15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 3);
    return _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)k)), s16);
}

/* Q6_K: as the AVX2 version, 64 elements per step (see dot_avx2.c); rt_dot_q6_K's bits. */
float rt_dot_q6_K_avx512(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    float acc = 0.0f;   /* rt_dot_q6_K's chain (exact integer block sums) */
    for (int64_t i = 0; i < n / QK_K; i++, a += Q6_K_BYTES, b += Q8_K_BYTES) {
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(a + Q6_K_SCALES)));
        const __m512i s16 = _mm512_castsi256_si512(sc);
        const __m256i corr = _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS)));
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        __m512i sumi = _mm512_sub_epi32(_mm512_setzero_si512(),
                                        _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(a + Q6_K_QL + 64 * h);
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(a + Q6_K_QH + 32 * h));
            const __m512i hh = join256(qh, _mm256_srli_epi16(qh, 2));
            const __m512i va = _mm512_or_si512(_mm512_and_si512(ql, m4),
                                               _mm512_slli_epi16(_mm512_and_si512(hh, m2), 4));
            const __m512i vb = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                               _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hh, 4), m2), 4));
            const __m512i pa = _mm512_maddubs_epi16(va, _mm512_loadu_si512(y + 128 * h));
            const __m512i pb = _mm512_maddubs_epi16(vb, _mm512_loadu_si512(y + 128 * h + 64));
            sumi = _mm512_dpwssd_epi32(sumi, pa, scale_quad(s16, 8 * h));
            sumi = _mm512_dpwssd_epi32(sumi, pb, scale_quad(s16, 8 * h + 4));
        }
        acc = fmaf((float)_mm512_reduce_add_epi32(sumi), x86_f16(a + Q6_K_D) * rd_f32(b), acc);
    }
    return acc;
}

/* Sub-blocks 2j, 2j+1 of an IQ4_XS block: nibbles looked up in the level table, dotted with
 * y[64j..] (sign trick; |level| <= 127), weighted by ls - 32: 16 int32 lanes. */
static inline __m512i iq4_pair(const uint8_t *qs, const int8_t *y, __m512i table, __m512i ls, int j) {
    const uint8_t *q = qs + 32 * j;
    const __m512i v = _mm512_shuffle_epi8(table, unpack_nib_x2(q, q + 16));
    const __m512i yv = _mm512_loadu_si512(y + 64 * j);
    const __m512i p16 = _mm512_maddubs_epi16(_mm512_abs_epi8(v), neg_where(yv, v));
    return _mm512_madd_epi16(p16, scale_pair(ls, 2 * j));
}

static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl));
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, a += IQ4_XS_BYTES, b += Q8_K_BYTES) {
        const __m128i ls8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)x86_iq4xs_scales(a)));
        const __m512i ls = _mm512_castsi128_si512(_mm_sub_epi16(ls8, _mm_set1_epi16(32)));
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const uint8_t *qs = a + IQ4_XS_QS;
        const __m512i s01 = _mm512_add_epi32(iq4_pair(qs, y, table, ls, 0), iq4_pair(qs, y, table, ls, 1));
        const __m512i s23 = _mm512_add_epi32(iq4_pair(qs, y, table, ls, 2), iq4_pair(qs, y, table, ls, 3));
        acc = _mm512_fmadd_ps(_mm512_set1_ps(x86_f16(a) * rd_f32(b)), _mm512_cvtepi32_ps(_mm512_add_epi32(s01, s23)), acc);
    }
    return hsum512(acc);
}

/* ---- IQ4_XS prompts: tiles of rows × tokens, each output element with exactly dot_iq4_xs's
 * operations: per block, the
 * 16 int32 lanes of the four chunks (iq4_pair's: lane l the exact sum of its products times
 * their sub-block's scale), the chunks added with dpwssd instead of madd and adds (the same
 * exact integers), one FMA of them times x86_f16(d) · the token's scale into a 16-lane
 * accumulator, hsum512 at the end. What the dot does for every (row, token) is done once: a
 * row's levels (their magnitudes, the mask of the negative ones) and its scale pairs are
 * unpacked once per token chunk (iq4_unpack), each row's vectors held in registers while the
 * tile's tokens pass. Before, every IQ4_XS call took the dot row by row. Measured on the Zen 5
 * class: one thread, 1024 x 3072, best of 3 (/tmp/s34/g40.c outside the repo), 4 tokens 200
 * GOP/s, 64-512 358-365 (the tokens' vectors held instead and the rows' read for each: 290);
 * recur-bench -p 512 -n 0, 2 threads, qwen3-0.6b IQ4_XS (llama-quantize), 3 alternating runs:
 * 233-247 -> 597-614 t/s (ik_llama.cpp: 803). (For single tokens, four rows side by side with
 * each block unpacked so as it streamed past took 15.5 TSC cycles a (row, block) in L2 against
 * the dot's 11.3: gemv_iq4_xs below reaches the integers another way.) */

/* One block of one row, unpacked for the tiles. */
typedef struct iq4_unp {
    __m512i   av[4];    /* chunk j's |levels| */
    __m512i   sc[4];    /* scale_pair(ls, 2j) */
    __mmask64 neg[4];   /* the negative levels of chunk j */
    float     d, pad[7];
} iq4_unp;

static inline void iq4_unpack(const uint8_t *a, iq4_unp *u) {
    const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl));
    const __m128i ls8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)x86_iq4xs_scales(a)));
    const __m512i ls = _mm512_castsi128_si512(_mm_sub_epi16(ls8, _mm_set1_epi16(32)));
    const uint8_t *qs = a + IQ4_XS_QS;
    for (int j = 0; j < 4; j++) {
        const __m512i v = _mm512_shuffle_epi8(table, unpack_nib_x2(qs + 32 * j, qs + 32 * j + 16));
        u->av[j] = _mm512_abs_epi8(v);
        u->neg[j] = _mm512_movepi8_mask(v);
        u->sc[j] = scale_pair(ls, 2 * j);
    }
    u->d = x86_f16(a);
}

/* R rows (their unpacked blocks at u[r · us], nb each) × T tokens (Q8_K rows xs apart): out
 * y[t · ldy + r]. */
static inline __attribute__((always_inline)) void iq4_tile(int R, int T, int64_t nb, const iq4_unp *u, size_t us,
                                                           const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    __m512 acc[4][4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {   /* a row's vectors in registers for the T tokens */
            const iq4_unp *ur = u + (size_t)r * us + i;
            __m512i av[4], sc[4];
            __mmask64 ng[4];
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                av[j] = _mm512_load_si512(&ur->av[j]);
                sc[j] = _mm512_load_si512(&ur->sc[j]);
                ng[j] = ur->neg[j];
                __asm__("" : "+v"(av[j]), "+v"(sc[j]));
            }
            const __m512 dw = _mm512_set1_ps(ur->d);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const uint8_t *b = x + t * xs + (size_t)i * Q8_K_BYTES;
                __m512i sum = _mm512_setzero_si512();
                _Pragma("GCC unroll 4")
                for (int j = 0; j < 4; j++) {
                    const __m512i yv = _mm512_loadu_si512(b + Q8_K_QS + 64 * j);
                    const __m512i p16 = _mm512_maddubs_epi16(av[j], _mm512_mask_sub_epi8(yv, ng[j], _mm512_setzero_si512(), yv));
                    sum = _mm512_dpwssd_epi32(sum, p16, sc[j]);
                }
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(rd_f32(b))), _mm512_cvtepi32_ps(sum), acc[r][t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) y[t * ldy + r] = hsum512(acc[r][t]);
}

/* R rows against n_tok tokens in tiles of 4 and the 1-3 left. */
static inline __attribute__((always_inline)) void iq4_rows_tok(int R, int64_t nb, const iq4_unp *u, size_t us,
                                                               const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                                                               int64_t ldy) {
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4) iq4_tile(R, 4, nb, u, us, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: iq4_tile(R, 3, nb, u, us, x + t * xs, xs, y + t * ldy, ldy); break;
    case 2: iq4_tile(R, 2, nb, u, us, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: iq4_tile(R, 1, nb, u, us, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

#define IQ4_TC 64   /* tokens per chunk: every chunk unpacks the rows again */
static void gemm_iq4_xs(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                        float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    iq4_unp *u = aligned_alloc(64, (size_t)4 * (size_t)nb * sizeof(iq4_unp));
    if (!u) {
        x86_gemm_by_dot(dot_iq4_xs, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += IQ4_TC) {
        const int64_t nt = n_tok - t0 < IQ4_TC ? n_tok - t0 : IQ4_TC;
        for (int64_t r = 0; r < n_rows; r += 4) {
            const int R = n_rows - r < 4 ? (int)(n_rows - r) : 4;
            for (int k = 0; k < R; k++)
                for (int64_t i = 0; i < nb; i++) iq4_unpack(W + (size_t)(r + k) * ws + (size_t)i * IQ4_XS_BYTES, u + k * nb + i);
            float *yr = y + t0 * ldy + r;
            const uint8_t *xt = X + t0 * xs;
            switch (R) {
            case 4: iq4_rows_tok(4, nb, u, (size_t)nb, xt, xs, nt, yr, ldy); break;
            case 3: iq4_rows_tok(3, nb, u, (size_t)nb, xt, xs, nt, yr, ldy); break;
            case 2: iq4_rows_tok(2, nb, u, (size_t)nb, xt, xs, nt, yr, ldy); break;
            default: iq4_rows_tok(1, nb, u, (size_t)nb, xt, xs, nt, yr, ldy); break;
            }
        }
    }
    free(u);
}

/* IQ4_XS single tokens: four rows side by side (rows r + k·q, q = n_rows / 4: straight
 * streams), with dot_iq4_xs's integers reached by fewer operations. A chunk's 32 nibble bytes
 * are taken as [low nibbles | high nibbles] of the whole 32 (a shift and an insert, where the
 * dot interleaves 16-byte halves), so its blocks of 16 elements come in the order 0, 2, 1, 3,
 * and the token's 64 bytes are put in that order once per call; the levels come from the table
 * plus 128 (unsigned), so one dpbusd from −128 · Σ4 y (the token's, made once per call) gives
 * lane l the exact Σ4 level · y; times the sub-block's scale (mullo) and added over the chunks,
 * those are iq4_pair's lanes with lanes 4-7 and 8-11 swapped, which one permute puts back
 * before the float steps: the same integers in the same lanes, so the dot's bits. One thread,
 * 256 x 1024 in L2 (/tmp/s34/gq2.c outside the repo): 8.6-8.8 TSC cycles a (row, block)
 * against the dot's 11.3; recur-bench -p 0 -n 64, 2 threads, qwen3-0.6b IQ4_XS, 6 alternating
 * pairs against the dot row by row: 103.9-107.8 -> 126.4-127.3 t/s in five (76-82 -> 90-92 %
 * of the read bandwidth; ik_llama.cpp 100.6). */
#define IQ4_GV_MAXB 64   /* blocks (16384 elements): the token's side on the stack, 32 KB */

typedef struct iq4_gv_x {
    __m512i y[4], c[4];   /* chunk j's bytes in the order of the levels, and −128 · Σ4 of them */
    float   d, pad[15];
} iq4_gv_x;

static inline __attribute__((always_inline)) void iq4_gv_rows(int R, int64_t nb, const uint8_t *const *wr,
                                                              const iq4_gv_x *xp, float *const *yr, bool pf) {
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_add_epi8(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl), _mm_set1_epi8((char)0x80)));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    /* scale lanes of chunk j: sub-block 2j in lanes 0-3 and 8-11, 2j+1 in 4-7 and 12-15 */
    const __m512i back = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const iq4_gv_x *xb = xp + i;
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const uint8_t *a = wr[r] + (size_t)i * IQ4_XS_BYTES;
            if (pf)
                for (int o = 0; o < IQ4_XS_BYTES; o += 64) _mm_prefetch((const char *)(a + X86_Q8_PF + o), _MM_HINT_T0);
            const __m512i ls = _mm512_cvtepi8_epi32(_mm_sub_epi8(_mm_cvtsi64_si128((long long)x86_iq4xs_scales(a)),
                                                                 _mm_set1_epi8(32)));
            __m512i sum = _mm512_setzero_si512();
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a + IQ4_XS_QS + 32 * j));
                const __m512i nib = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1), m4);
                const __m512i lv = _mm512_shuffle_epi8(table, nib);
                const __m512i idx = _mm512_setr_epi32(2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                                      2 * j, 2 * j, 2 * j, 2 * j, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1);
                const __m512i s4 = _mm512_dpbusd_epi32(xb->c[j], lv, xb->y[j]);
                sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(s4, _mm512_permutexvar_epi32(idx, ls)));
            }
            sum = _mm512_permutexvar_epi32(back, sum);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(x86_f16(a)), _mm512_set1_ps(xb->d)), _mm512_cvtepi32_ps(sum),
                                     acc[r]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) *yr[r] = hsum512(acc[r]);
}

static inline __attribute__((always_inline)) void gemv_iq4_xs_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                                 int64_t g0, int64_t g1, const void *x, float *y,
                                                                 bool pf) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K, q = n_rows / 4, e = g1 < q ? g1 : q;
    if (nb > IQ4_GV_MAXB) {
        for (int64_t r = g0; r < e; r++)
            for (int k = 0; k < 4; k++) y[r + k * q] = dot_iq4_xs(n, W + (size_t)(r + k * q) * ws, X);
    } else if (g0 < e) {
        iq4_gv_x xp[IQ4_GV_MAXB];
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *b = X + (size_t)i * Q8_K_BYTES;
            for (int j = 0; j < 4; j++) {
                const __m512i yv = _mm512_shuffle_i64x2(_mm512_loadu_si512(b + Q8_K_QS + 64 * j), _mm512_loadu_si512(b + Q8_K_QS + 64 * j),
                                                        _MM_SHUFFLE(3, 1, 2, 0));
                xp[i].y[j] = yv;
                xp[i].c[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                              _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8((char)0x80), yv));
            }
            xp[i].d = rd_f32(b);
        }
        const uint8_t *wr[4];
        float *yq[4];
        for (int64_t r = g0; r < e; r++) {
            for (int k = 0; k < 4; k++) {
                wr[k] = W + (size_t)(r + k * q) * ws;
                yq[k] = y + r + k * q;
            }
            iq4_gv_rows(4, nb, wr, xp, yq, pf);
        }
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = dot_iq4_xs(n, W + (size_t)r * ws, X);
}

X86_GEMV_PF_TWINS(gemv_iq4_xs)

void tensor_fill_avx512(tensor_kernels *k) {
    k->vec_dot[GGUF_T_Q8_0] = dot_q8_0;
    k->vec_dot4[GGUF_T_Q8_0] = dot4_q8_0;
    k->vec_dot[GGUF_T_Q4_0] = dot_q4_0;
    /* vec_dot[Q4_K] stays AVX2's: ggml's lane order (rt_dot_q4_K_lanes) */
    k->dot_q4_K_rp = rt_dot_q4_K_rp_avx512;
    k->vec_dot[GGUF_T_Q5_K] = rt_dot_q5_K_rp_avx512;
    k->vec_dot[GGUF_T_Q6_K] = rt_dot_q6_K_avx512;
    k->gemm[GGUF_T_Q6_K] = rt_gemm_q6_K_avx512;
    /* AVX2's packed gemm (the same bits) is slower than unpacking for this one: recur-bench
     * -p 512 -n 0, 2 threads, 3 alternating runs, medians, unpacking against AVX2's:
     * qwen3-0.6b Q4_K_M 934.9 / 878.7 t/s, qwen35-0.8b Q4_K_M 851.3 / 768.3 */
    k->gemm_q6_K_r16 = NULL;
    k->vec_dot[GGUF_T_IQ4_XS] = dot_iq4_xs;
    k->gemm[GGUF_T_IQ4_XS] = gemm_iq4_xs;
    k->gemv[GGUF_T_IQ4_XS] = (tensor_gemv){ gemv_iq4_xs, 4, gemv_iq4_xs_lean, 0, NULL, 0 };
    rt_fill_float_avx512(k);
    rt_fill_quant_avx512(k);
    rt_fill_exp_avx512(k);
    rt_fill_norm_avx512(k);
    rt_fill_scan_avx512(k);
    rt_fill_gemm_q4k_avx512(k);
    rt_fill_gemm_q40_avx512(k);
    rt_fill_gemv_q40_avx512(k);
    rt_fill_gemv_q4k16_avx512(k);
    rt_fill_gemv_q6k16_avx512(k);
    rt_fill_gemv_q8016_avx512(k);
    rt_fill_gemm_f16_avx512(k);
    rt_fill_gemv_avx512(k);
    rt_fill_gemm_avx512(k);   /* after the gemv: it gives gemv[Q8_0] its several-token kernel */
}
