/* gguf_types.c — facts about tensor and metadata types: block sizes, names, byte counts. */
#include "gguf/gguf_internal.h"

typedef struct type_info {
    const char *name;
    uint32_t    blck;   /* elements per block; 0 = unknown or removed id */
    uint32_t    bytes;  /* bytes per block */
} type_info;

/* ggml's type traits (ggml.c type_traits[], gguf-py GGML_QUANT_SIZES). QK_K = 256.
 * Ids 4, 5 (Q4_2, Q4_3), 31-33 (Q4_0_4_4 .. Q4_0_8_8) and 36-38 (IQ4_NL_4_4 ..) were removed. */
static const type_info k_types[GGUF_T_COUNT] = {
    [GGUF_T_F32]     = {"F32", 1, 4},
    [GGUF_T_F16]     = {"F16", 1, 2},
    [GGUF_T_Q4_0]    = {"Q4_0", 32, 18},     /* fp16 d; u8 qs[16] */
    [GGUF_T_Q4_1]    = {"Q4_1", 32, 20},     /* fp16 d, m; u8 qs[16] */
    [GGUF_T_Q5_0]    = {"Q5_0", 32, 22},     /* fp16 d; u8 qh[4]; u8 qs[16] */
    [GGUF_T_Q5_1]    = {"Q5_1", 32, 24},     /* fp16 d, m; u8 qh[4]; u8 qs[16] */
    [GGUF_T_Q8_0]    = {"Q8_0", 32, 34},     /* fp16 d; i8 qs[32] */
    [GGUF_T_Q8_1]    = {"Q8_1", 32, 36},     /* fp16 d, s; i8 qs[32] */
    [GGUF_T_Q2_K]    = {"Q2_K", 256, 84},
    [GGUF_T_Q3_K]    = {"Q3_K", 256, 110},
    [GGUF_T_Q4_K]    = {"Q4_K", 256, 144},
    [GGUF_T_Q5_K]    = {"Q5_K", 256, 176},
    [GGUF_T_Q6_K]    = {"Q6_K", 256, 210},
    [GGUF_T_Q8_K]    = {"Q8_K", 256, 292},   /* f32 d; i8 qs[256]; i16 bsums[16] */
    [GGUF_T_IQ2_XXS] = {"IQ2_XXS", 256, 66},
    [GGUF_T_IQ2_XS]  = {"IQ2_XS", 256, 74},
    [GGUF_T_IQ3_XXS] = {"IQ3_XXS", 256, 98},
    [GGUF_T_IQ1_S]   = {"IQ1_S", 256, 50},
    [GGUF_T_IQ4_NL]  = {"IQ4_NL", 32, 18},
    [GGUF_T_IQ3_S]   = {"IQ3_S", 256, 110},
    [GGUF_T_IQ2_S]   = {"IQ2_S", 256, 82},
    [GGUF_T_IQ4_XS]  = {"IQ4_XS", 256, 136},
    [GGUF_T_I8]      = {"I8", 1, 1},
    [GGUF_T_I16]     = {"I16", 1, 2},
    [GGUF_T_I32]     = {"I32", 1, 4},
    [GGUF_T_I64]     = {"I64", 1, 8},
    [GGUF_T_F64]     = {"F64", 1, 8},
    [GGUF_T_IQ1_M]   = {"IQ1_M", 256, 56},
    [GGUF_T_BF16]    = {"BF16", 1, 2},
    [GGUF_T_TQ1_0]   = {"TQ1_0", 256, 54},
    [GGUF_T_TQ2_0]   = {"TQ2_0", 256, 66},
    [GGUF_T_MXFP4]   = {"MXFP4", 32, 17},    /* u8 e (E8M0); u8 qs[16] */
    [GGUF_T_NVFP4]   = {"NVFP4", 64, 36},    /* 4 UE4M3 scales (one per 16); u8 qs[32] */
    [GGUF_T_Q1_0]    = {"Q1_0", 128, 18},    /* fp16 d; 128 sign bits */
    [GGUF_T_Q2_0]    = {"Q2_0", 64, 18},     /* fp16 d; 64 2-bit codes */
};

bool gguf_type_block(uint32_t type, uint32_t *blck, uint32_t *bytes) {
    if (type >= GGUF_T_COUNT || k_types[type].blck == 0) return false;
    if (blck) *blck = k_types[type].blck;
    if (bytes) *bytes = k_types[type].bytes;
    return true;
}

const char *gguf_type_name(uint32_t type) {
    if (type >= GGUF_T_COUNT || k_types[type].blck == 0) return "?";
    return k_types[type].name;
}

static const char *const k_kv_names[GGUF_KV_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool",
    "string", "array", "uint64", "int64", "float64",
};

const char *gguf_kv_type_name(gguf_kv_type t) {
    if ((unsigned)t >= GGUF_KV_COUNT) return "?";
    return k_kv_names[t];
}

uint32_t gguf_kv_scalar_size(uint32_t t) {
    static const uint8_t sizes[GGUF_KV_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < GGUF_KV_COUNT ? sizes[t] : 0;
}

bool gguf_tensor_nbytes(uint32_t type, const int64_t ne[GGUF_MAX_DIMS], uint64_t *out) {
    uint32_t blck, bytes;
    if (!gguf_type_block(type, &blck, &bytes)) return false;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        if (ne[i] < 0) return false;
    if ((uint64_t)ne[0] % blck) return false;
    uint64_t n = (uint64_t)ne[0] / blck * bytes;   /* bytes of one row: fits, ne[0] < 2^63 */
    for (int i = 1; i < GGUF_MAX_DIMS; i++)
        if (__builtin_mul_overflow(n, (uint64_t)ne[i], &n)) return false;
    if (n > (uint64_t)INT64_MAX) return false;
    *out = n;
    return true;
}

/* ---- scalar decoding ---------------------------------------------------------------------- */

bool gguf_scalar_int(uint32_t t, const uint8_t *p, int64_t *out) {
    switch (t) {
    case GGUF_KV_UINT8:  *out = p[0]; return true;
    case GGUF_KV_INT8:   *out = (int8_t)p[0]; return true;
    case GGUF_KV_BOOL:   *out = p[0] != 0; return true;
    case GGUF_KV_UINT16: *out = gguf_ld16(p); return true;
    case GGUF_KV_INT16:  *out = (int16_t)gguf_ld16(p); return true;
    case GGUF_KV_UINT32: *out = gguf_ld32(p); return true;
    case GGUF_KV_INT32:  *out = (int32_t)gguf_ld32(p); return true;
    case GGUF_KV_INT64:  *out = (int64_t)gguf_ld64(p); return true;
    case GGUF_KV_UINT64: {
        uint64_t v = gguf_ld64(p);
        if (v > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)v;
        return true;
    }
    default: return false;
    }
}

bool gguf_scalar_float(uint32_t t, const uint8_t *p, double *out) {
    if (t == GGUF_KV_FLOAT32) {
        uint32_t u = gguf_ld32(p);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return true;
    }
    if (t == GGUF_KV_FLOAT64) {
        uint64_t u = gguf_ld64(p);
        memcpy(out, &u, 8);
        return true;
    }
    if (t == GGUF_KV_UINT64) {
        *out = (double)gguf_ld64(p);
        return true;
    }
    int64_t v;
    if (!gguf_scalar_int(t, p, &v)) return false;
    *out = (double)v;
    return true;
}

bool gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}
