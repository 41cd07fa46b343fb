/* tensor.h — weight formats, quantization, dot products and matrix multiplication.
 *
 * Formats are ggml's, bit for bit (block layouts in ../shared/docs/FORMATS.md), identified by
 * the ggml type ids of gguf.h (GGUF_T_*).
 *
 * Kernels come in tables, one per instruction set (scalar reference, AVX2, AVX-512), all with
 * the same signatures; tensor_kernels_active() picks the best one the CPU has, once, at
 * recur_init time. Tests compare every SIMD entry against the scalar one.
 *
 * Invariants:
 *  1. A dot product of one weight row with one activation row is computed in one fixed order
 *     that depends only on the kernel table and n — never on which thread runs it, how many
 *     rows or tokens are in the call, or the memory address (alignment) of the rows.
 *  2. tensor_matmul produces, for every element, exactly the value vec_dot gives for that
 *     (weight row, quantized activation row) pair (BF16 weights whose row count is not a
 *     multiple of 4: ggml_vec_dot_bf16's order instead, as ggml does). Hence results are
 *     bit-identical for any batch composition and thread count.
 *  3. Activations are quantized per token row into the weight type's vec_dot_type (as ggml
 *     does: Q8_0 for Q4_0/Q8_0, Q8_K for K-quants and IQ4_XS, F16 for F16, BF16 for BF16,
 *     F32 for F32), each row independently.
 */
#ifndef RECUR_TENSOR_H
#define RECUR_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/threadpool.h"
#include "gguf/gguf.h"

/* Dequantize n elements (n a multiple of the block size) of a row. */
typedef void (*tensor_to_float_fn)(const void *src, float *dst, int64_t n);
/* Quantize n floats (n a multiple of the block size) into blocks. */
typedef void (*tensor_from_float_fn)(const float *src, void *dst, int64_t n);
/* Dot product of n elements: w in the weight type, x in that type's vec_dot_type. */
typedef float (*tensor_vec_dot_fn)(int64_t n, const void *w, const void *x);
/* Four dot products of one weight row with the activation rows x, x + x_stride, x + 2*x_stride,
 * x + 3*x_stride: out[j] is bit-identical to vec_dot(n, w, x + j*x_stride) (it performs the
 * same operations in the same order; it only interleaves the four chains). */
typedef void (*tensor_vec_dot4_fn)(int64_t n, const void *w, const void *x, size_t x_stride, float out[4]);

/* y[t*ldy + r] = vec_dot(n, w + r*w_stride, x + t*x_stride) for r < n_rows, t < n_tok, each
 * element bit-identical to vec_dot (the same operations in the same order; only the tiling of
 * rows and tokens differs, so weight and activation loads are shared). The x rows are
 * activation rows as tensor_act_quantize writes them (a gemm may read their tail); x_stride
 * is at least tensor_act_row_bytes. y must not alias w or x. */
typedef void (*tensor_gemm_fn)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, const void *x,
                               size_t x_stride, int64_t n_tok, float *y, int64_t ldy);

/* y[r] = dot(n, w + r*w_stride, x) for r < n_rows: one activation row against many weight rows
 * (single-token matmul), each element bit-identical to the dot named where the field is (the
 * same operations in the same order; only rows are interleaved, so x is loaded once per block
 * for several rows). x is an activation row as tensor_act_quantize writes it (a gemv may read
 * its tail). Unaligned rows and strides; y must not alias w or x.
 *
 * The n_rows rows form tensor_gemv_groups(n_rows, group) groups of the kernel's own making
 * (which rows a group holds depends on n_rows and the group index only); a call computes
 * groups [g0, g1) and writes exactly their rows of y. So one matrix's groups may be computed
 * in pieces, by several threads, in any order, with the same bits (matmul.c lets a thread
 * that runs out of rows take the last groups of another's). */
typedef void (*tensor_gemv_fn)(int64_t n, const void *w, size_t w_stride, int64_t n_rows, int64_t g0, int64_t g1,
                               const void *x, float *y);
typedef struct tensor_gemv {
    tensor_gemv_fn fn;      /* NULL: none */
    int            group;   /* rows a group holds (the last one may hold fewer) */
    /* A twin of fn that goes easier on memory (NULL: none): without fn's software prefetch, or
     * with fewer streams; the same bits, in groups of lean_group rows (0: group). Which of the
     * two a single-token matmul runs is tensor_gemv_prefetch's to say. */
    tensor_gemv_fn lean;
    int            lean_group;
    /* fn for several tokens in one call (NULL: none; the packed layouts, and Q8_0's file layout
     * on x86, where it reads fn's streams): each y element with fn's bits, each group's bytes
     * read from memory once for all the tokens. Arguments as tensor_gemm_fn's; n_rows a
     * multiple of group for a packed layout, any for the file's. */
    tensor_gemm_fn tokens;
    /* matmul takes tokens for calls of fewer tokens than this (0: any number), where past
     * it the rows unpacked for the file layout's gemm run faster */
    int            tokens_max;
} tensor_gemv;

