/* gemv_q6k16_avx2.c — Q6_K rows packed 16 to a group (tensor.h tensor_q6_K_r16_pack) × one
 * Q8_K activation row on AVX2: the single-token matmul over a packed matrix, one int32 / float
 * lane per row, eight rows to a vector; and the same against up to four tokens at a time
 * (q6r16_tile, the several-token kernel).
 *
 * Every y[r] performs rt_dot_q6_K's operations in its order, as the AVX-512 kernel does
 * (gemv_q6k16_avx512.c): per block the exact integer sum sumi = Σ over the 16 sub-blocks of
 * sc · Σ (q − 32)·y, then s = fma((float)sumi, d·yd, s). Without dpbusd the integers are
 * reached another exact way (int32 sums in any order are the same sums, and none of these
 * overflows: |sumi| < 2^29):
 *  - Σ q·y: maddubs of a row's 4 values (unsigned, <= 63) against the 4 activations of those
 *    bytes (broadcast, |y| <= 127) gives two words of that row, each at most 2·63·127 = 16002;
 *    two units summed in int16 stay below 2^15, and one madd by the sub-block's scale
 *    (duplicated into both words of the row) gives sc · their sum in int32;
 *  - −32·Σ y: in the several-token kernel the block's sc·bsum per row, pairs of sub-blocks in
 *    one madd each (scales and bsums fit words), times −32 (a shift and a subtraction); in the
 *    single-token one, words of −32·Σ y that the int16 pair sums start from (q6_corrections),
 *    made once a call, so each word ends as Σ (q − 32)·y and no bsum is taken per row.
 * The 6-bit values are assembled as in the AVX-512 kernel: three of four whole in their bytes,
 * the fourth from the three bytes' top bits.
 *
 * The single-token kernel before the corrections (bsum rows, every unit pair building its
 * scale words, four masks for the values): on Zen 4, /tmp/s29/q6g.c outside the repo (one
 * thread, 512 x 1024 in L2, lean, 8 alternating rounds, medians) 279-318 -> 255 TSC cycles a
 * 16-row block; /tmp/s29/km.c (131072 x 1024 from memory, 2 threads, 20 passes, each pass's
 * rate against a plain AVX2 read of the same bytes right after, 4 alternating rounds) 0.61-0.73
 * -> 0.74-0.78 of the read (the prefetching twin; lean 0.65-0.69 -> 0.76-0.78). From memory a
 * core overlaps its work with its stream only in part, so fewer operations read faster even
 * where memory is the bound.
 *
 * Memory: a thread's groups are one run of memory, read in order; each block prefetches the
 * lines Q6R16_PF bytes ahead (the AVX-512 kernel's distance), and the lean twin does without
 * (tensor/prefetch.c chooses).
 *
 * Measured as gemv_q4k16_avx2.c's kernel (RECUR_ISA=avx2): 40 matrices of 3072 x 1024 from
 * memory, the file layout's kernel (dot_avx2.c gemv_q6_K, two rows side by side) 48.2-49.2
 * GB/s, this one 61.4-64.1 (lean 42.1-49.8); the several-token kernel over 8 matrices of
 * 1024 x 3072 against the rows unpacked for gemm[Q6_K]: 0.65-0.74x the time at 4-16 tokens,
 * 0.28x at 32, 0.46x at 64, 0.70-0.72x at 128, 0.80-0.85x at 160, 0.86x at 192, 0.97-1.02x
 * at 256, 1.05-1.11x (slower) at 320, 1.17-1.19x at 512: matmul takes it below Q6_TOKENS_MAX.
 * With every unit pair unrolled (up to 8 · 2 · 4 products in one block of code) gcc hoisted
 * the broadcasts and scale loads and spilled them: 30-33 GB/s; hence the rolled loops. */
#include <string.h>

#include "tensor/x86/simd_x86.h"

