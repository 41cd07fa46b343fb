/* test_sample.c — the sampler chain stage by stage on hand-made logits (expected sets and
 * probabilities worked out by hand in the comments), penalties and their history window,
 * logit_bias, min_keep, the draw's frequencies, determinism, candidate ordering, logprobs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "recur.h"
#include "sample/cand.h"
#include "sample/sample.h"

#define NV 64
#define EPS 1e-5

static void fill(float *l) {
    for (int i = 0; i < NV; i++) l[i] = (float)((i * 37) % 17) * 0.25f;
}

/* every stage off, temperature 1, no penalties */
static recur_sampler_params plain(void) {
    recur_sampler_params p = recur_sampler_default_params();
    p.temp = 1.0f; p.top_k = 0; p.top_p = 1.0f; p.min_p = 0.0f; p.typical_p = 1.0f;
    p.penalty_last_n = 0; p.seed = 1;
    return p;
}

/* The chain's survivors for logits[0 .. n): asserts they are exactly want[0 .. n_want) in
 * that order (most likely first) and, when prob is given, with those probabilities. */
static void expect_kept(const recur_sampler_params *p, const float *logits, int32_t n, const recur_token *want,
                        const double *prob, int32_t n_want) {
    recur_sampler *s = recur_sampler_new(p, n);
    assert_non_null(s);
    recur_token ids[NV];
    float probs[NV];
    assert_int_equal(sample_chain(s, logits, ids, probs, NV), n_want);
    for (int32_t i = 0; i < n_want; i++) {
        assert_int_equal(ids[i], want[i]);
        assert_true(probs[i] > 0 && probs[i] <= 1);   /* NaN fails here */
        if (prob) assert_float_equal(probs[i], prob[i], EPS);
    }
    recur_sampler_free(s);
}

static void test_greedy_ties(void **state) {
    (void)state;
    float l[NV] = { 0 };
    l[5] = l[9] = 3.0f;
    assert_int_equal(sample_argmax(l, NV), 5);
    recur_sampler_params p = recur_sampler_default_params();
    p.temp = 0;
    recur_sampler *s = recur_sampler_new(&p, NV);
    assert_int_equal(recur_sampler_sample(s, l), 5);
    recur_token id;
    float pr;
    assert_int_equal(sample_chain(s, l, &id, &pr, 1), 1);   /* greedy: one survivor */
    assert_int_equal(id, 5);
    assert_float_equal(pr, 1.0f, 0);
    recur_sampler_free(s);
    recur_sampler_free(NULL);
}

static void test_seed_repeats(void **state) {
    (void)state;
    float l[NV];
    fill(l);
    recur_sampler_params p = plain();
    p.seed = 42;
    recur_sampler *a = recur_sampler_new(&p, NV), *b = recur_sampler_new(&p, NV);
    recur_token first[200];
    int distinct = 0, prev = -1;
    for (int i = 0; i < 200; i++) {
        const recur_token x = first[i] = recur_sampler_sample(a, l);
        assert_int_equal(x, recur_sampler_sample(b, l));
        distinct += x != prev;
        prev = x;
    }
    assert_true(distinct > 20);    /* it really samples */
    recur_sampler_reset(a);        /* reset restarts the PRNG from the seed */
    for (int i = 0; i < 200; i++) assert_int_equal(recur_sampler_sample(a, l), first[i]);
    p.seed = 43;
    recur_sampler *c = recur_sampler_new(&p, NV);
    int same = 0;
    for (int i = 0; i < 200; i++) same += recur_sampler_sample(c, l) == first[i];
    assert_true(same < 100);       /* another seed, another sequence */
    recur_sampler_free(a);
    recur_sampler_free(b);
    recur_sampler_free(c);
}

/* ---- logit_bias --------------------------------------------------------------------------- */

