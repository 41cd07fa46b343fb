/* gemm_q4k_avx512.c — tiles of Q4_K (and Q5_K) weight rows × Q8_K activation rows in the order
 * of ggml's repacked gemm (tensor.h, gemm_q4_K_rp; the order is rt_dot_q4_K_rp's, dot_ref.c).
 *
 * Every output element performs exactly rt_dot_q4_K_rp's operations: per 64-element chunk
 * the exact integer sum sc[2j]·Σ q·y + sc[2j+1]·Σ q·y and the exact integer min sum
 * m[2j]·(bs0+bs1) + m[2j+1]·(bs2+bs3); then acc = fma(chunk, d·yd, acc) and
 * accm = fma(min, dmin·yd, accm), chunk by chunk, blocks in order; result acc − accm. Only
 * the layout differs (BLIS-style packing, no copy of the model kept):
 *  - a panel of 16 weight rows is unpacked once per call into a stack buffer, one int32
 *    lane per row: group g of a block holds elements 4g..4g+3 of each of the 16 rows as
 *    bytes (nibbles 0..15), so one vpdpbusd (u8 weights × s8 activations, exact) advances
 *    16 output elements by 4 products, with the token's 4 activation bytes broadcast;
 *  - scales become int32 lanes (vpmulld: exact), mins int16 pairs (vpmaddwd: exact), d and
 *    dmin floats; d·yd and dmin·yd are the same single float products as the scalar code;
 *  - a register tile of 16 rows × QT tokens shares each panel load over QT tokens; the panel
 *    (≤ 240 KB) stays in L2 while every token of the call passes;
 *  - where two panels fit the buffer, a tile of 32 rows (two panels) × QT tokens shares each
 *    activation broadcast over both: 16 rows × 4 tokens gave 4 dpbusd chains (the unit has
 *    latency 4 and takes 2 a cycle) and a broadcast load per dpbusd; 32 rows give 8 chains and
 *    half the broadcasts. One thread, 512 tokens, /tmp bench outside the repo: 1024 x 2048
 *    495 -> 578 GOP/s, 3584 x 1024 463 -> 561, same bits;
 *  - rows packed 16 to a group at load (the single-token layout, tensor.h) are taken as
 *    panels straight from their blocks (gemm_q4_K_rp_r16: plain loads) instead of being
 *    unpacked to the file's layout and gathered back: recur-bench pp512, qwen35-0.8b Q4_K_M,
 *    4 alternating rounds: 669-677 -> 693-698 t/s.
 *  - rows longer than the buffer (QMAXB blocks: a 7B-14B model's down-projection, 14336-17408
 *    elements) take their blocks in pieces, the tiles' chains parked between the pieces
 *    (gemm_q4k_pieces). Before, they took the dot: 256 x 14336, 256 tokens, 2 threads
 *    (/tmp/s16/mmn.c outside the repo, best of 5), packed 17.3 -> 2.8 ms, the file's layout
 *    21.4 -> 3.0 (12288, in one piece: 2.4 and 3.1); recur-bench pp512 -r 1 on a Q4_K
 *    llama3-8b (recur-gguf synth, zero weights) 22.0 -> 72.7 t/s, ik_llama.cpp's llama-bench
 *    47.0 on the same file. Pieces of two panels for rows that fit one panel (8192, 12288)
 *    were no faster than one panel over the whole row.
 *  - Q5_K (the AVX-512 table's gemm[Q5_K] and gemm_q5_K_r16, rt_dot_q5_K_rp's order: the same
 *    steps over five-bit values) takes these tiles as they are: only the panels differ, each
 *    value's fifth bit joined to its nibble while unpacking (pack_block, pack_block_r16), u8
 *    values up to 31 for the same dpbusd. Before, the table's Q5_K order kept 16 float chains
 *    per element (the dot's lanes) and its gemm a tile of 2 rows x 4 tokens of such chains:
 *    /tmp/s16/mmn.c outside the repo (2 threads, packed rows, two rounds) 256 x 14336, 256
 *    tokens 6.9-8.2 -> 2.9-3.9 ms, 1024 x 4096, 512 tokens 10.0-11.2 -> 4.7-5.5 ms;
 *    recur-bench pp512 -r 1 on a Q5_K llama3-8b (recur-gguf synth, zero weights) 24.7-26.6
 *    -> 61.3-65.9 t/s, ik_llama.cpp's llama-bench 40.2-44.8 in the same minutes.
 * Any n (a multiple of 256; calls of fewer than QT tokens take the dot: gathering 16 rows
 * straight from the blocks for one token was slower than the dot on this machine), any row
 * and token counts, unaligned rows and strides. Row offsets within a call must fit in int32
 * (16 rows). */
