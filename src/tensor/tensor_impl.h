/* tensor_impl.h — module-internal facts shared by the kernel files of tensor/.
 *
 * Block layouts (FORMATS.md, bit-compatible with ggml) are described by byte offsets rather
 * than structs: weight rows inside a GGUF mapping are only 2-byte aligned in general (and
 * tests deliberately misalign them), so every multi-byte field is read with memcpy (the
 * rd_* helpers) and SIMD code uses unaligned loads only.
 *
 *   type    elems bytes  layout (offsets in bytes)
 *   Q8_0     32    34    d:f16@0  qs:i8[32]@2
 *   Q4_0     32    18    d:f16@0  qs:u8[16]@2     (low nibbles = elements 0-15, high = 16-31)
 *   Q4_K    256   144    d:f16@0  dmin:f16@2  scales:u8[12]@4  qs:u8[128]@16
 *   Q5_K    256   176    d:f16@0  dmin:f16@2  scales:u8[12]@4  qh:u8[32]@16  qs:u8[128]@48
 *   Q6_K    256   210    ql:u8[128]@0  qh:u8[64]@128  scales:i8[16]@192  d:f16@208
 *   IQ4_XS  256   136    d:f16@0  scales_h:u16@2  scales_l:u8[4]@4  qs:u8[128]@8
 *   Q8_K    256   292    d:f32@0  qs:i8[256]@4  bsums:i16[16]@260
 */
#ifndef RECUR_TENSOR_IMPL_H
#define RECUR_TENSOR_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "tensor/fp16.h"
#include "tensor/tensor.h"

#define QK8_0 32
#define QK4_0 32
#define QK_K  256
/* BF16 rows that are a multiple of this take tinyBLAS's vdpbf16ps order (dot_ref.c) */
#define RT_BF16_BLOCK 32

enum {
    Q8_0_BYTES = 34,  Q8_0_QS = 2,
    Q4_0_BYTES = 18,  Q4_0_QS = 2,
    Q4_K_BYTES = 144, Q4_K_DMIN = 2, Q4_K_SCALES = 4, Q4_K_QS = 16,
    Q5_K_BYTES = 176, Q5_K_DMIN = 2, Q5_K_SCALES = 4, Q5_K_QH = 16, Q5_K_QS = 48,
    Q6_K_BYTES = 210, Q6_K_QL = 0, Q6_K_QH = 128, Q6_K_SCALES = 192, Q6_K_D = 208,
    IQ4_XS_BYTES = 136, IQ4_XS_SH = 2, IQ4_XS_SL = 4, IQ4_XS_QS = 8,
    Q8_K_BYTES = 292, Q8_K_QS = 4, Q8_K_BSUMS = 260,
    /* offsets in a packed Q4_K run of 16 rows (tensor.h) */
    R16_D = 0, R16_DMIN = 32, R16_SCALES = 64, R16_QS = 256,
    /* offsets in a packed Q6_K run of 16 rows (tensor.h); Q6R16_RUN bytes for each (h, u) */
    Q6R16_D = 0, Q6R16_SCALES = 32, Q6R16_Q = 288, Q6R16_RUN = 192,
    /* offsets in a packed Q8_0 run of 16 rows (tensor.h) */
    Q8R16_D = 0, Q8R16_QS = 32,
    /* offsets in a packed Q4_0 run of 16 rows (tensor.h) */
    Q40R16_D = 0, Q40R16_QS = 32,
    /* offsets in a packed Q5_K run of 16 rows (tensor.h) */
    Q5R16_D = 0, Q5R16_DMIN = 32, Q5R16_SCALES = 64, Q5R16_QH = 256, Q5R16_QS = 768,
    /* and in the five-byte layout: its runs of values from here, 640 bytes a chunk */
    Q5R16F_Q = 256,
};

/* The 16 non-uniform levels of IQ4_NL / IQ4_XS. */
static const int8_t rt_kvalues_iq4nl[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* ---- unaligned little-endian field access ---------------------------------------------- */

static inline uint16_t rd_u16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline int16_t  rd_i16(const uint8_t *p) { int16_t v; memcpy(&v, p, 2); return v; }
static inline float    rd_f32(const uint8_t *p) { float v; memcpy(&v, p, 4); return v; }
static inline float    rd_f16(const uint8_t *p) { return rt_f16_to_f32(rd_u16(p)); }
static inline int32_t  rt_f32_bits(float f) { int32_t i; memcpy(&i, &f, 4); return i; }
static inline double   rt_f64_from_bits(uint64_t u) { double d; memcpy(&d, &u, 8); return d; }
static inline void     wr_u16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void     wr_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void     wr_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }

