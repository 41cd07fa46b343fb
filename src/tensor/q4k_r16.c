/* q4k_r16.c — Q4_K rows packed 16 to a group (tensor.h): packing, unpacking, and the scalar
 * dot and gemv over a packed group, the oracle of the SIMD kernel
 * (x86/gemv_q4k16_avx512.c). The arithmetic is rt_dot_q4_K_rp's, step for step; only the
 * addresses of the bytes differ. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* Block i of the 16 rows at `rows` (stride bytes apart) to or from its packed run at h: the
 * layout (tensor.h) written once for both directions. Inlined with a constant `pack`. */
static inline void r16_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *h, bool pack) {
    for (int64_t i = 0; i < n / QK_K; i++, h += TENSOR_R16_BLOCK)
        for (int r = 0; r < TENSOR_R16_ROWS; r++) {
            rt_r16_k4_move(rows + (size_t)r * stride + (size_t)i * Q4_K_BYTES, h, r, Q4_K_QS, R16_QS, pack);
        }
}

/* (pack only reads `rows`: the cast drops a const it keeps) */
void tensor_q4_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    r16_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, true);
}

void tensor_q4_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    r16_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, false);
}

float rt_dot_q4_K_r16(int64_t n, const void *group, int r, const void *x) {
    const uint8_t *g = group, *b = x;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES) {
        const uint8_t *h = g + (size_t)i * TENSOR_R16_BLOCK;
        uint8_t sc[8], m[8];
        float d, dmin;
        rt_r16_k4_row(h, r, rd_f32(b), sc, m, &d, &dmin);
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        for (int j = 0; j < 4; j++, y += 64) {
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                const uint8_t q = h[R16_QS + 64 * (8 * j + l / 4) + 4 * r + l % 4];
                s1 += (q & 0xF) * y[l];
                s2 += (q >> 4) * y[l + 32];
            }
            acc = fmaf((float)(sc[2 * j] * s1 + sc[2 * j + 1] * s2), d, acc);
            accm = fmaf((float)rt_q4_K_rp_min(b, m, j), dmin, accm);
        }
    }
    return acc - accm;
}

void rt_gemv_r16_rows(rt_dot_r16_fn dot, int64_t n, const void *w, size_t ws, int64_t g0, int64_t g1, const void *x,
                      float *y) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *grp = (const uint8_t *)w + (size_t)g * TENSOR_R16_ROWS * ws;
        for (int r = 0; r < TENSOR_R16_ROWS; r++) y[TENSOR_R16_ROWS * g + r] = dot(n, grp, r, x);
    }
}

/* The scalar table's gemv_q4_K_r16: row by row. */
static void gemv_q4_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                          float *y) {
    (void)n_rows;
    rt_gemv_r16_rows(rt_dot_q4_K_r16, n, w, ws, g0, g1, x, y);
}

bool tensor_q4_K_r16_preferred(const tensor_kernels *k) { return k && k->q4_K_r16_native; }

void rt_fill_q4k_r16(tensor_kernels *k) {
    k->gemv_q4_K_r16 = (tensor_gemv){ gemv_q4_K_r16, TENSOR_R16_ROWS, NULL, 0, NULL, 0 };
}
