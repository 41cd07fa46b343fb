/* gemv_q4k16_avx512.c — Q4_K or Q5_K rows packed 16 to a group (tensor.h tensor_q4_K_r16_pack,
 * tensor_q5_K_r16_pack) × one Q8_K activation row: the single-token matmul over a packed
 * matrix, one float lane per row.
 *
 * Every y[r] performs dot_q4_K_rp's operations in its order (tensor_impl.h rt_dot_q4_K_rp):
 * per 64-element chunk j, the exact integer sum sc[2j]·s1 + sc[2j+1]·s2 and the exact min sum,
 * then acc = fma(sum, d·yd, acc) and accm = fma(min, dmin·yd, accm); acc − accm. The packing
 * puts 4 bytes of each of the 16 rows side by side, so one dpbusd against the 4 activations of
 * those bytes (broadcast) adds a row's products into its own lane: no sums across lanes, and
 * the scales, d and dmin of the 16 rows are one load each. High nibbles are taken in place
 * (q & 0xF0 = 16·q_hi), so the low ones' scales are taken times 16 and the chunk sum divided by
 * 16 after (exact: |16·sum| < 2^27).
 *
 * Q5_K (rt_dot_q5_K_rp, the AVX-512 table's Q5_K order: the same steps with five-bit values):
 * a nibble's fifth bit comes from the packed 64-bit mask of its vector (one bit a byte: a
 * masked byte add of 16), the high nibbles are shifted down, and the scales are taken as they
 * are. Before, the table's Q5_K order kept 16 + 8 float chains a row (the dot's lanes), which
 * its prompt gemm could only follow with a tile of 16-lane accumulators per element.
 *
 * Memory: a thread's groups are one run of memory, read in order. The hardware prefetchers
 * alone fetched it at ~0.66x of the file-layout kernel (gemv_avx512.c gemv_q4_K_rp; in-process
 * A/B, 2 threads, 20 matrices of 6144 x 1024), so each block prefetches the lines R16_PF_BLOCKS blocks
 * ahead: recur-bench tg64, qwen3-0.6b Q4_K_M, 8 alternating rounds against 4 blocks ahead:
 * 2 blocks 1.01x, 6 blocks 0.99x. While the machine's neighbours keep memory busy it costs more
 * than it brings (tensor/prefetch.c), so the kernel also comes without it (gemv_q4_K_r16_lean).
 * Several streams, as the file layout's kernels read (gemv_avx512.c), do not pay here: two or
 * four groups from far apart taken block by block (a harness outside the repo, 2 threads, a
 * 1 GiB matrix, medians of 14 passes) read at 23-27 GB/s without the prefetch and 40-54 with
 * it, against 43-60 for this one stream in the same minutes. */
#include "tensor/x86/simd_x86.h"

/* Two blocks ahead since the machine class moved to Zen 5 (family 26): tokens of one process
 * alternating between distances in runs of 8 (a patch outside the repo; recur-bench -t 2 -p 0
 * -n 128 -r 5, median time a token), 2 blocks against 4 with the Q6_K head at 2:
 * qwen3-0.6b Q4_K_M 0.982 and 0.966, qwen35-0.8b Q4_K_M 0.978 and 0.989; 1 block against 2:
 * 1.06 and 1.04 (slower), 3 against 2: 1.002-1.007.
 * Later (a program outside the repo: a qwen3-0.6b token's 112 matrices as packed Q4_K, 248 MB,
 * 2 threads, a spin barrier a call, variants alternating pass by pass, medians of 16-20): this
 * kernel read at 51-59 GB/s where a plain two-stream read of the same halves did 53-66 (the
 * calls' barriers cost the plain read 5-10 % against one pass without them); the fetches as T1
 * (2, 4, 8 blocks ahead) 42-46, as NTA 56-60 (4 blocks) but tokens 1.010x the time (Q8_0 too),
 * a thread's share read as two streams interleaved group by group 56-57 against 59.
 * NTA fetches here and in gemv_q6k16_avx512.c, so that the weights would not push
 * qwen35-0.8b's 20 MB of recurrent state (read and written back every token) out of L3:
 * tokens alternating in runs of 8 (RECUR_PREFETCH=on), qwen35-0.8b Q4_K_M 0.977-1.012x the
 * time in five runs, qwen3-0.6b Q4_K_M 0.995 and 1.000: no gain. */
#define R16_PF_BLOCKS 2

/* Rows 0..15 of the packed group at w (nb blocks) against T tokens (token t's Q8_K row at
 * x + t·xs): y[t·ldy + 0..16). Each token's lanes take exactly the one-token operations, so
 * every y is the single-token kernel's; the weight vectors and the scales are loaded and split
 * once for the T tokens. */
static inline __mmask64 q5_mask(const uint8_t *p) {
    uint64_t m;
    memcpy(&m, p, 8);
    return (__mmask64)m;
}

/* Rows 0..15 of the packed group at w (nb blocks; q5: Q5_K's layout) against T tokens (token
 * t's Q8_K row at x + t·xs): y[t·ldy + 0..16). Each token's lanes take exactly the one-token
 * operations, so every y is the single-token kernel's; the weight vectors and the scales are
 * loaded and split once for the T tokens. */
