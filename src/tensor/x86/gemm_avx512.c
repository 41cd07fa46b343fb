/* gemm_avx512.c — tiles of Q8_0 weight rows × Q8_0 activation rows (tensor.h, gemm).
 *
 * Every output element performs exactly dot_q8_0's operations (tensor_impl.h, the Q8_0 order):
 * per block in order, 8 int32 lanes (exact sums of 4 byte products) converted to float and
 * added with one FMA scaled by the product of the two fp16 scales (exact in float), into one
 * 8-lane accumulator; the 8 lanes reduced at the end as x86_hsum_ps. Only the layout differs:
 *  - a 512-bit register holds the same block of two weight rows (rows 2p, 2p+1: lanes 0-7,
 *    8-15), so each vector FMA steps two output elements;
 *  - the activation block (signed bytes x) is broadcast to both halves as x + 128 (unsigned)
 *    and dpbusd starts from -128 · Σ4 w, which gives Σ4 x·w exactly (integers);
 *  - a tile of GP row pairs × GT tokens shares each weight load over GT tokens and each
 *    activation load over GP pairs; a row tile stays in L1 while every token passes;
 *  - from PMIN_TOK tokens on, the weight side of a row tile (joined pair, its dpbusd start,
 *    its scales as floats) is computed once per call into a stack panel (≤ 384 KB, L2) and
 *    every token tile reads it from there (packed panels, below).
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define GP 4   /* row pairs per tile */
#define GT 4   /* tokens per tile */

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: rt_f16_to_f32's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

/* The accumulators of P pairs × T tokens over every block; y[t * ldy + row]. wr holds 2P row
 * pointers (a lone last row is given twice; its copy is not stored: `store_hi` false). */
static inline __attribute__((always_inline)) void tile(int P, int T, int64_t nb, const uint8_t *const *wr,
                                                        const uint8_t *x, size_t xs, float *y, int64_t ldy,
                                                        bool store_hi) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    __m512 acc[GP][GT];
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        __m512i xu[GT];
        __m512 dx[GT];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * xs + off;
            xu[t] = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xb + Q8_0_QS))), bias);
            dx[t] = _mm512_cvtph_ps(bcast_h(xb));
        }
        _Pragma("GCC unroll 8")
        for (int p = 0; p < P; p++) {
            const uint8_t *w0 = wr[2 * p] + off, *w1 = wr[2 * p + 1] + off;
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + Q8_0_QS))),
                                                 _mm256_loadu_si256((const __m256i *)(w1 + Q8_0_QS)), 1);
            const __m512i nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, w));
            const __m512 dw = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(w0), _mm256_castsi256_si128(bcast_h(w1)), 1));
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, xu[t], w));
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[t]), pf, acc[p][t]);
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            y[t * ldy + 2 * p] = x86_hsum_ps(_mm512_castps512_ps256(acc[p][t]));
            if (p + 1 < P || store_hi) y[t * ldy + 2 * p + 1] = x86_hsum_ps(_mm512_extractf32x8_ps(acc[p][t], 1));
        }
}

/* One row tile (P pairs) over every token, GT at a time, then the token tail. */
static inline __attribute__((always_inline)) void row_tile(int P, int64_t nb, const uint8_t *const *wr,
                                                            const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                                                            int64_t ldy, bool store_hi) {
    int64_t t = 0;
    for (; t + GT <= n_tok; t += GT) tile(P, GT, nb, wr, x + t * xs, xs, y + t * ldy, ldy, store_hi);
    switch (n_tok - t) {
    case 3: tile(P, 3, nb, wr, x + t * xs, xs, y + t * ldy, ldy, store_hi); break;
    case 2: tile(P, 2, nb, wr, x + t * xs, xs, y + t * ldy, ldy, store_hi); break;
    case 1: tile(P, 1, nb, wr, x + t * xs, xs, y + t * ldy, ldy, store_hi); break;
    default: break;
    }
}

