/* test_tensor.c — tensor/: types, quantization round trips, every SIMD table against the
 * scalar reference, the f16 helpers and tensor_matmul's determinism.
 * (Hand-made block layouts are checked in test_tensor_layout.c.)
 *
 * Named tolerances:
 *  - round trip: RMS(dequant(quant(x)) - x) / RMS(x) below k_types[].rt_tol;
 *  - SIMD vs scalar vec_dot: |simd - scalar| <= DOT_REL * sum_i |w_i x_i| (dequantized);
 *  - matmul vs a naive double reference on the dequantized weights and float activations:
 *    k_types[].mm_tol * sum_i |w_i x_i|. This only measures the 8-bit activation
 *    quantization, whose worst case over many rows with outliers (fill_rough) reaches
 *    ~0.7% (Q8_0) / ~1.5% (Q8_K) while the mean is ~0.05%: a wrong scale or sign would be
 *    off by O(1);
 *  - activation quantization, to_float, axpy_f16 and f32_to_f16_row: byte-identical;
 *  - exp_f32 / silu_f32 / swiglu_f32: byte-identical in every table and equal to ggml's
 *    vectorised expf on recorded inputs; exp_f32 within 2.5 ulp of exp (the algorithm's error). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/alloc.h"
#include "tensor/fp16.h"
#include "tensor/tensor.h"
#include "tensor_test_util.h"
#include "tensor/tensor_impl.h"

#define DOT_REL 1e-5

typedef struct type_case {
    uint32_t    type;
    const char *name;
    double      rt_tol;   /* round-trip RMS error relative to the data's RMS */
    double      mm_tol;   /* matmul vs float reference, relative to sum |w x| */
} type_case;

static const type_case k_types[] = {
    { GGUF_T_F32, "F32", 1e-7, 1e-5 },     { GGUF_T_F16, "F16", 1e-3, 1e-3 },
    { GGUF_T_BF16, "BF16", 1e-2, 5e-3 },   { GGUF_T_Q8_0, "Q8_0", 0.01, 2e-2 },
    { GGUF_T_Q4_0, "Q4_0", 0.12, 2e-2 },   { GGUF_T_Q4_K, "Q4_K", 0.1, 3e-2 },
    { GGUF_T_Q5_K, "Q5_K", 0.05, 3e-2 },   { GGUF_T_Q6_K, "Q6_K", 0.025, 3e-2 },
    { GGUF_T_IQ4_XS, "IQ4_XS", 0.1, 3e-2 },
};
#define N_TYPES (sizeof k_types / sizeof k_types[0])

/* ---- helpers ------------------------------------------------------------------------------ */

static void fill_gauss(rng *r, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_gauss(r);
}

/* rows of rough values (tensor_test_util.h) */
static void fill_rough(rng *r, float *x, int64_t n) { fill_rough_spread(r, x, n, 1.0f); }

/* sum_i |w_i x_i| of a weight row and an activation row, both dequantized. */
static double abs_dot(uint32_t wt, const void *w, const void *x, int64_t n) {
    const tensor_kernels *s = tensor_kernels_scalar();
    float *wf = xalloc((size_t)n * 4), *xf = xalloc((size_t)n * 4);
    s->to_float[wt](w, wf, n);
    s->to_float[tensor_vec_dot_type(wt)](x, xf, n);
    double a = 0;
    for (int64_t i = 0; i < n; i++) a += fabs((double)wf[i] * xf[i]);
    free(wf);
    free(xf);
    return a;
}

/* ---- types ---------------------------------------------------------------------------------- */

static void test_types(void **state) {
    (void)state;
    for (size_t i = 0; i < N_TYPES; i++) {
        const uint32_t t = k_types[i].type;
        assert_true(tensor_type_supported(t));
        const tensor_kernels *tab[3];
        const int nt = get_tables(tab);
        for (int k = 0; k < nt; k++) {
            assert_non_null(tab[k]->to_float[t]);
            assert_non_null(tab[k]->from_float[t]);
            assert_non_null(tab[k]->vec_dot[t]);
            assert_non_null(tab[k]->from_float[tensor_vec_dot_type(t)]);
        }
    }
    assert_false(tensor_type_supported(GGUF_T_Q8_K));
    assert_false(tensor_type_supported(GGUF_T_Q4_1));
    assert_false(tensor_type_supported(GGUF_T_COUNT));
    assert_int_equal(tensor_vec_dot_type(GGUF_T_Q4_0), GGUF_T_Q8_0);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_Q8_0), GGUF_T_Q8_0);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_Q4_K), GGUF_T_Q8_K);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_Q5_K), GGUF_T_Q8_K);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_Q6_K), GGUF_T_Q8_K);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_IQ4_XS), GGUF_T_Q8_K);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_F16), GGUF_T_F16);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_BF16), GGUF_T_BF16);
    assert_int_equal(tensor_vec_dot_type(GGUF_T_F32), GGUF_T_F32);
    assert_int_equal(tensor_row_bytes(GGUF_T_F32, 7), 28);
    assert_int_equal(tensor_row_bytes(GGUF_T_F16, 7), 14);
    assert_int_equal(tensor_row_bytes(GGUF_T_BF16, 7), 14);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q8_0, 64), 68);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q4_0, 64), 36);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q4_K, 512), 288);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q5_K, 512), 352);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q6_K, 512), 420);
    assert_int_equal(tensor_row_bytes(GGUF_T_IQ4_XS, 512), 272);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q8_K, 512), 584);
    assert_int_equal(tensor_row_bytes(GGUF_T_Q2_K, 256), 0);
    assert_int_equal(tensor_block_size(GGUF_T_Q6_K), 256);
    assert_int_equal(tensor_block_size(GGUF_T_Q8_0), 32);
    assert_int_equal(tensor_block_size(GGUF_T_F16), 1);
    const tensor_kernels *a = tensor_kernels_active();
    assert_non_null(a);
    assert_true(strcmp(a->isa, "scalar") == 0 || strcmp(a->isa, "avx2") == 0 ||
                strcmp(a->isa, "avx512") == 0);
}

/* ---- round trips ------------------------------------------------------------------------------ */

static double roundtrip_err(uint32_t t, const float *x, int64_t n) {
    const tensor_kernels *s = tensor_kernels_scalar();
    void *q = xalloc(tensor_row_bytes(t, n));
    float *y = xalloc((size_t)n * 4);
    s->from_float[t](x, q, n);
    s->to_float[t](q, y, n);
    double e = 0, r = 0;
    for (int64_t i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        r += (double)x[i] * x[i];
    }
    free(q);
    free(y);
    return sqrt(e / r);
}

static void test_roundtrip(void **state) {
    (void)state;
    const int64_t n = 8192;
    float *x = xalloc(n * 4);
    rng r = { 1 };
    fill_gauss(&r, x, n);
    for (size_t i = 0; i < N_TYPES; i++) {
        const double e = roundtrip_err(k_types[i].type, x, n);
        if (!(e < k_types[i].rt_tol))
            fail_msg("%s: round-trip error %.4g >= %.4g", k_types[i].name, e, k_types[i].rt_tol);
    }
    const double e8k = roundtrip_err(GGUF_T_Q8_K, x, n);
    if (!(e8k < 0.01)) fail_msg("Q8_K: round-trip error %.4g", e8k);
    /* all-zero input quantizes to blocks that decode to zeros */
    memset(x, 0, n * 4);
    for (size_t i = 0; i < N_TYPES; i++) {
        const uint32_t t = k_types[i].type;
        void *q = xalloc(tensor_row_bytes(t, 256));
        float y[256];
        tensor_kernels_scalar()->from_float[t](x, q, 256);
        tensor_kernels_scalar()->to_float[t](q, y, 256);
        for (int j = 0; j < 256; j++) assert_true(y[j] == 0.0f);
        free(q);
    }
    free(x);
}

/* ---- quantization and dequantization identical across tables -------------------------------- */

/* Blocks built to hit the corner cases of the activation quantizers. */
static void fill_adversarial(rng *r, float *x, int64_t n) {
    fill_rough(r, x, n);
    for (int64_t b = 0; b + 256 <= n; b += 256) {
        float *v = x + b;
        switch ((b / 256) % 6) {
        case 0:   /* amax 127 -> d = 1: exact .5 ties for roundf / nearest_int */
            for (int j = 0; j < 256; j++) v[j] = (float)((j % 50) - 25) + 0.5f;
            v[3] = 127.0f; v[40] = -127.0f; v[200] = -127.0f;
            break;
        case 1: memset(v, 0, 256 * 4); break;
        case 2:   /* a zero Q8_0 block inside a live Q8_K block; the max is negative */
            memset(v, 0, 32 * 4);
            v[77] = -5.0f; v[78] = 5.0f;
            break;
        case 3: for (int j = 0; j < 256; j++) v[j] *= 1e-30f; break;   /* tiny scales */
        case 4: for (int j = 0; j < 256; j++) v[j] *= 1e4f; break;
        default: break;
        }
    }
}

static void test_quantize_identical(void **state) {
    (void)state;
    const int64_t n = 256 * 24;
    float *x = xalloc(n * 4);
    rng r = { 7 };
    fill_adversarial(&r, x, n);
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const uint32_t types[] = { GGUF_T_Q8_0, GGUF_T_Q8_K, GGUF_T_F16, GGUF_T_BF16, GGUF_T_F32,
                               GGUF_T_Q4_0, GGUF_T_Q4_K, GGUF_T_Q5_K, GGUF_T_Q6_K, GGUF_T_IQ4_XS };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t t = types[ti];
        const int64_t len = (t == GGUF_T_F16 || t == GGUF_T_BF16) ? n - 5 : n;  /* odd tails */
        const size_t nb = tensor_row_bytes(t, len);
        uint8_t *ref = xalloc(nb), *got = xalloc(nb + 1);
        float *fr = xalloc(n * 4), *fg = xalloc(n * 4);
        tab[0]->from_float[t](x, ref, len);
        tab[0]->to_float[t](ref, fr, len);
        for (int k = 1; k < nt; k++) {
            memset(got, 0xAB, nb + 1);
            tab[k]->from_float[t](x, got + 1, len);         /* misaligned destination */
            if (memcmp(ref, got + 1, nb) != 0 || got[0] != 0xAB)
                fail_msg("%s: from_float of type %u differs from scalar", tab[k]->isa, (unsigned)t);
            tab[k]->to_float[t](got + 1, fg, len);
            if (memcmp(fr, fg, (size_t)len * 4) != 0)
                fail_msg("%s: to_float of type %u differs from scalar", tab[k]->isa, (unsigned)t);
        }
        free(ref); free(got); free(fr); free(fg);
    }
    free(x);
}

