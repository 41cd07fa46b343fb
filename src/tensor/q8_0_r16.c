/* q8_0_r16.c — Q8_0 rows packed 16 to a group (tensor.h): packing, unpacking (of a group or
 * of one row: an embedding lookup), and the scalar dots and gemvs over a packed group, the
 * oracles of the SIMD kernel (x86/gemv_q8016_avx512.c), in both Q8_0 orders: ggml's
 * (rt_dot_q8_0) and the block order (rt_dot_q8_0_blk, the q8blk tables). The arithmetic is
 * those dots', step for step; only where each byte sits differs. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* Block i of rows [r0, r1) of the 16 at `rows` (stride bytes apart; row r0 first) to or from
 * the group's packed runs at p: the layout (tensor.h) written once for both directions. */
static void q8r16_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *p, int r0, int r1, bool pack) {
    for (int64_t i = 0; i < n / QK8_0; i++, p += TENSOR_Q8R16_BLOCK)
        for (int r = r0; r < r1; r++) {
            uint8_t *a = rows + (size_t)(r - r0) * stride + (size_t)i * Q8_0_BYTES;
#define MOVE(at_p, at_a, len) (void)(pack ? memcpy(p + (at_p), a + (at_a), len) : memcpy(a + (at_a), p + (at_p), len))
            MOVE(Q8R16_D + 2 * r, 0, 2);
            for (int l = 0; l < QK8_0 / 4; l++) MOVE(Q8R16_QS + 64 * l + 4 * r, Q8_0_QS + 4 * l, 4);
#undef MOVE
        }
}

/* (pack only reads `rows`: the cast drops a const it keeps) */
void tensor_q8_0_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    q8r16_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, 0, TENSOR_R16_ROWS, true);
}

void tensor_q8_0_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    q8r16_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, 0, TENSOR_R16_ROWS, false);
}

void tensor_q8_0_r16_unpack_row(const void *group, int64_t n, int r, void *dst) {
    q8r16_move(dst, 0, n, (uint8_t *)(uintptr_t)group, r, r + 1, false);
}

/* The exact sum of the four products of chunk l (quants 4l..4l+3) of row r's block at h
 * against the activation quants y. */
static int q8r16_chunk(const uint8_t *h, int r, int l, const int8_t *y) {
    const int8_t *q = (const int8_t *)(h + Q8R16_QS + 64 * l + 4 * r);
    int s = 0;
    for (int j = 0; j < 4; j++) s += q[j] * y[4 * l + j];
    return s;
}

float rt_dot_q8_0_r16(int64_t n, const void *group, int r, const void *x) {
    const uint8_t *g = group, *b = x;
    float acc[8] = { 0 };
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES) {
        const uint8_t *h = g + (size_t)i * TENSOR_Q8R16_BLOCK;
        const float d = rd_f16(h + Q8R16_D + 2 * r) * rd_f16(b);
        const int8_t *y = (const int8_t *)(b + Q8_0_QS);
        for (int l = 0; l < 8; l++) acc[l] = fmaf(d, (float)q8r16_chunk(h, r, l, y), acc[l]);
    }
    return rt_hsum8_ggml(acc);
}

float rt_dot_q8_0_blk_r16(int64_t n, const void *group, int r, const void *x) {
    const uint8_t *g = group, *b = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES) {
        const uint8_t *h = g + (size_t)i * TENSOR_Q8R16_BLOCK;
        int32_t s = 0;
        for (int l = 0; l < 8; l++) s += q8r16_chunk(h, r, l, (const int8_t *)(b + Q8_0_QS));
        acc = fmaf(rd_f16(h + Q8R16_D + 2 * r) * rd_f16(b), (float)s, acc);
    }
    return acc;
}

/* The scalar tables' gemv_q8_0_r16, row by row, in each order. */
static void gemv_q8_0_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                          float *y) {
    (void)n_rows;
    rt_gemv_r16_rows(rt_dot_q8_0_r16, n, w, ws, g0, g1, x, y);
}

static void gemv_q8_0_blk_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1,
                              const void *x, float *y) {
    (void)n_rows;
    rt_gemv_r16_rows(rt_dot_q8_0_blk_r16, n, w, ws, g0, g1, x, y);
}

bool tensor_q8_0_r16_preferred(const tensor_kernels *k) { return k && k->q8_0_r16_native && !k->gemv[GGUF_T_Q8_0].tokens; }

void rt_fill_q8_0_r16(tensor_kernels *k) {
    k->gemv_q8_0_r16 =
        (tensor_gemv){ k->q8_block ? gemv_q8_0_blk_r16 : gemv_q8_0_r16, TENSOR_R16_ROWS, NULL, 0, NULL, 0 };
    k->q8_0_r16_native = false;
}
