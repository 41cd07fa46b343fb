/* gemm_q6k_avx2.c — AVX2 tiles of Q6_K weight rows × Q8_K activation rows (tensor.h, gemm),
 * for CPUs without AVX-512.
 *
 * Every output element performs exactly rt_dot_q6_K's operations (dot_ref.c): per block the
 * exact integer sum Σ_s sc[s]·(Σ q·y − 32·bsum[s]) over the 16 sub-blocks of 16 (q the
 * unsigned 6-bit value), then acc = fma(sum, d·yd, acc), blocks in order. The layout is
 * gemm_q6k_avx512.c's with 8 rows a panel (one int32 lane per row) and no VNNI:
 *  - maddubs of the panel's bytes (q <= 63) and a token's 4 activation bytes broadcast gives
 *    int16 pair sums (|.| <= 2·63·128); two of them add in int16 (|.| <= 32256: exact); a
 *    madd with the sub-block's scale in both words of a lane makes them row r's scaled int32;
 *  - Σ_s sc[s]·bsum[s] is 8 madds of the rows' scale pairs (sc[2i], sc[2i+1]) with the
 *    token's bsum pairs, times −32 (a shift), per block;
 *  - a register tile of 8 rows × QT tokens shares every panel load over QT tokens.
 * Rows longer than QMAXB blocks run in pieces (gemm_q6_K); calls of fewer than QT tokens take
 * the dot. Any row and token counts, unaligned rows and strides; row offsets within a panel
 * must fit in int32. gemm_q6_K_r16 takes rows packed 16 to a group at load (tensor.h), each
 * group as two panels filled straight from its packed runs. */
#include "tensor/x86/simd_x86.h"

#define QR 8       /* weight rows per panel: one per int32 lane */
#define QT 3       /* tokens per register tile (AVX2 has 16 vector registers) */
#define QMAXB 48   /* blocks per panel buffer (12288 elements) */

/* One Q6_K block of 8 rows, unpacked (2848 bytes, a multiple of 32). */
typedef struct q6k_pblk {
    uint8_t q[64][32];    /* [group 4s + k][row r][4]: elements 16s + 4k..+3 of row r, 0..63 */
    int32_t sc[16][QR];   /* scale of sub-block s, in both 16-bit halves */
    int32_t sp[8][QR];    /* scales of sub-blocks 2i and 2i+1 (low and high half) */
    float   d[QR];
} q6k_pblk;

/* Unpacks block b of rows row[0..8) into p. vi: the rows' offsets from row[0]. */
static void pack_block(q6k_pblk *p, const uint8_t *const *row, __m256i vi, int64_t b) {
    const size_t off = (size_t)b * Q6_K_BYTES;
    for (int r = 0; r < QR; r++) {
        const uint8_t *a = row[r] + off;
        for (int s = 0; s < 16; s++) {
            const uint32_t v = (uint16_t)(int16_t)(int8_t)a[Q6_K_SCALES + s];
            p->sc[s][r] = (int32_t)(v | v << 16);
        }
        for (int i = 0; i < 8; i++)
            p->sp[i][r] = (int32_t)((uint32_t)(uint16_t)(int16_t)(int8_t)a[Q6_K_SCALES + 2 * i] |
                                    (uint32_t)(uint16_t)(int16_t)(int8_t)a[Q6_K_SCALES + 2 * i + 1] << 16);
        p->d[r] = x86_f16(a + Q6_K_D);
    }
    const uint8_t *a0 = row[0] + off;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++)   /* half h: elements 128h + 32p + l from ql, qh bits 2p */
        for (int k = 0; k < 8; k++) {
            const __m256i A = _mm256_i32gather_epi32((const int *)(a0 + Q6_K_QL + 64 * h + 4 * k), vi, 1);
            const __m256i B = _mm256_i32gather_epi32((const int *)(a0 + Q6_K_QL + 64 * h + 32 + 4 * k), vi, 1);
            const __m256i H = _mm256_i32gather_epi32((const int *)(a0 + Q6_K_QH + 32 * h + 4 * k), vi, 1);
            const __m256i lo[4] = { _mm256_and_si256(A, m4), _mm256_and_si256(B, m4),
                                    _mm256_and_si256(_mm256_srli_epi16(A, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(B, 4), m4) };
            for (int q = 0; q < 4; q++) {
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(H, 2 * q), m2);
                _mm256_store_si256((__m256i *)p->q[32 * h + 8 * q + k], _mm256_or_si256(lo[q], _mm256_slli_epi16(hb, 4)));
            }
        }
}

/* Block b of half hf (rows 8hf..8hf+7) of the packed group at g (tensor.h TENSOR_Q6R16_BLOCK)
 * into p: the values are whole there (bits 0-5 of the runs' bytes, the fourth of each 4 in
 * their bits 6-7) and 8 rows' bytes are neighbours, so the panel is masks and shifts of loads,
 * where the file's layout takes three gathers a vector and its nibbles assembled (and, before
 * this, a scalar unpacking of the group into that layout first). */
