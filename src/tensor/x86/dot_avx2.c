/* dot_avx2.c — AVX2 dot products of the quantized weight types, their single-token matmuls
 * (several rows side by side: tensor.h gemv), IQ4_XS's prompt gemm, and the AVX2 table.
 *
 * Contract (as dot_ref.c): n a multiple of the block size; w a row of the weight type, x a
 * row of its vec_dot_type; unaligned loads only. Per block the integer part is exact (the
 * same integer sums as the reference); the block scale is applied per 32-bit lane as a
 * float FMA into 8-lane accumulators, reduced at the end in a fixed order (invariant 1).
 *
 * Activation bytes are never -128 (both activation quantizers clamp to ±127), which the
 * sign trick of x86_dot_i8 and the maddubs bounds below rely on. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

/* One block of rt_dot_q8_0's order (tensor_impl.h): its 8 int32 lanes, one FMA into the
 * 8-lane accumulator. */
static inline __m256 q8_0_step(const uint8_t *a, const uint8_t *b, __m256 acc) {
    const __m256i p = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)),
                                 _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)));
    return _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), x86_f16_bcast(b)), _mm256_cvtepi32_ps(p), acc);
}

static float dot_q8_0(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) acc = q8_0_step(a, b, acc);
    return x86_hsum_ps(acc);
}

/* The single-token matmul (tensor.h gemv): rows r, r + q, r + 2q, r + 3q (q = n_rows / 4)
 * side by side, four chains of dot_q8_0's operations that do not wait on each other, read as
 * four straight streams (gemv_avx512.c says why); the 0-3 rows left take the dot. This one
 * (the sign trick) now serves rows too long for gemv_q8_0_pf's even/odd form below. In cache,
 * one thread, 1024x1024: 27.2 -> 29.8 GB/s. (The K-quant dots are bound by their own
 * operations more than by the chain: their gemvs below vectorize the scalar tails too.) */
/* Software prefetch distance of gemv_q8_0's streams (gemv_avx512.c's Q8_PF says why): in-process
 * A/B of the AVX2 table (`ab`, 2 threads, out of cache) against none: 248320 x 1024 1.17x, 40
 * matrices of 6144 x 1024 1.35x, 100 of 2048 x 1024 1.34x; in L2 (one thread) 0.76x.
 * The scales come from x86_f16_tab: one thread, 512 x 1024 in cache, best of 4 alternating
 * runs on the Zen 4 machine (AVX2 only): 28.4 -> 31.3 GB/s (the kernel is bound by the two
 * vector pipes it shares with every multiply, gemm_avx2.c). */
#define Q8_PF 2048

float x86_f16_tab[1 << 16];   /* simd_x86.h */

static inline __attribute__((always_inline)) void gemv_q8_0_sign(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                                 int64_t g0, int64_t g1, const void *x, float *y,
                                                                 bool pf) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0, q = n_rows / 4, e = g1 < q ? g1 : q;
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *wr[4];
        for (int k = 0; k < 4; k++) wr[k] = W + (size_t)(r + k * q) * ws;
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int64_t i = 0; i < nb; i++) {
            if (pf && (i & 1))   /* a line a stream every other block, Q8_PF bytes ahead */
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(wr[k] + i * Q8_0_BYTES + Q8_PF), _MM_HINT_T0);
            const uint8_t *xb = X + i * Q8_0_BYTES;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + Q8_0_QS));
            const __m256 dx = x86_f16_bcast(xb);
            _Pragma("GCC unroll 4")   /* rolled, gcc kept acc[] on the stack: a store and reload per FMA */
            for (int k = 0; k < 4; k++) {
                const uint8_t *a = wr[k] + i * Q8_0_BYTES;
                const __m256i p = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)), xv);
                acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), dx), _mm256_cvtepi32_ps(p), acc[k]);
            }
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) y[r + k * q] = x86_hsum_ps(acc[k]);
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = dot_q8_0(n, W + (size_t)r * ws, x);
}

/* The single-token kernel in the even/odd int16 form: a weight vector's even bytes moved up
 * (w << 8: 256·w_2k per word) and its odd bytes masked in place (w & 0xFF00: 256·w_2k+1),
 * madd-ed with the activation's even and odd bytes widened to int16 (once per call, x86_q8_eo_x),
 * and the two int32 halves added: lane l is 256 times the exact sum of elements 4l..4l+3,
 * exact as a float (|256·Σ| < 2^24), and the scale product comes with the activation's scale
 * divided by 256 (exact), so the FMA rounds exactly as the sign trick's: the same bits. Per
 * (row, block) 2 madds, a multiply and an FMA on the multiply pipes where the sign trick
 * spends 6 (two vpsignb, maddubs, madd, multiply, FMA); the shift, mask, add and convert mostly
 * beside them (gemm_avx2.c lists the pipes). In cache, one thread, 512 × 1024, best of 5
 * (/tmp/eo/eo.c outside the repo): 29.0 -> 34.9 GB/s. Rows longer than Q8_EO_MAX blocks take
 * the sign trick. The weight's scale costs a sixth: with a constant in its place the loop ran
 * 2.0-2.2 TSC cycles a (row, block) against 2.42 (one thread, 512 × 1024 in L2, a copy of the
 * loop outside the repo); as vpbroadcastw + vcvtph2ps 2.8-2.9, as a scalar table load times
 * the activation's scale, then broadcast, 2.5-2.6: the table's broadcast load stays. */