/* ---- vec_dot: every table against the scalar one -------------------------------------------- */

static void check_dot(uint32_t wt, int64_t n, rng *r) {
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const uint32_t vt = tensor_vec_dot_type(wt);
    const size_t wb = tensor_row_bytes(wt, n), xb = tensor_row_bytes(vt, n);
    float *wf = xalloc((size_t)n * 4), *xf = xalloc((size_t)n * 4);
    uint8_t *w = xalloc(wb + 3), *x = xalloc(xb), *x2 = xalloc(xb);
    fill_rough(r, wf, n);
    fill_rough(r, xf, n);
    tab[0]->from_float[wt](wf, w, n);
    tab[0]->from_float[vt](xf, x, n);
    const double ref = tab[0]->vec_dot[wt](n, w, x), mag = abs_dot(wt, w, x, n) + 1e-30;
    /* the scalar dot agrees with the dequantized rows */
    float *wd = xalloc((size_t)n * 4), *xd = xalloc((size_t)n * 4);
    tab[0]->to_float[wt](w, wd, n);
    tab[0]->to_float[vt](x, xd, n);
    double exact = 0;
    for (int64_t i = 0; i < n; i++) exact += (double)wd[i] * xd[i];
    if (fabs(ref - exact) > DOT_REL * mag)
        fail_msg("scalar vec_dot type %u n %lld: %.9g vs dequantized %.9g", (unsigned)wt, (long long)n, ref, exact);
    /* Q4_K in ggml's repacked gemm order: the same bits in every table */
    const float rp = wt == GGUF_T_Q4_K ? tab[0]->dot_q4_K_rp(n, w, x) : 0.0f;
    if (wt == GGUF_T_Q4_K && fabs(rp - exact) > DOT_REL * mag)
        fail_msg("scalar dot_q4_K_rp n %lld: %.9g vs dequantized %.9g", (long long)n, rp, exact);
    /* Q5_K in that order (rt_dot_q5_K_rp): the SIMD tables' Q5_K dot, the same bits */
    const float rp5 = wt == GGUF_T_Q5_K ? rt_dot_q5_K_rp(n, w, x) : 0.0f;
    if (wt == GGUF_T_Q5_K && fabs(rp5 - exact) > DOT_REL * mag)
        fail_msg("scalar rt_dot_q5_K_rp n %lld: %.9g vs dequantized %.9g", (long long)n, rp5, exact);
    for (int k = 1; wt == GGUF_T_Q5_K && k < nt; k++) {
        const float got5 = tab[k]->vec_dot[GGUF_T_Q5_K](n, w, x);
        if (memcmp(&got5, &rp5, 4) != 0)
            fail_msg("%s: vec_dot[Q5_K] n %lld: %a differs from rt_dot_q5_K_rp %a", tab[k]->isa, (long long)n, got5, rp5);
    }
    for (int k = 1; k < nt; k++) {
        tab[k]->from_float[vt](xf, x2, n);
        if (memcmp(x, x2, xb) != 0) fail_msg("%s: activation bytes differ (type %u)", tab[k]->isa, (unsigned)vt);
        const float got = tab[k]->vec_dot[wt](n, w, x);
        if (fabs(got - ref) > DOT_REL * mag)
            fail_msg("%s: vec_dot type %u n %lld: %.9g vs scalar %.9g (mag %.4g)", tab[k]->isa,
                     (unsigned)wt, (long long)n, got, ref, mag);
        /* Q8_0 x Q8_0, Q4_K x Q8_K: every table follows ggml's lane order, so the bits agree;
         * Q6_K: every table follows rt_dot_q6_K's chain */
        if ((wt == GGUF_T_Q8_0 || wt == GGUF_T_Q4_K || wt == GGUF_T_Q6_K) && got != (float)ref)
            fail_msg("%s: vec_dot type %u n %lld: %.9g differs from scalar %.9g", tab[k]->isa,
                     (unsigned)wt, (long long)n, got, ref);
        const float got_rp = wt == GGUF_T_Q4_K ? tab[k]->dot_q4_K_rp(n, w, x) : 0.0f;
        if (memcmp(&got_rp, &rp, 4) != 0)
            fail_msg("%s: dot_q4_K_rp n %lld: %a differs from scalar %a", tab[k]->isa, (long long)n, got_rp, rp);
        for (int off = 1; off <= 3; off++) {   /* invariant 1: the address does not matter */
            memmove(w + off, w + off - 1, wb);
            const float moved = tab[k]->vec_dot[wt](n, w + off, x);
            if (memcmp(&moved, &got, 4) != 0) fail_msg("%s: vec_dot depends on alignment", tab[k]->isa);
            const float moved_rp = wt == GGUF_T_Q4_K ? tab[k]->dot_q4_K_rp(n, w + off, x) : 0.0f;
            if (memcmp(&moved_rp, &got_rp, 4) != 0) fail_msg("%s: dot_q4_K_rp depends on alignment", tab[k]->isa);
        }
        memmove(w, w + 3, wb);
    }
    free(wf); free(xf); free(w); free(x); free(x2); free(wd); free(xd);
}

static void test_vec_dot(void **state) {
    (void)state;
    rng r = { 42 };
    const int64_t lens[] = { 256, 512, 4096, 11008 };
    for (size_t i = 0; i < N_TYPES; i++)
        for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) check_dot(k_types[i].type, lens[l], &r);
    const int64_t odd[] = { 1, 7, 32, 96, 160, 4099 };   /* tails; odd block counts */
    const uint32_t small[] = { GGUF_T_F32, GGUF_T_F16, GGUF_T_BF16 };
    for (size_t i = 0; i < 3; i++)
        for (size_t l = 0; l < sizeof odd / sizeof odd[0]; l++) check_dot(small[i], odd[l], &r);
    for (size_t l = 2; l < 5; l++) {
        check_dot(GGUF_T_Q8_0, odd[l], &r);
        check_dot(GGUF_T_Q4_0, odd[l], &r);
    }
}

/* vec_dot4 (where a table has it) gives, lane for lane, the bits of vec_dot. */
static void test_vec_dot4(void **state) {
    (void)state;
    rng r = { 7 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t lens[] = { 32, 96, 256, 4096, 4128 };
    int checked = 0;
    for (int k = 0; k < nt; k++)
        for (size_t i = 0; i < N_TYPES; i++) {
            const uint32_t wt = k_types[i].type, vt = tensor_vec_dot_type(wt);
            if (!tab[k]->vec_dot4[wt]) continue;
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                const int64_t n = lens[l];
                if (n % tensor_block_size(wt) || n % tensor_block_size(vt)) continue;
                const size_t wb = tensor_row_bytes(wt, n), xb = tensor_row_bytes(vt, n) + 3;  /* odd stride */
                float *f = xalloc((size_t)n * 4), out[4];
                uint8_t *w = xalloc(wb), *x = xalloc(4 * xb);
                fill_rough(&r, f, n);
                tab[0]->from_float[wt](f, w, n);
                for (int j = 0; j < 4; j++) {
                    fill_rough(&r, f, n);
                    tab[k]->from_float[vt](f, x + j * xb, n);
                }
                tab[k]->vec_dot4[wt](n, w, x, xb, out);
                for (int j = 0; j < 4; j++) {
                    const float one = tab[k]->vec_dot[wt](n, w, x + j * xb);
                    if (memcmp(&one, &out[j], 4) != 0)
                        fail_msg("%s: vec_dot4 type %u n %lld lane %d: %.9g vs vec_dot %.9g", tab[k]->isa,
                                 (unsigned)wt, (long long)n, j, out[j], one);
                }
                checked++;
                free(f); free(w); free(x);
            }
        }
    if (tensor_kernels_avx2()) assert_true(checked > 0);
}

/* gemm (where a table has it) gives, element for element, the bits of vec_dot, for row and
 * token counts around its tile sizes, odd activation strides and an output stride; row
 * lengths around the float dots' unrolls (64- and 16-element blocks, a masked tail; BF16's
 * 32-element blocks and its fallback for other lengths), gemm[F16]'s row blocks of
 * its panel (1655: two blocks of up to 40 rows), rows too long for the panel and the AVX2
 * tile's 1024-element chunks (1032: one whole chunk, then chain 0's 8-element block). */
#define GEMM_ROWS 40   /* the largest row count tried */
#define GEMM_TOKS 12
#define GEMM_LDY  44   /* output row stride: a few columns no call may write */

