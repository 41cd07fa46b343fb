/* gemm_q4k_avx2.c — AVX2 tiles of Q4_K weight rows × Q8_K activation rows in the order of
 * ggml's repacked gemm (tensor.h, gemm_q4_K_rp; rt_dot_q4_K_rp), for CPUs without AVX-512;
 * Q5_K rows in the same order (gemm[Q5_K], rt_dot_q5_K_rp) on the same tiles, in the file's
 * layout or packed 16 rows to a group (gemm_q5_K_r16: the panels straight from the packed
 * runs, without the file layout's gathers: 3072 x 1024, 512 tokens, 2 threads, 192-193
 * against 181-185 GFLOP/s).
 *
 * Every output element performs exactly rt_dot_q4_K_rp's operations: per 64-element chunk j
 * the exact integer sum sc[2j]·Σ q·y + sc[2j+1]·Σ q·y and the exact min sum
 * m[2j]·(bs0+bs1) + m[2j+1]·(bs2+bs3), then acc = fma(chunk, d·yd, acc) and
 * accm = fma(min, dmin·yd, accm) chunk by chunk, blocks in order; result acc − accm. The
 * layout is gemm_q4k_avx512.c's with 8 rows a panel (one int32 lane per row) and no VNNI:
 *  - per sub-block (8 groups of 4 elements) and token, maddubs of the panel's nibble bytes
 *    (u8 <= 15) and the token's 4 activation bytes broadcast (s8) gives int16 pair sums
 *    (|.| <= 2·15·128), added over the 8 groups in int16 (|.| <= 30720: exact); one madd with
 *    the sub-block's scale in both words of a lane then gives row r's exact scaled sum;
 *  - the min sums are one madd of the rows' (m[2j], m[2j+1]) pairs with the token's bsum pair;
 *  - a register tile of 8 rows × QT tokens shares each panel load over QT tokens; the panel
 *    (<= 40 KB) stays in L1 while the call's tokens pass.
 * Q5_K (gemm[Q5_K]): before, the AVX2 table's Q5_K order kept 8 + 8 float lanes per output
 * (its dot's), and its gemm tiles of those; RECUR_ISA=avx2 recur-bench pp512 -r 2, qwen3-0.6b
 * Q5_K_M, two alternating rounds: 177-182 -> 270-274 t/s (tg128 unchanged within noise,
 * 59-75 both ways over five rounds: the single-token kernel is gemv_avx2.c's Q4_K one).
 * Rows longer than QPB blocks go in pieces (gemm_q4k_pieces); calls of fewer than QT tokens
 * take the dot. Any row and token counts, unaligned rows and strides; row offsets within a
 * panel must fit in int32. */
#include <stdlib.h>

#include "tensor/x86/simd_x86.h"

#define QR 8       /* weight rows per panel: one per int32 lane */
#define QT 3       /* tokens per register tile (AVX2 has 16 vector registers) */
#define QPB 16     /* blocks per panel (4096 elements, 40 KB: L1); longer rows go in pieces */

/* One Q4_K block of 8 rows, unpacked (2496 bytes, a multiple of 32). */
typedef struct q4k_pblk {
    uint8_t q[64][32];   /* [group 8s + k][row r][4]: elements 4k..4k+3 of sub-block s (nibbles) */
    int32_t sc[8][QR];   /* scale of sub-block s, in both 16-bit halves */
    int32_t m[4][QR];    /* chunk j: m[2j] | m[2j+1] << 16 */
    float   d[QR], dmin[QR];
} q4k_pblk;

/* Row r of a panel block from the row's 12 scale bytes at q and its d, dmin. */
static inline void put_row_fields(q4k_pblk *p, int r, const uint8_t *q, float d, float dmin) {
    uint64_t sc, mm;
    rt_k4_scales_u64(q, &sc, &mm);
    for (int s = 0; s < 8; s++) {
        const int32_t v = (int32_t)((sc >> (8 * s)) & 0xFF);
        p->sc[s][r] = v | v << 16;
    }
    for (int j = 0; j < 4; j++)
        p->m[j][r] = (int32_t)((mm >> (16 * j)) & 0xFF) | (int32_t)((mm >> (16 * j + 8)) & 0xFF) << 16;
    p->d[r] = d;
    p->dmin[r] = dmin;
}

/* Unpacks block b of rows row[0..8) into p (q5: Q5_K rows, each value's fifth bit joined to
 * its nibble: bit 2j of qh byte l to chunk j's low nibble l, bit 2j+1 to its high one). vi: the
 * rows' offsets from row[0]. */
