/* gemm_avx512.c — tiles of Q8_0 weight rows × Q8_0 activation rows (tensor.h, gemm).
 *
 * Every output element performs exactly dot_q8_0's operations (tensor_impl.h, the Q8_0 order):
 * per block in order, 8 int32 lanes (exact sums of 4 byte products) converted to float and
 * added with one FMA scaled by the product of the two fp16 scales (exact in float), into one
 * 8-lane accumulator; the 8 lanes reduced at the end as x86_hsum_ps. That is an FMA per
 * dpbusd, which bounds these tiles near 230 GOP/s a Zen 4 core (both share its two FMA pipes);
 * the block order (q8blk_avx512.c) halves it. Only the layout differs, in two ways:
 *  - few tokens (below PMIN_TOK) and the rows after the last group of 16 (or every row,
 *    without memory for gemm_q8_0_pieces' park): a 512-bit register holds the same block of two weight rows (rows 2p,
 *    2p+1: lanes 0-7, 8-15), so each vector FMA steps two output elements; the activation
 *    block is broadcast to both halves as x + 128 (unsigned: the activation row's tail,
 *    tensor_impl.h q8_0_tail, as is its scale as a float) and dpbusd starts from
 *    Q8_MAGIC_BITS − 128 · Σ4 w, which gives Σ4 x·w exactly, as the float Q8_MAGIC + it
 *    (tensor_impl.h); a tile of GP row pairs × GT tokens shares each weight load over GT
 *    tokens and each activation load over GP pairs;
 *  - otherwise groups of 16 rows, a lane per row (below), the weights transposed once per
 *    call into a panel on the stack; rows longer than the panel in pieces, the chains parked
 *    between them (gemm_q8_0_pieces).
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include <stdlib.h>

#include "tensor/x86/q8grp_avx512.h"
#include "tensor/x86/transpose16_avx512.h"

#define GP 4   /* row pairs per tile */
#define GT 4   /* tokens per tile */

/* fp16 field at p broadcast to 8 lanes (vcvtph2ps: rt_f16_to_f32's bits). */
static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

/* The accumulators of P pairs × T tokens over every block; row i of wr (2P row pointers) goes
 * to y[t * ldy + yo[i]] (a lone last row is given twice; its copy is not stored: `store_hi`
 * false). With pf, each row's stream is fetched X86_Q8_PF bytes ahead (gemv_avx512.c). */
static inline __attribute__((always_inline)) void tile(int P, int T, int64_t nb, const uint8_t *const *wr,
                                                        const int64_t *yo, const uint8_t *x, size_t xs, float *y,
                                                        int64_t ldy, bool store_hi, bool pf) {
    const __m512i bias = _mm512_set1_epi8((char)0x80), zero = _mm512_setzero_si512();
    const uint8_t *u = x + q8_0_tail(nb * QK8_0);   /* the tails (tensor_impl.h) */
    __m512 acc[GP][GT];
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) acc[p][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        if (pf && (b & 1))   /* a line a stream every other block */
            _Pragma("GCC unroll 8")
            for (int i = 0; i < 2 * P; i++) _mm_prefetch((const char *)(wr[i] + off + X86_Q8_PF), _MM_HINT_T0);
        __m512i xu[GT];
        __m512 dx[GT];
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            const uint8_t *ub = u + t * xs + (size_t)b * Q8_0_TAIL_BYTES;
            xu[t] = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(ub + Q8_0_TAIL_QS)));
            dx[t] = _mm512_set1_ps(rd_f32(ub));
        }
        _Pragma("GCC unroll 8")
        for (int p = 0; p < P; p++) {
            const uint8_t *w0 = wr[2 * p] + off, *w1 = wr[2 * p + 1] + off;
            const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(w0 + Q8_0_QS))),
                                                 _mm256_loadu_si256((const __m256i *)(w1 + Q8_0_QS)), 1);
            const __m512i nc = _mm512_sub_epi32(_mm512_set1_epi32(Q8_MAGIC_BITS), _mm512_dpbusd_epi32(zero, bias, w));
            const __m512 dw = _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(w0), _mm256_castsi256_si128(bcast_h(w1)), 1));
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) {
                const __m512 pf = _mm512_sub_ps(_mm512_castsi512_ps(_mm512_dpbusd_epi32(nc, xu[t], w)), _mm512_set1_ps(Q8_MAGIC));
                acc[p][t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx[t]), pf, acc[p][t]);
            }
        }
    }
    _Pragma("GCC unroll 8")
    for (int p = 0; p < P; p++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            y[t * ldy + yo[2 * p]] = x86_hsum_ps(_mm512_castps512_ps256(acc[p][t]));
            if (p + 1 < P || store_hi) y[t * ldy + yo[2 * p + 1]] = x86_hsum_ps(_mm512_extractf32x8_ps(acc[p][t], 1));
        }
}

