/* ref_model.h — loading a shared test model in the reference tests (after cmocka.h). */
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

#endif