static void test_gemm(void **state) {
    (void)state;
    rng r = { 8 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t ns[] = { 160, 7, 16, 48, 64, 85, 112, 224, 317, 1032, 1655, 1749, 1792 };
    const int64_t rows[] = { 1, 2, 7, 8, 9, 17, 33, 40 };
    const int64_t toks[] = { 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12 };
    int float_checked = 0;
    for (int k = 0; k < nt; k++)
        for (size_t i = 0; i < N_TYPES * (sizeof ns / sizeof ns[0]); i++) {
            const int64_t n = ns[i / N_TYPES];
            const uint32_t wt = k_types[i % N_TYPES].type, vt = tensor_vec_dot_type(wt);
            if (!tab[k]->gemm[wt] || n % tensor_block_size(wt) || n % tensor_block_size(vt)) continue;
            float_checked += wt == GGUF_T_F16;
            const uint8_t *w = NULL;
            const size_t wb = tensor_row_bytes(wt, n), xb = tensor_act_row_bytes(vt, n) + 3;   /* odd stride */
            float *f = xalloc((size_t)n * GEMM_ROWS * 4), y[GEMM_TOKS * GEMM_LDY];
            /* the weights at a 64-byte boundary and 32 bytes past one (GGUF's alignment) */
            uint8_t *wbuf = xalloc(wb * GEMM_ROWS + 128), *x = xalloc(GEMM_TOKS * xb);
            uint8_t *w64 = (uint8_t *)(((uintptr_t)wbuf + 63) & ~(uintptr_t)63), *w32 = w64 + 32;
            fill_rough(&r, f, n * GEMM_ROWS);
            tab[0]->from_float[wt](f, w64, n * GEMM_ROWS);
            for (int j = 0; j < GEMM_TOKS; j++) tensor_act_quantize(tab[k], vt, f + j * n, x + j * xb, n);
            for (size_t a = 0; a < sizeof rows / sizeof rows[0]; a++)
                for (size_t b = 0; b < sizeof toks / sizeof toks[0]; b++) {
                    const bool mis = (a + b) % 2;
                    if (mis != (w == w32)) memmove(mis ? w32 : w64, w, wb * GEMM_ROWS);
                    w = mis ? w32 : w64;
                    for (int e = 0; e < GEMM_TOKS * GEMM_LDY; e++) y[e] = -1.0f;
                    tab[k]->gemm[wt](n, w, wb, rows[a], x, xb, toks[b], y, GEMM_LDY);
                    for (int64_t t = 0; t < GEMM_TOKS; t++)
                        for (int64_t o = 0; o < GEMM_LDY; o++) {
                            const bool in = t < toks[b] && o < rows[a];
                            const float want = in ? tab[k]->vec_dot[wt](n, w + o * wb, x + t * xb) : -1.0f;
                            if (memcmp(&want, &y[t * GEMM_LDY + o], 4) != 0)
                                fail_msg("%s: gemm type %u n %lld rows %lld toks %lld: y[%lld][%lld] %.9g vs %.9g",
                                         tab[k]->isa, (unsigned)wt, (long long)n, (long long)rows[a],
                                         (long long)toks[b], (long long)t, (long long)o, y[t * GEMM_LDY + o], want);
                        }
                }
            free(f); free(wbuf); free(x);
        }
    /* gemm[F16] in the AVX2 and AVX-512 tables */
    const int f16_tables = (tensor_kernels_avx2() != NULL) + (tensor_kernels_avx512() != NULL);
    assert_int_equal(float_checked, f16_tables * (int)(sizeof ns / sizeof ns[0]));
}

/* The panel gemms (gemm_q4_K_rp; gemm[Q6_K]; gemm[Q4_0]; gemm[Q8_0]; gemm[Q5_K]) give, element for
 * element, the bits of their dot (dot_q4_K_rp; vec_dot[Q6_K], equal to the scalar one; the
 * same table's vec_dot[Q4_0] and vec_dot[Q5_K]), activations of the type's vec_dot type: row
 * counts around the panel, token counts around the tile, odd strides, unaligned rows, and a
 * row too long for the panel buffer (the fallback). */
static const int64_t panel_toks[] = { 1, 3, 4, 5, 9, 0 };   /* 0 ends a list */

static void check_panel_gemm_toks(const tensor_kernels *k, uint32_t wt, tensor_gemm_fn gemm, tensor_vec_dot_fn dot,
                                  int64_t n, const int64_t *rows, int nrows, const int64_t *toks, rng *r) {
    enum { MAXR = 34, LDY = 40 };
    int64_t maxt = 0;
    for (const int64_t *t = toks; *t; t++) maxt = *t > maxt ? *t : maxt;
    const uint32_t vt = tensor_vec_dot_type(wt);
    const size_t wb = tensor_row_bytes(wt, n), xb = tensor_act_row_bytes(vt, n) + 3;
    const int64_t nf = maxt > MAXR ? maxt : MAXR;   /* float rows: the weights', then the tokens' */
    float *f = xalloc((size_t)n * nf * 4), *y = xalloc(maxt * LDY * 4);
    uint8_t *wbuf = xalloc(wb * MAXR + 1), *x = xalloc(maxt * xb);
    uint8_t *w = wbuf + 1;   /* rows at odd addresses */
    fill_rough(r, f, n * nf);
    tensor_kernels_scalar()->from_float[wt](f, w, n * MAXR);
    for (int j = 0; j < maxt; j++) tensor_act_quantize(k, vt, f + j * n, x + j * xb, n);
    for (int a = 0; a < nrows; a++)
        for (size_t b = 0; toks[b]; b++) {
            for (int e = 0; e < maxt * LDY; e++) y[e] = -1.0f;
            gemm(n, w, wb, rows[a], x, xb, toks[b], y, LDY);
            for (int64_t t = 0; t < maxt; t++)
                for (int64_t o = 0; o < LDY; o++) {
                    const bool in = t < toks[b] && o < rows[a];
                    const float want = in ? dot(n, w + o * wb, x + t * xb) : -1.0f;
                    if (memcmp(&want, &y[t * LDY + o], 4) != 0)
                        fail_msg("%s: panel gemm type %u n %lld rows %lld toks %lld: y[%lld][%lld] %a vs %a", k->isa,
                                 (unsigned)wt, (long long)n, (long long)rows[a], (long long)toks[b], (long long)t,
                                 (long long)o, y[t * LDY + o], want);
                }
        }
    free(f); free(y); free(wbuf); free(x);
}

static void check_panel_gemm(const tensor_kernels *k, uint32_t wt, tensor_gemm_fn gemm, tensor_vec_dot_fn dot,
                             int64_t n, const int64_t *rows, int nrows, rng *r) {
    check_panel_gemm_toks(k, wt, gemm, dot, n, rows, nrows, panel_toks, r);
}

static void test_gemm_panel(void **state) {
    (void)state;
    rng r = { 11 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const tensor_kernels *s = tab[0];
    const int64_t rows[] = { 1, 7, 15, 16, 17, 34 }, few[] = { 3 };
    /* Q4_K, Q6_K: 32-row tiles (two panels) where both fit the buffer, 16-row ones after them
     * and where only one fits */
    const int64_t rows_k[] = { 1, 16, 17, 31, 32, 33, 34 }, many[] = { 34 }, long_toks[] = { 5, 64, 70, 0 };
    int checked = 0;
    for (int k = 0; k < nt; k++) {
        if (tab[k]->gemm_q4_K_rp) {
            check_panel_gemm(tab[k], GGUF_T_Q4_K, tab[k]->gemm_q4_K_rp, s->dot_q4_K_rp, 512, rows_k, 7, &r);
            check_panel_gemm(tab[k], GGUF_T_Q4_K, tab[k]->gemm_q4_K_rp, s->dot_q4_K_rp, 256 * 30, many, 1, &r);
            check_panel_gemm(tab[k], GGUF_T_Q4_K, tab[k]->gemm_q4_K_rp, s->dot_q4_K_rp, 256 * 49, few, 1, &r);
            /* past the panel buffer: pieces (of 24 blocks and one here), two panels and one,
             * the chains parked across pieces for 64 tokens at a time; Q6_K alike below */
            check_panel_gemm_toks(tab[k], GGUF_T_Q4_K, tab[k]->gemm_q4_K_rp, s->dot_q4_K_rp, 256 * 49, rows_k + 3, 3,
                                  long_toks, &r);
            checked++;
        }
        if (tab[k]->gemm[GGUF_T_Q6_K]) {
            check_panel_gemm(tab[k], GGUF_T_Q6_K, tab[k]->gemm[GGUF_T_Q6_K], s->vec_dot[GGUF_T_Q6_K], 768, rows_k, 7, &r);
            check_panel_gemm(tab[k], GGUF_T_Q6_K, tab[k]->gemm[GGUF_T_Q6_K], s->vec_dot[GGUF_T_Q6_K], 256 * 30, many, 1, &r);
            check_panel_gemm(tab[k], GGUF_T_Q6_K, tab[k]->gemm[GGUF_T_Q6_K], s->vec_dot[GGUF_T_Q6_K], 256 * 49, few, 1, &r);
            check_panel_gemm_toks(tab[k], GGUF_T_Q6_K, tab[k]->gemm[GGUF_T_Q6_K], s->vec_dot[GGUF_T_Q6_K], 256 * 49,
                                  rows_k + 3, 3, long_toks, &r);
            checked++;
        }
        if (tab[k]->gemm[GGUF_T_Q4_0]) {   /* 4-row tiles; an even and an odd block count; past the panel */
            const tensor_vec_dot_fn dot = tab[k]->vec_dot[GGUF_T_Q4_0];
            check_panel_gemm(tab[k], GGUF_T_Q4_0, tab[k]->gemm[GGUF_T_Q4_0], dot, 1024, rows, 6, &r);
            check_panel_gemm(tab[k], GGUF_T_Q4_0, tab[k]->gemm[GGUF_T_Q4_0], dot, 32 * 97, rows, 6, &r);
            check_panel_gemm(tab[k], GGUF_T_Q4_0, tab[k]->gemm[GGUF_T_Q4_0], dot, 32 * 513, few, 1, &r);
            /* AVX-512: groups of 16 rows from 8 tokens on (the rows after them in tiles), the
             * even and odd chains parked across 48-token blocks and 32-pair chunks; one block
             * (no pairs), one pair, an odd last block; past the panel (128 pairs): pieces */
            const int64_t grows[] = { 16, 33 }, gtoks[] = { 8, 23, 49, 0 };
            const int64_t gns[] = { 32, 64, 32 * 97, 32 * 258, 32 * 513 };
            for (int i = 0; i < 5; i++)
                check_panel_gemm_toks(tab[k], GGUF_T_Q4_0, tab[k]->gemm[GGUF_T_Q4_0], dot, gns[i], grows, 2, gtoks, &r);
            checked++;
        }
        if (tab[k]->gemm[GGUF_T_Q8_0]) {   /* token tiles and their tails, accumulators parked
                                              * across pieces of blocks; AVX2 at 257 blocks: row
                                              * blocks of 16 (33 rows: three) and chunks of 56
                                              * tokens (64, 65: two) */
            const int64_t grows[] = { 16, 33 }, gtoks[] = { 23, 24, 25, 26, 31, 64, 65, 0 };
            const tensor_vec_dot_fn dot = s->vec_dot[GGUF_T_Q8_0];
            check_panel_gemm_toks(tab[k], GGUF_T_Q8_0, tab[k]->gemm[GGUF_T_Q8_0], dot, 32 * 56, grows, 2, gtoks, &r);
            check_panel_gemm_toks(tab[k], GGUF_T_Q8_0, tab[k]->gemm[GGUF_T_Q8_0], dot, 32 * 13, grows, 2, gtoks, &r);
            check_panel_gemm_toks(tab[k], GGUF_T_Q8_0, tab[k]->gemm[GGUF_T_Q8_0], dot, 32 * 257, grows, 2, gtoks + 1, &r);
            checked++;
        }
        if (tab[k]->gemm[GGUF_T_Q5_K]) {   /* that table's dot (the scalar one sums in double) */
            const tensor_vec_dot_fn dot = tab[k]->vec_dot[GGUF_T_Q5_K];
            check_panel_gemm(tab[k], GGUF_T_Q5_K, tab[k]->gemm[GGUF_T_Q5_K], dot, 768, rows, 6, &r);
            /* 25 blocks: panels of 14 rows; 65: past the aligned activation buffer; 193: too
             * long for the panel buffer */
            check_panel_gemm(tab[k], GGUF_T_Q5_K, tab[k]->gemm[GGUF_T_Q5_K], dot, 256 * 25, rows, 6, &r);
            check_panel_gemm(tab[k], GGUF_T_Q5_K, tab[k]->gemm[GGUF_T_Q5_K], dot, 256 * 65, few, 1, &r);
            check_panel_gemm(tab[k], GGUF_T_Q5_K, tab[k]->gemm[GGUF_T_Q5_K], dot, 256 * 193, few, 1, &r);
            check_panel_gemm_toks(tab[k], GGUF_T_Q5_K, tab[k]->gemm[GGUF_T_Q5_K], dot, 256 * 49, few, 1, long_toks, &r);
            checked++;
        }
        if (tab[k]->gemm[GGUF_T_IQ4_XS]) {   /* that table's dot; 4-row tiles and their tails, token
                                                * tiles, chunks of 64 tokens (70: two) */
            const tensor_vec_dot_fn dot = tab[k]->vec_dot[GGUF_T_IQ4_XS];
            check_panel_gemm(tab[k], GGUF_T_IQ4_XS, tab[k]->gemm[GGUF_T_IQ4_XS], dot, 256 * 3, rows, 6, &r);
            check_panel_gemm_toks(tab[k], GGUF_T_IQ4_XS, tab[k]->gemm[GGUF_T_IQ4_XS], dot, 256 * 12, rows + 1, 2,
                                  long_toks, &r);
            checked++;
        }
    }
    /* the AVX-512 and the AVX2 tables have all six (gemm_*_avx2.c and dot_avx2.c for the latter) */
    if (tensor_kernels_avx2()) {
        assert_non_null(tensor_kernels_avx2()->gemm[GGUF_T_Q8_0]);
        assert_non_null(tensor_kernels_avx2()->gemm_q4_K_rp);
        assert_non_null(tensor_kernels_avx2()->gemm[GGUF_T_Q6_K]);
        assert_non_null(tensor_kernels_avx2()->gemm[GGUF_T_Q5_K]);
        assert_non_null(tensor_kernels_avx2()->gemm[GGUF_T_Q4_0]);
        assert_non_null(tensor_kernels_avx2()->gemm[GGUF_T_IQ4_XS]);
    }
    if (tensor_kernels_avx512()) assert_int_equal(checked, 12);
}

/* ---- f16 helpers ------------------------------------------------------------------------------ */

static void test_f32_to_f16_row(void **state) {
    (void)state;
    const int64_t n = 1 << 20;
    float *x = xalloc(n * 4);
    uint16_t *ref = xalloc(n * 2), *got = xalloc(n * 2 + 2);
    const uint32_t special[] = { 0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                 0x7f800001u, 0x477fefffu, 0x477ff000u, 0x33000000u, 0x33000001u,
                                 0x387fc000u, 0x38800000u, 0x00000001u, 0x7f7fffffu, 0xb3800000u };
    for (int64_t i = 0; i < n; i++) {
        const uint32_t u = i < 16 ? special[i] : (uint32_t)(i * 4099u + (uint32_t)(i >> 7) * 2654435761u);
        memcpy(&x[i], &u, 4);
    }
    for (int64_t i = 0; i < n; i++) ref[i] = rt_f32_to_f16(x[i]);
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    for (int k = 0; k < nt; k++) {
        for (int64_t len = n - 13; len <= n; len += 13) {
            tab[k]->f32_to_f16_row(x, got + 1, len);
            if (memcmp(ref, got + 1, (size_t)len * 2) != 0) fail_msg("%s: f32_to_f16_row differs", tab[k]->isa);
        }
    }
    /* scale_round_f16: the scaled value rounded to F16 and back, the tail too, nothing past n */
    enum { NS = 4099 };
    float *want = xalloc((NS + 1) * 4), *y = xalloc((NS + 1) * 4);
    const float scales[] = { 1.0f, 0.37f, 3e-5f, 65504.0f };
    for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++)
        for (int64_t len = NS - 17; len <= NS; len += 17) {
            for (int64_t i = 0; i < len; i++) want[i] = rt_f16_to_f32(rt_f32_to_f16(x[i < 16 ? i : i * 97] * scales[si]));
            want[len] = 12345.0f;
            for (int k = 0; k < nt; k++) {
                for (int64_t i = 0; i < len; i++) y[i] = x[i < 16 ? i : i * 97];
                y[len] = 12345.0f;
                tab[k]->scale_round_f16(len, y, scales[si]);
                if (memcmp(want, y, (size_t)(len + 1) * 4) != 0)
                    fail_msg("%s: scale_round_f16 len %lld scale %g differs", tab[k]->isa, (long long)len, scales[si]);
            }
        }
    free(want); free(y);
    free(x); free(ref); free(got);
}

static void test_f16_helpers(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 5 };
    const int64_t lens[] = { 0, 1, 5, 16, 17, 63, 64, 65, 127, 1000, 4099 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        float *a = xalloc((size_t)n * 4 + 4), *b = xalloc((size_t)n * 4 + 4);
        float *y0 = xalloc((size_t)n * 4 + 4), *y1 = xalloc((size_t)n * 4 + 4);
        uint16_t *h = xalloc((size_t)n * 2 + 2);
        fill_rough(&r, a, n);
        fill_rough(&r, b, n);
        fill_rough(&r, y0, n);
        for (int64_t i = 0; i < n; i++) h[i] = rt_f32_to_f16(a[i]);
        double mag16 = 1e-30, mag32 = 1e-30;
        for (int64_t i = 0; i < n; i++) {
            mag16 += fabs((double)rt_f16_to_f32(h[i]) * b[i]);
            mag32 += fabs((double)a[i] * b[i]);
        }
        const float ref16 = tab[0]->dot_f16_f32(n, h, b), ref32 = tab[0]->dot_f32(n, a, b);
        double exact16 = 0;
        for (int64_t i = 0; i < n; i++) exact16 += (double)rt_f16_to_f32(h[i]) * b[i];
        if (fabs(ref16 - exact16) > DOT_REL * mag16) fail_msg("scalar dot_f16_f32 n %lld: %.9g vs %.9g", (long long)n, ref16, exact16);
        const float alpha = 0.37f;
        memcpy(y1, y0, (size_t)n * 4);
        tab[0]->axpy_f16(n, alpha, h, y0);
        for (int64_t i = 0; i < n; i++)
            assert_true(fabs(y0[i] - (y1[i] + (double)alpha * rt_f16_to_f32(h[i]))) <= 1e-6 * (1 + fabs(y0[i])));
        for (int k = 1; k < nt; k++) {
            /* dot_f16_f32 follows one lane order (ggml's) in every table: identical bits */
            const float got16 = tab[k]->dot_f16_f32(n, h, b);
            if (memcmp(&got16, &ref16, 4) != 0) fail_msg("%s: dot_f16_f32 n %lld not identical", tab[k]->isa, (long long)n);
            if (fabs(tab[k]->dot_f32(n, a, b) - ref32) > DOT_REL * mag32) fail_msg("%s: dot_f32 n %lld", tab[k]->isa, (long long)n);
            float *y2 = xalloc((size_t)n * 4 + 4);
            memcpy(y2, y1, (size_t)n * 4);
            tab[k]->axpy_f16(n, alpha, h, y2);
            if (memcmp(y0, y2, (size_t)n * 4) != 0) fail_msg("%s: axpy_f16 not identical, n %lld", tab[k]->isa, (long long)n);
            free(y2);
        }
        free(a); free(b); free(y0); free(y1); free(h);
    }
}