static void test_logit_bias(void **state) {
    (void)state;
    const float l[4] = { 1.0f, 2.0f, 3.0f, 0.0f };
    /* token 0 gets 0.5 + 0.75 = 1.25 -> 2.25, above token 1's 2; token 2 is banned */
    recur_logit_bias lb[3] = { { 0, 0.5f }, { 2, -INFINITY }, { 0, 0.75f } };
    recur_sampler_params p = plain();
    p.temp = 0;
    p.logit_bias = lb;
    p.n_logit_bias = 3;
    recur_sampler *s = recur_sampler_new(&p, 4);
    assert_non_null(s);
    lb[0].bias = -100.0f;   /* copied at _new: later changes do not count */
    lb[1].bias = 0.0f;
    assert_int_equal(recur_sampler_sample(s, l), 0);
    recur_sampler_free(s);
    lb[0].bias = 0.5f;
    lb[1].bias = -INFINITY;
    /* sampling: the banned token is never a candidate. Survivors 0 (2.25), 1 (2), 3 (0) */
    p.temp = 1.0f;
    const double z = exp(2.25) + exp(2.0) + exp(0.0);
    const recur_token want[3] = { 0, 1, 3 };
    const double prob[3] = { exp(2.25) / z, exp(2.0) / z, 1.0 / z };
    expect_kept(&p, l, 4, want, prob, 3);
    s = recur_sampler_new(&p, 4);
    for (int i = 0; i < 500; i++) assert_int_not_equal(recur_sampler_sample(s, l), 2);
    recur_sampler_free(s);
}

static void test_logit_bias_invalid(void **state) {
    (void)state;
    recur_logit_bias lb[2] = { { 3, 1.0f }, { 4, 1.0f } };
    recur_sampler_params p = plain();
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    assert_null(recur_sampler_new(&p, 4));   /* token 4 is outside a 4-token vocabulary */
    lb[1].token = -1;
    assert_null(recur_sampler_new(&p, 4));
    p.logit_bias = NULL;
    assert_null(recur_sampler_new(&p, 4));
    p.n_logit_bias = 0;
    p.penalty_last_n = -2;
    assert_null(recur_sampler_new(&p, 4));
    p.penalty_last_n = -1;
    recur_sampler *s = recur_sampler_new(&p, 4);
    assert_non_null(s);
    recur_sampler_free(s);
    assert_null(recur_sampler_new(&p, 0));
}

static void test_all_banned(void **state) {
    (void)state;
    const float l[3] = { 1.0f, NAN, 2.0f };   /* a NaN logit is never a candidate either */
    recur_logit_bias lb[2] = { { 0, -INFINITY }, { 2, -INFINITY } };
    recur_sampler_params p = plain();
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    recur_sampler *s = recur_sampler_new(&p, 3);
    recur_token id;
    float pr;
    assert_int_equal(sample_chain(s, l, &id, &pr, 1), 0);
    assert_int_equal(recur_sampler_sample(s, l), 0);   /* the documented fallback */
    recur_sampler_free(s);
    p.n_logit_bias = 1;   /* only token 0 banned: 2 is the only real candidate */
    s = recur_sampler_new(&p, 3);
    for (int i = 0; i < 50; i++) assert_int_equal(recur_sampler_sample(s, l), 2);
    recur_sampler_free(s);
}

/* ---- penalties ------------------------------------------------------------------------------ */

static void test_penalty_formulas(void **state) {
    (void)state;
    const float l[4] = { 2.0f, -1.0f, 0.5f, 1.0f };
    recur_sampler_params p = plain();
    p.penalty_last_n = 8;
    p.penalty_repeat = 2.0f;
    p.penalty_freq = 0.5f;
    p.penalty_present = 0.25f;
    recur_sampler *s = recur_sampler_new(&p, 4);
    recur_sampler_accept(s, 0);
    recur_sampler_accept(s, 0);
    recur_sampler_accept(s, 1);
    /* token 0, twice, positive: 2 / 2 - (2 * 0.5 + 0.25) = -0.25
     * token 1, once, negative: -1 * 2 - (1 * 0.5 + 0.25) = -2.75; tokens 2 and 3 unchanged */
    const double pen[4] = { -0.25, -2.75, 0.5, 1.0 };
    double z = 0;
    for (int i = 0; i < 4; i++) z += exp(pen[i]);
    recur_token ids[4];
    float probs[4];
    assert_int_equal(sample_chain(s, l, ids, probs, 4), 4);
    const recur_token want[4] = { 3, 2, 0, 1 };
    for (int i = 0; i < 4; i++) {
        assert_int_equal(ids[i], want[i]);
        assert_float_equal(probs[i], exp(pen[want[i]]) / z, EPS);
    }
    recur_sampler_free(s);
    /* all three off (1, 0, 0): the history changes nothing */
    p.penalty_repeat = 1.0f; p.penalty_freq = 0.0f; p.penalty_present = 0.0f;
    p.temp = 0;
    s = recur_sampler_new(&p, 4);
    for (int i = 0; i < 5; i++) recur_sampler_accept(s, 0);
    assert_int_equal(recur_sampler_sample(s, l), 0);
    recur_sampler_free(s);
}

