/* test_tensor_gemv.c — tensor/: the single-token matmul kernels (gemv[], gemv_q4_K_rp).
 *
 * Their contract is bit-identity with the dot they stand for, row by row (tensor.h): a token's
 * logits must not depend on whether it was computed alone or in a batch, nor on how a matmul's
 * rows are split among threads. So every comparison here is memcmp (no tolerance), over
 *  - row counts around the kernels' row groups (0..9, 15-17, 23, 33, 67), so every tail runs;
 *  - row lengths with odd block counts (n not a multiple of 64 for Q8_0) and long rows;
 *  - rows at odd addresses and row strides longer than a row;
 *  - quantized rough data, and raw weight bytes (every byte value, -128 included, random
 *    fp16 scales), with activations as the quantizer makes them (|q| <= 127).
 * Outputs past n_rows must stay untouched. The last test shows the data is order-sensitive:
 * the same sums in double precision round to other bits for many rows, so equal bits are no
 * accident of exact arithmetic. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"
#include "tensor_test_util.h"

#define MAX_ROWS 67
#define PAD 5   /* extra bytes of the padded row stride */

/* rows of rough values (tensor_test_util.h) */
static void fill_rough(rng *r, float *x, int64_t n) { fill_rough_spread(r, x, n, 2.0f); }

/* Raw weight rows: random bytes everywhere, then every fp16 scale field made finite. */
static void fill_raw(rng *r, uint32_t wt, uint8_t *w, int64_t n, int64_t rows) {
    const size_t wb = tensor_row_bytes(wt, n);
    for (size_t i = 0; i < wb * (size_t)rows; i++) w[i] = (uint8_t)rng_u64(r);
    const size_t bb = wt == GGUF_T_Q8_0   ? 34
                      : wt == GGUF_T_Q4_0 ? 18
                      : wt == GGUF_T_Q4_K ? 144
                      : wt == GGUF_T_Q5_K ? 176
                      : wt == GGUF_T_IQ4_XS ? 136
                                            : 210;
    const bool k4 = wt == GGUF_T_Q4_K || wt == GGUF_T_Q5_K;   /* d, then dmin */
    const size_t f16s[2] = { wt == GGUF_T_Q6_K ? 208 : 0, k4 ? 2 : SIZE_MAX };
    for (size_t b = 0; b < wb * (size_t)rows / bb; b++)
        for (int f = 0; f < 2; f++) {
            if (f16s[f] == SIZE_MAX) continue;
            const uint16_t h = rand_scale(r);
            memcpy(w + b * bb + f16s[f], &h, 2);
        }
}

typedef struct gv_case {
    const tensor_kernels *k;
    uint32_t          wt;
    tensor_gemv       gemv;
    tensor_vec_dot_fn dot;
    const char       *what;
} gv_case;

/* gemv over rows[] row counts of the weight at w (stride ws) against x equals dot row by row;
 * y past n_rows is untouched; the groups in pieces give the same (check_gemv_pieces). */
static void check_rows(const gv_case *c, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x) {
    static const int64_t rows[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 23, 33, MAX_ROWS };
    static rng pr = { 99 };
    float y[MAX_ROWS + 4];
    for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++) {
        for (int i = 0; i < MAX_ROWS + 4; i++) y[i] = -7.0f;
        c->gemv.fn(n, w, ws, rows[a], 0, tensor_gemv_groups(rows[a], c->gemv.group), x, y);
        for (int64_t o = 0; o < MAX_ROWS + 4; o++) {
            const float want = o < rows[a] ? c->dot(n, w + (size_t)o * ws, x) : -7.0f;
            if (memcmp(&want, &y[o], 4) != 0)
                fail_msg("%s %s type %u n %lld rows %lld stride %zu: y[%lld] %a vs %a", c->k->isa, c->what,
                         (unsigned)c->wt, (long long)n, (long long)rows[a], ws, (long long)o, y[o], want);
        }
        char what[64];
        snprintf(what, sizeof what, "%s %s type %u n %lld", c->k->isa, c->what, (unsigned)c->wt, (long long)n);
        check_gemv_pieces(c->gemv, n, w, ws, x, rows[a], y, &pr, what);
    }
}

/* One (kernel, n): quantized and raw weights, packed and padded strides, odd addresses; rough
 * activations, then a constant row, whose quants all sit at the end of their range (Q8_K:
 * -127, bsums -2032, near the edge of the kernels' int16 bounds). */