#include "tensor/x86/simd_x86.h"

#define QR 16      /* weight rows per panel: one per int32 lane */
#define QT 4       /* tokens per register tile */
_Static_assert(QT == 4, "X86_TOKEN_TILES runs tiles of 4 tokens");
#define QMAXB 48   /* blocks per panel buffer (12288 elements) */

/* One Q4_K block of 16 rows, unpacked (4992 bytes, a multiple of 64). */
typedef struct q4k_pblk {
    uint8_t q[64][64];   /* [group g][row r][4]: elements 4g..4g+3 of row r */
    int32_t sc[8][QR];   /* scale of sub-block s, per row */
    int32_t m[4][QR];    /* chunk j: m[2j] | m[2j+1] << 16, per row (int16 pairs) */
    float   d[QR], dmin[QR];
} q4k_pblk;

/* The per-row fields of one Q4_K block of 16 rows, one int32 lane per row (vi: each row's
 * block offset from W): the 6-bit scales (rt_k4_scales_u64's bit layout on dword lanes),
 * the mins as int16 pairs per chunk, d and dmin as floats. */
typedef struct q4k_fields {
    __m512i sc[8], m[4];
    __m512  d, dmin;
} q4k_fields;

/* The scales and mins from the rows' 12 scale bytes as three dwords a lane (w0: bytes 0-3). */
static inline __attribute__((always_inline)) void scale_fields(__m512i w0, __m512i w1, __m512i w2, q4k_fields *f) {
    const __m512i c3f = _mm512_set1_epi32(0x3f3f3f3f), c0f = _mm512_set1_epi32(0x0f0f0f0f),
                  c30 = _mm512_set1_epi32(0x30303030), ff = _mm512_set1_epi32(0xFF);
    const __m512i sc4[2] = { _mm512_and_si512(w0, c3f),
                             _mm512_or_si512(_mm512_and_si512(w2, c0f), _mm512_and_si512(_mm512_srli_epi32(w0, 2), c30)) };
    const __m512i m4[2] = { _mm512_and_si512(w1, c3f),
                            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), c0f),
                                            _mm512_and_si512(_mm512_srli_epi32(w1, 2), c30)) };
    _Pragma("GCC unroll 8")
    for (int s = 0; s < 8; s++) f->sc[s] = _mm512_and_si512(_mm512_srli_epi32(sc4[s / 4], 8 * (s % 4)), ff);
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        const __m512i x = _mm512_srli_epi32(m4[j / 2], 16 * (j % 2));
        f->m[j] = _mm512_or_si512(_mm512_and_si512(x, ff), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(x, 8), ff), 16));
    }
}

static inline __attribute__((always_inline)) void unpack_fields(const uint8_t *W, __m512i vi, q4k_fields *f) {
    const __m512i g0 = _mm512_i32gather_epi32(vi, W, 1);
    scale_fields(_mm512_i32gather_epi32(vi, W + Q4_K_SCALES, 1), _mm512_i32gather_epi32(vi, W + Q4_K_SCALES + 4, 1),
                 _mm512_i32gather_epi32(vi, W + Q4_K_SCALES + 8, 1), f);
    f->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
    f->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
}

/* Each of 16 rows' block offset from W (rows past nr repeat the last). */
static inline __m512i row_offsets(size_t ws, int nr) {
    int32_t offs[QR];
    for (int r = 0; r < QR; r++) offs[r] = (int32_t)((size_t)(r < nr ? r : nr - 1) * ws);
    return _mm512_loadu_si512(offs);
}