static void pack_block_r16(q6k_pblk *p, const uint8_t *g, int hf, int64_t b) {
    const uint8_t *h = g + (size_t)b * TENSOR_Q6R16_BLOCK;
    _mm256_store_ps(p->d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + Q6R16_D + 16 * hf))));
    const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
    __m256i sc[16];
    for (int s = 0; s < 16; s++) {   /* sub-block s's scales of the 8 rows, sign-extended */
        sc[s] = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(h + Q6R16_SCALES + 16 * s + 8 * hf)));
        _mm256_store_si256((__m256i *)p->sc[s], _mm256_or_si256(_mm256_and_si256(sc[s], lo16), _mm256_slli_epi32(sc[s], 16)));
    }
    for (int i = 0; i < 8; i++)
        _mm256_store_si256((__m256i *)p->sp[i],
                           _mm256_or_si256(_mm256_and_si256(sc[2 * i], lo16), _mm256_slli_epi32(sc[2 * i + 1], 16)));
    const __m256i m6 = _mm256_set1_epi8(0x3F), m01 = _mm256_set1_epi8(0x03), m23 = _mm256_set1_epi8(0x0C),
                  m45 = _mm256_set1_epi8(0x30);
    for (int hh = 0; hh < 2; hh++)   /* run (hh, u): elements 128hh + 32c + 4u + j, group 32hh + 8c + u */
        for (int u = 0; u < 8; u++) {
            const uint8_t *run = h + Q6R16_Q + Q6R16_RUN * (8 * hh + u) + 32 * hf;
            const __m256i P0 = _mm256_loadu_si256((const __m256i *)run),
                          P1 = _mm256_loadu_si256((const __m256i *)(run + 64)),
                          P2 = _mm256_loadu_si256((const __m256i *)(run + 128));
            _mm256_store_si256((__m256i *)p->q[32 * hh + u], _mm256_and_si256(P0, m6));
            _mm256_store_si256((__m256i *)p->q[32 * hh + 8 + u], _mm256_and_si256(P1, m6));
            _mm256_store_si256((__m256i *)p->q[32 * hh + 16 + u], _mm256_and_si256(P2, m6));
            /* 16-bit shifts: what a byte takes from its neighbour falls outside its mask */
            const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(P0, 6), m01),
                                               _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(P1, 4), m23),
                                                               _mm256_and_si256(_mm256_srli_epi16(P2, 2), m45)));
            _mm256_store_si256((__m256i *)p->q[32 * hh + 24 + u], v3);
        }
}

/* 8 rows × T tokens over nb blocks; y[t * ldy + r] for r < nr, or the chains parked in
 * park[t] (phase: simd_x86.h X86_PARK_IN / X86_PARK_OUT). */
static inline __attribute__((always_inline)) void tile(int T, int64_t nb, const q6k_pblk *pk, const uint8_t *x,
                                                        size_t xs, float *y, int64_t ldy, int nr, float (*park)[QR],
                                                        int phase) {
    __m256 acc[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) acc[t] = phase & X86_PARK_IN ? _mm256_load_ps(park[t]) : _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q6k_pblk *p = pk + b;
        const uint8_t *xb[QT];
        __m256i blk[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* −32 · Σ sc·bsum */
            xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
            __m256i c = _mm256_setzero_si256();
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 8; i++) {
                int32_t bp;
                memcpy(&bp, xb[t] + Q8_K_BSUMS + 4 * i, 4);
                c = _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_load_si256((const __m256i *)p->sp[i]), _mm256_set1_epi32(bp)));
            }
            blk[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 5));
        }
        for (int s = 0; s < 16; s++) {
            const __m256i sc = _mm256_load_si256((const __m256i *)p->sc[s]);
            _Pragma("GCC unroll 2")
            for (int k = 0; k < 4; k += 2) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)p->q[4 * s + k]);
                const __m256i w1 = _mm256_load_si256((const __m256i *)p->q[4 * s + k + 1]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    int32_t v0, v1;
                    memcpy(&v0, xb[t] + Q8_K_QS + 16 * s + 4 * k, 4);
                    memcpy(&v1, xb[t] + Q8_K_QS + 16 * s + 4 * k + 4, 4);
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w0, _mm256_set1_epi32(v0)),
                                                         _mm256_maddubs_epi16(w1, _mm256_set1_epi32(v1)));
                    blk[t] = _mm256_add_epi32(blk[t], _mm256_madd_epi16(s16, sc));
                }
            }
        }
        const __m256 d = _mm256_load_ps(p->d);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(blk[t]), _mm256_mul_ps(d, _mm256_set1_ps(rd_f32(xb[t]))), acc[t]);
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        if (phase & X86_PARK_OUT) {
            _mm256_store_ps(park[t], acc[t]);
            continue;
        }
        _Alignas(32) float v[QR];
        _mm256_store_ps(v, acc[t]);
        for (int r = 0; r < nr; r++) y[t * ldy + r] = v[r];
    }
}