static void check_gemv(const gv_case *c, int64_t n, rng *r) {
    const uint32_t vt = tensor_vec_dot_type(c->wt);
    const size_t wb = tensor_row_bytes(c->wt, n), ws = wb + PAD;
    float *f = xalloc((size_t)n * MAX_ROWS * 4);
    uint8_t *wbuf = xalloc(ws * MAX_ROWS + 1), *xbuf = xalloc(tensor_act_row_bytes(vt, n) + 1);
    uint8_t *w = wbuf + 1, *x = xbuf + 1;   /* odd addresses */
    for (int act = 0; act < 2; act++) {
        if (act)
            for (int64_t i = 0; i < n; i++) f[i] = 1.5f;
        else
            fill_rough(r, f, n);
        tensor_act_quantize(c->k, vt, f, x, n);
        for (int raw = 0; raw < 2; raw++) {
            if (raw) {
                fill_raw(r, c->wt, w, n, MAX_ROWS);
            } else {
                fill_rough(r, f, n * MAX_ROWS);
                tensor_kernels_scalar()->from_float[c->wt](f, w, n * MAX_ROWS);
            }
            check_rows(c, n, w, wb, x);
            for (int64_t o = MAX_ROWS - 1; o >= 0; o--) memmove(w + (size_t)o * ws, w + (size_t)o * wb, wb);
            check_rows(c, n, w, ws, x);
        }
    }
    free(f); free(wbuf); free(xbuf);
}

/* The kernels of every table and of its Q8_0 block-order twin, with their dots. */
static int list_cases(gv_case *out, int max) {
    const tensor_kernels *tab[6];
    int nt = get_tables(tab);
    for (int k = 0, n0 = nt; k < n0; k++)
        if (tensor_kernels_q8blk(tab[k])->gemv[GGUF_T_Q8_0].fn) tab[nt++] = tensor_kernels_q8blk(tab[k]);
    static const uint32_t types[] = { GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K, GGUF_T_IQ4_XS };
    int m = 0;
    for (int k = 0; k < nt; k++) {
        for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
            if (tab[k]->gemv[types[i]].fn && m < max)
                out[m++] = (gv_case){ tab[k], types[i], tab[k]->gemv[types[i]], tab[k]->vec_dot[types[i]], "gemv" };
        if (tab[k]->gemv_q4_K_rp.fn && m < max)
            out[m++] = (gv_case){ tab[k], GGUF_T_Q4_K, tab[k]->gemv_q4_K_rp, tab[k]->dot_q4_K_rp, "gemv_q4_K_rp" };
    }
    /* the kernels' lean twins (tensor_gemv.lean), as kernels of their own */
    for (int i = 0, m0 = m; i < m0; i++)
        if (out[i].gemv.lean && m < max) {
            const tensor_gemv g = out[i].gemv;
            out[m] = out[i];
            out[m].gemv = (tensor_gemv){ g.lean, g.lean_group ? g.lean_group : g.group, NULL, 0, NULL, 0 };
            out[m++].what = out[i].gemv.fn == out[i].k->gemv_q4_K_rp.fn ? "gemv_q4_K_rp lean" : "gemv lean";
        }
    return m;
}

