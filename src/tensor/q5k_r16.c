/* q5k_r16.c — Q5_K rows packed 16 to a group (tensor.h), in both layouts (the AVX-512 table's
 * masks, the AVX2 table's five-byte runs): packing, unpacking, and the scalar dot over a packed
 * group in the order of the AVX-512 and AVX2 tables' Q5_K dot (rt_dot_q5_K_rp), the oracle of
 * the SIMD kernels (x86/gemv_q4k16_avx512.c and x86/gemv_q4k16_avx2.c gemv_q5_K_r16). Only
 * those tables pack Q5_K (their kernels are the ones that need it), so only their order is
 * needed here. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

_Static_assert(Q5R16_D == R16_D && Q5R16_DMIN == R16_DMIN && Q5R16_SCALES == R16_SCALES &&
                   Q5_K_DMIN == Q4_K_DMIN && Q5_K_SCALES == Q4_K_SCALES,
               "rt_r16_k4_move takes Q4_K's places for both");

/* 4 bits (bit e = that of element e) as the bit 0 of 4 bytes, and back: multiplied by
 * 0x204081, byte e's bit lands on bit 21 + e, the other products on bits no two share. */
static uint32_t q5r16_spread4(uint32_t nib) {
    return (nib & 1) | (nib & 2) << 7 | (nib & 4) << 14 | (nib & 8) << 21;
}
static uint32_t q5r16_gather4(uint32_t bytes_bit0) { return (bytes_bit0 * 0x204081u) >> 21 & 0xF; }

/* Block i of the 16 rows at `rows` (stride bytes apart) to or from its packed run at h: the
 * bytes that move whole (d, dmin, scales, qs: Q4_K's packed places, tensor.h), then the fifth
 * bits, regrouped: qh[l] bit b (element l of sub-block b) is bit 4r + l%4 of the mask of
 * sub-block b's elements l - l%4.. (word 2(8(b/2) + l/4) + b%2). A word at a time: unpacking
 * the slabs of a prompt's matmuls (matmul.c mm_dot_r16) takes a whole matrix a call. */
static void q5r16_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *h, bool pack) {
    for (int64_t i = 0; i < n / QK_K; i++, h += TENSOR_Q5R16_BLOCK) {
        uint64_t words[64] = { 0 };
        if (!pack) memcpy(words, h + Q5R16_QH, sizeof words);
        for (int r = 0; r < TENSOR_R16_ROWS; r++) {
            uint8_t *a = rows + (size_t)r * stride + (size_t)i * Q5_K_BYTES;
            rt_r16_k4_move(a, h, r, Q5_K_QS, Q5R16_QS, pack);
            for (int u = 0; u < 8; u++) {   /* qh bytes 4u..4u+3 */
                uint32_t q = 0;
                if (pack) memcpy(&q, a + Q5_K_QH + 4 * u, 4);
                for (int b = 0; b < 8; b++) {
                    uint64_t *wd = &words[2 * (8 * (b / 2) + u) + b % 2];
                    if (pack) *wd |= (uint64_t)q5r16_gather4(q >> b & 0x01010101u) << 4 * r;
                    else q |= q5r16_spread4((uint32_t)(*wd >> 4 * r) & 0xF) << b;
                }
                if (!pack) memcpy(a + Q5_K_QH + 4 * u, &q, 4);
            }
        }
        if (pack) memcpy(h + Q5R16_QH, words, sizeof words);
    }
}

/* (pack only reads `rows`: the cast drops a const it keeps) */
void tensor_q5_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    q5r16_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, true);
}

void tensor_q5_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    q5r16_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, false);
}

/* The 5-bit value of row r's element e (0..3) of nibble vector (j, u, half) of the block at h:
 * the low (half 0, sub-block 2j) or high (half 1, sub-block 2j+1) nibble of qs byte 4u + e of
 * chunk j, and its fifth bit from the vector's mask. */
