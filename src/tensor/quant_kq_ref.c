/* quant_kq_ref.c — scalar reference quantizers of the weight types Q4_K, Q5_K, Q6_K, IQ4_XS.
 *
 * These synthesize test and random-weight models; they need to produce valid blocks with a
 * sensible error, not to match any other quantizer's bytes. Method (round to nearest with a
 * small scale search): for each sub-block try a few scales around the min/max fit, assign
 * levels, refit the scale (and min) by least squares, keep the fit with the least squared
 * error; then quantize the sub-block scales to the block's 6/8-bit scale grid and reassign
 * the levels with the final, fp16-rounded scales.
 *
 * Contract: n a multiple of 256; src and dst do not overlap; no alignment required. */
#include <math.h>

#include "tensor/tensor_impl.h"

#define N_SEARCH 10   /* candidate scales on each side of the min/max fit */

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* x ≈ scale*L - mn with L in [0, nmax], mn >= 0. Returns scale, *mn_out. */
static float fit_asym(const float *x, int n, int nmax, float *mn_out) {
    float xmin = x[0], xmax = x[0];
    for (int i = 1; i < n; i++) {
        xmin = x[i] < xmin ? x[i] : xmin;
        xmax = x[i] > xmax ? x[i] : xmax;
    }
    if (xmin > 0.0f) xmin = 0.0f;
    if (xmax <= xmin) { *mn_out = -xmin; return 0.0f; }
    float best_err = INFINITY, best_s = (xmax - xmin) / nmax, best_m = -xmin;
    for (int k = -N_SEARCH; k <= N_SEARCH; k++) {
        const float is = (nmax + 0.1f * k) / (xmax - xmin);
        double sl = 0, sll = 0, sx = 0, slx = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi((int)lrintf(is * (x[i] - xmin)), 0, nmax);
            sl += l; sll += (double)l * l; sx += x[i]; slx += (double)l * x[i];
        }
        const double det = n * sll - sl * sl;
        if (det <= 0) continue;
        double s = (n * slx - sl * sx) / det, off = (sll * sx - sl * slx) / det;
        if (off > 0) { off = 0; s = slx / sll; }
        if (s <= 0) continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            const int l = clampi((int)lrint((x[i] - off) / s), 0, nmax);
            const double e = s * l + off - x[i];
            err += e * e;
        }
        if (err < best_err) { best_err = (float)err; best_s = (float)s; best_m = (float)-off; }
    }
    *mn_out = best_m;
    return best_s;
}

/* Index of the level nearest to v among lv[0..nl) (strictly ascending); ties go down. */
static int nearest_level(const int8_t *lv, int nl, float v) {
    int lo = 0, hi = nl - 1;             /* binary search for the first lv[i] >= v */
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (lv[mid] < v) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && v - lv[lo - 1] <= lv[lo] - v) lo--;
    return lo;
}

/* x ≈ scale*lv[idx] for levels lv (ascending, nl of them, lv[0] the extreme negative one).
 * Returns the scale (may be negative: the value of largest magnitude maps to an end). */
static float fit_levels(const float *x, int n, const int8_t *lv, int nl) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); max = x[i]; }
    if (amax == 0.0f) return 0.0f;
    float best_err = INFINITY, best_s = max / lv[0];
    for (int sign = 0; sign < 2; sign++) {
        const float end = sign ? (float)lv[nl - 1] : (float)lv[0];
        for (int k = -N_SEARCH; k <= N_SEARCH; k++) {
            const float s0 = max / (end * (1.0f + 0.01f * k));
            double sxl = 0, sll = 0;
            for (int i = 0; i < n; i++) {
                const int l = lv[nearest_level(lv, nl, x[i] / s0)];
                sxl += (double)x[i] * l; sll += (double)l * l;
            }
            if (sll == 0 || sxl == 0) continue;
            const float s = (float)(sxl / sll);
            double err = 0;
            for (int i = 0; i < n; i++) {
                const double e = (double)s * lv[nearest_level(lv, nl, x[i] / s)] - x[i];
                err += e * e;
            }
            if (err < best_err) { best_err = (float)err; best_s = s; }
        }
    }
    return best_s;
}

/* ---- Q4_K / Q5_K -------------------------------------------------------------------------- */

/* Inverse of rt_unpack_k4_scales. */
static void pack_k4_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t *q) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* One 256-element block with 8 sub-blocks of 32, levels 0..nmax: writes d, dmin, scales
 * (at blk, blk+2, blk+4) and the levels L[256]. */