#define Q8_EO_MAX 1024   /* blocks: the widened activation on the stack, 68 KB */

/* Row k's block i into acc (xe, xo, dx: the activation's block; hi: 0xFF00 words). The weight
 * vector is held in a register for its two uses (folded, gcc loads it twice). */
#define Q8_EO_ROW(k, acc)                                                                                    \
    do {                                                                                                     \
        const uint8_t *a_ = wr[k] + i * Q8_0_BYTES;                                                          \
        __m256i w_ = _mm256_loadu_si256((const __m256i *)(a_ + Q8_0_QS));                                    \
        __asm__("" : "+x"(w_));                                                                              \
        const __m256i p_ = _mm256_add_epi32(_mm256_madd_epi16(_mm256_slli_epi16(w_, 8), xe),                 \
                                            _mm256_madd_epi16(_mm256_and_si256(w_, hi), xo));                \
        acc = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a_), dx), _mm256_cvtepi32_ps(p_), acc);            \
    } while (0)

static inline __attribute__((always_inline)) void gemv_q8_0_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                               int64_t g0, int64_t g1, const void *x, float *y,
                                                               bool pf) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 4, e = g1 < q ? g1 : q;
    if (nb > Q8_EO_MAX) {
        gemv_q8_0_sign(n, w, ws, n_rows, g0, g1, x, y, pf);
        return;
    }
    __m256i xeo[2 * Q8_EO_MAX];
    float dxs[Q8_EO_MAX];
    if (g0 < e) x86_q8_eo_x(nb, x, xeo, dxs, 1);
    const __m256i hi = _mm256_set1_epi16((short)0xFF00);
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *wr[4];
        for (int k = 0; k < 4; k++) wr[k] = W + (size_t)(r + k * q) * ws;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;   /* named: an array went to the stack */
        for (int64_t i = 0; i < nb; i++) {
            if (pf && (i & 1))   /* a line a stream every other block, Q8_PF bytes ahead */
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(wr[k] + i * Q8_0_BYTES + Q8_PF), _MM_HINT_T0);
            __m256i xe = xeo[2 * i], xo = xeo[2 * i + 1];
            __asm__("" : "+x"(xe), "+x"(xo));   /* in registers for the four rows */
            const __m256 dx = _mm256_broadcast_ss(&dxs[i]);
            Q8_EO_ROW(0, a0);
            Q8_EO_ROW(1, a1);
            Q8_EO_ROW(2, a2);
            Q8_EO_ROW(3, a3);
        }
        y[r] = x86_hsum_ps(a0);
        y[r + q] = x86_hsum_ps(a1);
        y[r + 2 * q] = x86_hsum_ps(a2);
        y[r + 3 * q] = x86_hsum_ps(a3);
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = dot_q8_0(n, W + (size_t)r * ws, x);
}
#undef Q8_EO_ROW

X86_GEMV_PF_TWINS(gemv_q8_0)

/* dot_q8_0 for four activation rows at once (independent chains, same operations). */
static void dot4_q8_0(int64_t n, const void *w, const void *x, size_t xs, float out[4]) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t i = 0; i < nb; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) {
        const __m256i qa = _mm256_loadu_si256((const __m256i *)(a + Q8_0_QS));
        const __m256 da = x86_f16_bcast(a);
        for (int j = 0; j < 4; j++) {
            const uint8_t *bj = b + j * xs;
            const __m256i p = x86_dot_i8(qa, _mm256_loadu_si256((const __m256i *)(bj + Q8_0_QS)));
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(da, x86_f16_bcast(bj)), _mm256_cvtepi32_ps(p), acc[j]);
        }
    }
    for (int j = 0; j < 4; j++) out[j] = x86_hsum_ps(acc[j]);
}

/* One Q4_0 block times one Q8_0 block: 8 int32 lanes. */
static inline __m256i q4_0_block(const uint8_t *a, const uint8_t *b) {
    const __m256i q = _mm256_sub_epi8(x86_unpack_nib16(a + Q4_0_QS), _mm256_set1_epi8(8));
    return x86_dot_i8(q, _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)));
}