static void test_gemv_bits(void **state) {
    (void)state;
    rng r = { 2024 };
    gv_case cs[64];
    const int m = list_cases(cs, 64);
    /* block-32 types; 32 * 513: past the Q4_0 kernel's activation panel (its fallback); 32 *
     * 1025: past the AVX2 Q8_0 kernel's widened activation (its sign-trick fallback) */
    static const int64_t n_q8[] = { 32, 64, 96, 160, 1056, 3072 + 32, 32 * 513, 32 * 1025 };
    /* 256 * 65: past the AVX-512 IQ4_XS kernel's activation buffer (its fallback) */
    static const int64_t n_k[] = { 256, 768, 2816, 256 * 65 };
    for (int i = 0; i < m; i++) {
        const bool q8 = cs[i].wt == GGUF_T_Q8_0 || cs[i].wt == GGUF_T_Q4_0;
        const int64_t *ns = q8 ? n_q8 : n_k;
        const size_t nn = q8 ? sizeof n_q8 / sizeof n_q8[0]
                             : sizeof n_k / sizeof n_k[0] - (cs[i].wt == GGUF_T_IQ4_XS ? 0 : 1);
        for (size_t l = 0; l < nn; l++) check_gemv(&cs[i], ns[l], &r);
    }
    /* both tables have the Q8_0, Q4_0, Q4_K, Q5_K and Q6_K kernels: they were compared above */
    if (tensor_kernels_avx2()) {
        assert_non_null(tensor_kernels_avx2()->gemv[GGUF_T_Q8_0].fn);
        assert_non_null(tensor_kernels_avx2()->gemv_q4_K_rp.fn);
        assert_non_null(tensor_kernels_avx2()->gemv[GGUF_T_Q6_K].fn);
        assert_non_null(tensor_kernels_avx2()->gemv[GGUF_T_Q4_0].fn);
        assert_non_null(tensor_kernels_avx2()->gemv[GGUF_T_Q5_K].fn);
    }
    if (tensor_kernels_avx512()) {
        assert_non_null(tensor_kernels_avx512()->gemv[GGUF_T_Q8_0].fn);
        assert_non_null(tensor_kernels_avx512()->gemv[GGUF_T_Q4_0].fn);
        assert_non_null(tensor_kernels_avx512()->gemv[GGUF_T_IQ4_XS].fn);
        assert_non_null(tensor_kernels_avx512()->gemv[GGUF_T_Q5_K].fn);
        assert_non_null(tensor_kernels_avx512()->gemv_q4_K_rp.fn);
        assert_non_null(tensor_kernels_avx512()->gemv[GGUF_T_Q6_K].fn);
    }
}

/* Activations with every quantized value (-127..127, as the quantizer makes them) and random
 * scales, not only what from_float of smooth data gives. */
static void test_gemv_q8_raw_x(void **state) {
    (void)state;
    rng r = { 77 };
    gv_case cs[64];
    const int m = list_cases(cs, 64);
    const int64_t n = 1056;
    const size_t wb = tensor_row_bytes(GGUF_T_Q8_0, n);
    uint8_t *w = xalloc(wb * MAX_ROWS), *x = xalloc(tensor_act_row_bytes(GGUF_T_Q8_0, n));
    for (int i = 0; i < m; i++) {
        if (cs[i].wt != GGUF_T_Q8_0) continue;
        for (int rep = 0; rep < 4; rep++) {
            fill_raw(&r, GGUF_T_Q8_0, w, n, MAX_ROWS);
            for (size_t b = 0; b < wb / 34; b++) {
                const uint16_t h = rand_scale(&r);
                memcpy(x + 34 * b, &h, 2);
                for (int j = 0; j < 32; j++) x[34 * b + 2 + j] = (uint8_t)(int8_t)((int)(rng_u64(&r) % 255) - 127);
            }
            tensor_act_tail(cs[i].k, GGUF_T_Q8_0, x, n);
            check_rows(&cs[i], n, w, wb, x);
        }
    }
    free(w); free(x);
}

/* The several-token kernels over the file's layout (tensor_gemv.tokens): every token count
 * below tokens_max (each form a kernel switches between by count, the tiles' token tails),
 * row counts around their row groups, rows at odd addresses and padded strides, activation
 * rows at an odd stride, raw and quantized weights: y[t·ldy + r] equals the dot of row r and
 * token t bit for bit, and y is untouched past the rows and tokens. */
