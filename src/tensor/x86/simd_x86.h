/* simd_x86.h — small AVX2 helpers shared by the x86 kernel files. Include only from files
 * compiled with the AVX2 flags (*_avx2.c, *_avx512.c); each helper states its contract. */
#ifndef RECUR_TENSOR_SIMD_X86_H
#define RECUR_TENSOR_SIMD_X86_H

#include <immintrin.h>
#include <stdlib.h>

#include "tensor/tensor_impl.h"

/* Exact fp16 -> f32 of an unaligned field (F16C: identical to rt_f16_to_f32). */
static inline float x86_f16(const uint8_t *p) { return _cvtsh_ss(rd_u16(p)); }

/* Every fp16 value as a float (x86_f16's bits), filled by tensor_fill_avx2 before any
 * kernel runs: a block scale becomes a broadcast load, where F16C takes three operations of
 * the vector units (a scalar load moved in, converted, broadcast), which the Q8_0 kernels,
 * one scale per 32 weights, are bound by. */
extern float x86_f16_tab[1 << 16];
static inline __m256 x86_f16_bcast(const uint8_t *p) { return _mm256_broadcast_ss(&x86_f16_tab[rd_u16(p)]); }

/* A Q8_0 activation row's nb blocks in the even/odd int16 form of the AVX2 Q8_0 kernels
 * (dot_avx2.c gemv_q8_0, gemm_avx2.c gemm_q8_0_streams): block i's even bytes at xeo[2i], its
 * odd bytes at xeo[2i + 1], both sign-extended to int16, and its scale / 256 (exact) at
 * dx[i · dx_stride]. */
static inline void x86_q8_eo_x(int64_t nb, const uint8_t *X, __m256i *xeo, float *dx, size_t dx_stride) {
    for (int64_t i = 0; i < nb; i++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(X + i * Q8_0_BYTES + Q8_0_QS));
        xeo[2 * i] = _mm256_srai_epi16(_mm256_slli_epi16(v, 8), 8);
        xeo[2 * i + 1] = _mm256_srai_epi16(v, 8);
        dx[(size_t)i * dx_stride] = x86_f16_tab[rd_u16(X + i * Q8_0_BYTES)] * (1.0f / 256);
    }
}

/* Sum of the 8 lanes in a fixed order: (lo128 + hi128), then pairs. */
static inline float x86_hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* x86_hsum_ps of v[0..7] at once, lane k the sum of v[k], with the same additions (lanes
 * i + (i + 4) first, then (0 + 2) + (1 + 3)): 8 lane swaps, 6 shuffles and 7 adds where eight
 * x86_hsum_ps take 24 and 24. */
static inline __m256 x86_hsum8_ps(const __m256 v[8]) {
    /* v[k] and v[k + 4] share the first step's vectors (k in the low half, k + 4 in the high) */
    const __m256 u0 = _mm256_add_ps(_mm256_permute2f128_ps(v[0], v[4], 0x20), _mm256_permute2f128_ps(v[0], v[4], 0x31));
    const __m256 u1 = _mm256_add_ps(_mm256_permute2f128_ps(v[1], v[5], 0x20), _mm256_permute2f128_ps(v[1], v[5], 0x31));
    const __m256 u2 = _mm256_add_ps(_mm256_permute2f128_ps(v[2], v[6], 0x20), _mm256_permute2f128_ps(v[2], v[6], 0x31));
    const __m256 u3 = _mm256_add_ps(_mm256_permute2f128_ps(v[3], v[7], 0x20), _mm256_permute2f128_ps(v[3], v[7], 0x31));
    const __m256 s0 = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, 0x44), _mm256_shuffle_ps(u0, u1, 0xEE));
    const __m256 s1 = _mm256_add_ps(_mm256_shuffle_ps(u2, u3, 0x44), _mm256_shuffle_ps(u2, u3, 0xEE));
    return _mm256_add_ps(_mm256_shuffle_ps(s0, s1, 0x88), _mm256_shuffle_ps(s0, s1, 0xDD));
}

