/* gemv_q4k16_avx2.c — Q4_K or Q5_K rows packed 16 to a group (tensor.h tensor_q4_K_r16_pack,
 * tensor_q5_K_r16f_pack) × one Q8_K activation row on AVX2: the single-token matmul over a
 * packed matrix, one float lane per row, eight rows to a vector; and the same against up to
 * four tokens at a time (k4_tile, the several-token kernel).
 *
 * Every y[r] performs dot_q4_K_rp's operations in its order (tensor_impl.h rt_dot_q4_K_rp), as
 * the AVX-512 kernel does (gemv_q4k16_avx512.c): per 64-element chunk j the exact integer sum
 * sc[2j]·s1 + sc[2j+1]·s2 and the exact min sum, then acc = fma(sum, d·yd, acc) and
 * accm = fma(min, dmin·yd, accm); acc − accm. Without dpbusd the integers are reached another
 * exact way: the packing puts 4 bytes of each row side by side, so maddubs of a row's 4 nibbles
 * (unsigned, <= 15) against the 4 activations of those bytes (broadcast, |y| <= 127) gives two
 * int16 lanes of that row, each the sum of two products (<= 3810); a chunk's 8 such steps
 * summed in int16 stay below 8·3810 = 30480 < 2^15 (no wrap), and one madd by the sub-block
 * scale (duplicated into both words of the row) turns the row's two words into sc·s exactly.
 * The min sums are one madd of the row's (m[2j], m[2j+1]) words against the block's
 * (bs[4j] + bs[4j+1], bs[4j+2] + bs[4j+3]) (|.| <= 4064: words).
 *
 * Q5_K (rt_dot_q5_K_rp, the AVX2 table's Q5_K order: the same steps with five-bit values): the
 * AVX2 table packs Q5_K in the five-byte layout (tensor.h), whose values come whole from the
 * bytes (x86_q5f_values: an and a vector, 5-8 operations for three vectors in eight), and the
 * int16 sums are scaled every four units (k4_tile says why). Before it the AVX-512 table's
 * mask layout took 17 operations a unit and half (10 to turn a mask's bits into 16s), and the
 * kernel was bound by them. /tmp/s16/gv.c outside the repo, one thread, 512 x 1024 in cache,
 * four alternating rounds: masks 19.3-19.4 GB/s, five-byte 27.4-27.8 (the file layout's
 * kernel, gemv_avx2.c gemv_q5_K_rp: 17.7; packed Q4_K: 31.7); tensor_matmul of 65536 x 1024
 * from memory, 2 threads, best of 40, four rounds: 19.2-25.7 GB/s against 49.9-56.7;
 * recur-bench -p 0 -n 64 -r 1 on qwen3-0.6b Q5_K_M, three alternating pairs: 45.2-46.6 against
 * 67.9-73.1 t/s. The several-token kernel (4 tokens, 3072 x 1024, 2 threads, tensor_matmul):
 * 201-204 against 236-237 GFLOP/s, 16 tokens 116-176 against 259-261; from 24 tokens the
 * packed gemm (gemm_q4k_avx2.c gemm_q5_K_r16) takes over, this kernel falling behind it, hence
 * tokens_max.
 *
 * Memory: a thread's groups are one run of memory, read in order; each block prefetches the
 * lines R16_PF_BLOCKS blocks ahead (the AVX-512 kernel's distance), and the lean twin does without
 * (tensor/prefetch.c chooses).
 *
 * Measured on the Zen 5 machine with RECUR_ISA=avx2, programs outside the repo:
 *  - /tmp/s8/gv1.c, 40 matrices of 3072 x 1024 from memory through tensor_matmul, 2 threads,
 *    RECUR_PREFETCH=on, median of 20 passes, alternating: the file layout's kernel
 *    (gemv_avx2.c gemv_q4_K_rp) 44.3-44.6 GB/s, this one 60.0-65.4 (lean 36.8);
 *  - /tmp/s8/tk3.c, 8 packed matrices of 3072 x 1024, the several-token kernel against the
 *    rows unpacked for gemm_q4_K_rp (matmul.c mm_dot_r16), median of 5 passes: 0.70-0.79x the
 *    time at 4-16 tokens, 0.52-0.71x at 32-128, 0.77-0.78x at 512;
 *  - recur-bench -t 2 -p 32,128,512 -n 128, qwen3-0.6b Q4_K_M (with gemv_q6k16_avx2.c), three
 *    alternating pairs against the file's layout: pp32 189-224 -> 363-384 t/s, pp128 289-290
 *    -> 383-395, pp512 283-296 -> 320-356, tg128 107-110 -> 120-121. */
