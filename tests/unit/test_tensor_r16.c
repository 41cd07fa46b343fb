/* test_tensor_r16.c — tensor/: Q4_K, Q6_K, Q8_0, Q4_0 and Q5_K rows packed 16 to a group
 * (tensor.h tensor_q4_K_r16_pack, tensor_q6_K_r16_pack, tensor_q8_0_r16_pack,
 * tensor_q4_0_r16_pack, tensor_q5_K_r16_pack, and Q5_K's five-byte layout tensor_q5_K_r16f_pack)
 * and the single-token kernels over them (gemv_q4_K_r16, gemv_q6_K_r16, gemv_q8_0_r16 of every
 * table, gemv_q4_0_r16 and gemv_q5_K_r16 of the tables that have them, against their own
 * vec_dot[Q4_0] / vec_dot[Q5_K], and the scalar oracles rt_dot_q4_0_r16 / rt_dot_q5_K_r16 /
 * rt_dot_q5_K_r16f too; Q8_0: of the q8blk tables too, in the block order; Q5_K packed in the
 * layout of the table that runs it), for each type:
 *
 *  - packing then unpacking gives the rows back byte for byte (Q6_K, Q8_0: one row at a time
 *    too), and a packed Q4_K or Q8_0 group holds the same bytes as its 16 rows (a permutation);
 *  - row r of every packed group gets, from every table's packed gemv and its lean twin, the
 *    bits of the scalar dot of the row it was (dot_q4_K_rp, vec_dot[Q6_K], vec_dot[Q8_0] of
 *    the table's order; memcmp), for quantized and raw weights (every byte value, random fp16
 *    scales), short and long rows, whole calls and group pieces;
 *  - the rows differ: a kernel reading the wrong row of a group would fail above;
 *  - tensor_matmul and tensor_matmul_n over a packed matrix (TENSOR_T_Q4_K_R16,
 *    TENSOR_T_Q6_K_R16, TENSOR_T_Q8_0_R16, TENSOR_T_Q4_0_R16, TENSOR_T_Q5_K_R16) give the bits
 *    of the unpacked one, for one token
 *    (the packed kernel) and for batches (the packed gemms of the tables that have them,
 *    slabs unpacked for the gemm otherwise; rows within and past its panel), on 1-3 threads,
 *    alone and next to a matrix of another type in one job;
 *  - Q5_K at its extremes (every value 31, activations at ±127): the kernels' int16 sums do
 *    not wrap;
 *  - tensor_get_row of a packed Q6_K or Q8_0 row gives the floats of the unpacked row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "tensor/tensor.h"
#include "tensor/tensor_impl.h"   /* rt_dot_q4_0_r16, rt_dot_q5_K_r16: the packed oracles */
#include "tensor_test_util.h"

#define GROUPS 4   /* packed groups per matrix: 64 rows */

#define N_TYPES 5
static const uint32_t types[N_TYPES] = { GGUF_T_Q4_K, GGUF_T_Q6_K, GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_Q5_K };

/* Q4_0 and Q5_K: packed only for the tables with their packed kernels, in those tables' own
 * dot orders */
static bool own_order(uint32_t t) { return t == GGUF_T_Q4_0 || t == GGUF_T_Q5_K; }

static uint32_t packed_type(uint32_t t) { return TENSOR_T_R16(t); }

/* fives: Q5_K in the five-byte layout (a table's q5_K_r16_fives), not the masks */
static void pack16(uint32_t t, bool fives, const void *src, size_t stride, int64_t n, void *dst) {
    (t == GGUF_T_Q4_K   ? tensor_q4_K_r16_pack
     : t == GGUF_T_Q6_K ? tensor_q6_K_r16_pack
     : t == GGUF_T_Q4_0 ? tensor_q4_0_r16_pack
     : t == GGUF_T_Q5_K ? (fives ? tensor_q5_K_r16f_pack : tensor_q5_K_r16_pack)
                        : tensor_q8_0_r16_pack)(src, stride, n, dst);
}