static inline void store_fields(q4k_pblk *p, const q4k_fields *f) {
    for (int s = 0; s < 8; s++) _mm512_store_si512(p->sc[s], f->sc[s]);
    for (int j = 0; j < 4; j++) _mm512_store_si512(p->m[j], f->m[j]);
    _mm512_store_ps(p->d, f->d);
    _mm512_store_ps(p->dmin, f->dmin);
}

/* Unpacks block b of the 16 rows at W + vi into p (q5: Q5_K rows, the fifth bits joined in:
 * bit 2j of qh byte l belongs to chunk j's low nibble l, bit 2j + 1 to its high one). */
static void pack_block(q4k_pblk *p, const uint8_t *W, __m512i vr, int64_t b, bool q5) {
    const __m512i vi = _mm512_add_epi32(vr, _mm512_set1_epi32((int32_t)(b * (q5 ? Q5_K_BYTES : Q4_K_BYTES))));
    q4k_fields f;
    unpack_fields(W, vi, &f);
    store_fields(p, &f);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    __m512i qh[8];
    for (int k = 0; q5 && k < 8; k++) qh[k] = _mm512_i32gather_epi32(vi, W + Q5_K_QH + 4 * k, 1);
    for (int j = 0; j < 4; j++)      /* chunk j: low nibbles = sub-block 2j, high = 2j+1 */
        for (int k = 0; k < 8; k++) {
            const __m512i g = _mm512_i32gather_epi32(vi, W + (q5 ? Q5_K_QS : Q4_K_QS) + 32 * j + 4 * k, 1);
            __m512i lo = _mm512_and_si512(g, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(g, 4), lo4);
            if (q5) {   /* lo | (bit 2j << 4), hi | (bit 2j+1 << 4): A | (B & C) */
                lo = _mm512_ternarylogic_epi32(lo, _mm512_slli_epi32(_mm512_srli_epi32(qh[k], 2 * j), 4), bit4, 0xF8);
                hi = _mm512_ternarylogic_epi32(hi, _mm512_slli_epi32(_mm512_srli_epi32(qh[k], 2 * j + 1), 4), bit4, 0xF8);
            }
            _mm512_store_si512(p->q[16 * j + k], lo);
            _mm512_store_si512(p->q[16 * j + 8 + k], hi);
        }
}

/* Four scale bytes of 16 rows (byte k of row r at v + 16k + r, tensor.h's packed layout) as
 * one dword a row, byte k in bits 8k. */
static inline __m512i r16_dwords(const uint8_t *v) {
    const __m512i a = _mm512_loadu_si512(v);
    __m512i w = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(a));
    w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a, 1)), 8));
    w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a, 2)), 16));
    return _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(a, 3)), 24));
}

static inline __mmask64 q5_mask(const uint8_t *p) {
    uint64_t m;
    memcpy(&m, p, 8);
    return (__mmask64)m;
}

/* pack_block from a block of 16 rows packed at load (h: its TENSOR_R16_BLOCK or, q5,
 * TENSOR_Q5R16_BLOCK bytes): the same panel, with plain loads where the file's layout needs
 * gathers (a Q5_K vector's fifth bits: a masked byte add of 16, as gemv_q4k16_avx512.c). */
static void pack_block_r16(q4k_pblk *p, const uint8_t *h, bool q5) {
    q4k_fields f;
    scale_fields(r16_dwords(h + R16_SCALES), r16_dwords(h + R16_SCALES + 64), r16_dwords(h + R16_SCALES + 128), &f);
    f.d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + R16_D)));
    f.dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + R16_DMIN)));
    store_fields(p, &f);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 8; k++) {
            const __m512i g = _mm512_loadu_si512(h + (q5 ? Q5R16_QS : R16_QS) + 64 * (8 * j + k));
            __m512i lo = _mm512_and_si512(g, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(g, 4), lo4);
            if (q5) {
                const uint8_t *mk = h + Q5R16_QH + 16 * (8 * j + k);
                lo = _mm512_mask_add_epi8(lo, q5_mask(mk), lo, c16);
                hi = _mm512_mask_add_epi8(hi, q5_mask(mk + 8), hi, c16);
            }
            _mm512_store_si512(p->q[16 * j + k], lo);
            _mm512_store_si512(p->q[16 * j + 8 + k], hi);
        }
}