/* The single-token matmuls' kernels (software prefetch, four streams) or their lean twins
 * (tensor_gemv.lean): the kernels read faster where memory is otherwise idle, the twins where
 * other programs keep it busy, so by default (TENSOR_PF_AUTO) tensor_matmul times its calls
 * and runs the faster way (prefetch.c: in epochs of 1 GiB of weights read, each way judged by
 * its recent epochs); TENSOR_PF_ON (the kernels) / TENSOR_PF_OFF (the twins)
 * fix it. Results never depend on it. tensor_init reads the environment variable
 * RECUR_PREFETCH=auto|on|off. */
enum { TENSOR_PF_AUTO = 0, TENSOR_PF_ON = 1, TENSOR_PF_OFF = 2 };
void tensor_gemv_prefetch_set(int mode);   /* any other value is ignored */
/* The mode of a name ("auto", "on", "off"; -1 for anything else, NULL included), and back. */
int         tensor_gemv_prefetch_parse(const char *name);
const char *tensor_gemv_prefetch_name(int mode);
int  tensor_gemv_prefetch_get(void);
/* Timed calls so far (in the auto mode): calls[0] the kernels, calls[1] the twins. */
void tensor_gemv_prefetch_stats(uint64_t calls[2]);

static inline int64_t tensor_gemv_groups(int64_t n_rows, int group) { return (n_rows + group - 1) / group; }

