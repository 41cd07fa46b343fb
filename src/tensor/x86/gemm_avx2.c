/* gemm_avx2.c — AVX2 tiles of weight rows × activation rows for the prompt matmul (tensor.h,
 * gemm), for CPUs without AVX-512.
 *
 * Q8_0: every output element performs exactly dot_avx2.c's dot_q8_0 operations, which are
 * rt_dot_q8_0's (tensor_impl.h): per block, 8 int32 lanes (lane l: the exact sum of the
 * products of elements 4l..4l+3), one FMA of those lanes (as floats) times the product of the
 * two fp16 scales into an 8-lane accumulator, and x86_hsum_ps at the end. Only the layout and
 * the way to the integers differ:
 *  - the prompt gemm (gemm_q8_0) widens weights and activations to int16 and forms a lane as
 *    two madds and an add (the section below says why), R16 rows × T16 tokens a tile;
 *  - the several-token kernel over the single-token streams (gemm_q8_0_streams) forms a lane
 *    the same way from 8 tokens on, the weights split into even and odd bytes in registers
 *    (dot_avx2.c's single-token form), R16 × T16 a tile;
 *  - below 8 tokens, and as the gemm's fallback, the dot's sign trick (maddubs of |w| and x
 *    with w's sign, then madd with ones: exact, the activation bytes are never -128), R8 rows
 *    × T8 tokens a tile.
 * Q4_0 (gemm_q4_0, from Q40_W16_TOK tokens): the same widened gemm over its values q − 8,
 * with rt_dot_q4_0_avx2's two chains (even blocks, odd blocks) side by side (gemm_w16).
 * Tokens go in chunks whose activations stay in L2 while every row tile passes over them.
 * Any n (a multiple of 32), any row and token counts, unaligned rows and strides. */
#include <string.h>

#include "tensor/x86/simd_x86.h"

#define R8 2            /* rows per tile (AVX2 has 16 vector registers: 8 accumulators) */
#define T8 4            /* tokens per tile */
#define CHUNK_BYTES (192 << 10)   /* activations of a token chunk: within L2 */

/* Row i of wr goes to y[t * ldy + yo[i]]; with pf, each row's stream is fetched X86_Q8_PF
 * bytes ahead (gemv_avx512.c). */
static inline __attribute__((always_inline)) void q8_tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                           const int64_t *yo, const uint8_t *x, size_t xs, float *y,
                                                           int64_t ldy, bool pf) {
    __m256 acc[R8][T8];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        if (pf && (b & 1))   /* a line a stream every other block */
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) _mm_prefetch((const char *)(wr[r] + off + X86_Q8_PF), _MM_HINT_T0);
        __m256i w[R8], aw[R8];
        __m256 dw[R8];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            w[r] = _mm256_loadu_si256((const __m256i *)(wr[r] + off + Q8_0_QS));
            aw[r] = _mm256_sign_epi8(w[r], w[r]);
            dw[r] = x86_f16_bcast(wr[r] + off);
        }
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const uint8_t *xb = x + t * xs + off;
            const __m256i xv = _mm256_loadu_si256((const __m256i *)(xb + Q8_0_QS));
            const __m256 dx = x86_f16_bcast(xb);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[r], _mm256_sign_epi8(xv, w[r])),
                                                    _mm256_set1_epi16(1));
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) y[t * ldy + yo[r]] = x86_hsum_ps(acc[r][t]);
}

/* Rows wr[0..R) over tokens [0, n_tok): T8 at a time, then the tail; the first pass fetches
 * ahead where pf says (the others find the rows in L1). */
