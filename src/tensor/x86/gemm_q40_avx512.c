/* gemm_q40_avx512.c — tiles of Q4_0 weight rows × Q8_0 activation rows (tensor.h, gemm).
 *
 * Every output element performs exactly the AVX-512 table's dot_q4_0 (dot_avx512.c): per
 * pair of blocks (2i, 2i+1), 16 int32 lanes (lanes 0-7: block 2i, 8-15: block 2i+1, each the
 * exact sum of 4 byte products in the dot's element order) converted to float and added with
 * one FMA scaled by dup2(dw·dx of block 2i, of block 2i+1) into one 16-lane accumulator;
 * then hsum512 (lo256 + hi256, x86_hsum_ps), then an odd last block added as the 8-lane
 * hsum of its scaled lanes. Only the integer route and the layout differ:
 *  - the weight nibbles are unpacked once to signed bytes q − 8 and the activation bytes
 *    are made unsigned (y + 128), so dpbusd starting from −128·Σ4 (q − 8) gives Σ4 (q − 8)·y
 *    exactly (the dot's dpbusd(q, y) − dpbusd(8, y) is the same integer);
 *  - a tile of GR rows × GT tokens (one 16-lane accumulator each) shares each unpacked
 *    weight pair over GT tokens and each activation pair over GR rows;
 *  - from PMIN_TOK tokens on, the weight side of a row tile (signed bytes, the dpbusd start,
 *    the scales as floats) is computed once per call into a stack panel (≤ 192 KB, L2) and
 *    every token tile reads it from there.
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define GR 4   /* rows per tile */
#define GT 4   /* tokens per tile */

#define PMAXP 256      /* block pairs per panel buffer (16384 elements) */
#define PMIN_TOK 8     /* fewer tokens do not pay for the packing */

/* The weight side of one block pair of one row: signed bytes q − 8 (block 2i in bytes 0-31,
 * 2i+1 in 32-63, each as [16 low nibbles, 16 high nibbles]: the dot's element order), the
 * dpbusd start −128·Σ4 (q − 8), and the two fp16 scales as floats (lanes 0-7, 8-15). An odd
 * last block uses the low halves only (the high halves zero). */
typedef struct q4_pair {
    __m512i w, nc;
    __m512  dw;
} q4_pair;

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: x86_f16's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

static inline __m512 dup2_h(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(p0), _mm256_castsi256_si128(bcast_h(p1)), 1));
}

/* 16 nibble bytes at p -> 32 bytes [low nibbles, high nibbles] minus 8. */
static inline __m256i nib_signed(const uint8_t *p) {
    return _mm256_sub_epi8(x86_unpack_nib16(p), _mm256_set1_epi8(8));
}

/* Blocks a (and a + Q4_0_BYTES when two) of one row. */
static inline __attribute__((always_inline)) q4_pair load_pair(const uint8_t *a, bool two) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    q4_pair q;
    const __m256i lo = nib_signed(a + Q4_0_QS);
    if (two) {
        q.w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), nib_signed(a + Q4_0_BYTES + Q4_0_QS), 1);
        q.dw = dup2_h(a, a + Q4_0_BYTES);
    } else {
        q.w = _mm512_zextsi256_si512(lo);
        q.dw = _mm512_zextps256_ps512(_mm256_cvtph_ps(_mm_set1_epi16((short)rd_u16(a))));
    }
    q.nc = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, q.w));
    return q;
}

/* The activation side of one block pair of one token: bytes y + 128 and the scales. */
static inline __attribute__((always_inline)) void load_x(const uint8_t *b, __m512i *xu, __m512 *dx) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + Q8_0_QS))),
                                         _mm256_loadu_si256((const __m256i *)(b + Q8_0_BYTES + Q8_0_QS)), 1);
    *xu = _mm512_xor_si512(y, bias);
    *dx = dup2_h(b, b + Q8_0_BYTES);
}

/* R rows × T tokens over every block; y[t * ldy + r]. The weight side comes from the panel
 * pk (GR rows per pair) when given, else it is unpacked from the rows wr here. */
