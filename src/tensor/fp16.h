/* fp16.h — scalar conversions between float and the 16-bit formats stored in GGUF files.
 * Bit-exact with ggml: f32 -> f16 and f32 -> bf16 round to nearest even; bf16 -> f32 and
 * f16 -> f32 are exact. NaN stays NaN (bf16 NaNs are made quiet). */
#ifndef RECUR_TENSOR_FP16_H
#define RECUR_TENSOR_FP16_H

#include <stdint.h>
#include <string.h>

static inline float rt_bits_to_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t rt_f32_to_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static inline float rt_f16_to_f32(uint16_t h) {
    /* exponent rebias trick: exact for normals, subnormals, inf and NaN */
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = 0x1.0p-112f;
    const float normalized = rt_bits_to_f32((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = rt_bits_to_f32((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result = sign | (two_w < denormalized_cutoff ? rt_f32_to_bits(denormalized)
                                                                : rt_f32_to_bits(normalized));
    return rt_bits_to_f32(result);
}

static inline uint16_t rt_f32_to_f16(float f) {
    const float scale_to_inf = 0x1.0p+112f;
    const float scale_to_zero = 0x1.0p-110f;
    float base = (f < 0 ? -f : f) * scale_to_inf;
    base *= scale_to_zero;
    const uint32_t w = rt_f32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = rt_bits_to_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = rt_f32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

static inline float rt_bf16_to_f32(uint16_t h) { return rt_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t rt_f32_to_bf16(float f) {
    uint32_t u = rt_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64); /* quiet NaN */
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1))) >> 16);
}

#endif
