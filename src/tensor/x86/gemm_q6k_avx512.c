/* gemm_q6k_avx512.c — tiles of Q6_K weight rows × Q8_K activation rows (tensor.h, gemm).
 *
 * Every output element performs exactly rt_dot_q6_K's operations (dot_ref.c): per block the
 * exact integer sum Σ_s sc[s]·(Σ q·y − 32·bsum[s]) over the 16 sub-blocks of 16 (q = the
 * unsigned 6-bit value, 0..63), then acc = fma(sum, d·yd, acc), blocks in order. The layout
 * is gemm_q4k_avx512.c's: a panel of 16 rows is unpacked once per call into a stack buffer
 * with one int32 lane per row (group g: elements 4g..4g+3 of each row as bytes), so one
 * vpdpbusd (u8 × s8, exact) advances 16 output elements by 4 products; scales are int32
 * lanes (vpmulld, exact); a register tile of 16 rows × QT tokens shares every panel load,
 * and where two panels fit the buffer a tile of 32 rows shares every activation broadcast
 * over both (gemm_q4k_avx512.c; one thread, 512 tokens, a bench outside the repo: 1024 x
 * 2048 540 -> 595 GOP/s, 3584 x 1024 522 -> 608, same bits).
 * Any n (a multiple of 256; rows longer than QMAXB blocks, or calls of fewer than QT
 * tokens, take the dot), any row and token counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define QR 16      /* weight rows per panel: one per int32 lane */
#define QT 4       /* tokens per register tile */
_Static_assert(QT == 4, "X86_TOKEN_TILES runs tiles of 4 tokens");
#define QMAXB 48   /* blocks per panel buffer (12288 elements) */

/* One Q6_K block of 16 rows, unpacked (5184 bytes, a multiple of 64). */
typedef struct q6k_pblk {
    uint8_t q[64][64];    /* [group g][row r][4]: elements 4g..4g+3 of row r, 0..63 */
    int32_t sc[16][QR];   /* scale of sub-block s, per row */
    float   d[QR];
} q6k_pblk;

/* Unpacks block b of rows W, W + ws, ... (nr of them; the missing rows repeat the last). */
static void pack_block(q6k_pblk *p, const uint8_t *W, size_t ws, int nr, int64_t b) {
    int32_t offs[QR];
    for (int r = 0; r < QR; r++) {
        const uint8_t *a = W + (size_t)(r < nr ? r : nr - 1) * ws + (size_t)b * Q6_K_BYTES;
        offs[r] = (int32_t)(a - W);
        for (int s = 0; s < 16; s++) p->sc[s][r] = (int8_t)a[Q6_K_SCALES + s];
        p->d[r] = x86_f16(a + Q6_K_D);
    }
    const __m512i vi = _mm512_loadu_si512(offs), m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; h++)   /* half h: elements 128h + 32p + l from ql, qh bits 2p */
        for (int k = 0; k < 8; k++) {
            const __m512i A = _mm512_i32gather_epi32(vi, W + Q6_K_QL + 64 * h + 4 * k, 1);
            const __m512i B = _mm512_i32gather_epi32(vi, W + Q6_K_QL + 64 * h + 32 + 4 * k, 1);
            const __m512i H = _mm512_i32gather_epi32(vi, W + Q6_K_QH + 32 * h + 4 * k, 1);
            const __m512i lo[4] = { _mm512_and_si512(A, m4), _mm512_and_si512(B, m4),
                                    _mm512_and_si512(_mm512_srli_epi16(A, 4), m4),
                                    _mm512_and_si512(_mm512_srli_epi16(B, 4), m4) };
            for (int q = 0; q < 4; q++) {
                const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(H, 2 * q), m2);
                _mm512_store_si512(p->q[32 * h + 8 * q + k], _mm512_or_si512(lo[q], _mm512_slli_epi16(hb, 4)));
            }
        }
}

