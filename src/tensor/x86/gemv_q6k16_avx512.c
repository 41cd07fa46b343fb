/* gemv_q6k16_avx512.c — Q6_K rows packed 16 to a group (tensor.h tensor_q6_K_r16_pack) × one
 * Q8_K activation row: the single-token matmul over a packed matrix, one int32 / float lane per
 * row.
 *
 * Every y[r] performs rt_dot_q6_K's operations in its order: per block, the exact integer sum
 * sumi = Σ over the 16 sub-blocks of sc · Σ (q − 32)·y, then s = fma((float)sumi, d·yd, s).
 * The packing puts 4 bytes of each of the 16 rows side by side, so one dpbusd of 6-bit values
 * against the 4 activations of those bytes (broadcast) adds a row's products into its own
 * lane: no sums across lanes. Three of every four values sit whole in their own byte (one
 * and); the fourth is gathered from the three bytes' top bits. A sub-block's sum starts at
 * −32·bsum (the activations' 16-element sum: the −32 costs nothing), takes four dpbusd, and
 * is multiplied by the 16 rows' scales (one load). Every step is exact in int32.
 *
 * Measured on the 2-core Zen 4 machine (its memory shared with busy neighbours: 32-52 GB/s),
 * programs outside the repo:
 *  - one thread, matrices in cache, this kernel (lean) against the file-layout kernel
 *    (gemv_avx512.c q6k_quad: four rows side by side, values and scales assembled per row,
 *    a shared reduction), medians of alternating passes: 1024 x 1024 (L2) 32-34 -> 48-52
 *    GB/s, 1.39-1.55x; 6144 x 1024 (L3) 1.38-1.46x; 1024 x 3072 1.31-1.52x. Values kept as
 *    ql / qh bytes side by side instead (a layout tried first): 1.09-1.15x slower;
 *  - in a model, per-token ABBA in one process, a model loaded packed against the same file
 *    loaded with RECUR_NO_REPACK=q6, 2 threads, 150 quads: qwen3-0.6b Q4_K_M 0.946-0.973 the
 *    time a token, qwen35-0.8b Q4_K_M 0.957-0.987 (memory, not this kernel, is the bound there
 *    while the neighbours are busy);
 *  - the prefetch, Q6R16_PF bytes ahead, goes to L1 (T0). It went to L2 (T1) while each
 *    64 bytes were loaded twice (GCC folded the load into the and and the shift: the load
 *    ports were the bound, 73 GB/s in L1); with one load (x86_load512_once, 91 GB/s in L1),
 *    a 208 MB matrix at 2 threads, memory idle, reads 99-101 GB/s to L1 against 81-85 to L2
 *    (/tmp/mb, alternating), and qwen35-0.8b Q4_K_M tg128 ran at 1.05-1.11x the t/s before
 *    (recur-bench, 3 alternating pairs).
 *    Two or four packed groups read side by side (more streams) were not steadily faster (one
 *    thread: 0.90-1.11x). The lean twin runs without it (tensor/prefetch.c). */
#include "tensor/x86/simd_x86.h"

/* Two blocks ahead on Zen 5 (as gemv_q4k16_avx512.c's R16_PF, measured the same way, the Q4_K
 * Medium files' output heads): 2 against 3, qwen3-0.6b 0.976 and 0.988, qwen35-0.8b 0.988 and
 * 0.990; 6 against 3 1.012-1.019, 1 against 2 1.011-1.020 (slower). */
#define Q6R16_PF (2 * TENSOR_Q6R16_BLOCK)

/* (a & c) | (b & ~c): ternary-logic immediate, c the mask of the bits taken from a */
#define TL_MUX 0xE4

/* The four 64-byte vectors of 6-bit values of the run at q (tensor.h's packed layout): parts
 * 0-2 are bits 0-5 of its vectors P0-P2; part 3 is bits 6-7 of P0, P1, P2 as its bits 0-1,
 * 2-3, 4-5 (16-bit shifts: what crosses from a neighbouring byte is masked off). */
