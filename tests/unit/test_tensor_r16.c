/* test_tensor_r16.c — tensor/: Q4_K rows packed 16 to a group (tensor.h tensor_q4_K_r16_pack)
 * and the single-token kernels over them (gemv_q4_K_r16 of every table).
 *
 *  - packing then unpacking gives the rows back byte for byte, and a packed group holds the
 *    same bytes as its 16 rows (a permutation: the matrix keeps its size);
 *  - row r of every packed group gets, from every table's gemv_q4_K_r16, the bits of the
 *    scalar dot_q4_K_rp of the row it was (memcmp), for quantized and raw weights (every
 *    byte value, random fp16 scales), short and long rows, whole calls and group pieces;
 *  - the rows differ: a kernel reading the wrong row of a group would fail above;
 *  - tensor_matmul and tensor_matmul_n over a packed matrix (TENSOR_T_Q4_K_R16) give the bits
 *    of the unpacked one, for one token (the packed kernel) and for batches (slabs unpacked
 *    for the gemm), on 1-3 threads, alone and next to a Q6_K matrix in one job. */
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
#include "tensor_test_util.h"

#define GROUPS 4   /* packed groups per matrix: 64 rows */

/* rows of Q4_K weights: quantized rough values, or random bytes with finite fp16 d and dmin */
static void fill_rows(rng *r, bool raw, uint8_t *w, int64_t n, int64_t rows) {
    const size_t wb = tensor_row_bytes(GGUF_T_Q4_K, n);
    if (!raw) {
        float *f = xalloc((size_t)(n * rows) * 4);
        fill_rough_spread(r, f, n * rows, 2.0f);
        tensor_kernels_scalar()->from_float[GGUF_T_Q4_K](f, w, n * rows);
        free(f);
        return;
    }
    for (size_t i = 0; i < wb * (size_t)rows; i++) w[i] = (uint8_t)rng_u64(r);
    for (size_t b = 0; b < wb * (size_t)rows / 144; b++)
        for (int f = 0; f < 2; f++) {
            const uint16_t h = rand_scale(r);
            memcpy(w + b * 144 + 2 * f, &h, 2);
        }
}

static void pack_matrix(const uint8_t *w, size_t ws, int64_t n, int64_t rows, uint8_t *p) {
    const size_t wb = tensor_row_bytes(GGUF_T_Q4_K, n);
    for (int64_t g = 0; g < rows / TENSOR_R16_ROWS; g++)
        tensor_q4_K_r16_pack(w + (size_t)g * TENSOR_R16_ROWS * ws, ws, n, p + (size_t)g * TENSOR_R16_ROWS * wb);
}

static void test_pack_round_trip(void **state) {
    (void)state;
    rng r = { 31 };
    static const int64_t ns[] = { 256, 768, 2816 };
    for (size_t l = 0; l < sizeof ns / sizeof ns[0]; l++) {
        const int64_t n = ns[l];
        const size_t wb = tensor_row_bytes(GGUF_T_Q4_K, n), ws = wb + 7;
        uint8_t *w = xalloc(ws * TENSOR_R16_ROWS), *p = xalloc(wb * TENSOR_R16_ROWS), *u = xalloc(ws * TENSOR_R16_ROWS);
        for (size_t i = 0; i < ws * TENSOR_R16_ROWS; i++) w[i] = (uint8_t)rng_u64(&r);
        memset(u, 0xA5, ws * TENSOR_R16_ROWS);
        tensor_q4_K_r16_pack(w, ws, n, p);
        tensor_q4_K_r16_unpack(p, n, u, ws);
        for (int row = 0; row < TENSOR_R16_ROWS; row++)
            assert_memory_equal(w + (size_t)row * ws, u + (size_t)row * ws, wb);
        /* a permutation of the bytes: the same count of every value */
        size_t cw[256] = { 0 }, cp[256] = { 0 };
        for (int row = 0; row < TENSOR_R16_ROWS; row++)
            for (size_t i = 0; i < wb; i++) cw[w[(size_t)row * ws + i]]++;
        for (size_t i = 0; i < wb * TENSOR_R16_ROWS; i++) cp[p[i]]++;
        assert_memory_equal(cw, cp, sizeof cw);
        free(w); free(p); free(u);
    }
}

