/* q8blk_avx2.c — the block order of Q8_0 x Q8_0 (tensor_impl.h, rt_dot_q8_0_blk) for CPUs
 * with AVX2: the dot, four activation rows at once, the single-token matmul and the prompt
 * gemm of the AVX2 tables' twins (tensor_kernels_q8blk).
 *
 * Per block the exact integer sum of its 32 products (x86_dot_i8's sign trick: exact, the
 * activation bytes are never -128), then one FMA of it (as a float: |s| <= 32·128·127 < 2^24)
 * times the product of the two fp16 scales (exact in float, so how it is formed does not
 * matter), blocks in order from 0: rows or tokens run side by side as vector lanes, each lane
 * one chain. Unaligned rows and strides; the activation rows' tail is not read. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

/* One chain: per block its exact integer sum, then one FMA. */
static float dot_q8_0_blk(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) {
        const __m256i p = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)),
                                     _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)));
        acc = fmaf(x86_f16(a) * x86_f16(b), (float)x86_hsum_epi32(p), acc);
    }
    return acc;
}

/* The exact sums of p[0..8) (8 int32 lanes each), lane k holding p[k]'s: a transposing hadd
 * tree, then the two 128-bit halves added. */
static inline __m256i hsum8_epi32(const __m256i p[8]) {
    const __m256i lo = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i hi = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
}

/* dot_q8_0_blk of the rows wr[0..8) with x, lane k being row k's chain: per block the eight
 * exact sums (hsum8_epi32), converted exactly (|s| < 2^24), times the rows' scales times x's
 * (exact products, as the dot's), one 8-lane FMA. */
static inline __m256 q8_0_rows8(int64_t nb, const uint8_t *const wr[8], const uint8_t *x) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const size_t off = (size_t)i * Q8_0_BYTES;
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(x + off + Q8_0_QS));
        __m256i p[8];
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) p[k] = x86_dot_i8(_mm256_loadu_si256((const __m256i *)(wr[k] + off + Q8_0_QS)), xv);
        const __m256 dw = _mm256_cvtph_ps(_mm_setr_epi16(
            (short)rd_u16(wr[0] + off), (short)rd_u16(wr[1] + off), (short)rd_u16(wr[2] + off), (short)rd_u16(wr[3] + off),
            (short)rd_u16(wr[4] + off), (short)rd_u16(wr[5] + off), (short)rd_u16(wr[6] + off), (short)rd_u16(wr[7] + off)));
        acc = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(x86_f16(x + off))), _mm256_cvtepi32_ps(hsum8_epi32(p)), acc);
    }
    return acc;
}

/* The single-token matmul: rows r + k·q (k = 0..7, q = n_rows / 8) as the lanes of
 * q8_0_rows8, eight streams that each run straight through an eighth of the memory
 * (gemv_avx512.c says why); the 0-7 rows left go as one more group, its last row repeated in
 * the unused lanes. */
static void gemv_q8_0_blk(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                          const void *x, float *y) {
    const uint8_t *W = w;
    const int64_t nb = n / QK8_0, q = n_rows / 8, e = g1 < q ? g1 : q;
    _Alignas(32) float v[8];
    for (int64_t r = g0; r < e; r++) {
        const uint8_t *wr[8];
        for (int k = 0; k < 8; k++) wr[k] = W + (size_t)(r + k * q) * ws;
        _mm256_store_ps(v, q8_0_rows8(nb, wr, x));
        for (int k = 0; k < 8; k++) y[r + k * q] = v[k];
    }
    const int left = (int)(n_rows - 8 * q);
    if (left && g1 > q) {
        const uint8_t *wr[8];
        for (int k = 0; k < 8; k++) wr[k] = W + (size_t)(8 * q + (k < left ? k : left - 1)) * ws;
        _mm256_store_ps(v, q8_0_rows8(nb, wr, x));
        for (int k = 0; k < left; k++) y[8 * q + k] = v[k];
    }
}

/* dot_q8_0_blk for four activation rows at once: their block sums out of one hadd tree, their
 * chains the lanes of one 4-lane FMA. */
static void dot4_q8_0_blk(int64_t n, const void *w, const void *x, size_t xs, float out[4]) {
    const uint8_t *a = w, *b = x;
    const __m256i ones = _mm256_set1_epi16(1);
    __m128 acc = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK8_0; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) {
        const __m256i qa = _mm256_loadu_si256((const __m256i *)(a + Q8_0_QS)), aa = _mm256_sign_epi8(qa, qa);
        __m256i p[4];
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {   /* x86_dot_i8 with |qa| formed once */
            const __m256i qb = _mm256_loadu_si256((const __m256i *)(b + j * xs + Q8_0_QS));
            p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(qb, qa)), ones);
        }
        const __m128 dx = _mm_cvtph_ps(_mm_setr_epi16((short)rd_u16(b), (short)rd_u16(b + xs), (short)rd_u16(b + 2 * xs),
                                                      (short)rd_u16(b + 3 * xs), 0, 0, 0, 0));
        acc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(x86_f16(a)), dx), _mm_cvtepi32_ps(x86_hsum4_epi32(p[0], p[1], p[2], p[3])), acc);
    }
    _mm_storeu_ps(out, acc);
}