static inline __attribute__((always_inline)) void q8_rows(int R, int64_t nb, const uint8_t *const *wr,
                                                           const int64_t *yo, const uint8_t *x, size_t xs,
                                                           int64_t n_tok, float *y, int64_t ldy, bool pf) {
    int64_t t = 0;
    for (; t + T8 <= n_tok; t += T8) q8_tile(R, T8, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t);
    switch (n_tok - t) {
    case 3: q8_tile(R, 3, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    case 2: q8_tile(R, 2, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    case 1: q8_tile(R, 1, nb, wr, yo, x + t * xs, xs, y + t * ldy, ldy, pf && !t); break;
    default: break;
    }
}

/* ---- the prompt gemm: the integers as int16 products ------------------------------------
 *
 * On the Zen 4 machine measured (AVX2 only), each of these ops goes to two of the four vector
 * pipes, in pairs that overlap (asm loops of independent ops, 2 of one kind a cycle; mixed 1:1,
 * 4 a cycle where the pairs are apart, 2 where they are the same pair, ~2.8 where they share
 * one pipe): vpmaddwd and vpmaddubsw one pair; vfmadd, vmulps and vpsignb a second that shares
 * a pipe with it; vpsraw / vpsllw and vpshufb a third, sharing one with the FMA pair;
 * vcvtdq2ps and vaddps a fourth, sharing one with the madd pair; vpaddd and vpand any pipe;
 * two 256-bit loads a cycle (vcvtph2ps from memory 2 a cycle beside the FMAs, from a register
 * 1). So the madds and the FMA of a (row, token, block) below are not one pair's three slots
 * (1.5 cycles): 16 madds and 8 FMAs ran in 8 cycles, and the whole unit (2 madds, vpaddd,
 * vcvtdq2ps, FMA) 1.34 cycles with independent ops, 1.60-1.67 with its chains, its operands
 * from memory and its scale product broadcast (3 loads a unit there: 1.5 cycles of loads).
 * The sign trick spends sign, maddubs, madd, FMA and the scale product on a (row, token,
 * block), its sign on the FMA pair. Here the weights and activations are widened to int16
 * once (a block of rows once per chunk of tokens, a token's row once per call) and a block's
 * 8 lanes are two madds and an add, the same integers (each product fits int16 × int16,
 * each lane the exact sum of elements 4l..4l+3), so the same bits. The widened order puts
 * elements 4l, 4l+1 of every l in the first 16 words and 4l+2, 4l+3 in the last 16
 * (w16_split), so madd's lane l of each half holds two of lane l's products. The block scales are read as floats (x86_f16_tab), and each
 * (row, token) product d_w·d_x (ggml's rounding) is made a piece at a time and read back as
 * a broadcast load.
 * A tile is 2 rows × 4 tokens: a block's row vectors loaded once into registers for the 4
 * tokens, a token's once for the 2 rows, 8 accumulators: 20 loads for 8 (row, token, block)
 * where 3 × 4 with the rows as the madds' memory operands took 44 for 12; Zen 4 loads two
 * vectors a cycle, so that tile waited on its loads (an asm loop of each: 2.04 against 1.63
 * cycles a (row, token, block); a unit's ops alone: 1.34, above). The scale products
 * of a piece are made 8 tokens to one multiply before its tiles read them. The tile of the
 * last piece reduces its 8 accumulators in one x86_hsum8_ps (lanes 2t, 2t + 1: its two rows'
 * outputs of token t) and writes them to y as 4 pairs. Until this the lanes of every tile went
 * to a park of the row block (~60 KB: out of L1) and a pass after it (q8_out) read them back
 * 8 rows at a time: ~10 % of the gemm's samples (perf, 4096 × 1024); gv, one thread, 512
 * tokens, best of 4-5 alternating runs: 4096 × 1024 81.1 -> 87.6 GFLOP/s, 1024 × 1024 83.5 ->
 * 87.0, 1024 × 3072 (3 pieces: the first two still park) 79.4 -> 82.1. (Tiles writing 2
 * floats each to y's rows, 4 KB apart, had missed L1 at every tile before the park, 1024 rows
 * × 1024, 192 tokens: 65-67 GFLOP/s against 78-80 with rows 4160 bytes apart; with the pairs
 * stored after one reduction of 8 they no longer cost.)
 * Measured (/tmp/s16/gv.c outside the repo, best of alternating runs): gemm[Q8_0] alone, one
 * thread, 512 tokens, 1024 × 1024 63.5 -> 78.2 GFLOP/s, 256 × 1024 (256 tokens) 73.5 -> 80.6;
 * tensor_matmul, two threads, 512 tokens, 1024 × 1024 111.8 -> 119.5, 6144 × 1024 121.9 ->
 * 133.5. Tried: the scale products of a whole chunk made at once (n 3072: 71 -> 63), the next
 * tile's rows fetched into L2 ahead (no gain), chunks of 48 and 192 KB (no better). Before
 * (3 × 4, f8c867d-40fe873): 2 × 4 with both sides in registers was 2-4 % slower than 3 × 4
 * then (its products were made per tile, 4 tokens a multiply, from the fp16 scales).
 * Loops (BLIS's): a chunk of tokens is widened (W16_CHUNK), then a block of rows (W16_ROWS,
 * held in L2); for each group of T16P tokens, a piece of QP blocks of theirs (16 KB, held in
 * L1) meets every row tile of the block, whose rows stream from L2 (once for the group's two
 * tiles). Until 48ce1f2 a row tile's piece sat in L1 and every chunk token streamed past it
 * from L2: 32 bytes from L2 a (row, token, block) instead of 8. With it the scale rows went
 * block-major per group (DX16) and the widened row stride to 33 lines mod 64 (W16_STRIDE).
 * gv, 512 tokens, best of 4 alternating runs, 48ce1f2 -> this: one thread, gemm alone,
 * 1024 × 1024 79.3 -> 84.4 GFLOP/s, 1024 × 2048 75.5 -> 80.1, 1024 × 3072 72.2 -> 79.5; two
 * threads, tensor_matmul, 1024 × 2048 140.8 -> 150.6, 1024 × 3072 149.8 -> 154.6, 4096 ×
 * 1024 155.0 -> 162.7, 6144 × 1024 154.8 -> 162.0. */
#define R16 2              /* rows per tile: 8 accumulators, 4 row vectors, 2 token vectors, 2 temporaries */
#define T16 4              /* tokens per tile */
#define T16P 8             /* tokens per piece: their scale products are 8-float vectors */
_Static_assert(T16 == 4 && T16P == 2 * T16, "q8_piece16: two tiles a piece, tails of 1-3 tokens");
#define QP 32              /* blocks per piece: a token group's widened piece (16 KB) stays in L1 */
#define W16_CHUNK (1024 << 10)   /* widened activations of a token chunk: each chunk widens the rows again, and
                                  * its tokens are read once per row block (96 and 256 KB: no better; 8 MB,
                                  * one chunk for 512 tokens of rows up to 4096: 1024 x 3584, two threads,
                                  * 155.2 / 155.7 against 154.8 / 136.0 GFLOP/s) */
#define W16_MIN_TOK 48          /* tokens a chunk at least: each chunk widens the rows again (16: 1024 × 3072, two threads, 130.6 against 143.7 GFLOP/s) */
/* Words from one widened row (token or weight) to the next: 33 lines (of a block each) mod 64,
 * so a token group's piece spreads over L1's 64 sets, 4 lines a set, and leaves room for the
 * rows streaming past (rows of 2^k blocks 4 KB apart fall into the same sets; 65 lines, n 2048,
 * put 8 lines in most sets: 1024 × 2048, one thread, 72.4 -> 80.1 GFLOP/s). */
#define W16_STRIDE(nb) (((size_t)(nb) + (size_t)((97 - (nb) % 64) % 64)) * QK8_0)
/* Token t's scale of block b in a chunk: a group of T16P tokens' scales contiguous, block by
 * block, so a piece reads them as neighbouring 8-float vectors (a chunk-wide row per block put
 * a piece's loads tc floats apart, 2 KB at 512 tokens, into two L1 sets). */
#define DX16(nb, b, t) ((((size_t)(t) / T16P) * (size_t)(nb) + (size_t)(b)) * T16P + (size_t)(t) % T16P)
#define YG 16              /* row blocks are a multiple of it */
#define W16_ROWS (512 << 10)   /* widened rows of a row block, held in L2 (128 and 256 KB no better) */

/* The 32 signed bytes of q widened to int16 in w16's order: *a words 0..15, *b words 16..31. */
static inline __attribute__((always_inline)) void w16_split(__m256i q, __m256i *a, __m256i *b) {
    const __m256i idx = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    /* per 128-bit lane the pairs (4l, 4l+1), then (4l+2, 4l+3); qwords [0 2 1 3]: all first ones low */
    const __m256i v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(q, idx), 0xD8);
    *a = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
    *b = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
}

/* A block's 32 signed values widened (w16_split) to the 32 words at dst (32-byte aligned). */
static inline void w16_store(__m256i q, int16_t *dst) {
    __m256i a, b;
    w16_split(q, &a, &b);
    _mm256_store_si256((__m256i *)dst, a);
    _mm256_store_si256((__m256i *)dst + 1, b);
}

/* A block's 32 values in element order: Q8_0's bytes, or Q4_0's nibbles less 8. */
static inline __m256i w16_values(bool q40, const uint8_t *blk) {
    return q40 ? _mm256_sub_epi8(x86_unpack_nib16(blk + Q4_0_QS), _mm256_set1_epi8(8))
               : _mm256_loadu_si256((const __m256i *)(blk + Q8_0_QS));
}

/* How a chain's last piece ends (q8_tile16): its lanes reduced as they are (Q8_0), or first
 * added to those of Q4_0's even blocks (parked at pe), or to +0 where there are none (an odd
 * last block is the even chain's: rt_dot_q4_0_avx2 still adds its odd accumulator, zeros). */
enum { FIN_Q8, FIN_PE, FIN_ZERO };

/* Blocks [b0, b0 + np) of R rows (widened at w16, s16 words apart) against T ≤ T16 widened
 * tokens (at x16, s16 words apart too); the scale product of row r, token t, block b0 + i at
 * pr[i][r][t0 + t]. The accumulators start at zero for a chain's first piece (from NULL) and
 * otherwise come from from (row r, token t at from + (r·T16P + t)·8); they go to `to`, laid out
 * the same, so the tiles pass over the blocks a piece at a time, a piece of the token group's
 * widened rows staying in L1 for all the row tiles, and the blocks still go in order for every
 * element. After the last piece (out set) they are reduced instead (as fin says), row r's
 * output of token t going to out[t·so + r]. A block's row vectors are loaded once into
 * registers for the T tokens, a token's two vectors once for the R rows. */
static inline __attribute__((always_inline)) void q8_tile16(int R, int T, int64_t b0, int np, size_t s16,
                                                             const int16_t *w16, const int16_t *x16,
                                                             const float (*pr)[R16][T16P], int t0, const float *from,
                                                             float *to, int fin, const float *pe, float *out,
                                                             size_t so) {
    __m256 acc[R16][T16];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++)
            acc[r][t] = from ? _mm256_loadu_ps(from + ((size_t)r * T16P + (size_t)t) * 8) : _mm256_setzero_ps();
    for (int i = 0; i < np; i++) {
        const int64_t b = b0 + i;
        __m256i wa[R16], wc[R16];
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const __m256i *wv = (const __m256i *)(w16 + (size_t)r * s16 + (size_t)b * QK8_0);
            wa[r] = _mm256_load_si256(wv);
            wc[r] = _mm256_load_si256(wv + 1);
            __asm__("" : "+x"(wa[r]), "+x"(wc[r]));   /* in registers for the T tokens */
        }
        _Pragma("GCC unroll 8")
        for (int t = 0; t < T; t++) {
            const __m256i *xb = (const __m256i *)(x16 + (size_t)t * s16 + (size_t)b * QK8_0);
            __m256i xa = _mm256_load_si256(xb), xc = _mm256_load_si256(xb + 1);
            __asm__("" : "+x"(xa), "+x"(xc));   /* one load for the R rows */
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(xa, wa[r]), _mm256_madd_epi16(xc, wc[r]));
                acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&pr[i][r][t0 + t]), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    if (!out) {
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) _mm256_storeu_ps(to + ((size_t)r * T16P + (size_t)t) * 8, acc[r][t]);
        return;
    }
    if (fin != FIN_Q8)   /* rt_dot_q4_0_avx2's acc0 + acc1 */
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++)
                acc[r][t] = _mm256_add_ps(fin == FIN_PE ? _mm256_loadu_ps(pe + ((size_t)r * T16P + (size_t)t) * 8)
                                                        : _mm256_setzero_ps(),
                                          acc[r][t]);
    if (R == 2 && T == 4) {   /* lanes 2t, 2t + 1: rows 0, 1 of token t */
        const __m256 v[8] = { acc[0][0], acc[1][0], acc[0][1], acc[1][1], acc[0][2], acc[1][2], acc[0][3], acc[1][3] };
        const __m256 h = x86_hsum8_ps(v);
        const __m128 lo = _mm256_castps256_ps128(h), hi = _mm256_extractf128_ps(h, 1);
        _mm_storel_pi((__m64 *)out, lo);
        _mm_storeh_pi((__m64 *)(out + so), lo);
        _mm_storel_pi((__m64 *)(out + 2 * so), hi);
        _mm_storeh_pi((__m64 *)(out + 3 * so), hi);
    } else {
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _Pragma("GCC unroll 8")
            for (int t = 0; t < T; t++) out[(size_t)t * so + (size_t)r] = x86_hsum_ps(acc[r][t]);
    }
}