/* The tail of a Q8_0 activation row (tensor.h, tensor_act_quantize), q8_0_tail bytes into the
 * row, per block, in the layout its table's Q8_0 kernels read (tensor_kernels.q8_block):
 *  - ggml's order, Q8_0_TAIL_BYTES: its fp16 scale as a float, then its 32 quants + 128
 *    (unsigned bytes, what dpbusd takes first: x86/gemm_avx512.c);
 *  - the block order, Q8_0_BTAIL_BYTES: its scale as a float, the int32 Q8_MAGIC_BITS −
 *    128 · Σ qs (the start of the dpbusd chains against weights + 128: x86/q8blk_avx512.c),
 *    then its 32 quants.
 * Each is as small as it can be: a prompt gemm reads the tails of all its tokens once per
 * group of rows, from L2 while they fit. */
enum { Q8_0_TAIL_BYTES = 36, Q8_0_TAIL_QS = 4 };
enum { Q8_0_BTAIL_BYTES = 40, Q8_0_BTAIL_C = 4, Q8_0_BTAIL_QS = 8 };
static inline size_t q8_0_tail(int64_t n) { return ((size_t)(n / QK8_0) * Q8_0_BYTES + 63) & ~(size_t)63; }

/* The int32 → float conversion of an exact sum s (|s| < 2^22) without vcvtdq2ps, which on
 * Zen 4 competes with dpbusd and FMA for their pipes: a dpbusd chain started from
 * Q8_MAGIC_BITS ends holding the bits of the float Q8_MAGIC + s (1.5 · 2^23: the ulp is 1
 * from 2^23 to 2^24), and one subtraction (the add pipes) leaves s exactly. */
#define Q8_MAGIC      12582912.0f
#define Q8_MAGIC_BITS 0x4B400000

/* Round to nearest, ties to even, for |f| < 2^22 (ggml's nearest_int; also what x86's
 * round-to-nearest instructions give in that range). Independent of the FP environment. */
static inline int rt_nearest_int(float f) {
    return (rt_f32_bits(f + 12582912.0f) & 0x007fffff) - 0x00400000;
}

/* The Q8_0 x Q8_0 block dot as ggml's x86 kernels compute it: 8 float lanes, lane l of a block
 * adds the exact int32 sum of products of bytes 4l..4l+3 times the float product of the two
 * fp16 scales with one fused multiply-add, blocks in order; then the lanes are reduced as
 * ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)). Every table reproduces this order exactly. */
