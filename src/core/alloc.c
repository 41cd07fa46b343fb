#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *rc_alloc_aligned(size_t n) {
    size_t sz = (n + RC_ALIGN - 1) / RC_ALIGN * RC_ALIGN;
    if (sz < n) return NULL;
    if (sz == 0) sz = RC_ALIGN;
    return aligned_alloc(RC_ALIGN, sz);
}

void *rc_calloc_aligned(size_t n) {
    void *p = rc_alloc_aligned(n);
    if (p) memset(p, 0, n);
    return p;
}

void rc_free_aligned(void *p) { free(p); }

int rc_mul_size(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int rc_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}