/* Where a piece's lanes come from and go (q8_tile16's from, to, fin and pe), for the row
 * tile's first token: token t's are 8·t floats on. */
typedef struct q8_lanes {
    const float *from;   /* NULL: a chain's first piece */
    float       *to;
    int          fin;
    const float *pe;
} q8_lanes;

/* A piece of blocks [b0, b0 + np) for a group of up to T16P tokens: their scale products with
 * the rows' (row scales at dw[r·nb + b], token t's of block b at dx[b·T16P + t]) made 8 tokens
 * to one multiply before the tiles read any (a product stored just before its broadcast loads
 * would wait for the store), then the tiles of T16 tokens and the 1-3 left; the lanes of row r,
 * token t as ln says, or for the last piece (out set) its output at out[t·so + r]. */
static inline __attribute__((always_inline)) void q8_piece16(int R, int nt, int64_t b0, int np, int64_t nb,
                                                              const int16_t *w16, const float *dw, const int16_t *x16,
                                                              size_t s16, const float *dx, q8_lanes ln, float *out,
                                                              size_t so) {
    _Alignas(32) float pr[QP][R16][T16P];
    for (int i = 0; i < np; i++) {
        const __m256 dxv = _mm256_loadu_ps(dx + (size_t)(b0 + i) * T16P);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++)
            _mm256_store_ps(pr[i][r], _mm256_mul_ps(_mm256_broadcast_ss(&dw[(size_t)r * (size_t)nb + (size_t)(b0 + i)]), dxv));
    }