#include <string.h>

#include "tensor/x86/simd_x86.h"

#define R16_PF_BLOCKS 2

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* rt_unpack_k4_scales for the 16 rows of a packed block: sc[s] / m[s] byte r = row r's scale /
 * min of sub-block s. Byte shifts are word shifts whose stray bits the masks drop. */
static inline void r16_scales(const uint8_t *h, __m128i sc[8], __m128i m[8]) {
    const __m128i m63 = _mm_set1_epi8(63), m4 = _mm_set1_epi8(0x0F), m30 = _mm_set1_epi8(0x30);
    __m128i q[12];
    _Pragma("GCC unroll 12")
    for (int k = 0; k < 12; k++) q[k] = _mm_loadu_si128((const __m128i *)(h + R16_SCALES + 16 * k));
    _Pragma("GCC unroll 4")
    for (int s = 0; s < 4; s++) {
        sc[s] = _mm_and_si128(q[s], m63);
        m[s] = _mm_and_si128(q[s + 4], m63);
        /* (bits 6-7 of q[s] or q[s + 4]) -> bits 4-5 */
        sc[s + 4] = _mm_or_si128(_mm_and_si128(q[s + 8], m4), _mm_and_si128(_mm_srli_epi16(q[s], 2), m30));
        m[s + 4] = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(q[s + 8], 4), m4),
                                _mm_and_si128(_mm_srli_epi16(q[s + 4], 2), m30));
    }
}

/* The 8 bytes of rows 8h..8h+7 of v, each as the two words of its row's int16 pair. */
static inline __m256i r16_dup_words(__m128i v, int h) {
    const __m128i b = h ? _mm_unpackhi_epi8(v, v) : _mm_unpacklo_epi8(v, v);
    return _mm256_cvtepu8_epi16(b);
}

/* The low (sub-block 2j) and high (2j+1) values of rows 8g..8g+7 of packed unit u of chunk
 * j: Q4_K's nibbles, or with q5 the five-byte layout's values (x86_q5f_values). */