/* Greedy over equal logits with a presence penalty picks the lowest id not in the window:
 * follows the ring through several wraps against a plain list of the last n accepted. */
static void test_history_ring(void **state) {
    (void)state;
    const float l[6] = { 0 };
    recur_sampler_params p = plain();
    p.temp = 0;
    p.penalty_last_n = 3;
    p.penalty_present = 1.0f;
    recur_sampler *s = recur_sampler_new(&p, 6);
    recur_token seq[20];
    for (int step = 0; step < 20; step++) {
        bool in_window[6] = { false };
        for (int j = step - 3; j < step; j++)
            if (j >= 0) in_window[seq[j]] = true;
        int want = 0;
        while (in_window[want]) want++;
        const recur_token t = recur_sampler_sample(s, l);
        assert_int_equal(t, want);
        /* accept something that repeats, so a token can be in the window twice */
        seq[step] = step % 4 == 3 ? seq[step - 1] : t;
        recur_sampler_accept(s, seq[step]);
    }
    recur_sampler_reset(s);   /* empty history: token 0 again */
    assert_int_equal(recur_sampler_sample(s, l), 0);
    recur_sampler_accept(s, -1);   /* out of the vocabulary: ignored */
    recur_sampler_accept(s, 6);
    assert_int_equal(recur_sampler_sample(s, l), 0);
    recur_sampler_free(s);
}

/* A token twice in the window then once: its count follows (frequency penalty 1 per count). */
static void test_history_counts(void **state) {
    (void)state;
    const float l[3] = { 0 };
    recur_sampler_params p = plain();
    p.penalty_last_n = 2;
    p.penalty_freq = 1.0f;
    recur_sampler *s = recur_sampler_new(&p, 3);
    recur_sampler_accept(s, 0);
    recur_sampler_accept(s, 0);   /* window {0, 0}: l0 = -2 */
    recur_token ids[3];
    float probs[3];
    sample_chain(s, l, ids, probs, 3);
    assert_int_equal(ids[2], 0);
    assert_float_equal(probs[2], exp(-2.0) / (2 + exp(-2.0)), EPS);
    recur_sampler_accept(s, 1);   /* window {0, 1}: l0 = l1 = -1 */
    sample_chain(s, l, ids, probs, 3);
    assert_int_equal(ids[0], 2);
    assert_float_equal(probs[1], exp(-1.0) / (1 + 2 * exp(-1.0)), EPS);
    recur_sampler_free(s);
    /* -1: every accepted token counts, however many */
    p.penalty_last_n = -1;
    s = recur_sampler_new(&p, 3);
    for (int i = 0; i < 100; i++) recur_sampler_accept(s, 0);
    recur_sampler_accept(s, 1);
    sample_chain(s, l, ids, probs, 3);   /* l = { -100, -1, 0 } */
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[1], 1);
    assert_int_equal(ids[2], 0);
    assert_float_equal(probs[1], exp(-1.0) / (1 + exp(-1.0) + exp(-100.0)), EPS);
    recur_sampler_free(s);
    /* 0: the penalties are off */
    p.penalty_last_n = 0;
    s = recur_sampler_new(&p, 3);
    recur_sampler_accept(s, 0);
    sample_chain(s, l, ids, probs, 3);
    assert_float_equal(probs[0], 1.0 / 3, EPS);
    assert_int_equal(ids[0], 0);
    recur_sampler_free(s);
}

/* set_history (a rewind): the penalties see exactly the given tokens, for a ring window, -1 and
 * 0, and the PRNG continues where it was (the next draw is the one a never-rewound sampler that
 * drew as often would make). */
