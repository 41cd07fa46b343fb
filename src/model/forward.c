#include "model/forward.h"

#include "tensor/ops.h"

/* Below this many elements a row-wise op runs on the caller alone (waking the workers would
 * cost more than it saves). */
#define FWD_MIN_PARALLEL 16384

void fwd_matmul(model_fwd *f, const model_w *w, const float *X, float *Y) {
    tensor_matmul(f->pool, f->kern, w->type, w->data, w->ne[0], w->ne[1], X, f->n_tok, Y, w->ne[1],
                  f->mm_scratch);
}

void fwd_matmul_n(model_fwd *f, const float *X, int n, const model_w *const *w, float *const *Y) {
    tensor_mm mm[TENSOR_MM_MAX];
    for (int i = 0; i < n; i++) mm[i] = (tensor_mm){ w[i]->type, w[i]->data, w[i]->ne[1], Y[i], w[i]->ne[1] };
    tensor_matmul_n(f->pool, f->kern, mm, n, w[0]->ne[0], X, f->n_tok, f->mm_scratch);
}

typedef struct fwd_norm_job {
    model_fwd   *f;
    float       *out;
    const float *in, *w;
    int64_t      n;
    float        eps;
} fwd_norm_job;

static void fwd_norm_rows(void *arg, int ith, int nth) {
    const fwd_norm_job *j = arg;
    long lo, hi;
    tp_split(j->f->n_tok, ith, nth, 1, &lo, &hi);
    op_rmsnorm_rows(j->f->kern, j->out + lo * j->n, j->in + lo * j->n, j->w, j->n, hi - lo, j->n, j->eps);
}

/* Each row is one op_rmsnorm (a serial double sum) on one thread: tokens split over threads. */
void fwd_rmsnorm_rows(model_fwd *f, float *out, const float *in, const model_w *w, int64_t n, float eps) {
    fwd_norm_job j = { f, out, in, w ? (const float *)w->data : NULL, n, eps };
    if (f->n_tok > 1) tp_run(f->pool, fwd_norm_rows, &j);
    else fwd_norm_rows(&j, 0, 1);
}

typedef struct fwd_add_job {
    float       *x;
    const float *y;
    int64_t      n;
    int32_t      n_tok;
} fwd_add_job;

static void fwd_add_fn(void *arg, int ith, int nth) {
    const fwd_add_job *j = arg;
    long lo, hi;
    tp_split(j->n_tok, ith, nth, 1, &lo, &hi);
    op_add(j->x + lo * j->n, j->y + lo * j->n, (hi - lo) * j->n);
}

/* Token rows split over the threads (an element's add is the same on any of them): on the
 * caller alone the residual adds of a prompt batch left the other threads idle. */
void fwd_add_rows(model_fwd *f, float *x, const float *y, int64_t n) {
    fwd_add_job j = { x, y, n, f->n_tok };
    tp_run(f->n_tok > 1 && (int64_t)f->n_tok * n >= FWD_MIN_PARALLEL ? f->pool : NULL, fwd_add_fn, &j);
}

/* SwiGLU row by row (ggml's op works per row: the exp chunks start at each row), rows split
 * among the threads. */
typedef struct swiglu_job {
    const tensor_kernels *k;
    float       *g;
    const float *u;
    int64_t      n;
    int32_t      n_tok;
} swiglu_job;

static void swiglu_rows_fn(void *arg, int ith, int nth) {
    const swiglu_job *j = arg;
    long lo, hi;
    tp_split(j->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++) op_swiglu(j->k, j->g + t * j->n, j->g + t * j->n, j->u + t * j->n, j->n);
}

void fwd_swiglu_rows(model_fwd *f, float *g, const float *u, int64_t n) {
    swiglu_job j = { f->kern, g, u, n, f->n_tok };
    tp_run(f->n_tok > 1 && (int64_t)f->n_tok * n >= FWD_MIN_PARALLEL ? f->pool : NULL, swiglu_rows_fn, &j);
}