static void unpack16(uint32_t t, bool fives, const void *src, int64_t n, void *dst, size_t stride) {
    (t == GGUF_T_Q4_K   ? tensor_q4_K_r16_unpack
     : t == GGUF_T_Q6_K ? tensor_q6_K_r16_unpack
     : t == GGUF_T_Q4_0 ? tensor_q4_0_r16_unpack
     : t == GGUF_T_Q5_K ? (fives ? tensor_q5_K_r16f_unpack : tensor_q5_K_r16_unpack)
                        : tensor_q8_0_r16_unpack)(src, n, dst, stride);
}

static void unpack_row16(uint32_t t, const void *group, int64_t n, int r, void *dst) {
    (t == GGUF_T_Q6_K ? tensor_q6_K_r16_unpack_row : tensor_q8_0_r16_unpack_row)(group, n, r, dst);
}

static tensor_gemv gemv16(const tensor_kernels *k, uint32_t t) {
    return t == GGUF_T_Q4_K   ? k->gemv_q4_K_r16
           : t == GGUF_T_Q6_K ? k->gemv_q6_K_r16
           : t == GGUF_T_Q4_0 ? k->gemv_q4_0_r16
           : t == GGUF_T_Q5_K ? k->gemv_q5_K_r16
                              : k->gemv_q8_0_r16;
}

/* The tables to test with type t: every ISA's, and for Q8_0 their block-order twins; for Q4_0
 * and Q5_K those with the packed kernel (only they pack it, model/repack.c), and their twins. */
static int tables_for(uint32_t t, const tensor_kernels *tab[6]) {
    int n = get_tables(tab);
    if (own_order(t)) {
        int m = 0;
        for (int i = 0; i < n; i++)
            if (t == GGUF_T_Q4_0 ? tab[i]->q4_0_r16_native : tab[i]->q5_K_r16_native) tab[m++] = tab[i];
        for (int i = 0; i < m; i++) tab[m + i] = tensor_kernels_q8blk(tab[i]);
        return 2 * m;
    }
    if (t != GGUF_T_Q8_0) return n;
    for (int i = 0; i < n; i++) tab[n + i] = tensor_kernels_q8blk(tab[i]);
    return 2 * n;
}

/* The dot a packed row's gemv in table k gives the bits of: the scalar one of k's order. */
static float want_dot(const tensor_kernels *k, uint32_t t, int64_t n, const void *w, const void *x) {
    const tensor_kernels *s = tensor_kernels_scalar();
    if (t == GGUF_T_Q8_0 && k->q8_block) s = tensor_kernels_q8blk(s);
    if (own_order(t)) s = k;   /* its own order (the scalar table's sums differ) */
    return t == GGUF_T_Q4_K ? s->dot_q4_K_rp(n, w, x) : s->vec_dot[t](n, w, x);
}

/* bytes of a block of type t, and where its (first) fp16 scale sits */
static size_t block_bytes(uint32_t t) {
    return t == GGUF_T_Q4_K ? 144 : t == GGUF_T_Q6_K ? 210 : t == GGUF_T_Q4_0 ? 18 : t == GGUF_T_Q5_K ? 176 : 34;
}
static size_t scale_at(uint32_t t) { return t == GGUF_T_Q6_K ? 208 : 0; }

/* rows of type t: quantized rough values, or random bytes with finite fp16 scales (Q4_K d
 * and dmin, Q6_K d) */