typedef struct tensor_kernels {
    const char          *isa;                       /* "scalar", "avx2", "avx512" */
    tensor_to_float_fn   to_float[GGUF_T_COUNT];    /* NULL where the type is not supported */
    tensor_from_float_fn from_float[GGUF_T_COUNT];  /* quantizers, for activations and weights */
    tensor_vec_dot_fn    vec_dot[GGUF_T_COUNT];     /* indexed by the weight type */
    tensor_vec_dot4_fn   vec_dot4[GGUF_T_COUNT];    /* optional (NULL: matmul uses vec_dot) */
    tensor_gemm_fn       gemm[GGUF_T_COUNT];        /* optional (NULL: vec_dot4 / vec_dot) */
    /* Q4_K weights with a row count that is a multiple of 8 (what ggml repacks): ggml's
     * gemm order, bit-identical in every table (tensor_impl.h rt_dot_q4_K_rp). */
    tensor_vec_dot_fn    dot_q4_K_rp;
    /* optional: gemm in dot_q4_K_rp's order, each element bit-identical to dot_q4_K_rp;
     * matmul takes it for batches of 2+ tokens (below 4 it runs the dot itself) */
    tensor_gemm_fn       gemm_q4_K_rp;

    /* Float helpers for attention over an F16 KV cache. Any n >= 0; pointers need only the
     * natural alignment of their element type (no SIMD alignment);
     * the operands must not overlap (except a == b for the dots). */
    /* sum_i f16(a[i]) * b[i], in a fixed order that depends only on the table and n. */
    float (*dot_f16_f32)(int64_t n, const uint16_t *a, const float *b);
    /* y[i] = fmaf(alpha, f16(x[i]), y[i]): one rounding per element, so every table gives
     * bit-identical results. */
    void  (*axpy_f16)(int64_t n, float alpha, const uint16_t *x, float *y);
    /* One F16 row a against four float rows: out[j] is bit-identical to dot_f16_f32(n, a, b[j])
     * of the same table (the same operations in the same order; only the four chains are
     * interleaved, so a is loaded and converted once). */
    void  (*dot4_f16_f32)(int64_t n, const uint16_t *a, const float *const b[4], float out[4]);
    /* axpy_f16 of one F16 row into four rows: y[j] ends bit-identical to
     * axpy_f16(n, alpha[j], x, y[j]). The y[j] must not overlap each other or x. */
    void  (*axpy4_f16)(int64_t n, const float alpha[4], const uint16_t *x, float *const y[4]);
    /* Attention tiles: nr (1..4) query rows that share K/V rows (GQA heads of a KV head,
     * consecutive tokens of one sequence). Row i sees positions p < n_ctx[i]; k[p] / v[p] is
     * position p's F16 row (the head's slice), or NULL where p has no cell. Every table gives
     * the scalar reference's bits (att_ref.c), so outputs do not depend on how rows are
     * grouped, and each output equals the one-row helpers above:
     * att_scores4: s[i][p] = dot_f16_f32(dk, k[p], q[i]) * scale, or -INFINITY where k[p] is
     *   NULL, for every p < n_ctx[i]; nothing else of s[i] is written.
     * att_wsum4: out[i][d] = rt_hsum16_ggml of 16 lanes, lane p % 16 taking
     *   fmaf(pr[i][p], f16(v[p][d]), lane) for the visible positions with a row, in increasing
     *   p (axpy_f16 into per-lane rows; llama.cpp's tinyBLAS order over its transposed V).
     * cold: the rows are most likely in memory, not in a cache (a decode step: the model's
     * weights went through the caches since the last token read them), so a table may fetch
     * them ahead; it costs instructions where they are cached (a batch's groups share them).
     * It changes no bit. */
    void  (*att_scores4)(int nr, int64_t dk, const uint16_t *const *k, const float *const q[4],
                         const int32_t n_ctx[4], float scale, float *const s[4], bool cold);
    void  (*att_wsum4)(int nr, int64_t dv, const uint16_t *const *v, const float *const pr[4],
                       const int32_t n_ctx[4], float *const out[4], bool cold);
    /* att_wsum4's outputs, bit for bit, from V transposed: vt[d * ldv + p] is output d of
     * position p (its F16), +0 where p has no row (pr[i][p] must be finite there: softmax's
     * 0), for p below the largest n_ctx rounded up to 16; pr rows readable that far too (what
     * lies past a row's context is not used). A prompt's rows share one transposition
     * (attention.c), and the weighted sums become dot products as the scores are. NULL in a
     * table that keeps att_wsum4 for every batch. */
    void  (*att_wsumt4)(int nr, int64_t dv, const uint16_t *vt, int64_t ldv, const float *const pr[4],
                        const int32_t n_ctx[4], float *const out[4]);
    /* The query rows of one sequence and KV head a batch needs before att_wsumt4 beats
     * att_wsum4 with the transposition paid (measured for the table: attention.c). */
    int32_t att_wsumt4_min_rows;
    /* dst[d * ld + j] = rows[j][d] for j < n, d < dv (+0 where rows[j] is NULL): F16 rows
     * into columns, att_wsumt4's vt. */
    void  (*f16_cols)(int32_t n, int64_t dv, const uint16_t *const *rows, uint16_t *dst, int64_t ld);
    /* sum_i a[i] * b[i], in a fixed order that depends only on the table and n. */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    /* dst[i] = rt_f32_to_f16(src[i]) (fp16.h), bit-identical in every table, NaN included. */
    void  (*f32_to_f16_row)(const float *src, uint16_t *dst, int64_t n);
    /* x[i] = rt_f16_to_f32(rt_f32_to_f16(x[i] * s)): attention's probabilities as ggml feeds
     * them to the F16 weighted sum (the scale of its softmax, then F16 rounding) in one pass. */
    void  (*scale_round_f16)(int64_t n, float *x, float s);

    /* The exponential of ggml's vectorised kernels (its AVX-512 ggml_v_expf, exp_ref.c),
     * element by element: every table gives identical bits for any n >= 0, and y may be x
     * (or g). Which elements of a row ggml sends through it, and which through libm's expf,
     * is the business of ops.c. */
    void  (*exp_f32)(int64_t n, const float *x, float *y);
    /* y[i] = x[i] / (1 + exp_f32(-x[i]))   (ggml_v_silu) */
    void  (*silu_f32)(int64_t n, const float *x, float *y);
    /* y[i] = silu_f32(x[i]) * g[i]         (ggml_vec_swiglu_f32's vector body) */
    void  (*swiglu_f32)(int64_t n, const float *x, const float *g, float *y);
    /* Softmax's vector part (ggml_vec_soft_max_f32): x[i] = exp_f32(x[i] - max) for i < n (a
     * multiple of 16); returns the sum over the chunks of 16, in order, of
     * (double)rt_hsum16_ggml(chunk). */
    double (*exp_sum_f32)(int64_t n, float *x, float max);
    /* The largest of x[0..n) (-INFINITY when n is 0; a NaN never wins), softmax's maximum: a
     * value, so a table takes the elements in any order (only a zero's sign may differ, and
     * x - (+0) and x - (-0) have the same exp). */
    float (*max_f32)(int64_t n, const float *x);
    /* s[r] = sum over i < n, in index order, of (double)(x_r[i] * x_r[i]) for the rows
     * x_r = x + r*stride, r < rows: the serial double sum of ggml's rms_norm and l2_norm (the
     * square rounded to float, then added in double), bit-identical in every table (a table
     * may run several rows side by side, each row's additions in its order). */
    void  (*sumsq_rows)(int64_t n, const float *x, int64_t stride, int64_t rows, double *s);
    /* Rotary embedding of one head (ops.h op_rope_apply): pairs (2i, 2i+1), or (i, i + n_rot/2)
     * when neox, rotated by cos_sin[2i], cos_sin[2i+1] as fmaf(x0, c, -(x1*s)) and
     * fmaf(x0, s, x1*c) (rope_ref.c). n_rot even; no alignment. */
    void  (*rope_f32)(float *head, const float *cos_sin, int n_rot, bool neox);

    /* Recurrent scans, one token of one head. Every table gives identical bits: each sum over
     * the state dimension is ggml's AVX-512 order (scan_ref.c): 64 lanes over the whole
     * blocks of 64 with fused multiply-adds, reduced in a fixed tree, then the tail in order.
     * Any d, ds, n >= 0; no alignment; no operand may overlap another. */
    /* Gated delta rule (model/blocks/deltanet.c). S: d rows of d floats, row j = value index j
     * over key index i. For each row j: S_j *= decay; delta = (v[j] - sum_i S_j[i] k[i]) * beta
     * (tail: products added); S_j[i] = fmaf(k[i], delta, S_j[i]); o[j] = (sum_i S_j[i] q[i])
     * * scale. */
    void  (*gdn_step)(int64_t d, float *S, const float *q, const float *k, const float *v, float decay,
                      float beta, float scale, float *o);
    /* Mamba-2 scan of n rows of ds floats at s (model/blocks/mamba.c): for row p, x_dt =
     * x[p] * dt; s_p[i] = fmaf(s_p[i], dA, B[i] * x_dt); y[p] = sum_i s_p[i] C[i] (fmaf, the
     * tail too). */
    void  (*ssm2_rows)(int64_t ds, int64_t n, float *s, const float *B, const float *C, float dA, float dt,
                       const float *x, float *y);
    /* optional (NULL: ssm2_rows token by token): ssm2_rows for nt tokens in order, token t's B,
     * C and x at t * in_stride floats past B, C and x, its dA and dt in dA[t], dt[t], its y at
     * y + t * y_stride; the same bits as those nt calls (a row's state can stay in registers
     * while the tokens pass). The state is read from s_in and the state after the last token
     * written to s: s_in == s steps it in place; else s_in is left as it was (n * ds floats
     * each, not overlapping), so a run can start from a checkpoint's copy or end in one. */
    void  (*ssm2_tokens)(int64_t ds, int64_t n, int64_t nt, const float *s_in, float *s, const float *B,
                         const float *C, const float *x, int64_t in_stride, const float *dA, const float *dt,
                         float *y, int64_t y_stride);
    /* Mamba-1 scan of n channels, one token (model/blocks/mamba.c): channel c's state is the
     * ds floats at s + c * ds, its A row at A + c * ds; with dsp = softplus(dt[c]) (dt > 20 ?
     * dt : logf(1 + expf(dt))) and x_dt = x[c] * dsp, for i < ds in order: st = fmaf(s[i], e,
     * B[i] * x_dt) where e = expf(dsp * A[i]), sum = fmaf(st, C[i], sum) from 0, s[i] = st;
     * y[c] = sum (ggml's ssm_scan, Mamba-1 branch). expf and logf as glibc's FMA build
     * computes them (tensor_impl.h rt_expf_libm, rt_logf_libm). This is not the 64-lane order
     * above: Mamba-1's sum over the state is one chain per channel. */
    void  (*ssm1_step)(int64_t ds, int64_t n, float *s, const float *A, const float *B, const float *C,
                       const float *dt, const float *x, float *y);
    /* One causal depthwise conv step of channels [lo, hi) of C (ggml_ssm_conv's order): for
     * each channel, out = fmaf chain over k < K-1 of state[k*C + ch] * w[ch*K + k] from 0, then
     * fmaf(in[ch], w[ch*K + K-1], ·); the K-1 state rows shift up and in becomes the last.
     * in may be out; nothing else overlaps. */
    void  (*conv_step)(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, const float *in,
                       float *out);
    /* n conv_steps of one sequence's consecutive tokens: token t reads the row at
     * in + t*in_stride and writes out + t*out_stride; bit-identical to the n calls (a channel's
     * weights and state can stay in registers across the tokens). in and out may be the same
     * rows (equal strides); nothing else overlaps. */
    void  (*conv_run)(float *state, const float *w, int K, int64_t C, int64_t lo, int64_t hi, int64_t n,
                      const float *in, int64_t in_stride, float *out, int64_t out_stride);

    /* Single-token matmul (optional, NULL: matmul calls the dot row by row). gemv[t] gives
     * vec_dot[t]'s bits; gemv_q4_K_rp gives dot_q4_K_rp's. tensor_matmul takes them for
     * one-token calls. */
    tensor_gemv          gemv[GGUF_T_COUNT];
    tensor_gemv          gemv_q4_K_rp;
    /* Q4_K rows packed 16 to a group (tensor_q4_K_r16_pack): row r of the packed rows gets
     * dot_q4_K_rp's bits for the row it was. group 16; n_rows a multiple of 16; w_stride the
     * Q4_K row bytes (a group is 16 rows' bytes). */
    tensor_gemv          gemv_q4_K_r16;
    bool                 q4_K_r16_native;   /* gemv_q4_K_r16 is a SIMD kernel */
    /* optional (NULL: matmul unpacks the rows for gemm_q4_K_rp): gemm_q4_K_rp over rows packed
     * so, each element with its bits; w a group's start, n_rows a multiple of 16, w_stride the
     * Q4_K row bytes. */
    tensor_gemm_fn       gemm_q4_K_rp_r16;
    /* Q6_K rows packed 16 to a group (tensor_q6_K_r16_pack): row r gets vec_dot[Q6_K]'s bits
     * for the row it was; as gemv_q4_K_r16 otherwise. */
    tensor_gemv          gemv_q6_K_r16;
    bool                 q6_K_r16_native;   /* gemv_q6_K_r16 is a SIMD kernel */
    /* optional (NULL: matmul unpacks the rows for gemm[Q6_K]): gemm[Q6_K] over rows packed so,
     * each element with gemm[Q6_K]'s bits; w a group's start, n_rows a multiple of 16,
     * w_stride the Q6_K row bytes. */
    tensor_gemm_fn       gemm_q6_K_r16;
    /* Q8_0 rows packed 16 to a group (tensor_q8_0_r16_pack): row r gets vec_dot[Q8_0]'s bits
     * for the row it was (the table's order: ggml's, or the block order of a q8blk table). */
    tensor_gemv          gemv_q8_0_r16;
    bool                 q8_0_r16_native;   /* gemv_q8_0_r16 is a SIMD kernel */
    /* optional (NULL: matmul unpacks the rows for gemm[Q8_0]): gemm[Q8_0] over rows packed so,
     * each element with gemm[Q8_0]'s bits; w a group's start, n_rows a multiple of 16,
     * w_stride the Q8_0 row bytes. */
    tensor_gemm_fn       gemm_q8_0_r16;
    /* Q4_0 rows packed 16 to a group (tensor_q4_0_r16_pack): row r gets vec_dot[Q4_0]'s bits
     * for the row it was. Only a table whose Q4_0 dot it reproduces has it (AVX-512). */
    tensor_gemv          gemv_q4_0_r16;
    bool                 q4_0_r16_native;   /* gemv_q4_0_r16 is a SIMD kernel */
    /* optional (NULL: matmul unpacks the rows for gemm[Q4_0]): gemm[Q4_0] over rows packed so,
     * each element with gemm[Q4_0]'s bits; w a group's start, n_rows a multiple of 16,
     * w_stride the Q4_0 row bytes. */
    tensor_gemm_fn       gemm_q4_0_r16;
    /* Q5_K rows packed 16 to a group (tensor_q5_K_r16_pack, or with q5_K_r16_fives
     * tensor_q5_K_r16f_pack): row r gets vec_dot[Q5_K]'s bits for the row it was. Only a table
     * whose Q5_K dot it reproduces has it (AVX-512, AVX2). */
    tensor_gemv          gemv_q5_K_r16;
    bool                 q5_K_r16_native;   /* gemv_q5_K_r16 is a SIMD kernel */
    bool                 q5_K_r16_fives;    /* its layout is the five-byte one (AVX2) */
    /* optional (NULL: matmul unpacks the rows for gemm[Q5_K]): gemm[Q5_K] over rows packed so,
     * each element with gemm[Q5_K]'s bits; w a group's start, n_rows a multiple of 16,
     * w_stride the Q5_K row bytes. */
    tensor_gemm_fn       gemm_q5_K_r16;

    /* Q8_0 x Q8_0 in the block order (tensor_kernels_q8blk's twins): its activation tails
     * (tensor_act_quantize) are laid out for those kernels. */
    bool                 q8_block;
} tensor_kernels;