/* ---- the vectorised exp ---------------------------------------------------------------------- */

/* {input, output} bits of ggml's AVX-512 ggml_v_expf (llama.cpp's CPU backend, run on these
 * inputs) where libm's correctly rounded expf gives another float: every table must give these. */
static const uint32_t k_vexp_anchor[][2] = {
    { 0xc2be48d7u, 0x00000d59u }, { 0xc2afcccdu, 0x0048dcc9u }, { 0xc1a00000u, 0x310da432u },
    { 0xc0533333u, 0x3d1712cdu }, { 0xbf333378u, 0x3efe402au }, { 0x3c23d747u, 0x3f814954u },
    { 0x3fd9999au, 0x40af2a95u }, { 0x41300001u, 0x4769e232u }, { 0x42280000u, 0x5dc1192cu },
    { 0x42b10000u, 0x7f4cdcc3u },
};

static float table_exp1(const tensor_kernels *k, float x) {
    float y;
    k->exp_f32(1, &x, &y);
    return y;
}

static bool same_float(float a, float b) { return (isnan(a) && isnan(b)) || memcmp(&a, &b, 4) == 0; }

/* Specials, then bit patterns strided over all 2^32, then values in the useful range. */
static void fill_exp_inputs(float *x, int64_t n) {
    const uint32_t special[] = { 0, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u,
                                 0x00000001u, 0x80000001u, 0x007fffffu, 0x7f7fffffu, 0xff7fffffu,
                                 0x42b17218u, 0x42b17217u, 0xc2cff1b5u, 0xc2cff1b4u, 0xc2aeac50u,
                                 0xc2aeac4fu, 0x43050000u, 0xc3050000u, 0x4b400000u, 0xcb400000u };
    rng r = { 11 };
    const int64_t ns = (int64_t)(sizeof special / sizeof special[0]);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = i < ns ? special[i] : (uint32_t)i * 2654435761u;
        memcpy(&x[i], &u, 4);
        if (i >= n / 2) x[i] = (float)(rng_unif(&r) * 200.0 - 110.0);
    }
}