float rt_dot_q4_0_avx2(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const int64_t nb = n / QK4_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2, a += 2 * Q4_0_BYTES, b += 2 * Q8_0_BYTES) {
        const __m256i p0 = q4_0_block(a, b), p1 = q4_0_block(a + Q4_0_BYTES, b + Q8_0_BYTES);
        acc0 = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), x86_f16_bcast(b)), _mm256_cvtepi32_ps(p0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a + Q4_0_BYTES), x86_f16_bcast(b + Q8_0_BYTES)),
                               _mm256_cvtepi32_ps(p1), acc1);
    }
    if (i < nb)
        acc0 = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), x86_f16_bcast(b)), _mm256_cvtepi32_ps(q4_0_block(a, b)),
                               acc0);
    return x86_hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* One block of one row for gemv_q4_0: dot_q4_0's 8 lanes, as madd(maddubs(q, y), 1) − 8·Σ4 y
 * with q the unsigned nibbles (pairs <= 2·15·127: no saturation), the same integers as
 * x86_dot_i8(q − 8, y); c8 = 8·Σ4 y of the activation block, dx its scale. */
static inline __m256 q4_0_gemv_step(const uint8_t *a, __m256i yv, __m256i c8, __m256 dx, __m256 acc) {
    /* the 16 bytes in both halves, the upper half shifted by 4: low nibbles, then high */
    const __m256i q = _mm256_and_si256(_mm256_srlv_epi64(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a + Q4_0_QS))),
                                                         _mm256_setr_epi64x(0, 0, 4, 4)),
                                       _mm256_set1_epi8(0x0F));
    const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, yv), _mm256_set1_epi16(1));
    return _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), dx), _mm256_cvtepi32_ps(_mm256_sub_epi32(p, c8)), acc);
}

/* The single-token matmul in dot_q4_0's order: rows r + k·q (k = 0..3, q = n_rows / 4) side by
 * side, as gemv_q8_0, each with the dot's two accumulators (even blocks, odd blocks; an odd
 * last block into the even one); a block's activation side (its bytes, 8·Σ4 y and its scale)
 * is loaded or computed once for the four rows. The 0-3 rows left take the dot. The two
 * accumulator sets are named (an index of the block's parity put them on the stack) and the
 * nibbles come from one broadcast load, a per-half shift and a mask: one thread, 512 x 1024
 * in L2, min of 10 alternating runs (gq outside the repo), 21.7 -> 17.4 us. The scale product
 * as a vector multiply of two table broadcasts (x86_f16_bcast) instead of a scalar multiply
 * then broadcast (the same product): one thread, 512 x 1024 in L2 (/tmp/s34/gq.c outside the
 * repo), 2.13 -> 1.56 TSC cycles a (row, block) on the Zen 5 class, where tokens had been bound
 * by it (recur-bench -p 0 -n 64, 2 threads, RECUR_ISA=avx2, qwen3-0.6b Q4_0, 3 alternating
 * pairs: 95.6-100.8 -> 110.1-114.1 t/s, 74.5-77.8 -> 83.8-87.5 % of the read bandwidth; the
 * dots and gemm_q40_avx2.c's tiles alike: 2 tokens 53-54 -> 72-73 GOP/s, 4 78-79 -> 94-95).
 * With pf, each stream is fetched Q4_PF bytes ahead, a line every Q4_PF_EVERY blocks
 * (gemv_q8_0's reasons; recur-bench --prefetch-ab 32, RECUR_ISA=avx2: the chooser against
 * prefetch off 0.977 the time a token). */
#define Q4_PF 2048
#define Q4_PF_EVERY 2   /* 36 bytes: every line of the stream asked for, some twice */
static inline __attribute__((always_inline)) void gemv_q4_0_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                               int64_t g0, int64_t g1, const void *x, float *y,
                                                               bool pf) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK4_0, q = n_rows / 4, e = g1 < q ? g1 : q;
    const __m256i eight = _mm256_set1_epi8(8), ones = _mm256_set1_epi16(1);
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *wr[4];
        for (int k = 0; k < 4; k++) wr[k] = W + (size_t)(r + k * q) * ws;
        __m256 a0[4], a1[4];   /* even blocks, odd blocks */
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) a0[k] = a1[k] = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i++) {
            if (pf && i % Q4_PF_EVERY == 0)
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(wr[k] + i * Q4_0_BYTES + Q4_PF), _MM_HINT_T0);
            const uint8_t *b = X + (size_t)i * Q8_0_BYTES;
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS));
            const __m256i c8 = _mm256_madd_epi16(_mm256_maddubs_epi16(eight, yv), ones);
            const __m256 dx = x86_f16_bcast(b);
            if (i & 1) {   /* an odd last block has an even index */
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) a1[k] = q4_0_gemv_step(wr[k] + (size_t)i * Q4_0_BYTES, yv, c8, dx, a1[k]);
            } else {
                _Pragma("GCC unroll 4")
                for (int k = 0; k < 4; k++) a0[k] = q4_0_gemv_step(wr[k] + (size_t)i * Q4_0_BYTES, yv, c8, dx, a0[k]);
            }
        }
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) y[r + k * q] = x86_hsum_ps(_mm256_add_ps(a0[k], a1[k]));
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = rt_dot_q4_0_avx2(n, W + (size_t)r * ws, x);
}