/* The four int32 sums of c0..c3 (8 lanes each), exact, in one hadd tree (Q4_K chunk sums). */
static inline __m128i x86_hsum4_epi32(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(c0, c1), _mm256_hadd_epi32(c2, c3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

static inline int x86_hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

static inline float x86_hmax_ps(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline __m256 x86_abs_ps(__m256 v) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

/* A 64-byte load kept in a register. GCC folds a load into every instruction that reads it
 * (an and, a shift), so a vector used twice is loaded twice: a packed gemv then runs into the
 * load ports before the ALUs (in L1, one thread: the Q6_K one 73 -> 91 GB/s with this). The
 * empty asm makes the loaded value one register that the uses share. */
#ifdef __AVX512F__
static inline __m512i x86_load512_once(const void *p) {
    __m512i v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}

/* The 4 bytes at p in every 32-bit lane (a packed kernel's activations for one lane a row). */
static inline __m512i x86_bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* rt_unpack_k4_scales on the 16 rows of a packed K-quant run whose 12 scale bytes sit at
 * sc (byte k of row r at sc + 16k + r: Q4_K's and Q5_K's packed layouts, tensor.h): 128-bit
 * lane l of s[0] / m[0] = sc[l] / m[l] of rows 0..15, of s[1] / m[1] = sc[4+l] / m[4+l]. */
static inline void x86_r16_k4_scales(const uint8_t *sc, __m512i s[2], __m512i m[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), m63 = _mm512_set1_epi8(63), m30 = _mm512_set1_epi8(0x30);
    const __m512i A = _mm512_loadu_si512(sc), B = _mm512_loadu_si512(sc + 64), C = _mm512_loadu_si512(sc + 128);
    s[0] = _mm512_and_si512(A, m63);
    m[0] = _mm512_and_si512(B, m63);
    s[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(C, m4), _mm512_srli_epi16(A, 2), m30, 0xF8);
    m[1] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(C, 4), m4), _mm512_srli_epi16(B, 2), m30,
                                     0xF8);
}

/* The 16 bytes of 128-bit lane l of v as 16 uint32 lanes (byte i -> lane i): a packed K-quant
 * group's scale (or min) of one sub-block for its 16 rows. */
static inline __m512i x86_u8_lane_epi32(__m512i v, int l) {
    switch (l) {
    case 0: return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(v));
    case 1: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 1));
    case 2: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 2));
    default: return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(v, 3));
    }
}

/* The 32-row tiles of the K-quant panel gemms (gemm_q4k_avx512.c, gemm_q6k_avx512.c): two
 * 16-row panels of one sub-block against T tokens. For k < K, s0[t] and s1[t] add
 * q0[k] · and q1[k] · the 4 activation bytes at xb[t] + xoff + 4k (vpdpbusd: exact), each
 * broadcast once for both panels. */
static inline __attribute__((always_inline)) void x86_dpbusd_2panels(int T, int K, const uint8_t (*q0)[64],
                                                                      const uint8_t (*q1)[64],
                                                                      const uint8_t *const *xb, size_t xoff,
                                                                      __m512i *s0, __m512i *s1) {
    _Pragma("GCC unroll 8")
    for (int k = 0; k < K; k++) {
        const __m512i w0 = _mm512_load_si512(q0[k]), w1 = _mm512_load_si512(q1[k]);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            int32_t v;
            memcpy(&v, xb[t] + xoff + 4 * k, 4);
            const __m512i a = _mm512_set1_epi32(v);
            s0[t] = _mm512_dpbusd_epi32(s0[t], w0, a);
            s1[t] = _mm512_dpbusd_epi32(s1[t], w1, a);
        }
    }
}

/* Then each panel's sub-block sums times its rows' scales (vpmulld: exact) into the block
 * sums c0, c1: set by the first sub-block, added to by the others. */
static inline __attribute__((always_inline)) void x86_scale_2panels(int T, bool first, const __m512i *s0,
                                                                     const __m512i *s1, __m512i sc0, __m512i sc1,
                                                                     __m512i *c0, __m512i *c1) {
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        const __m512i v0 = _mm512_mullo_epi32(s0[t], sc0), v1 = _mm512_mullo_epi32(s1[t], sc1);
        c0[t] = first ? v0 : _mm512_add_epi32(c0[t], v0);
        c1[t] = first ? v1 : _mm512_add_epi32(c1[t], v1);
    }
}
#endif

/* A packed gemm's way for rows it cannot take as panels (tensor.h gemm_q8_0_r16,
 * gemm_q4_K_rp_r16): each group of 16 rows unpacked to the file's layout for gemm, or, with
 * no memory for that, the packed group's scalar dot; the same bits either way. */