/* ---- Q4_K packed 16 rows to a group -------------------------------------------------------
 *
 * The single-token Q4_K kernel reads 16 rows side by side. In the file's layout those are 16
 * places in memory and every row's block needs its scales unpacked and its sums reduced
 * across lanes; packed, block i of the 16 rows is one run of TENSOR_R16_BLOCK bytes (the same
 * bytes as 16 blocks, rearranged) laid out for one lane per row:
 *   [0, 32)      d of rows 0..15 (fp16)          [32, 64)  dmin of rows 0..15
 *   [64, 256)    scale byte k (0..11) of row r at 64 + 16k + r
 *   [256, 2304)  qs bytes 4u..4u+3 of chunk j (32 bytes each) of row r at 256 + 64(8j + u) + 4r
 * and group g (rows 16g..16g+15) is blocks 0..n/256-1 of those runs in order. A packed matrix
 * has the file's size, so a group of rows takes 16 rows' bytes. */
#define TENSOR_R16_ROWS 16
#define TENSOR_R16_BLOCK 2304
/* Whether weights matmul takes from this table are best packed (the table has a kernel for
 * the packed layout; every table computes it, with the same bits). */
bool tensor_q4_K_r16_preferred(const tensor_kernels *k);
/* Packs 16 Q4_K rows of n elements (n a multiple of 256), src_stride bytes apart, into dst. */
void tensor_q4_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst);
/* The inverse: the 16 rows of the group at src, to dst_stride bytes apart. */
void tensor_q4_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);