static int q5r16_value(const uint8_t *h, int r, int j, int u, int half, int e) {
    const uint8_t q = h[Q5R16_QS + 64 * (8 * j + u) + 4 * r + e];
    const uint8_t *mask = h + Q5R16_QH + 16 * (8 * j + u) + 8 * half;
    const int bit = (mask[(4 * r + e) / 8] >> ((4 * r + e) % 8)) & 1;
    return (half ? q >> 4 : q & 0xF) | bit << 4;
}

/* The five-byte layout (tensor.h, after TENSOR_Q5R16_BLOCK): value k (0..7) of lane l of run (j, q,
 * g), for row 8g + l/4, element l%4 of unit 4q + k/2, sub-block 2j + k%2. Values 0-4 are bits
 * 0-4 of bytes P0-P4; values 5-7 are made of their bits 5-7 (15 bits, 5 a value):
 *   v5 = P0[5..7] | P1[5..6] << 3,  v6 = P1[7] | P2[5..7] << 1 | P3[5] << 4,
 *   v7 = P3[6..7] | P4[5..7] << 2. */
static const uint8_t *q5f_run(const uint8_t *h, int r, int j, int u) {
    return h + Q5R16F_Q + 640 * j + 160 * (2 * (u / 4) + r / 8) + 4 * (r % 8);
}

/* The pieces of value k: (byte, bit of the byte, bits, bit of the value), up to three. */
typedef struct { int8_t byte, shift, bits, at; } q5f_piece;
static const q5f_piece q5f_pieces[8][3] = {
    { { 0, 0, 5, 0 } }, { { 1, 0, 5, 0 } }, { { 2, 0, 5, 0 } }, { { 3, 0, 5, 0 } }, { { 4, 0, 5, 0 } },
    { { 0, 5, 3, 0 }, { 1, 5, 2, 3 } },
    { { 1, 7, 1, 0 }, { 2, 5, 3, 1 }, { 3, 5, 1, 4 } },
    { { 3, 6, 2, 0 }, { 4, 5, 3, 2 } },
};

static int q5f_get(const uint8_t *h, int r, int j, int u, int half, int e) {
    const uint8_t *p = q5f_run(h, r, j, u) + e;
    const int k = 2 * (u % 4) + half;
    int v = 0;
    for (int i = 0; i < 3 && q5f_pieces[k][i].bits; i++) {
        const q5f_piece c = q5f_pieces[k][i];
        v |= (p[32 * c.byte] >> c.shift & ((1 << c.bits) - 1)) << c.at;
    }
    return v;
}

/* Block i of the 16 rows at `rows` to or from its five-byte runs at h: d, dmin and scales at
 * Q4_K's packed places (rt_r16_k4_move, its qs bytes moved to scratch), then a row's 256 values
 * (v[32b + l]: element l of sub-block b), eight to five bytes by the formulas above (the
 * oracle reads them back by q5f_pieces: two ways to one layout). A chunk of a row at a time
 * (/tmp/s22/pk.c outside the repo, 4096 x 4096, one thread: 390-490 MB/s while another job ran;
 * a value at a time, as the oracle reads, 117 MB/s: too slow for a model's load). */