static inline float rt_hsum8_ggml(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* The block order of Q8_0 x Q8_0 (rt_dot_q8_0_blk, the tables of tensor_kernels_q8blk): per
 * block in order, the exact int32 sum s of its 32 products, then acc = fmaf(d_w · d_x,
 * (float)s, acc) from acc = 0 (the product of the two fp16 scales is exact in float). A table
 * runs rows side by side as vector lanes, each lane one chain, and adds the products in
 * integers before the one FMA: half the vector operations of ggml's order, whose every 4-byte
 * chunk sum takes an FMA of its own. It rounds differently from llama.cpp: in the tiny
 * reference models of testdata a flipped activation rounding grows past refcheck's Q8_0
 * tolerance, so it is an option (recur_ctx_params.q8_order), not the default. */
float rt_dot_q8_0_blk(int64_t n, const void *w, const void *x);

/* The reduction of 16 float lanes of ggml's AVX-512 kernels (_mm512_reduce_add_ps):
 * halves, then quarters, then ((l0+l2)+(l1+l3)) of what is left. */
static inline float rt_hsum16_ggml(const float l[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) q[i] = h[i] + h[i + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* Q4_K / Q5_K: the 12 scale bytes hold 8 six-bit scales and 8 six-bit mins.
 * Sub-blocks 0-3: sc = q[j] & 63, m = q[j+4] & 63; sub-blocks 4-7 take their low 4 bits from
 * q[j+4] (low nibble: scale, high nibble: min) and their top 2 bits from the top bits of
 * q[j-4] (scale) and q[j] (min). */
static inline void rt_unpack_k4_scales(const uint8_t *q, uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        m[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xF) | ((q[j] >> 6) << 4));
        m[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* rt_unpack_k4_scales on 32-bit words, without a trip through memory (for SIMD code):
 * byte j of *sc is sc[j], byte j of *m is m[j]. */
static inline void rt_k4_scales_u64(const uint8_t *q, uint64_t *sc, uint64_t *m) {
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    *sc = (w0 & 0x3f3f3f3fu) | (uint64_t)((w2 & 0x0f0f0f0fu) | ((w0 >> 2) & 0x30303030u)) << 32;
    *m = (w1 & 0x3f3f3f3fu) | (uint64_t)(((w2 >> 4) & 0x0f0f0f0fu) | ((w1 >> 2) & 0x30303030u)) << 32;
}

/* IQ4_XS: the 6-bit scale of sub-block ib (0-7), biased by 32. */
static inline int rt_iq4xs_scale(const uint8_t *blk, int ib) {
    const uint16_t h = rd_u16(blk + IQ4_XS_SH);
    const int lo = (blk[IQ4_XS_SL + ib / 2] >> (4 * (ib % 2))) & 0xF;
    return (lo | (((h >> (2 * ib)) & 3) << 4)) - 32;
}

/* ---- ggml's vectorised expf (exp_ref.c has the algorithm) ------------------------------ */

#define RT_VEXP_SHIFT  0x1.8p23f        /* 1.5·2^23: adding it rounds to an integer */
#define RT_VEXP_LOG2E  0x1.715476p+0f
#define RT_VEXP_LN2_HI 0x1.62e4p-1f
#define RT_VEXP_LN2_LO 0x1.7f7d1cp-20f
#define RT_VEXP_C1     0x1.ffffecp-1f
#define RT_VEXP_C2     0x1.fffdb6p-2f
#define RT_VEXP_C3     0x1.555e66p-3f
#define RT_VEXP_C4     0x1.573e2ep-5f
#define RT_VEXP_C5     0x1.0e4020p-7f
#define RT_VEXP_BIG    192.0f           /* |n| above this: 0 or +inf directly */

/* One lane of ggml's AVX-512 ggml_v_expf (bit-exact; NaN in gives a NaN). */
float rt_vexpf(float x);

/* ---- libm's expf (glibc's FMA build; expf_libm_ref.c has the algorithm) ---------------- */

#define RT_EXPF_INVLN2N 0x40471547652b82feull   /* bits of 32/ln 2 */
#define RT_EXPF_SHIFT   0x4338000000000000ull   /* bits of 1.5·2^52 */
#define RT_EXPF_C0      0x3ebc6af84b912394ull
#define RT_EXPF_C1      0x3f2ebfce50fac4f3ull
#define RT_EXPF_C2      0x3f962e42ff0c52d6ull
#define RT_EXPF_TOP_MAX 0x42a                   /* top 12 bits of |x| above it: the checks */
#define RT_EXPF_OFLOW   0x1.62e42ep6f
#define RT_EXPF_UFLOW   -0x1.9fe368p6f
extern const uint64_t rt_expf_tab[32];          /* 2^(i/32), i << 47 taken off its bits */

/* expf as Debian 12's glibc computes it on an FMA CPU, every input (NaN gives a NaN). */
float rt_expf_libm(float x);

/* ---- libm's logf (glibc's FMA build; logf_libm_ref.c has the algorithm) ---------------- */

#define RT_LOGF_OFF 0x3f330000u
#define RT_LOGF_LN2 0x3fe62e42fefa39efull
#define RT_LOGF_A0  0xbfd00ea348b88334ull
#define RT_LOGF_A1  0x3fd5575b0be00b6aull
#define RT_LOGF_A2  0xbfdffffef20a4123ull
extern const uint64_t rt_logf_tab[16][2];   /* bits of 1/c and log c per subinterval */

/* logf as Debian 12's glibc computes it on an FMA CPU, every input. */
float rt_logf_libm(float x);
/* Mamba-1's softplus: x > 20 ? x : logf(1 + expf(x)), both as above. */
float rt_softplus_libm(float x);

/* ---- scalar kernels (quant_ref.c, quant_kq_ref.c, dot_ref.c, exp_ref.c) ---------------- */

void rt_to_float_f32(const void *src, float *dst, int64_t n);
void rt_to_float_f16(const void *src, float *dst, int64_t n);
void rt_to_float_bf16(const void *src, float *dst, int64_t n);
void rt_to_float_q8_0(const void *src, float *dst, int64_t n);
void rt_to_float_q4_0(const void *src, float *dst, int64_t n);
void rt_to_float_q4_K(const void *src, float *dst, int64_t n);
void rt_to_float_q5_K(const void *src, float *dst, int64_t n);
void rt_to_float_q6_K(const void *src, float *dst, int64_t n);
void rt_to_float_iq4_xs(const void *src, float *dst, int64_t n);
void rt_to_float_q8_K(const void *src, float *dst, int64_t n);

void rt_from_float_f32(const float *src, void *dst, int64_t n);
void rt_from_float_f16(const float *src, void *dst, int64_t n);
void rt_from_float_bf16(const float *src, void *dst, int64_t n);
void rt_from_float_q8_0(const float *src, void *dst, int64_t n);
void rt_from_float_q4_0(const float *src, void *dst, int64_t n);
void rt_from_float_q8_K(const float *src, void *dst, int64_t n);
void rt_from_float_q4_K(const float *src, void *dst, int64_t n);
void rt_from_float_q5_K(const float *src, void *dst, int64_t n);
void rt_from_float_q6_K(const float *src, void *dst, int64_t n);
void rt_from_float_iq4_xs(const float *src, void *dst, int64_t n);

float rt_dot_f32(int64_t n, const void *w, const void *x);
float rt_dot_f16(int64_t n, const void *w, const void *x);
float rt_dot_bf16(int64_t n, const void *w, const void *x);
/* The BF16 dot in ggml_vec_dot_bf16's order: what ggml uses where tinyBLAS declines, i.e.
 * rows not a multiple of RT_BF16_BLOCK, or a weight whose row count is not a multiple of 4
 * (tensor_matmul picks it then, in every table). */
float rt_dot_bf16_vec(int64_t n, const void *w, const void *x);
float rt_dot_q8_0(int64_t n, const void *w, const void *x);
float rt_dot_q4_0(int64_t n, const void *w, const void *x);
/* Q4_K weights with a row count that is a multiple of 8: ggml's CPU backend on x86 (AVX2 or
 * AVX-512) repacks them (repack.cpp, block_q4_Kx8) and its prompt batches take
 * ggml_gemm_q4_K_8x8_q8_K. Per output element that gemm sums each 64-element chunk (two
 * sub-blocks) exactly in integers, then acc = fma(chunk_sum, d*yd, acc) and
 * accm = fma(chunk_minsum, dmin*yd, accm) chunk by chunk, result acc - accm. Every table
 * gives the same bits (the float chain is scalar; only the integer sums are vectorised). */
float rt_dot_q4_K_rp(int64_t n, const void *w, const void *x);
/* rt_dot_q4_K_rp of row r (0..15) of a packed group (tensor.h tensor_q4_K_r16_pack). */
float rt_dot_q4_K_r16(int64_t n, const void *group, int r, const void *x);
/* Q4_K weights ggml does not repack (row count not a multiple of 8) take
 * ggml_vec_dot_q4_K_q8_K, whose AVX2 lane order this reproduces (every table: same bits). */
float rt_dot_q4_K_lanes(int64_t n, const void *w, const void *x);
/* The exact min sum of chunk j of a Q4_K block against the Q8_K block b (inline: the dots
 * call it four times per block). */
static inline int rt_q4_K_rp_min(const uint8_t *b, const uint8_t m[8], int j) {
    const uint8_t *s = b + Q8_K_BSUMS + 8 * j;
    return m[2 * j] * (rd_i16(s) + rd_i16(s + 2)) + m[2 * j + 1] * (rd_i16(s + 4) + rd_i16(s + 6));
}
float rt_dot_q5_K(int64_t n, const void *w, const void *x);
/* Q5_K in rt_dot_q4_K_rp's order (the five-bit values in place of the nibbles): the AVX-512
 * table's Q5_K order, whose gemm then runs one output element per lane as Q4_K's does. */
float rt_dot_q5_K_rp(int64_t n, const void *w, const void *x);
float rt_dot_q6_K(int64_t n, const void *w, const void *x);
float rt_dot_iq4_xs(int64_t n, const void *w, const void *x);

float rt_dot_f16_f32(int64_t n, const uint16_t *a, const float *b);
void  rt_axpy_f16(int64_t n, float alpha, const uint16_t *x, float *y);
void  rt_dot4_f16_f32(int64_t n, const uint16_t *a, const float *const b[4], float out[4]);
void  rt_axpy4_f16(int64_t n, const float alpha[4], const uint16_t *x, float *const y[4]);
void  rt_att_scores4(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4], const int32_t n_ctx[4],
                     float scale, float *const s[4], bool cold);
void  rt_att_wsum4(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4], const int32_t n_ctx[4],
                   float *const out[4], bool cold);
void  rt_att_wsumt4(int nr, int64_t dv, const uint16_t *vt, int64_t ldv, const float *const pr[4],
                    const int32_t n_ctx[4], float *const out[4]);
void  rt_f16_cols(int32_t n, int64_t dv, const uint16_t *const *rows, uint16_t *dst, int64_t ld);
float rt_dot_f32_f32(int64_t n, const float *a, const float *b);
void  rt_f32_to_f16_row(const float *src, uint16_t *dst, int64_t n);
void  rt_scale_round_f16(int64_t n, float *x, float s);
void  rt_exp_f32(int64_t n, const float *x, float *y);
void  rt_silu_f32(int64_t n, const float *x, float *y);
void  rt_swiglu_f32(int64_t n, const float *x, const float *g, float *y);
double rt_exp_sum_f32(int64_t n, float *x, float max);
float rt_max_f32(int64_t n, const float *x);
void  rt_rope_f32(float *head, const float *cos_sin, int n_rot, bool neox);
void  rt_sumsq_rows(int64_t n, const float *x, int64_t stride, int64_t rows, double *s);   /* norm_ref.c */
/* The scans (scan_ref.c); rt_scan_reduce64 is their lane reduction:
 * v[l] = (acc[l] + acc[32+l]) + (acc[16+l] + acc[48+l]) for l < 16, then rt_hsum16_ggml(v). */
float rt_scan_reduce64(const float acc[64]);
void  rt_gdn_step(int64_t d, float *S, const float *q, const float *k, const float *v, float decay, float beta,
                  float scale, float *o);
void  rt_ssm2_rows(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                   const float *x, float *y);
void  rt_ssm1_step(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C, const float *dt,
                   const float *x, float *y);
void  rt_conv_step(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                   float *out);
void  rt_conv_run(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, int64_t n, const float *in,
                  int64_t in_stride, float *out, int64_t out_stride);

/* Fills a table with the scalar kernels (cpu.c builds the SIMD tables on top of a copy). */
void tensor_fill_scalar(tensor_kernels *k);
/* The scalar gemv_q4_K_r16 (q4k_r16.c). */
void rt_fill_q4k_r16(tensor_kernels *k);
/* A packed group's row dot (rt_dot_q4_K_r16, rt_dot_q6_K_r16), and groups [g0, g1) of a packed
 * matrix with it, row by row: the scalar tables' packed gemv. */
typedef float (*rt_dot_r16_fn)(int64_t n, const void *group, int r, const void *x);
void rt_gemv_r16_rows(rt_dot_r16_fn dot, int64_t n, const void *w, size_t ws, int64_t g0, int64_t g1, const void *x,
                      float *y);
/* Row r of a packed Q6_K group (tensor.h) against x: rt_dot_q6_K's bits for the row it was. */
float rt_dot_q6_K_r16(int64_t n, const void *group, int r, const void *x);
void rt_fill_q6k_r16(tensor_kernels *k);
/* Row r of a packed Q8_0 group (tensor.h) against x: rt_dot_q8_0's bits for the row it was,
 * and rt_dot_q8_0_blk's. */
float rt_dot_q8_0_r16(int64_t n, const void *group, int r, const void *x);
/* Row r of a packed Q4_0 group in the AVX-512 table's dot_q4_0 order (dot_avx512.c): 16 int32
 * lanes per pair of blocks (4 elements each), scaled into 16 float chains, their 16-lane tree,
 * then an odd last block's 8 scaled lanes by their own tree. The oracle of gemv_q4_0_r16. */
float rt_dot_q4_0_r16(int64_t n, const void *group, int r, const void *x);
/* The bytes of row r's Q4_K or Q5_K block a that their packed runs at h keep whole (tensor.h:
 * d, dmin and the scales at the same places in both; qs at a + a_qs and in 4-byte pieces from
 * h + h_qs), to h (pack) or back. */
static inline void rt_r16_k4_move(uint8_t *a, uint8_t *h, int r, size_t a_qs, size_t h_qs, bool pack) {
#define RT_MOVE(at_h, at_a, len) (void)(pack ? memcpy(h + (at_h), a + (at_a), len) : memcpy(a + (at_a), h + (at_h), len))
    RT_MOVE(R16_D + 2 * r, 0, 2);
    RT_MOVE(R16_DMIN + 2 * r, Q4_K_DMIN, 2);
    for (int k = 0; k < 12; k++) RT_MOVE(R16_SCALES + 16 * k + r, Q4_K_SCALES + k, 1);
    for (int u = 0; u < 32; u++) RT_MOVE(h_qs + 64 * u + 4 * r, a_qs + 4 * u, 4);
#undef RT_MOVE
}

/* Row r's scales and mins (rt_unpack_k4_scales) and its d·yd and dmin·yd, from the packed Q4_K
 * or Q5_K run at h (the places rt_r16_k4_move writes): the scalar oracles' start of a block. */
static inline void rt_r16_k4_row(const uint8_t *h, int r, float yd, uint8_t sc[8], uint8_t m[8], float *d,
                                 float *dmin) {
    uint8_t packed[12];
    for (int k = 0; k < 12; k++) packed[k] = h[R16_SCALES + 16 * k + r];
    rt_unpack_k4_scales(packed, sc, m);
    *d = rd_f16(h + R16_D + 2 * r) * yd;
    *dmin = rd_f16(h + R16_DMIN + 2 * r) * yd;
}

/* rt_dot_q5_K_rp of row r of a packed Q5_K group (the AVX-512 table's Q5_K order): the oracle
 * of gemv_q5_K_r16. */
float rt_dot_q5_K_r16(int64_t n, const void *group, int r, const void *x);
/* The same over the five-byte layout (tensor.h, after TENSOR_Q5R16_BLOCK): the AVX2 kernels' oracle. */
float rt_dot_q5_K_r16f(int64_t n, const void *group, int r, const void *x);
float rt_dot_q8_0_blk_r16(int64_t n, const void *group, int r, const void *x);
/* The scalar gemv_q8_0_r16 of the table's Q8_0 order (k->q8_block: the block order). */
void rt_fill_q8_0_r16(tensor_kernels *k);
/* Overwrite the entries each ISA file has faster versions of (x86/ *_avx2.c, *_avx512.c). */
void tensor_fill_avx2(tensor_kernels *k);
void tensor_fill_avx512(tensor_kernels *k);
/* The BF16 dot of the AVX-512 table: vdpbf16ps itself when the CPU has AVX512_BF16 (native),
 * else its emulation (x86/bf16_avx512.c); both give rt_dot_bf16's bits. */
void rt_fill_bf16_avx512(tensor_kernels *k, bool native);
/* The attention tiles of the AVX-512 table (x86/att_avx512.c). */
void rt_fill_att_avx512(tensor_kernels *k);
/* The weighted sums over a transposed V of the AVX2 table (x86/att_vt_avx2.c). */
void rt_fill_att_vt_avx2(tensor_kernels *k);
/* The same on AVX-512 (x86/att_vt_avx512.c). */
void rt_fill_att_vt_avx512(tensor_kernels *k);
/* The Q8_0 block-order entries of the twins (x86/q8blk_avx2.c: vec_dot, vec_dot4, gemv and
 * gemm; x86/q8blk_avx512.c: gemv and gemm, over the AVX2 ones). */
void rt_fill_q8blk_avx2(tensor_kernels *k);
void rt_fill_q8blk_avx512(tensor_kernels *k);

/* ---- prefetch or not (prefetch.c) -------------------------------------------------------
 * The chooser between the single-token calls with their kernels' software prefetch and
 * without, in epochs of RT_PF_EPOCH bytes of weights read: rt_pf_pick_lean says which way the
 * next call runs (true: lean), rt_pf_record takes how long a call of `bytes` weight bytes took
 * that way. Each way keeps the ns per MiB of its last RT_PF_RING epochs (a ring indexed by
 * its epochs); rt_pf_estimate is their lower median (0 before the first). rt_pf_shared is
 * tensor_matmul's; zero-initialized is a fresh one (tests make their own). */
#define RT_PF_RING 8
#define RT_PF_EPOCH ((uint64_t)1 << 30)
typedef struct rt_pf_chooser {
    atomic_int lock;
    bool       lean;                       /* the current epoch's mode */
    uint64_t   ep_ns, ep_bytes;            /* the current epoch so far */
    uint64_t   ns_per_mib[2][RT_PF_RING];
    uint64_t   epochs[2];                  /* epochs ended in each mode */
    uint64_t   calls[2];                   /* calls recorded in each mode */
    uint32_t   rng;
} rt_pf_chooser;
rt_pf_chooser *rt_pf_shared(void);
bool rt_pf_pick_lean(rt_pf_chooser *c);
void rt_pf_record(rt_pf_chooser *c, bool lean, uint64_t ns, uint64_t bytes);
uint64_t rt_pf_estimate(const rt_pf_chooser *c, bool lean);

#endif