#define Q8_TILE(T)                                                                                                   \
    q8_tile16(R, T, b0, np, s16, w16, x16 + t * s16, pr, t, ln.from ? ln.from + t * 8 : NULL, ln.to + t * 8, ln.fin, \
              ln.pe ? ln.pe + t * 8 : NULL, out ? out + t * so : NULL, so)
    int t = 0;
    for (; t + T16 <= nt; t += T16) Q8_TILE(T16);
    switch (nt - t) {
    case 3: Q8_TILE(3); break;
    case 2: Q8_TILE(2); break;
    case 1: Q8_TILE(1); break;
    default: break;
    }
#undef Q8_TILE
}

static const int64_t row_order[R8] = { 0, 1 };   /* y offsets of neighbouring rows */

/* The sign trick's tiles (q8_rows), for when the widened chunk cannot be allocated. */
static void gemm_q8_0_sign(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                           int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0;
    int64_t tc = (int64_t)(CHUNK_BYTES / (xs ? xs : 1)) / T8 * T8;
    if (tc < T8) tc = T8;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
        const int64_t nt = n_tok - t0 < tc ? n_tok - t0 : tc;
        const uint8_t *xt = X + t0 * xs;
        float *yt = y + t0 * ldy;
        int64_t r = 0;
        for (; r + R8 <= n_rows; r += R8) {
            const uint8_t *wr[R8];
            for (int i = 0; i < R8; i++) wr[i] = W + (size_t)(r + i) * ws;
            q8_rows(R8, nb, wr, row_order, xt, xs, nt, yt + r, ldy, false);
        }
        for (; r < n_rows; r++) {
            const uint8_t *wr[1] = { W + (size_t)r * ws };
            q8_rows(1, nb, wr, row_order, xt, xs, nt, yt + r, ldy, false);
        }
    }
}

