/* test_tensor_layout.c — hand-made blocks of every type decode to the values FORMATS.md
 * defines (ggml's layouts), in every kernel table; the activation quantizers give ggml's
 * bytes on hand-picked inputs (ties, sign of the max, zero blocks).
 *
 * Each block type has an independent per-element decoder written from FORMATS.md here
 * (expect_*), and a few literal values worked out by hand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"

static const int8_t kv_iq4[16] = { -127, -104, -83, -65, -49, -35, -22, -10,
                                   1, 13, 25, 38, 53, 69, 89, 113 };

/* Q4_K / Q5_K scale bytes used by both blocks, and their decoded values (by hand). */
static const uint8_t k_scales[12] = { 0x41, 0x82, 0x03, 0xC4, 0x45, 0x06, 0x87, 0x08, 0x21, 0x53, 0x9A, 0xFF };
static const int k_sc[8] = { 1, 2, 3, 4, 17, 35, 10, 63 };
static const int k_m[8] = { 5, 6, 7, 8, 18, 5, 41, 15 };

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Decodes a block with every table and compares with expect[0..n). */
static void check_decode(uint32_t type, const uint8_t *blk, const float *expect, int n) {
    const tensor_kernels *tabs[3] = { tensor_kernels_scalar(), tensor_kernels_avx2(), tensor_kernels_avx512() };
    for (int k = 0; k < 3; k++) {
        if (!tabs[k]) continue;
        float y[256];
        tabs[k]->to_float[type](blk, y, n);
        for (int i = 0; i < n; i++)
            if (y[i] != expect[i])
                fail_msg("%s type %u element %d: %g, expected %g", tabs[k]->isa, (unsigned)type, i, y[i], expect[i]);
    }
}

static void test_q8_0_q4_0(void **state) {
    (void)state;
    uint8_t b[34];
    float e[32];
    put16(b, 0x3800);                                   /* d = 0.5 */
    for (int j = 0; j < 32; j++) { b[2 + j] = (uint8_t)(int8_t)(j - 16); e[j] = 0.5f * (j - 16); }
    check_decode(GGUF_T_Q8_0, b, e, 32);
    assert_true(e[0] == -8.0f && e[31] == 7.5f);

    put16(b, 0x4000);                                   /* d = 2 */
    for (int j = 0; j < 16; j++) {
        b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        e[j] = 2.0f * (j - 8);                          /* low nibbles: elements 0-15 */
        e[j + 16] = 2.0f * (7 - j);                     /* high nibbles: elements 16-31 */
    }
    check_decode(GGUF_T_Q4_0, b, e, 32);
    assert_true(e[0] == -16.0f && e[16] == 14.0f && e[31] == -16.0f);
}

/* Q4_K / Q5_K element e: chunk e/64 uses 32 bytes of qs; sub-block e/32 is the low nibbles
 * (even) or the high ones (odd); the 5th bit of Q5_K is bit (e/32) of qh[e%32]. */
static float expect_k(const uint8_t *qs, const uint8_t *qh, int e, float d, float dmin) {
    const int sub = e / 32, l = e % 32, byte = qs[32 * (e / 64) + l];
    int q = sub % 2 ? byte >> 4 : byte & 0xF;
    if (qh) q += ((qh[l] >> sub) & 1) << 4;
    return d * k_sc[sub] * q - dmin * k_m[sub];
}

