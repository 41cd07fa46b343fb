/* dot_ref.c — scalar reference dot products (the "scalar" table) and float helpers.
 *
 * Contract of vec_dot: n a multiple of the weight type's block size; w is a row of the weight
 * type, x a row of its vec_dot_type (tensor.h invariant 3); no alignment required.
 *
 * Quantized dots follow ggml's semantics: per block an exact integer sum of products (times
 * the integer sub-block scales), then one float multiplication by the block's scales.
 * Q8_0 x Q8_0 reproduces ggml's x86 float lanes exactly (tensor_impl.h), and every table
 * gives the same bits for it, as for F32 (below) and BF16; the other types sum their blocks
 * in double here (the reference is the accurate one; SIMD tables sum in float lanes, in their
 * own fixed order). */
#include <math.h>

#include "tensor/tensor_impl.h"

/* ---- float types ------------------------------------------------------------------------ */

/* F32 weights: the AVX-512 table's order (x86/float_avx512.c dot_body), which every table
 * follows: 4 × 16 lanes over blocks of 64, lanes 0-15 over blocks of 16, the tail (zeros past
 * the row) into lanes 16-31, then (acc0 + acc1) + (acc2 + acc3) lane by lane and
 * rt_hsum16_ggml. The reference logits come from an AVX-512 build, and an F32 weight (a MoE
 * router) decides which experts run: a double sum here drifted past the tolerance on a
 * 300-token qwen3next case. */
float rt_dot_f32(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;   /* rows need not be 4-byte aligned: memcpy loads */
    float acc[4][16] = { { 0 } };
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++)
                acc[j][l] = fmaf(rd_f32(a + 4 * (i + 16 * j + l)), rd_f32(b + 4 * (i + 16 * j + l)), acc[j][l]);
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++) acc[0][l] = fmaf(rd_f32(a + 4 * (i + l)), rd_f32(b + 4 * (i + l)), acc[0][l]);
    if (i < n)
        for (int l = 0; l < 16; l++) {
            const bool in = i + l < n;
            acc[1][l] = fmaf(in ? rd_f32(a + 4 * (i + l)) : 0.0f, in ? rd_f32(b + 4 * (i + l)) : 0.0f, acc[1][l]);
        }
    float v[16];
    for (int l = 0; l < 16; l++) v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
    return rt_hsum16_ggml(v);
}

float rt_dot_f16(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)rd_f16(a + 2 * i) * rd_f16(b + 2 * i);
    return (float)s;
}

/* One vdpbf16ps lane step (its semantics, measured on hardware: bit-exact over millions of
 * random and tiny inputs): subnormal inputs read as zero, the odd pair is fused into the
 * accumulator first, then the even pair, each result with subnormals flushed to zero. */
static inline float bf16_daz(const uint8_t *p) {
    const uint16_t h = rd_u16(p);
    return rt_bf16_to_f32((h & 0x7f80) ? h : (uint16_t)(h & 0x8000));
}
static inline float f32_ftz(float v) { return fabsf(v) < 0x1p-126f ? copysignf(0.0f, v) : v; }
static inline float dpbf16_lane(float acc, const uint8_t *a, const uint8_t *b) {
    acc = f32_ftz(fmaf(bf16_daz(a + 2), bf16_daz(b + 2), f32_ftz(acc)));
    return f32_ftz(fmaf(bf16_daz(a), bf16_daz(b), acc));
}

float rt_dot_bf16(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    if (n % RT_BF16_BLOCK == 0) {   /* tinyBLAS: one 16-lane vdpbf16ps accumulator */
        float acc[16] = { 0 };
        for (int64_t i = 0; i < n; i += RT_BF16_BLOCK)
            for (int l = 0; l < 16; l++) acc[l] = dpbf16_lane(acc[l], a + 2 * (i + 2 * l), b + 2 * (i + 2 * l));
        return rt_hsum16_ggml(acc);
    }
    return rt_dot_bf16_vec(n, w, x);
}