/* A tile's chains between pieces of a row's blocks (gemm_q4k_pieces, simd_x86.h
 * X86_PARK_IN): park[t] holds token t's acc and accm lanes (16-row tiles: [0] acc, [1] accm;
 * 32-row tiles: [0], [1] the two panels' acc, [2], [3] their accm). */
typedef float q4k_park[4][QR];

/* 16 rows × T tokens over nb blocks; y[t * ldy + r] for r < nr (phase: X86_PARK_IN / X86_PARK_OUT). */
static inline __attribute__((always_inline)) void tile(int T, int64_t nb, const q4k_pblk *pk, const uint8_t *x,
                                                        size_t xs, float *y, int64_t ldy, __mmask16 rows,
                                                        q4k_park *park, int phase) {
    __m512 acc[QT], accm[QT];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        acc[t] = phase & X86_PARK_IN ? _mm512_load_ps(park[t][0]) : _mm512_setzero_ps();
        accm[t] = phase & X86_PARK_IN ? _mm512_load_ps(park[t][1]) : _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const q4k_pblk *p = pk + b;
        const uint8_t *xb[QT];
        __m512 dt[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* the min chain first: its chunks in order */
            xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
            const __m512 yd = _mm512_set1_ps(rd_f32(xb[t]));
            dt[t] = _mm512_mul_ps(_mm512_load_ps(p->d), yd);
            const __m512 dm = _mm512_mul_ps(_mm512_load_ps(p->dmin), yd);
            int32_t pp[4];
            x86_q8k_pair_sums(xb[t], pp);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m512i ms = _mm512_madd_epi16(_mm512_load_si512(p->m[j]), _mm512_set1_epi32(pp[j]));
                accm[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ms), dm, accm[t]);
            }
        }
        for (int j = 0; j < 4; j++) {
            __m512i cs[QT];
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                const int s = 2 * j + h;
                __m512i si[QT];
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) si[t] = _mm512_setzero_si512();
                _Pragma("GCC unroll 8")
                for (int k = 0; k < 8; k++) {
                    const __m512i w = _mm512_load_si512(p->q[8 * s + k]);
                    _Pragma("GCC unroll 4")
                    for (int t = 0; t < T; t++) {
                        int32_t v;
                        memcpy(&v, xb[t] + Q8_K_QS + 32 * s + 4 * k, 4);
                        si[t] = _mm512_dpbusd_epi32(si[t], w, _mm512_set1_epi32(v));
                    }
                }
                const __m512i sc = _mm512_load_si512(p->sc[s]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    const __m512i v = _mm512_mullo_epi32(si[t], sc);
                    cs[t] = h ? _mm512_add_epi32(cs[t], v) : v;
                }
            }
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(cs[t]), dt[t], acc[t]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        if (phase & X86_PARK_OUT) {
            _mm512_store_ps(park[t][0], acc[t]);
            _mm512_store_ps(park[t][1], accm[t]);
        } else {
            _mm512_mask_storeu_ps(y + t * ldy, rows, _mm512_sub_ps(acc[t], accm[t]));
        }
    }
}

/* 32 rows (panels pa, pb) x T tokens over nb blocks: the 16-row tile's operations on each
 * output element, two panels sharing each activation broadcast (half the broadcasts of two
 * 16-row tiles, and 2T independent dpbusd chains). The min chains live in memory (4 updates a
 * block) to leave the registers to the sums. */