static void test_set_history(void **state) {
    (void)state;
    float l[NV];
    fill(l);
    const recur_token kept[7] = { 3, 5, 5, 9, 3, 11, 5 }, gone[4] = { 7, 7, 13, 2 };
    const int32_t windows[3] = { 4, -1, 0 };
    for (int w = 0; w < 3; w++) {
        recur_sampler_params p = plain();
        p.penalty_last_n = windows[w];
        p.penalty_freq = 0.5f;
        p.penalty_present = 0.25f;
        p.penalty_repeat = 1.3f;
        recur_sampler *a = recur_sampler_new(&p, NV), *b = recur_sampler_new(&p, NV);
        for (int i = 0; i < 7; i++) { recur_sampler_accept(a, kept[i]); recur_sampler_accept(b, kept[i]); }
        for (int i = 0; i < 4; i++) recur_sampler_accept(a, gone[i]);   /* the discarded branch */
        recur_sampler_sample(a, l);                                       /* one draw each */
        recur_sampler_sample(b, l);
        recur_sampler_set_history(a, kept, 7);
        recur_token ia[NV], ib[NV];
        float pa[NV], pb[NV];
        const int32_t na = sample_chain(a, l, ia, pa, NV), nb = sample_chain(b, l, ib, pb, NV);
        assert_int_equal(na, nb);
        for (int32_t i = 0; i < na; i++) {
            assert_int_equal(ia[i], ib[i]);
            assert_float_equal(pa[i], pb[i], 1e-7);
        }
        for (int i = 0; i < 5; i++) assert_int_equal(recur_sampler_sample(a, l), recur_sampler_sample(b, l));
        recur_sampler_free(a);
        recur_sampler_free(b);
    }
}

/* ---- top_k, typical_p, top_p, min_p, temperature ------------------------------------------ */

static void test_top_k(void **state) {
    (void)state;
    const float l[5] = { 1.0f, 5.0f, 3.0f, 5.0f, 2.0f };
    recur_sampler_params p = plain();
    p.top_k = 2;   /* ties: the lower id first */
    expect_kept(&p, l, 5, (const recur_token[]){ 1, 3 }, (const double[]){ 0.5, 0.5 }, 2);
    p.top_k = 3;
    const double z = 2 * exp(5.0) + exp(3.0);
    expect_kept(&p, l, 5, (const recur_token[]){ 1, 3, 2 }, (const double[]){ exp(5.0) / z, exp(5.0) / z, exp(3.0) / z }, 3);
    const float tie[4] = { 5.0f, 3.0f, 3.0f, 1.0f };
    p.top_k = 2;   /* the boundary falls inside a tie: id 1 stays, id 2 goes */
    expect_kept(&p, tie, 4, (const recur_token[]){ 0, 1 }, NULL, 2);
    p.top_k = 4;   /* k >= vocabulary: off */
    expect_kept(&p, tie, 4, (const recur_token[]){ 0, 1, 2, 3 }, NULL, 4);
    float l64[NV];
    fill(l64);
    p.top_k = 1;
    p.temp = 5.0f;
    recur_sampler *s = recur_sampler_new(&p, NV);
    for (int i = 0; i < 50; i++) assert_int_equal(recur_sampler_sample(s, l64), sample_argmax(l64, NV));
    recur_sampler_free(s);
}

/* p = { 0.5, 0.25, 0.125, 0.125 }: H = 1.75 ln 2; |-ln p - H| = { 0.75, 0.25, 1.25, 1.25 } ln 2,
 * so the typical order is 1, 0, 2, 3 with running mass 0.25, 0.75, 0.875, 1. */
