/* quant_ref.c — scalar dequantizers of every type, and the scalar quantizers of the float
 * types and of the activation types Q8_0 / Q8_K (plus Q4_0, whose reference quantizer is
 * as simple).
 *
 * Contract of every function: n is a multiple of the type's block size; src and dst do not
 * overlap; no alignment is required (multi-byte fields are read with memcpy).
 *
 * The activation quantizers follow ggml's reference quantizers (quantize_row_q8_0_ref,
 * quantize_row_q8_K_ref) operation for operation, because llama.cpp's reference logits were
 * computed with them; the SIMD versions in x86/ must produce identical bytes. */
#include <math.h>

#include "tensor/tensor_impl.h"

/* ---- float types ------------------------------------------------------------------------ */

void rt_to_float_f32(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void rt_to_float_f16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = rd_f16(s + 2 * i);
}

void rt_to_float_bf16(const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = rt_bf16_to_f32(rd_u16(s + 2 * i));
}

void rt_from_float_f32(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void rt_from_float_f16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr_u16(d + 2 * i, rt_f32_to_f16(src[i]));
}

void rt_from_float_bf16(const float *src, void *dst, int64_t n) {
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) wr_u16(d + 2 * i, rt_f32_to_bf16(src[i]));
}

/* ---- Q8_0 / Q4_0 ------------------------------------------------------------------------- */

void rt_to_float_q8_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES, dst += QK8_0) {
        const float d = rd_f16(b);
        const int8_t *qs = (const int8_t *)(b + Q8_0_QS);
        for (int j = 0; j < QK8_0; j++) dst[j] = qs[j] * d;
    }
}

/* ggml's x86 quantize_row_q8_0: d = amax/127 stored as fp16, id = 127/amax (0 when amax is
 * 0; not 1/d), q = x*id rounded to nearest, ties to even (|x*id| <= 127.5, so the 1.5*2^23
 * trick is exact). */
void rt_from_float_q8_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, b += Q8_0_BYTES, src += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) {
            const float v = fabsf(src[j]);
            amax = amax > v ? amax : v;
        }
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        wr_u16(b, rt_f32_to_f16(d));
        int8_t *qs = (int8_t *)(b + Q8_0_QS);
        for (int j = 0; j < QK8_0; j++) qs[j] = (int8_t)rt_nearest_int(src[j] * id);
    }
}

void rt_to_float_q4_0(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, b += Q4_0_BYTES, dst += QK4_0) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + Q4_0_QS;
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = ((qs[j] & 0xF) - 8) * d;
            dst[j + QK4_0 / 2] = ((qs[j] >> 4) - 8) * d;
        }
    }
}

/* ggml's reference: the value of largest magnitude maps to -8; q = min(15, (int)(x/d + 8.5)). */
void rt_from_float_q4_0(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, b += Q4_0_BYTES, src += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(src[j])) { amax = fabsf(src[j]); max = src[j]; }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        wr_u16(b, rt_f32_to_f16(d));
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = (int8_t)(src[j] * id + 8.5f), q1 = (int8_t)(src[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 < 15 ? q0 : 15;
            q1 = q1 < 15 ? q1 : 15;
            b[Q4_0_QS + j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ---- Q8_K -------------------------------------------------------------------------------- */

void rt_to_float_q8_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, dst += QK_K) {
        const float d = rd_f32(b);
        const int8_t *qs = (const int8_t *)(b + Q8_K_QS);
        for (int j = 0; j < QK_K; j++) dst[j] = d * qs[j];
    }
}


/* ggml's quantize_row_q8_K_ref: max = the first value of largest magnitude, iscale =
 * -127/max, q = min(127, rt_nearest_int(iscale*x)), d = 1/iscale, bsums = sums of 16 q's. An
 * all-zero block gets d = 0 and zero qs and bsums. */
void rt_from_float_q8_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q8_K_BYTES, src += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            const float ax = fabsf(src[j]);
            if (ax > amax) { amax = ax; max = src[j]; }
        }
        int8_t *qs = (int8_t *)(b + Q8_K_QS);
        if (amax == 0.0f) {
            memset(b, 0, Q8_K_BYTES);
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            const int v = rt_nearest_int(iscale * src[j]);
            qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) sum += qs[16 * j + l];
            const int16_t s16 = (int16_t)sum;
            memcpy(b + Q8_K_BSUMS + 2 * j, &s16, 2);
        }
        wr_f32(b, 1.0f / iscale);
    }
}

/* ---- K-quants and IQ4_XS: dequantizers ----------------------------------------------------- */

void rt_to_float_q4_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q4_K_BYTES) {
        const float d = rd_f16(b), dmin = rd_f16(b + Q4_K_DMIN);
        uint8_t sc[8], m[8];
        rt_unpack_k4_scales(b + Q4_K_SCALES, sc, m);
        const uint8_t *q = b + Q4_K_QS;
        for (int j = 0; j < 4; j++, q += 32, dst += 64) {
            const float d1 = d * sc[2 * j], m1 = dmin * m[2 * j];
            const float d2 = d * sc[2 * j + 1], m2 = dmin * m[2 * j + 1];
            for (int l = 0; l < 32; l++) dst[l] = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) dst[l + 32] = d2 * (q[l] >> 4) - m2;
        }
    }
}

void rt_to_float_q5_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q5_K_BYTES) {
        const float d = rd_f16(b), dmin = rd_f16(b + Q5_K_DMIN);
        uint8_t sc[8], m[8];
        rt_unpack_k4_scales(b + Q5_K_SCALES, sc, m);
        const uint8_t *ql = b + Q5_K_QS, *qh = b + Q5_K_QH;
        for (int j = 0; j < 4; j++, ql += 32, dst += 64) {
            const float d1 = d * sc[2 * j], m1 = dmin * m[2 * j];
            const float d2 = d * sc[2 * j + 1], m2 = dmin * m[2 * j + 1];
            const uint8_t u1 = (uint8_t)(1u << (2 * j)), u2 = (uint8_t)(2u << (2 * j));
            for (int l = 0; l < 32; l++) dst[l] = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) dst[l + 32] = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void rt_to_float_q6_K(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q6_K_BYTES) {
        const float d = rd_f16(b + Q6_K_D);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = b + Q6_K_QL + 64 * h, *qh = b + Q6_K_QH + 32 * h;
            const int8_t *sc = (const int8_t *)(b + Q6_K_SCALES) + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = (int)((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * sc[is] * q1;
                dst[l + 32] = d * sc[is + 2] * q2;
                dst[l + 64] = d * sc[is + 4] * q3;
                dst[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void rt_to_float_iq4_xs(const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ4_XS_BYTES) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + IQ4_XS_QS;
        for (int ib = 0; ib < QK_K / 32; ib++, qs += 16, dst += 32) {
            const float dl = d * rt_iq4xs_scale(b, ib);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * rt_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * rt_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}
