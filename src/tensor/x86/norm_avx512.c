/* norm_avx512.c — rt_sumsq_rows (norm_ref.c) for short rows, as the L2 norms of the q and k
 * heads and the per-head RMS norms have them: 16 rows side by side, one double lane per row.
 * Each step loads 8 floats of each row (rows r and r + 8 in the two halves of one register),
 * squares them in float, transposes the two 8 × 8 blocks so that vector e holds element e of
 * every row, and adds its halves, widened to double, into two 8-lane accumulators, element by
 * element: lane r makes row r's additions in index order, so the bits are the reference's,
 * while 16 chains run at once instead of 4. Rows more than SQ_MAXS floats apart (16 streams a
 * kilobyte or more apart, which read slower than the reference's 4), the rows after the last
 * group of 8, and rows shorter than one step take the reference. */
#include "tensor/x86/simd_x86.h"

#define SQ_MAXS 256   /* the widest row stride (floats) taken here */
/* Wider strides 8 rows at a time (the gated and group norms of a prompt, rows 8 KB apart and
 * in cache) instead of the reference's 4: no gain (perf, mamba2-370m Q8_0 pp512: 1.39 % of the
 * samples against rt_sumsq_rows' 1.32 %). */

/* In: r[k] = [8 floats of row k | 8 of row k + 8]. Out: r[e] = [element e of rows 0-7 |
 * element e of rows 8-15]: an 8 × 8 transposition in each half. */
static inline void tr8x2(__m512 r[8]) {
    const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
    const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
    const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
    /* 128-bit lane l of u_e: element e (l even: 0-3, odd: 4-7) of 4 rows */
    const __m512d u0 = _mm512_castps_pd(_mm512_shuffle_ps(t0, t2, 0x44));
    const __m512d u1 = _mm512_castps_pd(_mm512_shuffle_ps(t0, t2, 0xEE));
    const __m512d u2 = _mm512_castps_pd(_mm512_shuffle_ps(t1, t3, 0x44));
    const __m512d u3 = _mm512_castps_pd(_mm512_shuffle_ps(t1, t3, 0xEE));
    const __m512d u4 = _mm512_castps_pd(_mm512_shuffle_ps(t4, t6, 0x44));
    const __m512d u5 = _mm512_castps_pd(_mm512_shuffle_ps(t4, t6, 0xEE));
    const __m512d u6 = _mm512_castps_pd(_mm512_shuffle_ps(t5, t7, 0x44));
    const __m512d u7 = _mm512_castps_pd(_mm512_shuffle_ps(t5, t7, 0xEE));
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    r[0] = _mm512_castpd_ps(_mm512_permutex2var_pd(u0, lo, u4));
    r[1] = _mm512_castpd_ps(_mm512_permutex2var_pd(u1, lo, u5));
    r[2] = _mm512_castpd_ps(_mm512_permutex2var_pd(u2, lo, u6));
    r[3] = _mm512_castpd_ps(_mm512_permutex2var_pd(u3, lo, u7));
    r[4] = _mm512_castpd_ps(_mm512_permutex2var_pd(u0, hi, u4));
    r[5] = _mm512_castpd_ps(_mm512_permutex2var_pd(u1, hi, u5));
    r[6] = _mm512_castpd_ps(_mm512_permutex2var_pd(u2, hi, u6));
    r[7] = _mm512_castpd_ps(_mm512_permutex2var_pd(u3, hi, u7));
}

/* The rows' chains past the whole steps (elements nv..n), each continuing its own sum. */
static void finish(int64_t nv, int64_t n, const float *x, int64_t stride, int nr, double *s) {
    for (int k = 0; k < nr; k++) {
        const float *xk = x + k * stride;
        double a = s[k];
        for (int64_t i = nv; i < n; i++) a += (double)(xk[i] * xk[i]);
        s[k] = a;
    }
}

static void sumsq_rows(int64_t n, const float *x, int64_t stride, int64_t rows, double *s) {
    const int64_t nv = n & ~(int64_t)7;
    int64_t r = 0;
    if (stride <= SQ_MAXS && nv > 0) {
        for (; r + 16 <= rows; r += 16) {
            const float *xr = x + r * stride;
            __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
            for (int64_t i = 0; i < nv; i += 8) {
                __m512 z[8];
                for (int k = 0; k < 8; k++) {
                    const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(xr + k * stride + i)),
                                                        _mm256_loadu_ps(xr + (k + 8) * stride + i), 1);
                    z[k] = _mm512_mul_ps(v, v);
                }
                tr8x2(z);
                for (int e = 0; e < 8; e++) {
                    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(z[e])));
                    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(z[e], 1)));
                }
            }
            _mm512_storeu_pd(s + r, a0);
            _mm512_storeu_pd(s + r + 8, a1);
            finish(nv, n, xr, stride, 16, s + r);
        }
        for (; r + 8 <= rows; r += 8) {   /* the same with one half */
            const float *xr = x + r * stride;
            __m512d a0 = _mm512_setzero_pd();
            for (int64_t i = 0; i < nv; i += 8) {
                __m512 z[8];
                for (int k = 0; k < 8; k++) {
                    const __m512 v = _mm512_zextps256_ps512(_mm256_loadu_ps(xr + k * stride + i));
                    z[k] = _mm512_mul_ps(v, v);
                }
                tr8x2(z);
                for (int e = 0; e < 8; e++) a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(z[e])));
            }
            _mm512_storeu_pd(s + r, a0);
            finish(nv, n, xr, stride, 8, s + r);
        }
    }
    if (r < rows) rt_sumsq_rows(n, x + r * stride, stride, rows - r, s + r);
}

void rt_fill_norm_avx512(tensor_kernels *k) { k->sumsq_rows = sumsq_rows; }