/* ---- Q6_K packed 16 rows to a group -------------------------------------------------------
 *
 * As Q4_K above, for the single-token Q6_K kernel (x86/gemv_q6k16_avx512.c): in the file's
 * layout every row's block needs its 6-bit values assembled from three places, its scales
 * spread and its sums reduced across lanes; packed, block i of 16 rows is one run of
 * TENSOR_Q6R16_BLOCK bytes (16 blocks' bytes) with one lane per row and each value whole:
 *   [0, 32)       d of rows 0..15 (fp16)
 *   [32, 288)     scale of sub-block k (0..15) of row r at 32 + 16k + r
 *   [288, 3360)   for half h (0, 1) and u (0..7), three 64-byte vectors P0, P1, P2 at
 *                 288 + 192(8h + u) + 64c: byte 4r + j of Pc holds, in bits 0-5, the 6-bit
 *                 value (ql nibble | qh bits << 4) of row r's element 128h + 32c + 4u + j, and
 *                 in bits 6-7 bits 2c, 2c+1 of the value of its element 128h + 96 + 4u + j
 * and group g is blocks 0..n/256-1 of those runs in order (16 rows' bytes). */
#define TENSOR_Q6R16_BLOCK 3360
bool tensor_q6_K_r16_preferred(const tensor_kernels *k);
/* Packs 16 Q6_K rows of n elements (n a multiple of 256), src_stride bytes apart, into dst. */
void tensor_q6_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst);
/* The inverse: the 16 rows of the group at src, to dst_stride bytes apart. */
void tensor_q6_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);
/* Row r (0..15) of the group at group, as the Q6_K row it was, into dst. */
void tensor_q6_K_r16_unpack_row(const void *group, int64_t n, int r, void *dst);