/* Every table's gemv_q4_K_r16 against the scalar dot_q4_K_rp of the unpacked rows. */
static void test_gemv_r16_bits(void **state) {
    (void)state;
    rng r = { 2026 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static const int64_t ns[] = { 256, 768, 2816, 4096 };
    const int64_t rows = GROUPS * TENSOR_R16_ROWS;
    for (size_t l = 0; l < sizeof ns / sizeof ns[0]; l++) {
        const int64_t n = ns[l];
        const size_t wb = tensor_row_bytes(GGUF_T_Q4_K, n), ws = wb + 3;
        const size_t xb = tensor_act_row_bytes(GGUF_T_Q8_K, n);
        uint8_t *w = xalloc(ws * (size_t)rows), *p = xalloc(wb * (size_t)rows), *x = xalloc(xb);
        float *f = xalloc((size_t)n * 4), *want = xalloc((size_t)rows * 4), *y = xalloc((size_t)(rows + 4) * 4);
        for (int raw = 0; raw < 2; raw++) {
            fill_rows(&r, raw, w, n, rows);
            for (int64_t o = rows - 1; o >= 0; o--) memmove(w + (size_t)o * ws, w + (size_t)o * wb, wb);
            pack_matrix(w, ws, n, rows, p);
            fill_rough_spread(&r, f, n, raw ? 6.0f : 2.0f);
            tensor_act_quantize(tensor_kernels_scalar(), GGUF_T_Q8_K, f, x, n);
            int distinct = 0;
            for (int64_t o = 0; o < rows; o++) {
                want[o] = tensor_kernels_scalar()->dot_q4_K_rp(n, w + (size_t)o * ws, x);
                distinct += o > 0 && memcmp(&want[o], &want[o - 1], 4) != 0;
            }
            assert_true(distinct >= rows / 2);
            for (int k = 0; k < 2 * nt; k++) {   /* then each without its software prefetch */
                tensor_gemv gv = tab[k % nt]->gemv_q4_K_r16;
                if (k >= nt) {
                    if (!gv.lean) continue;
                    gv.fn = gv.lean;
                    if (gv.lean_group) gv.group = gv.lean_group;
                }
                assert_non_null(gv.fn);
                assert_int_equal(gv.group, TENSOR_R16_ROWS);
                for (int i = 0; i < rows + 4; i++) y[i] = -7.0f;
                gv.fn(n, p, wb, rows, 0, GROUPS, x, y);
                for (int64_t o = 0; o < rows + 4; o++) {
                    const float e = o < rows ? want[o] : -7.0f;
                    if (memcmp(&e, &y[o], 4) != 0)
                        fail_msg("%s gemv_q4_K_r16%s n %lld raw %d: y[%lld] %a, want %a", tab[k % nt]->isa,
                                 k >= nt ? " lean" : "", (long long)n, raw,
                                 (long long)o, y[o], e);
                }
                char what[64];
                snprintf(what, sizeof what, "%s gemv_q4_K_r16%s n %lld raw %d", tab[k % nt]->isa,
                         k >= nt ? " lean" : "", (long long)n, raw);
                check_gemv_pieces(gv, n, p, wb, x, rows, want, &r, what);
            }
        }
        free(w); free(p); free(x); free(f); free(want); free(y);
    }
}

/* Y of tensor_matmul (or of tensor_matmul_n next to a Q6_K matrix) over W, packed or not. */
static void run_mm(tp_pool *pool, const tensor_kernels *k, uint32_t wt, const void *W, const void *W6, int64_t n,
                   int64_t n_out, const float *X, int64_t n_tok, float *Y, float *Y6) {
    const size_t sb = tensor_matmul_scratch_bytes(wt, n, n_tok);
    void *scr = aligned_alloc(64, (sb + 63) / 64 * 64);
    assert_non_null(scr);
    if (!W6) {
        tensor_matmul(pool, k, wt, W, n, n_out, X, n_tok, Y, n_out, scr);
    } else {
        const tensor_mm mm[2] = { { GGUF_T_Q6_K, W6, 32, Y6, 32 }, { wt, W, n_out, Y, n_out } };
        tensor_matmul_n(pool, k, mm, 2, n, X, n_tok, scr);
    }
    free(scr);
}

static void test_matmul_r16(void **state) {
    (void)state;
    rng r = { 4242 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    static const int64_t n_outs[] = { 16, 80, 1024 }, n_toks[] = { 1, 2, 5, 33 };
    const int64_t n = 768, max_out = 1024, max_tok = 33;   /* 1024 x 768: past matmul's one-thread size */
    const size_t wb = tensor_row_bytes(GGUF_T_Q4_K, n);
    uint8_t *w = xalloc(wb * max_out), *p = xalloc(wb * max_out), *w6 = xalloc(tensor_row_bytes(GGUF_T_Q6_K, n) * 32);
    float *x = xalloc((size_t)(n * max_tok) * 4), *f6 = xalloc((size_t)(n * 32) * 4);
    float *y0 = xalloc((size_t)(max_out * max_tok) * 4), *y1 = xalloc((size_t)(max_out * max_tok) * 4);
    float *z0 = xalloc((size_t)(32 * max_tok) * 4), *z1 = xalloc((size_t)(32 * max_tok) * 4);
    fill_rows(&r, false, w, n, max_out);
    pack_matrix(w, wb, n, max_out, p);
    fill_rough_spread(&r, f6, n * 32, 2.0f);
    tensor_kernels_scalar()->from_float[GGUF_T_Q6_K](f6, w6, n * 32);
    fill_rough_spread(&r, x, n * max_tok, 2.0f);
    for (int nth = 1; nth <= 3; nth++) {
        tp_pool *pool = tp_new(nth);
        assert_non_null(pool);
        for (int k = 0; k < nt; k++)
            for (size_t a = 0; a < sizeof n_outs / sizeof n_outs[0]; a++)
                for (size_t b = 0; b < sizeof n_toks / sizeof n_toks[0]; b++)
                    for (int pair = 0; pair < 2; pair++) {
                        const int64_t no = n_outs[a], nk = n_toks[b];
                        run_mm(pool, tab[k], GGUF_T_Q4_K, w, pair ? w6 : NULL, n, no, x, nk, y0, z0);
                        memset(y1, 0xFF, (size_t)(no * nk) * 4);
                        run_mm(pool, tab[k], TENSOR_T_Q4_K_R16, p, pair ? w6 : NULL, n, no, x, nk, y1, z1);
                        if (memcmp(y0, y1, (size_t)(no * nk) * 4) != 0)
                            fail_msg("%s threads %d n_out %lld n_tok %lld pair %d: packed differs", tab[k]->isa, nth,
                                     (long long)no, (long long)nk, pair);
                        if (pair) assert_memory_equal(z0, z1, (size_t)(32 * nk) * 4);
                    }
        tp_free(pool);
    }
    free(w); free(p); free(w6); free(x); free(f6); free(y0); free(y1); free(z0); free(z1);
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_round_trip),
        cmocka_unit_test(test_gemv_r16_bits),
        cmocka_unit_test(test_matmul_r16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
