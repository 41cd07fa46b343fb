/* scan_avx512.c — the recurrent scan steps of scan_ref.c on 16-lane vectors: the 64 lanes of
 * the reference are four accumulators (lanes 0-15, 16-31, 32-47, 48-63), reduced in the
 * reference's tree; tails go element by element as there. Same operations, same bits.
 * Any sizes, no alignment. */
#include <math.h>

#include "tensor/x86/simd_x86.h"

/* rt_scan_reduce64 of the four accumulators. */
static inline float red64(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 v = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    return x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* Row by row (rt_gdn_step): decay and dot with k, then the rank-1 update and dot with q. */
static void gdn_step(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                     float scale, float *o) {
    const int64_t np = d & ~(int64_t)63;
    const __m512 vdec = _mm512_set1_ps(decay);
    for (int64_t j = 0; j < d; j++) {
        float *row = S + j * d;
        __m512 a[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        for (int64_t i = 0; i < np; i += 64)
            for (int c = 0; c < 4; c++) {
                const __m512 r = _mm512_mul_ps(_mm512_loadu_ps(row + i + 16 * c), vdec);
                _mm512_storeu_ps(row + i + 16 * c, r);
                a[c] = _mm512_fmadd_ps(r, _mm512_loadu_ps(k + i + 16 * c), a[c]);
            }
        float sum = red64(a[0], a[1], a[2], a[3]);
        for (int64_t i = np; i < d; i++) {
            row[i] *= decay;
            sum += row[i] * k[i];
        }
        const float delta = (v[j] - sum) * beta;
        const __m512 vd = _mm512_set1_ps(delta);
        __m512 b[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        for (int64_t i = 0; i < np; i += 64)
            for (int c = 0; c < 4; c++) {
                const __m512 r = _mm512_fmadd_ps(_mm512_loadu_ps(k + i + 16 * c), vd, _mm512_loadu_ps(row + i + 16 * c));
                _mm512_storeu_ps(row + i + 16 * c, r);
                b[c] = _mm512_fmadd_ps(r, _mm512_loadu_ps(q + i + 16 * c), b[c]);
            }
        float out = red64(b[0], b[1], b[2], b[3]);
        for (int64_t i = np; i < d; i++) {
            row[i] = fmaf(k[i], delta, row[i]);
            out += row[i] * q[i];
        }
        o[j] = out * scale;
    }
}

static void ssm2_rows(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                      const float *x, float *y) {
    const int64_t np = ds & ~(int64_t)63;
    const __m512 va = _mm512_set1_ps(dA);
    for (int64_t p = 0; p < n; p++, s += ds) {
        const float x_dt = x[p] * dt;
        const __m512 vx = _mm512_set1_ps(x_dt);
        __m512 a[4] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps() };
        for (int64_t i = 0; i < np; i += 64)
            for (int c = 0; c < 4; c++) {
                const int64_t e = i + 16 * c;
                const __m512 st = _mm512_fmadd_ps(_mm512_loadu_ps(s + e), va, _mm512_mul_ps(_mm512_loadu_ps(B + e), vx));
                a[c] = _mm512_fmadd_ps(st, _mm512_loadu_ps(C + e), a[c]);
                _mm512_storeu_ps(s + e, st);
            }
        float sum = red64(a[0], a[1], a[2], a[3]);
        for (int64_t i = np; i < ds; i++) {
            const float st = fmaf(s[i], dA, B[i] * x_dt);
            sum = fmaf(st, C[i], sum);
            s[i] = st;
        }
        y[p] = sum;
    }
}

/* rt_conv_step, 16 channels per vector (the weights of a channel are K apart: gathered); the
 * channels past the last whole vector as there. */
static void conv_step(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                      float *out) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32(K));
    int64_t ch = lo;
    for (; ch + 16 <= hi; ch += 16) {
        const float *wc = w + ch * K;
        __m512 sum = _mm512_setzero_ps();
        for (int k = 0; k < K - 1; k++) {
            const float *p = wc + k;
            sum = _mm512_fmadd_ps(_mm512_loadu_ps(state + k * C + ch), _mm512_i32gather_ps(idx, p, 4), sum);
        }
        const float *p = wc + K - 1;
        const __m512 v = _mm512_loadu_ps(in + ch);
        sum = _mm512_fmadd_ps(v, _mm512_i32gather_ps(idx, p, 4), sum);
        for (int k = 0; k < K - 2; k++) _mm512_storeu_ps(state + k * C + ch, _mm512_loadu_ps(state + (k + 1) * C + ch));
        if (K > 1) _mm512_storeu_ps(state + (int64_t)(K - 2) * C + ch, v);
        _mm512_storeu_ps(out + ch, sum);
    }
    for (; ch < hi; ch++) {
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

void rt_fill_scan_avx512(tensor_kernels *k) {
    k->gdn_step = gdn_step;
    k->ssm2_rows = ssm2_rows;
    k->conv_step = conv_step;
}
