#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>

typedef struct cand { float logit; int32_t id; } cand;

struct recur_sampler {
    recur_sampler_params p;
    int32_t       n_vocab;
    uint64_t      rng;
    cand         *c;     /* [n_vocab] */
};

recur_sampler_params recur_sampler_default_params(void) {
    recur_sampler_params p = { .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f,
                               .penalty_last_n = 64, .penalty_repeat = 1.0f, .seed = 0x5eed };
    return p;
}

recur_sampler *recur_sampler_new(const recur_sampler_params *p, int32_t n_vocab) {
    recur_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    if (!s->c) { free(s); return NULL; }
    s->p = *p;
    s->n_vocab = n_vocab;
    s->rng = p->seed ^ 0x9E3779B97F4A7C15ull;
    return s;
}

void recur_sampler_free(recur_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s);
}

/* splitmix64: a uniform float in [0, 1) */
static float rng_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / 16777216.0f;
}

recur_token sample_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* descending by logit, ascending by id on ties: a total order, so sorting is deterministic */
static int cand_cmp(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id < y->id ? -1 : x->id > y->id;
}

recur_token recur_sampler_sample(recur_sampler *s, const float *logits) {
    if (s->p.temp <= 0) return sample_argmax(logits, s->n_vocab);
    int32_t n = s->n_vocab;
    for (int32_t i = 0; i < n; i++) s->c[i] = (cand){ logits[i] / s->p.temp, i };
    qsort(s->c, (size_t)n, sizeof *s->c, cand_cmp);
    if (s->p.top_k > 0 && s->p.top_k < n) n = s->p.top_k;
    double sum = 0;
    const float max = s->c[0].logit;
    for (int32_t i = 0; i < n; i++) sum += exp((double)(s->c[i].logit - max));
    if (s->p.top_p < 1.0f) {
        double acc = 0;
        for (int32_t i = 0; i < n; i++) {
            acc += exp((double)(s->c[i].logit - max)) / sum;
            if (acc >= s->p.top_p) { n = i + 1; break; }
        }
        sum = 0;
        for (int32_t i = 0; i < n; i++) sum += exp((double)(s->c[i].logit - max));
    }
    const double r = rng_uniform(&s->rng) * sum;
    double acc = 0;
    for (int32_t i = 0; i < n; i++) {
        acc += exp((double)(s->c[i].logit - max));
        if (r < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}

void recur_sampler_accept(recur_sampler *s, recur_token t) {
    (void)s; (void)t;   /* the penalties (history) come with the full chain */
}

void recur_sampler_reset(recur_sampler *s) { s->rng = s->p.seed ^ 0x9E3779B97F4A7C15ull; }

/* log-sum-exp of the logits in double, in index order (one fixed order: deterministic) */
static double log_sum_exp(const float *logits, int32_t n) {
    float max = logits[0];
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) max = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) sum += exp((double)logits[i] - max);
    return max + log(sum);
}

float recur_logprob_of(const float *logits, int32_t n_vocab, recur_token t) {
    if (t < 0 || t >= n_vocab) return -INFINITY;
    return (float)((double)logits[t] - log_sum_exp(logits, n_vocab));
}

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
    for (int32_t i = 0; i < k; i++) logprobs[i] = (float)((double)logits[ids[i]] - lse);
    return k;
}