static void test_vexp(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    const int64_t n = (1 << 18) + 13;
    float *x = xalloc((size_t)n * 4), *g = xalloc((size_t)n * 4);
    float *ref[3], *got = xalloc((size_t)n * 4 + 4);
    for (int f = 0; f < 3; f++) ref[f] = xalloc((size_t)n * 4);
    fill_exp_inputs(x, n);
    rng r = { 12 };
    fill_gauss(&r, g, n);
    tab[0]->exp_f32(n, x, ref[0]);
    tab[0]->silu_f32(n, x, ref[1]);
    tab[0]->swiglu_f32(n, x, g, ref[2]);
    for (int64_t i = 0; i < n; i++) {   /* the algorithm: close to exp, 0 / inf outside */
        const double e = exp((double)x[i]);
        const float v = ref[0][i];
        if (isnan(x[i])) continue;   /* checked below */
        if (x[i] >= 88.73f && !isinf(v)) fail_msg("exp_f32(%a) = %a, not inf", x[i], v);
        if (x[i] >= 88.72f) continue;
        /* 2.5 ulp: the worst case over all floats is 2.24 ulp (at -0x1.238b92p+2); subnormal
         * results: two units of 2^-149 (the polynomial's error, then one rounding) */
        const double tol = e < 0x1p-126 ? 0x1p-148 : 2.5 * ldexp(1.0, ilogb(e) - 23);
        if (fabs(v - e) > tol) fail_msg("exp_f32(%a) = %a, exp %a", x[i], v, e);
        if (!same_float(ref[1][i], x[i] / (1.0f + table_exp1(tab[0], -x[i])))) fail_msg("silu_f32(%a)", x[i]);
    }
    assert_true(ref[0][0] == 1.0f && ref[0][1] == 1.0f && isinf(ref[0][2]) && ref[0][3] == 0.0f);
    assert_true(isnan(ref[0][4]) && isnan(ref[0][5]) && isinf(ref[0][9]) && ref[0][10] == 0.0f);
    for (int k = 0; k < nt; k++) {
        for (size_t a = 0; a < sizeof k_vexp_anchor / sizeof k_vexp_anchor[0]; a++) {
            float in, out;
            memcpy(&in, &k_vexp_anchor[a][0], 4);
            tab[k]->exp_f32(1, &in, &out);
            if (memcmp(&out, &k_vexp_anchor[a][1], 4) != 0) fail_msg("%s: exp(%a) = %a, ggml's differs", tab[k]->isa, in, out);
        }
        for (int64_t len = n - 9; len <= n; len += 3) {   /* SIMD tails; odd addresses */
            for (int f = 0; f < 3; f++) {
                if (f == 0) tab[k]->exp_f32(len, x, got + 1);
                if (f == 1) tab[k]->silu_f32(len, x, got + 1);
                if (f == 2) tab[k]->swiglu_f32(len, x, g, got + 1);
                for (int64_t i = 0; i < len; i++)
                    if (!same_float(got[1 + i], ref[f][i])) fail_msg("%s: kernel %d len %lld [%lld] %a: %a vs %a", tab[k]->isa, f, (long long)len, (long long)i, x[i], got[1 + i], ref[f][i]);
            }
        }
        memcpy(got, x, (size_t)n * 4);   /* in place */
        tab[k]->swiglu_f32(n, got, g, got);
        for (int64_t i = 0; i < n; i++)
            if (!same_float(got[i], ref[2][i])) fail_msg("%s: swiglu_f32 in place [%lld]", tab[k]->isa, (long long)i);
    }
    free(x); free(g); free(got);
    for (int f = 0; f < 3; f++) free(ref[f]);
}

/* ---- BF16 dot -------------------------------------------------------------------------------- */

/* The tables, and on an AVX-512 CPU that table with vdpbf16ps emulated (emu: what a CPU
 * without AVX512_BF16 runs), in tab[0..return). */
static int bf16_tables(const tensor_kernels *tab[4], tensor_kernels *emu) {
    int nt = get_tables(tab);
    if (tensor_kernels_avx512()) {
        *emu = *tensor_kernels_avx512();
        rt_fill_bf16_avx512(emu, false);
        tab[nt++] = emu;
    }
    return nt;
}

/* Every table (and the AVX-512 emulation of vdpbf16ps, whichever the CPU uses) gives the bits
 * of the scalar reference, which follows ggml's vdpbf16ps order; inputs with subnormals,
 * signed zeros and large spreads exercise the flush-to-zero rules. */
static void test_bf16_dot(void **state) {
    (void)state;
    const tensor_kernels *tab[4];
    tensor_kernels emu;
    const int nt = bf16_tables(tab, &emu);
    rng r = { 21 };
    const int64_t lens[] = { 32, 64, 256, 4096, 48, 100 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        uint16_t *a = xalloc((size_t)n * 2 + 2), *b = xalloc((size_t)n * 2 + 2);
        for (int rep = 0; rep < 200; rep++) {
            for (int64_t i = 0; i < n; i++) {
                const uint64_t u = rng_u64(&r);
                const int kind = (int)(u % 8);
                float v = rng_gauss(&r) * (kind == 0 ? 0x1p-60f : kind == 1 ? 0x1p40f : 1.0f);
                a[i + 1] = rt_f32_to_bf16(v);
                b[i] = (uint16_t)(kind == 2 ? (u >> 8) & 0x807f : rt_f32_to_bf16(rng_gauss(&r) * (kind == 3 ? 0x1p-70f : 1.0f)));
            }
            const float ref = tab[0]->vec_dot[GGUF_T_BF16](n, a + 1, b);
            for (int k = 1; k < nt; k++) {
                const float got = tab[k]->vec_dot[GGUF_T_BF16](n, a + 1, b);
                if (memcmp(&got, &ref, 4) != 0) fail_msg("%s%s: bf16 dot n %lld: %a vs %a", tab[k]->isa, tab[k] == &emu ? " (emulated)" : "", (long long)n, got, ref);
                float out[4];   /* (test_vec_dot4 checks distinct rows for the active table) */
                if (tab[k]->vec_dot4[GGUF_T_BF16]) {
                    tab[k]->vec_dot4[GGUF_T_BF16](n, a + 1, b, 0, out);
                    for (int j = 0; j < 4; j++)
                        if (memcmp(&out[j], &ref, 4) != 0) fail_msg("%s: bf16 dot4 n %lld lane %d", tab[k]->isa, (long long)n, j);
                }
            }
        }
        free(a); free(b);
    }
}

/* Every table's F32 weight dot takes the AVX-512 table's order (dot_ref.c says why): the
 * scalar table's bits in every table, for every length (blocks of 64, of 16, a tail) and
 * unaligned rows. */
static void test_f32_dot_order(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 31 };
    const int64_t lens[] = { 1, 7, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 200, 256, 1000, 4099 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        float *a = xalloc((size_t)n * 4), *b = xalloc((size_t)n * 4);
        uint8_t *buf = xalloc((size_t)n * 4 + 2);
        for (int rep = 0; rep < 20; rep++) {
            fill_rough(&r, a, n);
            fill_rough(&r, b, n);
            uint8_t *wa = buf + (rep % 2) * 2;   /* a weight row need not be aligned */
            memcpy(wa, a, (size_t)n * 4);
            const float want = tab[0]->vec_dot[GGUF_T_F32](n, wa, b);
            for (int k = 1; k < nt; k++) {
                const float got = tab[k]->vec_dot[GGUF_T_F32](n, wa, b);
                if (memcmp(&want, &got, 4) != 0)
                    fail_msg("%s: f32 dot n %lld: %a vs scalar %a", tab[k]->isa, (long long)n, got, want);
            }
        }
        free(a); free(b); free(buf);
    }
}

/* sumsq_rows: every table's doubles equal the serial sum of each row, bit for bit, on values
 * whose exponents spread over 2^±40 (so the double sums round, and any other order of the
 * additions shows in the bits); row counts around the groups of 16 and 8, lengths with a tail
 * and shorter than one step, strides narrow (grouped) and wide (the reference). */
static void test_sumsq_rows(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    rng r = { 37 };
    enum { R = 41, NMAX = 300 };
    static float x[R * 2 * NMAX];
    for (int i = 0; i < R * 2 * NMAX; i++) x[i] = ldexpf(rng_gauss(&r), (int)(rng_u64(&r) % 81) - 40);
    static const int lens[] = { 3, 8, 37, 128, 256, 300 };
    double want[R], got[R];
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++)
        for (int wide = 0; wide < 2; wide++) {
            const int64_t n = lens[l], st = wide ? 2 * n + 1 : n;
            for (int64_t rows = 1; rows <= R; rows += rows < 18 ? 1 : 7) {
                for (int64_t k = 0; k < rows; k++) {
                    double a = 0.0;
                    for (int64_t i = 0; i < n; i++) a += (double)(x[k * st + i] * x[k * st + i]);
                    want[k] = a;
                }
                for (int t = 0; t < nt; t++) {
                    tab[t]->sumsq_rows(n, x, st, rows, got);
                    for (int64_t k = 0; k < rows; k++)
                        if (memcmp(&want[k], &got[k], sizeof(double)) != 0)
                            fail_msg("%s: sumsq_rows n %lld stride %lld rows %lld: row %lld %a vs %a", tab[t]->isa,
                                     (long long)n, (long long)st, (long long)rows, (long long)k, got[k], want[k]);
                }
            }
        }
}