static void test_typical(void **state) {
    (void)state;
    const float l[4] = { logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f) };
    recur_sampler_params p = plain();
    p.typical_p = 0.5f;   /* mass > 0.5 after two: { 1, 0 } */
    expect_kept(&p, l, 4, (const recur_token[]){ 0, 1 }, (const double[]){ 2.0 / 3, 1.0 / 3 }, 2);
    p.typical_p = 0.2f;   /* the most likely token is not typical: { 1 } alone */
    expect_kept(&p, l, 4, (const recur_token[]){ 1 }, (const double[]){ 1.0 }, 1);
    p.temp = 0.001f;      /* the dropped token was the max: the weights are taken from the new max */
    expect_kept(&p, l, 4, (const recur_token[]){ 1 }, (const double[]){ 1.0 }, 1);
    p.temp = 1.0f;
    p.min_keep = 3;       /* ... unless min_keep asks for three: 1, 0 and 2 (before 3: lower id) */
    expect_kept(&p, l, 4, (const recur_token[]){ 0, 1, 2 }, (const double[]){ 0.5 / 0.875, 0.25 / 0.875, 0.125 / 0.875 }, 3);
    p.min_keep = 0;
    p.typical_p = 0.8f;
    expect_kept(&p, l, 4, (const recur_token[]){ 0, 1, 2 }, NULL, 3);
    p.typical_p = 1.0f;   /* off */
    expect_kept(&p, l, 4, (const recur_token[]){ 0, 1, 2, 3 }, (const double[]){ 0.5, 0.25, 0.125, 0.125 }, 4);
}

/* p by id = { 0.1, 0.4, 0.2, 0.3 }: by probability 1, 3, 2, 0 with running mass .4, .7, .9, 1 */
static void test_top_p(void **state) {
    (void)state;
    const float l[4] = { logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f) };
    recur_sampler_params p = plain();
    p.top_p = 0.65f;
    expect_kept(&p, l, 4, (const recur_token[]){ 1, 3 }, (const double[]){ 4.0 / 7, 3.0 / 7 }, 2);
    p.top_p = 0.35f;
    expect_kept(&p, l, 4, (const recur_token[]){ 1 }, (const double[]){ 1.0 }, 1);
    p.min_keep = 3;
    expect_kept(&p, l, 4, (const recur_token[]){ 1, 3, 2 }, (const double[]){ 4.0 / 9, 3.0 / 9, 2.0 / 9 }, 3);
    p.min_keep = 0;
    p.top_p = 0.95f;
    expect_kept(&p, l, 4, (const recur_token[]){ 1, 3, 2, 0 }, NULL, 4);
    p.top_k = 3;          /* the same cut over the top-k heap's sorted candidates */
    p.top_p = 0.65f;
    expect_kept(&p, l, 4, (const recur_token[]){ 1, 3 }, NULL, 2);
}

/* Many equal logits: the cut needs more than the first sorted block (256), and ties keep the
 * lower ids. 2048 of 4096 reach mass 0.5. */
static void test_top_p_long(void **state) {
    (void)state;
    enum { N = 4096 };
    float *l = calloc(N, sizeof *l);
    recur_sampler_params p = plain();
    p.top_p = 0.4999f;
    recur_sampler *s = recur_sampler_new(&p, N);
    recur_token *ids = malloc(N * sizeof *ids);
    float *probs = malloc(N * sizeof *probs);
    assert_int_equal(sample_chain(s, l, ids, probs, N), 2048);
    for (int i = 0; i < 2048; i++) {
        assert_int_equal(ids[i], i);
        assert_float_equal(probs[i], 1.0 / 2048, 1e-9);
    }
    recur_sampler_free(s);
    free(l);
    free(ids);
    free(probs);
}

/* p / p_max by id = { 1, .5, .1, .04, .3 } */
static void test_min_p(void **state) {
    (void)state;
    const float l[5] = { 0.0f, logf(0.5f), logf(0.1f), logf(0.04f), logf(0.3f) };
    for (int sorted = 0; sorted < 2; sorted++) {   /* unsorted candidates, then the top-k heap's */
        recur_sampler_params p = plain();
        p.top_k = sorted ? 4 : 0;
        p.min_p = 0.2f;
        expect_kept(&p, l, 5, (const recur_token[]){ 0, 1, 4 }, (const double[]){ 1 / 1.8, 0.5 / 1.8, 0.3 / 1.8 }, 3);
        p.min_p = 0.05f;
        expect_kept(&p, l, 5, (const recur_token[]){ 0, 1, 4, 2 }, NULL, 4);
        p.min_p = 0.6f;
        expect_kept(&p, l, 5, (const recur_token[]){ 0 }, (const double[]){ 1.0 }, 1);
        p.min_keep = 2;
        expect_kept(&p, l, 5, (const recur_token[]){ 0, 1 }, NULL, 2);
        p.min_keep = 10;   /* more than there are: all (top_k leaves 4) */
        expect_kept(&p, l, 5, (const recur_token[]){ 0, 1, 4, 2, 3 }, NULL, sorted ? 4 : 5);
    }
}