static void pack_block(q4k_pblk *p, const uint8_t *const *row, __m256i vi, int64_t b, bool q5) {
    const size_t off = (size_t)b * (q5 ? Q5_K_BYTES : Q4_K_BYTES);
    for (int r = 0; r < QR; r++) {
        const uint8_t *a = row[r] + off;
        put_row_fields(p, r, a + Q4_K_SCALES, x86_f16(a), x86_f16(a + Q4_K_DMIN));
    }
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    const uint8_t *qs = row[0] + off + (q5 ? Q5_K_QS : Q4_K_QS), *qh = row[0] + off + Q5_K_QH;
    __m256i h[8];
    for (int k = 0; q5 && k < 8; k++) h[k] = _mm256_i32gather_epi32((const int *)(qh + 4 * k), vi, 1);
    for (int j = 0; j < 4; j++)      /* chunk j: low nibbles = sub-block 2j, high = 2j+1 */
        for (int k = 0; k < 8; k++) {
            const __m256i g = _mm256_i32gather_epi32((const int *)(qs + 32 * j + 4 * k), vi, 1);
            __m256i lo = _mm256_and_si256(g, lo4), hi = _mm256_and_si256(_mm256_srli_epi16(g, 4), lo4);
            if (q5) {
                lo = _mm256_or_si256(lo, x86_bit_to_4(h[k], 2 * j));
                hi = _mm256_or_si256(hi, x86_bit_to_4(h[k], 2 * j + 1));
            }
            _mm256_store_si256((__m256i *)p->q[16 * j + k], lo);
            _mm256_store_si256((__m256i *)p->q[16 * j + 8 + k], hi);
        }
}

/* The same panel block from rows 8·half..8·half+7 of a packed 16-row run at h (tensor.h
 * tensor_q4_K_r16_pack, q5: tensor_q5_K_r16f_pack): a packed vector's half is already a panel
 * group (4 bytes a row, 8 rows), so no gathers; Q5_K's values come whole from its five-byte
 * runs. */
static void pack_block_r16(q4k_pblk *p, const uint8_t *h, int half, bool q5) {
    for (int r = 0; r < QR; r++) {
        uint8_t q[12];
        for (int k = 0; k < 12; k++) q[k] = h[R16_SCALES + 16 * k + QR * half + r];
        put_row_fields(p, r, q, 0.0f, 0.0f);
    }
    _mm256_store_ps(p->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_D + 16 * half))));
    _mm256_store_ps(p->dmin, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + R16_DMIN + 16 * half))));
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (int j = 0; j < 4; j++)
        _Pragma("GCC unroll 8")
        for (int k = 0; k < 8; k++) {
            __m256i lo, hi;
            if (q5) {
                x86_q5f_values(h, j, k, half, &lo, &hi);
            } else {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(h + R16_QS + 64 * (8 * j + k) + 32 * half));
                lo = _mm256_and_si256(v, lo4);
                hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
            }
            _mm256_store_si256((__m256i *)p->q[16 * j + k], lo);
            _mm256_store_si256((__m256i *)p->q[16 * j + 8 + k], hi);
        }
}

/* Block b of the 8-row panel at row r0 into p: from the file's rows (row, vi) or, r16, from
 * the packed group holding them. */
static inline __attribute__((always_inline)) void fill_panel(bool q5, bool r16, q4k_pblk *p, const uint8_t *W,
                                                             size_t ws, int64_t r0, const uint8_t *const *row,
                                                             __m256i vi, int64_t b) {
    if (r16)
        pack_block_r16(p,
                       W + (size_t)(r0 / TENSOR_R16_ROWS) * TENSOR_R16_ROWS * ws +
                           (size_t)b * (q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK),
                       (int)(r0 / QR) & 1, q5);
    else
        pack_block(p, row, vi, b, q5);
}

/* A token's two chains between the pieces of a row (gemm_q4k_pieces). */
typedef struct q4k_park {
    __m256 acc, accm;
} q4k_park;

/* 8 rows × T tokens over nb blocks; y[t * ldy + r] for r < nr. With park (the T tokens'
 * places), the chains start from it unless `first` and go back to it unless `last`. q5: the
 * panel holds five-bit values, whose int16 pair sums (<= 2·31·128) fit four to a word, not
 * eight: each sub-block's two halves are scaled apart and added in int32 (exact either way). */