/* gemm[BF16] against the scalar dot, bit for bit, on test_bf16_dot's kinds of input: rows and
 * tokens of ordinary values (the tiles that skip the flush), of tiny ones whose sums underflow
 * (the tiles that flush), subnormals and mixtures, so one call holds tiles of both kinds; row
 * and token counts around the 3 × 4 tile, rows past one 512-element chunk, and a row too long
 * for the panels (the dot). Every table with the gemm, the emulated AVX-512 one included. */
static void test_bf16_gemm(void **state) {
    (void)state;
    const tensor_kernels *tab[4];
    tensor_kernels emu;
    const int nt = bf16_tables(tab, &emu);
    int checked = 0;
    rng r = { 23 };
    enum { ROWS = 11, TOKS = 7, LDY = 13 };
    const int64_t lens[] = { 32, 96, 1056, 8224 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l];
        uint16_t *w = xalloc((size_t)n * ROWS * 2), *x = xalloc((size_t)n * TOKS * 2);
        for (int64_t i = 0; i < n * ROWS; i++) {
            const int kind = (int)((i / n) % 3), e = (int)(rng_u64(&r) % 8);
            const float v = rng_gauss(&r) * (kind == 0 ? 1.0f : kind == 1 ? 0x1p-60f : e == 0 ? 0x1p-60f : 1.0f);
            w[i] = kind == 2 && e == 1 ? (uint16_t)(rng_u64(&r) & 0x807f) : rt_f32_to_bf16(v);
        }
        for (int64_t i = 0; i < n * TOKS; i++) {
            const int kind = (int)((i / n) % 2), e = (int)(rng_u64(&r) % 8);
            x[i] = kind == 1 && e == 2 ? (uint16_t)(rng_u64(&r) & 0x807f)
                                       : rt_f32_to_bf16(rng_gauss(&r) * (kind == 1 ? 0x1p-70f : 1.0f));
        }
        for (int k = 0; k < nt; k++) {
            if (!tab[k]->gemm[GGUF_T_BF16]) continue;
            checked += n == lens[0];
            for (int64_t rows = 1; rows <= ROWS; rows += 5)
                for (int64_t toks = 2; toks <= TOKS; toks += 5) {
                    float y[TOKS * LDY];
                    tab[k]->gemm[GGUF_T_BF16](n, w, (size_t)n * 2, rows, x, (size_t)n * 2, toks, y, LDY);
                    for (int64_t t = 0; t < toks; t++)
                        for (int64_t o = 0; o < rows; o++) {
                            const float want = tab[0]->vec_dot[GGUF_T_BF16](n, w + o * n, x + t * n);
                            if (memcmp(&want, &y[t * LDY + o], 4) != 0)
                                fail_msg("%s%s: bf16 gemm n %lld rows %lld toks %lld: y[%lld][%lld] %a vs %a",
                                         tab[k]->isa, tab[k] == &emu ? " (emulated)" : "", (long long)n,
                                         (long long)rows, (long long)toks, (long long)t, (long long)o,
                                         y[t * LDY + o], want);
                        }
                }
        }
        free(w); free(x);
    }
    /* the AVX2 table, and both AVX-512 ones */
    assert_int_equal(checked, (tensor_kernels_avx2() != NULL) + 2 * (tensor_kernels_avx512() != NULL));
}

/* A float-type gemv over 0..max_rows rows of the 16-bit rows at w (ws values apart) against
 * the 16-bit token x equals dot row by row, bit for bit; y past the rows is untouched; the
 * groups in pieces give the same (check_gemv_pieces). `what` names the case. */
enum { GV16_MAX_ROWS = 23 };
static void check_gemv16(tensor_gemv gemv, tensor_vec_dot_fn dot, int64_t n, const uint8_t *w, int64_t ws,
                         const uint16_t *x, rng *r, const char *what) {
    for (int64_t rows = 0; rows <= GV16_MAX_ROWS; rows += rows < 9 ? 1 : 7) {
        float y[GV16_MAX_ROWS + 1];
        for (int o = 0; o <= GV16_MAX_ROWS; o++) y[o] = -7.0f;
        gemv.fn(n, w, (size_t)ws * 2, rows, 0, tensor_gemv_groups(rows, gemv.group), x, y);
        check_gemv_pieces(gemv, n, w, (size_t)ws * 2, x, rows, y, r, what);
        for (int64_t o = 0; o <= GV16_MAX_ROWS; o++) {
            const float want = o < rows ? dot(n, w + 2 * o * ws, x) : -7.0f;
            if (memcmp(&want, &y[o], 4) != 0)
                fail_msg("%s: rows %lld: y[%lld] %a vs %a", what, (long long)rows, (long long)o, y[o], want);
        }
    }
}

/* gemv[BF16] (a single token) against the scalar dot, bit for bit: rows of test_bf16_gemm's
 * kinds (ordinary, tiny, subnormal and mixed) in one call, so its plain-FMA rows and the rows it
 * must compute again both run; an ordinary token, a tiny one (sums that underflow) and one with
 * tiny and subnormal values; row
 * counts around its groups of 4 (every tail), a padded stride at an odd address, and a length
 * that is not a multiple of the dot's block (the dot throughout). Every table with the kernel. */
static void test_bf16_gemv(void **state) {
    (void)state;
    const tensor_kernels *tab[4];
    tensor_kernels emu;
    const int nt = bf16_tables(tab, &emu);
    int checked = 0;
    rng r = { 29 };
    enum { ROWS = GV16_MAX_ROWS, PADW = 3 };
    const int64_t lens[] = { 32, 96, 1056, 8224, 48 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l], ws = n + PADW;   /* in BF16 values */
        uint16_t *buf = xalloc((size_t)ws * ROWS * 2 + 2), *x = xalloc((size_t)n * 3 * 2);
        uint8_t *w = (uint8_t *)buf + 1;   /* rows at an odd address */
        for (int64_t o = 0; o < ROWS; o++)
            for (int64_t i = 0; i < n; i++) {
                const int kind = (int)(o % 4), e = (int)(rng_u64(&r) % 8);
                const float v = rng_gauss(&r) * (kind == 1 ? 0x1p-60f : kind == 2 && e == 0 ? 0x1p-60f : 1.0f);
                const uint16_t h = kind == 2 && e == 1 ? (uint16_t)(rng_u64(&r) & 0x807f) : rt_f32_to_bf16(v);
                memcpy(w + 2 * (o * ws + i), &h, 2);
            }
        for (int64_t i = 0; i < 3 * n; i++) {   /* tokens: ordinary; tiny; ordinary with tiny and subnormal values */
            const int kind = (int)(i / n), e = (int)(rng_u64(&r) % 8);
            x[i] = kind == 2 && e == 2 ? (uint16_t)(rng_u64(&r) & 0x807f)
                                       : rt_f32_to_bf16(rng_gauss(&r) * (kind == 1 || (kind == 2 && e < 2) ? 0x1p-70f : 1.0f));
        }
        for (int k = 0; k < nt; k++) {
            const tensor_gemv gemv = tab[k]->gemv[GGUF_T_BF16];
            if (!gemv.fn) continue;
            checked += n == lens[0];
            for (int tok = 0; tok < 3; tok++) {
                char what[80];
                snprintf(what, sizeof what, "%s%s bf16 gemv n %lld token %d", tab[k]->isa,
                         tab[k] == &emu ? " (emulated)" : "", (long long)n, tok);
                check_gemv16(gemv, tab[0]->vec_dot[GGUF_T_BF16], n, w, ws, x + tok * n, &r, what);
            }
        }
        free(buf); free(x);
    }
    /* the AVX2 table, the emulated AVX-512 one, and the real one on a CPU without AVX512_BF16 */
    if (tensor_kernels_avx2()) assert_true(checked >= 1 + (tensor_kernels_avx512() != NULL));
}

/* gemv[F16] (a single token) against its table's vec_dot[F16], bit for bit (the F16 dots of
 * the tables differ: the scalar one sums in double): rows of gaussian,
 * tiny (products that underflow) and mixed values with F16 subnormals, against an ordinary
 * token and one with tiny and subnormal values; row counts around its groups (AVX-512: 4, the
 * 0-3 rows left one at a time; AVX2: 2, the odd row left), a padded stride at an odd address, lengths with
 * and without whole 64-element blocks and a masked tail; the groups in pieces too. */
