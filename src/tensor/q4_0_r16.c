/* q4_0_r16.c — Q4_0 rows packed 16 to a group (tensor.h): packing, unpacking, and the scalar
 * dot over a packed group in the order of the AVX-512 table's Q4_0 dot, the oracle of the SIMD
 * kernel (x86/gemv_q40_avx512.c gemv_q4_0_r16). Only that table packs Q4_0 (its kernel is the
 * one that needs it), so only its order is needed here. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* Block i of the 16 rows at `rows` (stride bytes apart) to or from the group's packed runs at
 * p: the layout (tensor.h) written once for both directions. */
static void q40r16_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *p, bool pack) {
    for (int64_t i = 0; i < n / QK4_0; i++, p += TENSOR_Q40R16_BLOCK)
        for (int r = 0; r < TENSOR_R16_ROWS; r++) {
            uint8_t *a = rows + (size_t)r * stride + (size_t)i * Q4_0_BYTES;
#define MOVE(at_p, at_a, len) (void)(pack ? memcpy(p + (at_p), a + (at_a), len) : memcpy(a + (at_a), p + (at_p), len))
            MOVE(Q40R16_D + 2 * r, 0, 2);
            for (int u = 0; u < 4; u++) MOVE(Q40R16_QS + 64 * u + 4 * r, Q4_0_QS + 4 * u, 4);
#undef MOVE
        }
}

/* (pack only reads `rows`: the cast drops a const it keeps) */
void tensor_q4_0_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    q40r16_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, true);
}

void tensor_q4_0_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    q40r16_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, false);
}

/* The dot's int32 lane l (0..7) of row r's block at h: elements 4l..4l+3, (q - 8) * y. */
static int q40r16_lane(const uint8_t *h, int r, int l, const int8_t *y) {
    const uint8_t *q = h + Q40R16_QS + 64 * (l % 4) + 4 * r;
    int s = 0;
    for (int j = 0; j < 4; j++) s += ((l < 4 ? q[j] & 0xF : q[j] >> 4) - 8) * y[4 * l + j];
    return s;
}

float rt_dot_q4_0_r16(int64_t n, const void *group, int r, const void *x) {
    const uint8_t *g = group, *b = x;
    const int64_t nb = n / QK4_0;
    float acc[16] = { 0 };
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2)
        for (int k = 0; k < 2; k++) {
            const uint8_t *h = g + (size_t)(i + k) * TENSOR_Q40R16_BLOCK, *bk = b + (size_t)(i + k) * Q8_0_BYTES;
            const float d = rd_f16(h + Q40R16_D + 2 * r) * rd_f16(bk);
            for (int l = 0; l < 8; l++)
                acc[8 * k + l] = fmaf(d, (float)q40r16_lane(h, r, l, (const int8_t *)(bk + Q8_0_QS)), acc[8 * k + l]);
        }
    float v[8];
    for (int l = 0; l < 8; l++) v[l] = acc[l] + acc[l + 8];
    float s = rt_hsum8_ggml(v);
    if (i < nb) {   /* the odd last block: its scaled lanes, then their tree */
        const uint8_t *h = g + (size_t)i * TENSOR_Q40R16_BLOCK, *bk = b + (size_t)i * Q8_0_BYTES;
        const float d = rd_f16(h + Q40R16_D + 2 * r) * rd_f16(bk);
        for (int l = 0; l < 8; l++) v[l] = d * (float)q40r16_lane(h, r, l, (const int8_t *)(bk + Q8_0_QS));
        s += rt_hsum8_ggml(v);
    }
    return s;
}

bool tensor_q4_0_r16_preferred(const tensor_kernels *k) { return k && k->q4_0_r16_native; }