/* ---- Q8_0 packed 16 rows to a group -------------------------------------------------------
 *
 * As Q4_K above, for the single-token Q8_0 kernel (x86/gemv_q8016_avx512.c): in the file's
 * layout 16 rows are 16 streams of 34-byte blocks, each block's sums reduced across lanes;
 * packed, block i of 16 rows is one run of TENSOR_Q8R16_BLOCK bytes (16 blocks' bytes,
 * rearranged) with one lane per row:
 *   [0, 32)       d of rows 0..15 (fp16)
 *   [32, 544)     quants 4l..4l+3 (l = 0..7) of row r at 32 + 64l + 4r
 * and group g is blocks 0..n/32-1 of those runs in order (16 rows' bytes). */
#define TENSOR_Q8R16_BLOCK 544
/* Whether Q8_0 matrices should be packed for table k: where it has the packed single-token
 * kernel and no several-token kernel for the file's layout (gemv[Q8_0].tokens). Where it has
 * both (AVX-512), the file's layout reads faster: its single-token kernel's four streams
 * outrun the packed kernel's one on the Zen 5 machine measured (x86/gemm_avx512.c
 * gemm_q8_0_streams), and its several-token kernel matches the packed ones below 16 tokens. */
bool tensor_q8_0_r16_preferred(const tensor_kernels *k);
/* Packs 16 Q8_0 rows of n elements (n a multiple of 32), src_stride bytes apart, into dst. */
void tensor_q8_0_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst);
/* The inverse: the 16 rows of the group at src, to dst_stride bytes apart. */
void tensor_q8_0_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);
/* Row r (0..15) of the group at group, as the Q8_0 row it was, into dst. */
void tensor_q8_0_r16_unpack_row(const void *group, int64_t n, int r, void *dst);

/* ---- Q4_0 packed 16 rows to a group -------------------------------------------------------
 *
 * As Q8_0 above, for the single-token Q4_0 kernel (x86/gemv_q40_avx512.c), whose file-layout
 * kernel is bound by its vector work (unpacking each row's nibbles and scales), not by memory.
 * Block i of 16 rows is one run of TENSOR_Q40R16_BLOCK bytes with one lane per row:
 *   [0, 32)       d of rows 0..15 (fp16)
 *   [32, 288)     quant bytes 4u..4u+3 (u = 0..3; their low nibbles are elements 4u..4u+3,
 *                 their high ones 16 + 4u..) of row r at 32 + 64u + 4r
 * and group g is blocks 0..n/32-1 of those runs in order (16 rows' bytes). */
#define TENSOR_Q40R16_BLOCK 288
/* Whether Q4_0 matrices should be packed for table k: where it has the packed kernel. */
bool tensor_q4_0_r16_preferred(const tensor_kernels *k);
/* Packs 16 Q4_0 rows of n elements (n a multiple of 32), src_stride bytes apart, into dst. */
void tensor_q4_0_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst);
/* The inverse: the 16 rows of the group at src, to dst_stride bytes apart. */
void tensor_q4_0_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);

/* ---- Q5_K packed 16 rows to a group -------------------------------------------------------
 *
 * As Q4_0 above, for the single-token Q5_K kernels (x86/gemv_q4k16_avx512.c, x86/gemv_q4k16_avx2.c
 * gemv_q5_K_r16), whose file-layout kernel is bound by its vector work (each row's fifth bits,
 * scales and lane sums), not by memory. Two layouts of the same size: the AVX-512 table's
 * (masks, for its masked adds) and the AVX2 table's (five-byte runs, below). In the first,
 * block i of 16 rows is one run of TENSOR_Q5R16_BLOCK bytes with one lane per row:
 *   [0, 32)       d of rows 0..15 (fp16)        [32, 64)  dmin of rows 0..15
 *   [64, 256)     scale byte k (0..11) of row r at 64 + 16k + r
 *   [256, 768)    the fifth bits: for chunk j (sub-blocks 2j, 2j+1), u = 0..7 and half h (0:
 *                 sub-block 2j, 1: 2j+1), a 64-bit little-endian mask at 256 + 16(8j + u) + 8h
 *                 whose bit 4r + e is that of row r's element 4u + e of the sub-block
 *   [768, 2816)   qs bytes 4u..4u+3 of chunk j (32 bytes each) of row r at 768 + 64(8j + u) + 4r
 * (Q4_K's packed places, with the masks between), and group g is blocks 0..n/256-1 of those
 * runs in order (16 rows' bytes). */