static void fill_rows(rng *r, uint32_t t, bool raw, uint8_t *w, int64_t n, int64_t rows) {
    const size_t wb = tensor_row_bytes(t, n);
    if (!raw) {
        float *f = xalloc((size_t)(n * rows) * 4);
        fill_rough_spread(r, f, n * rows, 2.0f);
        tensor_kernels_scalar()->from_float[t](f, w, n * rows);
        free(f);
        return;
    }
    const size_t bb = block_bytes(t), d0 = scale_at(t);
    for (size_t i = 0; i < wb * (size_t)rows; i++) w[i] = (uint8_t)rng_u64(r);
    for (size_t b = 0; b < wb * (size_t)rows / bb; b++)
        for (int f = 0; f < (t == GGUF_T_Q4_K || t == GGUF_T_Q5_K ? 2 : 1); f++) {
            const uint16_t h = rand_scale(r);
            memcpy(w + b * bb + d0 + 2 * f, &h, 2);
        }
}

/* W packed as table k lays it out (model/repack.c: Q5_K's layout is the table's) */
static void pack_matrix(uint32_t t, const tensor_kernels *k, const uint8_t *w, size_t ws, int64_t n, int64_t rows,
                        uint8_t *p) {
    const size_t wb = tensor_row_bytes(t, n);
    for (int64_t g = 0; g < rows / TENSOR_R16_ROWS; g++)
        pack16(t, k->q5_K_r16_fives, w + (size_t)g * TENSOR_R16_ROWS * ws, ws, n, p + (size_t)g * TENSOR_R16_ROWS * wb);
}

static void test_pack_round_trip(void **state) {
    (void)state;
    rng r = { 31 };
    static const int64_t ns[] = { 256, 768, 2816 };
    for (size_t l = 0; l < (N_TYPES + 1) * sizeof ns / sizeof ns[0]; l++) {
        /* the last "type": Q5_K in the five-byte layout */
        const bool fives = l % (N_TYPES + 1) == N_TYPES;
        const uint32_t t = fives ? GGUF_T_Q5_K : types[l % (N_TYPES + 1)];
        const int64_t n = ns[l / (N_TYPES + 1)];
        const size_t wb = tensor_row_bytes(t, n), ws = wb + 7;
        uint8_t *w = xalloc(ws * TENSOR_R16_ROWS), *p = xalloc(wb * TENSOR_R16_ROWS), *u = xalloc(ws * TENSOR_R16_ROWS);
        for (size_t i = 0; i < ws * TENSOR_R16_ROWS; i++) w[i] = (uint8_t)rng_u64(&r);
        memset(u, 0xA5, ws * TENSOR_R16_ROWS);
        memset(p, 0x5A, wb * TENSOR_R16_ROWS);   /* packing writes every byte */
        pack16(t, fives, w, ws, n, p);
        unpack16(t, fives, p, n, u, ws);
        for (int row = 0; row < TENSOR_R16_ROWS; row++)
            assert_memory_equal(w + (size_t)row * ws, u + (size_t)row * ws, wb);
        for (int row = 0; (t == GGUF_T_Q6_K || t == GGUF_T_Q8_0) && row < TENSOR_R16_ROWS; row++) {
            memset(u, 0xA5, wb);
            unpack_row16(t, p, n, row, u);
            assert_memory_equal(w + (size_t)row * ws, u, wb);
        }
        /* Q4_K, Q8_0, Q4_0: a permutation of the bytes, the same count of every value (Q6_K's values
         * and Q5_K's fifth bits are regrouped bit by bit: the round trips above) */
        size_t cw[256] = { 0 }, cp[256] = { 0 };
        for (int row = 0; row < TENSOR_R16_ROWS; row++)
            for (size_t i = 0; i < wb; i++) cw[w[(size_t)row * ws + i]]++;
        for (size_t i = 0; i < wb * TENSOR_R16_ROWS; i++) cp[p[i]]++;
        if (t != GGUF_T_Q6_K && t != GGUF_T_Q5_K) assert_memory_equal(cw, cp, sizeof cw);
        free(w); free(p); free(u);
    }
}

