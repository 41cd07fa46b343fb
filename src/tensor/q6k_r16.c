/* q6k_r16.c — Q6_K rows packed 16 to a group (tensor.h): packing, unpacking (of a group or
 * of one row: an embedding lookup), and the scalar dot and gemv over a packed group, the
 * oracle of the SIMD kernel (x86/gemv_q6k16_avx512.c). The arithmetic is rt_dot_q6_K's, step
 * for step; only where each value's bits are kept differs. */
#include <math.h>
#include <string.h>

#include "tensor/tensor_impl.h"

/* Byte 4r + j of vector c (0..2) of the run (h, u) of a packed block: the layout (tensor.h). */
static inline size_t q6r16_at(int h, int u, int c, int r, int j) {
    return (size_t)Q6R16_Q + (size_t)Q6R16_RUN * (8 * h + u) + 64 * c + 4 * r + j;
}

#define M4 0x0F0F0F0Fu   /* each byte's low nibble */
#define M2 0x03030303u   /* each byte's low two bits (a shift of the word leaves the rest of a
                          * byte's neighbour outside them) */

/* Block i of rows [r0, r1) of the 16 at `rows` (stride bytes apart; row r0 first) to or from
 * the group's packed run at p: the layout (tensor.h) written once for both directions. The
 * four weights 128h + 32c + 4u + j (c = 0..3) of a row share their ql and qh bytes; the four
 * j of them go together, a byte each of 32-bit words (/tmp/s24/pk6.c outside the repo, 4096 x
 * 4096, one thread, beside a CI run: packing 195 -> 598 MB/s, unpacking 191 -> 1285; a value
 * at a time before, ~0.5-1 s of a qwen3-0.6b Q4_K_M load for its 170 MB of Q6_K). */
static void q6r16_move(uint8_t *rows, size_t stride, int64_t n, uint8_t *p, int r0, int r1, bool pack) {
    for (int64_t i = 0; i < n / QK_K; i++, p += TENSOR_Q6R16_BLOCK)
        for (int r = r0; r < r1; r++) {
            uint8_t *a = rows + (size_t)(r - r0) * stride + (size_t)i * Q6_K_BYTES;
#define MOVE(at_p, at_a, len) (void)(pack ? memcpy(p + (at_p), a + (at_a), len) : memcpy(a + (at_a), p + (at_p), len))
            MOVE(Q6R16_D + 2 * r, Q6_K_D, 2);
            for (int k = 0; k < 16; k++) MOVE(Q6R16_SCALES + 16 * k + r, Q6_K_SCALES + k, 1);
#undef MOVE
            for (int h = 0; h < 2; h++)
                for (int u = 0; u < 8; u++) {   /* j = 0..3 side by side, a byte each (SWAR) */
                    uint8_t *ql0 = a + Q6_K_QL + 64 * h + 4 * u, *ql1 = ql0 + 32, *qh = a + Q6_K_QH + 32 * h + 4 * u;
                    uint32_t P[3], v[4];
                    if (pack) {
                        const uint32_t A = rd_u32(ql0), B = rd_u32(ql1), H = rd_u32(qh);
                        v[0] = (A & M4) | (H & M2) << 4;
                        v[1] = (B & M4) | (H >> 2 & M2) << 4;
                        v[2] = (A >> 4 & M4) | (H >> 4 & M2) << 4;
                        v[3] = (B >> 4 & M4) | (H >> 6 & M2) << 4;
                        for (int c = 0; c < 3; c++) wr_u32(p + q6r16_at(h, u, c, r, 0), v[c] | (v[3] >> 2 * c & M2) << 6);
                        continue;
                    }
                    for (int c = 0; c < 3; c++) P[c] = rd_u32(p + q6r16_at(h, u, c, r, 0));
                    for (int c = 0; c < 3; c++) v[c] = P[c] & 0x3F3F3F3Fu;
                    v[3] = (P[0] >> 6 & M2) | (P[1] >> 4 & M2 << 2) | (P[2] >> 2 & M2 << 4);
                    wr_u32(ql0, (v[0] & M4) | (v[2] & M4) << 4);
                    wr_u32(ql1, (v[1] & M4) | (v[3] & M4) << 4);
                    wr_u32(qh, (v[0] >> 4 & M2) | (v[1] >> 4 & M2) << 2 | (v[2] >> 4 & M2) << 4 | (v[3] >> 4 & M2) << 6);
                }
        }
}

/* (pack only reads `rows`: the cast drops a const it keeps) */
void tensor_q6_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst) {
    q6r16_move((uint8_t *)(uintptr_t)src, src_stride, n, dst, 0, TENSOR_R16_ROWS, true);
}

void tensor_q6_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride) {
    q6r16_move(dst, dst_stride, n, (uint8_t *)(uintptr_t)src, 0, TENSOR_R16_ROWS, false);
}

void tensor_q6_K_r16_unpack_row(const void *group, int64_t n, int r, void *dst) {
    q6r16_move(dst, 0, n, (uint8_t *)(uintptr_t)group, r, r + 1, false);
}

float rt_dot_q6_K_r16(int64_t n, const void *group, int r, const void *x) {
    const uint8_t *g = group, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES) {
        const uint8_t *h = g + (size_t)i * TENSOR_Q6R16_BLOCK;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        int sumi = 0;
        for (int hf = 0; hf < 2; hf++)
            for (int sb = 0; sb < 8; sb++) {   /* 16 elements sharing scale 8hf + sb */
                const int part = sb / 2, l0 = 16 * (sb % 2);
                int si = 0;
                for (int l = l0; l < l0 + 16; l++) {
                    int v = 0;   /* the value: part < 3 in its own byte, part 3 two bits in each */
                    for (int c = 0; c < 3; c++) {
                        const uint8_t b = h[q6r16_at(hf, l / 4, c, r, l % 4)];
                        v = part < 3 ? (c == part ? b & 0x3F : v) : v | (b >> 6) << 2 * c;
                    }
                    si += (v - 32) * y[128 * hf + 32 * part + l];
                }
                sumi += (int8_t)h[Q6R16_SCALES + 16 * (8 * hf + sb) + r] * si;
            }
        s = fmaf((float)sumi, rd_f16(h + Q6R16_D + 2 * r) * rd_f32(b), s);
    }
    return s;
}

/* The scalar table's gemv_q6_K_r16: row by row. */
static void gemv_q6_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, int64_t g0, int64_t g1, const void *x,
                          float *y) {
    (void)n_rows;
    rt_gemv_r16_rows(rt_dot_q6_K_r16, n, w, ws, g0, g1, x, y);
}

bool tensor_q6_K_r16_preferred(const tensor_kernels *k) { return k && k->q6_K_r16_native; }

void rt_fill_q6k_r16(tensor_kernels *k) {
    k->gemv_q6_K_r16 = (tensor_gemv){ gemv_q6_K_r16, TENSOR_R16_ROWS, NULL, 0, NULL, 0 };
}