static inline void x86_gemm_r16_unpacked(void (*unpack)(const void *, int64_t, void *, size_t), tensor_gemm_fn gemm,
                                         rt_dot_r16_fn dot, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows,
                                         const uint8_t *X, size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    uint8_t *rows = malloc((size_t)TENSOR_R16_ROWS * ws);
    for (int64_t r = 0; r < n_rows; r += TENSOR_R16_ROWS) {
        if (rows) {
            unpack(W + (size_t)r * ws, n, rows, ws);
            gemm(n, rows, ws, TENSOR_R16_ROWS, X, xs, n_tok, y + r, ldy);
            continue;
        }
        for (int64_t t = 0; t < n_tok; t++)
            for (int i = 0; i < TENSOR_R16_ROWS; i++) y[t * ldy + r + i] = dot(n, W + (size_t)r * ws, i, X + t * xs);
    }
    free(rows);
}

/* Bytes ahead that a Q8_0 row stream of the file's layout is fetched (gemv_avx512.c's Q8_PF
 * says why). */
#define X86_Q8_PF 2048
/* gemv[Q8_0].tokens (gemm_q8_0_streams) takes calls below this many tokens; past it the
 * gemm runs as fast or faster. Measured outside the repo (/tmp/s8/tk5.c, /tmp/s9/tk6.c: 40
 * matrices of 1024 x 3072 or 3072 x 1024, or one 248320 x 1024 head, from memory through
 * tensor_matmul, 2 threads, median of 9 passes), against gemm[Q8_0]:
 *  - AVX-512: 0.29-0.47x the time at 2-4 tokens, 0.62-0.81x at 6-12, 0.94-1.0x at 16,
 *    1.2x at 32 (its panel gemm transposes 16 rows into lanes, cheaper per token);
 *  - AVX2: 0.28-0.51x at 2-4 tokens, 0.82-1.0x at 6-64, 0.92-1.06x at 96-256, 1.06x at
 *    512 (the same tiles as its gemm, whose token chunks suit long prompts), until the gemm
 *    took BLIS's loop order (6165767); since then (/tmp/s16/gv.c, tensor_matmul, 2 threads,
 *    best of 3 alternating, GFLOP/s streams / gemm): 151936 x 1024 from
 *    memory 122 / 96 at 8 tokens, 126 / 110 at 12, 122 / 132 at 16, 128 / 141 at 24;
 *    1024 x 1024, 6144 x 1024 and 1024 x 3072 (in L3) 126-131 / 98-104 at 4 tokens,
 *    127-131 / 126-132 at 10, 110-131 / 142-151 at 16, 127-131 / 151-158 at 32, 127-130 /
 *    156-163 at 63; since its even/odd form from 8 tokens on (gemm_avx2.c), 6144 x 1024 in
 *    L3 (best of 3 alternating, streams / gemm at 16 tokens and on): 157-162 at 12-15 tokens
 *    (the sign trick's 128-132), 129-157 / 119-138 at 16, 125-154 / 118-141 at 20,
 *    154-156 / 121-147 at 24, 147-157 / 148-153 at 32; 151936 x 1024 from memory (4
 *    alternating) 106-134 / 107-131 at 20, 74-126 / 105-133 at 24, 113-149 / 111-123 at 32:
 *    no worse, so the streams take up to 32. */
#define X86_Q8_STREAMS_MAX 16
#define X86_Q8_STREAMS_MAX_AVX2 33

/* Rows too long for a gemm's panel buffer run their blocks in pieces, one panel's worth at a
 * time, X86_PARK_TOKENS tokens at a time: each tile parks its accumulator chains in memory
 * between pieces. X86_PARK_IN: a tile starts from its parked chains (else from zero);
 * X86_PARK_OUT: it parks them again (else it stores its results). The chains go on unrounded
 * from block to block, so the bits are those of one pass over the whole row. */
enum { X86_PARK_IN = 1, X86_PARK_OUT = 2 };
#define X86_PARK_TOKENS 64

/* TILE(T, t) for the tokens [0, n_tok) of a panel gemm: tiles of 4 from t = 0, then one of
 * the 3, 2 or 1 left; T is a literal in every call (the tiles are inlined once per T). */
#define X86_TOKEN_TILES(n_tok, TILE)                     \
    do {                                                 \
        int64_t t_ = 0;                                  \
        for (; t_ + 4 <= (n_tok); t_ += 4) TILE(4, t_);  \
        switch ((n_tok) - t_) {                          \
        case 3: TILE(3, t_); break;                      \
        case 2: TILE(2, t_); break;                      \
        case 1: TILE(1, t_); break;                      \
        default: break;                                  \
        }                                                \
    } while (0)