/* One row tile (P pairs) over every token, GT at a time, then the token tail; the first pass
 * fetches ahead where pf says (the others find the rows in L1). */
static inline __attribute__((always_inline)) void row_tile(int P, int64_t nb, const uint8_t *const *wr,
                                                            const int64_t *yo, const uint8_t *x, size_t xs,
                                                            int64_t n_tok, float *y, int64_t ldy, bool store_hi,
                                                            bool pf) {
    int64_t t = 0;
    for (; t + GT <= n_tok; t += GT) tile(P, GT, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, store_hi, pf && !t);
    switch (n_tok - t) {
    case 3: tile(P, 3, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, store_hi, pf && !t); break;
    case 2: tile(P, 2, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, store_hi, pf && !t); break;
    case 1: tile(P, 1, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, store_hi, pf && !t); break;
    default: break;
    }
}

static const int64_t row_order[2 * GP] = { 0, 1, 2, 3, 4, 5, 6, 7 };   /* y offsets of neighbouring rows */

/* ---- groups of 16 rows: one row per lane ---------------------------------------------------
 *
 * From PMIN_TOK tokens on, rows go 16 at a time with a lane per row, which takes the scale
 * product (one multiply per 16 rows instead of per 2) off the FMA pipes: per block, lane r of
 * accumulator j (one per 4-byte chunk j = 0..7) gets row r's chunk j, so after the blocks the
 * 8 accumulators hold exactly dot_q8_0's 8 lanes of each row and are reduced in x86_hsum_ps's
 * tree, 16 rows at a time. The weights are transposed once per call into a group panel (the
 * chunk j of 16 rows side by side, its dpbusd start Q8_MAGIC_BITS − 128 · Σ4 w, the 16
 * scales as floats); each token's chunk is broadcast from its row's tail (biased by 128:
 * unsigned), so dpbusd(Q8_MAGIC_BITS − 128 · Σ4 w, x + 128, w) holds the bits of the float
 * Q8_MAGIC + Σ4 x·w exactly (q8grp_avx512.h, whose tiles these are). A tile of Q8G_T tokens
 * keeps its accumulators in registers through Q8G_KC blocks of the panel (35 KB: read from L1
 * by all the tiles of a block of Q8G_TB tokens), then parks them in a buffer until the next
 * Q8G_KC blocks (x86_q8g_rows).
 * A dpbusd and an FMA per 4-byte chunk share the core's two FMA pipes (measured: 8 of each
 * take as long as 16 of either), so a tile is bound to ~25 cycles a block, which the 1024-wide
 * rows reach (one thread, 512 tokens: ~400 GOP/s, gm outside the repo); 3584-wide rows read
 * through the whole panel (122 KB, from L2) took ~260, with the Q8G_KC chunks ~340. recur-bench
 * pp512, 2 threads, alternating rounds against the whole panel: qwen35-0.8b Q8_0 1.048x
 * (10/10 won), qwen3-0.6b Q8_0 1.110x (6/6). */

/* Fewer tokens do not pay for the transposition; from 8 on it does (one thread, gm outside
 * the repo, against the pair tiles: 2048 -> 512, a 256-expert MoE's expert, 8 / 9 / 12 / 16
 * tokens 123.5 / 113.7 / 124.3 / 126.7 -> 129.2 / 138.6 / 150.5 / 149.3 GOP/s; 1024x3584 and
 * 4096x1024 alike; at 4 tokens the pair tiles are 40 % faster). Short prompts are the usual
 * ubatch of a chat turn whose prefix is cached, and a MoE prompt gives each expert ~16
 * tokens. */
#define PMIN_TOK 8
#define PMAXB Q8G_PMAXB   /* blocks per group panel (8192 elements) */
#define GR Q8G_ROWS

/* The loops here are unrolled by hand (pragmas): left as loops, GCC kept x86_transpose16's
 * arrays on the stack and read the scales through a vector of row pointers, and a group
 * block took 130-170 cycles instead of 95-120 (the same panel bits; pk outside the repo).
 * With `next`, the group after this one is fetched into L2 as this one is read, a line of each
 * row every other block: 16 rows read side by side are streams the hardware prefetchers do not
 * follow (gemv_avx512.c). /tmp/s8/tk5.c (40 matrices of 1024 x 3072 from memory through
 * tensor_matmul, 2 threads, median of 9 passes): 16 tokens 0.33-0.39 -> 0.25-0.27 ms, 32
 * 0.45-0.53 -> 0.38-0.43, 64 0.73-0.86 -> 0.66-0.78, 512 the same within noise (4.8-5.5). */