static inline __attribute__((always_inline)) void tile2(int T, int64_t nb, const q4k_pblk *pa, const q4k_pblk *pb,
                                                         const uint8_t *x, size_t xs, float *y, int64_t ldy,
                                                         __mmask16 rows_b, q4k_park *park, int phase) {
    __m512 acc0[QT], acc1[QT];
    _Alignas(64) float accm[2][QT][QR];
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        const bool in = phase & X86_PARK_IN;
        acc0[t] = in ? _mm512_load_ps(park[t][0]) : _mm512_setzero_ps();
        acc1[t] = in ? _mm512_load_ps(park[t][1]) : _mm512_setzero_ps();
        _mm512_store_ps(accm[0][t], in ? _mm512_load_ps(park[t][2]) : _mm512_setzero_ps());
        _mm512_store_ps(accm[1][t], in ? _mm512_load_ps(park[t][3]) : _mm512_setzero_ps());
    }
    for (int64_t b = 0; b < nb; b++) {
        const q4k_pblk *p0 = pa + b, *p1 = pb + b;
        const uint8_t *xb[QT];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* the min chains first: their chunks in order */
            xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
            const __m512 yd = _mm512_set1_ps(rd_f32(xb[t]));
            const __m512 dm0 = _mm512_mul_ps(_mm512_load_ps(p0->dmin), yd), dm1 = _mm512_mul_ps(_mm512_load_ps(p1->dmin), yd);
            __m512 am0 = _mm512_load_ps(accm[0][t]), am1 = _mm512_load_ps(accm[1][t]);
            int32_t pp[4];
            x86_q8k_pair_sums(xb[t], pp);
            _Pragma("GCC unroll 4")
            for (int j = 0; j < 4; j++) {
                const __m512i mp = _mm512_set1_epi32(pp[j]);
                am0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_load_si512(p0->m[j]), mp)), dm0, am0);
                am1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_load_si512(p1->m[j]), mp)), dm1, am1);
            }
            _mm512_store_ps(accm[0][t], am0);
            _mm512_store_ps(accm[1][t], am1);
        }
        for (int j = 0; j < 4; j++) {
            __m512i c0[QT], c1[QT];
            _Pragma("GCC unroll 2")
            for (int h = 0; h < 2; h++) {
                const int s = 2 * j + h;
                __m512i s0[QT], s1[QT];
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) s0[t] = s1[t] = _mm512_setzero_si512();
                x86_dpbusd_2panels(T, 8, p0->q + 8 * s, p1->q + 8 * s, xb, Q8_K_QS + 32 * s, s0, s1);
                x86_scale_2panels(T, h == 0, s0, s1, _mm512_load_si512(p0->sc[s]), _mm512_load_si512(p1->sc[s]), c0, c1);
            }
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                const __m512 yd = _mm512_set1_ps(rd_f32(xb[t]));
                acc0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c0[t]), _mm512_mul_ps(_mm512_load_ps(p0->d), yd), acc0[t]);
                acc1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c1[t]), _mm512_mul_ps(_mm512_load_ps(p1->d), yd), acc1[t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int t = 0; t < T; t++) {
        if (phase & X86_PARK_OUT) {
            _mm512_store_ps(park[t][0], acc0[t]);
            _mm512_store_ps(park[t][1], acc1[t]);
            _mm512_store_ps(park[t][2], _mm512_load_ps(accm[0][t]));
            _mm512_store_ps(park[t][3], _mm512_load_ps(accm[1][t]));
        } else {
            _mm512_storeu_ps(y + t * ldy, _mm512_sub_ps(acc0[t], _mm512_load_ps(accm[0][t])));
            _mm512_mask_storeu_ps(y + t * ldy + QR, rows_b, _mm512_sub_ps(acc1[t], _mm512_load_ps(accm[1][t])));
        }
    }
}

/* Rows longer than QMAXB blocks: their blocks in pieces of up to QMAXB / 2, two panels of 16
 * rows (or the one left) unpacked a piece at a time (r16: from rows packed 16 to a group at
 * load, else from the file's rows), and for each X86_PARK_TOKENS tokens the tiles run piece
 * after piece with their chains parked in between (the same bits). Each X86_PARK_TOKENS
 * tokens unpack the panels again: for 16 rows of 14336 elements (56 blocks) a panel costs
 * about what one tile of 4 tokens does with it. */
