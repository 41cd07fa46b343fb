#include "model/forward.h"

#include "tensor/ops.h"

void fwd_matmul(model_fwd *f, const model_w *w, const float *X, float *Y) {
    tensor_matmul(f->pool, f->kern, w->type, w->data, w->ne[0], w->ne[1], X, f->n_tok, Y, w->ne[1],
                  f->mm_scratch);
}

void fwd_rmsnorm_rows(model_fwd *f, float *out, const float *in, const model_w *w, int64_t n, float eps) {
    for (int32_t t = 0; t < f->n_tok; t++)
        op_rmsnorm(out + (int64_t)t * n, in + (int64_t)t * n, w ? (const float *)w->data : NULL, n, eps);
}

void fwd_add_rows(model_fwd *f, float *x, const float *y, int64_t n) {
    op_add(x, y, (int64_t)f->n_tok * n);
}