static void test_f16_gemv(void **state) {
    (void)state;
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    int checked = 0;
    rng r = { 31 };
    enum { ROWS = GV16_MAX_ROWS, PADW = 3 };
    const int64_t lens[] = { 64, 1056, 8224, 48, 71, 5 };
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        const int64_t n = lens[l], ws = n + PADW;   /* in F16 values */
        uint16_t *buf = xalloc((size_t)ws * ROWS * 2 + 2), *x = xalloc((size_t)n * 2 * 2);
        uint8_t *w = (uint8_t *)buf + 1;   /* rows at an odd address */
        for (int64_t o = 0; o < ROWS; o++)
            for (int64_t i = 0; i < n; i++) {
                const int kind = (int)(o % 3), e = (int)(rng_u64(&r) % 8);
                const uint16_t h = kind == 2 && e == 0 ? (uint16_t)(rng_u64(&r) & 0x83ff)   /* subnormal or zero */
                                                       : rt_f32_to_f16(rng_gauss(&r) * (kind == 1 ? 0x1p-12f : 1.0f));
                memcpy(w + 2 * (o * ws + i), &h, 2);
            }
        for (int64_t i = 0; i < 2 * n; i++) {   /* tokens: ordinary; with tiny and subnormal values */
            const int e = (int)(rng_u64(&r) % 8);
            x[i] = i >= n && e == 0 ? (uint16_t)(rng_u64(&r) & 0x83ff)
                                    : rt_f32_to_f16(rng_gauss(&r) * (i >= n && e == 1 ? 0x1p-12f : 1.0f));
        }
        for (int k = 0; k < nt; k++) {
            const tensor_gemv gemv = tab[k]->gemv[GGUF_T_F16];
            if (!gemv.fn) continue;
            checked += n == lens[0];
            for (int tok = 0; tok < 2; tok++) {
                char what[64];
                snprintf(what, sizeof what, "%s f16 gemv n %lld token %d", tab[k]->isa, (long long)n, tok);
                check_gemv16(gemv, tab[k]->vec_dot[GGUF_T_F16], n, w, ws, x + tok * n, &r, what);
            }
        }
        free(buf); free(x);
    }
    assert_int_equal(checked, (tensor_kernels_avx2() != NULL) + (tensor_kernels_avx512() != NULL));
}

/* ---- matmul ---------------------------------------------------------------------------------- */

typedef struct mm_case {
    uint32_t wt;
    int64_t  n_in, n_out, n_tok, ldy;
    uint8_t *W;
    float   *X;
} mm_case;

static void mm_run(const mm_case *c, const tensor_kernels *k, tp_pool *pool, int64_t t0, int64_t nt, float *Y) {
    const size_t sb = tensor_matmul_scratch_bytes(c->wt, c->n_in, nt);
    assert_true(sb > 0);
    void *scratch = rc_alloc_aligned(sb);
    assert_non_null(scratch);
    tensor_matmul(pool, k, c->wt, c->W, c->n_in, c->n_out, c->X + t0 * c->n_in, nt, Y + t0 * c->ldy, c->ldy, scratch);
    rc_free_aligned(scratch);
}

/* Y of every (table, pool, batch split) equals the one-token single-thread result and each
 * element equals vec_dot; the result is close to the float reference. */
static void check_matmul(const mm_case *c, tp_pool *p1, tp_pool *p2, tp_pool *p3, double tol) {
    const tensor_kernels *tab[6];
    int nt = get_tables(tab);
    if (c->wt == GGUF_T_Q8_0)   /* and the tables' Q8_0 block-order twins */
        for (int k = 0, n0 = nt; k < n0; k++) tab[nt++] = tensor_kernels_q8blk(tab[k]);
    const size_t ysz = (size_t)(c->n_tok * c->ldy) * 4;
    float *ya = xalloc(ysz), *yb = xalloc(ysz);
    const uint32_t vt = tensor_vec_dot_type(c->wt);
    const size_t xb = tensor_row_bytes(vt, c->n_in), wb = tensor_row_bytes(c->wt, c->n_in);
    uint8_t *xq = xalloc(xb);
    for (int k = 0; k < nt; k++) {
        memset(ya, 0, ysz);
        memset(yb, 0, ysz);
        for (int64_t t = 0; t < c->n_tok; t++) mm_run(c, tab[k], p1, t, 1, ya);
        mm_run(c, tab[k], p2, 0, c->n_tok, yb);
        if (memcmp(ya, yb, ysz) != 0) fail_msg("%s type %u: batch of %lld on 2 threads != one by one", tab[k]->isa, (unsigned)c->wt, (long long)c->n_tok);
        mm_run(c, tab[k], p3, 0, 2, yb);   /* batches of 2, 3 and 8: every tile width of a kernel */
        mm_run(c, tab[k], p3, 2, 3, yb);
        mm_run(c, tab[k], NULL, 5, c->n_tok - 5, yb);
        if (memcmp(ya, yb, ysz) != 0) fail_msg("%s type %u: 3 threads / no pool differ", tab[k]->isa, (unsigned)c->wt);
        for (int64_t t = 0; t < c->n_tok; t++) {
            tab[k]->from_float[vt](c->X + t * c->n_in, xq, c->n_in);
            for (int64_t o = 0; o < c->n_out; o++) {
                /* BF16 with n_out % 4 != 0, Q4_K with n_out % 8 == 0: ggml's other orders */
                const tensor_vec_dot_fn dot = tensor_matmul_dot(tab[k], c->wt, c->n_out);
                const float v = dot(c->n_in, c->W + o * wb, xq);
                if (memcmp(&v, &ya[t * c->ldy + o], 4) != 0) fail_msg("%s type %u: Y[%lld][%lld] != vec_dot", tab[k]->isa, (unsigned)c->wt, (long long)t, (long long)o);
                float wrow[1024];
                tensor_get_row(tab[k], c->wt, c->W, c->n_in, o, wrow);
                double ref = 0, mag = 1e-30;
                for (int64_t i = 0; i < c->n_in; i++) {
                    ref += (double)wrow[i] * c->X[t * c->n_in + i];
                    mag += fabs((double)wrow[i] * c->X[t * c->n_in + i]);
                }
                if (fabs(v - ref) > tol * mag) fail_msg("%s type %u: Y %.6g vs float reference %.6g (mag %.4g)", tab[k]->isa, (unsigned)c->wt, v, ref, mag);
            }
        }
    }
    free(ya); free(yb); free(xq);
}

static void test_matmul(void **state) {
    (void)state;
    tp_pool *p1 = tp_new(1), *p2 = tp_new(2), *p3 = tp_new(3);
    assert_non_null(p1); assert_non_null(p2); assert_non_null(p3);
    rng r = { 99 };
    /* then BF16 again with 36 rows (tinyBLAS's order), Q4_K with 40 (the repacked order) */
    size_t q4k = 0;
    while (k_types[q4k].type != GGUF_T_Q4_K) q4k++;
    for (size_t i = 0; i <= N_TYPES + 1; i++) {
        const size_t ti = i < N_TYPES ? i : i == N_TYPES ? 2 : q4k;
        const int64_t n_out = i < N_TYPES ? 37 : i == N_TYPES ? 36 : 40;
        mm_case c = { .wt = k_types[ti].type, .n_in = 512, .n_out = n_out, .n_tok = 13, .ldy = 41 };
        float *wf = xalloc((size_t)(c.n_in * c.n_out) * 4);
        c.W = xalloc(tensor_row_bytes(c.wt, c.n_in) * (size_t)c.n_out);
        c.X = xalloc((size_t)(c.n_in * c.n_tok) * 4);
        fill_rough(&r, wf, c.n_in * c.n_out);
        fill_rough(&r, c.X, c.n_in * c.n_tok);
        tensor_kernels_scalar()->from_float[c.wt](wf, c.W, c.n_in * c.n_out);
        assert_int_equal(c.wt, k_types[ti].type);
        check_matmul(&c, p1, p2, p3, k_types[ti].mm_tol);
        free(wf); free(c.W); free(c.X);
    }
    tp_free(p1); tp_free(p2); tp_free(p3);
}

/* One token on 2 and 3 threads (3 on a 2-core machine: one of them is often held back, and
 * the others take the last row groups of its share, matmul.c mm_one_token), many times: every
 * run equals the one-thread result bit for bit, each group computed once, whoever took it.
 * The types with a gemv in some table (Q8_0, Q4_0, Q4_K in the repacked order: n_out % 8 == 0,
 * Q6_K, BF16) and one without (F16: rows by the dot); in each table and its Q8_0 block twin. */
static void test_matmul_one_token_shared(void **state) {
    (void)state;
    tp_pool *p2 = tp_new(2), *p3 = tp_new(3);
    assert_non_null(p2); assert_non_null(p3);
    rng r = { 31 };
    enum { NIN = 512, NOUT = 2056, RUNS = 60 };
    static const uint32_t types[] = { GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_Q4_K, GGUF_T_Q6_K, GGUF_T_BF16, GGUF_T_F16 };
    const tensor_kernels *tab[6];
    int nt = get_tables(tab);
    for (int k = 0, n0 = nt; k < n0; k++) tab[nt++] = tensor_kernels_q8blk(tab[k]);
    float *wf = xalloc((size_t)NIN * NOUT * 4), *x = xalloc(NIN * 4), *ref = xalloc(NOUT * 4), *y = xalloc(NOUT * 4);
    fill_rough(&r, wf, NIN * NOUT);
    fill_rough(&r, x, NIN);
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const uint32_t wt = types[i];
        uint8_t *W = xalloc(tensor_row_bytes(wt, NIN) * NOUT);
        tensor_kernels_scalar()->from_float[wt](wf, W, NIN * NOUT);
        void *scratch = rc_alloc_aligned(tensor_matmul_scratch_bytes(wt, NIN, 1));
        assert_non_null(scratch);
        for (int k = 0; k < nt; k++) {
            tensor_matmul(NULL, tab[k], wt, W, NIN, NOUT, x, 1, ref, NOUT, scratch);
            for (int run = 0; run < RUNS; run++) {
                memset(y, 0x7f, NOUT * 4);
                tensor_matmul(run % 2 ? p2 : p3, tab[k], wt, W, NIN, NOUT, x, 1, y, NOUT, scratch);
                if (memcmp(ref, y, NOUT * 4) != 0)
                    fail_msg("%s%s type %u: one token on %d threads, run %d, differs from one thread", tab[k]->isa,
                             tab[k]->q8_block ? " (block order)" : "", (unsigned)wt, run % 2 ? 2 : 3, run);
            }
        }
        rc_free_aligned(scratch);
        free(W);
    }
    free(wf); free(x); free(ref); free(y);
    tp_free(p2); tp_free(p3);
}

/* tensor_matmul_n: every matrix's Y equals its own tensor_matmul (one thread), whatever the
 * grouping (same vec_dot type run as one job, others after), tokens, threads (70: more than a
 * single token's job has shares, split among its runs of matrices); nothing is written past a
 * matrix's n_out. */