static void test_temperature(void **state) {
    (void)state;
    const float l[3] = { 1.0f, 2.0f, 3.0f };
    recur_sampler_params p = plain();
    p.temp = 2.0f;   /* p ~ exp(l / 2) */
    double z = exp(0.5) + exp(1.0) + exp(1.5);
    expect_kept(&p, l, 3, (const recur_token[]){ 2, 1, 0 }, (const double[]){ exp(1.5) / z, exp(1.0) / z, exp(0.5) / z }, 3);
    p.temp = 0.5f;   /* p ~ exp(2 l) */
    z = exp(2.0) + exp(4.0) + exp(6.0);
    expect_kept(&p, l, 3, (const recur_token[]){ 2, 1, 0 }, (const double[]){ exp(6.0) / z, exp(4.0) / z, exp(2.0) / z }, 3);
}

/* The chain's order: top_k before top_p, top_p before temperature. */
static void test_chain_order(void **state) {
    (void)state;
    /* p = { .5, .3, .2 }: top_k 2 leaves { .625, .375 }, so top_p .6 keeps one token (the other
     * way round, top_p .6 would keep two) */
    const float a[3] = { logf(0.5f), logf(0.3f), logf(0.2f) };
    recur_sampler_params p = plain();
    p.top_k = 2;
    p.top_p = 0.6f;
    expect_kept(&p, a, 3, (const recur_token[]){ 0 }, NULL, 1);
    /* p = { .6, .3, .1 }: top_p .85 keeps two; temperature 10 then flattens them. Applied first,
     * it would have flattened all three (~{.36, .33, .30}) and top_p would keep all. */
    const float b[3] = { logf(0.6f), logf(0.3f), logf(0.1f) };
    p = plain();
    p.top_p = 0.85f;
    p.temp = 10.0f;
    const double w0 = pow(0.6, 0.1), w1 = pow(0.3, 0.1);
    expect_kept(&p, b, 3, (const recur_token[]){ 0, 1 }, (const double[]){ w0 / (w0 + w1), w1 / (w0 + w1) }, 2);
    /* typical before top_p: p = { .5, .25, .125, .125 }; typical .5 keeps { 0, 1 } = { 2/3, 1/3 },
     * and top_p .7 then keeps both. The other way round, top_p keeps { 0, 1 } and typical .5
     * then drops token 1. */
    const float c[4] = { logf(0.5f), logf(0.25f), logf(0.125f), logf(0.125f) };
    p = plain();
    p.typical_p = 0.5f;
    p.top_p = 0.7f;
    expect_kept(&p, c, 4, (const recur_token[]){ 0, 1 }, (const double[]){ 2.0 / 3, 1.0 / 3 }, 2);
    /* penalties before top_k: the penalized token falls out of the top 1 */
    p = plain();
    p.top_k = 1;
    p.penalty_last_n = 4;
    p.penalty_repeat = 4.0f;
    recur_sampler *s = recur_sampler_new(&p, 3);
    recur_sampler_accept(s, 0);   /* l0 = log .6 < 0: times 4 */
    for (int i = 0; i < 20; i++) assert_int_equal(recur_sampler_sample(s, b), 1);
    recur_sampler_free(s);
}

/* The draw follows the probabilities: 40000 seeded draws, frequencies within 1%. */
static void test_draw_frequencies(void **state) {
    (void)state;
    const float l[4] = { logf(0.1f), logf(0.4f), logf(0.2f), logf(0.3f) };
    recur_sampler_params p = plain();
    p.seed = 7;
    recur_sampler *s = recur_sampler_new(&p, 4);
    int hits[4] = { 0 };
    for (int i = 0; i < 40000; i++) hits[recur_sampler_sample(s, l)]++;
    const double want[4] = { 0.1, 0.4, 0.2, 0.3 };
    for (int i = 0; i < 4; i++) assert_float_equal(hits[i] / 40000.0, want[i], 0.01);
    recur_sampler_free(s);
}

/* Same seed + history + logits, same tokens, over a large vocabulary with ties, for every
 * path of the chain (heap top-k, full array, typical's re-sort). */