/* The widened gemm of Q8_0 rows, or of Q4_0 rows (q40: their values q − 8 widened as Q8_0's
 * bytes are, the same integers, so the same lanes as rt_dot_q4_0_avx2's x86_dot_i8). Q4_0's dot
 * keeps two chains, the even blocks' and the odd blocks', added before the reduction; here a
 * row's blocks (and every token's with them) are widened even ones first, then odd ones, each
 * chain passing over its own range of pieces: the even chain's last lanes are parked apart
 * (park_e) and added to the odd chain's before the sums. Returns false where its buffers cannot
 * be allocated (nothing written). */
static inline __attribute__((always_inline)) bool gemm_w16(bool q40, int64_t n, const uint8_t *W, size_t ws,
                                                          int64_t n_rows, const uint8_t *X, size_t xs, int64_t n_tok,
                                                          float *y, int64_t ldy) {
    const int64_t nb = n / QK8_0, ne = q40 ? (nb + 1) / 2 : nb;   /* [0, ne): the first chain's blocks */
    const size_t wb = q40 ? Q4_0_BYTES : Q8_0_BYTES;
    const size_t s16 = W16_STRIDE(nb);
    int64_t tc = (int64_t)(W16_CHUNK / (s16 * 2)) / T16P * T16P;
    if (tc < W16_MIN_TOK) tc = W16_MIN_TOK;
    if (tc > n_tok) tc = (n_tok + T16P - 1) / T16P * T16P;
    int64_t mb = (int64_t)(W16_ROWS / (s16 * 2)) / YG * YG;   /* rows of a row block */
    if (mb < YG) mb = YG;
    if (mb > n_rows) mb = n_rows;
    const size_t x16b = (size_t)tc * s16 * 2, w16b = (size_t)mb * s16 * 2, parkb = (size_t)mb * T16P * 32;
    const size_t bytes = x16b + w16b + (size_t)mb * (size_t)nb * sizeof(float) + (size_t)nb * (size_t)tc * sizeof(float) +
                         (q40 ? 2 : 1) * parkb;
    int16_t *x16 = aligned_alloc(32, (bytes + 31) / 32 * 32);   /* (a multiple of the alignment) */
    if (!x16) return false;
    int16_t *w16 = x16 + x16b / 2;   /* a row block's widened rows */
    float *dw = (float *)(w16 + w16b / 2), *dx = dw + (size_t)mb * (size_t)nb, *park = dx + (size_t)nb * (size_t)tc;
    float *park_e = q40 ? park + parkb / sizeof(float) : NULL;
    for (int64_t t0 = 0; t0 < n_tok; t0 += tc) {
        const int64_t nt = n_tok - t0 < tc ? n_tok - t0 : tc;
        for (int64_t t = 0; t < nt; t++)
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *xb = X + (t0 + t) * xs + (size_t)b * Q8_0_BYTES;
                const int64_t c = q40 ? (b & 1 ? ne + b / 2 : b / 2) : b;   /* its place */
                w16_store(w16_values(false, xb), x16 + (size_t)t * s16 + (size_t)c * QK8_0);
                dx[DX16(nb, c, t)] = x86_f16_tab[rd_u16(xb)];
            }
        for (int64_t b = 0; b < nb; b++)   /* the last tile's tokens past nt: read, never used */
            for (int64_t t = nt; t < tc; t++) dx[DX16(nb, b, t)] = 0;
        for (int64_t g = 0; g < n_rows; g += mb) {
            const int64_t ng = n_rows - g < mb ? n_rows - g : mb;
            for (int64_t r = 0; r < ng; r++)
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *blk = W + (size_t)(g + r) * ws + (size_t)b * wb;
                    const int64_t c = q40 ? (b & 1 ? ne + b / 2 : b / 2) : b;
                    w16_store(w16_values(q40, blk), w16 + (size_t)r * s16 + (size_t)c * QK8_0);
                    dw[(size_t)r * (size_t)nb + (size_t)c] = x86_f16_tab[rd_u16(blk)];
                }
            /* T16P tokens (a piece of them in L1) against every row of the block (from L2),
             * a piece of blocks at a time, the lanes parked between pieces */
            for (int64_t t = 0; t < nt; t += T16P) {
                const int nt8 = nt - t < T16P ? (int)(nt - t) : T16P;
                for (int h = 0; h < (q40 ? 2 : 1); h++) {   /* the chains */
                    const int64_t lo = h ? ne : 0, hi = h ? nb : ne;
                    const bool last_chain = h == 1 || ne == nb;
                    for (int64_t b0 = lo; b0 < hi; b0 += QP) {
                        const int np = hi - b0 < QP ? (int)(hi - b0) : QP;
                        /* the last piece of the last chain: the sums */
                        float *const out = b0 + np == hi && last_chain ? y + (t0 + t) * ldy + g : NULL;
                        const bool first = b0 == lo, to_e = q40 && !h && b0 + np == hi;
                        int64_t r = 0;
#define Q8_PIECE(R)                                                                                                 \
    q8_piece16(R, nt8, b0, np, nb, w16 + (size_t)r * s16, dw + (size_t)r * (size_t)nb, x16 + t * s16, s16,          \
               dx + DX16(nb, 0, t),                                                                                  \
               (q8_lanes){ first ? NULL : park + (size_t)r * T16P * 8, (to_e ? park_e : park) + (size_t)r * T16P * 8, \
                           !q40 ? FIN_Q8 : h ? FIN_PE : FIN_ZERO, h ? park_e + (size_t)r * T16P * 8 : NULL },        \
               out ? out + r : NULL, (size_t)ldy)
                        for (; r + R16 <= ng; r += R16) Q8_PIECE(R16);
                        for (; r < ng; r++) Q8_PIECE(1);
#undef Q8_PIECE
                    }
                }
            }
        }
    }
    free(x16);
    return true;
}

