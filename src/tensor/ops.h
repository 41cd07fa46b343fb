/* ops.h — element-wise and per-row operations of the forward pass.
 *
 * Every op works on one token row at a time with a fixed, sequential reduction order, so its
 * result never depends on the batch it runs in. Rows are contiguous floats; y may alias x
 * unless a function says otherwise. */
#ifndef RECUR_TENSOR_OPS_H
#define RECUR_TENSOR_OPS_H

#include <math.h>
#include <stdint.h>

#include "tensor/tensor.h"

/* y = x / sqrt(mean(x^2) + eps) * w   (w may be NULL: no weight). The sum of squares is
 * accumulated in double, in index order. */
void op_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

/* x /= max(||x||_2, eps)  (L2 normalisation, ggml_l2_norm semantics). */
void op_l2norm(float *x, int64_t n, float eps);

/* op_rmsnorm of `rows` rows of n floats, `stride` floats apart in x and in y (one weight w for
 * all), and op_l2norm of `rows` contiguous rows: the same bits as one call per row, faster
 * (the rows' sums run side by side: k's sumsq_rows). */
void op_rmsnorm_rows(const tensor_kernels *k, float *y, const float *x, const float *w, int64_t n, int64_t rows,
                     int64_t stride, float eps);
void op_l2norm_rows(const tensor_kernels *k, float *x, int64_t n, int64_t rows, float eps);

/* Rotary position embedding on the first n_rot dims of one head of head_dim floats.
 * NORM pairs (2i, 2i+1); NEOX pairs (i, i + n_rot/2). theta_i = pos * base^(-2i/n_rot),
 * divided by freq_factors[i] when freq_factors != NULL. Dims >= n_rot pass through. */
typedef enum op_rope_kind { OP_ROPE_NORM = 0, OP_ROPE_NEOX = 2 } op_rope_kind;

/* Per-position table: cos/sin of n_rot/2 angles (ggml's incremental theta, in float), for
 * position pos * freq_scale (freq_scale = 1 / linear scaling factor). */
void op_rope_cache(float *cos_sin, int32_t pos, int n_rot, float base, float freq_scale,
                   const float *freq_factors);
/* Applies a cache from op_rope_cache to one head: x0*c - x1*s and x0*s + x1*c with the
 * first product fused (fmaf), as ggml's compiled kernel does. */
void op_rope_apply(const tensor_kernels *k, float *head, const float *cos_sin, int n_rot, op_rope_kind kind);

/* Where ggml's AVX-512 build computes an exp, SiLU or SwiGLU with its vectorised expf (the
 * kernel table's exp_f32 / silu_f32 / swiglu_f32) and where with libm's expf: each row of its
 * soft_max, silu and swiglu ops goes in chunks of OP_GGML_LANES from element 0 through the
 * vector code and the last n % OP_GGML_LANES elements through libm. Its sigmoid, softplus and
 * exp ops, the SSM scan and the gated delta net use libm for every element (op_silu1 and expf
 * in the blocks). Index-dependent, so every op here takes the row length n. */
#define OP_GGML_LANES 16

/* In-place softmax over one row of n values, max-subtracted, in ggml's order (ops.c): the
 * exps of each chunk of 16 summed in float as a tree, the chunk sums and the tail in double. */
void op_softmax(const tensor_kernels *k, float *x, int64_t n);
/* op_softmax without its last step: leaves the exps in x and returns inv, the factor
 * op_softmax multiplies them by (so x[i] * inv is op_softmax's x[i]). */
float op_softmax_exp(const tensor_kernels *k, float *x, int64_t n);

/* y[i] = silu(x[i]) for i in [lo, hi) of a row of n values (x, y point at the row), each
 * element as ggml's silu op computes it on that row; y may be x. */
void op_silu_part(const tensor_kernels *k, float *y, const float *x, int64_t n, int64_t lo, int64_t hi);
/* y[i] = silu(x[i]) * g[i] for i in [lo, hi) of a row of n, as ggml's swiglu op (x: the gate
 * half); y may be x or g. */
void op_swiglu_part(const tensor_kernels *k, float *y, const float *x, const float *g, int64_t n, int64_t lo,
                    int64_t hi);

/* The whole row. */
static inline void op_silu(const tensor_kernels *k, float *y, const float *x, int64_t n) {
    op_silu_part(k, y, x, n, 0, n);
}
static inline void op_swiglu(const tensor_kernels *k, float *y, const float *x, const float *g, int64_t n) {
    op_swiglu_part(k, y, x, g, n, 0, n);
}

/* y[i] += x[i]; y and x do not overlap */
void op_add(float *restrict y, const float *restrict x, int64_t n);

/* silu(x) = x * sigmoid(x) with libm's expf (ggml_silu_f32: the scalar tails of ggml's rows) */
static inline float op_silu1(float x) { return x / (1.0f + expf(-x)); }

#endif