static inline __attribute__((always_inline)) void tile(bool q5, int T, int64_t nb, const q4k_pblk *pk,
                                                        const uint8_t *x, size_t xs, float *y, int64_t ldy, int nr,
                                                        q4k_park *park, bool first, bool last) {
    __m256 acc[QT], accm[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        acc[t] = park && !first ? park[t].acc : _mm256_setzero_ps();
        accm[t] = park && !first ? park[t].accm : _mm256_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const q4k_pblk *p = pk + b;
        const uint8_t *xb[QT];
        __m256 dt[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* the min chain first: its chunks in order */
            xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
            const __m256 yd = _mm256_set1_ps(rd_f32(xb[t]));
            dt[t] = _mm256_mul_ps(_mm256_load_ps(p->d), yd);
            const __m256 dm = _mm256_mul_ps(_mm256_load_ps(p->dmin), yd);
            int32_t pp[4];
            x86_q8k_pair_sums(xb[t], pp);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m256i ms = _mm256_madd_epi16(_mm256_load_si256((const __m256i *)p->m[j]), _mm256_set1_epi32(pp[j]));
                accm[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ms), dm, accm[t]);
            }
        }
        for (int j = 0; j < 4; j++) {
            __m256i cs[QT];
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                const int s = 2 * j + h;
                __m256i s16[QT], part[QT];
                const __m256i sc = _mm256_load_si256((const __m256i *)p->sc[s]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) s16[t] = _mm256_setzero_si256();
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++) {
                    const __m256i w = _mm256_load_si256((const __m256i *)p->q[8 * s + k]);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) {
                        int32_t v;
                        memcpy(&v, xb[t] + Q8_K_QS + 32 * s + 4 * k, 4);
                        s16[t] = _mm256_add_epi16(s16[t], _mm256_maddubs_epi16(w, _mm256_set1_epi32(v)));
                    }
                    if (q5 && k == 3) {
                        _Pragma("GCC unroll 4")
                        for (int t = 0; t < T; t++) {
                            part[t] = _mm256_madd_epi16(s16[t], sc);
                            s16[t] = _mm256_setzero_si256();
                        }
                    }
                }
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    __m256i v = _mm256_madd_epi16(s16[t], sc);
                    if (q5) v = _mm256_add_epi32(part[t], v);
                    cs[t] = h ? _mm256_add_epi32(cs[t], v) : v;
                }
            }
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(cs[t]), dt[t], acc[t]);
        }
    }
    if (park && !last) {
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) park[t] = (q4k_park){ acc[t], accm[t] };
        return;
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        _Alignas(32) float v[QR];
        _mm256_store_ps(v, _mm256_sub_ps(acc[t], accm[t]));
        for (int r = 0; r < nr; r++) y[t * ldy + r] = v[r];
    }
}

/* Every token of the call (QT a tile, then the rest) through a panel of nb blocks. */
static inline __attribute__((always_inline)) void panel_tokens_k(bool q5, int64_t nb, const q4k_pblk *pk,
                                                                  const uint8_t *X, size_t xs, int64_t n_tok, float *y,
                                                                  int64_t ldy, int nr, q4k_park *park, bool first,
                                                                  bool last) {
    int64_t t = 0;
    for (; t + QT <= n_tok; t += QT)
        tile(q5, QT, nb, pk, X + t * xs, xs, y + t * ldy, ldy, nr, park ? park + t : NULL, first, last);
    switch (n_tok - t) {
    case 2: tile(q5, 2, nb, pk, X + t * xs, xs, y + t * ldy, ldy, nr, park ? park + t : NULL, first, last); break;
    case 1: tile(q5, 1, nb, pk, X + t * xs, xs, y + t * ldy, ldy, nr, park ? park + t : NULL, first, last); break;
    default: break;
    }
}

static void panel_tokens(bool q5, int64_t nb, const q4k_pblk *pk, const uint8_t *X, size_t xs, int64_t n_tok, float *y,
                         int64_t ldy, int nr, q4k_park *park, bool first, bool last) {
    if (q5) panel_tokens_k(true, nb, pk, X, xs, n_tok, y, ldy, nr, park, first, last);
    else panel_tokens_k(false, nb, pk, X, xs, n_tok, y, ldy, nr, park, first, last);
}

