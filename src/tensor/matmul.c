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
 *     single token's are even (each a straight stream through its rows); each Y
 *     element is exactly one vec_dot call, one lane of a vec_dot4 call or one element of a
 *     gemm or gemv call, which give the same bits (tensor.h invariant 2; the dot is
 *     tensor_matmul_dot's, a property of the weight). A table with a gemm for the type gets a
 *     share's whole row range (it tiles rows x tokens itself), and so does a gemv for a single
 *     token (it runs several rows side by side).
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

#define MM_TILE 16
#define MM_SHARES 4   /* row shares per thread */
#define MM_GEMV_SHARE (4 << 20)   /* weight bytes per single-token share and thread (mm_shares) */
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

size_t tensor_matmul_scratch_bytes(uint32_t wtype, int64_t n_in, int64_t n_tok) {
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

static void mm_dot(void *arg, int ith, int nth) {
    const mm_job *j = arg;
    long lo, hi;
    if (j->n_tok > 1) tp_split_tapered((long)j->n_out, ith, nth, MM_TILE, &lo, &hi);
    else tp_split((long)j->n_out, ith, nth, MM_TILE, &lo, &hi);
    const tensor_vec_dot_fn dot = tensor_matmul_dot(j->k, j->wtype, j->n_out);
    const bool plain = dot == j->k->vec_dot[j->wtype];
    const tensor_gemm_fn gemm = plain ? j->k->gemm[j->wtype] : dot == j->k->dot_q4_K_rp ? j->k->gemm_q4_K_rp : NULL;
    if (gemm && j->n_tok > 1) {   /* tiles rows x tokens itself; each element is vec_dot's */
        gemm(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->x_stride, j->n_tok, j->Y + lo,
             j->ldy);
        return;
    }
    const tensor_gemv_fn gemv = plain ? j->k->gemv[j->wtype] : dot == j->k->dot_q4_K_rp ? j->k->gemv_q4_K_rp : NULL;
    if (gemv && j->n_tok == 1) {   /* rows side by side, x loaded once; each element is dot's */
        gemv(j->n_in, j->W + (size_t)lo * j->w_stride, j->w_stride, hi - lo, j->Xq, j->Y + lo);
        return;
    }
    if (j->n_tok == 1) {   /* rows r and r + h in turn: two streams, each straight through its half */
        const long h = (hi - lo) / 2;
        for (long r = lo; r < lo + h; r++) {
            j->Y[r] = dot(j->n_in, j->W + (size_t)r * j->w_stride, j->Xq);
            j->Y[r + h] = dot(j->n_in, j->W + (size_t)(r + h) * j->w_stride, j->Xq);
        }
        if ((hi - lo) % 2) j->Y[hi - 1] = dot(j->n_in, j->W + (size_t)(hi - 1) * j->w_stride, j->Xq);
        return;
    }
    const tensor_vec_dot4_fn dot4 = plain ? j->k->vec_dot4[j->wtype] : NULL;
    for (long r0 = lo; r0 < hi; r0 += MM_TILE) {
        const long r1 = r0 + MM_TILE < hi ? r0 + MM_TILE : hi;
        int64_t t = 0;
        for (; dot4 && t + 4 <= j->n_tok; t += 4) {   /* four tokens per weight row read */
            const uint8_t *x = j->Xq + (size_t)t * j->x_stride;
            float *y = j->Y + t * j->ldy, out[4];
            for (long r = r0; r < r1; r++) {
                dot4(j->n_in, j->W + (size_t)r * j->w_stride, x, j->x_stride, out);
                for (int q = 0; q < 4; q++) y[q * j->ldy + r] = out[q];
            }
        }
        for (; t < j->n_tok; t++) {
            const uint8_t *x = j->Xq + (size_t)t * j->x_stride;
            float *y = j->Y + t * j->ldy;
            for (long r = r0; r < r1; r++) y[r] = dot(j->n_in, j->W + (size_t)r * j->w_stride, x);
        }
    }
}

static mm_job mm_job_of(const tensor_kernels *k, const tensor_mm *m, int64_t n_in, const float *X, int64_t n_tok,
                        void *scratch) {
    return (mm_job){
        .k = k, .wtype = m->wtype, .vtype = tensor_vec_dot_type(m->wtype), .W = m->W,
        .w_stride = tensor_row_bytes(m->wtype, n_in), .x_stride = act_stride(m->wtype, n_in),
        .n_in = n_in, .n_out = m->n_out, .n_tok = n_tok, .ldy = m->ldy, .X = X, .Y = m->Y, .Xq = scratch,
    };
}

static bool mm_small(int64_t n_in, int64_t n_out, int64_t n_tok) {
    return (double)n_out * (double)n_in * (double)n_tok < MM_MIN_PARALLEL;
}

/* Row shares of one matrix: MM_SHARES per thread, never more than its tiles. A single token
 * (generation, memory-bound) gets one share per thread per MM_GEMV_SHARE bytes of weights, at
 * least one, at most MM_SHARES: every share start is a new stream the prefetchers must catch,
 * which on the small matrices of a decode step costs more than the balance extra shares buy
 * (2 threads, 16 matrices out of cache, alternating: 1024 x 1024 Q4_K 23.1-27.3 GB/s with 1
 * share per thread, 19.8-26.9 with 4); a large one (an output head of 50-270 MB), where one
 * thread finishing early idles for long, gets MM_SHARES (tg128, 2 threads, 4 alternating
 * pairs against one share per thread: mamba2-370m Q8_0 55.0-73.8 -> 71.1-75.1 t/s, qwen35
 * Q4_K_M 48.5-62.9 -> 53.1-65.0; qwen3 Q8_0 and Q4_K_M within their noise). */
static int mm_shares(int64_t n_out, size_t row_bytes, int nth, int64_t n_tok) {
    long per = MM_SHARES;
    if (n_tok == 1) {
        const double s = (double)n_out * (double)row_bytes / ((double)nth * MM_GEMV_SHARE);
        per = s < 1 ? 1 : s > MM_SHARES ? MM_SHARES : (long)s;
    }
    const long tiles = (n_out + MM_TILE - 1) / MM_TILE, want = per * nth;
    return (int)(tiles < want ? tiles : want);
}

void tensor_matmul(tp_pool *pool, const tensor_kernels *k, uint32_t wtype, const void *W,
                   int64_t n_in, int64_t n_out, const float *X, int64_t n_tok,
                   float *Y, int64_t ldy, void *scratch) {
    if (n_out <= 0 || n_tok <= 0) return;
    const tensor_mm m = { wtype, W, n_out, Y, ldy };
    mm_job j = mm_job_of(k, &m, n_in, X, n_tok, scratch);
    const bool small = mm_small(n_in, n_out, n_tok);
    tp_run(n_tok > 1 && !small ? pool : NULL, mm_quantize, &j);
    /* more shares than threads: when the OS holds a thread back, the others take its rows */
    tp_run_n(small ? NULL : pool, mm_dot, &j, mm_shares(n_out, j.w_stride, tp_n_threads(pool), n_tok));
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
    const uint32_t vt = n_mats > 0 ? tensor_vec_dot_type(mats[0].wtype) : 0;
    for (int i = 0; i < n_mats && i < TENSOR_MM_MAX; i++) {
        if (tensor_vec_dot_type(mats[i].wtype) != vt || mats[i].n_out <= 0) continue;
        jobs[mj.n] = mm_job_of(k, &mats[i], n_in, X, n_tok, scratch);
        first[mj.n + 1] = first[mj.n] + mm_shares(mats[i].n_out, jobs[mj.n].w_stride, tp_n_threads(pool), n_tok);
        mj.n++;
        rows += mats[i].n_out;
    }
    const bool joint = mj.n > 1 && n_tok > 0 && !mm_small(n_in, rows, n_tok) && tp_n_threads(pool) > 1;
    if (joint) {   /* one quantized X serves them all: same vec_dot type, same row bytes */
        tp_run(n_tok > 1 ? pool : NULL, mm_quantize, &jobs[0]);
        tp_run_n(pool, mm_multi_dot, &mj, first[mj.n]);
    }
    for (int i = 0; i < n_mats; i++) {
        const bool done = joint && i < TENSOR_MM_MAX && tensor_vec_dot_type(mats[i].wtype) == vt;
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
            first[mj.n + 1] = first[mj.n] + mm_shares(n_out, j->w_stride, nth, groups[g].n_rows);
            work += n_out * n_in * groups[g].n_rows;
            mj.n++;
        }
    }
}

void tensor_get_row(const tensor_kernels *k, uint32_t type, const void *W, int64_t n_in,
                    int64_t row, float *dst) {
    const uint8_t *w = W;
    k->to_float[type](w + (size_t)row * tensor_row_bytes(type, n_in), dst, n_in);
}
