/* matmul.c — Y = X·Wᵀ over the thread pool, and row lookup.
 *
 * Two jobs per call, each a full barrier (threadpool.h invariant 2):
 *  1. every token row of X is quantized into scratch with the table's from_float of the
 *     weight type's vec_dot_type (rows split among threads; a row's bytes never depend on
 *     who quantizes it);
 *  2. output rows are split into shares (MM_SHARES per thread, so a thread the OS holds back
 *     delays little; one per thread for a single token, see mm_shares); a prompt's shares
 *     taper (tp_split_tapered: the last ones small, so the thread that runs out first waits
 *     little for the others: mamba2-370m pp512, pool timer outside the repo, waits 0.34-0.47
 *     -> 0.11 s of 4.3 s in matmul jobs over 4 runs; qwen35-0.8b 0.25-0.28 -> 0.08-0.10), a
 *     single token's are one per thread for each run of matrices with one kernel, walked in
 *     chunks of row groups that a thread with nothing left may take from the back
 *     (mm_one_token); each Y element is exactly one vec_dot call, one lane of a vec_dot4
 *     call or one element of a gemm or gemv call, which give the same bits (tensor.h
 *     invariant 2; the dot is tensor_matmul_dot's, a property of the weight). A table with
 *     a gemm for the type gets a share's whole row range (it tiles rows x tokens itself),
 *     as does a several-token gemv below its tokens_max (tensor_gemv.tokens), and a gemv a
 *     chunk's groups of rows (it runs several rows side by side).
 *     Otherwise rows are walked in tiles of MM_TILE weight rows, and each tile is dotted with
 *     every token before the next, so a batch reads W from memory once.
 *
 * tensor_matmul_n does the same for several matrices over one X: X is quantized once, and
 * the matrices' shares form one job (one barrier instead of one per matrix).
 * tensor_matmul_grouped does it for the experts of a MoE layer, each matrix over its own run
 * of rows (gathered from X as they are quantized): every (expert, matrix) pair a job of the
 * kind above, up to MM_GROUP_JOBS of them in one pool job.
 *
 * Scratch layout: n_tok activation rows (tensor.h), each tensor_act_row_bytes(vec_dot_type,
 * n_in) bytes, a multiple of 64 (so every row starts 64-byte aligned when scratch is). */
#include "tensor/tensor_impl.h"

#include "core/timing.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define MM_TILE 16
#define MM_SHARES 4   /* row shares per thread */
/* Below this many multiply-adds a matmul runs on the calling thread alone: waking the
 * workers would cost more than it saves (the result is the same either way). */
#define MM_MIN_PARALLEL (1 << 19)   /* weight rows per tile: 16 rows of 4096 Q8_0 = 70 KB, within L2 */

size_t tensor_act_row_bytes(uint32_t vtype, int64_t n) {
    const size_t rb = tensor_row_bytes(vtype, n);
    if (vtype == GGUF_T_Q8_0 && rb) return q8_0_tail(n) + (((size_t)(n / QK8_0) * Q8_0_BTAIL_BYTES + 63) & ~(size_t)63);
    return (rb + 63) & ~(size_t)63;
}

void tensor_act_quantize(const tensor_kernels *k, uint32_t vtype, const float *x, void *dst, int64_t n) {
    k->from_float[vtype](x, dst, n);
    tensor_act_tail(k, vtype, dst, n);
}

/* The block order's tail: the scale, the dpbusd start Q8_MAGIC_BITS − 128 · Σ qs, the quants. */
static void act_tail_blk(const uint8_t *q, uint8_t *u, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, q += Q8_0_BYTES, u += Q8_0_BTAIL_BYTES) {
        int32_t sum = 0;
        for (int i = 0; i < QK8_0; i++) sum += (int8_t)q[Q8_0_QS + i];
        const int32_t c = Q8_MAGIC_BITS - 128 * sum;
        wr_f32(u, rd_f16(q));
        memcpy(u + Q8_0_BTAIL_C, &c, 4);
        memcpy(u + Q8_0_BTAIL_QS, q + Q8_0_QS, QK8_0);
    }
}

/* ggml's order's tail: the scale, the quants + 128. */
static void act_tail_ggml(const uint8_t *q, uint8_t *u, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, q += Q8_0_BYTES, u += Q8_0_TAIL_BYTES) {
        wr_f32(u, rd_f16(q));
        for (int i = 0; i < 32; i += 8) {   /* + 128 = flip each byte's top bit */
            uint64_t v;
            memcpy(&v, q + Q8_0_QS + i, 8);
            v ^= 0x8080808080808080u;
            memcpy(u + Q8_0_TAIL_QS + i, &v, 8);
        }
    }
}

void tensor_act_tail(const tensor_kernels *k, uint32_t vtype, void *row, int64_t n) {
    if (vtype != GGUF_T_Q8_0) return;
    (k->q8_block ? act_tail_blk : act_tail_ggml)(row, (uint8_t *)row + q8_0_tail(n), n / QK8_0);
}

static size_t act_stride(uint32_t wtype, int64_t n_in) {
    return tensor_act_row_bytes(tensor_vec_dot_type(wtype), n_in);
}

/* The file type of a wtype tensor_matmul takes (TENSOR_T_Q4_K_R16 is Q4_K rearranged,
 * TENSOR_T_Q6_K_R16 Q6_K, TENSOR_T_Q8_0_R16 Q8_0, TENSOR_T_Q4_0_R16 Q4_0, TENSOR_T_Q5_K_R16
 * Q5_K). */