/* ggml_vec_dot_bf16: two accumulators over blocks of 64, their sums and the tail in double. */
float rt_dot_bf16_vec(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float c1[16] = { 0 }, c2[16] = { 0 };
    int64_t i = 0;
    for (; i + 64 <= n; i += 64)
        for (int l = 0; l < 16; l++) {
            c1[l] = dpbf16_lane(c1[l], a + 2 * (i + 2 * l), b + 2 * (i + 2 * l));
            c2[l] = dpbf16_lane(c2[l], a + 2 * (i + 32 + 2 * l), b + 2 * (i + 32 + 2 * l));
        }
    double s = (double)rt_hsum16_ggml(c1);
    s += (double)rt_hsum16_ggml(c2);
    for (; i < n; i++) s += (double)(rt_bf16_to_f32(rd_u16(a + 2 * i)) * rt_bf16_to_f32(rd_u16(b + 2 * i)));
    return (float)s;
}

/* ---- Q8_0 activations ---------------------------------------------------------------------- */

float rt_dot_q8_0(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float acc[8] = { 0 };
    for (int64_t i = 0; i < n / QK8_0; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) {
        const int8_t *qa = (const int8_t *)(a + Q8_0_QS), *qb = (const int8_t *)(b + Q8_0_QS);
        const float d = rd_f16(a) * rd_f16(b);
        for (int l = 0; l < 8; l++) {
            int sumi = 0;
            for (int j = 4 * l; j < 4 * l + 4; j++) sumi += qa[j] * qb[j];
            acc[l] = fmaf(d, (float)sumi, acc[l]);
        }
    }
    return rt_hsum8_ggml(acc);
}

float rt_dot_q8_0_blk(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++, a += Q8_0_BYTES, b += Q8_0_BYTES) {
        const int8_t *qa = (const int8_t *)(a + Q8_0_QS), *qb = (const int8_t *)(b + Q8_0_QS);
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++) s += qa[j] * qb[j];
        acc = fmaf(rd_f16(a) * rd_f16(b), (float)s, acc);
    }
    return acc;
}

float rt_dot_q4_0(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n / QK4_0; i++, a += Q4_0_BYTES, b += Q8_0_BYTES) {
        const uint8_t *qa = a + Q4_0_QS;
        const int8_t *qb = (const int8_t *)(b + Q8_0_QS);
        int sumi = 0;
        for (int j = 0; j < QK4_0 / 2; j++)
            sumi += ((qa[j] & 0xF) - 8) * qb[j] + ((qa[j] >> 4) - 8) * qb[j + QK4_0 / 2];
        s += (float)sumi * (rd_f16(a) * rd_f16(b));
    }
    return (float)s;
}

/* ---- Q8_K activations ---------------------------------------------------------------------- */

/* sum over the block of bsums[k] * mins[k/2] (the min correction of Q4_K / Q5_K). */
static int q8k_min_sum(const uint8_t *b, const uint8_t m[8]) {
    int s = 0;
    for (int k = 0; k < 16; k++) s += rd_i16(b + Q8_K_BSUMS + 2 * k) * m[k / 2];
    return s;
}

/* Min correction of chunk j (sub-blocks 2j, 2j+1) of a Q4_K block: what ggml's gemm gets from
 * the pairwise sums of the 16-element bsums. */

/* Q4_K (qh NULL) or Q5_K in the float order of ggml's repacked gemm (tensor_impl.h): exact
 * integer sums per 64-element chunk, then one fma per chunk into each of two chains. */