#define TENSOR_Q5R16_BLOCK 2816
/* The five-byte layout: the AVX2 table's layout of the same block (k->q5_K_r16_fives), whose
 * kernel has no masked adds and would spend 10 of its 17 operations a unit turning masks into
 * bits: d, dmin and scales as above; then, for chunk j, units 4q..4q+3 and rows 8g..8g+7, a run of 5 × 32 bytes
 * at 256 + 640j + 160(2q + g), byte 32k + 4r + e of which is P_k's lane for row 8g + r,
 * element e of the units' 4. Its 8 five-bit value vectors (v 2t + h: unit 4q + t, sub-block
 * 2j + h) are bits 0-4 of P0..P4 (v0..v4) and, made of their bits 5-7, v5 = P0[5..7] |
 * P1[5..6] << 3, v6 = P1[7] | P2[5..7] << 1 | P3[5] << 4, v7 = P3[6..7] | P4[5..7] << 2: an
 * and a vector, or 5-8 operations for the last three. */
/* Whether Q5_K matrices should be packed for table k: where it has the packed kernel. */
bool tensor_q5_K_r16_preferred(const tensor_kernels *k);
/* Packs 16 Q5_K rows of n elements (n a multiple of 256), src_stride bytes apart, into dst. */
void tensor_q5_K_r16_pack(const void *src, size_t src_stride, int64_t n, void *dst);
/* The inverse: the 16 rows of the group at src, to dst_stride bytes apart. */
void tensor_q5_K_r16_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);
/* The same two in the five-byte layout. */
void tensor_q5_K_r16f_pack(const void *src, size_t src_stride, int64_t n, void *dst);
void tensor_q5_K_r16f_unpack(const void *src, int64_t n, void *dst, size_t dst_stride);

/* Fills the tables; safe to call more than once (recur_init calls it). */
void tensor_init(void);
const tensor_kernels *tensor_kernels_scalar(void);
const tensor_kernels *tensor_kernels_avx2(void);    /* NULL when the CPU lacks AVX2+FMA+F16C+BMI2 */
/* NULL when the CPU (or the OS, via XGETBV) lacks AVX-512 F/BW/VL/DQ/VNNI. */
const tensor_kernels *tensor_kernels_avx512(void);
/* The twin of a table (one of the above, or a twin) whose Q8_0 x Q8_0 entries follow the block
 * order (tensor_impl.h rt_dot_q8_0_blk) instead of ggml's: every other entry is the table's.
 * Its isa names it ("avx512+q8blk"). NULL for a table this module did not build. */
const tensor_kernels *tensor_kernels_q8blk(const tensor_kernels *base);
/* The best table for this CPU. The environment variable RECUR_ISA=scalar|avx2|avx512 can
 * force a lower one (for tests and benchmarks). */
const tensor_kernels *tensor_kernels_active(void);

/* Weight types recur can compute with (to_float, from_float and vec_dot present in every
 * table): F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, IQ4_XS. Q8_K is an activation type
 * only: it has to_float and from_float but no vec_dot, and this returns false for it. */
bool     tensor_type_supported(uint32_t type);
/* The activation format the dot product of a weight type uses (GGUF_T_COUNT when the type
 * is not supported). */
uint32_t tensor_vec_dot_type(uint32_t type);
/* Elements per block of a type this module knows (supported types and Q8_K), else 0. */
int64_t  tensor_block_size(uint32_t type);
/* Bytes of a row of n elements of type (n a multiple of the block size); 0 when the type is
 * unknown to this module. */
size_t   tensor_row_bytes(uint32_t type, int64_t n);

/* ---- activation rows ---------------------------------------------------------------------
 *
 * A matmul quantizes each token row of X once to the weight's vec_dot type. For Q8_0 the row
 * is followed by a tail the prompt gemms read instead of deriving it again in every tile:
 * per block its scale as a float and its quants in the form the table's kernels take
 * (tensor_impl.h, q8_0_tail). The vec_dot row itself is exactly from_float's, so dots ignore
 * the tail (the block order's gemv reads it). */
/* Bytes of one activation row of n elements of vtype with its tail, rounded up to 64 (0 for
 * a type this module does not know). */
size_t tensor_act_row_bytes(uint32_t vtype, int64_t n);
/* Quantize n floats with k's from_float[vtype] into dst, then write the tail. */
void   tensor_act_quantize(const tensor_kernels *k, uint32_t vtype, const float *x, void *dst, int64_t n);
/* Write the tail k's kernels read of a row of n elements of vtype already at row (nothing for
 * a type without one). */
void   tensor_act_tail(const tensor_kernels *k, uint32_t vtype, void *row, int64_t n);

/* ---- matrix multiplication -------------------------------------------------------------
 *
 * Y[t][o] = sum_i W[o][i] * X[t][i]   for t < n_tok, o < n_out
 *
 * W: n_out rows of n_in elements of wtype, contiguous (row o at W + o*tensor_row_bytes).
 * X: n_tok rows of n_in floats, contiguous. Y: n_tok rows with a stride of ldy floats.
 * scratch: at least tensor_matmul_scratch_bytes(wtype, n_in, n_tok) bytes, 64-byte aligned;
 *          holds X as activation rows (tensor_act_quantize), one per token at a stride of
 *          tensor_act_row_bytes. Y must not alias X or scratch.
 * k: a table from the accessors above; wtype must be supported (tensor_type_supported).
 * Work is split over the pool's threads by output rows (invariant 2); pool may be NULL.
 */
