/* gemv_q8016_avx512.c — Q8_0 rows packed 16 to a group (tensor.h tensor_q8_0_r16_pack) × one
 * Q8_0 activation row: the single-token matmul over a packed matrix, one int32 / float lane
 * per row, in either Q8_0 order.
 *
 * ggml's order (rt_dot_q8_0): row r keeps 8 float chains, chain l adding per block the exact
 * sum of the products of quants 4l..4l+3 times d_w·d_x with one FMA, and reduces them as
 * rt_hsum8_ggml at the end. Packed, chunk l of the 16 rows is one 64-byte vector, so one
 * dpbusd against the 4 activations of the chunk (broadcast) is chunk l's sum of every row, in
 * its own lane: chain l of the 16 rows is one register, and the final reduction adds
 * registers, not lanes. dpbusd takes unsigned bytes first: the weights + 128 (an xor), and the
 * chain starts at Q8_MAGIC_BITS − 128·(the chunk's activation sum, one dpbusd per block for
 * all 8 chunks), so it ends holding the float Q8_MAGIC + sum and one subtraction converts it
 * exactly (tensor_impl.h).
 * The block order (rt_dot_q8_0_blk, q8blk tables): one chain per row, all 8 chunks, from the
 * start the activation tail holds (tensor_impl.h Q8_0_BTAIL_C), then one FMA per block.
 *
 * Why: in the file's layout the 16 rows are 16 streams of 34-byte blocks and every block's
 * sums are reduced across lanes; packed, a thread reads one linear stream (ik_llama.cpp's
 * reason for its interleaved Q8_0 rows) with a fifth of the vector work. Measured on the
 * 2-core Zen 4 machine, memory shared with busy neighbours (the same file loaded packed and
 * with RECUR_NO_REPACK=q8 in one process, tokens decoded ABBA, 2 threads, 100-150 quads,
 * the time a token packed / unpacked): qwen3-0.6b Q8_0 0.92-1.02 (median of the quads,
 * 9 runs, 7 below 1), qwen35-0.8b Q8_0 0.97. One thread: 0.77-1.16 from run to run (the
 * neighbours' load moved more than the kernels differ). The prefetch distance (8, 16 or 32
 * blocks ahead, to L1) made no difference that held from one run to the next; L2 (T1) none
 * either. The lean twin runs without it (tensor/prefetch.c).
 * On the Zen 5 machine of the later measurements it reads slower than the file's layout (one
 * 248320 x 1024 head, 2 threads: 52-64 GB/s against 71-76 for gemv_avx512.c's four streams;
 * recur-bench tg128 qwen3-0.6b Q8_0 74-80 against 94-97 t/s), so matrices are packed for it
 * only where the table lacks gemv[Q8_0].tokens, or with RECUR_REPACK_Q8=1 (tensor.h
 * tensor_q8_0_r16_preferred). */
#include "tensor/x86/simd_x86.h"

/* On Zen 5 a short distance wins (measured as gemv_q4k16_avx512.c's R16_PF, RECUR_PREFETCH=on):
 * 6 blocks against 16, qwen3-0.6b Q8_0 0.976 and 0.957, qwen35-0.8b Q8_0 0.973 and 0.977;
 * 3 against 6 0.990-1.019. */
#define Q8R16_PF (6 * TENSOR_Q8R16_BLOCK)

/* Rows 0..15 of the packed group at w (nb blocks) against x: y[0..16). */
static inline __attribute__((always_inline)) void q8r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                              bool pf) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i magic_bits = _mm256_set1_epi32(Q8_MAGIC_BITS);
    const __m512 magic = _mm512_set1_ps(Q8_MAGIC);
    __m512 acc[8];
    for (int l = 0; l < 8; l++) acc[l] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q8R16_BLOCK, *b = x + (size_t)i * Q8_0_BYTES;
        for (int o = 0; pf && o < TENSOR_Q8R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q8R16_PF + o), _MM_HINT_T0);
        /* each chunk's activation sum, then its chain's start */
        const __m256i xq = _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS));
        const __m256i cs = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq);
        int32_t start[8];
        _mm256_storeu_si256((__m256i *)start, _mm256_sub_epi32(magic_bits, _mm256_slli_epi32(cs, 7)));
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q8R16_D))),
                                       _mm512_set1_ps(x86_f16(b)));
        _Pragma("GCC unroll 8")
        for (int l = 0; l < 8; l++) {
            int32_t a4;
            memcpy(&a4, b + Q8_0_QS + 4 * l, 4);
            const __m512i wu = _mm512_xor_si512(_mm512_loadu_si512(h + Q8R16_QS + 64 * l), bias);
            const __m512i v = _mm512_dpbusd_epi32(_mm512_set1_epi32(start[l]), wu, _mm512_set1_epi32(a4));
            acc[l] = _mm512_fmadd_ps(d, _mm512_sub_ps(_mm512_castsi512_ps(v), magic), acc[l]);
        }
    }
    /* rt_hsum8_ggml, lane by lane */
    const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[4]), _mm512_add_ps(acc[2], acc[6])),
                                   _mm512_add_ps(_mm512_add_ps(acc[1], acc[5]), _mm512_add_ps(acc[3], acc[7])));
    _mm512_storeu_ps(y, s);
}