X86_GEMV_PF_TWINS(gemv_q4_0)

/* Chunk j (64 elements) of a Q4_K/Q5_K block: the 32 bytes qs[32j..] give sub-block 2j (low
 * nibbles) and 2j+1 (high nibbles); hb holds the fifth bits (bit 2j / 2j+1 of each byte;
 * zero for Q4_K). Dotted with y[64j..] and weighted by the scales s (int16 x 8, both
 * halves): 8 int32 lanes. Values are <= 31, so maddubs cannot saturate. */
static inline __m256i k4_chunk(const uint8_t *qs, __m256i hb, const int8_t *y, __m256i s, int j) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one), 4);
    const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one), 4);
    const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
    const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
    const __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y + 64 * j)));
    const __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 64 * j + 32)));
    return _mm256_add_epi32(_mm256_madd_epi16(p0, x86_bcast_i16(s, 2 * j)),
                            _mm256_madd_epi16(p1, x86_bcast_i16(s, 2 * j + 1)));
}

/* rt_dot_q4_K_lanes's order (ggml_vec_dot_q4_K_q8_K's AVX2 path): 8 float lanes of
 * scale-weighted integer sums, 4 min chains (one per 64-element chunk), ggml's hsums. The
 * AVX-512 table keeps this one, so every table gives the same bits. */
static float dot_q4_K(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    __m256 acc = _mm256_setzero_ps();
    float accm[4] = { 0 };
    for (int64_t i = 0; i < n / QK_K; i++, a += Q4_K_BYTES, b += Q8_K_BYTES) {
        uint64_t sc, mm;
        rt_k4_scales_u64(a + Q4_K_SCALES, &sc, &mm);
        uint8_t m[8];
        memcpy(m, &mm, 8);
        const __m256i s = x86_u8x8_to_i16x2(sc), hb = _mm256_setzero_si256();
        const uint8_t *qs = a + Q4_K_QS;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const __m256i s01 = _mm256_add_epi32(k4_chunk(qs, hb, y, s, 0), k4_chunk(qs, hb, y, s, 1));
        const __m256i s23 = _mm256_add_epi32(k4_chunk(qs, hb, y, s, 2), k4_chunk(qs, hb, y, s, 3));
        const float yd = rd_f32(b);
        const float d = yd * x86_f16(a), dmin = -yd * x86_f16(a + Q4_K_DMIN);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(s01, s23)), acc);
        for (int j = 0; j < 4; j++) accm[j] = fmaf(dmin, (float)rt_q4_K_rp_min(b, m, j), accm[j]);
    }
    return x86_hsum_ps(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

/* rt_dot_q4_K_rp's order (ggml's repacked gemm; Q5_K: rt_dot_q5_K_rp, q5): the integer chunk
 * sums here, the float chains as in the scalar reference, so the bits are the same. */
static inline float k4_rp(int64_t n, const uint8_t *a, size_t bytes, size_t qs_off, bool q5, const uint8_t *b) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, a += bytes, b += Q8_K_BYTES) {
        uint64_t sc, mm;
        rt_k4_scales_u64(a + Q4_K_SCALES, &sc, &mm);
        uint8_t m[8];
        memcpy(m, &mm, 8);
        const __m256i s = x86_u8x8_to_i16x2(sc);
        const __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)(a + Q5_K_QH)) : _mm256_setzero_si256();
        const uint8_t *qs = a + qs_off;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const float yd = rd_f32(b);
        const float d = x86_f16(a) * yd, dmin = x86_f16(a + Q4_K_DMIN) * yd;
        int32_t cs[4];
        _mm_storeu_si128((__m128i *)cs, x86_hsum4_epi32(k4_chunk(qs, hb, y, s, 0), k4_chunk(qs, hb, y, s, 1),
                                                    k4_chunk(qs, hb, y, s, 2), k4_chunk(qs, hb, y, s, 3)));
        for (int j = 0; j < 4; j++) {
            acc = fmaf((float)cs[j], d, acc);
            accm = fmaf((float)rt_q4_K_rp_min(b, m, j), dmin, accm);
        }
    }
    return acc - accm;
}

float rt_dot_q4_K_rp_avx2(int64_t n, const void *w, const void *x) {
    return k4_rp(n, w, Q4_K_BYTES, Q4_K_QS, false, x);
}

float rt_dot_q5_K_rp_avx2(int64_t n, const void *w, const void *x) {
    return k4_rp(n, w, Q5_K_BYTES, Q5_K_QS, true, x);
}