/* Signed x signed bytes -> 8 int32 lanes, each the sum of 4 adjacent products. Exact when
 * no byte of y is -128 (the sign trick: |x| * (y with x's sign); maddubs cannot saturate
 * because |x|,|y| <= 128, 127). */
static inline __m256i x86_dot_i8(__m256i x, __m256i y) {
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

/* 16 packed nibble bytes -> 32 bytes: the 16 low nibbles, then the 16 high nibbles (the
 * element order of Q4_0 and IQ4_XS sub-blocks). */
static inline __m256i x86_unpack_nib16(const uint8_t *p) {
    const __m128i q = _mm_loadu_si128((const __m128i *)p);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0F));
}

/* Bit k (0..7; a constant once the callers' loops are unrolled) of each byte of h at bit 4 of
 * that byte, the other bits zero: one 16-bit shift (what crosses from the neighbouring byte is
 * masked off) and one mask. A Q5_K value's fifth bit, joined to its nibble by an OR. */
static inline __attribute__((always_inline)) __m256i x86_bit_to_4(__m256i h, int k) {
    const __m256i v = k < 4 ? _mm256_slli_epi16(h, 4 - k) : k > 4 ? _mm256_srli_epi16(h, k - 4) : h;
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

/* Q5_K packed 16 rows to a group in the five-byte layout (tensor.h, after TENSOR_Q5R16_BLOCK):
 * the low (sub-block 2j) and high (2j+1) five-bit values of rows 8g..8g+7 of unit u of chunk j
 * in the block at h. Units 4q, 4q+1 take whole bytes (an and a vector), units 4q+2 and 4q+3
 * assemble v5-v7 from the bytes' top bits (word shifts: what a shift brings from the next
 * byte the mask drops). u must be a constant where this is inlined. */
static inline __attribute__((always_inline)) void x86_q5f_values(const uint8_t *h, int j, int u, int g, __m256i *lo,
                                                               __m256i *hi) {
    const uint8_t *p = h + Q5R16F_Q + 640 * j + 160 * (2 * (u / 4) + g);
#define X86_Q5F_P(k) _mm256_loadu_si256((const __m256i *)(p + 32 * (k)))
#define X86_Q5F_BITS(k, sh, m) _mm256_and_si256(_mm256_srli_epi16(X86_Q5F_P(k), sh), _mm256_set1_epi8(m))
    const __m256i m5 = _mm256_set1_epi8(0x1F);
    switch (u % 4) {
    case 0:
        *lo = _mm256_and_si256(X86_Q5F_P(0), m5);
        *hi = _mm256_and_si256(X86_Q5F_P(1), m5);
        break;
    case 1:
        *lo = _mm256_and_si256(X86_Q5F_P(2), m5);
        *hi = _mm256_and_si256(X86_Q5F_P(3), m5);
        break;
    case 2:
        *lo = _mm256_and_si256(X86_Q5F_P(4), m5);
        *hi = _mm256_or_si256(X86_Q5F_BITS(0, 5, 0x07), X86_Q5F_BITS(1, 2, 0x18));
        break;
    default:
        *lo = _mm256_or_si256(_mm256_or_si256(X86_Q5F_BITS(1, 7, 0x01), X86_Q5F_BITS(2, 4, 0x0E)),
                              X86_Q5F_BITS(3, 1, 0x10));
        *hi = _mm256_or_si256(X86_Q5F_BITS(3, 6, 0x03), X86_Q5F_BITS(4, 3, 0x1C));
        break;
    }
#undef X86_Q5F_BITS
#undef X86_Q5F_P
}

/* rt_q4_K_rp_min's pair sums of the Q8_K block at b for its four 64-element chunks: dword j
 * of pp holds bs[4j] + bs[4j+1] and bs[4j+2] + bs[4j+3] as its low and high words (|.| <=
 * 4096: words). One madd by ones, a pack and a permute in place of sixteen scalar loads and
 * adds per token and block (per chunk and half of the rows, in the several-token tile). On
 * Zen 4, /tmp/s29/q4t.c outside the repo (gemv_q4k16_avx2.c's several-token kernel, one
 * thread, 512 x 1024 against 512 tokens, 8 alternating rounds): 30.0 -> 32.5 MACs a TSC cycle
 * (medians); 16 x 1024 against 4 tokens (L1): 30.8 -> 34.5; recur-bench -t 2 -p 512, 4-6
 * alternating rounds, medians: mamba2-370m Q4_K_M 283 -> 304 t/s, qwen3-0.6b Q4_K_M 221 ->
 * 243, Q5_K_M (gemm_q4k_avx2.c's tile from 24 tokens) 200 -> 210. */
static inline void x86_q8k_pair_sums(const uint8_t *b, int32_t pp[4]) {
    const __m256i s = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS)), _mm256_set1_epi16(1));
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(s, s), 0x08);
    _mm_storeu_si128((__m128i *)pp, _mm256_castsi256_si128(w));
}