size_t tensor_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int64_t n_tok);
/* The wtype of a Q4_K W packed 16 rows to a group (tensor_q4_K_r16_pack, n_out a multiple
 * of 16) for tensor_matmul and tensor_matmul_n: each Y element gets the bits the unpacked
 * Q4_K matrix gives. Nothing else takes it. */
#define TENSOR_T_R16(type) (0x100u | (type))   /* the packed wtype of a file type */
#define TENSOR_T_Q4_K_R16 TENSOR_T_R16(GGUF_T_Q4_K)
/* The same for a Q6_K W packed by tensor_q6_K_r16_pack (tensor_get_row takes it too). */
#define TENSOR_T_Q6_K_R16 TENSOR_T_R16(GGUF_T_Q6_K)
/* And for a Q8_0 W packed by tensor_q8_0_r16_pack (tensor_get_row takes it too). */
#define TENSOR_T_Q8_0_R16 TENSOR_T_R16(GGUF_T_Q8_0)
/* And for a Q4_0 W packed by tensor_q4_0_r16_pack (never a token embedding: no tensor_get_row). */
#define TENSOR_T_Q4_0_R16 TENSOR_T_R16(GGUF_T_Q4_0)
/* And for a Q5_K W packed by tensor_q5_K_r16_pack, or by tensor_q5_K_r16f_pack where the
 * table's q5_K_r16_fives (never a token embedding: no tensor_get_row). */
#define TENSOR_T_Q5_K_R16 TENSOR_T_R16(GGUF_T_Q5_K)
void   tensor_matmul(tp_pool *pool, const tensor_kernels *k, uint32_t wtype, const void *W,
                     int64_t n_in, int64_t n_out, const float *X, int64_t n_tok,
                     float *Y, int64_t ldy, void *scratch);
/* One matrix of a tensor_matmul_n call: n_out rows of wtype at W (n_in per row, the call's),
 * Y rows at a stride of ldy floats. */
typedef struct tensor_mm {
    uint32_t    wtype;
    const void *W;
    int64_t     n_out;
    float      *Y;
    int64_t     ldy;
} tensor_mm;
#define TENSOR_MM_MAX 4
/* tensor_matmul for each of mats[0..n_mats) over the same X (q/k/v, gate/up): those whose
 * vec_dot type is mats[0]'s (among the first TENSOR_MM_MAX) run as one job, X quantized
 * once, one barrier; any other runs alone after them. Every Y element is the one
 * tensor_matmul gives (the same dot on the same quantized row), so results do not depend
 * on the grouping. scratch: the largest tensor_matmul_scratch_bytes of them. */
void tensor_matmul_n(tp_pool *pool, const tensor_kernels *k, const tensor_mm *mats, int n_mats, int64_t n_in,
                     const float *X, int64_t n_tok, void *scratch);
/* One group of a tensor_matmul_grouped call: its n_w matrices (the call's type and shape)
 * over the rows [row0, row0 + n_rows) of the call's X. */
typedef struct tensor_mm_group {
    const void *W[2];
    int64_t     row0, n_rows;
} tensor_mm_group;
/* The experts of a mixture-of-experts layer, each over its own tokens: for every group g and
 * row r of g, Ys[w][r · n_out + o] = dot(row o of g's W[w], X row r), the dot tensor_matmul
 * computes (the same bits as one tensor_matmul per group and matrix). X row r is at
 * X + rows[r] · n_in when rows is not NULL (a gather), else X + r · n_in; the n_rows rows are
 * quantized once and the groups' row shares run as one job (one barrier for all the
 * experts, not one per expert and matrix). n_w: 1 or 2; groups' rows within [0, n_rows);
 * scratch: tensor_matmul_scratch_bytes(wtype, n_in, n_rows). */
void tensor_matmul_grouped(tp_pool *pool, const tensor_kernels *k, uint32_t wtype, int64_t n_in, int64_t n_out,
                           const tensor_mm_group *groups, int n_groups, int n_w, const float *X, const int32_t *rows,
                           int64_t n_rows, float *const *Ys, void *scratch);
/* The dot tensor_matmul computes each Y element with, for a weight of n_out rows: vec_dot,
 * except BF16 with n_out % 4 != 0 (rt_dot_bf16_vec's order) and Q4_K with n_out % 8 == 0
 * (dot_q4_K_rp: ggml repacks those). A property of the weight, never of the batch. */
tensor_vec_dot_fn tensor_matmul_dot(const tensor_kernels *k, uint32_t wtype, int64_t n_out);

/* Row `row` of a 2-D weight (n_in elements per row) as floats: embedding lookup. type must
 * have a to_float (the supported types and Q8_K), or be TENSOR_T_Q6_K_R16 or
 * TENSOR_T_Q8_0_R16. */
void tensor_get_row(const tensor_kernels *k, uint32_t type, const void *W, int64_t n_in,
                    int64_t row, float *dst);

#endif