static void test_determinism(void **state) {
    (void)state;
    enum { N = 20000 };
    float *l = malloc(N * sizeof *l);
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        l[i] = (float)(x >> 24) / 16.0f;   /* 256 levels: many ties */
    }
    const int32_t ks[3] = { 40, 0, 0 };
    const float typ[3] = { 1.0f, 1.0f, 0.95f };
    for (int v = 0; v < 3; v++) {
        recur_sampler_params p = recur_sampler_default_params();
        p.top_k = ks[v];
        p.typical_p = typ[v];
        p.min_p = 0.01f;
        p.penalty_last_n = 16;
        p.penalty_repeat = 1.3f;
        recur_sampler *a = recur_sampler_new(&p, N), *b = recur_sampler_new(&p, N);
        for (int i = 0; i < 5; i++) { recur_sampler_accept(a, i * 7); recur_sampler_accept(b, i * 7); }
        for (int i = 0; i < 60; i++) {
            const recur_token t = recur_sampler_sample(a, l);
            assert_int_equal(t, recur_sampler_sample(b, l));
            assert_true(t >= 0 && t < N);
            recur_sampler_accept(a, t);
            recur_sampler_accept(b, t);
        }
        recur_sampler_free(a);
        recur_sampler_free(b);
    }
    free(l);
}

/* ---- candidate ordering -------------------------------------------------------------------- */

static bool reference_before(const sample_cand *a, const sample_cand *b) {
    return a->key > b->key || (a->key == b->key && a->id < b->id);
}

/* Arrangements that trip simple quicksorts: candidate i of shape s, ids permuted. */
static sample_cand shaped(int shape, int32_t i, int32_t n) {
    float k = 0;
    switch (shape) {
    case 0: k = (float)i; break;                           /* ascending: the worst first */
    case 1: k = (float)(n - i); break;                     /* already in order */
    case 2: k = 1.0f; break;                               /* all tied: by id */
    case 3: k = (float)((i * 7919) % 97); break;           /* many ties */
    default: k = (float)(i % 2 ? i : n - i); break;        /* organ pipe */
    }
    return (sample_cand){ k, k, 1.0f, (i * 7) % n };
}

/* sample_cand_select and the top-k heap against a plain insertion sort */
static void test_cand_select(void **state) {
    (void)state;
    enum { N = 3000 };
    sample_cand *c = malloc(N * sizeof *c), *ref = malloc(N * sizeof *ref);
    const int32_t ks[5] = { 1, 17, 256, 2999, 3000 };
    for (int shape = 0; shape < 5; shape++) {
        for (int32_t i = 0; i < N; i++) ref[i] = shaped(shape, i, N);
        for (int32_t i = 1; i < N; i++) {
            const sample_cand y = ref[i];
            int32_t j = i;
            while (j > 0 && reference_before(&y, &ref[j - 1])) { ref[j] = ref[j - 1]; j--; }
            ref[j] = y;
        }
        for (int ki = 0; ki < 5; ki++) {
            for (int32_t i = 0; i < N; i++) c[i] = shaped(shape, i, N);
            sample_cand_select(c, N, ks[ki]);
            for (int32_t i = 0; i < ks[ki]; i++) assert_int_equal(c[i].id, ref[i].id);
        }
        int32_t n = 0;
        for (int32_t i = 0; i < N; i++) sample_cand_heap_offer(c, &n, 50, shaped(shape, i, N));
        sample_cand_heap_sort(c, n);
        assert_int_equal(n, 50);
        for (int32_t i = 0; i < 50; i++) assert_int_equal(c[i].id, ref[i].id);
    }
    free(c);
    free(ref);
}