static void gemm_q8_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    if (!gemm_w16(false, n, w, ws, n_rows, x, xs, n_tok, y, ldy)) gemm_q8_0_sign(n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* Q4_0 rows: fewer than Q40_W16_TOK tokens (the rows widened for too few), or no room for the
 * widened buffers, take gemm_q40_avx2.c's tiles. Measured (/tmp/s34/g40.c outside the repo:
 * one thread, 1024 x 3072, best of 5, GOP/s) against those tiles, which took every call
 * before: 4 tokens 47 / 81-83, 64 137-145 / 100,
 * 512 141-148 / 88-94 (3072 x 1024: 138 / 98); 3 alternating runs: 8 tokens 112-114 / 93-94,
 * 16 130-131 / 98; the same bits (the dot's). recur-bench -p 512 -n 0, 2 threads, RECUR_ISA=avx2,
 * qwen3-0.6b Q4_0 (llama-quantize), 2 alternating runs: 184-187 -> 259-263 t/s. */
#define Q40_W16_TOK 8
static void gemm_q4_0(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    if (n_tok >= Q40_W16_TOK && gemm_w16(true, n, w, ws, n_rows, x, xs, n_tok, y, ldy)) return;
    rt_gemm_q4_0_few_avx2(n, w, ws, n_rows, x, xs, n_tok, y, ldy);
}

/* ---- a few tokens: the even/odd int16 form -------------------------------------------------
 *
 * dot_avx2.c's single-token form for several tokens: a weight vector's even bytes moved up
 * (w << 8) and its odd bytes masked in place (w & 0xFF00) are madd-ed with the token's even and
 * odd bytes widened to int16 (once per call, x86_q8_eo_x), the two halves added: lane l is 256 times the
 * exact sum of elements 4l..4l+3, and the scale product takes the token's scale divided by 256
 * (exact), so each FMA rounds as the sign trick's: the same bits. A tile is 2 rows × 4 tokens
 * as the prompt gemm's (q8_tile16), the rows split in registers once per block for the 4
 * tokens (2 operations a row) instead of widened into memory: per (row, token, block) 2 madds
 * and an FMA on the multiply pipes (the section above) where the sign trick (q8_tile) spends
 * 5 (vpsignb, maddubs, madd, the scale product, FMA). The scale products of a row pair are made 8 tokens
 * to one multiply before its tiles, as the gemm's (q8_piece16), in the pass that fetches the
 * rows ahead; the tiles then find the rows in L1. */
#define EO_TOK 32   /* tokens at most (X86_Q8_STREAMS_MAX_AVX2): the products, 4 vectors a block */
/* Fewer tokens take the sign trick's tiles: a row pair's products and tiles in two passes
 * leave less to overlap its fetches with (6144 x 1024 in L3, tensor_matmul, 2 threads, best of
 * 3 alternating, GFLOP/s even/odd against the sign trick: 108 / 120-125 at 2 tokens, 95-130 /
 * 98-131 at 3, 141-142 / 98-130 at 4, 132-145 / 127-130 at 6, 155 / 131-132 at 8; from
 * memory, 151936 x 1024, 5-8 alternating runs: 67-99 / 85-113 at 4, 100-125 / 97-126 at 8,
 * 102-137 / 93-126 at 12). */
#define EO_MIN_TOK 8
_Static_assert(X86_Q8_STREAMS_MAX_AVX2 - 1 <= EO_TOK, "gemm_q8_0_streams: the tokens' products");

/* Rows wr[0..R) (R <= 2) against T <= 4 tokens over nb blocks: the tokens' widened blocks at
 * xeo + (t·nb + b)·2 (even, odd), the scale products at pr + (b·2 + r)·EO_TOK + t; row r's
 * output of token t at y[t·ldy + yo[r]]. */
static inline __attribute__((always_inline)) void q8_eo_tile(int R, int T, int64_t nb, const uint8_t *const *wr,
                                                              const int64_t *yo, const __m256i *xeo,
                                                              const float *pr, float *y, int64_t ldy) {
    __m256 acc[R16][T16];
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i we[R16], wo[R16];
        _Pragma("GCC unroll 2")
        for (int r = 0; r < R; r++) {
            const __m256i v = _mm256_loadu_si256((const __m256i *)(wr[r] + (size_t)b * Q8_0_BYTES + Q8_0_QS));
            we[r] = _mm256_slli_epi16(v, 8);
            wo[r] = _mm256_and_si256(v, _mm256_set1_epi16((short)0xFF00));
            __asm__("" : "+x"(we[r]), "+x"(wo[r]));   /* in registers for the T tokens */
        }
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            __m256i xe = _mm256_load_si256(xeo + ((size_t)t * (size_t)nb + (size_t)b) * 2);
            __m256i xo = _mm256_load_si256(xeo + ((size_t)t * (size_t)nb + (size_t)b) * 2 + 1);
            __asm__("" : "+x"(xe), "+x"(xo));   /* one load for the R rows */
            _Pragma("GCC unroll 2")
            for (int r = 0; r < R; r++) {
                const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(we[r], xe), _mm256_madd_epi16(wo[r], xo));
                acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(pr + ((size_t)b * 2 + (size_t)r) * EO_TOK + t),
                                            _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    _Pragma("GCC unroll 2")
    for (int r = 0; r < R; r++)
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) y[t * ldy + yo[r]] = x86_hsum_ps(acc[r][t]);
}