/* The same group in the block order: x's tail (tensor_impl.h) gives each block's scale and
 * chain start. */
static inline __attribute__((always_inline)) void q8r16_group_blk(int64_t nb, const uint8_t *w, const uint8_t *x,
                                                                  float *y, bool pf) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512 magic = _mm512_set1_ps(Q8_MAGIC);
    const uint8_t *tail = x + q8_0_tail(nb * QK8_0);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q8R16_BLOCK, *t = tail + (size_t)i * Q8_0_BTAIL_BYTES;
        for (int o = 0; pf && o < TENSOR_Q8R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q8R16_PF + o), _MM_HINT_T0);
        int32_t c;
        memcpy(&c, t + Q8_0_BTAIL_C, 4);
        __m512i v = _mm512_set1_epi32(c);
        _Pragma("GCC unroll 8")
        for (int l = 0; l < 8; l++) {
            int32_t a4;
            memcpy(&a4, t + Q8_0_BTAIL_QS + 4 * l, 4);
            v = _mm512_dpbusd_epi32(v, _mm512_xor_si512(_mm512_loadu_si512(h + Q8R16_QS + 64 * l), bias),
                                    _mm512_set1_epi32(a4));
        }
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q8R16_D))),
                                       _mm512_set1_ps(rd_f32(t)));
        acc = _mm512_fmadd_ps(d, _mm512_sub_ps(_mm512_castsi512_ps(v), magic), acc);
    }
    _mm512_storeu_ps(y, acc);
}

X86_GEMV_R16_TWINS(gemv_q8_0_r16, q8r16_group, QK8_0)
X86_GEMV_R16_TWINS(gemv_q8_0_blk_r16, q8r16_group_blk, QK8_0)

/* q8r16_group against T (1 or 2) tokens, token t's row at x + t·xs, y[t·ldy + 0..16): each
 * token's lanes take exactly the one-token operations (8 chains a token: two tokens fill the
 * registers); the weight vectors are loaded and biased once for both. */
static inline __attribute__((always_inline)) void q8r16_tile(int T, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                             size_t xs, float *y, int64_t ldy, bool pf) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m256i ones = _mm256_set1_epi8(1);
    const __m256i magic_bits = _mm256_set1_epi32(Q8_MAGIC_BITS);
    const __m512 magic = _mm512_set1_ps(Q8_MAGIC);
    __m512 acc[2][8];
    for (int t = 0; t < T; t++)
        for (int l = 0; l < 8; l++) acc[t][l] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q8R16_BLOCK, *b[2];
        for (int o = 0; pf && o < TENSOR_Q8R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q8R16_PF + o), _MM_HINT_T0);
        int32_t start[2][8];
        __m512 d[2];
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q8R16_D)));
        _Pragma("GCC unroll 2")
        for (int t = 0; t < T; t++) {
            b[t] = x + t * xs + (size_t)i * Q8_0_BYTES;
            const __m256i xq = _mm256_loadu_si256((const __m256i *)(b[t] + Q8_0_QS));
            const __m256i cs = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, xq);
            _mm256_storeu_si256((__m256i *)start[t], _mm256_sub_epi32(magic_bits, _mm256_slli_epi32(cs, 7)));
            d[t] = _mm512_mul_ps(dw, _mm512_set1_ps(x86_f16(b[t])));
        }
        _Pragma("GCC unroll 8")
        for (int l = 0; l < 8; l++) {
            const __m512i wu = _mm512_xor_si512(_mm512_loadu_si512(h + Q8R16_QS + 64 * l), bias);
            _Pragma("GCC unroll 2")
            for (int t = 0; t < T; t++) {
                int32_t a4;
                memcpy(&a4, b[t] + Q8_0_QS + 4 * l, 4);
                const __m512i v = _mm512_dpbusd_epi32(_mm512_set1_epi32(start[t][l]), wu, _mm512_set1_epi32(a4));
                acc[t][l] = _mm512_fmadd_ps(d[t], _mm512_sub_ps(_mm512_castsi512_ps(v), magic), acc[t][l]);
            }
        }
    }
    _Pragma("GCC unroll 2")
    for (int t = 0; t < T; t++) {   /* rt_hsum8_ggml, lane by lane */
        const __m512 *a = acc[t];
        const __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[4]), _mm512_add_ps(a[2], a[6])),
                                       _mm512_add_ps(_mm512_add_ps(a[1], a[5]), _mm512_add_ps(a[3], a[7])));
        _mm512_storeu_ps(y + t * ldy, s);
    }
}

