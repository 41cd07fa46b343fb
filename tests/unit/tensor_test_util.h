/* tensor_test_util.h — what the tensor tests share: a splitmix64 generator with the value
 * shapes they draw, and the kernel tables of this CPU. Header-only (static inline): each test
 * executable gets its own copy. */
#ifndef RECUR_TENSOR_TEST_UTIL_H
#define RECUR_TENSOR_TEST_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"

/* A zeroed block of n bytes (at least one); the test fails when there is no memory. */
static inline void *xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return p;
}

typedef struct rng { uint64_t s; } rng;

static inline uint64_t rng_u64(rng *r) {   /* splitmix64 */
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static inline double rng_unif(rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

/* uniform in [-1, 1) */
static inline float rng_f(rng *r) { return (float)(2.0 * rng_unif(r) - 1.0); }

static inline float rng_gauss(rng *r) {
    const double u = rng_unif(r) + 1e-300, v = rng_unif(r);
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Values of mixed sign and magnitude (a few large ones), so that sums in another order would
 * round differently. */
static inline float rng_val(rng *r) {
    const float u = (float)((double)(rng_u64(r) >> 11) / 9007199254740992.0) * 2.0f - 1.0f;
    return (rng_u64(r) & 15) == 0 ? u * 37.0f : u;
}

/* Gaussian with a per-32 scale e^(u * 2e - e) * 0.3 (u uniform: e = 1 spans about one order
 * of magnitude, e = 2 two) and rare 8x outliers: what quantizers and dots meet in real rows. */
static inline void fill_rough_spread(rng *r, float *x, int64_t n, float e) {
    for (int64_t i = 0; i < n; i += 32) {
        const float s = expf(2.0f * e * (float)rng_unif(r) - e) * 0.3f;
        for (int64_t j = i; j < i + 32 && j < n; j++) {
            x[j] = s * rng_gauss(r);
            if ((rng_u64(r) & 255) == 0) x[j] *= 8.0f;
        }
    }
}

/* The scalar table first, then every SIMD table this CPU has. */
/* A finite fp16 of either sign between 2^-12 and 2^3 (a weight scale). */
static inline uint16_t rand_scale(rng *r) {
    const float m = ldexpf(1.0f + (float)rng_unif(r), (int)(rng_u64(r) % 16) - 12);
    return rt_f32_to_f16((rng_u64(r) & 1) ? -m : m);
}

static inline int get_tables(const tensor_kernels *t[3]) {
    int n = 0;
    t[n++] = tensor_kernels_scalar();
    if (tensor_kernels_avx2()) t[n++] = tensor_kernels_avx2();
    if (tensor_kernels_avx512()) t[n++] = tensor_kernels_avx512();
    return n;
}

/* A gemv's groups of n_rows rows computed in pieces of 1-3 groups (tensor.h gemv): every piece
 * writes at least one row, no row another piece writes and none past n_rows, each with the
 * bits of the whole call (full); together the pieces write every row. A cmocka test: fails
 * through fail_msg, naming `what`. */
static inline void check_gemv_pieces(tensor_gemv gv, int64_t n, const void *w, size_t ws, const void *x, int64_t n_rows,
                                     const float *full, rng *r, const char *what) {
    static const uint32_t unset = 0x7FC0BEEFu;   /* a NaN no dot returns: an output not written */
    const int64_t ng = tensor_gemv_groups(n_rows, gv.group), ny = n_rows + 4;
    float *y = malloc((size_t)ny * 4);
    int *piece_of = malloc((size_t)ny * sizeof *piece_of);
    if (!y || !piece_of) fail_msg("%s: out of memory", what);
    for (int64_t o = 0; o < ny; o++) piece_of[o] = -1;
    int piece = 0;
    for (int64_t g0 = 0; g0 < ng; piece++) {
        int64_t g1 = g0 + 1 + (int64_t)(rng_u64(r) % 3), wrote = 0;
        if (g1 > ng) g1 = ng;
        for (int64_t o = 0; o < ny; o++) memcpy(&y[o], &unset, 4);
        gv.fn(n, w, ws, n_rows, g0, g1, x, y);
        for (int64_t o = 0; o < ny; o++) {
            if (memcmp(&y[o], &unset, 4) == 0) continue;
            wrote++;
            if (o >= n_rows || piece_of[o] >= 0 || memcmp(&y[o], &full[o], 4) != 0)
                fail_msg("%s rows %lld groups [%lld, %lld): y[%lld] %a (whole call %a, earlier piece %d)", what,
                         (long long)n_rows, (long long)g0, (long long)g1, (long long)o, y[o],
                         o < n_rows ? full[o] : 0.0f, piece_of[o]);
            piece_of[o] = piece;
        }
        if (!wrote)
            fail_msg("%s rows %lld: groups [%lld, %lld) wrote nothing", what, (long long)n_rows, (long long)g0,
                     (long long)g1);
        g0 = g1;
    }
    for (int64_t o = 0; o < n_rows; o++)
        if (piece_of[o] < 0) fail_msg("%s rows %lld: no group wrote y[%lld]", what, (long long)n_rows, (long long)o);
    free(y);
    free(piece_of);
}

#endif