/* Rows wr[0..R) over all n_tok tokens: their scale products with every token's (dxs + b·EO_TOK:
 * the tokens' scales / 256 of block b), fetching each row X86_Q8_PF bytes ahead, then the
 * tiles of 4 tokens and the 1-3 left. */
static inline __attribute__((always_inline)) void q8_eo_rows(int R, int64_t nb, const uint8_t *const *wr,
                                                              const int64_t *yo, const __m256i *xeo, const float *dxs,
                                                              float *pr, int64_t n_tok, float *y, int64_t ldy) {
    for (int64_t b = 0; b < nb; b++) {
        const size_t off = (size_t)b * Q8_0_BYTES;
        if (b & 1)   /* a line a stream every other block */
            _Pragma("GCC unroll 2")
            for (int r = 0; r < R; r++) _mm_prefetch((const char *)(wr[r] + off + X86_Q8_PF), _MM_HINT_T0);
        _Pragma("GCC unroll 2")
        for (int r = 0; r < R; r++) {
            const __m256 dw = x86_f16_bcast(wr[r] + off);
            float *const d = pr + ((size_t)b * 2 + (size_t)r) * EO_TOK;
            for (int64_t t = 0; t < n_tok; t += 8)
                _mm256_store_ps(d + t, _mm256_mul_ps(dw, _mm256_load_ps(dxs + (size_t)b * EO_TOK + t)));
        }
    }
    int64_t t = 0;
    for (; t + 4 <= n_tok; t += 4) q8_eo_tile(R, 4, nb, wr, yo, xeo + (size_t)t * (size_t)nb * 2, pr + t, y + t * ldy, ldy);
    switch (n_tok - t) {
    case 3: q8_eo_tile(R, 3, nb, wr, yo, xeo + (size_t)t * (size_t)nb * 2, pr + t, y + t * ldy, ldy); break;
    case 2: q8_eo_tile(R, 2, nb, wr, yo, xeo + (size_t)t * (size_t)nb * 2, pr + t, y + t * ldy, ldy); break;
    case 1: q8_eo_tile(R, 1, nb, wr, yo, xeo + (size_t)t * (size_t)nb * 2, pr + t, y + t * ldy, ldy); break;
    default: break;
    }
}