static void quant_k_block(const float *x, int nmax, uint8_t *blk, uint8_t L[QK_K]) {
    float s[8], mn[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        s[j] = fit_asym(x + 32 * j, 32, nmax, &mn[j]);
        smax = s[j] > smax ? s[j] : smax;
        mmax = mn[j] > mmax ? mn[j] : mmax;
    }
    const uint16_t dh = rt_f32_to_f16(smax / 63.0f), mh = rt_f32_to_f16(mmax / 63.0f);
    const float d = rt_f16_to_f32(dh), dmin = rt_f16_to_f32(mh);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(s[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(mn[j] / dmin), 0, 63) : 0);
    }
    wr_u16(blk, dh);
    wr_u16(blk + 2, mh);
    pack_k4_scales(sc, m, blk + 4);
    for (int j = 0; j < 8; j++) {
        const float dd = d * sc[j], dm = dmin * m[j];
        for (int l = 0; l < 32; l++) {
            const float v = x[32 * j + l];
            L[32 * j + l] = (uint8_t)(dd > 0 ? clampi((int)lrintf((v + dm) / dd), 0, nmax) : 0);
        }
    }
}

void rt_from_float_q4_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst, L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, b += Q4_K_BYTES, src += QK_K) {
        quant_k_block(src, 15, b, L);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                b[Q4_K_QS + 32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + 32 + l] << 4));
    }
}

void rt_from_float_q5_K(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst, L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, b += Q5_K_BYTES, src += QK_K) {
        quant_k_block(src, 31, b, L);
        uint8_t *qh = b + Q5_K_QH, *qs = b + Q5_K_QS;
        memset(qh, 0, 32);
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = L[64 * j + l], hi = L[64 * j + 32 + l];
                qs[32 * j + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                qh[l] |= (uint8_t)(((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1)));
            }
        }
    }
}

/* ---- Q6_K --------------------------------------------------------------------------------- */

void rt_from_float_q6_K(const float *src, void *dst, int64_t n) {
    int8_t lv[64];
    for (int i = 0; i < 64; i++) lv[i] = (int8_t)(i - 32);
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += Q6_K_BYTES, src += QK_K) {
        float s[16], smax = 0.0f;
        for (int j = 0; j < 16; j++) {
            s[j] = fit_levels(src + 16 * j, 16, lv, 64);
            smax = fabsf(s[j]) > smax ? fabsf(s[j]) : smax;
        }
        const uint16_t dh = rt_f32_to_f16(smax / 127.0f);
        const float d = rt_f16_to_f32(dh);
        int8_t *sc = (int8_t *)(b + Q6_K_SCALES);
        uint8_t L[QK_K];
        for (int j = 0; j < 16; j++) {
            sc[j] = (int8_t)(d > 0 ? clampi((int)lrintf(s[j] / d), -127, 127) : 0);
            const float dd = d * sc[j];
            for (int l = 0; l < 16; l++) {
                const float v = src[16 * j + l];
                L[16 * j + l] = (uint8_t)(dd != 0 ? clampi((int)lrintf(v / dd), -32, 31) + 32 : 32);
            }
        }
        wr_u16(b + Q6_K_D, dh);
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = b + Q6_K_QL + 64 * h, *qh = b + Q6_K_QH + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const uint8_t q1 = Lh[l], q2 = Lh[l + 32], q3 = Lh[l + 64], q4 = Lh[l + 96];
                ql[l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* ---- IQ4_XS ------------------------------------------------------------------------------- */

void rt_from_float_iq4_xs(const float *src, void *dst, int64_t n) {
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, b += IQ4_XS_BYTES, src += QK_K) {
        float s[8], smax = 0.0f, amax = 0.0f;
        for (int j = 0; j < 8; j++) {
            s[j] = fit_levels(src + 32 * j, 32, rt_kvalues_iq4nl, 16);
            if (fabsf(s[j]) > amax) { amax = fabsf(s[j]); smax = s[j]; }
        }
        /* the sub-block scale of largest magnitude maps to -32, the end of the 6-bit grid */
        const uint16_t dh = rt_f32_to_f16(smax / -32.0f);
        const float d = rt_f16_to_f32(dh);
        uint16_t sh = 0;
        memset(b + IQ4_XS_SL, 0, 4);
        for (int j = 0; j < 8; j++) {
            const int ls = d != 0 ? clampi((int)lrintf(s[j] / d), -32, 31) + 32 : 32;
            b[IQ4_XS_SL + j / 2] |= (uint8_t)((ls & 0xF) << (4 * (j % 2)));
            sh |= (uint16_t)((ls >> 4) << (2 * j));
            const float dl = d * (ls - 32);
            uint8_t *qs = b + IQ4_XS_QS + 16 * j;
            for (int l = 0; l < 16; l++) {
                const float v0 = src[32 * j + l], v1 = src[32 * j + l + 16];
                const int i0 = nearest_level(rt_kvalues_iq4nl, 16, dl != 0 ? v0 / dl : 0.0f);
                const int i1 = nearest_level(rt_kvalues_iq4nl, 16, dl != 0 ? v1 / dl : 0.0f);
                qs[l] = (uint8_t)(i0 | (i1 << 4));
            }
        }
        wr_u16(b, dh);
        wr_u16(b + IQ4_XS_SH, sh);
    }
}