#define Q6R16_PF (2 * TENSOR_Q6R16_BLOCK)
#define Q6_TOKENS_MAX 256

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The 8 signed scale bytes of rows 8g..8g+7 of sub-block k, each as both words of its row. */
static inline __m256i q6_scale_words(const uint8_t *h, int k, int g) {
    const __m128i s = _mm_loadl_epi64((const __m128i *)(h + Q6R16_SCALES + 16 * k + 8 * g));
    return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s));
}

/* The four vectors of 6-bit values of rows 8g..8g+7 of a packed run (q: the run + 32g): parts
 * 0-2 are bits 0-5 of its vectors P0-P2, part 3 bits 6-7 of P0, P1, P2 as its bits 0-1, 2-3,
 * 4-5. The top bits are P ^ part (P & 0xC0, one mask for all), gathered into bits 2-7 by word
 * shifts and shifted down once: a byte's bits 0-1 are clear at every step, so what a word
 * shift brings in from the neighbouring byte is zero. */
static inline __attribute__((always_inline)) void q6_values(const uint8_t *q, __m256i v[4]) {
    const __m256i m3f = _mm256_set1_epi8(0x3F);
    const __m256i P0 = _mm256_loadu_si256((const __m256i *)q);
    const __m256i P1 = _mm256_loadu_si256((const __m256i *)(q + 64));
    const __m256i P2 = _mm256_loadu_si256((const __m256i *)(q + 128));
    v[0] = _mm256_and_si256(P0, m3f);
    v[1] = _mm256_and_si256(P1, m3f);
    v[2] = _mm256_and_si256(P2, m3f);
    const __m256i top = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_xor_si256(P0, v[0]), 4),
                                                        _mm256_srli_epi16(_mm256_xor_si256(P1, v[1]), 2)),
                                        _mm256_xor_si256(P2, v[2]));
    v[3] = _mm256_srli_epi16(top, 2);
}

/* Rows 8g..8g+7 of a packed block at h: Σ_k sc_k · bsum_k over the 16 sub-blocks (the −32
 * of every value, times −32 by the caller), two sub-blocks a madd. */
static inline __m256i q6_bsum_rows(const uint8_t *h, const uint8_t *b, int g) {
    __m256i sb = _mm256_setzero_si256();
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 16; k += 2) {
        const __m128i s0 = _mm_loadl_epi64((const __m128i *)(h + Q6R16_SCALES + 16 * k + 8 * g));
        const __m128i s1 = _mm_loadl_epi64((const __m128i *)(h + Q6R16_SCALES + 16 * (k + 1) + 8 * g));
        const uint8_t *bs = b + Q8_K_BSUMS + 2 * k;
        const __m256i pb = _mm256_set1_epi32((int)((uint32_t)rd_u16(bs + 2) << 16 | rd_u16(bs)));
        sb = _mm256_add_epi32(sb, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s0, s1)), pb));
    }
    return sb;
}

/* The −32 of every value for the single-token kernel, folded into its int16 sums: for each 8
 * activations y0..y7 of a Q8_K block (one unit pair's columns: part c of units u, u + 1 are
 * bytes 32c + 4u .. + 7 of the half), the words −32·(y0 + y1 + y4 + y5) and −32·(y2 + y3 + y6
 * + y7) in int32 2m (bytes 8m..8m+7; 2m + 1 unused): a unit pair's int16 pair sums start
 * from them, so that each word ends as Σ (q − 32)·y over its four columns, |.| <= 4·32·128 =
 * 16384, exact even where the adds on the way wrap. This replaces the per-row Σ sc·bsum (a
 * madd per two sub-blocks and half of the rows) by one add a vector. */
#define Q6_CORR_BLOCKS 64   /* blocks a table holds (16 KB on the stack); longer rows go in pieces */
static void q6_corrections(int64_t nb, const uint8_t *x, int32_t *corr) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *yq = x + (size_t)i * Q8_K_BYTES + Q8_K_QS;
        for (int k = 0; k < 8; k++) {
            const __m256i w = _mm256_maddubs_epi16(ones, _mm256_loadu_si256((const __m256i *)(yq + 32 * k)));
            const __m256i s = _mm256_add_epi16(w, _mm256_srli_epi64(w, 32));
            _mm256_storeu_si256((__m256i *)(corr + 64 * i + 8 * k), _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s, 5)));
        }
    }
}