static float k4_rp(int64_t n, const uint8_t *a, size_t bytes, size_t qs_off, bool q5, const uint8_t *b) {
    float acc = 0.0f, accm = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, a += bytes, b += Q8_K_BYTES) {
        uint8_t sc[8], m[8];
        rt_unpack_k4_scales(a + Q4_K_SCALES, sc, m);
        const uint8_t *q = a + qs_off, *qh = a + Q5_K_QH;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const float yd = rd_f32(b);
        const float d = rd_f16(a) * yd, dmin = rd_f16(a + Q4_K_DMIN) * yd;
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                const int h1 = q5 ? (qh[l] >> (2 * j) & 1) << 4 : 0, h2 = q5 ? (qh[l] >> (2 * j + 1) & 1) << 4 : 0;
                s1 += ((q[l] & 0xF) | h1) * y[l];
                s2 += ((q[l] >> 4) | h2) * y[l + 32];
            }
            acc = fmaf((float)(sc[2 * j] * s1 + sc[2 * j + 1] * s2), d, acc);
            accm = fmaf((float)rt_q4_K_rp_min(b, m, j), dmin, accm);
        }
    }
    return acc - accm;
}

float rt_dot_q4_K_rp(int64_t n, const void *w, const void *x) { return k4_rp(n, w, Q4_K_BYTES, Q4_K_QS, false, x); }

float rt_dot_q5_K_rp(int64_t n, const void *w, const void *x) { return k4_rp(n, w, Q5_K_BYTES, Q5_K_QS, true, x); }

/* Q4_K in the lane order of ggml_vec_dot_q4_K_q8_K's AVX2 path (what ggml takes for Q4_K
 * weights it does not repack): 8 float chains, chain l summing elements 4l..4l+3 of every
 * 32-element sub-block, and 4 min chains, one per 64-element chunk, each one fma per block;
 * then ggml's horizontal sums. */
float rt_dot_q4_K_lanes(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float acc[8] = { 0 }, accm[4] = { 0 };
    for (int64_t i = 0; i < n / QK_K; i++, a += Q4_K_BYTES, b += Q8_K_BYTES) {
        uint8_t sc[8], m[8];
        rt_unpack_k4_scales(a + Q4_K_SCALES, sc, m);
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        const float yd = rd_f32(b);
        const float d = yd * rd_f16(a), dmin = -yd * rd_f16(a + Q4_K_DMIN);
        for (int l = 0; l < 8; l++) {
            int sumi = 0;
            for (int j = 0; j < 4; j++) {
                const uint8_t *q = a + Q4_K_QS + 32 * j + 4 * l;
                const int8_t *yl = y + 64 * j + 4 * l;
                int s1 = 0, s2 = 0;
                for (int e = 0; e < 4; e++) {
                    s1 += (q[e] & 0xF) * yl[e];
                    s2 += (q[e] >> 4) * yl[e + 32];
                }
                sumi += sc[2 * j] * s1 + sc[2 * j + 1] * s2;
            }
            acc[l] = fmaf(d, (float)sumi, acc[l]);
        }
        for (int j = 0; j < 4; j++) accm[j] = fmaf(dmin, (float)rt_q4_K_rp_min(b, m, j), accm[j]);
    }
    float h[4];
    for (int l = 0; l < 4; l++) h[l] = acc[l + 4] + acc[l];
    const float s = (h[0] + h[2]) + (h[1] + h[3]);
    return s + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
}

float rt_dot_q5_K(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n / QK_K; i++, a += Q5_K_BYTES, b += Q8_K_BYTES) {
        uint8_t sc[8], m[8];
        rt_unpack_k4_scales(a + Q5_K_SCALES, sc, m);
        const uint8_t *q = a + Q5_K_QS, *qh = a + Q5_K_QH;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        int sumi = 0;
        for (int j = 0; j < 4; j++, q += 32, y += 64) {
            int s1 = 0, s2 = 0;
            for (int l = 0; l < 32; l++) {
                s1 += ((q[l] & 0xF) | (((qh[l] >> (2 * j)) & 1) << 4)) * y[l];
                s2 += ((q[l] >> 4) | (((qh[l] >> (2 * j + 1)) & 1) << 4)) * y[l + 32];
            }
            sumi += sc[2 * j] * s1 + sc[2 * j + 1] * s2;
        }
        const float yd = rd_f32(b);
        const float d = rd_f16(a) * yd, dmin = rd_f16(a + Q5_K_DMIN) * yd;
        s += d * (float)sumi - dmin * (float)q8k_min_sum(b, m);
    }
    return (float)s;
}