static bool mm_packed(uint32_t wtype) {
    return wtype == TENSOR_T_Q4_K_R16 || wtype == TENSOR_T_Q6_K_R16 || wtype == TENSOR_T_Q8_0_R16 ||
           wtype == TENSOR_T_Q4_0_R16 || wtype == TENSOR_T_Q5_K_R16;
}
static uint32_t mm_file_type(uint32_t wtype) { return mm_packed(wtype) ? wtype & 0xFFu : wtype; }

size_t tensor_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int64_t n_tok) {
    wtype = mm_file_type(wtype);
    if (!tensor_type_supported(wtype) || n_in < 0 || n_tok < 0) return 0;
    return act_stride(wtype, n_in) * (size_t)n_tok;
}

typedef struct mm_job {
    const tensor_kernels *k;
    uint32_t    wtype, vtype;
    const uint8_t *W;
    size_t      w_stride, x_stride;
    int64_t     n_in, n_out, n_tok, ldy;
    const float *X;
    const int32_t *rows;   /* X row of activation row t: rows[t] (a gather), or t when NULL */
    float       *Y;
    uint8_t     *Xq;
    tensor_vec_dot_fn dot;    /* tensor_matmul_dot's, and the kernels that give its bits: */
    tensor_gemm_fn    gemm;   /* NULL: none */
    tensor_gemv       gemv;   /* .fn NULL: none */
    bool              r16;    /* W packed 16 rows to a group (tensor.h): the gemv reads it so,
                               * anything else unpacks it first (mm_dot_r16) */
} mm_job;

static void mm_quantize(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    long lo, hi;
    tp_split((long)j->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++)
        tensor_act_quantize(j->k, j->vtype, j->X + (j->rows ? j->rows[t] : t) * j->n_in, j->Xq + (size_t)t * j->x_stride,
                            j->n_in);
}

tensor_vec_dot_fn tensor_matmul_dot(const tensor_kernels *k, uint32_t wtype, int64_t n_out) {
    /* ggml's tinyBLAS takes BF16 weights only with a multiple of 4 rows; the others get
     * ggml_vec_dot_bf16's order */
    if (wtype == GGUF_T_BF16 && n_out % 4 != 0) return rt_dot_bf16_vec;
    /* ggml's x86 CPU backend repacks Q4_K weights with a multiple of 8 rows and multiplies
     * prompt batches with its gemm: that order, for every batch (tensor_impl.h) */
    if (wtype == GGUF_T_Q4_K && n_out % 8 == 0) return k->dot_q4_K_rp;
    return k->vec_dot[wtype];
}

/* One token: the row groups [g0, g1) (tensor.h gemv) of rows [lo, hi). Without a gemv the
 * groups are rows r and r + q (q = half the rows; an odd last row is group q): two streams,
 * each straight through its half. */
static int mm_group_rows(const mm_job *j) { return j->gemv.fn ? j->gemv.group : 2; }

static void mm_groups(const mm_job *j, long lo, long hi, int64_t g0, int64_t g1) {
    if (j->gemv.fn) {   /* rows side by side, x loaded once; each element is dot's */
        j->gemv.fn(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, g0, g1, j->Xq, j->Y + lo);
        return;
    }
    const long q = (hi - lo) / 2, e = g1 < q ? (long)g1 : q;
    for (long r = lo + g0; r < lo + e; r++) {
        j->Y[r] = j->dot(j->n_in, j->W + (size_t)r * j->w_stride, j->Xq);
        j->Y[r + q] = j->dot(j->n_in, j->W + (size_t)(r + q) * j->w_stride, j->Xq);
    }
    if (g1 > q && (hi - lo) % 2) j->Y[hi - 1] = j->dot(j->n_in, j->W + (size_t)(hi - 1) * j->w_stride, j->Xq);
}

/* Rows [lo, hi) for n_tok > 1, row lo's bytes at base (then the file's layout: row r at
 * base + (r - lo) · w_stride). */
