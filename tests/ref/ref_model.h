/* ref_model.h — loading a shared test model, and making a context of it, in the reference tests (after cmocka.h). */
#ifndef RECUR_TESTS_REF_MODEL_H
#define RECUR_TESTS_REF_MODEL_H

#include <stdio.h>

#include "recur.h"

/* ../shared/testdata/models/NAME.gguf with default parameters; the test fails if it cannot load. */
static inline recur_model *ref_load(const char *name) {
    char path[1024], err[256];
    snprintf(path, sizeof path, "%s/models/%s.gguf", RECUR_TESTDATA, name);
    recur_model *m = NULL;
    if (recur_model_load(path, NULL, &m, err, sizeof err)) fail_msg("%s: %s", path, err);
    return m;
}

/* A context of m: n_ctx cells, n_seq_max sequences, calls of n_batch tokens evaluated n_ubatch
 * at a time, on n_threads threads; the test fails if it cannot be made. */
static inline recur_ctx *ref_ctx(recur_model *m, uint32_t n_ctx, uint32_t n_seq_max, uint32_t n_batch,
                                 uint32_t n_ubatch, int n_threads) {
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_seq_max = n_seq_max;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_ubatch;
    cp.n_threads = n_threads;
    recur_ctx *ctx = NULL;
    char err[256];
    if (recur_ctx_new(m, &cp, &ctx, err, sizeof err)) fail_msg("ctx: %s", err);
    return ctx;
}

#endif