static inline __attribute__((always_inline)) void k4_values(bool q5, const uint8_t *h, int j, int u, int g,
                                                            __m256i *lo, __m256i *hi) {
    if (q5) {
        x86_q5f_values(h, j, u, g, lo, hi);
        return;
    }
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = _mm256_loadu_si256((const __m256i *)(h + R16_QS + 64 * (8 * j + u) + 32 * g));
    *lo = _mm256_and_si256(v, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}

/* Rows 0..15 of the packed group at w (nb blocks; q5: Q5_K's layout) against T tokens (token
 * t's Q8_K row at x + t·xs): y[t·ldy + 0..16). Each token's lanes take exactly the one-token
 * operations (a row's chains run j = 0..3 within a block, rows 0-7 and 8-15 one after the
 * other), so every y is the single-token kernel's; the weight vectors and the scales are
 * loaded and split once for the T tokens. Q5_K's five-bit values make int16 pair sums up to
 * 2·31·127 = 7874: four units of a chunk fit a word, not eight, so each half of the units is
 * scaled apart and the two added in int32 (exact either way). */
static inline __attribute__((always_inline)) void k4_tile(bool q5, int T, int64_t nb, const uint8_t *w,
                                                          const uint8_t *x, size_t xs, float *y, int64_t ldy, bool pf) {
    const size_t blk = q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK;
    __m256 acc[4][2], accm[4][2];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = accm[t][0] = accm[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * blk;
        if (pf)
            for (int o = 0; o < (int)blk; o += 64) _mm_prefetch((const char *)(h + R16_PF_BLOCKS * blk + o), _MM_HINT_T0);
        const uint8_t *b[4];
        int32_t pps[4][4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            b[t] = x + t * xs + (size_t)i * Q8_K_BYTES;
            x86_q8k_pair_sums(b[t], pps[t]);
        }
        __m128i sc[8], mn[8];
        r16_scales(h, sc, mn);
        _Pragma("GCC unroll 1")
        for (int g = 0; g < 2; g++) {
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_D + 16 * g)));
            const __m256 dmw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_DMIN + 16 * g)));
            _Pragma("GCC unroll 1")
            for (int j = 0; j < 4; j++) {
                const __m256i sw1 = r16_dup_words(sc[2 * j], g), sw2 = r16_dup_words(sc[2 * j + 1], g);
                __m256i s1[4], s2[4], part[4];
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) s1[t] = s2[t] = _mm256_setzero_si256();
                _Pragma("GCC unroll 8")
                for (int u = 0; u < 8; u++) {
                    __m256i lo, hi;
                    k4_values(q5, h, j, u, g, &lo, &hi);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) {
                        const int8_t *yq = (const int8_t *)(b[t] + Q8_K_QS) + 64 * j + 4 * u;
                        s1[t] = _mm256_add_epi16(s1[t], _mm256_maddubs_epi16(lo, bcast4(yq)));
                        s2[t] = _mm256_add_epi16(s2[t], _mm256_maddubs_epi16(hi, bcast4(yq + 32)));
                        /* a unit at a time: gcc otherwise hoisted all the chunk's products
                         * and spilled them to the stack */
                        __asm__("" : "+x"(s1[t]), "+x"(s2[t]));
                    }
                    if (q5 && u == 3)
                        _Pragma("GCC unroll 4")
                        for (int t = 0; t < T; t++) {
                            part[t] = _mm256_add_epi32(_mm256_madd_epi16(s1[t], sw1), _mm256_madd_epi16(s2[t], sw2));
                            s1[t] = s2[t] = _mm256_setzero_si256();
                        }
                }
                const __m128i mp = g ? _mm_unpackhi_epi8(mn[2 * j], mn[2 * j + 1]) : _mm_unpacklo_epi8(mn[2 * j], mn[2 * j + 1]);
                const __m256i mw = _mm256_cvtepu8_epi16(mp);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    const __m256 yd = _mm256_set1_ps(rd_f32(b[t]));
                    __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s1[t], sw1), _mm256_madd_epi16(s2[t], sw2));
                    if (q5) sum = _mm256_add_epi32(part[t], sum);
                    acc[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, yd), acc[t][g]);
                    /* rt_q4_K_rp_min's two pair sums, as the words of every row's dword */
                    const __m256i pp = _mm256_set1_epi32(pps[t][j]);
                    accm[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(mw, pp)), _mm256_mul_ps(dmw, yd),
                                                 accm[t][g]);
                }
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        _mm256_storeu_ps(y + t * ldy, _mm256_sub_ps(acc[t][0], accm[t][0]));
        _mm256_storeu_ps(y + t * ldy + 8, _mm256_sub_ps(acc[t][1], accm[t][1]));
    }
}

X86_K4_TILES(k4_tile)

/* One token: the group kernel of X86_GEMV_R16_TWINS. k4_tile's operations with T = 1, the
 * chunks outermost so that both halves share the broadcasts: 1.02-1.03x the speed of
 * r16_tile(1, ...) (/tmp/s8/gv1.c, 40 packed 3072 x 1024 matrices, 2 threads, RECUR_PREFETCH=on,
 * three alternating pairs). */
