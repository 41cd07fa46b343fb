/* q8blk_avx512.c — the block order of Q8_0 x Q8_0 (tensor_impl.h, rt_dot_q8_0_blk) with
 * AVX-512 VNNI: the prompt gemm and the single-token matmul of the AVX-512 table's twin
 * (tensor_kernels_q8blk; its dots are the AVX2 twin's, q8blk_avx2.c).
 *
 * Per block one FMA of its exact integer sum, so the chunk sums of dpbusd are added in
 * integers, not each scaled in float as ggml's order must (gemm_avx512.c): a block of 16 rows
 * costs one token 8 dpbusd and one FMA instead of 8 and 8.
 *  - prompts: rows 16 at a time with a lane per row. A block of 16 rows becomes 8 vectors,
 *    vector j holding the 4-byte chunk j of every row, each byte + 128 (unsigned, what dpbusd
 *    takes first); a token's row sums are then 8 dpbusd with its chunk j broadcast, started
 *    from the tail's Q8_MAGIC_BITS − 128 · Σ x, which leaves lane r holding the float
 *    Q8_MAGIC + row r's exact sum; one subtraction and one FMA step the 16 chains. From
 *    PMIN_TOK tokens on each group of 16 rows is transposed once per call into a panel on
 *    the stack (576 bytes a block) and tiles of GT tokens run through it (rows too long for
 *    the panel in pieces: groups_pieces); fewer tokens transpose each block in registers. Rows past the last group of
 *    16 repeat the last row in lanes that are not stored. One thread (gm outside the repo,
 *    against ggml's order in gemm_avx512.c): 1024x3584 at 512 tokens 198 -> 330 GOP/s,
 *    2048->1024 at 2 / 4 / 8 / 16 / 64 tokens 86 / 112 / 129 / 149 / 185 -> 133 / 189 / 213 /
 *    265 / 310.
 *  - one token: four straight streams of rows (gemv_avx512.c says why), the 8 chunk lanes of a
 *    row reduced in integers per block.
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides; both read
 * the activation rows' tail (tensor.h). */
#include <stdlib.h>
#include <string.h>

#include "tensor/x86/transpose16_avx512.h"

#define Q8L_ROWS 16

/* The 8 chunk vectors of the block at off of rows row[0..15], + 128. */
static inline __attribute__((always_inline)) void q8l_transpose(const uint8_t *const *row, size_t off, __m512i out[8]) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    x86_transpose16(row, off + Q8_0_QS, out);
    _Pragma("GCC unroll 8")
    for (int j = 0; j < 8; j++) out[j] = _mm512_xor_si512(out[j], bias);
}

/* The fp16 scales of the block at off of the 16 rows, as floats (vcvtph2ps: rt_f16_to_f32's
 * bits). */
static inline __attribute__((always_inline)) __m512 q8l_scales(const uint8_t *const *row, size_t off) {
    _Alignas(32) uint16_t h[Q8L_ROWS];
    _Pragma("GCC unroll 16")
    for (int r = 0; r < Q8L_ROWS; r++) h[r] = rd_u16(row[r] + off);
    return _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
}

/* The 4 bytes at p in every lane (a broadcast load: from a general register it costs more). */
static inline __m512i q8l_bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Lane r: Q8_MAGIC + the exact sum of row r's block (chunk vectors w) times the activation
 * block whose tail is at ub; two dpbusd chains of four, so the sum waits on half as many
 * steps. */
static inline __attribute__((always_inline)) __m512 q8l_sum(const __m512i w[8], const uint8_t *ub) {
    __m512i s0 = q8l_bcast32(ub + Q8_0_BTAIL_C), s1 = _mm512_setzero_si512();
    _Pragma("GCC unroll 4")
    for (int j = 0; j < 4; j++) {
        s0 = _mm512_dpbusd_epi32(s0, w[j], q8l_bcast32(ub + Q8_0_BTAIL_QS + 4 * j));
        s1 = _mm512_dpbusd_epi32(s1, w[j + 4], q8l_bcast32(ub + Q8_0_BTAIL_QS + 16 + 4 * j));
    }
    return _mm512_sub_ps(_mm512_castsi512_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(Q8_MAGIC));
}

/* One chain step of the 16 rows for the activation block at ub: scale dw (the rows' scales). */
static inline __attribute__((always_inline)) __m512 q8l_step(const __m512i w[8], __m512 dw, const uint8_t *ub,
                                                             __m512 acc) {
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(rd_f32(ub))), q8l_sum(w, ub), acc);
}

/* acc[t], lane r: row r's dot with the activation row of token t (T tokens xs apart, u: the
 * first one's tail), each block transposed in registers on the way (no panel). */
