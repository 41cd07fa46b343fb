/* types.c — block facts and dot-product pairing of the types tensor/ computes with.
 *
 * Kept here (not taken from gguf_type_block) so tensor/ needs nothing from gguf/ at link
 * time; the facts are ggml's (FORMATS.md). */
#include "tensor/tensor_impl.h"

typedef struct type_traits {
    uint32_t blck;          /* elements per block; 0 = unknown to tensor/ */
    uint32_t bytes;         /* bytes per block */
    uint32_t vec_dot_type;  /* activation type of the dot product; GGUF_T_COUNT = none */
} type_traits;

static const type_traits k_traits[GGUF_T_COUNT] = {
    [GGUF_T_F32]    = { 1, 4, GGUF_T_F32 },
    [GGUF_T_F16]    = { 1, 2, GGUF_T_F16 },
    [GGUF_T_BF16]   = { 1, 2, GGUF_T_BF16 },
    [GGUF_T_Q8_0]   = { QK8_0, Q8_0_BYTES, GGUF_T_Q8_0 },
    [GGUF_T_Q4_0]   = { QK4_0, Q4_0_BYTES, GGUF_T_Q8_0 },
    [GGUF_T_Q4_K]   = { QK_K, Q4_K_BYTES, GGUF_T_Q8_K },
    [GGUF_T_Q5_K]   = { QK_K, Q5_K_BYTES, GGUF_T_Q8_K },
    [GGUF_T_Q6_K]   = { QK_K, Q6_K_BYTES, GGUF_T_Q8_K },
    [GGUF_T_IQ4_XS] = { QK_K, IQ4_XS_BYTES, GGUF_T_Q8_K },
    [GGUF_T_Q8_K]   = { QK_K, Q8_K_BYTES, GGUF_T_COUNT },
};

bool tensor_type_supported(uint32_t type) {
    return type < GGUF_T_COUNT && k_traits[type].blck != 0 &&
           k_traits[type].vec_dot_type != GGUF_T_COUNT;
}

uint32_t tensor_vec_dot_type(uint32_t type) {
    return tensor_type_supported(type) ? k_traits[type].vec_dot_type : GGUF_T_COUNT;
}

int64_t tensor_block_size(uint32_t type) {
    return type < GGUF_T_COUNT ? (int64_t)k_traits[type].blck : 0;
}

size_t tensor_row_bytes(uint32_t type, int64_t n) {
    if (type >= GGUF_T_COUNT || k_traits[type].blck == 0 || n < 0) return 0;
    return (size_t)(n / k_traits[type].blck) * k_traits[type].bytes;
}