/* Every table's packed gemv against the scalar dot of the unpacked rows. */
static void test_gemv_r16_bits(void **state) {
    (void)state;
    rng r = { 2026 };
    static const int64_t ns[] = { 256, 768, 2816, 4096, 16640 };   /* 16640: past gemv_q6k16_avx2.c's Q6_CORR_BLOCKS */
    const int64_t rows = GROUPS * TENSOR_R16_ROWS;
    for (size_t l = 0; l < N_TYPES * sizeof ns / sizeof ns[0]; l++) {
        const uint32_t t = types[l % N_TYPES], vt = tensor_vec_dot_type(t);
        if (ns[l / N_TYPES] > 4096 && t != GGUF_T_Q6_K) continue;   /* the long rows: Q6_K's pieces only */
        const tensor_kernels *tab[6];
        const int nt = tables_for(t, tab);
        const char *tn = t == GGUF_T_Q4_K   ? "gemv_q4_K_r16"
                         : t == GGUF_T_Q6_K ? "gemv_q6_K_r16"
                         : t == GGUF_T_Q4_0 ? "gemv_q4_0_r16"
                         : t == GGUF_T_Q5_K ? "gemv_q5_K_r16"
                                            : "gemv_q8_0_r16";
        /* Q4_0: an odd count of blocks, so the dot's odd last block is taken too */
        const int64_t n = ns[l / N_TYPES] + (t == GGUF_T_Q4_0 ? 32 : 0);
        const size_t wb = tensor_row_bytes(t, n), ws = wb + 3;
        const size_t xb = tensor_act_row_bytes(vt, n);
        uint8_t *w = xalloc(ws * (size_t)rows), *p = xalloc(wb * (size_t)rows), *x = xalloc(xb);
        float *f = xalloc((size_t)n * 4), *want = xalloc((size_t)rows * 4), *y = xalloc((size_t)(rows + 4) * 4);
        for (int raw = 0; raw < 2; raw++) {
            fill_rows(&r, t, raw, w, n, rows);
            for (int64_t o = rows - 1; o >= 0; o--) memmove(w + (size_t)o * ws, w + (size_t)o * wb, wb);
            fill_rough_spread(&r, f, n, raw ? 6.0f : 2.0f);
            for (int k = 0; k < 2 * nt; k++) {   /* then each without its software prefetch */
                pack_matrix(t, tab[k % nt], w, ws, n, rows, p);
                /* the activations as the table lays them out (a Q8_0 tail is per order) */
                tensor_act_quantize(tab[k % nt], vt, f, x, n);
                int distinct = 0;
                for (int64_t o = 0; o < rows; o++) {
                    want[o] = want_dot(tab[k % nt], t, n, w + (size_t)o * ws, x);
                    distinct += o > 0 && memcmp(&want[o], &want[o - 1], 4) != 0;
                }
                assert_true(distinct >= rows / 2);
                for (int64_t o = 0; own_order(t) && k < nt && o < rows; o++) {   /* the scalar oracle too */
                    const float d = (t == GGUF_T_Q4_0              ? rt_dot_q4_0_r16
                                     : tab[k % nt]->q5_K_r16_fives ? rt_dot_q5_K_r16f
                                                                   : rt_dot_q5_K_r16)(
                        n, p + (size_t)(o / TENSOR_R16_ROWS) * TENSOR_R16_ROWS * wb, (int)(o % TENSOR_R16_ROWS), x);
                    if (memcmp(&d, &want[o], 4) != 0)
                        fail_msg("%s oracle n %lld raw %d row %lld: %a, want %a", tn, (long long)n, raw, (long long)o,
                                 d, want[o]);
                }
                tensor_gemv gv = gemv16(tab[k % nt], t);
                if (k >= nt) {
                    if (!gv.lean) continue;
                    gv.fn = gv.lean;
                    if (gv.lean_group) gv.group = gv.lean_group;
                }
                assert_non_null(gv.fn);
                assert_int_equal(gv.group % TENSOR_R16_ROWS, 0);   /* whole packed groups */
                for (int i = 0; i < rows + 4; i++) y[i] = -7.0f;
                gv.fn(n, p, wb, rows, 0, tensor_gemv_groups(rows, gv.group), x, y);
                for (int64_t o = 0; o < rows + 4; o++) {
                    const float e = o < rows ? want[o] : -7.0f;
                    if (memcmp(&e, &y[o], 4) != 0)
                        fail_msg("%s %s%s n %lld raw %d: y[%lld] %a, want %a", tab[k % nt]->isa, tn,
                                 k >= nt ? " lean" : "", (long long)n, raw, (long long)o, y[o], e);
                }
                char what[64];
                snprintf(what, sizeof what, "%s %s%s n %lld raw %d", tab[k % nt]->isa, tn, k >= nt ? " lean" : "",
                         (long long)n, raw);
                check_gemv_pieces(gv, n, p, wb, x, rows, want, &r, what);
            }
        }
        free(w); free(p); free(x); free(f); free(want); free(y);
    }
}