static void gemm_q4k_pieces(bool r16, bool q5, int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows,
                            const uint8_t *X, size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    const size_t rb = r16 ? (q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK) : 0;
    const int64_t pb = QMAXB / 2;
    _Alignas(64) q4k_pblk pk[QMAXB];
    _Alignas(64) q4k_park park[X86_PARK_TOKENS];
    for (int64_t r0 = 0; r0 < n_rows; r0 += 2 * QR) {
        const int na = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const int nb2 = n_rows - r0 - QR < QR ? (int)(n_rows - r0 - QR) : QR;   /* <= 0: one panel */
        const __mmask16 rows_a = (__mmask16)((1u << na) - 1), rows_b = nb2 > 0 ? (__mmask16)((1u << nb2) - 1) : 0;
        const __m512i va = row_offsets(ws, na), vb = row_offsets(ws, nb2 > 0 ? nb2 : 1);
        float *yr = y + r0;
        for (int64_t t0 = 0; t0 < n_tok; t0 += X86_PARK_TOKENS) {
            const int64_t nt = n_tok - t0 < X86_PARK_TOKENS ? n_tok - t0 : X86_PARK_TOKENS;
            for (int64_t b0 = 0; b0 < nb; b0 += pb) {
                const int64_t len = nb - b0 < pb ? nb - b0 : pb;
                const int phase = (b0 > 0 ? X86_PARK_IN : 0) | (b0 + len < nb ? X86_PARK_OUT : 0);
                for (int64_t b = 0; b < len; b++) {
                    const uint8_t *wa = W + (size_t)r0 * ws, *wb = wa + QR * ws;
                    if (r16) {
                        pack_block_r16(&pk[b], wa + (size_t)(b0 + b) * rb, q5);
                        if (nb2 > 0) pack_block_r16(&pk[pb + b], wb + (size_t)(b0 + b) * rb, q5);
                    } else {
                        pack_block(&pk[b], wa, va, b0 + b, q5);
                        if (nb2 > 0) pack_block(&pk[pb + b], wb, vb, b0 + b, q5);
                    }
                }
                const uint8_t *xp = X + t0 * xs + (size_t)b0 * Q8_K_BYTES;
                float *yt = yr + t0 * ldy;
#define TILE2(T, t) tile2(T, len, pk, pk + pb, xp + (t) * xs, xs, yt + (t) * ldy, ldy, rows_b, park + (t), phase)
#define TILE1(T, t) tile(T, len, pk, xp + (t) * xs, xs, yt + (t) * ldy, ldy, rows_a, park + (t), phase)
                if (nb2 > 0) X86_TOKEN_TILES(nt, TILE2);
                else X86_TOKEN_TILES(nt, TILE1);
#undef TILE1
#undef TILE2
            }
        }
    }
}