static void pack_group(q8_grp *pk, int64_t nb, const uint8_t *W, size_t ws, bool next) {
    const uint8_t *row[GR];
    for (int r = 0; r < GR; r++) row[r] = W + (size_t)r * ws;
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        q8_grp *q = &pk[b];
        if (next && !(b & 1))   /* the next group's line of each row, into L2 */
            _Pragma("GCC unroll 16")
            for (int r = 0; r < GR; r++) _mm_prefetch((const char *)(row[r] + GR * ws + off), _MM_HINT_T1);
        x86_transpose16(row, off + Q8_0_QS, q->w);
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) q->nc[j] = x86_q8g_start(q->w[j]);
        _Alignas(32) uint16_t h[GR];
        const uint8_t *h0 = W + off;   /* row r's scale at h0 + r·ws */
        _Pragma("GCC unroll 16")
        for (int r = 0; r < GR; r++) h[r] = rd_u16(h0 + (size_t)r * ws);
        q->dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)h));
    }
}

/* The panel of a group already packed at load (tensor.h TENSOR_Q8R16_BLOCK): its chunks are
 * the panel's w as they lie, so only the dpbusd starts and the float scales are derived. */
static void pack_group_r16(q8_grp *pk, int64_t nb, const uint8_t *G) {
    for (int64_t b = 0; b < nb; b++, G += TENSOR_Q8R16_BLOCK) {
        q8_grp *q = &pk[b];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < 8; j++) {
            q->w[j] = _mm512_loadu_si512((const void *)(G + Q8R16_QS + 64 * j));
            q->nc[j] = x86_q8g_start(q->w[j]);
        }
        q->dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(G + Q8R16_D)));
    }
}

/* Packs the blocks [p0, p0 + pb) of the group of rows r..r+15 into pk. */
typedef void (*q8_piece_fn)(q8_grp *pk, int64_t p0, int64_t pb, const uint8_t *W, size_t ws, int64_t r);

/* Whole groups of 16 rows (from row 0) whose rows are longer than a panel (PMAXB blocks):
 * each group's blocks go a piece of PMAXB at a time, every token through the piece, the
 * chains of all the tokens parked between the pieces (n_tok · 512 bytes, from L2). Before,
 * such rows (a 7B-14B model's down-projection, 14336-18944 elements) took the pair tiles.
 * Returns the rows done: none without memory for the park. 256 x 14336, 512 tokens, 2
 * threads (/tmp/s16/mmn.c outside the repo, best of 5): packed 9.29 -> 6.60 ms (404 -> 570
 * GFLOP/s; 4096-wide rows in one panel: ~700), the file's layout 9.02 -> 6.55; pieces of
 * 128, 160 or 224 blocks instead of 256 made no difference. recur-bench pp512 -r 1 --profile,
 * a Q8_0 llama3-8b (recur-gguf synth, zero weights): the 4096 x 14336 matmul's share of the
 * matmul time 34.9-36.1 % -> 27.7-27.8 % (gate/up, twice its work: 52 %), pp512 in two
 * alternating rounds 35.7-37.7 -> 38.1-43.3 t/s (ik_llama.cpp 35.8-42.0, the same minutes). */
static int64_t gemm_q8_0_pieces(q8_piece_fn pack, int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows,
                                const uint8_t *X, size_t xs, int64_t n_tok, float *y, int64_t ldy) {
    q8g_park *park = aligned_alloc(64, (size_t)n_tok * sizeof *park);
    if (!park) return 0;
    const uint8_t *u = X + q8_0_tail(nb * QK8_0);
    _Alignas(64) q8_grp pk[PMAXB];   /* 272 KB, only touched here */
    int64_t r = 0;
    for (; r + GR <= n_rows; r += GR)
        for (int64_t p0 = 0; p0 < nb; p0 += PMAXB) {
            const int64_t pb = p0 + PMAXB < nb ? PMAXB : nb - p0;
            pack(pk, p0, pb, W, ws, r);
            x86_q8g_rows(pb, p0 == 0, p0 + pb == nb, pk, u + (size_t)p0 * Q8_0_TAIL_BYTES, Q8_0_TAIL_BYTES, xs, n_tok,
                         y + r, ldy, park, true, NULL);
        }
    free(park);
    return r;
}

/* q8_piece_fn over the file's rows. */
static void pack_piece(q8_grp *pk, int64_t p0, int64_t pb, const uint8_t *W, size_t ws, int64_t r) {
    pack_group(pk, pb, W + (size_t)r * ws + (size_t)p0 * Q8_0_BYTES, ws, false);
}

