/* test_tensor_q8blk.c — tensor/: the Q8_0 block-order twins of the kernel tables
 * (tensor_kernels_q8blk, tensor_impl.h rt_dot_q8_0_blk).
 *
 * The twin of a table differs from it in the Q8_0 entries only, and every one of those gives,
 * element for element, the bits of the scalar twin's dot (memcmp): vec_dot, vec_dot4 lane by
 * lane, gemv and gemm over row counts around their groups (1..70), token counts around their
 * tiles and the panel threshold (1..30, 64), odd block counts, rows too long for the gemm's
 * panel, odd addresses and padded strides, with rough quantized data and raw bytes (every
 * quant value, random fp16 scales of both signs). Outputs past the rows and tokens asked for
 * stay untouched. The scalar dot agrees with the exact sum of the dequantized products, and
 * its bits differ from ggml's order on many rows, so the twins are no copy of the tables. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"
#include "tensor_test_util.h"

#define MAX_ROWS 70
#define MAX_TOK 64
#define LDY (MAX_ROWS + 3)

/* rows Q8_0 rows of n: quantized rough values, or raw (quants -127..127 for activations,
 * -128..127 for weights, random scales). */
static void fill_q8(rng *r, uint8_t *q, int64_t n, int64_t rows, size_t stride, bool raw, bool act) {
    const size_t rb = tensor_row_bytes(GGUF_T_Q8_0, n);
    float *f = xalloc((size_t)n * 4);
    for (int64_t i = 0; i < rows; i++) {
        uint8_t *row = q + (size_t)i * stride;
        if (!raw) {
            fill_rough_spread(r, f, n, 2.0f);
            tensor_kernels_scalar()->from_float[GGUF_T_Q8_0](f, row, n);
            continue;
        }
        for (size_t b = 0; b < rb / 34; b++) {
            const uint16_t h = rand_scale(r);
            memcpy(row + 34 * b, &h, 2);
            for (int j = 0; j < 32; j++)
                row[34 * b + 2 + j] = act ? (uint8_t)(int8_t)((int)(rng_u64(r) % 255) - 127) : (uint8_t)rng_u64(r);
        }
    }
    free(f);
}

static void test_twins(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    for (int k = 0; k < nt; k++) {
        const tensor_kernels *tw = tensor_kernels_q8blk(tab[k]);
        assert_non_null(tw);
        assert_ptr_not_equal(tw, tab[k]);
        assert_ptr_equal(tensor_kernels_q8blk(tw), tw);
        assert_non_null(strstr(tw->isa, "q8blk"));
        tensor_kernels same = *tw;   /* with the base's Q8_0 entries and name: the base itself */
        same.isa = tab[k]->isa;
        same.vec_dot[GGUF_T_Q8_0] = tab[k]->vec_dot[GGUF_T_Q8_0];
        same.vec_dot4[GGUF_T_Q8_0] = tab[k]->vec_dot4[GGUF_T_Q8_0];
        same.gemv[GGUF_T_Q8_0] = tab[k]->gemv[GGUF_T_Q8_0];
        same.gemm[GGUF_T_Q8_0] = tab[k]->gemm[GGUF_T_Q8_0];
        same.gemv_q8_0_r16 = tab[k]->gemv_q8_0_r16;   /* packed Q8_0 rows: in the block order too */
        assert_ptr_not_equal(tw->gemv_q8_0_r16.fn, tab[k]->gemv_q8_0_r16.fn);
        same.gemm_q8_0_r16 = tab[k]->gemm_q8_0_r16;   /* ggml's order only: none in a twin */
        assert_null(tw->gemm_q8_0_r16);
        assert_int_equal(tw->q8_0_r16_native, tab[k]->q8_0_r16_native);
        /* the AVX-512 Q4_0 gemm's groups read ggml's tails (x86/gemm_q40_avx512.c): a twin keeps
         * the tiles, packed rows unpacked for them */
        same.gemm[GGUF_T_Q4_0] = tab[k]->gemm[GGUF_T_Q4_0];
        same.gemm_q4_0_r16 = tab[k]->gemm_q4_0_r16;
        assert_null(tw->gemm_q4_0_r16);
        assert_true(same.q8_block && !tab[k]->q8_block);
        same.q8_block = false;
        assert_memory_equal(&same, tab[k], sizeof same);
        assert_ptr_not_equal(tw->vec_dot[GGUF_T_Q8_0], tab[k]->vec_dot[GGUF_T_Q8_0]);
    }
    const tensor_kernels other = *tab[0];
    assert_null(tensor_kernels_q8blk(&other));
}