static void test_q4_K_q5_K(void **state) {
    (void)state;
    uint8_t b[176];
    float e[256];
    put16(b, 0x3C00);                                   /* d = 1 */
    put16(b + 2, 0x3800);                               /* dmin = 0.5 */
    memcpy(b + 4, k_scales, 12);
    for (int i = 0; i < 128; i++) b[16 + i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < 256; i++) e[i] = expect_k(b + 16, NULL, i, 1.0f, 0.5f);
    check_decode(GGUF_T_Q4_K, b, e, 256);
    /* by hand: qs[0] = 0x0B, qs[3] = 0x7A, qs[64] = 0x4B, qs[96] = 0xEB */
    assert_true(e[0] == 8.5f && e[32] == -3.0f && e[3] == 7.5f && e[35] == 11.0f);
    assert_true(e[128] == 178.0f && e[224] == 874.5f);

    for (int i = 0; i < 32; i++) b[16 + i] = (uint8_t)(i * 13 + 5);           /* qh */
    for (int i = 0; i < 128; i++) b[48 + i] = (uint8_t)(i * 37 + 11);         /* qs */
    for (int i = 0; i < 256; i++) e[i] = expect_k(b + 48, b + 16, i, 1.0f, 0.5f);
    check_decode(GGUF_T_Q5_K, b, e, 256);
    /* qh[0] = 5: element 0 gets +16 (bit 0), element 32 does not (bit 1), element 64 does */
    assert_true(e[0] == 24.5f && e[32] == -3.0f && e[64] == 77.5f);   /* qs[32] = 0xAB */
}

/* Q6_K element e: half h = e/128 uses ql[64h..], qh[32h..]; part p = (e%128)/32 takes the
 * low (p<2) or high nibble of ql[l + 32*(p&1)] and bits 2p..2p+1 of qh[l]; minus 32. */
static float expect_q6(const uint8_t *b, int e, float d) {
    const int h = e / 128, p = (e % 128) / 32, l = e % 32;
    const uint8_t lo = b[64 * h + l + 32 * (p & 1)];
    const int nib = p & 2 ? lo >> 4 : lo & 0xF;
    const int q = (nib | (((b[128 + 32 * h + l] >> (2 * p)) & 3) << 4)) - 32;
    return d * (int8_t)b[192 + e / 16] * q;
}

static void test_q6_K(void **state) {
    (void)state;
    uint8_t b[210];
    float e[256];
    for (int i = 0; i < 128; i++) b[i] = (uint8_t)(i * 29 + 3);
    for (int i = 0; i < 64; i++) b[128 + i] = (uint8_t)(i * 53 + 17);
    for (int k = 0; k < 16; k++) b[192 + k] = (uint8_t)(int8_t)(9 * k - 70);
    put16(b + 208, 0x3400);                             /* d = 0.25 */
    for (int i = 0; i < 256; i++) e[i] = expect_q6(b, i, 0.25f);
    check_decode(GGUF_T_Q6_K, b, e, 256);
    /* ql[0] = 3, qh[0] = 0x11: element 0 = 0.25*-70*(3+16-32), element 64 = 0.25*-34*(0+16-32) */
    assert_true(e[0] == 227.5f && e[64] == 136.0f);
}

static void test_iq4_xs(void **state) {
    (void)state;
    uint8_t b[136];
    float e[256];
    put16(b, 0x3C00);                                   /* d = 1 */
    const uint16_t sh = 0xB1E4;
    put16(b + 2, sh);
    const uint8_t sl[4] = { 0x21, 0x43, 0x65, 0x87 };
    memcpy(b + 4, sl, 4);
    for (int i = 0; i < 128; i++) b[8 + i] = (uint8_t)(i * 11 + 7);
    for (int i = 0; i < 256; i++) {
        const int ib = i / 32, r = i % 32, byte = b[8 + 16 * ib + r % 16];
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
        e[i] = (float)(ls - 32) * kv_iq4[r < 16 ? byte & 0xF : byte >> 4];
    }
    check_decode(GGUF_T_IQ4_XS, b, e, 256);
    /* sub-block 0: ls = 1 -> -31; qs[0] = 7: element 0 -> kv[7] = -10, element 16 -> kv[0] */
    assert_true(e[0] == 310.0f && e[16] == 3937.0f);
    /* sub-block 1: ls = 2 | (1 << 4) = 18 -> -14; qs[16] = 0xB7 -> kv[7] = -10 */
    assert_true(e[32] == 140.0f);
}