/* int16 lane k of each 128-bit half of s (both halves equal) broadcast to all 16 lanes. */
static inline __m256i x86_bcast_i16(__m256i s, int k) {
    return _mm256_shuffle_epi8(s, _mm256_set1_epi16((short)(((2 * k + 1) << 8) | (2 * k))));
}

/* The 8 unsigned bytes of v widened to int16, in both 128-bit halves. */
static inline __m256i x86_u8x8_to_i16x2(uint64_t v) {
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)v)));
}

/* IQ4_XS: the 8 six-bit sub-block scales (unbiased: ls + 32) as bytes of a u64 (BMI2 pdep:
 * nibble ib of scales_l goes to the low nibble of byte ib, bit pair ib of scales_h to bits
 * 4-5). */
static inline uint64_t x86_iq4xs_scales(const uint8_t *blk) {
    uint32_t sl;
    memcpy(&sl, blk + IQ4_XS_SL, 4);
    return _pdep_u64(sl, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(rd_u16(blk + IQ4_XS_SH), 0x3030303030303030ull);
}

/* ggml's nearest_int on every lane (round half to even via the 1.5*2^23 trick), |v| < 2^22. */
static inline __m256i x86_nearest_int(__m256 v) {
    const __m256 m = _mm256_add_ps(v, _mm256_set1_ps(12582912.0f));
    const __m256i i = _mm256_and_si256(_mm256_castps_si256(m), _mm256_set1_epi32(0x007fffff));
    return _mm256_sub_epi32(i, _mm256_set1_epi32(0x00400000));
}

/* NaN lanes replaced by the quiet NaN of the same sign with a zero payload, which the
 * hardware f16 conversion turns into 0x7E00 | sign exactly as rt_f32_to_f16 does. */
static inline __m256 x86_canon_nan(__m256 v) {
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    const __m256 q = _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)),
                                  _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)));
    return _mm256_blendv_ps(v, q, nan);
}

/* rt_f32_to_bf16 on 8 lanes, results in the low 16 bits of each 32-bit lane. */
static inline __m256i x86_bf16_round(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i qnan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_blendv_epi8(r, qnan, _mm256_castps_si256(nan));
}

/* A panel of 8 weight rows from row r0 (the AVX2 gemms' one int32 lane per row): row[k] the
 * k-th row's start, rows past nr repeating the last; returns their offsets from row[0] (for
 * gathers: they must fit in int32). */
static inline __m256i x86_panel8_rows(const uint8_t *W, size_t ws, int64_t r0, int nr, const uint8_t *row[8]) {
    int32_t offs[8];
    for (int r = 0; r < 8; r++) {
        row[r] = W + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws;
        offs[r] = (int32_t)(row[r] - row[0]);
    }
    return _mm256_loadu_si256((const __m256i *)offs);
}

/* A gemm's fallback (rows too long for its panel, too few tokens): every element by the dot
 * the gemm reproduces, y[t·ldy + r] = dot(row r, token t). */
static inline void x86_gemm_by_dot(tensor_vec_dot_fn dot, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows,
                                   const uint8_t *X, size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t r = 0; r < n_rows; r++) y[t * ldy + r] = dot(n, W + (size_t)r * ws, X + (size_t)t * xs);
}

/* Single-token matmuls in groups of G <= 8 rows (gemv_avx2.c, gemv_avx512.c). A group: lane k
 * < G of the result is row wr[k]'s dot (nb blocks against x). */
#define X86_KQ_MAX 8
typedef __m256 (*x86_kq_group_fn)(int64_t nb, const uint8_t *const *wr, const uint8_t *x);

