/* sample.c — the sampler: logit_bias, penalties over the accepted history, top_k, typical_p,
 * top_p, min_p, temperature and the draw (the contract is in sample.h and recur.h). */
#include "sample/sample.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sample/cand.h"

struct recur_sampler {
    recur_sampler_params p;      /* p.logit_bias is not kept: bias below is the sampler's copy */
    int32_t           n_vocab;
    uint64_t          rng;       /* splitmix64 state */
    sample_cand      *c;         /* [n_vocab] the candidates of the current call */
    recur_logit_bias *bias;      /* [n_bias] sorted by token, one entry per token */
    int32_t           n_bias;
    int32_t          *count;     /* [n_vocab] occurrences in the penalty window (invariant 3) */
    recur_token      *hist;      /* [p.penalty_last_n] ring of the window; NULL unless last_n > 0 */
    int32_t           hist_head; /* where the next accepted token goes */
    int32_t           hist_len;  /* tokens in the ring, <= last_n */
};

/* The candidates left by the chain: c[0 .. n); c[0 .. n_sorted) are the first n_sorted of the
 * order (logit desc, id asc) among them, sorted; max is the largest logit among them. */
typedef struct chain {
    sample_cand *c;
    int32_t      n, n_sorted;
    float        max;
} chain;

recur_sampler_params recur_sampler_default_params(void) {
    recur_sampler_params p = { .temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .typical_p = 1.0f,
                               .penalty_last_n = 64, .penalty_repeat = 1.0f, .seed = 0x5eed };
    return p;
}

/* ---- construction, history ------------------------------------------------------------------ */

typedef struct bias_at { recur_logit_bias b; int32_t at; } bias_at;

/* by token, then by position in the caller's list: a total order, so qsort is deterministic */
static int bias_cmp(const void *x, const void *y) {
    const bias_at *a = x, *b = y;
    if (a->b.token != b->b.token) return a->b.token < b->b.token ? -1 : 1;
    return (a->at > b->at) - (a->at < b->at);
}

/* Copies the caller's biases sorted by token, summing the entries of one token in list order,
 * so the gathering pass can walk them alongside the vocabulary. */
static int copy_bias(recur_sampler *s, const recur_logit_bias *lb, int32_t n) {
    if (n == 0) return 0;
    bias_at *tmp = malloc((size_t)n * sizeof *tmp);
    s->bias = malloc((size_t)n * sizeof *s->bias);
    if (!tmp || !s->bias) { free(tmp); return -1; }
    for (int32_t i = 0; i < n; i++) tmp[i] = (bias_at){ lb[i], i };
    qsort(tmp, (size_t)n, sizeof *tmp, bias_cmp);
    for (int32_t i = 0; i < n; i++) {
        if (s->n_bias > 0 && s->bias[s->n_bias - 1].token == tmp[i].b.token) s->bias[s->n_bias - 1].bias += tmp[i].b.bias;
        else s->bias[s->n_bias++] = tmp[i].b;
    }
    free(tmp);
    return 0;
}

static bool params_valid(const recur_sampler_params *p, int32_t n_vocab) {
    if (n_vocab <= 0 || p->penalty_last_n < -1 || p->n_logit_bias < 0) return false;
    if (p->n_logit_bias > 0 && !p->logit_bias) return false;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab) return false;
    return true;
}

recur_sampler *recur_sampler_new(const recur_sampler_params *p, int32_t n_vocab) {
    if (!p || !params_valid(p, n_vocab)) return NULL;
    recur_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->p.logit_bias = NULL;
    s->p.n_logit_bias = 0;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    if (p->penalty_last_n > 0) s->hist = malloc((size_t)p->penalty_last_n * sizeof *s->hist);
    if (!s->c || !s->count || (p->penalty_last_n > 0 && !s->hist) || copy_bias(s, p->logit_bias, p->n_logit_bias)) {
        recur_sampler_free(s);
        return NULL;
    }
    recur_sampler_reset(s);
    return s;
}

void recur_sampler_free(recur_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->bias);
    free(s->count);
    free(s->hist);
    free(s);
}

void recur_sampler_accept(recur_sampler *s, recur_token t) {
    const int32_t last_n = s->p.penalty_last_n;
    if (last_n == 0 || t < 0 || t >= s->n_vocab) return;
    if (last_n > 0) {
        if (s->hist_len == last_n) s->count[s->hist[s->hist_head]]--;   /* the oldest leaves */
        else s->hist_len++;
        s->hist[s->hist_head] = t;
        s->hist_head = s->hist_head + 1 == last_n ? 0 : s->hist_head + 1;
    }
    s->count[t]++;
}