static inline __attribute__((always_inline)) void q6r16_values(const uint8_t *q, __m512i *v0, __m512i *v1, __m512i *v2,
                                                               __m512i *v3) {
    const __m512i m3f = _mm512_set1_epi8(0x3F), m03 = _mm512_set1_epi8(0x03), m0f = _mm512_set1_epi8(0x0F);
    const __m512i P0 = x86_load512_once(q), P1 = x86_load512_once(q + 64), P2 = x86_load512_once(q + 128);
    *v0 = _mm512_and_si512(P0, m3f);
    *v1 = _mm512_and_si512(P1, m3f);
    *v2 = _mm512_and_si512(P2, m3f);
    const __m512i t = _mm512_ternarylogic_epi32(_mm512_srli_epi16(P0, 6), _mm512_srli_epi16(P1, 4), m03, TL_MUX);
    *v3 = _mm512_and_si512(_mm512_ternarylogic_epi32(t, _mm512_srli_epi16(P2, 2), m0f, TL_MUX), m3f);
}

/* Rows 0..15 of the packed group at w (nb blocks) against x: y[0..16). */
static inline __attribute__((always_inline)) void q6r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                              bool pf) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q6R16_BLOCK, *b = x + (size_t)i * Q8_K_BYTES;
        for (int o = 0; pf && o < TENSOR_Q6R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q6R16_PF + o), _MM_HINT_T0);
        const int8_t *yq = (const int8_t *)(b + Q8_K_QS);
        const uint8_t *bs = b + Q8_K_BSUMS;
        __m512i sumi = _mm512_setzero_si512();
        _Pragma("GCC unroll 2")
        for (int hf = 0; hf < 2; hf++) {
            /* a[2c + u/4]: sub-block 8hf + 2c + u/4 (part c of the half, its first or second 16) */
            /* unrolled, like the loop over k below: rolled, gcc kept a[] on the stack (16 zmm
             * loads and stores a block); 40 packed 3072 x 1024 matrices 56.8-63.1 -> 62.8-67.3
             * GB/s, a 151936 x 1024 output head 69.5-70.7 -> 76.9-79.5 (/tmp/s8/gv1.c, 2 threads,
             * RECUR_PREFETCH=on, three alternating pairs) */
            __m512i a[8];
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) a[k] = _mm512_set1_epi32(-32 * rd_i16(bs + 2 * (8 * hf + k)));
            _Pragma("GCC unroll 8")
            for (int u = 0; u < 8; u++) {
                const uint8_t *q = h + Q6R16_Q + Q6R16_RUN * (8 * hf + u);
                __m512i v0, v1, v2, v3;
                q6r16_values(q, &v0, &v1, &v2, &v3);
                const int8_t *yy = yq + 128 * hf + 4 * u;
                const int k = u >> 2;
                a[k] = _mm512_dpbusd_epi32(a[k], v0, x86_bcast4(yy));
                a[k + 2] = _mm512_dpbusd_epi32(a[k + 2], v1, x86_bcast4(yy + 32));
                a[k + 4] = _mm512_dpbusd_epi32(a[k + 4], v2, x86_bcast4(yy + 64));
                a[k + 6] = _mm512_dpbusd_epi32(a[k + 6], v3, x86_bcast4(yy + 96));
            }
            _Pragma("GCC unroll 8")
            for (int k = 0; k < 8; k++) {
                const __m128i s8 = _mm_loadu_si128((const __m128i *)(h + Q6R16_SCALES + 16 * (8 * hf + k)));
                const __m512i sc = _mm512_cvtepi8_epi32(s8);
                sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(a[k], sc));
            }
        }
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q6R16_D))),
                                       _mm512_set1_ps(rd_f32(b)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), d, acc);
    }
    _mm512_storeu_ps(y, acc);
}

X86_GEMV_R16_TWINS(gemv_q6_K_r16, q6r16_group, QK_K)

/* q6r16_group against T tokens (token t's Q8_K row at x + t·xs; y[t·ldy + 0..16)): the values
 * are assembled once for the T tokens. A token's sub-block sums are the same exact integers
 * (taken a quarter of a half at a time, u = 4qh..4qh+3: four accumulators a token), so each y
 * is q6r16_group's. */