/* Rows 8g..8g+7 of a packed block at h: Σ over the 16 sub-blocks of sc · Σ (q − 32)·y, exact
 * (corr: the block's q6_corrections). A sub-block's scale words serve its two unit pairs. */
static inline __attribute__((always_inline)) __m256i q6_half_rows(const uint8_t *h, const uint8_t *b,
                                                                  const int32_t *corr, int g) {
    const int8_t *yq = (const int8_t *)(b + Q8_K_QS);
    __m256i sumi = _mm256_setzero_si256();
    /* (half hf, units 4q..4q+3) in turn, hq = 2hf + q: part c's sub-block 8hf + 2c + q; the
     * pointers step on (scales 16 bytes a sub-block, runs and activations 4 units, the
     * corrections 2 pairs; past a half the runs have stepped its 8 units already) */
    const uint8_t *sh = h + Q6R16_SCALES + 8 * g, *qq = h + Q6R16_Q + 32 * g;
    const int32_t *cr = corr;
    _Pragma("GCC unroll 1")
    for (int hq = 0; hq < 4; hq++) {
        __m256i sw[4];
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            const __m128i sb = _mm_loadl_epi64((const __m128i *)(sh + 32 * c));
            sw[c] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(sb, sb));
        }
        _Pragma("GCC unroll 1")
        for (int pr = 0; pr < 2; pr++) {
            /* one unit pair at a time (the pointers opaque, so nothing moves across pairs or
             * the two halves of the rows): gcc otherwise hoists the broadcasts and spills them */
            __asm__("" : "+r"(yq), "+r"(qq), "+r"(cr));
            __m256i t[4];
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) t[c] = _mm256_set1_epi32(cr[8 * c]);
            _Pragma("GCC unroll 2")
            for (int u = 0; u < 2; u++) {
                __m256i v[4];
                q6_values(qq + Q6R16_RUN * u, v);
                _Pragma("GCC unroll 4")
                for (int c = 0; c < 4; c++) t[c] = _mm256_add_epi16(t[c], _mm256_maddubs_epi16(v[c], bcast4(yq + 4 * u + 32 * c)));
            }
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(t[c], sw[c]));
            yq += 8, qq += 2 * Q6R16_RUN, cr += 2;
        }
        /* the next hq: sub-block + 1, or (after q = 1) the next half: sub-blocks 8hf.., activations 128hf.. */
        sh += (hq & 1) ? 16 * 7 : 16;
        yq += (hq & 1) ? 128 - 32 : 0;
        cr += (hq & 1) ? 32 - 8 : 0;
    }
    return sumi;
}

/* Rows 0..15 of the packed group at w (nb blocks) against x: y[0..16), or with !first added to
 * the chains y holds (a row in pieces: the same operations in the same order). */
static inline __attribute__((always_inline)) void q6r16_group(int64_t nb, const uint8_t *w, const uint8_t *x,
                                                              const int32_t *corr, float *y, bool first, bool pf) {
    __m256 acc[2] = { first ? _mm256_setzero_ps() : _mm256_loadu_ps(y), first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + 8) };
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q6R16_BLOCK, *b = x + (size_t)i * Q8_K_BYTES;
        if (pf)
            for (int o = 0; o < TENSOR_Q6R16_BLOCK; o += 64) _mm_prefetch((const char *)(h + Q6R16_PF + o), _MM_HINT_T0);
        const __m256 yd = _mm256_set1_ps(rd_f32(b));
        _Pragma("GCC unroll 2")
        for (int g = 0; g < 2; g++) {
            const __m256 d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + Q6R16_D + 16 * g))), yd);
            acc[g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q6_half_rows(h, b, corr + 64 * i, g)), d, acc[g]);
        }
    }
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
}