/* Tokens [0, n_tok) over the panel's blocks [b0, b0 + len) (pk: those blocks). */
static void tiles(int64_t len, const q6k_pblk *pk, const uint8_t *x, size_t xs, int64_t n_tok, float *y, int64_t ldy,
                  int nr, float (*park)[QR], int phase) {
    int64_t t = 0;
    for (; t + QT <= n_tok; t += QT) tile(QT, len, pk, x + t * xs, xs, y + t * ldy, ldy, nr, park + t, phase);
    switch (n_tok - t) {
    case 2: tile(2, len, pk, x + t * xs, xs, y + t * ldy, ldy, nr, park + t, phase); break;
    case 1: tile(1, len, pk, x + t * xs, xs, y + t * ldy, ldy, nr, park + t, phase); break;
    default: break;
    }
}

/* The panels of rows [r0, r0 + 8) (nr of them) over tokens [0, n_tok): blocks [b0, b0 + QMAXB)
 * filled (packed: from half hf of the group at g; else from the rows row[], offsets vi), then
 * the tiles, X86_PARK_TOKENS tokens a pass where the rows take several pieces. */
static inline __attribute__((always_inline)) void q6_panels(bool packed, int64_t nb, const uint8_t *const *row,
                                                            __m256i vi, const uint8_t *g, int hf, const uint8_t *X,
                                                            size_t xs, int64_t n_tok, float *y, int64_t ldy, int nr) {
    _Alignas(32) q6k_pblk pk[QMAXB];
    _Alignas(32) float park[X86_PARK_TOKENS][QR];
    const int64_t tb = nb > QMAXB ? X86_PARK_TOKENS : n_tok;   /* one piece: every token in one pass */
    for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int64_t nt = n_tok - t0 < tb ? n_tok - t0 : tb;
        for (int64_t b0 = 0; b0 < nb; b0 += QMAXB) {
            const int64_t len = nb - b0 < QMAXB ? nb - b0 : QMAXB;
            const int phase = (b0 > 0 ? X86_PARK_IN : 0) | (b0 + len < nb ? X86_PARK_OUT : 0);
            for (int64_t b = 0; b < len; b++) {
                if (packed) pack_block_r16(&pk[b], g, hf, b0 + b);
                else pack_block(&pk[b], row, vi, b0 + b);
            }
            tiles(len, pk, X + t0 * xs + (size_t)b0 * Q8_K_BYTES, xs, nt, y + t0 * ldy, ldy, nr, park, phase);
        }
    }
}

/* Rows longer than QMAXB blocks go in pieces of QMAXB blocks, X86_PARK_TOKENS tokens at a
 * time, the tiles' chains parked between the pieces (simd_x86.h). Before, such rows took the
 * dot. 256 rows, 256 tokens, 2 threads, RECUR_ISA=avx2 (/tmp/s16/mmn.c outside the repo, best
 * of 5): 14336 elements 18.7 -> 9.3 ms, 18944 24.8 -> 10.2 (12288, one piece: 6.9);
 * recur-bench pp512 -r 1 with RECUR_ISA=avx2 on a Q6_K llama3-8b (recur-gguf synth, zero
 * weights), whose packed rows are unpacked for this gemm: 15.0 -> 20.0 t/s. */
static void gemm_q6_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    if (n_tok < QT) {   /* too few tokens to pay for the unpacking */
        x86_gemm_by_dot(rt_dot_q6_K_avx2, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    for (int64_t r0 = 0; r0 < n_rows; r0 += QR) {
        const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const uint8_t *row[QR];
        const __m256i vi = x86_panel8_rows(W, ws, r0, nr, row);
        q6_panels(false, n / QK_K, row, vi, NULL, 0, X, xs, n_tok, y + r0, ldy, nr);
    }
}

/* gemm[Q6_K] over rows packed 16 to a group (tensor.h gemm_q6_K_r16; n_rows a multiple of 16):
 * each group's halves as panels, filled from its runs. */
static void gemm_q6_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    const __m256i vi = _mm256_setzero_si256();
    for (int64_t g = 0; g < n_rows / TENSOR_R16_ROWS; g++)
        for (int hf = 0; hf < 2; hf++)
            q6_panels(true, n / QK_K, NULL, vi, (const uint8_t *)w + (size_t)g * TENSOR_R16_ROWS * ws, hf, x, xs, n_tok,
                      y + TENSOR_R16_ROWS * g + QR * hf, ldy, QR);
}

void rt_fill_gemm_q6k_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_Q6_K] = gemm_q6_K;
    k->gemm_q6_K_r16 = gemm_q6_K_r16;
}