static inline __attribute__((always_inline)) void k4_tile(bool q5, int T, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                          size_t xs, float *y, int64_t ldy, bool pf) {
    const size_t blk = q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK;
    const __m512i m4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
    __m512 acc[4], accm[4];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = accm[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * blk;
        for (int o = 0; pf && o < (int)blk; o += 64) _mm_prefetch((const char *)(h + R16_PF_BLOCKS * blk + o), _MM_HINT_T0);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + R16_D)));
        const __m512 dmw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + R16_DMIN)));
        __m512i sc[2], mc[2];   /* the 16 rows' scales and mins, sub-blocks 0-3 and 4-7 */
        x86_r16_k4_scales(h + R16_SCALES, sc, mc);
        const uint8_t *b[4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) b[t] = x + t * xs + (size_t)i * Q8_K_BYTES;
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            __m512i s1[4], s2[4];   /* Q4_K's s2: 16 x the high sums */
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) s1[t] = s2[t] = _mm512_setzero_si512();
            const uint8_t *q = h + (q5 ? Q5R16_QS : R16_QS) + 8 * 64 * j;
            _Pragma("GCC unroll 8")
            for (int u = 0; u < 8; u++) {
                const __m512i v = x86_load512_once(q + 64 * u);
                __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_andnot_si512(m4, v);
                if (q5) {
                    const uint8_t *mk = h + Q5R16_QH + 16 * (8 * j + u);
                    hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                    lo = _mm512_mask_add_epi8(lo, q5_mask(mk), lo, c16);
                    hi = _mm512_mask_add_epi8(hi, q5_mask(mk + 8), hi, c16);
                }
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    const int8_t *yq = (const int8_t *)(b[t] + Q8_K_QS);
                    s1[t] = _mm512_dpbusd_epi32(s1[t], lo, x86_bcast4(yq + 64 * j + 4 * u));
                    s2[t] = _mm512_dpbusd_epi32(s2[t], hi, x86_bcast4(yq + 64 * j + 32 + 4 * u));
                }
            }
            /* sub-blocks 2j, 2j+1: lanes 2j & 3, 2j+1 & 3 of the j < 2 or j >= 2 vectors */
            const __m512i sv = sc[j / 2], mv = mc[j / 2];
            const __m512i sc1 = _mm512_slli_epi32(x86_u8_lane_epi32(sv, (2 * j) & 3), q5 ? 0 : 4);
            const __m512i sc2 = x86_u8_lane_epi32(sv, (2 * j + 1) & 3);
            const __m512i mn1 = x86_u8_lane_epi32(mv, (2 * j) & 3), mn2 = x86_u8_lane_epi32(mv, (2 * j + 1) & 3);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const __m512 yd = _mm512_set1_ps(rd_f32(b[t]));
                const __m512i sum = _mm512_srai_epi32(
                    _mm512_add_epi32(_mm512_mullo_epi32(s1[t], sc1), _mm512_mullo_epi32(s2[t], sc2)), q5 ? 0 : 4);
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw, yd), acc[t]);
                /* rt_q4_K_rp_min: m[2j]·(bs[4j] + bs[4j+1]) + m[2j+1]·(bs[4j+2] + bs[4j+3]) */
                const uint8_t *bs = b[t] + Q8_K_BSUMS;
                const int p0 = rd_i16(bs + 8 * j) + rd_i16(bs + 8 * j + 2);
                const int p1 = rd_i16(bs + 8 * j + 4) + rd_i16(bs + 8 * j + 6);
                const __m512i mn = _mm512_add_epi32(_mm512_mullo_epi32(mn1, _mm512_set1_epi32(p0)),
                                                    _mm512_mullo_epi32(mn2, _mm512_set1_epi32(p1)));
                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mn), _mm512_mul_ps(dmw, yd), accm[t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy, _mm512_sub_ps(acc[t], accm[t]));
}

X86_K4_TILES(k4_tile)

/* One token: the group kernel of X86_GEMV_R16_TWINS. */
static inline __attribute__((always_inline)) void r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                            bool pf) {
    r16_tile(1, nb, w, x, 0, y, 0, pf);
}

static inline __attribute__((always_inline)) void q5_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                           bool pf) {
    q5_tile(1, nb, w, x, 0, y, 0, pf);
}

X86_GEMV_R16_TWINS(gemv_q4_K_r16, r16_group, QK_K)
X86_GEMV_R16_TWINS(gemv_q5_K_r16, q5_group, QK_K)

/* Several tokens (tensor.h tensor_gemv.tokens). */
X86_GEMM_R16_TOKENS(gemm_q4_K_r16_tokens, r16_tile, QK_K)
X86_GEMM_R16_TOKENS(gemm_q5_K_r16_tokens, q5_tile, QK_K)

void rt_fill_gemv_q4k16_avx512(tensor_kernels *k) {
    k->gemv_q4_K_r16 = (tensor_gemv){ gemv_q4_K_r16, TENSOR_R16_ROWS, gemv_q4_K_r16_lean, 0, gemm_q4_K_r16_tokens, 0 };
    k->q4_K_r16_native = true;
    k->gemv_q5_K_r16 = (tensor_gemv){ gemv_q5_K_r16, TENSOR_R16_ROWS, gemv_q5_K_r16_lean, 0, gemm_q5_K_r16_tokens, 0 };
    k->q5_K_r16_native = true;
    k->q5_K_r16_fives = false;   /* the mask layout (the table starts as a copy of the AVX2 one, whose is the five-byte one) */
}