/* The scalar block-order dot against double sums of the dequantized rows, and against ggml's
 * order: within rounding of the exact value, other bits on many rows. */
static void test_scalar_dot(void **state) {
    (void)state;
    rng r = { 7 };
    const tensor_kernels *s = tensor_kernels_scalar(), *b = tensor_kernels_q8blk(s);
    const int64_t n = 32 * 37;
    const size_t rb = tensor_row_bytes(GGUF_T_Q8_0, n);
    uint8_t *w = xalloc(rb * MAX_ROWS), *x = xalloc(rb);
    float *wf = xalloc((size_t)n * 4), *xf = xalloc((size_t)n * 4);
    int differ = 0;
    for (int raw = 0; raw < 2; raw++) {
        fill_q8(&r, w, n, MAX_ROWS, rb, raw, false);
        fill_q8(&r, x, n, 1, rb, raw, true);
        s->to_float[GGUF_T_Q8_0](x, xf, n);
        for (int o = 0; o < MAX_ROWS; o++) {
            s->to_float[GGUF_T_Q8_0](w + (size_t)o * rb, wf, n);
            double e = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                e += (double)wf[i] * xf[i];
                mag += fabs((double)wf[i] * xf[i]);
            }
            const float got = b->vec_dot[GGUF_T_Q8_0](n, w + (size_t)o * rb, x);
            const float ggml = s->vec_dot[GGUF_T_Q8_0](n, w + (size_t)o * rb, x);
            if (fabs(got - e) > 1e-5 * mag + 1e-30) fail_msg("row %d: %.9g vs exact %.9g", o, got, e);
            differ += memcmp(&got, &ggml, 4) != 0;
        }
    }
    assert_true(differ >= MAX_ROWS / 4);
    free(w); free(x); free(wf); free(xf);
}