static inline __attribute__((always_inline)) void q8l_direct(int T, int64_t nb, const uint8_t *const *row,
                                                             const uint8_t *u, size_t xs, __m512 *acc) {
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        __m512i w[8];
        q8l_transpose(row, off, w);
        const __m512 dw = q8l_scales(row, off);
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[t] = q8l_step(w, dw, u + t * xs + (size_t)b * Q8_0_BTAIL_BYTES, acc[t]);
    }
}

#define PMAXB 256   /* blocks per group panel (8192 elements) */
#define PMIN_TOK 6  /* fewer tokens do not pay for the panel */
#define GT 4        /* tokens per panel tile */
#define DT 4        /* tokens per tile without a panel */

/* One block of a group: its 8 chunk vectors and its 16 scales. */
typedef struct q8_grp {
    __m512i w[8];
    __m512  dw;
} q8_grp;

static void pack_group(q8_grp *pk, int64_t nb, const uint8_t *const *row) {
    for (int64_t b = 0; b < nb; b++) {
        q8l_transpose(row, (size_t)b * Q8_0_BYTES, pk[b].w);
        pk[b].dw = q8l_scales(row, (size_t)b * Q8_0_BYTES);
    }
}

/* T tokens' chains acc[t] on through nb blocks of a packed group, u: the first token's tail
 * at the first of them. */
static inline __attribute__((always_inline)) void panel_tile(int T, int64_t nb, const q8_grp *pk, const uint8_t *u,
                                                              size_t xs, __m512 *acc) {
    for (int64_t b = 0; b < nb; b++) {
        __m512i w[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            w[j] = pk[b].w[j];
            __asm__("" : "+v"(w[j]));   /* keep them in registers for the T tokens */
        }
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[t] = q8l_step(w, pk[b].dw, u + t * xs + (size_t)b * Q8_0_BTAIL_BYTES, acc[t]);
    }
}

/* T tokens of one group (packed into pk, or NULL: transposed on the way) into y, lanes m. */
static inline __attribute__((always_inline)) void group_tile(int T, int64_t nb, const q8_grp *pk,
                                                              const uint8_t *const *row, const uint8_t *u, size_t xs,
                                                              float *y, int64_t ldy, __mmask16 m) {
    __m512 acc[GT > DT ? GT : DT];
    if (pk) {
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_ps();
        panel_tile(T, nb, pk, u, xs, acc);
    } else {
        q8l_direct(T, nb, row, u, xs, acc);
    }
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
}

/* Every token of one group, TT at a time, then the token tail. */
static void group_rows(int64_t nb, const q8_grp *pk, const uint8_t *const *row, const uint8_t *u, size_t xs,
                       int64_t n_tok, float *y, int64_t ldy, __mmask16 m) {
    int64_t t = 0;
    if (pk) {
        for (; t + GT <= n_tok; t += GT) group_tile(GT, nb, pk, row, u + t * xs, xs, y + t * ldy, ldy, m);
    } else {
        for (; t + DT <= n_tok; t += DT) group_tile(DT, nb, NULL, row, u + t * xs, xs, y + t * ldy, ldy, m);
    }
    for (; t + 4 <= n_tok; t += 4) group_tile(4, nb, pk, row, u + t * xs, xs, y + t * ldy, ldy, m);
    u += t * xs;
    y += t * ldy;
    switch (n_tok - t) {
    case 3: group_tile(3, nb, pk, row, u, xs, y, ldy, m); break;
    case 2: group_tile(2, nb, pk, row, u, xs, y, ldy, m); break;
    case 1: group_tile(1, nb, pk, row, u, xs, y, ldy, m); break;
    default: break;
    }
}

/* The groups of rows, packed into pk when not NULL. */
static void groups(int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *u, size_t xs, int64_t n_tok,
                   float *y, int64_t ldy, q8_grp *pk) {
    for (int64_t r = 0; r < n_rows; r += Q8L_ROWS) {
        const int nr = n_rows - r < Q8L_ROWS ? (int)(n_rows - r) : Q8L_ROWS;
        const uint8_t *row[Q8L_ROWS];
        for (int k = 0; k < Q8L_ROWS; k++) row[k] = W + (size_t)(r + (k < nr ? k : nr - 1)) * ws;
        if (pk) pack_group(pk, nb, row);
        group_rows(nb, pk, row, u, xs, n_tok, y + r, ldy, (__mmask16)((1u << nr) - 1));
    }
}

/* T tokens of one group over a piece of pb blocks of its rows (packed into pk; u: the first
 * token's tail at the piece's first block): their chains from park[t] (zero for the first
 * piece) back to park[t], or into y for the last piece. */