void recur_sampler_reset(recur_sampler *s) {
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->hist_head = s->hist_len = 0;
    s->rng = s->p.seed ^ 0x9E3779B97F4A7C15ull;
}

void recur_sampler_set_history(recur_sampler *s, const recur_token *toks, int32_t n) {
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->hist_head = s->hist_len = 0;
    const int32_t last_n = s->p.penalty_last_n;
    if (last_n == 0) return;
    /* only the window's tail can matter: older tokens would leave the ring again */
    const int32_t from = last_n > 0 && n > last_n ? n - last_n : 0;
    for (int32_t i = from; i < n; i++) recur_sampler_accept(s, toks[i]);
}

/* splitmix64: a uniform double in [0, 1) from the top 53 bits */
static double rng_uniform(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

recur_token sample_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    float max = logits[0];   /* in a register: no reload of logits[best] per step */
    for (int32_t i = 1; i < n; i++)
        if (logits[i] > max) { max = logits[i]; best = i; }
    return best;
}

/* ---- the chain -------------------------------------------------------------------------------- */

static bool penalties_on(const recur_sampler_params *p) {
    return p->penalty_last_n != 0 && !(p->penalty_repeat == 1.0f && p->penalty_freq == 0.0f && p->penalty_present == 0.0f);
}

/* llama.cpp's penalties: repeat scales toward lower likelihood whatever the sign; frequency
 * and presence subtract (one float expression, as there). */
static float penalize(const recur_sampler_params *p, float l, int32_t count) {
    l = l <= 0 ? l * p->penalty_repeat : l / p->penalty_repeat;
    return l - ((float)count * p->penalty_freq + p->penalty_present);
}

/* One pass over the vocabulary: bias, penalties, bans. With top_k in (0, n_vocab) only the k
 * first candidates are kept, in a heap, so the full array is never written. */
static void gather(recur_sampler *s, const float *logits, int32_t top_k, chain *ch) {
    /* no biases: bias is NULL, and NULL + 0 is undefined in C (clang's UBSan reports it) */
    const recur_logit_bias *b = s->bias, *b_end = s->bias ? s->bias + s->n_bias : NULL;
    const bool pen = penalties_on(&s->p);
    sample_cand *c = s->c;
    int32_t n = 0;
    float max = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (b < b_end && b->token == i) l += (b++)->bias;
        if (pen && s->count[i] > 0) l = penalize(&s->p, l, s->count[i]);
        if (!(l > -INFINITY)) continue;   /* banned (or NaN): never a candidate */
        const sample_cand x = { l, l, 0.0f, i };
        if (top_k > 0) {
            if (n == top_k && !sample_cand_before(&x, &c[0])) continue;   /* the common case: out */
            sample_cand_heap_offer(c, &n, top_k, x);
        } else {
            c[n++] = x;
            if (l > max) max = l;
        }
    }
    ch->c = c;
    ch->n = n;
    ch->n_sorted = 0;
    ch->max = max;
    if (top_k > 0) {
        sample_cand_heap_sort(c, n);
        ch->n_sorted = n;
        ch->max = n > 0 ? c[0].logit : -INFINITY;
    }
}

/* w = exp(logit - max), each candidate's unnormalized probability; returns their sum. */
static double weigh_probs(chain *ch) {
    double sum = 0;
    for (int32_t i = 0; i < ch->n; i++) {
        ch->c[i].w = expf(ch->c[i].logit - ch->max);
        sum += ch->c[i].w;
    }
    return sum;
}

/* The shortest run of candidates in key order whose weight reaches target (exceeds it when
 * strict), and at least min_keep. Candidates already sorted (the top-k heap's) are walked;
 * others are selected by mass (cand.h), without sorting the kept run. */
static int32_t mass_cut(sample_cand *c, int32_t n, bool sorted, double target, bool strict, int32_t min_keep) {
    if (!sorted) return sample_cand_mass_select(c, n, target, strict, min_keep);
    double cum = 0;
    for (int32_t i = 0; i < n; i++) {
        cum += c[i].w;
        if ((strict ? cum > target : cum >= target) && i + 1 >= min_keep) return i + 1;
    }
    return n;
}

/* With p_i = w_i / sum: -log p_i = log(sum) - (l_i - max), and the entropy H is the mean of that
 * under p. So no log per token, and a token whose p underflows to 0 adds 0 to H (llama.cpp's
 * p * log(p) would give NaN there). */