/* Q6_K, one block: 8 int32 lanes whose sum is the block's exact integer sum. The unsigned
 * 6-bit values q = (q6 + 32) are dotted with y by maddubs (q <= 63, so no saturation),
 * weighted by the per-16 scales, and 32 * sum_k sc[k] * bsums[k] is subtracted: exactly
 * sum sc * (q - 32) * y. The loops are unrolled by pragma: left to GCC, the four parts went
 * through the stack with a shift count in a register (gemv_q6_K, one thread, 512 x 1024 in
 * L2, min of 10 alternating runs, gq outside the repo: 21.0 -> 15.0 us, the shifts below
 * included; the AVX-512 table 13.7). */
static inline __m256i q6_K_lanes(const uint8_t *a, const uint8_t *b) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m128i sel0 = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)(a + Q6_K_SCALES));
    const __m256i corr = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                           _mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS)));
    const int8_t *y = (const int8_t *)(b + Q8_K_QS);
    __m256i sumi = _mm256_setzero_si256();
    __m128i sel = sel0;
    _Pragma("GCC unroll 2")
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(a + Q6_K_QL + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(a + Q6_K_QL + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(a + Q6_K_QH + 32 * h));
        __m256i q[4];
        q[0] = _mm256_and_si256(l0, m4);
        q[1] = _mm256_and_si256(l1, m4);
        q[2] = _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4);
        q[3] = _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4);
        /* bits 2p, 2p+1 of each qh byte to bits 4-5 (16-bit shifts: what crosses into the
         * neighbouring byte is masked off) */
        const __m256i hq[4] = { _mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2), qh, _mm256_srli_epi16(qh, 2) };
        _Pragma("GCC unroll 4")
        for (int p = 0; p < 4; p++) {
            const __m256i v = _mm256_or_si256(q[p], _mm256_and_si256(hq[p], m30));
            const __m256i prod = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(y + 128 * h + 32 * p)));
            const __m256i s16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, sel));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(prod, s16));
            sel = _mm_add_epi8(sel, _mm_set1_epi8(2));
        }
    }
    return _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 5));
}

float rt_dot_q6_K_avx2(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float acc = 0.0f;   /* rt_dot_q6_K's chain: one fma per block of its exact integer sum */
    for (int64_t i = 0; i < n / QK_K; i++, a += Q6_K_BYTES, b += Q8_K_BYTES)
        acc = fmaf((float)x86_hsum_epi32(q6_K_lanes(a, b)), x86_f16(a + Q6_K_D) * rd_f32(b), acc);
    return acc;
}

/* rt_dot_q6_K_avx2 for two rows (x86_kq_rows with G = 2: rows r and r + n/2): their block sums
 * come out of one hadd tree, and their chains are lanes 0 and 1 of one FMA. Two rows rather
 * than four: the same arithmetic a row, but a loop body short enough that the core keeps the
 * next blocks' loads in flight (simd_x86.h x86_kq_rows): in-process A/B out of cache, 2
 * threads, 200 alternating rounds, 248320 x 1024 1.09-1.17x, 60 matrices of 6144 x 1024
 * 1.20-1.25x; in cache 0.99x. */
static __m256 q6k_pair(int64_t nb, const uint8_t *const *wr, const uint8_t *x) {
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        const size_t o = (size_t)i * Q6_K_BYTES;
        const __m256i l0 = q6_K_lanes(wr[0] + o, b), l1 = q6_K_lanes(wr[1] + o, b);
        const __m128i sum = x86_hsum4_epi32(l0, l1, l0, l1);   /* lanes 0, 1 (2, 3 repeat them) */
        const __m128 d = _mm_cvtph_ps(_mm_setr_epi16((short)rd_u16(wr[0] + o + Q6_K_D), (short)rd_u16(wr[1] + o + Q6_K_D),
                                                     0, 0, 0, 0, 0, 0));
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(sum), _mm_mul_ps(d, _mm_set1_ps(rd_f32(b))), acc);
    }
    return _mm256_zextps128_ps256(acc);
}

static void gemv_q6_K(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                      const void *x, float *y) {
    x86_kq_rows(2, 1, q6k_pair, n, w, ws, n_rows, g0, g1, x, y);
}

/* Sub-block ib of an IQ4_XS block: the 16 bytes of nibbles looked up in the level table,
 * dotted with y[32ib..] (sign trick; |level| <= 127) and weighted by ls[ib] - 32. */
static inline __m256i iq4_sub(const uint8_t *qs, const int8_t *y, __m256i table, __m256i ls, int ib) {
    const __m256i v = _mm256_shuffle_epi8(table, x86_unpack_nib16(qs + 16 * ib));
    const __m256i yv = _mm256_loadu_si256((const __m256i *)(y + 32 * ib));
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(yv, v));
    return _mm256_madd_epi16(p16, x86_bcast_i16(ls, ib));
}