/* Rows r + k·q (k < G, q = n_rows / G) form group r (tensor.h gemv: groups [g0, g1) run):
 * G streams that each run straight through a G-th of the memory, which the hardware
 * prefetchers follow at full speed. With P > 1 (P divides G), G / P streams of P neighbouring
 * rows each: lane k of group r is row P·r + k % P + (k / P)·P·q, for a group kernel that
 * prefetches each stream's run of memory in order (gemv_avx512.c's Q4_K; P = 1: the plain
 * form). Neighbouring rows without such a prefetch are streams that jump at every row end, which
 * the prefetchers follow badly (AVX-512 Q4_K, one thread on 1024x3072 matrices out of cache: 7
 * GB/s with a prefetch per row against 17 for straight streams). The n_rows % G rows left form
 * one last group, its missing rows given as the last real row (computed, not stored). Inlined
 * with constant G and g, the group is inlined too.
 *
 * G is a memory choice as much as an arithmetic one: while a load waits for memory the core
 * runs ahead only as far as its reorder buffer reaches (320 µops on Zen 4), and a group's
 * loop body of several hundred µops leaves the next block's loads behind the window; a short
 * body keeps several blocks' loads in flight (gemv_avx512.c's Q6_K). */
static inline __attribute__((always_inline)) void x86_kq_rows(int G, int P, x86_kq_group_fn g, int64_t n,
                                                               const uint8_t *W, size_t ws, int64_t n_rows, int64_t g0,
                                                               int64_t g1, const uint8_t *x, float *y) {
    const int64_t nb = n / QK_K, q = n_rows / G, m = n_rows - G * q, e = g1 < q ? g1 : q;
    const uint8_t *wr[X86_KQ_MAX];
    float v[X86_KQ_MAX];
    for (int64_t r = g0; r < e; r++) {
        for (int k = 0; k < G; k++) wr[k] = W + (size_t)(P * r + k % P + k / P * P * q) * ws;
        _mm256_storeu_ps(v, g(nb, wr, x));
        for (int k = 0; k < G; k++) y[P * r + k % P + k / P * P * q] = v[k];
    }
    if (m == 0 || g1 <= q) return;
    for (int k = 0; k < G; k++) wr[k] = W + (size_t)(G * q + (k < m ? k : m - 1)) * ws;
    _mm256_storeu_ps(v, g(nb, wr, x));
    for (int k = 0; k < m; k++) y[G * q + k] = v[k];
}

/* A gemv (tensor.h tensor_gemv_fn) `name` and its lean twin name##_lean from name##_pf, the
 * kernel whose last argument says whether it runs its software prefetch. */
#define X86_GEMV_PF_TWINS(name)                                                                                      \
    static void name(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,    \
                     float *y) {                                                                                     \
        name##_pf(n, w, ws, n_rows, g0, g1, x, y, true);                                                             \
    }                                                                                                                \
    static void name##_lean(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,            \
                            const void *x, float *y) {                                                               \
        name##_pf(n, w, ws, n_rows, g0, g1, x, y, false);                                                            \
    }

/* The gemv `name` and its lean twin over the file's layout, four rows side by side: group
 * r < q = n_rows / 4 is rows r + k·q (k = 0..3: four streams, each straight through a quarter
 * of the matrix, which the hardware prefetchers follow), group q the 0-3 rows left, one at a
 * time and without the software prefetch. rows_fn(R, nb, w, x, y, pf) (R a constant) puts the
 * results of rows w[0..R), nb blocks of qk elements each, in *y[0..R). */
#define X86_GEMV_ROWS4_TWINS(name, rows_fn, qk)                                                                      \
    static inline __attribute__((always_inline)) void name##_pf(int64_t n, const void *w, size_t ws, int64_t n_rows, \
                                                                int64_t g0, int64_t g1, const void *x, float *y,     \
                                                                bool pf) {                                           \
        const uint8_t *W = w;                                                                                        \
        const int64_t nb = n / (qk), q = n_rows / 4, e = g1 < q ? g1 : q;                                            \
        const uint8_t *wr[4];                                                                                        \
        float *yr[4];                                                                                                \
        for (int64_t r = g0; r < e; r++) {                                                                           \
            for (int k = 0; k < 4; k++) {                                                                            \
                wr[k] = W + (size_t)(r + k * q) * ws;                                                                \
                yr[k] = y + r + k * q;                                                                               \
            }                                                                                                        \
            rows_fn(4, nb, wr, x, yr, pf);                                                                           \
        }                                                                                                            \
        for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) {                                                 \
            wr[0] = W + (size_t)r * ws;                                                                              \
            yr[0] = y + r;                                                                                           \
            rows_fn(1, nb, wr, x, yr, false);                                                                        \
        }                                                                                                            \
    }                                                                                                                \
    X86_GEMV_PF_TWINS(name)