/* One n: every twin's vec_dot, vec_dot4, gemv and gemm against the scalar twin's dot. */
static void check_n(const tensor_kernels *tw, int64_t n, bool raw, rng *r) {
    const tensor_kernels *ref = tensor_kernels_q8blk(tensor_kernels_scalar());
    const tensor_vec_dot_fn dot = ref->vec_dot[GGUF_T_Q8_0];
    const size_t wb = tensor_row_bytes(GGUF_T_Q8_0, n), ws = wb + 5, xs = tensor_act_row_bytes(GGUF_T_Q8_0, n) + 7;
    uint8_t *wbuf = xalloc(ws * MAX_ROWS + 1), *xbuf = xalloc(xs * MAX_TOK + 1);
    uint8_t *w = wbuf + 1, *x = xbuf + 1;   /* odd addresses, padded strides */
    float *y = xalloc(sizeof(float) * MAX_TOK * LDY), *want = xalloc(sizeof(float) * MAX_TOK * MAX_ROWS);
    fill_q8(r, w, n, MAX_ROWS, ws, raw, false);
    fill_q8(r, x, n, MAX_TOK, xs, raw, true);
    for (int t = 0; t < MAX_TOK; t++) tensor_act_tail(tw, GGUF_T_Q8_0, x + (size_t)t * xs, n);
    for (int t = 0; t < MAX_TOK; t++)
        for (int o = 0; o < MAX_ROWS; o++) want[t * MAX_ROWS + o] = dot(n, w + (size_t)o * ws, x + (size_t)t * xs);
    for (int t = 0; t < 5; t++)
        for (int o = 0; o < MAX_ROWS; o += 13) {
            const float got = tw->vec_dot[GGUF_T_Q8_0](n, w + (size_t)o * ws, x + (size_t)t * xs);
            if (memcmp(&got, &want[t * MAX_ROWS + o], 4)) fail_msg("%s: vec_dot n %lld row %d", tw->isa, (long long)n, o);
        }
    if (tw->vec_dot4[GGUF_T_Q8_0])
        for (int o = 0; o < MAX_ROWS; o += 7) {
            float out[4];
            tw->vec_dot4[GGUF_T_Q8_0](n, w + (size_t)o * ws, x, xs, out);
            for (int j = 0; j < 4; j++)
                if (memcmp(&out[j], &want[j * MAX_ROWS + o], 4)) fail_msg("%s: vec_dot4 n %lld row %d", tw->isa, (long long)n, o);
        }
    static const int64_t rows[] = { 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 47, MAX_ROWS };
    static const int64_t toks[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 30, MAX_TOK };
    for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++) {
        const tensor_gemv gv = tw->gemv[GGUF_T_Q8_0];
        if (gv.fn) {
            for (int o = 0; o < LDY; o++) y[o] = -7.0f;
            gv.fn(n, w, ws, rows[a], 0, tensor_gemv_groups(rows[a], gv.group), x, y);
            for (int o = 0; o < LDY; o++) {
                const float e = o < rows[a] ? want[o] : -7.0f;
                if (memcmp(&e, &y[o], 4)) fail_msg("%s: gemv n %lld rows %lld: y[%d]", tw->isa, (long long)n, (long long)rows[a], o);
            }
        }
        if (!tw->gemm[GGUF_T_Q8_0]) continue;
        for (size_t b = 0; b < sizeof toks / sizeof toks[0]; b++) {
            for (int e = 0; e < MAX_TOK * LDY; e++) y[e] = -7.0f;
            tw->gemm[GGUF_T_Q8_0](n, w, ws, rows[a], x, xs, toks[b], y, LDY);
            for (int t = 0; t < MAX_TOK; t++)
                for (int o = 0; o < LDY; o++) {
                    const float e = t < toks[b] && o < rows[a] ? want[t * MAX_ROWS + o] : -7.0f;
                    if (memcmp(&e, &y[t * LDY + o], 4))
                        fail_msg("%s: gemm n %lld rows %lld toks %lld: y[%d][%d] %a vs %a", tw->isa, (long long)n,
                                 (long long)rows[a], (long long)toks[b], t, o, y[t * LDY + o], e);
                }
        }
    }
    free(wbuf); free(xbuf); free(y); free(want);
}

static void test_kernels(void **state) {
    (void)state;
    rng r = { 2026 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    /* odd block counts; 257 blocks: past the AVX-512 gemm's panel */
    static const int64_t ns[] = { 32, 96, 160, 32 * 13, 32 * 56, 32 * 257 };
    for (int k = 0; k < nt; k++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (int raw = 0; raw < 2; raw++) check_n(tensor_kernels_q8blk(tab[k]), ns[i], raw, &r);
    if (tensor_kernels_avx512()) {   /* the AVX-512 twin has its own gemm and gemv */
        const tensor_kernels *a = tensor_kernels_q8blk(tensor_kernels_avx512()), *b = tensor_kernels_q8blk(tensor_kernels_avx2());
        assert_ptr_not_equal(a->gemm[GGUF_T_Q8_0], b->gemm[GGUF_T_Q8_0]);
        assert_ptr_not_equal(a->gemv[GGUF_T_Q8_0].fn, b->gemv[GGUF_T_Q8_0].fn);
    }
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_twins),
        cmocka_unit_test(test_scalar_dot),
        cmocka_unit_test(test_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