/* Groups [g0, g1) (tensor.h tensor_gemv_fn), the rows Q6_CORR_BLOCKS blocks at a time. */
static inline __attribute__((always_inline)) void gemv_q6_K_r16_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                                   int64_t g0, int64_t g1, const void *x, float *y,
                                                                   bool pf) {
    (void)n_rows;
    const int64_t nb = n / QK_K;
    int32_t corr[64 * Q6_CORR_BLOCKS];
    for (int64_t b0 = 0; b0 < nb; b0 += Q6_CORR_BLOCKS) {
        const int64_t nc = nb - b0 < Q6_CORR_BLOCKS ? nb - b0 : Q6_CORR_BLOCKS;
        const uint8_t *xc = (const uint8_t *)x + (size_t)b0 * Q8_K_BYTES;
        q6_corrections(nc, xc, corr);
        for (int64_t g = g0; g < g1; g++)
            q6r16_group(nc, (const uint8_t *)w + (size_t)g * TENSOR_R16_ROWS * ws + (size_t)b0 * TENSOR_Q6R16_BLOCK, xc,
                        corr, y + TENSOR_R16_ROWS * g, b0 == 0, pf);
    }
}
X86_GEMV_PF_TWINS(gemv_q6_K_r16)

/* q6r16_group against T tokens (token t's Q8_K row at x + t·xs; y[t·ldy + 0..16)): the values
 * are assembled once for the T tokens. A token's sums are the same exact integers, each unit's
 * products taken into int32 by its own madd (no int16 pairs of units: four tokens' pairs
 * would need sixteen registers), so each y is q6r16_group's. */
static inline __attribute__((always_inline)) void q6r16_tile(int T, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                             size_t xs, float *y, int64_t ldy, bool pf) {
    __m256 acc[4][2];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q6R16_BLOCK;
        if (pf)
            for (int o = 0; o < TENSOR_Q6R16_BLOCK; o += 64) _mm_prefetch((const char *)(h + Q6R16_PF + o), _MM_HINT_T0);
        const uint8_t *b[4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) b[t] = x + t * xs + (size_t)i * Q8_K_BYTES;
        _Pragma("GCC unroll 1")
        for (int g = 0; g < 2; g++) {
            __m256i scw[16], sumi[4];
            _Pragma("GCC unroll 16")
            for (int k = 0; k < 16; k++) scw[k] = q6_scale_words(h, k, g);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) sumi[t] = _mm256_setzero_si256();
            _Pragma("GCC unroll 1")
            for (int hf = 0; hf < 2; hf++)
                _Pragma("GCC unroll 1")
                for (int u = 0; u < 8; u++) {
                    __m256i v[4];
                    q6_values(h + Q6R16_Q + Q6R16_RUN * (8 * hf + u) + 32 * g, v);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) {
                        const int8_t *yy = (const int8_t *)(b[t] + Q8_K_QS) + 128 * hf + 4 * u;
                        _Pragma("GCC unroll 4")
                        for (int c = 0; c < 4; c++)
                            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(v[c], bcast4(yy + 32 * c)),
                                                                                  scw[8 * hf + 2 * c + u / 4]));
                    }
                }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + Q6R16_D + 16 * g)));
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const __m256i si = _mm256_sub_epi32(sumi[t], _mm256_slli_epi32(q6_bsum_rows(h, b[t], g), 5));
                acc[t][g] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), _mm256_mul_ps(dw, _mm256_set1_ps(rd_f32(b[t]))), acc[t][g]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        _mm256_storeu_ps(y + t * ldy, acc[t][0]);
        _mm256_storeu_ps(y + t * ldy + 8, acc[t][1]);
    }
}

/* Several tokens (tensor.h tensor_gemv.tokens). */
X86_GEMM_R16_TOKENS(gemm_q6_K_r16_tokens, q6r16_tile, QK_K)

void rt_fill_gemv_q6k16_avx2(tensor_kernels *k) {
    k->gemv_q6_K_r16 = (tensor_gemv){ gemv_q6_K_r16, TENSOR_R16_ROWS, gemv_q6_K_r16_lean, 0, gemm_q6_K_r16_tokens,
                                       Q6_TOKENS_MAX };
    k->q6_K_r16_native = true;
}