static void q5f_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *h, bool pack) {
    for (int64_t i = 0; i < n / QK_K; i++, h += TENSOR_Q5R16_BLOCK) {
        uint8_t scratch[R16_QS + 64 * 32];
        if (!pack) {
            memcpy(scratch, h, R16_QS);
            memset(scratch + R16_QS, 0, sizeof scratch - R16_QS);   /* the rows' qs start at 0 */
        }
        for (int r = 0; r < TENSOR_R16_ROWS; r++) {
            uint8_t *a = rows + (size_t)r * stride + (size_t)i * Q5_K_BYTES, *qs = a + Q5_K_QS, *qh = a + Q5_K_QH;
            uint8_t v[QK_K];
            rt_r16_k4_move(a, scratch, r, Q5_K_QS, R16_QS, pack);
            for (int j = 0; pack && j < 4; j++)   /* chunk j: sub-blocks 2j (low nibbles), 2j + 1 */
                for (int e = 0; e < 32; e++) {
                    v[64 * j + e] = (uint8_t)((qs[32 * j + e] & 0xF) | (qh[e] >> 2 * j & 1) << 4);
                    v[64 * j + 32 + e] = (uint8_t)((qs[32 * j + e] >> 4) | (qh[e] >> (2 * j + 1) & 1) << 4);
                }
            for (int j = 0; j < 4; j++)
                for (int q = 0; q < 2; q++)
                    for (int e = 0; e < 4; e++) {
                        uint8_t *p = h + Q5R16F_Q + 640 * j + 160 * (2 * q + r / 8) + 4 * (r % 8) + e;
                        uint8_t *x[8];   /* value k: unit 4q + k/2, sub-block 2j + k%2 */
                        for (int k = 0; k < 8; k++) x[k] = v + 32 * (2 * j + k % 2) + 16 * q + 4 * (k / 2) + e;
                        if (pack) {
                            p[0] = (uint8_t)(*x[0] | *x[5] << 5);
                            p[32] = (uint8_t)(*x[1] | (*x[5] >> 3) << 5 | *x[6] << 7);
                            p[64] = (uint8_t)(*x[2] | (*x[6] >> 1 & 7) << 5);
                            p[96] = (uint8_t)(*x[3] | (*x[6] >> 4) << 5 | *x[7] << 6);
                            p[128] = (uint8_t)(*x[4] | (*x[7] >> 2) << 5);
                        } else {
                            for (int k = 0; k < 5; k++) *x[k] = p[32 * k] & 0x1F;
                            *x[5] = (uint8_t)(p[0] >> 5 | (p[32] >> 5 & 3) << 3);
                            *x[6] = (uint8_t)(p[32] >> 7 | (p[64] >> 5) << 1 | (p[96] >> 5 & 1) << 4);
                            *x[7] = (uint8_t)(p[96] >> 6 | (p[128] >> 5) << 2);
                        }
                    }
            if (!pack) memset(qh, 0, QK_K / 8);
            for (int j = 0; !pack && j < 4; j++)
                for (int e = 0; e < 32; e++) {
                    qs[32 * j + e] = (uint8_t)((v[64 * j + e] & 0xF) | (v[64 * j + 32 + e] & 0xF) << 4);
                    qh[e] |= (uint8_t)((v[64 * j + e] >> 4) << 2 * j | (v[64 * j + 32 + e] >> 4) << (2 * j + 1));
                }
        }
        if (pack) memcpy(h, scratch, R16_QS);
    }
}

void tensor_q5_K_r16f_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    q5f_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, true);
}

void tensor_q5_K_r16f_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    q5f_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, false);
}

/* rt_dot_q5_K_rp over the packed bytes: per chunk j the exact sum sc[2j]·s1 + sc[2j+1]·s2 and
 * the exact min sum, one fma each into acc and accm; acc − accm. value: the layout's. */
static float q5r16_dot(int (*value)(const uint8_t *, int, int, int, int, int), int64_t n, const void *group, int r,
                       const void *x) {
    const uint8_t *g = group, *b = x;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES) {
        const uint8_t *h = g + (size_t)i * TENSOR_Q5R16_BLOCK;
        uint8_t sc[8], m[8];
        float d, dmin;
        rt_r16_k4_row(h, r, rd_f32(b), sc, m, &d, &dmin);
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        for (int j = 0; j < 4; j++, y += 64) {
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += value(h, r, j, l / 4, 0, l % 4) * y[l];
                s2 += value(h, r, j, l / 4, 1, l % 4) * y[l + 32];
            }
            acc = fmaf((float)(sc[2 * j] * s1 + sc[2 * j + 1] * s2), d, acc);
            accm = fmaf((float)rt_q4_K_rp_min(b, m, j), dmin, accm);
        }
    }
    return acc - accm;
}

float rt_dot_q5_K_r16(int64_t n, const void *group, int r, const void *x) {
    return q5r16_dot(q5r16_value, n, group, r, x);
}

float rt_dot_q5_K_r16f(int64_t n, const void *group, int r, const void *x) {
    return q5r16_dot(q5f_get, n, group, r, x);
}

bool tensor_q5_K_r16_preferred(const tensor_kernels *k) { return k && k->q5_K_r16_native; }