static inline __attribute__((always_inline)) void q6r16_tile(int T, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                             size_t xs, float *y, int64_t ldy, bool pf) {
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q6R16_BLOCK;
        for (int o = 0; pf && o < TENSOR_Q6R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q6R16_PF + o), _MM_HINT_T0);
        const uint8_t *b[4];
        __m512i sumi[4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            b[t] = x + t * xs + (size_t)i * Q8_K_BYTES;
            sumi[t] = _mm512_setzero_si512();
        }
        for (int hf = 0; hf < 2; hf++)
            for (int qh = 0; qh < 2; qh++) {
                /* a[t][c]: sub-block 8hf + 2c + qh of token t */
                __m512i a[4][4];
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++)
                    _Pragma("GCC unroll 4")
                    for (int c = 0; c < 4; c++)
                        a[t][c] = _mm512_set1_epi32(-32 * rd_i16(b[t] + Q8_K_BSUMS + 2 * (8 * hf + 2 * c + qh)));
                _Pragma("GCC unroll 4")
                for (int u = 4 * qh; u < 4 * qh + 4; u++) {
                    const uint8_t *q = h + Q6R16_Q + Q6R16_RUN * (8 * hf + u);
                    __m512i v0, v1, v2, v3;
                    q6r16_values(q, &v0, &v1, &v2, &v3);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) {
                        const int8_t *yy = (const int8_t *)(b[t] + Q8_K_QS) + 128 * hf + 4 * u;
                        a[t][0] = _mm512_dpbusd_epi32(a[t][0], v0, x86_bcast4(yy));
                        a[t][1] = _mm512_dpbusd_epi32(a[t][1], v1, x86_bcast4(yy + 32));
                        a[t][2] = _mm512_dpbusd_epi32(a[t][2], v2, x86_bcast4(yy + 64));
                        a[t][3] = _mm512_dpbusd_epi32(a[t][3], v3, x86_bcast4(yy + 96));
                    }
                }
                _Pragma("GCC unroll 4")
                for (int c = 0; c < 4; c++) {
                    const __m128i s8 = _mm_loadu_si128((const __m128i *)(h + Q6R16_SCALES + 16 * (8 * hf + 2 * c + qh)));
                    const __m512i sc = _mm512_cvtepi8_epi32(s8);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) sumi[t] = _mm512_add_epi32(sumi[t], _mm512_mullo_epi32(a[t][c], sc));
                }
            }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q6R16_D)));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi[t]), _mm512_mul_ps(dw, _mm512_set1_ps(rd_f32(b[t]))), acc[t]);
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

/* Several tokens (tensor.h tensor_gemv.tokens), below Q6_TOKENS_MAX: it reads each packed
 * block once for 4 tokens and splits its values again for the next 4, ~420 GOP/s on one
 * thread whatever the count, where the rows unpacked 64 at a time (matmul.c) for gemm[Q6_K]
 * (x86/gemm_q6k_avx512.c) run 350-360 at 64 tokens, 420-430 at 96, 460-500 at 128 and
 * 650-660 at 512 (a program outside the repo, one thread, 1024 x 3072 and 3072 x 1024 from
 * L3, best of 5; the same bits either way, checked). In the model, with the weights coming from
 * memory, the unpacking pays later: recur-bench -p N -n 0, 2 threads, qwen3-0.6b Q6_K (every
 * matrix Q6_K), 2 alternating rounds, tokens kernel against unpacking: 128 tokens 883-885
 * against 811-818 t/s, 192 748-836 / 921-931, 256 795-799 / 942-945, 512 734-767 / 949-950.
 * Before, it took every prompt (AVX-512 has no packed Q6_K gemm). */
X86_GEMM_R16_TOKENS(gemm_q6_K_r16_tokens, q6r16_tile, QK_K)
#define Q6_TOKENS_MAX 160

void rt_fill_gemv_q6k16_avx512(tensor_kernels *k) {
    k->gemv_q6_K_r16 = (tensor_gemv){ gemv_q6_K_r16, TENSOR_R16_ROWS, gemv_q6_K_r16_lean, 0, gemm_q6_K_r16_tokens,
                                       Q6_TOKENS_MAX };
    k->q6_K_r16_native = true;
}