static void test_matmul_n(void **state) {
    (void)state;
    tp_pool *p2 = tp_new(2), *p3 = tp_new(3), *p70 = tp_new(70);
    assert_non_null(p2); assert_non_null(p3); assert_non_null(p70);
    rng r = { 7 };
    enum { NIN = 512, NM = 4, LDY = 800 };
    /* Q8_0 and Q4_0 share Q8_0 activations; F32 does not; the first decides the group */
    static const struct { uint32_t wt[NM]; int64_t n_out[NM]; } sets[] = {
        { { GGUF_T_Q8_0, GGUF_T_Q4_0, GGUF_T_F32, GGUF_T_Q8_0 }, { 700, 350, 20, 40 } },
        { { GGUF_T_F32, GGUF_T_Q8_0, GGUF_T_F32, GGUF_T_Q4_K }, { 30, 720, 17, 600 } },
        { { GGUF_T_Q4_K, GGUF_T_Q4_K, GGUF_T_Q6_K, GGUF_T_Q4_K }, { 640, 8, 300, 37 } },
    };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    float *X = xalloc((size_t)NIN * 9 * 4), *wf = xalloc((size_t)NIN * 720 * 4);
    fill_rough(&r, X, NIN * 9);
    for (size_t si = 0; si < sizeof sets / sizeof sets[0]; si++) {
        tensor_mm mm[NM];
        float *ref[NM];
        size_t sb = 0;
        for (int i = 0; i < NM; i++) {
            const uint32_t wt = sets[si].wt[i];
            const int64_t no = sets[si].n_out[i];
            uint8_t *W = xalloc(tensor_row_bytes(wt, NIN) * (size_t)no);
            fill_rough(&r, wf, NIN * no);
            tensor_kernels_scalar()->from_float[wt](wf, W, NIN * no);
            mm[i] = (tensor_mm){ wt, W, no, xalloc((size_t)9 * LDY * 4), LDY };
            ref[i] = xalloc((size_t)9 * LDY * 4);
            if (tensor_matmul_scratch_bytes(wt, NIN, 9) > sb) sb = tensor_matmul_scratch_bytes(wt, NIN, 9);
        }
        void *scratch = rc_alloc_aligned(sb);
        assert_non_null(scratch);
        for (int k = 0; k < nt; k++)
            for (int64_t ntok = 1; ntok <= 9; ntok += 8)
                for (int n = 1; n <= NM; n++) {
                    for (int i = 0; i < n; i++) {
                        memset(ref[i], 0x7f, (size_t)9 * LDY * 4);
                        memset(mm[i].Y, 0x7f, (size_t)9 * LDY * 4);
                        tensor_matmul(NULL, tab[k], mm[i].wtype, mm[i].W, NIN, mm[i].n_out, X, ntok, ref[i], LDY, scratch);
                    }
                    tensor_matmul_n(n % 2 ? p2 : n == 4 ? p70 : p3, tab[k], mm, n, NIN, X, ntok, scratch);
                    for (int i = 0; i < n; i++)
                        if (memcmp(ref[i], mm[i].Y, (size_t)9 * LDY * 4) != 0)
                            fail_msg("%s set %zu: %d matrices, %lld tokens: matrix %d differs", tab[k]->isa, si, n,
                                     (long long)ntok, i);
                }
        rc_free_aligned(scratch);
        for (int i = 0; i < NM; i++) { free((void *)mm[i].W); free(mm[i].Y); free(ref[i]); }
    }
    free(X); free(wf);
    tp_free(p2); tp_free(p3); tp_free(p70);
}

/* tensor_matmul_grouped: each group's rows equal one tensor_matmul of the group's matrix over
 * those rows (one thread), gathered or not, for one and two matrices, empty groups, group
 * sizes on both sides of the gemm kernels' thresholds (1: the single-token kernels; 5, 15, 16,
 * 30) and more (group, matrix) pairs than one job takes; nothing is written outside the
 * groups' rows. */
static void test_matmul_grouped(void **state) {
    (void)state;
    tp_pool *p2 = tp_new(2), *p3 = tp_new(3);
    assert_non_null(p2); assert_non_null(p3);
    rng r = { 11 };
    enum { NIN = 256, NOUT = 48, NG = 70, NX = 40 };
    static const int64_t sizes[] = { 1, 0, 5, 16, 1, 30, 15, 0, 2 };
    static const uint32_t types[] = { GGUF_T_Q8_0, GGUF_T_Q4_K, GGUF_T_Q6_K, GGUF_T_F16, GGUF_T_F32 };
    const tensor_kernels *tab[3];
    const int nt = get_tables(tab);
    int64_t n_rows = 0;
    tensor_mm_group g[NG];
    for (int i = 0; i < NG; i++) {
        g[i].row0 = n_rows;
        g[i].n_rows = sizes[i % (int)(sizeof sizes / sizeof sizes[0])];
        n_rows += g[i].n_rows;
    }
    int32_t *rows = xalloc((size_t)n_rows * sizeof *rows);
    for (int64_t i = 0; i < n_rows; i++) rows[i] = (int32_t)((i * 7 + 3) % NX);
    float *X = xalloc((size_t)NX * NIN * 4), *Xg = xalloc((size_t)n_rows * NIN * 4), *wf = xalloc((size_t)NIN * NOUT * 4);
    fill_rough(&r, X, NX * NIN);
    for (int64_t i = 0; i < n_rows; i++) memcpy(Xg + i * NIN, X + (int64_t)rows[i] * NIN, NIN * 4);
    float *Y[2] = { xalloc((size_t)n_rows * NOUT * 4), xalloc((size_t)n_rows * NOUT * 4) };
    float *ref = xalloc((size_t)n_rows * NOUT * 4);
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti];
        const size_t mb = tensor_row_bytes(wt, NIN) * NOUT;
        uint8_t *W = xalloc(mb * 4);   /* four matrices: group i takes i % 4 and (i + 1) % 4 */
        for (int m = 0; m < 4; m++) {
            fill_rough(&r, wf, NIN * NOUT);
            tensor_kernels_scalar()->from_float[wt](wf, W + (size_t)m * mb, NIN * NOUT);
        }
        for (int i = 0; i < NG; i++) {
            g[i].W[0] = W + (size_t)(i % 4) * mb;
            g[i].W[1] = W + (size_t)((i + 1) % 4) * mb;
        }
        void *scratch = rc_alloc_aligned(tensor_matmul_scratch_bytes(wt, NIN, n_rows));
        assert_non_null(scratch);
        for (int k = 0; k < nt; k++)
            for (int n_w = 1; n_w <= 2; n_w++)
                for (int gather = 0; gather <= 1; gather++) {
                    memset(Y[0], 0x7f, (size_t)n_rows * NOUT * 4);
                    memset(Y[1], 0x7f, (size_t)n_rows * NOUT * 4);
                    tensor_matmul_grouped(gather ? p2 : p3, tab[k], wt, NIN, NOUT, g, NG, n_w, gather ? X : Xg,
                                          gather ? rows : NULL, n_rows, Y, scratch);
                    for (int w = 0; w < n_w; w++)
                        for (int i = 0; i < NG; i++) {
                            if (!g[i].n_rows) continue;
                            tensor_matmul(NULL, tab[k], wt, g[i].W[w], NIN, NOUT, Xg + g[i].row0 * NIN, g[i].n_rows,
                                          ref, NOUT, scratch);
                            if (memcmp(ref, Y[w] + g[i].row0 * NOUT, (size_t)(g[i].n_rows * NOUT) * 4) != 0)
                                fail_msg("%s %s: matrix %d of group %d (%lld rows, gather %d) differs", tab[k]->isa,
                                         gguf_type_name(wt), w, i, (long long)g[i].n_rows, gather);
                        }
                    if (n_w == 1)   /* the second output untouched */
                        for (int64_t e = 0; e < n_rows * NOUT; e++) assert_int_equal(((uint32_t *)Y[1])[e], 0x7f7f7f7fu);
                }
        rc_free_aligned(scratch);
        free(W);
    }
    free(rows); free(X); free(Xg); free(wf); free(Y[0]); free(Y[1]); free(ref);
    tp_free(p2); tp_free(p3);
}

/* ---- RECUR_ISA ------------------------------------------------------------------------------ */

static int isa_index(const char *isa) {
    return strcmp(isa, "scalar") == 0 ? 10 : strcmp(isa, "avx2") == 0 ? 11 : strcmp(isa, "avx512") == 0 ? 12 : 1;
}

/* Runs this program again with RECUR_ISA=value; its exit status names the active table. */
static int child_isa(const char *value) {
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (value) setenv("RECUR_ISA", value, 1); else unsetenv("RECUR_ISA");
        execl("/proc/self/exe", "test_tensor", "--exit-with-isa", (char *)NULL);
        _exit(2);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    return WEXITSTATUS(st);
}

static void test_isa_override(void **state) {
    (void)state;
    const int best = tensor_kernels_avx512() ? 12 : tensor_kernels_avx2() ? 11 : 10;
    assert_int_equal(child_isa(NULL), best);
    assert_int_equal(child_isa("bogus"), best);
    assert_int_equal(child_isa("avx512"), best);
    assert_int_equal(child_isa("scalar"), 10);
    assert_int_equal(child_isa("avx2"), best >= 11 ? 11 : 10);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--exit-with-isa") == 0) return isa_index(tensor_kernels_active()->isa);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_isa_override),
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_quantize_identical),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_vec_dot4),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_panel),
        cmocka_unit_test(test_f32_to_f16_row),
        cmocka_unit_test(test_f16_helpers),
        cmocka_unit_test(test_vexp),
        cmocka_unit_test(test_bf16_dot),
        cmocka_unit_test(test_bf16_gemm),
        cmocka_unit_test(test_bf16_gemv),
        cmocka_unit_test(test_f16_gemv),
        cmocka_unit_test(test_f32_dot_order),
        cmocka_unit_test(test_sumsq_rows),
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_one_token_shared),
        cmocka_unit_test(test_matmul_n),
        cmocka_unit_test(test_matmul_grouped),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
