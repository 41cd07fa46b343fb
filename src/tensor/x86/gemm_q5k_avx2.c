/* gemm_q5k_avx2.c — AVX2 tiles of Q5_K weight rows × Q8_K activation rows (tensor.h, gemm),
 * for CPUs without AVX-512.
 *
 * Every output element performs exactly the AVX2 table's dot_q5_K operations (dot_avx2.c
 * k4_block): per block, 8 int32 lanes of the scale-weighted chunk sums (lane l adds the same
 * exact integers, in any order), one FMA of them times d·yd into an 8-lane accumulator and
 * one of the min lanes (bsums times the mins) times dmin·yd into another; x86_hsum_ps of each
 * at the end, their difference the result. Only the layout differs: a row's blocks are
 * unpacked once per call into a stack buffer (the 5-bit values of its 8 sub-blocks, its
 * scales already broadcast as int16 words, its mins widened), and each token then takes
 * maddubs straight from the buffer with its activations from memory, 4 tokens a tile.
 * Rows longer than QMAXB blocks run in pieces (gemm_q5_K); calls of fewer than QT tokens take
 * the dot. Any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define QT 4       /* tokens per register tile: 8 accumulators */
#define QMAXB 48   /* blocks per row buffer (12288 elements) */

/* One Q5_K block of one row, unpacked (576 bytes). */
typedef struct q5k_ublk {
    __m256i q[8];    /* sub-block k: its 32 values (0..31) */
    __m256i sc[8];   /* sub-block k's scale in every int16 word */
    __m256i m16;     /* the mins as k4_min_lanes pairs them with the bsums */
    float   d, dmin, pad[6];
} q5k_ublk;

static void unpack_block(q5k_ublk *u, const uint8_t *a) {
    uint64_t sc, m;
    rt_k4_scales_u64(a + Q5_K_SCALES, &sc, &m);
    const __m256i s = x86_u8x8_to_i16x2(sc);
    for (int k = 0; k < 8; k++) u->sc[k] = x86_bcast_i16(s, k);
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i hb = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QH));
    for (int j = 0; j < 4; j++) {   /* k4_chunk's values: sub-blocks 2j (low nibbles), 2j+1 (high) */
        const __m256i q = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QS + 32 * j));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * j + 1), one), 4);
        u->q[2 * j] = _mm256_or_si256(_mm256_and_si256(q, m4), h0);
        u->q[2 * j + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
    }
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m));
    u->m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
    u->d = x86_f16(a);
    u->dmin = x86_f16(a + Q5_K_DMIN);
}

/* One row (unpacked in u) × T tokens over nb blocks; y[t * ldy], or the chains parked in
 * park[t] (acc, accm; phase: simd_x86.h X86_PARK_IN / X86_PARK_OUT). */
static inline __attribute__((always_inline)) void tile(int T, int64_t nb, const q5k_ublk *u, const uint8_t *x,
                                                        size_t xs, float *y, int64_t ldy, float (*park)[2][8],
                                                        int phase) {
    __m256 acc[QT], accm[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        acc[t] = phase & X86_PARK_IN ? _mm256_load_ps(park[t][0]) : _mm256_setzero_ps();
        accm[t] = phase & X86_PARK_IN ? _mm256_load_ps(park[t][1]) : _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const q5k_ublk *p = u + i;
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const uint8_t *b = x + t * xs + (size_t)i * Q8_K_BYTES;
            __m256i sum = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                const __m256i pr = _mm256_maddubs_epi16(p->q[k], _mm256_loadu_si256((const __m256i *)(b + Q8_K_QS + 32 * k)));
                sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pr, p->sc[k]));
            }
            const float yd = rd_f32(b);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(p->d * yd), _mm256_cvtepi32_ps(sum), acc[t]);
            const __m256i mins = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS)), p->m16);
            accm[t] = _mm256_fmadd_ps(_mm256_set1_ps(p->dmin * yd), _mm256_cvtepi32_ps(mins), accm[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        if (phase & X86_PARK_OUT) {
            _mm256_store_ps(park[t][0], acc[t]);
            _mm256_store_ps(park[t][1], accm[t]);
        } else {
            y[t * ldy] = x86_hsum_ps(acc[t]) - x86_hsum_ps(accm[t]);
        }
    }
}

/* Rows longer than QMAXB blocks go in pieces of QMAXB blocks, X86_PARK_TOKENS tokens at a
 * time, the tiles' chains parked between the pieces (simd_x86.h). Before, such rows took the
 * dot. 256 rows, 256 tokens, 2 threads, RECUR_ISA=avx2 (/tmp/s16/mmn.c outside the repo, best
 * of 5): 14336 elements 17.4 -> 13.8 ms, 18944 22.6 -> 16.9 (12288, one piece: 11.2). */
static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    if (n_tok < QT) {   /* too few tokens to pay for the unpacking: the dot */
        x86_gemm_by_dot(rt_dot_q5_K_avx2, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    _Alignas(32) q5k_ublk u[QMAXB];
    _Alignas(32) float park[X86_PARK_TOKENS][2][8];
    const int64_t tb = nb > QMAXB ? X86_PARK_TOKENS : n_tok;   /* one piece: every token in one pass */
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
            const int64_t nt = n_tok - t0 < tb ? n_tok - t0 : tb;
            for (int64_t b0 = 0; b0 < nb; b0 += QMAXB) {
                const int64_t len = nb - b0 < QMAXB ? nb - b0 : QMAXB;
                const int phase = (b0 > 0 ? X86_PARK_IN : 0) | (b0 + len < nb ? X86_PARK_OUT : 0);
                for (int64_t i = 0; i < len; i++) unpack_block(&u[i], W + (size_t)r * ws + (size_t)(b0 + i) * Q5_K_BYTES);
                const uint8_t *xp = X + t0 * xs + (size_t)b0 * Q8_K_BYTES;
                float *yr = y + t0 * ldy + r;
#define TILE(T, t) tile(T, len, u, xp + (t) * xs, xs, yr + (t) * ldy, ldy, park + (t), phase)
                X86_TOKEN_TILES(nt, TILE);
#undef TILE
            }
        }
}

void rt_fill_gemm_q5k_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_Q5_K] = gemm_q5_K;
}
