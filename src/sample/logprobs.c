/* logprobs.c — log-probabilities of the raw logits, for n_probs / logprobs in responses. */
#include <math.h>

#include "sample/sample.h"

/* log-sum-exp of the logits in double, in index order (one fixed order: deterministic) */
static double log_sum_exp(const float *logits, int32_t n) {
    float max = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    if (!(max > -INFINITY)) return max;   /* all -inf: every log-probability is -inf */
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    return max + log(sum);
}

static float logprob(float logit, double lse) {
    if (!(logit > -INFINITY)) return -INFINITY;
    return (float)((double)logit - lse);
}

float recur_logprob_of(const float *logits, int32_t n_vocab, recur_token t) {
    if (t < 0 || t >= n_vocab) return -INFINITY;
    return logprob(logits[t], log_sum_exp(logits, n_vocab));
}

/* Insertion into a sorted list of n: O(n_vocab) when n is small, which is what n_probs asks. */
int32_t recur_logprobs_top(const float *logits, int32_t n_vocab, int32_t n, recur_token *ids, float *logprobs) {
    if (n > n_vocab) n = n_vocab;
    if (n <= 0) return 0;
    const double lse = log_sum_exp(logits, n_vocab);
    int32_t k = 0;   /* ids[0 .. k) sorted: descending logit, ascending id on ties */
    for (int32_t i = 0; i < n_vocab; i++) {
        if (k == n && !(logits[i] > logits[ids[k - 1]])) continue;
        int32_t j = k < n ? k++ : n - 1;
        while (j > 0 && logits[i] > logits[ids[j - 1]]) { ids[j] = ids[j - 1]; j--; }
        ids[j] = i;
    }
    for (int32_t i = 0; i < k; i++) logprobs[i] = logprob(logits[ids[i]], lse);
    return k;
}