/* Q4_K or (q5) Q5_K rows in the file's layout. */
static void gemm_k4(bool q5, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *X, size_t xs,
                    int64_t n_tok, float *y, int64_t ldy) {
    const int64_t nb = n / QK_K;
    if (n_tok < QT) {   /* too few tokens to pay for the panel: the dot */
        x86_gemm_by_dot(q5 ? rt_dot_q5_K_rp_avx512 : rt_dot_q4_K_rp_avx512, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    if (nb > QMAXB) {
        gemm_q4k_pieces(false, q5, nb, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    _Alignas(64) q4k_pblk pk[QMAXB];
    int64_t r0 = 0;
    /* 32 rows at a time while two panels fit */
    for (; 2 * nb <= QMAXB && n_rows - r0 > QR; r0 += 2 * QR) {
        const int nb2 = n_rows - r0 - QR < QR ? (int)(n_rows - r0 - QR) : QR;
        const __mmask16 rows_b = (__mmask16)((1u << nb2) - 1);
        const __m512i va = row_offsets(ws, QR), vb = row_offsets(ws, nb2);
        for (int64_t b = 0; b < nb; b++) {
            pack_block(&pk[b], W + (size_t)r0 * ws, va, b, q5);
            pack_block(&pk[nb + b], W + (size_t)(r0 + QR) * ws, vb, b, q5);
        }
        float *yr = y + r0;
#define TILE2(T, t) tile2(T, nb, pk, pk + nb, X + (t) * xs, xs, yr + (t) * ldy, ldy, rows_b, NULL, 0)
        X86_TOKEN_TILES(n_tok, TILE2);
#undef TILE2
    }
    for (; r0 < n_rows; r0 += QR) {
        const int nr = n_rows - r0 < QR ? (int)(n_rows - r0) : QR;
        const __mmask16 rows = (__mmask16)((1u << nr) - 1);
        const __m512i vr = row_offsets(ws, nr);
        for (int64_t b = 0; b < nb; b++) pack_block(&pk[b], W + (size_t)r0 * ws, vr, b, q5);
        float *yr = y + r0;
#define TILE1(T, t) tile(T, nb, pk, X + (t) * xs, xs, yr + (t) * ldy, ldy, rows, NULL, 0)
        X86_TOKEN_TILES(n_tok, TILE1);
#undef TILE1
    }
}

static void gemm_q4_K_rp(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy) {
    gemm_k4(false, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* The AVX-512 table's gemm[Q5_K] (rt_dot_q5_K_rp's order): Q4_K's tiles over Q5_K panels. */
static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    gemm_k4(true, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* gemm_k4 over rows packed 16 to a group at load (tensor.h gemm_q4_K_rp_r16, gemm_q5_K_r16):
 * the panels straight from the packed blocks (rows too long for the buffer in pieces); calls
 * of fewer than QT tokens are unpacked a group at a time for gemm_k4 (its dot). */
static void gemm_k4_r16(bool q5, int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *X, size_t xs,
                        int64_t n_tok, float *y, int64_t ldy) {
    const int64_t nb = n / QK_K;
    const size_t gb = (size_t)QR * ws;   /* a group's bytes: 16 rows' */
    const size_t rb = q5 ? TENSOR_Q5R16_BLOCK : TENSOR_R16_BLOCK;
    if (nb > QMAXB && n_tok >= QT) {
        gemm_q4k_pieces(true, q5, nb, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    if (n_tok < QT) {
        if (q5)
            x86_gemm_r16_unpacked(tensor_q5_K_r16_unpack, gemm_q5_K, rt_dot_q5_K_r16, n, W, ws, n_rows, X, xs, n_tok, y,
                                  ldy);
        else
            x86_gemm_r16_unpacked(tensor_q4_K_r16_unpack, gemm_q4_K_rp, rt_dot_q4_K_r16, n, W, ws, n_rows, X, xs, n_tok,
                                  y, ldy);
        return;
    }
    _Alignas(64) q4k_pblk pk[QMAXB];
    int64_t r0 = 0;
    const __mmask16 all = 0xFFFF;
    for (; 2 * nb <= QMAXB && n_rows - r0 >= 2 * QR; r0 += 2 * QR) {
        for (int64_t b = 0; b < nb; b++) {
            pack_block_r16(&pk[b], W + (size_t)r0 * ws + (size_t)b * rb, q5);
            pack_block_r16(&pk[nb + b], W + (size_t)r0 * ws + gb + (size_t)b * rb, q5);
        }
        float *yr = y + r0;
#define TILE2(T, t) tile2(T, nb, pk, pk + nb, X + (t) * xs, xs, yr + (t) * ldy, ldy, all, NULL, 0)
        X86_TOKEN_TILES(n_tok, TILE2);
#undef TILE2
    }
    for (; r0 < n_rows; r0 += QR) {
        for (int64_t b = 0; b < nb; b++) pack_block_r16(&pk[b], W + (size_t)r0 * ws + (size_t)b * rb, q5);
        float *yr = y + r0;
#define TILE1(T, t) tile(T, nb, pk, X + (t) * xs, xs, yr + (t) * ldy, ldy, all, NULL, 0)
        X86_TOKEN_TILES(n_tok, TILE1);
#undef TILE1
    }
}

static void gemm_q4_K_rp_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                             int64_t n_tok, float *y, int64_t ldy) {
    gemm_k4_r16(false, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

static void gemm_q5_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    gemm_k4_r16(true, n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

void rt_fill_gemm_q4k_avx512(tensor_kernels *k) {
    k->gemm_q4_K_rp = gemm_q4_K_rp;
    k->gemm_q4_K_rp_r16 = gemm_q4_K_rp_r16;
    k->gemm[GGUF_T_Q5_K] = gemm_q5_K;
    k->gemm_q5_K_r16 = gemm_q5_K_r16;
}