/* Rows longer than QPB blocks: each panel's blocks a piece of QPB at a time, every token
 * through the piece, the tokens' chains parked between the pieces (64 bytes a token); the
 * chains step through the blocks in order, so the bits are one pass's. A piece of the panel
 * (40 KB) stays in L1 while the tokens pass, where a whole panel of 48 blocks (120 KB) came
 * from L2 for each tile. Before, rows past 48 blocks (a 7B-14B model's down-projection,
 * 14336-18944 elements) took the dot: RECUR_ISA=avx2, 256 rows, 256 tokens, 2 threads, the
 * file's layout (/tmp/s16/mmn.c outside the repo, best of 3): 14336 18.5 -> 7.3 ms, 12288
 * 6.6 -> 6.3. Packed Q4_K rows take the several-token kernel instead (gemv_q4k16_avx2.c:
 * 14336, 5.2-5.9 ms), so this serves RECUR_NO_REPACK. Returns false without memory for the
 * park. */
static bool gemm_q4k_pieces(bool q5, bool r16, int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows,
                            const uint8_t *X, size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    q4k_park *park = aligned_alloc(32, (size_t)n_tok * sizeof *park);
    if (!park) return false;
    _Alignas(32) q4k_pblk pk[QPB];
    for (int64_t r0 = 0; r0 < n_rows; r0 += QR) {
        const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const uint8_t *row[QR];
        const __m256i vi = r16 ? _mm256_setzero_si256() : x86_panel8_rows(W, ws, r0, nr, row);
        for (int64_t b0 = 0; b0 < nb; b0 += QPB) {
            const int64_t len = nb - b0 < QPB ? nb - b0 : QPB;
            for (int64_t b = 0; b < len; b++) fill_panel(q5, r16, &pk[b], W, ws, r0, row, vi, b0 + b);
            panel_tokens(q5, len, pk, X + (size_t)b0 * Q8_K_BYTES, xs, n_tok, y + r0, ldy, nr, park, b0 == 0,
                         b0 + len == nb);
        }
    }
    free(park);
    return true;
}

static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy);

/* Q4_K or (q5) Q5_K rows, in the file's layout or (r16, Q5_K only) packed 16 rows to a group
 * (n_rows a multiple of 16). Packed Q4_K rows have no gemm here: the several-token kernel
 * (gemv_q4k16_avx2.c) was faster at every count (panels from the packed rows, 3072 x 1024, 2
 * threads, best of 3: 96 tokens about equal, 512 tokens 137-171 against 149-199 GFLOP/s). */
static inline __attribute__((always_inline)) void gemm_k4(bool q5, bool r16, int64_t n, const uint8_t *W, size_t ws,
                                                          int64_t n_rows, const uint8_t *X, size_t xs, int64_t n_tok,
                                                          float *y, int64_t ldy) {
    const int64_t nb = n / QK_K;
    if (n_tok >= QT && nb > QPB && gemm_q4k_pieces(q5, r16, nb, W, ws, n_rows, X, xs, n_tok, y, ldy)) return;
    if (nb > QPB || n_tok < QT) {   /* too few tokens to pay for the panel (or no memory): the dot */
        if (r16)
            x86_gemm_r16_unpacked(tensor_q5_K_r16f_unpack, gemm_q5_K, rt_dot_q5_K_r16f, n, W, ws, n_rows, X, xs, n_tok,
                                  y, ldy);
        else
            x86_gemm_by_dot(q5 ? rt_dot_q5_K_rp_avx2 : rt_dot_q4_K_rp_avx2, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    _Alignas(32) q4k_pblk pk[QPB];
    for (int64_t r0 = 0; r0 < n_rows; r0 += QR) {
        const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const uint8_t *row[QR];
        const __m256i vi = r16 ? _mm256_setzero_si256() : x86_panel8_rows(W, ws, r0, nr, row);
        for (int64_t b = 0; b < nb; b++) fill_panel(q5, r16, &pk[b], W, ws, r0, row, vi, b);
        panel_tokens(q5, nb, pk, X, xs, n_tok, y + r0, ldy, nr, NULL, true, true);
    }
}

static void gemm_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy) {
    gemm_k4(false, false, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* The AVX2 table's gemm[Q5_K] (rt_dot_q5_K_rp's order): these tiles over Q5_K panels. */
static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    gemm_k4(true, false, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* Q5_K rows packed 16 to a group at load (tensor.h gemm_q5_K_r16): the panels straight from
 * the packed runs, no unpacking (tensor.h MM_R16 path's scalar reshuffle). */
static void gemm_q5_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    gemm_k4(true, true, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

void rt_fill_gemm_q4k_avx2(tensor_kernels *k) {
    k->gemm_q4_K_rp = gemm_q4_K_rp;
    k->gemm[GGUF_T_Q5_K] = gemm_q5_K;
    k->gemm_q5_K_r16 = gemm_q5_K_r16;
}