/* Y of tensor_matmul (or of tensor_matmul_n next to a 32-row matrix W6 of type t6) over W,
 * packed or not. */
static void run_mm(tp_pool *pool, const tensor_kernels *k, uint32_t wt, const void *W, uint32_t t6, const void *W6,
                   int64_t n, int64_t n_out, const float *X, int64_t n_tok, float *Y, float *Y6) {
    const size_t sb = tensor_matmul_scratch_bytes(wt, n, n_tok);
    void *scr = aligned_alloc(64, (sb + 63) / 64 * 64);
    assert_non_null(scr);
    if (!W6) {
        tensor_matmul(pool, k, wt, W, n, n_out, X, n_tok, Y, n_out, scr);
    } else {
        const tensor_mm mm[2] = { { t6, W6, 32, Y6, 32 }, { wt, W, n_out, Y, n_out } };
        tensor_matmul_n(pool, k, mm, 2, n, X, n_tok, scr);
    }
    free(scr);
}

/* One shape of test_matmul_r16: n, and the row and token counts tried with it. */
typedef struct mm_case {
    int64_t n, n_outs[3], n_toks[4];
} mm_case;

static void test_matmul_r16(void **state) {
    (void)state;
    rng r = { 4242 };
    /* 1024 x 768: past matmul's one-thread size; 2, 7 and 33 tokens: the several-token
     * kernels' tiles of 1-4 tokens (matmul.c mm_dot_r16); 100: past MM_R16_TOKENS_Q4_GEMM and
     * MM_R16_TOKENS_Q8_GEMM, the packed gemms (and 33 past MM_R16_TOKENS_Q6_GEMM); 300: past
     * a tokens kernel's tokens_max (Q6_K: AVX2 256, AVX-512 160); 8448-long rows: past a packed gemm's panel
     * (Q8_0: 256 blocks), so it takes its other way; 12544-long rows with 100 tokens: past the
     * Q4_K and Q6_K gemms' panel buffers (48 blocks; the Q5_K gemm is Q4_K's), the Q8_0 and
     * Q4_0 ones' (256 blocks), their pieces */
    static const mm_case cases[] = { { 768, { 16, 80, 1024 }, { 1, 2, 7, 33 } }, { 768, { 80, 0, 0 }, { 100, 300, 0, 0 } },
                                     { 8448, { 32, 0, 0 }, { 9, 0, 0, 0 } }, { 12544, { 32, 0, 0 }, { 100, 0, 0, 0 } } };
    const int64_t max_out = 1024, max_tok = 300, max_n = 12544;
    for (int ti = 0; ti < N_TYPES; ti++) {
        /* t6: another type, next to it in one job */
        const uint32_t t = types[ti], t6 = t == GGUF_T_Q6_K ? GGUF_T_Q4_K : GGUF_T_Q6_K;
        const tensor_kernels *tab[6];
        const int nt = tables_for(t, tab);
        size_t wmax = 0;   /* the largest case's matrix bytes */
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const size_t b = tensor_row_bytes(t, cases[c].n) * (size_t)(cases[c].n_outs[2] ? cases[c].n_outs[2] : cases[c].n_outs[0]);
            if (b > wmax) wmax = b;
        }
        uint8_t *w = xalloc(wmax), *p = xalloc(wmax);
        uint8_t *w6 = xalloc(tensor_row_bytes(t6, max_n) * 32);
        float *x = xalloc((size_t)(max_n * max_tok) * 4), *f6 = xalloc((size_t)(max_n * 32) * 4);
        float *y0 = xalloc((size_t)(max_out * max_tok) * 4), *y1 = xalloc((size_t)(max_out * max_tok) * 4);
        float *z0 = xalloc((size_t)(32 * max_tok) * 4), *z1 = xalloc((size_t)(32 * max_tok) * 4);
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const mm_case *mc = &cases[c];
            const int64_t n = mc->n, rows = mc->n_outs[2] ? mc->n_outs[2] : mc->n_outs[0];
            const size_t wb = tensor_row_bytes(t, n);
            fill_rows(&r, t, false, w, n, rows);
            fill_rough_spread(&r, f6, n * 32, 2.0f);
            tensor_kernels_scalar()->from_float[t6](f6, w6, n * 32);
            fill_rough_spread(&r, x, n * max_tok, 2.0f);
            for (int nth = 1; nth <= 3; nth++) {
                tp_pool *pool = tp_new(nth);
                assert_non_null(pool);
                for (int k = 0; k < nt; k++) {
                    pack_matrix(t, tab[k], w, wb, n, rows, p);
                    for (size_t a = 0; a < 3 && mc->n_outs[a]; a++)
                        for (size_t b = 0; b < 4 && mc->n_toks[b]; b++)
                            for (int pair = 0; pair < 2; pair++) {
                                const int64_t no = mc->n_outs[a], nk = mc->n_toks[b];
                                run_mm(pool, tab[k], t, w, t6, pair ? w6 : NULL, n, no, x, nk, y0, z0);
                                memset(y1, 0xFF, (size_t)(no * nk) * 4);
                                run_mm(pool, tab[k], packed_type(t), p, t6, pair ? w6 : NULL, n, no, x, nk, y1, z1);
                                if (memcmp(y0, y1, (size_t)(no * nk) * 4) != 0)
                                    fail_msg("%s type %u threads %d n %lld n_out %lld n_tok %lld pair %d: packed differs",
                                             tab[k]->isa, t, nth, (long long)n, (long long)no, (long long)nk, pair);
                                if (pair) assert_memory_equal(z0, z1, (size_t)(32 * nk) * 4);
                            }
                }
                tp_free(pool);
            }
        }
        free(w); free(p); free(w6); free(x); free(f6); free(y0); free(y1); free(z0); free(z1);
    }
}