/* The gemv `name` and its lean twin over a matrix packed 16 rows to a group (tensor.h), from
 * group_fn(nb, group, x, y, pf), the kernel of one packed group (y: its 16 results) of nb
 * blocks of qk elements. */
#define X86_GEMV_R16_TWINS(name, group_fn, qk)                                                                       \
    static inline __attribute__((always_inline)) void name##_pf(int64_t n, const void *w, size_t ws, int64_t n_rows, \
                                                                int64_t g0, int64_t g1, const void *x, float *y,     \
                                                                bool pf) {                                           \
        (void)n_rows;                                                                                                \
        for (int64_t g = g0; g < g1; g++)                                                                            \
            group_fn(n / (qk), (const uint8_t *)w + (size_t)g * TENSOR_R16_ROWS * ws, x, y + TENSOR_R16_ROWS * g,   \
                     pf);                                                                                            \
    }                                                                                                                \
    X86_GEMV_PF_TWINS(name)

/* r16_tile and q5_tile, the Q4_K and Q5_K tiles (tile_fn of X86_GEMM_R16_TOKENS) of a file's
 * k4_fn(q5, T, nb, w, x, xs, y, ldy, pf). */
#define X86_K4_TILES(k4_fn)                                                                                         \
    static inline __attribute__((always_inline)) void r16_tile(int T, int64_t nb, const uint8_t *w, const uint8_t *x, \
                                                               size_t xs, float *y, int64_t ldy, bool pf) {         \
        k4_fn(false, T, nb, w, x, xs, y, ldy, pf);                                                                  \
    }                                                                                                               \
    static inline __attribute__((always_inline)) void q5_tile(int T, int64_t nb, const uint8_t *w, const uint8_t *x,  \
                                                              size_t xs, float *y, int64_t ldy, bool pf) {          \
        k4_fn(true, T, nb, w, x, xs, y, ldy, pf);                                                                   \
    }

/* A tensor_gemv.tokens function, name, over a packed layout of qk-element blocks: each 16-row
 * group against the tokens in tiles of up to four, tile_fn(T, blocks, group, x, x_stride, y,
 * ldy, pf) for T = 1..4 (a constant), the first tile fetching ahead: the group's bytes come
 * from memory once and stay in L1 for the other tiles. */
#define X86_GEMM_R16_TOKENS(name, tile_fn, qk)                                                                      \
    static void name(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,  \
                     float *y, int64_t ldy) {                                                                       \
        const uint8_t *X_ = x;                                                                                      \
        for (int64_t g = 0; g < n_rows / TENSOR_R16_ROWS; g++) {                                                    \
            const uint8_t *wg = (const uint8_t *)w + (size_t)g * TENSOR_R16_ROWS * ws;                              \
            float *yg = y + TENSOR_R16_ROWS * g;                                                                    \
            int64_t t = 0;                                                                                          \
            for (; t + 4 <= n_tok; t += 4) tile_fn(4, n / (qk), wg, X_ + t * xs, xs, yg + t * ldy, ldy, t == 0);    \
            switch (n_tok - t) {                                                                                    \
            case 3: tile_fn(3, n / (qk), wg, X_ + t * xs, xs, yg + t * ldy, ldy, t == 0); break;                   \
            case 2: tile_fn(2, n / (qk), wg, X_ + t * xs, xs, yg + t * ldy, ldy, t == 0); break;                   \
            case 1: tile_fn(1, n / (qk), wg, X_ + t * xs, xs, yg + t * ldy, ldy, t == 0); break;                   \
            default: break;                                                                                         \
            }                                                                                                       \
        }                                                                                                           \
    }