static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++, a += IQ4_XS_BYTES, b += Q8_K_BYTES) {
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const uint8_t *qs = a + IQ4_XS_QS;
        const __m256i ls = _mm256_sub_epi16(x86_u8x8_to_i16x2(x86_iq4xs_scales(a)), _mm256_set1_epi16(32));
        const __m256i s0 = _mm256_add_epi32(iq4_sub(qs, y, table, ls, 0), iq4_sub(qs, y, table, ls, 1));
        const __m256i s1 = _mm256_add_epi32(iq4_sub(qs, y, table, ls, 2), iq4_sub(qs, y, table, ls, 3));
        const __m256i s2 = _mm256_add_epi32(iq4_sub(qs, y, table, ls, 4), iq4_sub(qs, y, table, ls, 5));
        const __m256i s3 = _mm256_add_epi32(iq4_sub(qs, y, table, ls, 6), iq4_sub(qs, y, table, ls, 7));
        const __m256i sumi = _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a) * rd_f32(b)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return x86_hsum_ps(acc);
}

/* IQ4_XS prompts: tiles of rows × tokens with exactly dot_iq4_xs's operations per output
 * element (iq4_sub's 8 lanes of each sub-block, summed in int32 in any order: the same exact
 * integers; one FMA a block; x86_hsum_ps at the end), a row's levels, their magnitudes and
 * its scales unpacked once per token chunk (dot_avx512.c's gemm does the same), read from L1
 * for 2 rows × 3 tokens a tile. Before, every IQ4_XS call took the dot row by row: one thread,
 * 1024 x 3072 (/tmp/s34/g40.c outside the repo), 48-512 tokens 152-157 GOP/s; recur-bench -p
 * 512 -n 0, 2 threads, RECUR_ISA=avx2, qwen3-0.6b IQ4_XS, 2 alternating runs: 173 -> 302-311 t/s. */
typedef struct iq4_unp2 {
    __m256i v[8], av[8], sc[8];   /* sub-block ib's levels, |levels|, scale (ls - 32) in every word */
    float   d, pad[7];
} iq4_unp2;

static inline void iq4_unpack2(const uint8_t *a, iq4_unp2 *u) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl));
    const __m256i ls = _mm256_sub_epi16(x86_u8x8_to_i16x2(x86_iq4xs_scales(a)), _mm256_set1_epi16(32));
    for (int ib = 0; ib < 8; ib++) {
        const __m256i v = _mm256_shuffle_epi8(table, x86_unpack_nib16(a + IQ4_XS_QS + 16 * ib));
        u->v[ib] = v;
        u->av[ib] = _mm256_sign_epi8(v, v);
        u->sc[ib] = x86_bcast_i16(ls, ib);
    }
    u->d = x86_f16(a);
}

/* R <= 2 rows (unpacked blocks at u[r·us]) × T <= 3 tokens: y[t·ldy + r]. */
static inline __attribute__((always_inline)) void iq4_tile2(int R, int T, int64_t nb, const iq4_unp2 *u, size_t us,
                                                            const uint8_t *x, size_t xs, float *y, int64_t ldy) {
    __m256 acc[2][3];
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 3")
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        __m256i sum[2][3];
        _Pragma("GCC unroll 2")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 3")
            for (int t = 0; t < T; t++) sum[r][t] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8")
        for (int ib = 0; ib < 8; ib++)
            _Pragma("GCC unroll 3")
            for (int t = 0; t < T; t++) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(x + t * xs + (size_t)i * Q8_K_BYTES + Q8_K_QS + 32 * ib));
                __asm__("" : "+x"(yv));   /* one load for the R rows */
                _Pragma("GCC unroll 2")
                for (int r = 0; r < R; r++) {
                    const iq4_unp2 *ur = u + (size_t)r * us + i;
                    const __m256i p16 = _mm256_maddubs_epi16(ur->av[ib], _mm256_sign_epi8(yv, ur->v[ib]));
                    sum[r][t] = _mm256_add_epi32(sum[r][t], _mm256_madd_epi16(p16, ur->sc[ib]));
                }
            }
        _Pragma("GCC unroll 3")
        for (int t = 0; t < T; t++) {
            const __m256 dx = _mm256_set1_ps(rd_f32(x + t * xs + (size_t)i * Q8_K_BYTES));
            _Pragma("GCC unroll 2")
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&u[(size_t)r * us + i].d), dx),
                                            _mm256_cvtepi32_ps(sum[r][t]), acc[r][t]);
        }
    }
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 3")
        for (int t = 0; t < T; t++) y[t * ldy + r] = x86_hsum_ps(acc[r][t]);
}