/* q8r16_group_blk against T (1..4) tokens, as q8r16_tile. */
static inline __attribute__((always_inline)) void q8r16_tile_blk(int T, int64_t nb, const uint8_t *w,
                                                                 const uint8_t *x, size_t xs, float *y, int64_t ldy,
                                                                 bool pf) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512 magic = _mm512_set1_ps(Q8_MAGIC);
    const size_t tail = q8_0_tail(nb * QK8_0);
    __m512 acc[4];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q8R16_BLOCK, *tl[4];
        for (int o = 0; pf && o < TENSOR_Q8R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q8R16_PF + o), _MM_HINT_T0);
        __m512i v[4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            tl[t] = x + t * xs + tail + (size_t)i * Q8_0_BTAIL_BYTES;
            int32_t c;
            memcpy(&c, tl[t] + Q8_0_BTAIL_C, 4);
            v[t] = _mm512_set1_epi32(c);
        }
        _Pragma("GCC unroll 8")
        for (int l = 0; l < 8; l++) {
            const __m512i wu = _mm512_xor_si512(_mm512_loadu_si512(h + Q8R16_QS + 64 * l), bias);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                int32_t a4;
                memcpy(&a4, tl[t] + Q8_0_BTAIL_QS + 4 * l, 4);
                v[t] = _mm512_dpbusd_epi32(v[t], wu, _mm512_set1_epi32(a4));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q8R16_D)));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(rd_f32(tl[t])));
            acc[t] = _mm512_fmadd_ps(d, _mm512_sub_ps(_mm512_castsi512_ps(v[t]), magic), acc[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

/* q8r16_tile for up to four tokens: two at a time. */
static inline __attribute__((always_inline)) void q8r16_tile4(int T, int64_t nb, const uint8_t *w, const uint8_t *x,
                                                              size_t xs, float *y, int64_t ldy, bool pf) {
    if (T >= 2) q8r16_tile(2, nb, w, x, xs, y, ldy, pf);
    if (T == 4) q8r16_tile(2, nb, w, x + 2 * xs, xs, y + 2 * ldy, ldy, false);
    if (T % 2) q8r16_tile(1, nb, w, x + (T - 1) * xs, xs, y + (T - 1) * ldy, ldy, pf && T == 1);
}

/* Several tokens (tensor.h tensor_gemv.tokens): two at a time in ggml's order, four in the
 * block order. */
X86_GEMM_R16_TOKENS(gemm_q8_0_r16_tokens, q8r16_tile4, QK8_0)
X86_GEMM_R16_TOKENS(gemm_q8_0_blk_r16_tokens, q8r16_tile_blk, QK8_0)

void rt_fill_gemv_q8016_avx512(tensor_kernels *k) {
    k->gemv_q8_0_r16 = k->q8_block ? (tensor_gemv){ gemv_q8_0_blk_r16, TENSOR_R16_ROWS, gemv_q8_0_blk_r16_lean, 0,
                                                    gemm_q8_0_blk_r16_tokens, 0 }
                                   : (tensor_gemv){ gemv_q8_0_r16, TENSOR_R16_ROWS, gemv_q8_0_r16_lean, 0,
                                                    gemm_q8_0_r16_tokens, 0 };
    k->q8_0_r16_native = true;
}