static void gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    const uint8_t *wr[2 * GP];
    int64_t r = 0;
    if (nb <= PMAXB && n_tok >= PMIN_TOK) {
        _Alignas(64) q8_grp pk[PMAXB];   /* 272 KB, only touched here */
        _Alignas(64) q8g_park park[Q8G_TB];
        const uint8_t *u = X + q8_0_tail(nb * QK8_0);
        for (; r + GR <= n_rows; r += GR) {
            /* pack_group waits on memory for its rows (perf: 10.8 % of mamba2-370m Q8_0 pp512's
             * samples against 2.5 % in qwen35-0.8b): fetching the next group's rows into L2
             * while the last token block runs took it to 2.2 %, but prompts ran no faster
             * (3 alternating pairs, 861 / 870 / 867 against 850 / 860 / 869 t/s) */
            pack_group(pk, nb, W + (size_t)r * ws, ws, r + 2 * GR <= n_rows);   /* a next group to fetch */
            x86_q8g_rows(nb, true, true, pk, u, Q8_0_TAIL_BYTES, xs, n_tok, y + r, ldy, park, false, NULL);
        }
    } else if (n_tok >= PMIN_TOK) {
        r = gemm_q8_0_pieces(pack_piece, nb, W, ws, n_rows, X, xs, n_tok, y, ldy);
    }
    for (; r + 2 * GP <= n_rows; r += 2 * GP) {
        for (int i = 0; i < 2 * GP; i++) wr[i] = W + (size_t)(r + i) * ws;
        row_tile(GP, nb, wr, row_order, X, xs, n_tok, y + r, ldy, true, false);
    }
    for (; r < n_rows; r += 2) {   /* pairs left, then a lone row given twice */
        const bool two = r + 1 < n_rows;
        wr[0] = W + (size_t)r * ws;
        wr[1] = two ? wr[0] + ws : wr[0];
        row_tile(1, nb, wr, row_order, X, xs, n_tok, y + r, ldy, two, false);
    }
}

/* A few tokens over the file's layout (tensor.h tensor_gemv.tokens of gemv[Q8_0]): gemv_q8_0's
 * four streams, rows r, r + q, r + 2q, r + 3q (q = n_rows / 4) as two pairs of a tile, GT
 * tokens a pass over the four rows, the first pass fetching ahead as gemv_q8_0 does. gemm_q8_0
 * would read neighbouring rows side by side, which this machine's prefetchers follow badly
 * (gemv_avx512.c), and packing them at load reads slower still for the single token
 * (x86/gemv_q8016_avx512.c). The 0-3 rows left go a pair at a time. */
static void gemm_q8_0_streams(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                              int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0, q = n_rows / 4;
    for (int64_t r = 0; r < q; r++) {
        const int64_t yo[4] = { r, r + q, r + 2 * q, r + 3 * q };
        const uint8_t *wr[4];
        for (int i = 0; i < 4; i++) wr[i] = W + (size_t)yo[i] * ws;
        row_tile(2, nb, wr, yo, X, xs, n_tok, y, ldy, true, true);
    }
    for (int64_t r = 4 * q; r < n_rows; r += 2) {
        const bool two = r + 1 < n_rows;
        const int64_t yo[2] = { r, r + 1 };
        const uint8_t *wr[2] = { W + (size_t)r * ws, W + (size_t)(two ? r + 1 : r) * ws };
        row_tile(1, nb, wr, yo, X, xs, n_tok, y, ldy, two, true);
    }
}

/* q8_piece_fn over rows packed 16 to a group. */
static void pack_piece_r16(q8_grp *pk, int64_t p0, int64_t pb, const uint8_t *W, size_t ws, int64_t r) {
    pack_group_r16(pk, pb, W + (size_t)r * ws + (size_t)p0 * TENSOR_Q8R16_BLOCK);
}

/* Rows packed 16 to a group at load (tensor.h gemm_q8_0_r16): the group panels from the
 * packed bytes; rows too long for a panel in pieces (without memory for the park, unpacked a
 * group at a time for gemm_q8_0). */
static void gemm_q8_0_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    if (nb <= PMAXB) {
        _Alignas(64) q8_grp pk[PMAXB];
        _Alignas(64) q8g_park park[Q8G_TB];
        const uint8_t *u = X + q8_0_tail(nb * QK8_0);
        for (int64_t r = 0; r < n_rows; r += GR) {
            pack_group_r16(pk, nb, W + (size_t)r * ws);
            x86_q8g_rows(nb, true, true, pk, u, Q8_0_TAIL_BYTES, xs, n_tok, y + r, ldy, park, false, NULL);
        }
        return;
    }
    if (gemm_q8_0_pieces(pack_piece_r16, nb, W, ws, n_rows, X, xs, n_tok, y, ldy) == n_rows) return;
    x86_gemm_r16_unpacked(tensor_q8_0_r16_unpack, gemm_q8_0, rt_dot_q8_0_r16, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
}

void rt_fill_gemm_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0;
    k->gemv[GGUF_T_Q8_0].tokens = gemm_q8_0_streams;
    k->gemv[GGUF_T_Q8_0].tokens_max = X86_Q8_STREAMS_MAX;
    k->gemm_q8_0_r16 = gemm_q8_0_r16;
}