/* 16 rows × T tokens over nb blocks; y[t * ldy + r] for the rows in `rows`. */
static inline __attribute__((always_inline)) void tile(int T, int64_t nb, const q6k_pblk *pk, const uint8_t *x,
                                                        size_t xs, float *y, int64_t ldy, __mmask16 rows) {
    __m512 acc[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q6k_pblk *p = pk + b;
        const uint8_t *xb[QT];
        __m512i blk[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
        for (int s = 0; s < 16; s++) {
            __m512i si[QT];
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) si[t] = _mm512_set1_epi32(-32 * rd_i16(xb[t] + Q8_K_BSUMS + 2 * s));
            _Pragma("GCC unroll 4")
            for (int k = 0; k < 4; k++) {
                const __m512i w = _mm512_load_si512(p->q[4 * s + k]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    int32_t v;
                    memcpy(&v, xb[t] + Q8_K_QS + 16 * s + 4 * k, 4);
                    si[t] = _mm512_dpbusd_epi32(si[t], w, _mm512_set1_epi32(v));
                }
            }
            const __m512i sc = _mm512_load_si512(p->sc[s]);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const __m512i v = _mm512_mullo_epi32(si[t], sc);
                blk[t] = s ? _mm512_add_epi32(blk[t], v) : v;
            }
        }
        const __m512 d = _mm512_load_ps(p->d);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(blk[t]), _mm512_mul_ps(d, _mm512_set1_ps(rd_f32(xb[t]))), acc[t]);
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, rows, acc[t]);
}

/* 32 rows (panels pa, pb) × T tokens over nb blocks: the 16-row tile's operations on each
 * output element, the two panels sharing each activation broadcast (half the broadcasts of
 * two 16-row tiles, and 2T independent dpbusd chains). y[t * ldy + r] for r < 16 + the rows
 * in `rows_b`. */
static inline __attribute__((always_inline)) void tile2(int T, int64_t nb, const q6k_pblk *pa, const q6k_pblk *pb,
                                                         const uint8_t *x, size_t xs, float *y, int64_t ldy,
                                                         __mmask16 rows_b) {
    __m512 acc0[QT], acc1[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc0[t] = acc1[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q6k_pblk *p0 = pa + b, *p1 = pb + b;
        const uint8_t *xb[QT];
        __m512i blk0[QT], blk1[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
        for (int s = 0; s < 16; s++) {
            __m512i s0[QT], s1[QT];
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) s0[t] = s1[t] = _mm512_set1_epi32(-32 * rd_i16(xb[t] + Q8_K_BSUMS + 2 * s));
            x86_dpbusd_2panels(T, 4, p0->q + 4 * s, p1->q + 4 * s, xb, Q8_K_QS + 16 * s, s0, s1);
            x86_scale_2panels(T, s == 0, s0, s1, _mm512_load_si512(p0->sc[s]), _mm512_load_si512(p1->sc[s]), blk0, blk1);
        }
        const __m512 d0 = _mm512_load_ps(p0->d), d1 = _mm512_load_ps(p1->d);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const __m512 yd = _mm512_set1_ps(rd_f32(xb[t]));
            acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(blk0[t]), _mm512_mul_ps(d0, yd), acc0[t]);
            acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(blk1[t]), _mm512_mul_ps(d1, yd), acc1[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        _mm512_storeu_ps(y + t * ldy, acc0[t]);
        _mm512_mask_storeu_ps(y + t * ldy + QR, rows_b, acc1[t]);
    }
}

void rt_gemm_q6_K_avx512(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    if (nb > QMAXB || n_tok < QT) {   /* no room, or too few tokens to pay for the unpacking */
        x86_gemm_by_dot(rt_dot_q6_K_avx512, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    _Alignas(64) q6k_pblk pk[QMAXB];
    int64_t r0 = 0;
    for (; 2 * nb <= QMAXB && n_rows - r0 > QR; r0 += 2 * QR) {   /* 32 rows while two panels fit */
        const int nr = n_rows - r0 - QR < QR ? (int)(n_rows - r0 - QR) : QR;
        const __mmask16 rows_b = (__mmask16)((1u << nr) - 1);
        for (int64_t b = 0; b < nb; b++) {
            pack_block(&pk[b], W + (size_t)r0 * ws, ws, QR, b);
            pack_block(&pk[nb + b], W + (size_t)(r0 + QR) * ws, ws, nr, b);
        }
        float *yr = y + r0;
#define TILE2(T, t) tile2(T, nb, pk, pk + nb, X + (t) * xs, xs, yr + (t) * ldy, ldy, rows_b)
        X86_TOKEN_TILES(n_tok, TILE2);
#undef TILE2
    }
    for (; r0 < n_rows; r0 += QR) {
        const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const __mmask16 rows = (__mmask16)((1u << nr) - 1);
        for (int64_t b = 0; b < nb; b++) pack_block(&pk[b], W + (size_t)r0 * ws, ws, nr, b);
        float *yr = y + r0;
#define TILE1(T, t) tile(T, nb, pk, X + (t) * xs, xs, yr + (t) * ldy, ldy, rows)
        X86_TOKEN_TILES(n_tok, TILE1);
#undef TILE1
    }
}
