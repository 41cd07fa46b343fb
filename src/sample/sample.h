/* sample.h — choosing the next token from logits.
 *
 * The public API (recur_sampler_*, recur_logprob*) is declared in recur.h; the chain is
 * llama.cpp's default order: logit_bias -> penalties -> top_k -> typical_p -> top_p -> min_p ->
 * temperature -> draw. Semantics of each stage follow llama.cpp's samplers (src/llama-sampler.cpp):
 *
 *  - logit_bias: bias[t] added to logit[t]; entries for the same token add up; a logit that ends
 *    at -INFINITY (or NaN) is banned: never a candidate, never chosen.
 *  - penalties, for each token t seen count(t) > 0 times in the last penalty_last_n accepted
 *    tokens (all accepted ones when -1): l = l <= 0 ? l * repeat : l / repeat, then
 *    l -= count(t) * freq + present. Off when last_n == 0 or (repeat, freq, present) = (1, 0, 0).
 *  - top_k: the k first candidates of the order (logit desc, id asc).
 *  - typical_p: with p = softmax(l) over the candidates and H its entropy, candidates sorted by
 *    |-log p - H| ascending keep the shortest run whose mass exceeds typical_p (strictly).
 *  - top_p: candidates by logit keep the shortest run whose mass reaches top_p (>=).
 *  - min_p: keep candidates whose p >= min_p * p_max (logit >= max + log(min_p)).
 *    typical_p, top_p and min_p keep at least max(min_keep, 1) candidates.
 *  - temperature divides the logits of the survivors; the draw picks from their softmax with
 *    the sampler's splitmix64 PRNG (one 53-bit uniform per sampled token).
 * temp <= 0 is greedy: the first candidate of the order (logit desc, id asc) after bias and
 * penalties, and no PRNG draw. When bias bans every token, the sampler returns token 0.
 *
 * Invariants:
 *  1. Nothing allocates after recur_sampler_new: the candidates, the penalty counts and the
 *     history ring are sized there.
 *  2. Every stage works in a total order (cand.h), and the draw walks the survivors in the
 *     chain's order: same seed + same history + same logits -> same token.
 *  3. count[t] is the number of times t occurs in the penalty window (the ring when
 *     penalty_last_n > 0, every accepted token when -1). */
#ifndef RECUR_SAMPLE_H
#define RECUR_SAMPLE_H

#include <stdint.h>

#include "recur.h"

/* Greedy choice over raw logits: the index of the largest logit, the lowest on ties. */
recur_token sample_argmax(const float *logits, int32_t n);

/* Runs the chain up to (not including) the draw: writes the surviving candidates, most likely
 * first (lower id first on ties), at most cap of them, with their probabilities after
 * temperature (what the draw would pick from; greedy: the one token, probability 1). Returns how
 * many survive, which may exceed cap. Does not touch the PRNG or the history. */
int32_t sample_chain(recur_sampler *s, const float *logits, recur_token *ids, float *probs, int32_t cap);

#endif