static inline __attribute__((always_inline)) void piece_tile(int T, int64_t pb, const q8_grp *pk, const uint8_t *u,
                                                              size_t xs, bool first, bool last, __m512 *park, float *y,
                                                              int64_t ldy, __mmask16 m) {
    __m512 acc[GT];
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) acc[t] = first ? _mm512_setzero_ps() : park[t];
    panel_tile(T, pb, pk, u, xs, acc);
    _Pragma("GCC unroll 8")
    for (int t = 0; t < T; t++) {
        if (last) _mm512_mask_storeu_ps(y + t * ldy, m, acc[t]);
        else park[t] = acc[t];
    }
}

/* Rows longer than a panel (a 7B-14B model's down-projection, 14336-18944 elements) with
 * enough tokens: each group's blocks go a piece of PMAXB at a time, packed, every token
 * through it, the chains of all the tokens parked between the pieces (64 bytes a token); the
 * same chains as one pass (the order of a chain's steps is the blocks'). Before, they were
 * transposed in registers for every tile of tokens: recur-bench --q8-order block pp512 -r 1
 * --profile, a Q8_0 llama3-8b (recur-gguf synth, zero weights), two alternating rounds:
 * 55.2-60.7 -> 68.8-71.7 t/s, the 4096 x 14336 matmul 6.1-6.7 -> 3.6-3.7 ms a token.
 * Returns false without memory for the park. */
static bool groups_pieces(int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *u, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    __m512 *park = aligned_alloc(64, (size_t)n_tok * sizeof *park);
    if (!park) return false;
    _Alignas(64) q8_grp pk[PMAXB];   /* 144 KB, only touched here */
    for (int64_t r = 0; r < n_rows; r += Q8L_ROWS) {
        const int nr = n_rows - r < Q8L_ROWS ? (int)(n_rows - r) : Q8L_ROWS;
        const __mmask16 m = (__mmask16)((1u << nr) - 1);
        for (int64_t p0 = 0; p0 < nb; p0 += PMAXB) {
            const int64_t pb = p0 + PMAXB < nb ? PMAXB : nb - p0;
            const bool first = p0 == 0, last = p0 + pb == nb;
            const uint8_t *row[Q8L_ROWS];
            for (int k = 0; k < Q8L_ROWS; k++) row[k] = W + (size_t)(r + (k < nr ? k : nr - 1)) * ws + (size_t)p0 * Q8_0_BYTES;
            pack_group(pk, pb, row);
            const uint8_t *up = u + (size_t)p0 * Q8_0_BTAIL_BYTES;
            int64_t t = 0;
            for (; t + GT <= n_tok; t += GT)
                piece_tile(GT, pb, pk, up + t * xs, xs, first, last, park + t, y + r + t * ldy, ldy, m);
            switch (n_tok - t) {
            case 3: piece_tile(3, pb, pk, up + t * xs, xs, first, last, park + t, y + r + t * ldy, ldy, m); break;
            case 2: piece_tile(2, pb, pk, up + t * xs, xs, first, last, park + t, y + r + t * ldy, ldy, m); break;
            case 1: piece_tile(1, pb, pk, up + t * xs, xs, first, last, park + t, y + r + t * ldy, ldy, m); break;
            default: break;
            }
        }
    }
    free(park);
    return true;
}

static void gemm_q8_0_blk(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *u = (const uint8_t *)x + q8_0_tail(n);
    const int64_t nb = n / QK8_0;
    if (nb <= PMAXB && n_tok >= PMIN_TOK) {
        _Alignas(64) q8_grp pk[PMAXB];   /* 144 KB, only touched here */
        groups(nb, w, ws, n_rows, u, xs, n_tok, y, ldy, pk);
    } else if (n_tok < PMIN_TOK || !groups_pieces(nb, w, ws, n_rows, u, xs, n_tok, y, ldy)) {
        groups(nb, w, ws, n_rows, u, xs, n_tok, y, ldy, NULL);
    }
}

/* Rows r, r + q, r + 2q, r + 3q (q = n_rows / 4, rounded up; rows past the end repeat the
 * last one and are not stored): four straight streams, two 512-bit registers a block (rows 0
 * and 1, rows 2 and 3: 8 chunk lanes each). Per block the chunk sums are added in integers
 * into one lane per row, started once from the tail's Q8_MAGIC_BITS − 128 · Σ x, and one
 * 128-bit FMA steps the four chains. */