static void typical(chain *ch, float typical_p, int32_t min_keep) {
    if (typical_p >= 1.0f || ch->n <= 1) return;
    sample_cand *c = ch->c;
    const double sum = weigh_probs(ch), log_sum = log(sum);
    double entropy = 0;
    for (int32_t i = 0; i < ch->n; i++) entropy += c[i].w * (log_sum - ((double)c[i].logit - ch->max));
    entropy /= sum;
    /* sort by |-log p - H| ascending: key = minus that, as the order sorts by key descending */
    for (int32_t i = 0; i < ch->n; i++) c[i].key = -(float)fabs(log_sum - ((double)c[i].logit - ch->max) - entropy);
    ch->n = mass_cut(c, ch->n, false, typical_p * sum, true, min_keep);
    float max = -INFINITY;
    for (int32_t i = 0; i < ch->n; i++) {   /* back to the logit order (cand.h, invariant 2) */
        c[i].key = c[i].logit;
        if (c[i].logit > max) max = c[i].logit;
    }
    ch->max = max;   /* the most likely token may be the least typical one */
    ch->n_sorted = 0;
}

static void top_p(chain *ch, float p, int32_t min_keep) {
    if (p >= 1.0f || ch->n <= 1) return;
    const double sum = weigh_probs(ch);
    const bool sorted = ch->n_sorted >= ch->n;
    ch->n = mass_cut(ch->c, ch->n, sorted, p * sum, false, min_keep);
    ch->n_sorted = sorted ? ch->n : 0;
}

static void min_p(chain *ch, float p, int32_t min_keep) {
    if (p <= 0.0f || ch->n <= 1) return;
    sample_cand *c = ch->c;
    const float threshold = ch->max + logf(p);
    int32_t keep = 0;
    for (int32_t i = 0; i < ch->n; i++) keep += c[i].logit >= threshold;
    if (keep < min_keep) {   /* too few: the min_keep first of the order */
        keep = min_keep < ch->n ? min_keep : ch->n;
        sample_cand_select(c, ch->n, keep);
        ch->n = ch->n_sorted = keep;
        return;
    }
    int32_t k = 0;   /* compact in place, keeping the order (and so the sorted prefix) */
    for (int32_t i = 0; i < ch->n; i++)
        if (c[i].logit >= threshold) c[k++] = c[i];
    ch->n = k;
    if (ch->n_sorted > k) ch->n_sorted = k;
}

/* Runs bias .. min_p. Greedy keeps only the first candidate of the order. */
static void run_chain(recur_sampler *s, const float *logits, chain *ch) {
    const recur_sampler_params *p = &s->p;
    if (p->temp <= 0) {
        gather(s, logits, 1, ch);
        return;
    }
    gather(s, logits, p->top_k > 0 && p->top_k < s->n_vocab ? p->top_k : 0, ch);
    const int32_t min_keep = p->min_keep > 1 ? p->min_keep : 1;
    typical(ch, p->typical_p, min_keep);
    top_p(ch, p->top_p, min_keep);
    min_p(ch, p->min_p, min_keep);
}

/* Temperature: w = exp((logit - max) / temp), the weight the draw uses; returns their sum. */
static double weigh(chain *ch, float temp) {
    double sum = 0;
    for (int32_t i = 0; i < ch->n; i++) {
        ch->c[i].w = expf((ch->c[i].logit - ch->max) / temp);
        sum += ch->c[i].w;
    }
    return sum;
}

recur_token recur_sampler_sample(recur_sampler *s, const float *logits) {
    chain ch;
    run_chain(s, logits, &ch);
    if (ch.n == 0) return 0;   /* every token banned */
    if (s->p.temp <= 0) return ch.c[0].id;
    const double sum = weigh(&ch, s->p.temp);
    const double r = rng_uniform(&s->rng) * sum;
    double acc = 0;
    for (int32_t i = 0; i < ch.n; i++) {
        acc += ch.c[i].w;
        if (r < acc) return ch.c[i].id;
    }
    return ch.c[ch.n - 1].id;   /* r rounded up to the sum */
}

int32_t sample_chain(recur_sampler *s, const float *logits, recur_token *ids, float *probs, int32_t cap) {
    chain ch;
    run_chain(s, logits, &ch);
    if (ch.n == 0) return 0;
    const double sum = s->p.temp <= 0 ? 1.0 : weigh(&ch, s->p.temp);
    if (s->p.temp <= 0) ch.c[0].w = 1.0f;
    const int32_t k = cap < ch.n ? cap : ch.n;
    sample_cand_select(ch.c, ch.n, k);   /* most likely first: by logit, as the weights follow it */
    for (int32_t i = 0; i < k; i++) {
        ids[i] = ch.c[i].id;
        probs[i] = (float)(ch.c[i].w / sum);
    }
    return ch.n;
}