/* A few tokens over the file's layout (tensor.h tensor_gemv.tokens of gemv[Q8_0]): the single-
 * token kernel's four streams, rows r, r + q, r + 2q, r + 3q (q = n_rows / 4), as two pairs
 * of a tile, in the even/odd form above; gemm_q8_0 would read neighbouring rows side by side,
 * which this machine's prefetchers follow badly (gemv_avx512.c). The 0-3 rows left go one at
 * a time. The sign trick's tiles (q8_rows, up to T8 tokens a pass, the first pass fetching
 * ahead) where the widened tokens cannot be allocated. */
static void gemm_q8_0_streams(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                              int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK8_0, q = n_rows / 4;
    const size_t xeo_b = (size_t)n_tok * (size_t)nb * 64, dxs_b = (size_t)nb * EO_TOK * sizeof(float);
    __m256i *xeo = n_tok >= EO_MIN_TOK && n_tok <= EO_TOK ? aligned_alloc(32, xeo_b + dxs_b + 2 * dxs_b) : NULL;
    float *dxs = NULL, *pr = NULL;
    if (xeo) {
        dxs = (float *)((uint8_t *)xeo + xeo_b), pr = dxs + (size_t)nb * EO_TOK;
        memset(dxs, 0, dxs_b);   /* the tokens past n_tok: multiplied, never used */
        for (int64_t t = 0; t < n_tok; t++)
            x86_q8_eo_x(nb, X + (size_t)t * xs, xeo + (size_t)t * (size_t)nb * 2, dxs + t, EO_TOK);
    }
    for (int64_t r = 0; r < q; r++)
        for (int p = 0; p < 2; p++) {
            const int64_t yo[2] = { r + 2 * p * q, r + (2 * p + 1) * q };
            const uint8_t *wr[2] = { W + (size_t)yo[0] * ws, W + (size_t)yo[1] * ws };
            if (xeo) q8_eo_rows(2, nb, wr, yo, xeo, dxs, pr, n_tok, y, ldy);
            else q8_rows(2, nb, wr, yo, x, xs, n_tok, y, ldy, true);
        }
    for (int64_t r = 4 * q; r < n_rows; r++) {
        const uint8_t *wr[1] = { W + (size_t)r * ws };
        if (xeo) q8_eo_rows(1, nb, wr, &r, xeo, dxs, pr, n_tok, y, ldy);
        else q8_rows(1, nb, wr, &r, x, xs, n_tok, y, ldy, true);
    }
    free(xeo);
}

void rt_fill_gemm_avx2(tensor_kernels *k) {
    k->gemm[GGUF_T_Q8_0] = gemm_q8_0;
    k->gemm[GGUF_T_Q4_0] = gemm_q4_0;
    k->gemv[GGUF_T_Q8_0].tokens = gemm_q8_0_streams;
    k->gemv[GGUF_T_Q8_0].tokens_max = X86_Q8_STREAMS_MAX_AVX2;
}