/* ---- packed panels: what `tile` computes per row pair and block, once per call ---------- */

#define PMAXB 256      /* blocks per panel buffer (8192 elements) */
#define PMIN_TOK 8     /* fewer tokens do not pay for the packing */

/* One block of one row pair, as `tile` uses it: the joined weight bytes, −128·Σ4 w (the
 * dpbusd start) and the two fp16 scales as floats. */
typedef struct q8_pair {
    __m512i w, nc;
    __m512  dw;
} q8_pair;

static void pack_panel(q8_pair *pk, int64_t nb, const uint8_t *const *wr) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    for (int64_t b = 0; b < nb; b++)
        for (int p = 0; p < GP; p++) {
            const uint8_t *w0 = wr[2 * p] + (size_t)b * Q8_0_BYTES, *w1 = wr[2 * p + 1] + (size_t)b * Q8_0_BYTES;
            q8_pair *q = &pk[b * GP + p];
            q->w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + Q8_0_QS))),
                                      _mm256_loadu_si256((const __m256i *)(w1 + Q8_0_QS)), 1);
            q->nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q->w));
            q->dw = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(w0), _mm256_castsi256_si128(bcast_h(w1)), 1));
        }
}

/* `tile` with GP pairs and T tokens, its weight side read from a packed panel. */
static inline __attribute__((always_inline)) void ptile(int T, int64_t nb, const q8_pair *pk, const uint8_t *x,
                                                         size_t xs, float *y, int64_t ldy) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    __m512 acc[GP][GT];
    _Pragma("GCC unroll 8")
    for (int p = 0; p < GP; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        __m512i xu[GT];
        __m512 dx[GT];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * xs + off;
            xu[t] = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xb + Q8_0_QS))), bias);
            dx[t] = _mm512_cvtph_ps(bcast_h(xb));
        }
        const q8_pair *q = pk + b * GP;
        _Pragma("GCC unroll 8")
        for (int p = 0; p < GP; p++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(q[p].nc, xu[t], q[p].w));
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(q[p].dw, dx[t]), pf, acc[p][t]);
            }
    }
    _Pragma("GCC unroll 8")
    for (int p = 0; p < GP; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            y[t * ldy + 2 * p] = x86_hsum_ps(_mm512_castps512_ps256(acc[p][t]));
            y[t * ldy + 2 * p + 1] = x86_hsum_ps(_mm512_extractf32x8_ps(acc[p][t], 1));
        }
}

/* Rows r..r+2GP-1 over every token from a panel packed once. */
static void panel_rows(int64_t nb, const uint8_t *const *wr, const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                       int64_t ldy, q8_pair *pk) {
    pack_panel(pk, nb, wr);
    int64_t t = 0;
    for (; t + GT <= n_tok; t += GT) ptile(GT, nb, pk, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: ptile(3, nb, pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 2: ptile(2, nb, pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: ptile(1, nb, pk, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

static void gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    const uint8_t *wr[2 * GP];
    const bool packed = nb <= PMAXB && n_tok >= PMIN_TOK;
    _Alignas(64) q8_pair pk[PMAXB * GP];   /* 192 KB, only touched when packed */
    int64_t r = 0;
    for (; r + 2 * GP <= n_rows; r += 2 * GP) {
        for (int i = 0; i < 2 * GP; i++) wr[i] = W + (size_t)(r + i) * ws;
        if (packed) panel_rows(nb, wr, X, xs, n_tok, y + r, ldy, pk);
        else row_tile(GP, nb, wr, X, xs, n_tok, y + r, ldy, true);
    }
    for (; r < n_rows; r += 2) {   /* pairs left, then a lone row given twice */
        const bool two = r + 1 < n_rows;
        wr[0] = W + (size_t)r * ws;
        wr[1] = two ? wr[0] + ws : wr[0];
        row_tile(1, nb, wr, X, xs, n_tok, y + r, ldy, two);
    }
}

void rt_fill_gemm_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0;
}