static int cmp_id(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* sample_cand_mass_select against a walk in sorted order. Integer weights keep every sum exact,
 * so the cut (strict or not, targets landing exactly on a sum) must be the same. */
static void test_cand_mass_select(void **state) {
    (void)state;
    enum { N = 3000 };
    sample_cand *c = malloc(N * sizeof *c), *ref = malloc(N * sizeof *ref);
    for (int shape = 0; shape < 5; shape++) {
        double total = 0;
        for (int32_t i = 0; i < N; i++) {
            ref[i] = shaped(shape, i, N);
            ref[i].w = (float)(1 + (i * 13) % 5);
            total += ref[i].w;
        }
        memcpy(c, ref, N * sizeof *c);
        sample_cand_select(ref, N, N);
        const double targets[6] = { 0, 1, 2, total * 0.5, total * 0.999, total };
        for (int t = 0; t < 12; t++) {
            const bool strict = t >= 6;
            const int32_t min_keep = t % 3 == 0 ? 40 : 1;
            int32_t want = N;
            double cum = 0;
            for (int32_t i = 0; i < N; i++) {
                cum += ref[i].w;
                if ((strict ? cum > targets[t % 6] : cum >= targets[t % 6]) && i + 1 >= min_keep) { want = i + 1; break; }
            }
            const int32_t m = sample_cand_mass_select(c, N, targets[t % 6], strict, min_keep);
            assert_int_equal(m, want);
            qsort(c, (size_t)m, sizeof *c, cmp_id);   /* the kept run is a set: compare it sorted by id */
            sample_cand *r = malloc((size_t)m * sizeof *r);
            memcpy(r, ref, (size_t)m * sizeof *r);
            qsort(r, (size_t)m, sizeof *r, cmp_id);
            for (int32_t i = 0; i < m; i++) assert_int_equal(c[i].id, r[i].id);
            free(r);
        }
    }
    free(c);
    free(ref);
}

/* ---- log-probabilities ------------------------------------------------------------------- */

static void test_logprobs(void **state) {
    (void)state;
    const float l[4] = { 1.0f, 3.0f, 3.0f, 0.0f };
    const double lse = log(exp(1.0) + 2 * exp(3.0) + 1.0);
    assert_float_equal(recur_logprob_of(l, 4, 0), 1.0 - lse, EPS);
    assert_float_equal(recur_logprob_of(l, 4, 3), -lse, EPS);
    assert_true(isinf(recur_logprob_of(l, 4, 4)) && recur_logprob_of(l, 4, 4) < 0);
    assert_true(isinf(recur_logprob_of(l, 4, -1)));
    recur_token ids[8];
    float lp[8];
    assert_int_equal(recur_logprobs_top(l, 4, 3, ids, lp), 3);
    assert_int_equal(ids[0], 1);   /* tie: lower id first */
    assert_int_equal(ids[1], 2);
    assert_int_equal(ids[2], 0);
    assert_float_equal(lp[0], 3.0 - lse, EPS);
    assert_float_equal(lp[2], 1.0 - lse, EPS);
    assert_int_equal(recur_logprobs_top(l, 4, 8, ids, lp), 4);   /* clamped to the vocabulary */
    assert_int_equal(ids[3], 3);
    double sum = 0;
    for (int i = 0; i < 4; i++) sum += exp(lp[i]);
    assert_float_equal(sum, 1.0, EPS);
    assert_int_equal(recur_logprobs_top(l, 4, 0, ids, lp), 0);
    const float q[3] = { 0.5f, 0.5f, 0.5f };   /* all tied: ids in order */
    assert_int_equal(recur_logprobs_top(q, 3, 2, ids, lp), 2);
    assert_int_equal(ids[0], 0);
    assert_int_equal(ids[1], 1);
    assert_float_equal(lp[0], log(1.0 / 3), EPS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_ties),      cmocka_unit_test(test_seed_repeats),
        cmocka_unit_test(test_logit_bias),       cmocka_unit_test(test_logit_bias_invalid),
        cmocka_unit_test(test_all_banned),       cmocka_unit_test(test_penalty_formulas),
        cmocka_unit_test(test_history_ring),     cmocka_unit_test(test_history_counts),
        cmocka_unit_test(test_set_history),
        cmocka_unit_test(test_top_k),            cmocka_unit_test(test_typical),
        cmocka_unit_test(test_top_p),            cmocka_unit_test(test_top_p_long),
        cmocka_unit_test(test_min_p),            cmocka_unit_test(test_temperature),
        cmocka_unit_test(test_chain_order),      cmocka_unit_test(test_draw_frequencies),
        cmocka_unit_test(test_determinism),      cmocka_unit_test(test_cand_select),      cmocka_unit_test(test_cand_mass_select),
        cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