/* The prompt gemm: a tile is QR = 4 rows × 2·QP tokens, a block's rows loaded (and |w|
 * formed) once for all its tokens:
 *  - a token's products with each row are x86_dot_i8's 8 int32 lanes;
 *  - two hadd levels leave [rows 0-3, low-half sums | rows 0-3, high-half sums], and adding the
 *    halves of a token pair gives the eight exact block sums [token 0: rows 0-3 | token 1:
 *    rows 0-3];
 *  - one 8-lane FMA a pair is then each element's one FMA of the block.
 * Tokens go in chunks whose activations stay in L2 while every row tile passes over them; a
 * short tile repeats its last row or token in the lanes it does not store. */
#define QR 4                      /* weight rows per tile: their bytes and |w| in 8 registers */
#define QP 3                      /* token pairs per tile: one accumulator each */
#define CHUNK_BYTES (192 << 10)   /* activations of a token chunk: within L2 */

/* One token's block xq against the tile's rows (w, |w|): [rows 0-3, sums of their low 16
 * bytes | rows 0-3, sums of their high 16 bytes]. */
static inline __m256i q8_rows4(const __m256i *w, const __m256i *aw, const uint8_t *xq) {
    const __m256i xv = _mm256_loadu_si256((const __m256i *)xq), ones = _mm256_set1_epi16(1);
    __m256i p[QR];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < QR; r++) p[r] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, w[r])), ones);
    return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

/* Rows wr[0..QR) × tokens x + t·xs, t < 2P (t >= nt repeats token nt − 1): y[t·ldy + r] for
 * r < nr, t < nt. */
static inline __attribute__((always_inline)) void q8_tile(int P, int64_t nb, const uint8_t *const *wr, int nr,
                                                           const uint8_t *x, size_t xs, int nt, float *y, int64_t ldy) {
    const uint8_t *xt[2 * QP];
    _Pragma("GCC unroll 6")
    for (int t = 0; t < 2 * P; t++) xt[t] = x + (size_t)(t < nt ? t : nt - 1) * xs;
    __m256 acc[QP];
    _Pragma("GCC unroll 3")
    for (int j = 0; j < P; j++) acc[j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        __m256i w[QR], aw[QR];
        uint64_t dh = 0;   /* the rows' fp16 scales */
        _Pragma("GCC unroll 4")
        for (int r = 0; r < QR; r++) {
            w[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + off + Q8_0_QS));
            aw[r] = _mm256_sign_epi8(w[r], w[r]);
            dh |= (uint64_t)rd_u16(wr[r] + off) << 16 * r;
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_set1_epi64x((long long)dh));   /* rows 0-3 in both halves */
        _Pragma("GCC unroll 3")
        for (int j = 0; j < P; j++) {
            const uint8_t *x0 = xt[2 * j] + off, *x1 = xt[2 * j + 1] + off;
            const __m256i g0 = q8_rows4(w, aw, x0 + Q8_0_QS), g1 = q8_rows4(w, aw, x1 + Q8_0_QS);
            const __m256i s = _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
            const __m256 dx = _mm256_set_m128(_mm_set1_ps(x86_f16(x1)), _mm_set1_ps(x86_f16(x0)));
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(s), acc[j]);
        }
    }
    _Pragma("GCC unroll 3")
    for (int j = 0; j < P; j++) {
        _Alignas(32) float v[8];
        _mm256_store_ps(v, acc[j]);
        for (int h = 0; h < 2 && 2 * j + h < nt; h++)
            for (int r = 0; r < nr; r++) y[(2 * j + h) * ldy + r] = v[4 * h + r];
    }
}

static void gemm_q8_0_blk(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    int64_t tc = (int64_t)(CHUNK_BYTES / (xs ? xs : 1)) / (2 * QP) * (2 * QP);
    if (tc < 2 * QP) tc = 2 * QP;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
        const int64_t nt = n_tok - t0 < tc ? n_tok - t0 : tc;
        const uint8_t *xc = X + (size_t)t0 * xs;
        for (int64_t r0 = 0; r0 < n_rows; r0 += QR) {
            const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
            const uint8_t *wr[QR];
            for (int r = 0; r < QR; r++) wr[r] = W + (size_t)(r0 + (r < nr ? r : nr - 1)) * ws;
            float *yc = y + t0 * ldy + r0;
            int64_t t = 0;
            for (; t + 2 * QP <= nt; t += 2 * QP) q8_tile(QP, nb, wr, nr, xc + t * xs, xs, 2 * QP, yc + t * ldy, ldy);
            const int left = (int)(nt - t);
            switch ((left + 1) / 2) {
            case 3: q8_tile(3, nb, wr, nr, xc + t * xs, xs, left, yc + t * ldy, ldy); break;
            case 2: q8_tile(2, nb, wr, nr, xc + t * xs, xs, left, yc + t * ldy, ldy); break;
            case 1: q8_tile(1, nb, wr, nr, xc + t * xs, xs, left, yc + t * ldy, ldy); break;
            default: break;
            }
        }
    }
}

void rt_fill_q8blk_avx2(tensor_kernels *k) {
    k->vec_dot[GGUF_T_Q8_0] = dot_q8_0_blk;
    k->vec_dot4[GGUF_T_Q8_0] = dot4_q8_0_blk;
    k->gemv[GGUF_T_Q8_0] = (tensor_gemv){ gemv_q8_0_blk, 8, NULL, 0, NULL, 0 };
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0_blk;
    k->gemm_q8_0_r16 = NULL;   /* the base table's is ggml's order */
}
