/* rope_avx2.c — rt_rope_f32 eight pairs at a time (the AVX-512 table uses it too: a head is
 * at most a few hundred floats, and the work is the deinterleave, not the arithmetic).
 *
 * The same operations per pair as the reference: t = x1*s, fmsub(x0, c, t) is
 * fmaf(x0, c, -t) exactly (negation is exact); fmadd(x0, s, x1*c). cos_sin holds (c, s)
 * pairs: split into evens and odds. NORM heads hold (x0, x1) pairs the same way; NEOX heads
 * hold the x0s then the x1s. The pairs past the last whole 8 go through the scalar code
 * (fmaf is one instruction here). */
#include "tensor/x86/simd_x86.h"

#include <math.h>

/* Evens of p[0..15] into *ev, odds into *od, each in order. */
static inline void split16(const float *p, __m256 *ev, __m256 *od) {
    const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    /* per 128-bit lane: lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6; then 64-bit chunks 0, 2, 1, 3 */
    *ev = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88)), 0xD8));
    *od = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0xDD)), 0xD8));
}

/* p[2j] = ev[j], p[2j+1] = od[j] for j < 8. */
static inline void join16(float *p, __m256 ev, __m256 od) {
    const __m256 a = _mm256_unpacklo_ps(ev, od), b = _mm256_unpackhi_ps(ev, od);   /* pairs 0,1,4,5 / 2,3,6,7 */
    _mm256_storeu_ps(p, _mm256_permute2f128_ps(a, b, 0x20));
    _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(a, b, 0x31));
}

static void rope_f32(float *head, const float *cos_sin, int n_rot, bool neox) {
    const int half = n_rot / 2;
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        __m256 c, s, x0, x1;
        split16(cos_sin + 2 * i, &c, &s);
        if (neox) x0 = _mm256_loadu_ps(head + i), x1 = _mm256_loadu_ps(head + half + i);
        else split16(head + 2 * i, &x0, &x1);
        const __m256 r0 = _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s));
        const __m256 r1 = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
        if (neox) _mm256_storeu_ps(head + i, r0), _mm256_storeu_ps(head + half + i, r1);
        else join16(head + 2 * i, r0, r1);
    }
    for (; i < half; i++) {
        const int a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = head[a], x1 = head[b];
        head[a] = fmaf(x0, c, -(x1 * s));
        head[b] = fmaf(x0, s, x1 * c);
    }
}

void rt_fill_rope_avx2(tensor_kernels *k) { k->rope_f32 = rope_f32; }