/* ---- activation quantizers on hand-picked inputs ----------------------------------------- */

static void test_q8_0_quantize(void **state) {
    (void)state;
    float x[64] = { 127.0f, 2.5f, -2.5f, 0.49999997f, -0.5f, 126.5f };
    for (int j = 6; j < 32; j++) x[j] = (float)(j - 20) * 0.75f;
    /* second block: all zero */
    const tensor_kernels *tabs[3] = { tensor_kernels_scalar(), tensor_kernels_avx2(), tensor_kernels_avx512() };
    for (int k = 0; k < 3; k++) {
        if (!tabs[k]) continue;
        uint8_t b[68];
        tabs[k]->from_float[GGUF_T_Q8_0](x, b, 64);
        uint16_t d;
        memcpy(&d, b, 2);
        assert_int_equal(d, 0x3C00);                    /* amax 127 -> d = 1 */
        const int8_t *q = (const int8_t *)(b + 2);
        assert_int_equal(q[0], 127);
        assert_int_equal(q[1], 2);                      /* ggml x86: half to even */
        assert_int_equal(q[2], -2);
        assert_int_equal(q[3], 0);
        assert_int_equal(q[4], 0);
        assert_int_equal(q[5], 126);
        assert_int_equal(q[6], -10);                    /* (6-20)*0.75 = -10.5 -> -10 */
        assert_int_equal(q[8], -9);
        assert_int_equal(q[10], -8);                    /* -7.5 -> -8 */
        assert_int_equal(q[31], 8);                     /* 8.25 -> 8 */
        memcpy(&d, b + 34, 2);
        assert_int_equal(d, 0);
        for (int j = 0; j < 32; j++) assert_int_equal(b[36 + j], 0);
    }
}

static void test_q8_K_quantize(void **state) {
    (void)state;
    float x[512] = { 0 };
    x[0] = -127.0f; x[1] = 2.5f; x[2] = 3.5f; x[3] = -2.5f; x[5] = 127.0f; x[20] = 1.0f;
    x[256] = 100.0f; x[257] = -40.0f; x[300] = -100.0f;     /* positive max first */
    const tensor_kernels *tabs[3] = { tensor_kernels_scalar(), tensor_kernels_avx2(), tensor_kernels_avx512() };
    for (int k = 0; k < 3; k++) {
        if (!tabs[k]) continue;
        uint8_t b[584];
        tabs[k]->from_float[GGUF_T_Q8_K](x, b, 512);
        float d;
        int16_t bs[16];
        memcpy(&d, b, 4);
        memcpy(bs, b + 260, 32);
        const int8_t *q = (const int8_t *)(b + 4);
        assert_true(d == 1.0f);                         /* max = -127 -> iscale = 1 */
        assert_int_equal(q[0], -127);
        assert_int_equal(q[1], 2);                      /* nearest_int: half to even */
        assert_int_equal(q[2], 4);
        assert_int_equal(q[3], -2);
        assert_int_equal(q[5], 127);
        assert_int_equal(bs[0], -127 + 2 + 4 - 2 + 127);
        assert_int_equal(bs[1], 1);
        const uint8_t *b2 = b + 292;
        memcpy(&d, b2, 4);
        const int8_t *q2 = (const int8_t *)(b2 + 4);
        assert_true(d == 1.0f / (-127.0f / 100.0f));    /* negative d for a positive max */
        assert_int_equal(q2[0], -127);
        assert_int_equal(q2[1], 51);                    /* -1.27 * -40 = 50.8 */
        assert_int_equal(q2[44], 127);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q8_0_q4_0),
        cmocka_unit_test(test_q4_K_q5_K),
        cmocka_unit_test(test_q6_K),
        cmocka_unit_test(test_iq4_xs),
        cmocka_unit_test(test_q8_0_quantize),
        cmocka_unit_test(test_q8_K_quantize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