static inline __attribute__((always_inline)) void iq4_rows_tok2(int R, int64_t nb, const iq4_unp2 *u, size_t us,
                                                                const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                                                                int64_t ldy) {
    int64_t t = 0;
    for (; t + 3 <= n_tok; t += 3) iq4_tile2(R, 3, nb, u, us, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 2: iq4_tile2(R, 2, nb, u, us, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: iq4_tile2(R, 1, nb, u, us, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

#define IQ4_TC2 48   /* tokens per chunk: every chunk unpacks the rows again */
static void gemm_iq4_xs(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                        float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    iq4_unp2 *u = aligned_alloc(32, (size_t)2 * (size_t)nb * sizeof(iq4_unp2));
    if (!u) {
        x86_gemm_by_dot(dot_iq4_xs, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    for (int64_t t0 = 0; t0 < n_tok; t0 += IQ4_TC2) {
        const int64_t nt = n_tok - t0 < IQ4_TC2 ? n_tok - t0 : IQ4_TC2;
        for (int64_t r = 0; r < n_rows; r += 2) {
            const int R = n_rows - r < 2 ? 1 : 2;
            for (int k = 0; k < R; k++)
                for (int64_t i = 0; i < nb; i++) iq4_unpack2(W + (size_t)(r + k) * ws + (size_t)i * IQ4_XS_BYTES, u + k * nb + i);
            if (R == 2) iq4_rows_tok2(2, nb, u, (size_t)nb, X + t0 * xs, xs, nt, y + t0 * ldy + r, ldy);
            else iq4_rows_tok2(1, nb, u, (size_t)nb, X + t0 * xs, xs, nt, y + t0 * ldy + r, ldy);
        }
    }
    free(u);
}

/* IQ4_XS single tokens: four rows side by side (rows r + k·q, q = n_rows / 4), with
 * dot_iq4_xs's integers reached by fewer operations. Two sub-blocks' 32 nibble bytes are
 * split whole (low nibbles of both, high nibbles of both: an and, a shift and an and, where
 * the dot splits 16 bytes at a time), and the token's bytes are put in that order once a
 * call; the scale vector of the pair takes the first sub-block's scale in the low half and
 * the second's in the high. The products are iq4_sub's (sign trick, maddubs, madd), so each
 * half of a pair's two sums holds one sub-block's lanes 0-3 or 4-7; the low and high halves
 * added at the end give the dot's 8 lanes exactly. One thread, 256 x 1024 in L2
 * (/tmp/s34/gq2.c outside the repo): 13.0 TSC cycles a (row, block) against the dot's 17.2;
 * recur-bench -p 0 -n 64, 2 threads, RECUR_ISA=avx2, qwen3-0.6b IQ4_XS, 4 alternating pairs
 * against the dot row by row: 86.3-113.1 -> 109.5-132.5 t/s (each pair faster). */
#define IQ4_GV2_MAXB 64   /* blocks: the token's side on the stack, 18 KB */

typedef struct iq4_gv2_x {
    __m256i ya[4], yb[4];   /* pair p's bytes against its low and its high nibbles */
    float   d, pad[7];
} iq4_gv2_x;

static inline __attribute__((always_inline)) void iq4_gv2_rows(int64_t nb, const uint8_t *const *wr,
                                                               const iq4_gv2_x *xp, float *y0, float *y1, float *y2,
                                                               float *y3, bool pf) {
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)rt_kvalues_iq4nl));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t i = 0; i < nb; i++) {
        const iq4_gv2_x *xb = xp + i;
        _Pragma("GCC unroll 4")
        for (int r = 0; r < 4; r++) {
            const uint8_t *a = wr[r] + (size_t)i * IQ4_XS_BYTES;
            if (pf)
                for (int o = 0; o < IQ4_XS_BYTES; o += 64) _mm_prefetch((const char *)(a + X86_Q8_PF + o), _MM_HINT_T0);
            const __m256i ls = _mm256_sub_epi16(x86_u8x8_to_i16x2(x86_iq4xs_scales(a)), _mm256_set1_epi16(32));
            __m256i sa = _mm256_setzero_si256(), sb = _mm256_setzero_si256();
            _Pragma("GCC unroll 4")
            for (int p = 0; p < 4; p++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(a + IQ4_XS_QS + 32 * p));
                const __m256i va = _mm256_shuffle_epi8(table, _mm256_and_si256(q, m4));
                const __m256i vb = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
                /* words 2p (low half) and 2p + 1 (high half) of ls in every word of their half */
                const __m256i sc = _mm256_shuffle_epi8(
                    ls, _mm256_setr_epi8(4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p,
                                         4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p, 4 * p + 1, 4 * p + 2, 4 * p + 3,
                                         4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2,
                                         4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3, 4 * p + 2, 4 * p + 3));
                sa = _mm256_add_epi32(sa, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(va, va),
                                                                                 _mm256_sign_epi8(xb->ya[p], va)),
                                                            sc));
                sb = _mm256_add_epi32(sb, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(vb, vb),
                                                                                 _mm256_sign_epi8(xb->yb[p], vb)),
                                                            sc));
            }
            const __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(sa, sb, 0x20), _mm256_permute2x128_si256(sa, sb, 0x31));
            acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(x86_f16_bcast(a), _mm256_broadcast_ss(&xb->d)), _mm256_cvtepi32_ps(sum),
                                     acc[r]);
        }
    }
    *y0 = x86_hsum_ps(acc[0]);
    *y1 = x86_hsum_ps(acc[1]);
    *y2 = x86_hsum_ps(acc[2]);
    *y3 = x86_hsum_ps(acc[3]);
}