/* Q6_K: one float chain per element, one fma per block of the block's exact integer sum
 * (what a gemm with one output element per SIMD lane can follow): every table, same bits. */
float rt_dot_q6_K(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++, a += Q6_K_BYTES, b += Q8_K_BYTES) {
        const int8_t *sc = (const int8_t *)(a + Q6_K_SCALES);
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a + Q6_K_QL + 64 * h, *qh = a + Q6_K_QH + 32 * h;
            const int8_t *yh = y + 128 * h, *sh = sc + 8 * h;
            for (int g = 0; g < 8; g++) {          /* 16 elements sharing scale sh[g] */
                const int base = 16 * g, l0 = base % 32, part = base / 32;
                int si = 0;
                for (int l = l0; l < l0 + 16; l++) {
                    const uint8_t lo = part & 1 ? ql[l + 32] : ql[l];
                    const int nib = part & 2 ? lo >> 4 : lo & 0xF;
                    const int q = (nib | (((qh[l] >> (2 * part)) & 3) << 4)) - 32;
                    si += q * yh[32 * part + l];
                }
                sumi += sh[g] * si;
            }
        }
        s = fmaf((float)sumi, rd_f16(a + Q6_K_D) * rd_f32(b), s);
    }
    return s;
}

float rt_dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const uint8_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n / QK_K; i++, a += IQ4_XS_BYTES, b += Q8_K_BYTES) {
        const uint8_t *q = a + IQ4_XS_QS;
        const int8_t *y = (const int8_t *)(b + Q8_K_QS);
        int sumi = 0;
        for (int ib = 0; ib < QK_K / 32; ib++, q += 16, y += 32) {
            int si = 0;
            for (int j = 0; j < 16; j++)
                si += rt_kvalues_iq4nl[q[j] & 0xF] * y[j] + rt_kvalues_iq4nl[q[j] >> 4] * y[j + 16];
            sumi += rt_iq4xs_scale(a, ib) * si;
        }
        s += (rd_f16(a) * rd_f32(b)) * (float)sumi;
    }
    return (float)s;
}

/* ---- float helpers ------------------------------------------------------------------------- */

/* ggml's tinyBLAS F16 order on AVX-512 (the attention q.k of llama.cpp): lane i % 16
 * accumulates fmaf(a[i], b[i], .) in index order, then rt_hsum16_ggml. Every table gives
 * these bits. */
float rt_dot_f16_f32(int64_t n, const uint16_t *a, const float *b) {
    float acc[16] = { 0 };
    for (int64_t i = 0; i < n; i++) acc[i % 16] = fmaf(rt_f16_to_f32(a[i]), b[i], acc[i % 16]);
    return rt_hsum16_ggml(acc);
}

void rt_axpy_f16(int64_t n, float alpha, const uint16_t *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = fmaf(alpha, rt_f16_to_f32(x[i]), y[i]);
}

/* The references of the four-row helpers are the one-row kernels, four times: that is their
 * contract (the SIMD tables interleave the chains, changing no operation). */
void rt_dot4_f16_f32(int64_t n, const uint16_t *a, const float *const b[4], float out[4]) {
    for (int j = 0; j < 4; j++) out[j] = rt_dot_f16_f32(n, a, b[j]);
}

void rt_axpy4_f16(int64_t n, const float alpha[4], const uint16_t *x, float *const y[4]) {
    for (int j = 0; j < 4; j++) rt_axpy_f16(n, alpha[j], x, y[j]);
}

float rt_dot_f32_f32(int64_t n, const float *a, const float *b) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

void rt_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = rt_f32_to_f16(src[i]);
}

void rt_scale_round_f16(int64_t n, float *x, float s) {
    for (int64_t i = 0; i < n; i++) x[i] = rt_f16_to_f32(rt_f32_to_f16(x[i] * s));
}