static void mm_dot_rows(const mm_job *j, const uint8_t *base, long lo, long hi) {
    if (!j->r16 && j->gemv.tokens && (!j->gemv.tokens_max || j->n_tok < j->gemv.tokens_max)) {
        /* the single-token kernel's streams for a few tokens (Q8_0) */
        j->gemv.tokens(j->n_in, base, j->w_stride, hi - lo, j->Xq, j->x_stride, j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    if (j->gemm) {   /* tiles rows x tokens itself; each element is vec_dot's */
        j->gemm(j->n_in, base, j->w_stride, hi - lo, j->Xq, j->x_stride, j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    const tensor_vec_dot_fn dot = j->dot;
    const tensor_vec_dot4_fn dot4 = dot == j->k->vec_dot[j->wtype] ? j->k->vec_dot4[j->wtype] : NULL;
    for (long r0 = lo; r0 < hi; r0 += MM_TILE) {
        const long r1 = r0 + MM_TILE < hi ? r0 + MM_TILE : hi;
        int64_t t = 0;
        for (; dot4 && t + 4 <= j->n_tok; t += 4) {   /* four tokens per weight row read */
            const uint8_t *x = j->Xq + (size_t)t * j->x_stride;
            float *y = j->Y + t * j->ldy, out[4];
            for (long r = r0; r < r1; r++) {
                dot4(j->n_in, base + (size_t)(r - lo) * j->w_stride, x, j->x_stride, out);
                for (int q = 0; q < 4; q++) y[q * j->ldy + r] = out[q];
            }
        }
        for (; t < j->n_tok; t++) {
            const uint8_t *x = j->Xq + (size_t)t * j->x_stride;
            float *y = j->Y + t * j->ldy;
            for (long r = r0; r < r1; r++) y[r] = dot(j->n_in, base + (size_t)(r - lo) * j->w_stride, x);
        }
    }
}

/* A packed matrix's rows [lo, hi) (multiples of 16) for n_tok > 1. Where the table has a
 * several-token kernel for the layout (tensor_gemv.tokens: each group's bytes read once for
 * all the tokens, the values split once for up to four), it takes every call of a type
 * without a packed gemm (Q8_0 in the block order; Q4_K on AVX2; Q6_K on AVX-512 below its
 * tokens_max) and, below
 * MM_R16_TOKENS_Q4_GEMM, MM_R16_TOKENS_Q8_GEMM or MM_R16_TOKENS_Q6_GEMM tokens, of one with
 * (Q4_K and Q5_K, whose gemm is Q4_K's; Q8_0 in ggml's order; Q6_K on AVX2): a parallel-slot
 * decode step, a short prompt; in either case only below the
 * kernel's own tokens_max where it has one (Q6_K: AVX2 256, AVX-512 160). Otherwise a few tokens take the
 * packed single-token kernel once per token over MM_R16_SLAB rows at a time, which stay in cache
 * between the tokens: the same bits (the kernel's rows get the file layout's dot, as the gemms'
 * do). More take the table's packed gemm where it has one (Q8_0 in ggml's order, Q4_K in the
 * repacked order, Q5_K in its like order: x86/gemm_q4k_avx512.c gemm_q5_K_r16, Q4_0 in ggml's order:
 * x86/gemm_q40_avx512.c gemm_q4_0_r16, Q6_K on AVX2: x86/gemm_q6k_avx2.c gemm_q6_K_r16; rows too
 * long for their panel buffers go in pieces),
 * else MM_R16_SLAB rows at a time unpacked into a buffer that mm_dot_rows reads as the file's
 * rows (the same kernels, so the same bits; unpacking a slab costs a
 * scalar reshuffle of it, against its n_tok-fold use). Without a buffer, the packed group's
 * scalar dot (the same bits, slowly).
 * Measured with programs outside the repo:
 *  - /tmp/s6/par.c (S sequences at depth 16, one token each per recur_decode call, qwen3-0.6b,
 *    2 threads, steps alternating between the ways in one process, median step), the token by
 *    token kernel: Q4_K_M with the Q6_K rows (output head, some layers) already token by
 *    token, the Q4_K ones too against their gemm: 2 tokens 60.7 -> 12.8 ms, 3 76.9 -> 17.6 (too
 *    few for the gemm's tiles: it unpacked them group by group), 4 24.3 -> 18.6, 6 28.1 ->
 *    24.4; against the code before (Q6_K unpacked on every call): 4 tokens 64.4 -> 19.1, 8
 *    72.4 -> 32.5, 16 85.9 -> 48.2; Q8_0 (packed gemm) 2 tokens 0.55x the time, 4 0.75x, 8
 *    0.95x, 12 1.13x, 16 1.27x (slower): hence the two limits;
 *  - /tmp/s7/tk.c (8 packed matrices from memory through tensor_matmul, 2 threads, the two
 *    ways alternating, median ratio of 10 passes), the several-token kernels against the
 *    previous ways: Q4_K 3072 x 1024 0.62-0.83x the time from 2 to 32 tokens, 0.95x at 64,
 *    1.00x at 96, 1.04-1.15x (slower) from 128 to 512 (1024 x 3072, 4096 x 1024 alike): hence
 *    MM_R16_TOKENS_Q4_GEMM; Q6_K 1024 x 3072 0.47-0.67x from 2 to 24 tokens (token by token),
 *    0.15-0.45x from 32 to 128 and 0.58-0.99x from 192 to 512 (unpacked for gemm[Q6_K]);
 *    Q8_0 3072 x 1024 in ggml's order 0.75-0.78x from 2 to 8 tokens, 0.92x at 12, 0.99x at 16,
 *    1.13-1.63x (slower) from 24 to 512: hence MM_R16_TOKENS_Q8_GEMM; in the block order
 *    0.38-0.63x from 2 to 64 tokens, 0.68-0.95x from 96 to 512 (unpacked for its gemm);
 *  - /tmp/s24/q6g.c (1024 x 3072 and 3072 x 1024 Q6_K, one thread, direct calls, best of 4),
 *    AVX2's packed Q6_K gemm against the several-token kernel: 2-4 tokens 1.1-1.4x the time,
 *    6 0.9x, 8 1.0x, 12-24 0.74-0.87x, 32-512 0.66-0.76x; against unpacking for gemm[Q6_K]:
 *    0.04x at 2 tokens (the scalar unpacking, ~6 ms for 3 MiB) to 0.75x at 512: hence
 *    MM_R16_TOKENS_Q6_GEMM. */
#define MM_R16_TOKENS_Q4_GEMM 96
#define MM_R16_TOKENS_Q8_GEMM 16
#define MM_R16_TOKENS_Q6_GEMM 8
#define MM_R16_SLAB 64
#define MM_R16_GEMV_TOK 8          /* below it the kernel token by token, with a packed gemm */
#define MM_R16_GEMV_TOK_UNPACK 32  /* and without one (the unpacking) */
static void mm_dot_r16(const mm_job *j, long lo, long hi) {
    const bool gemm_q8 = j->wtype == GGUF_T_Q8_0 && j->k->gemm_q8_0_r16 && j->gemm == j->k->gemm[GGUF_T_Q8_0];
    const bool gemm_q4 = j->wtype == GGUF_T_Q4_K && j->k->gemm_q4_K_rp_r16 && j->gemm == j->k->gemm_q4_K_rp;
    const bool gemm_q5 = j->wtype == GGUF_T_Q5_K && j->k->gemm_q5_K_r16 && j->gemm == j->k->gemm[GGUF_T_Q5_K];
    const bool gemm_q40 = j->wtype == GGUF_T_Q4_0 && j->k->gemm_q4_0_r16 && j->gemm == j->k->gemm[GGUF_T_Q4_0];
    const bool gemm_q6 = j->wtype == GGUF_T_Q6_K && j->k->gemm_q6_K_r16 && j->gemm == j->k->gemm[GGUF_T_Q6_K];
    if (j->gemv.tokens && (!j->gemv.tokens_max || j->n_tok < j->gemv.tokens_max) &&
        (gemm_q4 || gemm_q5 ? j->n_tok < MM_R16_TOKENS_Q4_GEMM
         : gemm_q8          ? j->n_tok < MM_R16_TOKENS_Q8_GEMM
         : gemm_q6          ? j->n_tok < MM_R16_TOKENS_Q6_GEMM
                            : true)) {
        j->gemv.tokens(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride, j->n_tok,
                       j->Y + lo, j->ldy);
        return;
    }
    const bool packed_gemm = gemm_q8 || gemm_q4 || gemm_q5 || gemm_q40 || gemm_q6;
    if (j->gemv.fn && j->n_tok < (packed_gemm ? MM_R16_GEMV_TOK : MM_R16_GEMV_TOK_UNPACK)) {
        for (long r0 = lo; r0 < hi; r0 += MM_R16_SLAB) {
            const long r1 = r0 + MM_R16_SLAB < hi ? r0 + MM_R16_SLAB : hi;
            for (int64_t t = 0; t < j->n_tok; t++)
                j->gemv.fn(j->n_in, j->W + (size_t)r0 * j->w_stride, j->w_stride, r1 - r0, 0,
                           tensor_gemv_groups(r1 - r0, j->gemv.group), j->Xq + (size_t)t * j->x_stride,
                           j->Y + t * j->ldy + r0);
        }
        return;
    }
    if (gemm_q8) {
        j->k->gemm_q8_0_r16(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride,
                            j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    if (gemm_q4) {
        j->k->gemm_q4_K_rp_r16(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride,
                               j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    if (gemm_q40) {
        j->k->gemm_q4_0_r16(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride,
                            j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    if (gemm_q6) {
        j->k->gemm_q6_K_r16(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride,
                            j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    if (gemm_q5) {
        j->k->gemm_q5_K_r16(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride,
                            j->n_tok, j->Y + lo, j->ldy);
        return;
    }
    uint8_t *buf = malloc((size_t)MM_R16_SLAB * j->w_stride);
    const bool q4 = j->wtype == GGUF_T_Q4_K, q6 = j->wtype == GGUF_T_Q6_K, q40 = j->wtype == GGUF_T_Q4_0;
    const bool q5 = j->wtype == GGUF_T_Q5_K;
    void (*unpack)(const void *, int64_t, void *, size_t) = q4    ? tensor_q4_K_r16_unpack
                                                           : q6  ? tensor_q6_K_r16_unpack
                                                           : q40 ? tensor_q4_0_r16_unpack
                                                           : q5  ? (j->k->q5_K_r16_fives ? tensor_q5_K_r16f_unpack
                                                                                         : tensor_q5_K_r16_unpack)
                                                                 : tensor_q8_0_r16_unpack;
    const rt_dot_r16_fn dot = q4 ? rt_dot_q4_K_r16 : q6 ? rt_dot_q6_K_r16 : q40 ? rt_dot_q4_0_r16
                            : q5 ? (j->k->q5_K_r16_fives ? rt_dot_q5_K_r16f : rt_dot_q5_K_r16)
                            : j->k->q8_block ? rt_dot_q8_0_blk_r16 : rt_dot_q8_0_r16;
    for (long r0 = lo; r0 < hi; r0 += MM_R16_SLAB) {
        const long r1 = r0 + MM_R16_SLAB < hi ? r0 + MM_R16_SLAB : hi;
        if (buf) {
            for (long g = r0; g < r1; g += TENSOR_R16_ROWS)
                unpack(j->W + (size_t)g * j->w_stride, j->n_in, buf + (size_t)(g - r0) * j->w_stride, j->w_stride);
            mm_dot_rows(j, buf, r0, r1);
            continue;
        }
        for (long g = r0; g < r1; g += TENSOR_R16_ROWS)
            for (int64_t t = 0; t < j->n_tok; t++)
                for (int r = 0; r < TENSOR_R16_ROWS; r++)
                    j->Y[t * j->ldy + g + r] =
                        dot(j->n_in, j->W + (size_t)g * j->w_stride, r, j->Xq + (size_t)t * j->x_stride);
    }
    free(buf);
}

static void mm_dot(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    long lo, hi;
    if (j->n_tok > 1) tp_split_tapered((long)j->n_out, ith, nth, MM_TILE, &lo, &hi);
    else tp_split((long)j->n_out, ith, nth, MM_TILE, &lo, &hi);
    if (j->n_tok == 1) {
        mm_groups(j, lo, hi, 0, tensor_gemv_groups(hi - lo, mm_group_rows(j)));
        return;
    }
    if (j->r16) mm_dot_r16(j, lo, hi);
    else mm_dot_rows(j, j->W + (size_t)lo * j->w_stride, lo, hi);
}

static mm_job mm_job_of(const tensor_kernels *k, const tensor_mm *m, int64_t n_in, const float *X, int64_t n_tok,
                        void *scratch) {
    const bool r16 = mm_packed(m->wtype);
    const uint32_t wt = mm_file_type(m->wtype);
    const tensor_vec_dot_fn dot = tensor_matmul_dot(k, wt, m->n_out);
    const bool plain = dot == k->vec_dot[wt], rp = dot == k->dot_q4_K_rp;
    return (mm_job){
        .k = k, .wtype = wt, .vtype = tensor_vec_dot_type(wt), .W = m->W, .r16 = r16,
        .w_stride = tensor_row_bytes(wt, n_in), .x_stride = act_stride(wt, n_in),
        .n_in = n_in, .n_out = m->n_out, .n_tok = n_tok, .ldy = m->ldy, .X = X, .Y = m->Y, .Xq = scratch,
        .dot = dot, .gemm = plain ? k->gemm[wt] : rp ? k->gemm_q4_K_rp : NULL,
        .gemv = r16 ? (wt == GGUF_T_Q4_K   ? k->gemv_q4_K_r16
                       : wt == GGUF_T_Q6_K ? k->gemv_q6_K_r16
                       : wt == GGUF_T_Q4_0 ? k->gemv_q4_0_r16
                       : wt == GGUF_T_Q5_K ? k->gemv_q5_K_r16
                                           : k->gemv_q8_0_r16)
              : plain ? k->gemv[wt] : rp ? k->gemv_q4_K_rp : (tensor_gemv){ 0 },
    };
}

static bool mm_small(int64_t n_in, int64_t n_out, int64_t n_tok) {
    return (double)n_out * (double)n_in * (double)n_tok < MM_MIN_PARALLEL;
}

/* Row shares of one matrix: MM_SHARES per thread, never more than its tiles; one per thread
 * for a single token (each share start is a new stream for the prefetchers to catch, which on
 * a decode step's small matrices costs more than the balance extra shares buy; the matmuls
 * below take their own way, mm_one_token). */
static int mm_shares(int64_t n_out, int nth, int64_t n_tok) {
    const long tiles = (n_out + MM_TILE - 1) / MM_TILE, want = (n_tok == 1 ? 1L : MM_SHARES) * nth;
    return (int)(tiles < want ? tiles : want);
}

/* ---- one token: row groups claimed in chunks, the last ones stolen ------------------------
 *
 * A token's matmuls stream every weight byte once, bound by memory. Even shares do not finish
 * together (one thread's reads run slower this time, or the OS holds it back), and the first
 * to finish used to wait for the other at the barrier: the pool timer (a patch outside the
 * repo) counted 0.52 s of one thread idle in 3.9 s of qwen35-0.8b Q8_0 tg128 matmul jobs,
 * while one thread alone reads at ~80 % of two. Finer shares restart the streams (measured
 * worse). So a thread walks its share's row groups (tensor.h gemv) from the front in claims
 * (mm_claim), its streams straight; once every share is handed out, a thread with none left
 * claims groups from the back of the others. A group is computed once, by whoever claims it,
 * with the same kernel on the same rows: the bits do not depend on who.
 *
 * The matrices of one call (q, k, v; gate, up) that share a gemv kernel are laid end to end
 * and cut into one share per thread by their bytes, so a share is a run of segments (a
 * matrix's rows [lo, hi)) read one after the other and each thread starts as few streams as
 * it can; a matrix with another kernel (a Q6_K v among Q4_K q and k) gets its own shares, so
 * that no thread is left with all of the slower kernel's rows. Before, each matrix was cut
 * into one share per thread. recur-bench tg64, 2 threads, alternating rounds in one binary
 * (an environment switch, removed): qwen3-0.6b Q4_K_M 1.037x (8 of 10 won) and 1.022x (7 of
 * 10), qwen35-0.8b Q4_K_M 1.028x (7 of 10), qwen3-0.6b Q8_0 1.013x (6 of 10), qwen35-0.8b
 * Q8_0 1.007x (6 of 10); the same runs with both sides alike gave 0.976x and 1.024x (5 of
 * 10 each).
 *
 * Where a token's time goes besides the streams (qwen3-0.6b Q8_0 tg128, a per-call timer
 * outside the repo, a token of 10.3-11.6 ms): between the calls, on the caller (attention,
 * norms, residuals) 0.67-0.76 ms; before each call's job (X quantized, the plan) 1.4-1.7 us,
 * of which the quantizing ~1 us (X comes from the other thread's cache); from the job's start
 * to a thread's first share 1.0-1.4 us (one cache line between the two cores takes ~0.27 us
 * here, a job passes several); the two threads ending apart 1.5-2.3 us. Inside the shares the
 * layer matrices read at 92-97 % of the output head's rate. Tried without a gain that held
 * (tokens of one process alternating in runs of 8, medians): the idle thread fetching the next
 * call's first bytes of its share into L2 (the next call guessed from the last token's
 * order), 0.98-1.00x on three models and 1.002x on a fourth in a busy minute; the same also
 * from inside the attention job, 1.00-1.02x (slower); a thread's 4 streams laid out to run on
 * from one call into the next (a copy of a token's matrices in a harness): no difference. */
/* Weight bytes of the smallest claim. 8, 16 and 64 KiB against 32 (tokens alternating in runs
 * of 8, qwen3-0.6b Q8_0 and Q4_K_M): 0.998-1.009x the time a token, no gain. With 4 KiB the two
 * threads end 1.04-1.18 us apart a call against 1.39-1.56 (qwen3-0.6b Q4_K_M tg128, per-call
 * timer outside the repo): ~0.2 us of one thread a call, too little to see in a token.
 * The same timer: the worker starts its share 0.15-0.19 us after the caller; which thread
 * takes more groups from the other's back changes from run to run (0.1-9.8 groups a call);
 * giving share 0 (the caller's) 16 or 32 KiB more: 1.000x and 1.004-1.006x the time a token.
 * Inside the jobs the kernels read at 93-97 % of the probe's rate; quantizing X before the job
 * takes 0.5-0.6 us for 1024 values the caller wrote itself and 1.3-1.4 us for the 2048 or 3072
 * the two threads wrote (0.18 us per 1024 in a loop over warm data): its cost is fetching X,
 * not converting it (a second scratch for every other call, so X is written to lines the
 * other thread has not read: no change). */
#define MM_CHUNK  (32 << 10)
#define MM_GV_MAX 64           /* shares of one job; more threads than that find none */

typedef struct mm_seg {
    const mm_job *j;
    long          lo, hi;   /* its rows */
    int64_t       g1;       /* the share's groups up to the end of this segment */
} mm_seg;

typedef struct mm_gshare {
    _Alignas(64) _Atomic uint64_t left;   /* unclaimed groups [front, back): front << 32 | back */
    mm_seg        seg[TENSOR_MM_MAX];
    int           n_seg;
    uint32_t      chunk;    /* groups per claim */
} mm_gshare;

typedef struct mm_gplan {
    mm_gshare  s[MM_GV_MAX];
    int        n;
    atomic_int started;   /* shares whose owner began: all of them, then stealing starts */
} mm_gplan;

/* Where the byte offset `at` of jobs[0..n) laid end to end falls, rounded to a tile of rows:
 * job *ji, row *r (r == n_out: the job's end). */
static void mm_locate(const mm_job *jobs, int n, double at, int *ji, long *r) {
    for (int i = 0; i < n; i++) {
        const double bytes = (double)jobs[i].n_out * (double)jobs[i].w_stride;
        if (at < bytes || i == n - 1) {
            const long tiles = (long)(at / (double)jobs[i].w_stride / MM_TILE + 0.5);
            *ji = i;
            *r = tiles * MM_TILE < jobs[i].n_out ? tiles * MM_TILE : (long)jobs[i].n_out;
            return;
        }
        at -= bytes;
    }
}

/* The shares: jobs[0..n) end to end, cut into ns runs of about equal bytes. */
static void mm_plan(mm_gplan *p, const mm_job *jobs, int n, int ns) {
    double total = 0;
    for (int i = 0; i < n; i++) total += (double)jobs[i].n_out * (double)jobs[i].w_stride;
    int ji = 0;
    long r = 0;
    for (int s = 0; s < ns; s++) {
        int je = n - 1;   /* the last share ends with the last job */
        long re = (long)jobs[n - 1].n_out;
        if (s < ns - 1) mm_locate(jobs, n, total * (s + 1) / ns, &je, &re);
        mm_gshare *sh = &p->s[p->n++];
        sh->n_seg = 0;
        int64_t groups = 0;
        for (; ji <= je; ji++, r = 0) {
            const long hi = ji == je ? re : (long)jobs[ji].n_out;
            if (hi > r) {
                const int G = mm_group_rows(&jobs[ji]);
                groups += tensor_gemv_groups(hi - r, G);
                sh->seg[sh->n_seg++] = (mm_seg){ &jobs[ji], r, hi, groups };
            }
            if (ji == je) break;
        }
        r = re;
        const size_t gb = sh->n_seg ? (size_t)mm_group_rows(sh->seg[0].j) * sh->seg[0].j->w_stride : 1;
        sh->chunk = gb >= MM_CHUNK ? 1 : (uint32_t)(MM_CHUNK / gb);
        atomic_init(&sh->left, (uint64_t)groups);
    }
}

/* A quarter of the groups left, at least c (all when fewer are left), from the front (or the
 * back) of *left: [*g0, *g1); false when none are left. Claims shrink as a share runs out, so
 * a long share costs few claims (each a locked instruction) and its last ones are short. */
static bool mm_claim(_Atomic uint64_t *left, uint32_t c, bool back, int64_t *g0, int64_t *g1) {
    uint64_t v = atomic_load_explicit(left, memory_order_relaxed);
    for (;;) {
        const uint32_t f = (uint32_t)(v >> 32), b = (uint32_t)v, q = (b - f) / 4, t = b - f < c ? b - f : q > c ? q : c;
        if (f >= b) return false;
        const uint64_t nv = back ? v - t : v + ((uint64_t)t << 32);
        if (atomic_compare_exchange_weak_explicit(left, &v, nv, memory_order_relaxed, memory_order_relaxed)) {
            *g0 = back ? b - t : f;
            *g1 = back ? b : f + t;
            return true;
        }
    }
}

/* The share's groups [g0, g1), segment by segment. */
static void mm_share_groups(const mm_gshare *sh, int64_t g0, int64_t g1) {
    int64_t s0 = 0;
    for (int k = 0; k < sh->n_seg && s0 < g1; s0 = sh->seg[k++].g1) {
        const mm_seg *sg = &sh->seg[k];
        const int64_t a = g0 > s0 ? g0 : s0, b = g1 < sg->g1 ? g1 : sg->g1;
        if (a < b) mm_groups(sg->j, sg->lo, sg->hi, a - s0, b - s0);
    }
}

static void mm_gemv_share(void *arg, int ith, int nth) {
    (void)nth;
    mm_gplan *p = arg;
    mm_gshare *own = &p->s[ith];
    int64_t g0, g1;
    atomic_fetch_add_explicit(&p->started, 1, memory_order_relaxed);
    while (mm_claim(&own->left, own->chunk, false, &g0, &g1)) mm_share_groups(own, g0, g1);
    /* shares not handed out yet: the pool gives this thread the next one, from its front */
    if (atomic_load_explicit(&p->started, memory_order_relaxed) < p->n) return;
    for (int d = 1; d < p->n; d++) {
        mm_gshare *o = &p->s[(ith + d) % p->n];
        while (mm_claim(&o->left, o->chunk, true, &g0, &g1)) mm_share_groups(o, g0, g1);
    }
}

/* The end of the chain that starts at jobs[i]: the neighbouring jobs with its gemv kernel. */
static int mm_chain_end(const mm_job *jobs, int n, int i) {
    int e = i + 1;
    while (e < n && jobs[e].gemv.fn == jobs[i].gemv.fn) e++;
    return e;
}

/* jobs[0..n) of one token (X quantized) on the pool: each chain is cut into one share per
 * thread (fewer where the chains would need more than MM_GV_MAX shares in all). Where a
 * kernel has a lean twin (tensor.h), the call runs the kernels or their twins as prefetch.c
 * says, and is timed for it. */
static void mm_one_token(tp_pool *pool, const mm_job *jobs, int n) {
    bool twins = false;
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        twins |= jobs[i].gemv.lean != NULL;
        bytes += (uint64_t)jobs[i].n_out * jobs[i].w_stride;
    }
    const int mode = tensor_gemv_prefetch_get();
    const bool timed = twins && mode == TENSOR_PF_AUTO;
    rt_pf_chooser *pf = rt_pf_shared();
    const bool lean = twins && (mode == TENSOR_PF_OFF || (timed && rt_pf_pick_lean(pf)));
    mm_job lj[TENSOR_MM_MAX];
    if (lean) {
        for (int i = 0; i < n; i++) {
            const tensor_gemv g = jobs[i].gemv;
            lj[i] = jobs[i];
            if (g.lean) lj[i].gemv = (tensor_gemv){ g.lean, g.lean_group ? g.lean_group : g.group, NULL, 0, NULL, 0 };
        }
        jobs = lj;
    }
    mm_gplan p;
    p.n = 0;
    atomic_init(&p.started, 0);
    int chains = 0;
    for (int i = 0; i < n; i = mm_chain_end(jobs, n, i)) chains++;
    const int nth = tp_n_threads(pool), ns = nth < MM_GV_MAX / chains ? nth : MM_GV_MAX / chains;
    for (int i = 0, e; i < n; i = e) {
        e = mm_chain_end(jobs, n, i);
        mm_plan(&p, jobs + i, e - i, ns);
    }
    const int64_t t0 = timed ? rc_time_ns() : 0;
    tp_run_n(pool, mm_gemv_share, &p, p.n);
    if (timed) rt_pf_record(pf, lean, (uint64_t)(rc_time_ns() - t0), bytes);
}

void tensor_matmul(tp_pool *pool, const tensor_kernels *k, uint32_t wtype, const void *W,
                   int64_t n_in, int64_t n_out, const float *X, int64_t n_tok,
                   float *Y, int64_t ldy, void *scratch) {
    if (n_out <= 0 || n_tok <= 0) return;
    const tensor_mm m = { wtype, W, n_out, Y, ldy };
    mm_job j = mm_job_of(k, &m, n_in, X, n_tok, scratch);
    const bool small = mm_small(n_in, n_out, n_tok);
    tp_run(n_tok > 1 && !small ? pool : NULL, mm_quantize, &j);
    if (n_tok == 1 && !small && tp_n_threads(pool) > 1) {
        mm_one_token(pool, &j, 1);
        return;
    }
    /* more shares than threads: when the OS holds a thread back, the others take its rows */
    tp_run_n(small ? NULL : pool, mm_dot, &j, mm_shares(n_out, tp_n_threads(pool), n_tok));
}

/* Several matrices, each with its own rows: share s of the job is share s - first[i] of
 * matrix i (the largest i with first[i] <= s). */
typedef struct mm_multi {
    mm_job    *jobs;
    const int *first;   /* [n + 1] */
    int        n;
} mm_multi;

static void mm_multi_dot(void *arg, int ith, int nth) {
    (void)nth;
    const mm_multi *mj = arg;
    int lo = 0, hi = mj->n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (mj->first[mid] <= ith) lo = mid;
        else hi = mid - 1;
    }
    mm_dot(&mj->jobs[lo], ith - mj->first[lo], mj->first[lo + 1] - mj->first[lo]);
}

void tensor_matmul_n(tp_pool *pool, const tensor_kernels *k, const tensor_mm *mats, int n_mats, int64_t n_in,
                     const float *X, int64_t n_tok, void *scratch) {
    /* the matrices sharing the first one's vec_dot type form the job; any other runs alone after */
    mm_job jobs[TENSOR_MM_MAX];
    int first[TENSOR_MM_MAX + 1] = { 0 };
    mm_multi mj = { jobs, first, 0 };
    int64_t rows = 0;
    const uint32_t vt = n_mats > 0 ? tensor_vec_dot_type(mm_file_type(mats[0].wtype)) : 0;
    for (int i = 0; i < n_mats && i < TENSOR_MM_MAX; i++) {
        if (tensor_vec_dot_type(mm_file_type(mats[i].wtype)) != vt || mats[i].n_out <= 0) continue;
        jobs[mj.n] = mm_job_of(k, &mats[i], n_in, X, n_tok, scratch);
        first[mj.n + 1] = first[mj.n] + mm_shares(mats[i].n_out, tp_n_threads(pool), n_tok);
        mj.n++;
        rows += mats[i].n_out;
    }
    const bool joint = mj.n > 1 && n_tok > 0 && !mm_small(n_in, rows, n_tok) && tp_n_threads(pool) > 1;
    if (joint) {   /* one quantized X serves them all: same vec_dot type, same row bytes */
        tp_run(n_tok > 1 ? pool : NULL, mm_quantize, &jobs[0]);
        if (n_tok == 1) mm_one_token(pool, jobs, mj.n);
        else tp_run_n(pool, mm_multi_dot, &mj, first[mj.n]);
    }
    for (int i = 0; i < n_mats; i++) {
        const bool done = joint && i < TENSOR_MM_MAX && tensor_vec_dot_type(mm_file_type(mats[i].wtype)) == vt;
        if (!done)
            tensor_matmul(pool, k, mats[i].wtype, mats[i].W, n_in, mats[i].n_out, X, n_tok, mats[i].Y, mats[i].ldy,
                          scratch);
    }
}

#define MM_GROUP_JOBS 128   /* (group, matrix) pairs per job of a grouped call: the rest in further jobs */

void tensor_matmul_grouped(tp_pool *pool, const tensor_kernels *k, uint32_t wtype, int64_t n_in, int64_t n_out,
                           const tensor_mm_group *groups, int n_groups, int n_w, const float *X, const int32_t *rows,
                           int64_t n_rows, float *const *Ys, void *scratch) {
    if (n_out <= 0 || n_rows <= 0 || n_w < 1) return;
    if (n_w > 2) n_w = 2;
    const int nth = tp_n_threads(pool);
    const tensor_mm m0 = { wtype, NULL, n_out, NULL, n_out };
    mm_job q = mm_job_of(k, &m0, n_in, X, n_rows, scratch);
    q.rows = rows;
    tp_run(n_rows > 1 && !mm_small(n_in, n_out * n_w, n_rows) ? pool : NULL, mm_quantize, &q);
    mm_job jobs[MM_GROUP_JOBS];
    int first[MM_GROUP_JOBS + 1] = { 0 };
    mm_multi mj = { jobs, first, 0 };
    int64_t work = 0;
    for (int g = 0; g <= n_groups; g++) {
        const bool last = g == n_groups;
        if (mj.n > 0 && (last || mj.n + n_w > MM_GROUP_JOBS)) {   /* run what is collected */
            if (work >= MM_MIN_PARALLEL && nth > 1) tp_run_n(pool, mm_multi_dot, &mj, first[mj.n]);
            else
                for (int i = 0; i < mj.n; i++) mm_dot(&jobs[i], 0, 1);   /* one share: the whole matrix */
            mj.n = 0;
            work = 0;
        }
        if (last || groups[g].n_rows <= 0) continue;
        for (int w = 0; w < n_w; w++) {
            const tensor_mm m = { wtype, groups[g].W[w], n_out, Ys[w] + groups[g].row0 * n_out, n_out };
            mm_job *j = &jobs[mj.n];
            *j = mm_job_of(k, &m, n_in, NULL, groups[g].n_rows, (uint8_t *)scratch + (size_t)groups[g].row0 * q.x_stride);
            first[mj.n + 1] = first[mj.n] + mm_shares(n_out, nth, groups[g].n_rows);
            work += n_out * n_in * groups[g].n_rows;
            mj.n++;
        }
    }
}

void tensor_get_row(const tensor_kernels *k, uint32_t type, const void *W, int64_t n_in,
                    int64_t row, float *dst) {
    const uint8_t *w = W;
    /* a packed row: its blocks out of its group, one at a time */
    if (type == TENSOR_T_Q6_K_R16 || type == TENSOR_T_Q8_0_R16) {
        const bool q6 = type == TENSOR_T_Q6_K_R16;
        const uint32_t ft = type & 0xFFu;
        const int64_t qk = q6 ? QK_K : QK8_0;
        const size_t gb = TENSOR_R16_ROWS * tensor_row_bytes(ft, n_in);
        const size_t run = q6 ? TENSOR_Q6R16_BLOCK : TENSOR_Q8R16_BLOCK;
        const uint8_t *grp = w + (size_t)(row / TENSOR_R16_ROWS) * gb;
        uint8_t blk[Q6_K_BYTES];
        for (int64_t i = 0; i < n_in / qk; i++) {
            (q6 ? tensor_q6_K_r16_unpack_row : tensor_q8_0_r16_unpack_row)(grp + (size_t)i * run, qk,
                                                                            (int)(row % TENSOR_R16_ROWS), blk);
            k->to_float[ft](blk, dst + i * qk, qk);
        }
        return;
    }
    k->to_float[type](w + (size_t)row * tensor_row_bytes(type, n_in), dst, n_in);
}
