/* ref_prompt.h — the deterministic pseudo-random prompts the reference tests share. */
#ifndef RECUR_TESTS_REF_PROMPT_H
#define RECUR_TESTS_REF_PROMPT_H

#include <stdint.h>

#include "recur.h"

/* Token i of the prompt named by salt: in [3, n_vocab - 3), away from the special ids. */
static inline recur_token prompt_tok(int i, int n_vocab, uint32_t salt) {
    uint32_t x = (uint32_t)i * 2654435761u ^ salt;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    return (recur_token)(3 + x % (uint32_t)(n_vocab - 6));
}

#endif