/* Q5_K at its extremes: every value 31 (nibbles 15, fifth bits set), scales and mins 63, and
 * every activation at the same sign's limit: each unit's int16 pair sums are 2·31·127, so a
 * kernel that summed more than four units in int16 (gemv_q4k16_avx2.c k4_tile) would wrap.
 * The packed single-token kernel against the table's dot, and tensor_matmul packed against the
 * file's layout for the several-token kernel and the packed gemm. */
static void test_q5_r16_extremes(void **state) {
    (void)state;
    rng r = { 31 };
    const int64_t n = 512, rows = TENSOR_R16_ROWS, toks[] = { 1, 5, 100 };
    const size_t wb = tensor_row_bytes(GGUF_T_Q5_K, n);
    uint8_t *w = xalloc(wb * rows), *p = xalloc(wb * rows), *x = xalloc(tensor_act_row_bytes(GGUF_T_Q8_K, n));
    float *f = xalloc((size_t)(n * 100) * 4), *y0 = xalloc((size_t)(rows * 100) * 4), *y1 = xalloc((size_t)(rows * 100) * 4);
    memset(w, 0xFF, wb * rows);
    for (size_t b = 0; b < wb * rows / block_bytes(GGUF_T_Q5_K); b++)
        for (int k = 0; k < 2; k++) {
            const uint16_t h = rand_scale(&r);
            memcpy(w + b * block_bytes(GGUF_T_Q5_K) + 2 * k, &h, 2);
        }
    const tensor_kernels *tab[6];
    const int nt = tables_for(GGUF_T_Q5_K, tab);
    for (int sign = 0; sign < 2; sign++) {
        for (int64_t i = 0; i < n * 100; i++) f[i] = sign ? -1.0f : 1.0f;
        for (int k = 0; k < nt; k++) {
            pack_matrix(GGUF_T_Q5_K, tab[k], w, wb, n, rows, p);
            tensor_act_quantize(tab[k], GGUF_T_Q8_K, f, x, n);
            const tensor_gemv gv = gemv16(tab[k], GGUF_T_Q5_K);
            gv.fn(n, p, wb, rows, 0, tensor_gemv_groups(rows, gv.group), x, y1);
            for (int64_t o = 0; o < rows; o++) {
                const float e = want_dot(tab[k], GGUF_T_Q5_K, n, w + (size_t)o * wb, x);
                if (memcmp(&e, &y1[o], 4) != 0)
                    fail_msg("%s gemv_q5_K_r16 sign %d row %lld: %a, want %a", tab[k]->isa, sign, (long long)o, y1[o], e);
            }
            for (size_t ti = 0; ti < sizeof toks / sizeof toks[0]; ti++) {
                run_mm(NULL, tab[k], GGUF_T_Q5_K, w, 0, NULL, n, rows, f, toks[ti], y0, NULL);
                run_mm(NULL, tab[k], TENSOR_T_Q5_K_R16, p, 0, NULL, n, rows, f, toks[ti], y1, NULL);
                if (memcmp(y0, y1, (size_t)(rows * toks[ti]) * 4) != 0)
                    fail_msg("%s sign %d n_tok %lld: packed differs", tab[k]->isa, sign, (long long)toks[ti]);
            }
        }
    }
    free(w); free(p); free(x); free(f); free(y0); free(y1);
}