/* Sub-fillers of the ISA tables (one per file). */
void rt_fill_quant_avx2(tensor_kernels *k);
void rt_fill_float_avx2(tensor_kernels *k);
void rt_fill_quant_avx512(tensor_kernels *k);
void rt_fill_float_avx512(tensor_kernels *k);
void rt_fill_exp_avx2(tensor_kernels *k);
void rt_fill_exp_avx512(tensor_kernels *k);
void rt_fill_norm_avx512(tensor_kernels *k);
void rt_fill_bf16_avx2(tensor_kernels *k);
/* gemm[BF16] without vdpbf16ps (bf16_avx2.c): the AVX2 table's, and the AVX-512 table's on a
 * CPU without AVX512_BF16 (the same bits as rt_dot_bf16 either way). */
void rt_gemm_bf16_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                       int64_t n_tok, float *y, int64_t ldy);
/* gemv[BF16] of the same tables (bf16_avx2.c), groups of RT_GEMV_BF16_GROUP rows. */
#define RT_GEMV_BF16_GROUP 4
void rt_gemv_bf16_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                       float *y);
void rt_fill_scan_avx2(tensor_kernels *k);
/* The AVX2 table's Mamba-1 step (scan_avx2.c), for the AVX-512 one's other sizes and tails. */
void rt_ssm1_step_avx2(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C,
                       const float *dt, const float *x, float *y);
void rt_fill_gemm_avx2(tensor_kernels *k);
void rt_fill_gemm_q4k_avx2(tensor_kernels *k);
/* The AVX2 table's dot_q4_K_rp (dot_avx2.c), for the gemm's fallback. */
float rt_dot_q4_K_rp_avx2(int64_t n, const void *w, const void *x);
void rt_fill_gemm_q6k_avx2(tensor_kernels *k);
/* The AVX2 table's Q5_K dot (dot_avx2.c: rt_dot_q5_K_rp's order), for the gemm's fallback. */
float rt_dot_q5_K_rp_avx2(int64_t n, const void *w, const void *x);
void rt_fill_gemm_f16_avx2(tensor_kernels *k);
void rt_fill_gemv_avx2(tensor_kernels *k);
void rt_fill_gemv_q4k16_avx2(tensor_kernels *k);
void rt_fill_gemv_q6k16_avx2(tensor_kernels *k);
/* The AVX2 table's Q4_0 dot (dot_avx2.c), for the gemm's fallback. */
float rt_dot_q4_0_avx2(int64_t n, const void *w, const void *x);
/* The AVX2 table's gemm[Q4_0] for a few tokens (gemm_q40_avx2.c; gemm_avx2.c takes more). */
void rt_gemm_q4_0_few_avx2(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                           int64_t n_tok, float *y, int64_t ldy);
/* The AVX2 table's Q6_K dot (dot_avx2.c), for the gemm's fallback. */
float rt_dot_q6_K_avx2(int64_t n, const void *w, const void *x);
void rt_fill_rope_avx2(tensor_kernels *k);
void rt_fill_scan_avx512(tensor_kernels *k);
void rt_fill_gemm_avx512(tensor_kernels *k);
void rt_fill_gemm_q4k_avx512(tensor_kernels *k);
void rt_fill_gemm_q40_avx512(tensor_kernels *k);
void rt_fill_gemv_q40_avx512(tensor_kernels *k);
void rt_fill_gemv_q4k16_avx512(tensor_kernels *k);
void rt_fill_gemv_q6k16_avx512(tensor_kernels *k);
/* gemv_q8_0_r16 in the table's Q8_0 order (k->q8_block). */
void rt_fill_gemv_q8016_avx512(tensor_kernels *k);
/* gemm[F16] (gemm_f16_avx512.c), and gemm[BF16] for the table whose BF16 dot is vdpbf16ps
 * (bf16_avx512.c registers it). */
void rt_fill_gemm_f16_avx512(tensor_kernels *k);
void rt_gemm_bf16_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy);
void rt_fill_gemv_avx512(tensor_kernels *k);
/* The AVX-512 table's dot_q4_K_rp (dot_avx512.c), for the gemm's long-row fallback. */
float rt_dot_q4_K_rp_avx512(int64_t n, const void *w, const void *x);
/* The AVX-512 table's Q5_K dot (dot_avx512.c: rt_dot_q5_K_rp's order), for the gemm's few-token
 * fallback. */
float rt_dot_q5_K_rp_avx512(int64_t n, const void *w, const void *x);
/* The AVX-512 table's Q6_K dot (dot_avx512.c) and gemm (gemm_q6k_avx512.c). */
float rt_dot_q6_K_avx512(int64_t n, const void *w, const void *x);
void  rt_gemm_q6_K_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy);

#endif
