/* norm_ref.c — the sums of squares of the norms (tensor.h sumsq_rows), the scalar reference:
 * each row's serial double sum, four rows' chains side by side (independent adds, so the
 * latency of one chain hides behind the others; each row's additions stay in index order). */
#include "tensor/tensor_impl.h"

void rt_sumsq_rows(int64_t n, const float *x, int64_t stride, int64_t rows, double *s) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *x0 = x + r * stride, *x1 = x0 + stride, *x2 = x1 + stride, *x3 = x2 + stride;
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
        for (int64_t i = 0; i < n; i++) {
            s0 += (double)(x0[i] * x0[i]);
            s1 += (double)(x1[i] * x1[i]);
            s2 += (double)(x2[i] * x2[i]);
            s3 += (double)(x3[i] * x3[i]);
        }
        s[r] = s0;
        s[r + 1] = s1;
        s[r + 2] = s2;
        s[r + 3] = s3;
    }
    for (; r < rows; r++) {
        const float *xr = x + r * stride;
        double a = 0.0;
        for (int64_t i = 0; i < n; i++) a += (double)(xr[i] * xr[i]);
        s[r] = a;
    }
}