static inline __attribute__((always_inline)) void tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                        const q4_pair *pk, bool use_pk, const uint8_t *x, size_t xs,
                                                        float *y, int64_t ldy) {
    __m512 acc[GR][GT];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
    const int64_t np = nb / 2;
    for (int64_t i = 0; i < np; i++) {
        __m512i xu[GT];
        __m512 dx[GT];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) load_x(x + t * xs + (size_t)i * 2 * Q8_0_BYTES, &xu[t], &dx[t]);
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const q4_pair q = use_pk ? pk[i * GR + r] : load_pair(wr[r] + (size_t)i * 2 * Q4_0_BYTES, true);
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const __m512 pf = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(q.nc, xu[t], q.w));
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(q.dw, dx[t]), pf, acc[r][t]);
            }
        }
    }
    float s[GR][GT];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            s[r][t] = x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), _mm512_extractf32x8_ps(acc[r][t], 1)));
    if (nb & 1) {   /* the dot's odd last block: its 8 scaled lanes summed, then added */
        const __m256i bias = _mm256_set1_epi8((char)0x80);
        for (int r = 0; r < R; r++) {
            const q4_pair q = use_pk ? pk[np * GR + r] : load_pair(wr[r] + (size_t)np * 2 * Q4_0_BYTES, false);
            for (int t = 0; t < T; t++) {
                const uint8_t *b = x + t * xs + (size_t)np * 2 * Q8_0_BYTES;
                const __m256i xu = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)), bias);
                const __m256i p = _mm256_dpbusd_epi32(_mm512_castsi512_si256(q.nc), xu, _mm512_castsi512_si256(q.w));
                const __m256 d = _mm256_mul_ps(_mm512_castps512_ps256(q.dw), _mm256_cvtph_ps(_mm_set1_epi16((short)rd_u16(b))));
                s[r][t] += x86_hsum_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(p)));
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) y[t * ldy + r] = s[r][t];
}

/* One row tile (R rows) over every token, GT at a time, then the token tail. */
static inline __attribute__((always_inline)) void row_tile(int R, int64_t nb, const uint8_t *const *wr,
                                                            const q4_pair *pk, bool use_pk, const uint8_t *x, size_t xs,
                                                            int64_t n_tok, float *y, int64_t ldy) {
    int64_t t = 0;
    for (; t + GT <= n_tok; t += GT) tile(R, GT, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: tile(R, 3, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 2: tile(R, 2, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    case 1: tile(R, 1, nb, wr, pk, use_pk, x + t * xs, xs, y + t * ldy, ldy); break;
    default: break;
    }
}

static void pack_panel(q4_pair *pk, int64_t nb, const uint8_t *const *wr) {
    for (int64_t i = 0; i < nb / 2; i++)
        for (int r = 0; r < GR; r++) pk[i * GR + r] = load_pair(wr[r] + (size_t)i * 2 * Q4_0_BYTES, true);
    if (nb & 1)
        for (int r = 0; r < GR; r++) pk[nb / 2 * GR + r] = load_pair(wr[r] + (size_t)(nb / 2) * 2 * Q4_0_BYTES, false);
}

static void panel_rows(int64_t nb, const uint8_t *const *wr, const uint8_t *x, size_t xs, int64_t n_tok, float *y,
                       int64_t ldy, q4_pair *pk) {
    pack_panel(pk, nb, wr);
    row_tile(GR, nb, wr, pk, true, x, xs, n_tok, y, ldy);
}

static void gemm_q4_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK4_0;
    const uint8_t *wr[GR];
    const bool packed = (nb + 1) / 2 <= PMAXP && n_tok >= PMIN_TOK;
    _Alignas(64) q4_pair pk[PMAXP * GR];   /* 192 KB, only touched when packed */
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR) {
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r + i) * ws;
        if (packed) panel_rows(nb, wr, X, xs, n_tok, y + r, ldy, pk);
        else row_tile(GR, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy);
    }
    for (int i = 0; r + i < n_rows; i++) wr[i] = W + (size_t)(r + i) * ws;
    switch (n_rows - r) {
    case 3: row_tile(3, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    case 2: row_tile(2, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    case 1: row_tile(1, nb, wr, NULL, false, X, xs, n_tok, y + r, ldy); break;
    default: break;
    }
}

void rt_fill_gemm_q40_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q4_0] = gemm_q4_0;
}