static inline __attribute__((always_inline)) void k4_group(bool q5, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                           float *y, bool pf) {
    const size_t blk = q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK;
    __m256 acc[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() }, accm[2] = { _mm256_setzero_ps(), _mm256_setzero_ps() };
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * blk, *b = x + (size_t)i * Q8_K_BYTES;
        if (pf)
            for (int o = 0; o < (int)blk; o += 64) _mm_prefetch((const char *)(h + R16_PF_BLOCKS * blk + o), _MM_HINT_T0);
        const int8_t *yq = (const int8_t *)(b + Q8_K_QS);
        const __m256 yd = _mm256_set1_ps(rd_f32(b));
        int32_t pps[4];
        x86_q8k_pair_sums(b, pps);
        __m128i sc[8], mn[8];
        r16_scales(h, sc, mn);
        __m256 d[2], dm[2];
        _Pragma("GCC unroll 2")
        for (int g = 0; g < 2; g++) {
            d[g] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_D + 16 * g))), yd);
            dm[g] = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_DMIN + 16 * g))), yd);
        }
        _Pragma("GCC unroll 1")
        for (int j = 0; j < 4; j++) {
            __m256i s1[2] = { _mm256_setzero_si256(), _mm256_setzero_si256() }, s2[2] = { s1[0], s1[0] }, part[2];
            _Pragma("GCC unroll 8")
            for (int u = 0; u < 8; u++) {
                const __m256i ylo = bcast4(yq + 64 * j + 4 * u), yhi = bcast4(yq + 64 * j + 32 + 4 * u);
                _Pragma("GCC unroll 2")
                for (int g = 0; g < 2; g++) {
                    __m256i lo, hi;
                    k4_values(q5, h, j, u, g, &lo, &hi);
                    s1[g] = _mm256_add_epi16(s1[g], _mm256_maddubs_epi16(lo, ylo));
                    s2[g] = _mm256_add_epi16(s2[g], _mm256_maddubs_epi16(hi, yhi));
                    __asm__("" : "+x"(s1[g]), "+x"(s2[g]));   /* as in k4_tile */
                }
                if (q5 && u == 3)   /* k4_tile's halves */
                    _Pragma("GCC unroll 2")
                    for (int g = 0; g < 2; g++) {
                        part[g] = _mm256_add_epi32(_mm256_madd_epi16(s1[g], r16_dup_words(sc[2 * j], g)),
                                                   _mm256_madd_epi16(s2[g], r16_dup_words(sc[2 * j + 1], g)));
                        s1[g] = s2[g] = _mm256_setzero_si256();
                    }
            }
            const __m256i pp = _mm256_set1_epi32(pps[j]);
            _Pragma("GCC unroll 2")
            for (int g = 0; g < 2; g++) {
                __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s1[g], r16_dup_words(sc[2 * j], g)),
                                               _mm256_madd_epi16(s2[g], r16_dup_words(sc[2 * j + 1], g)));
                if (q5) sum = _mm256_add_epi32(part[g], sum);
                acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), d[g], acc[g]);
                const __m128i mp = g ? _mm_unpackhi_epi8(mn[2 * j], mn[2 * j + 1]) : _mm_unpacklo_epi8(mn[2 * j], mn[2 * j + 1]);
                accm[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_cvtepu8_epi16(mp), pp)), dm[g], accm[g]);
            }
        }
    }
    _mm256_storeu_ps(y, _mm256_sub_ps(acc[0], accm[0]));
    _mm256_storeu_ps(y + 8, _mm256_sub_ps(acc[1], accm[1]));
}

static inline __attribute__((always_inline)) void r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                            bool pf) {
    k4_group(false, nb, w, x, y, pf);
}

static inline __attribute__((always_inline)) void q5_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                           bool pf) {
    k4_group(true, nb, w, x, y, pf);
}

X86_GEMV_R16_TWINS(gemv_q4_K_r16, r16_group, QK_K)
X86_GEMV_R16_TWINS(gemv_q5_K_r16, q5_group, QK_K)

/* Several tokens (tensor.h tensor_gemv.tokens). */
X86_GEMM_R16_TOKENS(gemm_q4_K_r16_tokens, r16_tile, QK_K)
X86_GEMM_R16_TOKENS(gemm_q5_K_r16_tokens, q5_tile, QK_K)

void rt_fill_gemv_q4k16_avx2(tensor_kernels *k) {
    k->gemv_q4_K_r16 = (tensor_gemv){ gemv_q4_K_r16, TENSOR_R16_ROWS, gemv_q4_K_r16_lean, 0, gemm_q4_K_r16_tokens, 0 };
    k->q4_K_r16_native = true;
    /* 24: about even with the packed gemm at 16-24 tokens (within the machine's noise) */
    k->gemv_q5_K_r16 = (tensor_gemv){ gemv_q5_K_r16, TENSOR_R16_ROWS, gemv_q5_K_r16_lean, 0, gemm_q5_K_r16_tokens, 24 };
    k->q5_K_r16_native = true;
    k->q5_K_r16_fives = true;
}