#define TOK_MAX 40
static void test_gemv_tokens(void **state) {
    (void)state;
    rng r = { 4242 };
    gv_case cs[64];
    const int m = list_cases(cs, 64);
    static const int64_t ns[] = { 32, 224, 1056, 3072 + 32, 32 * 1025 }, rows[] = { 1, 3, 4, 5, 9, 37 };
    enum { LDY = MAX_ROWS + 3 };
    int kernels = 0;
    for (int i = 0; i < m; i++) {
        const tensor_gemv g = cs[i].gemv;
        if (!g.tokens || cs[i].gemv.fn != cs[i].k->gemv[cs[i].wt].fn) continue;   /* once per kernel */
        kernels++;
        const int64_t tmax = g.tokens_max ? g.tokens_max - 1 : TOK_MAX;
        assert_true(tmax <= TOK_MAX);
        const uint32_t vt = tensor_vec_dot_type(cs[i].wt);
        for (size_t l = 0; l < sizeof ns / sizeof ns[0]; l++) {
            const int64_t n = ns[l];
            if (n % tensor_block_size(cs[i].wt)) continue;
            const size_t wb = tensor_row_bytes(cs[i].wt, n), ws = wb + PAD, xs = tensor_act_row_bytes(vt, n) + 3;
            float *f = xalloc((size_t)n * MAX_ROWS * 4), *y = xalloc((size_t)(TOK_MAX + 1) * LDY * 4);
            uint8_t *wbuf = xalloc(ws * MAX_ROWS + 1), *xbuf = xalloc(xs * TOK_MAX + 1);
            uint8_t *w = wbuf + 1, *x = xbuf + 1;   /* odd addresses */
            fill_rough(&r, f, n * TOK_MAX < n * MAX_ROWS ? n * TOK_MAX : n * MAX_ROWS);
            for (int64_t t = 0; t < TOK_MAX; t++) tensor_act_quantize(cs[i].k, vt, f + (t % MAX_ROWS) * n, x + t * xs, n);
            for (int raw = 0; raw < 2; raw++) {
                if (raw) {
                    fill_raw(&r, cs[i].wt, w, n, MAX_ROWS);
                    for (int64_t o = MAX_ROWS - 1; o >= 0; o--) memmove(w + (size_t)o * ws, w + (size_t)o * wb, wb);
                } else {
                    fill_rough(&r, f, n * MAX_ROWS);
                    tensor_kernels_scalar()->from_float[cs[i].wt](f, w, n * MAX_ROWS);
                }
                const size_t stride = raw ? ws : wb;
                for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
                    for (int64_t nt = 1; nt <= tmax; nt += nt < 18 ? 1 : 5) {
                        for (int e = 0; e < (TOK_MAX + 1) * LDY; e++) y[e] = -7.0f;
                        g.tokens(n, w, stride, rows[a], x, xs, nt, y, LDY);
                        for (int64_t t = 0; t <= TOK_MAX; t++)
                            for (int64_t o = 0; o < LDY; o++) {
                                const bool in = t < nt && o < rows[a];
                                const float want = in ? cs[i].dot(n, w + (size_t)o * stride, x + t * xs) : -7.0f;
                                if (memcmp(&want, &y[t * LDY + o], 4) != 0)
                                    fail_msg("%s tokens type %u n %lld rows %lld tokens %lld raw %d: y[%lld][%lld] %a vs %a",
                                             cs[i].k->isa, (unsigned)cs[i].wt, (long long)n, (long long)rows[a],
                                             (long long)nt, raw, (long long)t, (long long)o, y[t * LDY + o], want);
                            }
                    }
            }
            free(f); free(y); free(wbuf); free(xbuf);
        }
    }
    if (tensor_kernels_avx2()) assert_true(kernels > 0);   /* the AVX2 table's gemv[Q8_0] has one */
}

/* The data above is sensitive to the order of the sums: rounding the exact (double) dot of the
 * dequantized rows gives other bits than the kernel for many rows, so the bit comparisons
 * above could not pass by chance with another order. */
static void test_order_sensitive(void **state) {
    (void)state;
    rng r = { 5 };
    const tensor_kernels *s = tensor_kernels_scalar();
    const int64_t n = 1056;
    const size_t wb = tensor_row_bytes(GGUF_T_Q8_0, n);
    float *f = xalloc((size_t)n * MAX_ROWS * 4), *wf = xalloc((size_t)n * 4), *xf = xalloc((size_t)n * 4);
    uint8_t *w = xalloc(wb * MAX_ROWS), *x = xalloc(wb);
    fill_rough(&r, f, n * MAX_ROWS);
    s->from_float[GGUF_T_Q8_0](f, w, n * MAX_ROWS);
    fill_rough(&r, f, n);
    s->from_float[GGUF_T_Q8_0](f, x, n);
    s->to_float[GGUF_T_Q8_0](x, xf, n);
    int differ = 0;
    for (int o = 0; o < MAX_ROWS; o++) {
        s->to_float[GGUF_T_Q8_0](w + (size_t)o * wb, wf, n);
        double e = 0;
        for (int64_t i = 0; i < n; i++) e += (double)wf[i] * xf[i];
        const float exact = (float)e, got = s->vec_dot[GGUF_T_Q8_0](n, w + (size_t)o * wb, x);
        differ += memcmp(&exact, &got, 4) != 0;
    }
    assert_true(differ >= MAX_ROWS / 4);
    free(f); free(wf); free(xf); free(w); free(x);
}

int main(void) {
    tensor_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemv_bits),
        cmocka_unit_test(test_gemv_q8_raw_x),
        cmocka_unit_test(test_gemv_tokens),
        cmocka_unit_test(test_order_sensitive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
