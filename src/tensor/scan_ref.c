/* scan_ref.c — the per-token steps of the recurrent scans, one float at a time: the oracle
 * of x86/scan_avx2.c and x86/scan_avx512.c (tensor.h: gdn_step, ssm2_rows, ssm1_step, conv_step).
 *
 * Their sums over the state dimension follow ggml's CPU kernels built for AVX-512 (the fused
 * GATED_DELTA_NET op's ggml_vec_dot_f32 and ssm_scan's Mamba-2 loop): 64 lanes, element i of
 * each whole block of 64 goes to lane i % 64 with a fused multiply-add, then the lanes are
 * reduced as rt_scan_reduce64 says, then the n % 64 tail elements follow in order. */
#include <math.h>

#include "tensor/tensor_impl.h"

float rt_scan_reduce64(const float acc[64]) {
    float v[16];
    for (int l = 0; l < 16; l++) v[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);
    return rt_hsum16_ggml(v);
}

/* Σ a[i] b[i]: lanes over whole blocks of 64, the tail as products added in order. */
static float dot64(const float *a, const float *b, int64_t n) {
    float acc[64] = { 0 };
    const int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64)
        for (int l = 0; l < 64; l++) acc[l] = fmaf(a[i + l], b[i + l], acc[l]);
    float sum = rt_scan_reduce64(acc);
    for (int64_t i = np; i < n; i++) sum += a[i] * b[i];
    return sum;
}

void rt_gdn_step(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                 float scale, float *o) {
    /* Row j only ever meets v[j] and o[j], so the rows are stepped one after the other. */
    for (int64_t j = 0; j < d; j++) {
        float *row = S + j * d;
        for (int64_t i = 0; i < d; i++) row[i] *= decay;
        const float delta = (v[j] - dot64(row, k, d)) * beta;
        for (int64_t i = 0; i < d; i++) row[i] = fmaf(k[i], delta, row[i]);
        o[j] = dot64(row, q, d) * scale;
    }
}

void rt_ssm2_rows(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                  const float *x, float *y) {
    const int64_t np = ds & ~(int64_t)63;
    for (int64_t p = 0; p < n; p++, s += ds) {
        const float x_dt = x[p] * dt;
        float acc[64] = { 0 };
        for (int64_t i = 0; i < np; i += 64)
            for (int l = 0; l < 64; l++) {
                const float st = fmaf(s[i + l], dA, B[i + l] * x_dt);
                acc[l] = fmaf(st, C[i + l], acc[l]);
                s[i + l] = st;
            }
        float sum = rt_scan_reduce64(acc);
        for (int64_t i = np; i < ds; i++) {
            const float st = fmaf(s[i], dA, B[i] * x_dt);
            sum = fmaf(st, C[i], sum);
            s[i] = st;
        }
        y[p] = sum;
    }
}

void rt_ssm1_step(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C, const float *dt,
                  const float *x, float *y) {
    for (int64_t c = 0; c < n; c++, s += ds, A += ds) {
        const float dsp = rt_softplus_libm(dt[c]), x_dt = x[c] * dsp;
        float sum = 0.0f;
        for (int64_t i = 0; i < ds; i++) {
            const float st = fmaf(s[i], rt_expf_libm(dsp * A[i]), B[i] * x_dt);
            sum = fmaf(st, C[i], sum);
            s[i] = st;
        }
        y[c] = sum;
    }
}

void rt_conv_step(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                  float *out) {
    for (int64_t ch = lo; ch < hi; ch++) {
        const float *wc = w + ch * K;
        const float v = in[ch];
        float sum = 0.0f;
        for (int k = 0; k < K - 1; k++) sum = fmaf(state[k * C + ch], wc[k], sum);
        sum = fmaf(v, wc[K - 1], sum);
        for (int k = 0; k < K - 2; k++) state[k * C + ch] = state[(k + 1) * C + ch];
        if (K > 1) state[(int64_t)(K - 2) * C + ch] = v;
        out[ch] = sum;
    }
}

void rt_conv_run(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, int64_t n, const float *in,
                 int64_t in_stride, float *out, int64_t out_stride) {
    for (int64_t t = 0; t < n; t++) rt_conv_step(state, w, K, C, lo, hi, in + t * in_stride, out + t * out_stride);
}