static inline __attribute__((always_inline)) void gemv_iq4_xs_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                                 int64_t g0, int64_t g1, const void *x, float *y,
                                                                 bool pf) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K, q = n_rows / 4, e = g1 < q ? g1 : q;
    if (nb > IQ4_GV2_MAXB) {
        for (int64_t r = g0; r < e; r++)
            for (int k = 0; k < 4; k++) y[r + k * q] = dot_iq4_xs(n, W + (size_t)(r + k * q) * ws, X);
    } else if (g0 < e) {
        iq4_gv2_x xp[IQ4_GV2_MAXB];
        for (int64_t i = 0; i < nb; i++) {
            const uint8_t *b = X + (size_t)i * Q8_K_BYTES + Q8_K_QS;
            for (int p = 0; p < 4; p++) {
                xp[i].ya[p] = _mm256_loadu2_m128i((const __m128i *)(b + 64 * p + 32), (const __m128i *)(b + 64 * p));
                xp[i].yb[p] = _mm256_loadu2_m128i((const __m128i *)(b + 64 * p + 48), (const __m128i *)(b + 64 * p + 16));
            }
            xp[i].d = rd_f32(X + (size_t)i * Q8_K_BYTES);
        }
        for (int64_t r = g0; r < e; r++) {
            const uint8_t *wr[4] = { W + (size_t)r * ws, W + (size_t)(r + q) * ws, W + (size_t)(r + 2 * q) * ws,
                                     W + (size_t)(r + 3 * q) * ws };
            iq4_gv2_rows(nb, wr, xp, y + r, y + r + q, y + r + 2 * q, y + r + 3 * q, pf);
        }
    }
    for (int64_t r = g1 > q ? 4 * q : n_rows; r < n_rows; r++) y[r] = dot_iq4_xs(n, W + (size_t)r * ws, X);
}

X86_GEMV_PF_TWINS(gemv_iq4_xs)

void tensor_fill_avx2(tensor_kernels *k) {
    for (uint32_t h = 0; h < 1u << 16; h++) x86_f16_tab[h] = _cvtsh_ss((unsigned short)h);   /* x86_f16's bits */
    k->vec_dot[GGUF_T_Q8_0] = dot_q8_0;
    k->vec_dot4[GGUF_T_Q8_0] = dot4_q8_0;
    k->gemv[GGUF_T_Q8_0] = (tensor_gemv){ gemv_q8_0, 4, gemv_q8_0_lean, 0, NULL, 0 };
    k->gemv[GGUF_T_Q6_K] = (tensor_gemv){ gemv_q6_K, 2, NULL, 0, NULL, 0 };
    k->gemv[GGUF_T_Q4_0] = (tensor_gemv){ gemv_q4_0, 4, gemv_q4_0_lean, 0, NULL, 0 };
    k->vec_dot[GGUF_T_Q4_0] = rt_dot_q4_0_avx2;
    k->vec_dot[GGUF_T_Q4_K] = dot_q4_K;
    k->dot_q4_K_rp = rt_dot_q4_K_rp_avx2;
    k->vec_dot[GGUF_T_Q5_K] = rt_dot_q5_K_rp_avx2;
    k->vec_dot[GGUF_T_Q6_K] = rt_dot_q6_K_avx2;
    k->vec_dot[GGUF_T_IQ4_XS] = dot_iq4_xs;
    k->gemm[GGUF_T_IQ4_XS] = gemm_iq4_xs;
    k->gemv[GGUF_T_IQ4_XS] = (tensor_gemv){ gemv_iq4_xs, 4, gemv_iq4_xs_lean, 0, NULL, 0 };
    rt_fill_float_avx2(k);
    rt_fill_att_vt_avx2(k);
    rt_fill_quant_avx2(k);
    rt_fill_exp_avx2(k);
    rt_fill_bf16_avx2(k);
    rt_fill_scan_avx2(k);
    rt_fill_rope_avx2(k);
    rt_fill_gemm_q4k_avx2(k);
    rt_fill_gemm_q6k_avx2(k);
    rt_fill_gemm_f16_avx2(k);
    rt_fill_gemv_avx2(k);
    rt_fill_gemm_avx2(k);   /* after the gemvs: it gives gemv[Q8_0] its several-token kernel */
    rt_fill_gemv_q4k16_avx2(k);
    rt_fill_gemv_q6k16_avx2(k);
}
