/* sample.h — choosing the next token from logits.
 *
 * The public API (recur_sampler_*) is declared in recur.h. The chain is: temperature -> top-k -> top-p -> draw from the softmax with the sampler's own
 * PRNG. temp <= 0 is greedy (the lowest id wins ties). Same seed + same logits -> same token. */
#ifndef RECUR_SAMPLE_H
#define RECUR_SAMPLE_H

#include <stdint.h>

#include "recur.h"

/* Greedy choice: the index of the largest logit, the lowest on ties. */
recur_token sample_argmax(const float *logits, int32_t n);

#endif