/* tensor_get_row of a packed Q6_K or Q8_0 matrix: every row's floats as from the unpacked one
 * (Q4_K, Q4_0 and Q5_K token embeddings are not packed). */
static void test_get_row_r16(void **state) {
    (void)state;
    rng r = { 77 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t n = 768, rows = GROUPS * TENSOR_R16_ROWS;
    for (int ti = 1; ti < N_TYPES; ti++) {
        const uint32_t t = types[ti];
        if (own_order(t)) continue;
        const size_t wb = tensor_row_bytes(t, n);
        uint8_t *w = xalloc(wb * rows), *p = xalloc(wb * rows);
        float *a = xalloc((size_t)n * 4), *b = xalloc((size_t)n * 4);
        fill_rows(&r, t, true, w, n, rows);
        pack_matrix(t, tab[0], w, wb, n, rows, p);
        for (int k = 0; k < nt; k++)
            for (int64_t row = 0; row < rows; row++) {
                tensor_get_row(tab[k], t, w, n, row, a);
                memset(b, 0xFF, (size_t)n * 4);
                tensor_get_row(tab[k], packed_type(t), p, n, row, b);
                if (memcmp(a, b, (size_t)n * 4) != 0)
                    fail_msg("%s type %u row %lld differs", tab[k]->isa, t, (long long)row);
            }
        free(w); free(p); free(a); free(b);
    }
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_round_trip),
        cmocka_unit_test(test_gemv_r16_bits),
        cmocka_unit_test(test_matmul_r16),
        cmocka_unit_test(test_q5_r16_extremes),
        cmocka_unit_test(test_get_row_r16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