static inline __attribute__((always_inline)) __m128 q8v_block(const uint8_t *const *row, size_t off, const uint8_t *ub,
                                                              __m128 acc) {
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const __m512i xv = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(ub + Q8_0_BTAIL_QS)));
    int32_t c;
    memcpy(&c, ub + Q8_0_BTAIL_C, 4);
    const __m512i start = _mm512_maskz_set1_epi32(0x0101, c);   /* once per row: lane 0 of each half */
    const __m512i wa = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row[0] + off + Q8_0_QS))),
                                          _mm256_loadu_si256((const __m256i *)(row[1] + off + Q8_0_QS)), 1);
    const __m512i wb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(row[2] + off + Q8_0_QS))),
                                          _mm256_loadu_si256((const __m256i *)(row[3] + off + Q8_0_QS)), 1);
    const __m512i pa = _mm512_dpbusd_epi32(start, _mm512_xor_si512(wa, bias), xv);
    const __m512i pb = _mm512_dpbusd_epi32(start, _mm512_xor_si512(wb, bias), xv);
    /* 128-bit lane l of t: [a0+a2, b0+b2, a1+a3, b1+b3] of its 4 chunks (a: pa, b: pb) */
    const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(pa, pb), _mm512_unpackhi_epi32(pa, pb));
    const __m512i t2 = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));   /* [a, b, a, b] of lane l */
    const __m512i t3 = _mm512_add_epi32(t2, _mm512_shuffle_i32x4(t2, t2, _MM_SHUFFLE(2, 3, 0, 1)));
    /* lane 0 of t3: rows 0 and 2 at elements 0 and 1; lane 2: rows 1 and 3 at 8 and 9 */
    const __m128i s = _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 8, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), t3));
    const __m128 pf = _mm_sub_ps(_mm_castsi128_ps(s), _mm_set1_ps(Q8_MAGIC));
    const __m128 dw = _mm_cvtph_ps(_mm_setr_epi16((short)rd_u16(row[0] + off), (short)rd_u16(row[1] + off),
                                                  (short)rd_u16(row[2] + off), (short)rd_u16(row[3] + off), 0, 0, 0, 0));
    return _mm_fmadd_ps(_mm_mul_ps(dw, _mm_set1_ps(rd_f32(ub))), pf, acc);
}

/* Group r (rows r + k·q, q = n_rows / 4 rounded up) against the activation row x: y[r + k·q]
 * for the rows that exist. */
static void q8v_group(int64_t n, const uint8_t *W, size_t ws, int64_t n_rows, int64_t r, const uint8_t *x, float *y) {
    const uint8_t *u = x + q8_0_tail(n);
    const int64_t nb = n / QK8_0, q = (n_rows + 3) / 4;
    const uint8_t *row[4];
    for (int k = 0; k < 4; k++) row[k] = W + (size_t)(r + k * q < n_rows ? r + k * q : n_rows - 1) * ws;
    __m128 acc = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) acc = q8v_block(row, (size_t)b * Q8_0_BYTES, u + (size_t)b * Q8_0_BTAIL_BYTES, acc);
    _Alignas(16) float o[4];
    _mm_store_ps(o, acc);
    for (int k = 0; k < 4 && r + k * q < n_rows; k++) y[r + k * q] = o[k];
}

static void gemv_q8_0_blk(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                          const void *x, float *y) {
    for (int64_t r = g0; r < g1; r++) q8v_group(n, w, ws, n_rows, r, x, y);
}

/* A few tokens over the file's layout (tensor.h tensor_gemv.tokens): gemv_q8_0_blk's streams
 * and operations token by token, the four rows' blocks read from memory for the first token
 * and from L1 for the others; without it a parallel decode step took gemm_q8_0_blk, whose
 * neighbouring rows read slowly (gemv_avx512.c). Each token costs the single-token kernel's
 * arithmetic, so from Q8BLK_STREAMS_MAX tokens on the gemm's tiles win: recur-bench --q8-order
 * block --batched -npp 128 -ntg 32, qwen3-0.6b Q8_0, S_TG with the gemm against this kernel:
 * B = 2 67 -> 116 t/s, 4 113 -> 121-127, 8 195 -> 125 (slower). Packed Q8_0 (RECUR_REPACK_Q8=1,
 * its several-token kernel) is faster still from B = 4 on: 212 and 296 t/s. */
#define Q8BLK_STREAMS_MAX 8
static void gemm_q8_0_blk_streams(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                                  int64_t n_tok, float *y, int64_t ldy) {
    for (int64_t r = 0; r < (n_rows + 3) / 4; r++)
        for (int64_t t = 0; t < n_tok; t++) q8v_group(n, w, ws, n_rows, r, (const uint8_t *)x + t * xs, y + t * ldy);
}

void rt_fill_q8blk_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0_blk;
    k->gemm_q8_0_r16 = NULL;   /* the base table's is ggml's order */
    k->gemv[GGUF_T_Q8_0] = (tensor_gemv){ gemv_q8_0_blk, 4, NULL, 0, gemm_q8_0_blk_streams, Q8BLK_STREAMS_MAX };
    rt_fill_gemv_q8016_avx512(k);   /* the block order's (k->q8_block is set) */
    rt_fill_gemm_q40_avx512(k);     /* its Q4_0 gemm reads no tails */
}
