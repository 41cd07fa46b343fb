/* attention.c — causal self-attention with GQA over the F16 KV cells.
 *
 * Follows llama.cpp's non-flash path closely: K and V are stored as F16, the query is rounded
 * to F16 before q·k, the scores are scaled by 1/sqrt(head_dim) and soft-maxed in F32, and the
 * probabilities are rounded to F16 before they weight V. The sums are done in the order of
 * llama.cpp's AVX-512 kernels (dot_f16_f32, op_softmax with ggml's vectorised exp,
 * att_weighted_v), so that its logits are reproduced to the last bit. The output gate's
 * sigmoid is ggml's sigmoid op: libm's expf.
 *
 * Determinism: each (token, head) output is computed by one thread, reading the sequence's
 * positions 0..pos in increasing order, whatever cells they live in. For speed, up to 4 rows
 * of one sequence sharing a KV head (GQA heads, consecutive tokens) are computed together by
 * the table's attention tiles (att_scores4, att_wsum4: each K/V row load serves all of them);
 * the tiles' contract is the one-row order for every row, so the grouping, like the thread
 * split, cannot change a bit. A prompt's rows (enough of them a KV head: the table's
 * att_wsumt4_min_rows) weigh V through a copy of it transposed once a thread and KV head
 * (att_wsumt4: the same bits, the sums as dot products): recur-bench pp512 at a depth of
 * 4096, 2 threads, 3 alternating runs, medians: qwen3-0.6b Q4_K_M on an AVX2 machine 46.4 ->
 * 57.2 t/s, qwen3-0.6b Q8_0 on the Zen 5 class (AVX-512) 98.1 -> 112.8. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "model/forward.h"
#include "tensor/ops.h"

typedef struct att_job {
    const struct recur_model *m;
    model_fwd         *f;
    const model_layer *L;
    int                kv_layer;
    atomic_long        next;   /* a batch's next unclaimed unit (att_job_fn) */
} att_job;

/* Query rows computed together (the attention tiles take up to 4). */
#define ATT_ROWS 4
/* Tried for long contexts, no gain: a batch's rows in runs of up to 32 (one sequence, one KV
 * head) whose tiles take the positions a block at a time (K 64 positions, V 512, the weighted
 * sums' lanes kept between blocks by a range-taking att_wsum4), so that a block of K/V rows
 * serves every tile of the run from L1/L2 instead of each tile reading the whole context from
 * L3. qwen3-0.6b Q4_K_M pp512 at a depth of 4096, 2 threads, attention 4.6-5.7 -> 5.0-6.3 ms
 * a token (3 alternating pairs; blocks of 512/1024 and 1024/4096 positions slower too). The
 * tiles' own work bounds them, not the reads: one thread on warm rows (a harness outside the
 * repo) scores at ~145 GFLOP/s and weighs V at ~135 of ~250 peak (each score's 16-lane sum
 * reduced across lanes, each lane's accumulators parked between blocks), and K/V converted to
 * F32 beforehand was no faster. That depth's pp512 was then ~160 t/s, ik_llama.cpp's (flash
 * attention, its pp4608 - pp4096 time) ~159 and llama.cpp's 72-96. */

/* One query row (token t, head h) of a group, and its slice of the thread's workspace. */
typedef struct att_row {
    int32_t t, n_ctx;   /* n_ctx: positions 0..n_ctx-1 of the token's sequence are visible */
    int     h;
    float  *qr;         /* [dk] query rounded to F16 */
    float  *sc;         /* [n_pad] scores, then probabilities */
    float  *out;        /* [dv] into f->att */
} att_row;

/* Thread workspace past the rows' slots: a [dk] F16 query scratch, then the K and V row of
 * every position of the group's sequence (NULL where a position has no cell), then its V
 * transposed for the weighted sums of a prompt (tensor.h att_wsumt4). */
typedef struct att_scratch {
    uint16_t        *q16;
    const uint16_t **kp, **vp;
    recur_seq_id     seq;   /* kp / vp hold positions 0..n-1 of sequence seq, KV head g */
    int              g;
    int32_t          n;
    bool             use_vt;   /* this sequence's rows weigh V through vt */
    uint16_t        *vt;       /* [dv][ldv]: vp transposed, every position the batch's rows see */
    int64_t          ldv;
} att_scratch;

/* Share ith's workspace: ATT_ROWS row slots of [qr dk][sc n_cells + 16] (returned, *slot
 * floats apart), then *w's q16 [dk], K and V row pointers [n_cells] each and vt [dv][n_cells
 * rounded up to 16], listing nothing yet (att_ws_floats in context.c). */
static float *att_workspace(const model_fwd *f, int ith, int dk, int64_t *slot, att_scratch *w) {
    const int64_t n_cells = kv_n_cells(f->kv);
    float *ws = f->att_ws + (int64_t)ith * f->att_ws_floats;
    *slot = dk + n_cells + 16;
    const int64_t ptr_off = (ATT_ROWS * *slot + dk + 15) & ~(int64_t)15;
    const int64_t vt_off = (ptr_off + 2 * n_cells * (int64_t)(sizeof(void *) / sizeof(float)) + 15) & ~(int64_t)15;
    *w = (att_scratch){ .q16 = (uint16_t *)(ws + ATT_ROWS * *slot), .kp = (const uint16_t **)(ws + ptr_off),
                        .vp = (const uint16_t **)(ws + ptr_off) + n_cells, .seq = -1,
                        .vt = (uint16_t *)(ws + vt_off), .ldv = (n_cells + 15) & ~(int64_t)15 };
    return ws;
}

/* The positions the batch's tokens of t's sequence see (their largest position + 1; they sit
 * side by side: att_cold), or 0 where they make fewer query rows a KV head (r a token) than
 * the table's att_wsumt4_min_rows: a sequence's weighted sums go through V transposed only
 * where the transposition (every position's V row once a thread and KV head) serves enough
 * rows; a decode step or a short suffix keeps att_wsum4. */
static int32_t att_run_span(const model_fwd *f, int32_t t, int r) {
    const recur_seq_id s = f->seq[t];
    int32_t a = t, b = t;
    while (a > 0 && f->seq[a - 1] == s) a--;
    while (b + 1 < f->n_tok && f->seq[b + 1] == s) b++;
    if ((int64_t)(b - a + 1) * r < f->kern->att_wsumt4_min_rows) return 0;
    int32_t n = 0;
    for (int32_t u = a; u <= b; u++) n = f->pos[u] + 1 > n ? f->pos[u] + 1 : n;
    return n;
}

/* w's K and V row pointers of positions w->n..n-1 (NULL where a position has no cell). */
static void att_list(att_scratch *w, const model_fwd *f, int kv_layer, int32_t n) {
    for (int32_t p = w->n; p < n; p++) {
        const int32_t c = kv_seq_cell(f->kv, w->seq, p);
        w->kp[p] = c < 0 ? NULL : kv_k_head(f->kv, kv_layer, w->g, c);
        w->vp[p] = c < 0 ? NULL : kv_v_head(f->kv, kv_layer, w->g, c);
    }
    if (n > w->n) w->n = n;
}

/* Positions 0..n-1 of w's V rows into vt (+0 where a position has no cell), and +0 past them
 * up to n rounded to 16 (the tiles' last chunk reads that far): all the run's rows will see,
 * at once, so the transposition goes 8 x 8 at a time. */
static void att_vt_fill(att_scratch *w, const tensor_kernels *kern, int64_t dv, int32_t n) {
    kern->f16_cols(n, dv, w->vp, w->vt, w->ldv);
    for (int64_t d = 0; d < dv; d++)
        for (int32_t p = n; p < ((n + 15) & ~15); p++) w->vt[d * w->ldv + p] = 0;
}

/* Whether token t is the only one of its sequence in the batch (a decode step, alone or next
 * to other slots' steps): its groups alone read its sequence's K/V rows, which come from
 * memory (tensor.h att_scores4's cold). A batch's tokens of one sequence sit side by side
 * (else this says cold wrongly, which only costs the fetches ahead: no bit changes). */
static bool att_cold(const model_fwd *f, int32_t t) {
    const recur_seq_id s = f->seq[t];
    return (t == 0 || f->seq[t - 1] != s) && (t == f->n_tok - 1 || f->seq[t + 1] != s);
}

/* nr (<= ATT_ROWS) rows of one sequence sharing KV head g: scores (q.k scaled, llama.cpp's
 * tinyBLAS order), softmax, weighted sum of V (llama.cpp's order over its transposed V). Each
 * row's scores row is padded with -inf to a multiple of 16, as llama.cpp's padded KV view is,
 * so the softmax sums the same chunks. */
static void att_group(const att_job *j, att_row *r, int nr, int g, att_scratch *w) {
    const model_hparams *hp = &j->m->hp;
    model_fwd *f = j->f;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v;
    const recur_seq_id seq = f->seq[r[0].t];
    int32_t n_ctx[ATT_ROWS], n_max = 0;
    const float *q[ATT_ROWS], *pr[ATT_ROWS];
    float *sc[ATT_ROWS], *out[ATT_ROWS];
    for (int i = 0; i < nr; i++) {
        f->kern->f32_to_f16_row(f->q + (int64_t)r[i].t * hp->n_head * dk + (int64_t)r[i].h * dk, w->q16, dk);
        f->kern->to_float[GGUF_T_F16](w->q16, r[i].qr, dk);
        n_ctx[i] = r[i].n_ctx;
        if (n_ctx[i] > n_max) n_max = n_ctx[i];
        q[i] = r[i].qr, pr[i] = sc[i] = r[i].sc, out[i] = r[i].out;
    }
    /* the row pointers of the thread's last (sequence, KV head) stay valid for this job (the
     * cells were written before it): only positions not listed yet are looked up */
    const bool cold = att_cold(f, r[0].t);
    if (w->seq != seq || w->g != g) {
        w->seq = seq, w->g = g, w->n = 0;
        const int32_t n_run = f->kern->att_wsumt4 && !cold ? att_run_span(f, r[0].t, hp->n_head / hp->n_head_kv) : 0;
        w->use_vt = n_run > 0;
        if (w->use_vt) {
            att_list(w, f, j->kv_layer, n_run);
            att_vt_fill(w, f->kern, dv, n_run);
        }
    }
    att_list(w, f, j->kv_layer, n_max);
    f->kern->att_scores4(nr, dk, w->kp, q, n_ctx, 1.0f / sqrtf((float)dk), sc, cold);
    for (int i = 0; i < nr; i++) {
        float *s = r[i].sc;
        const int32_t n_pad = (n_ctx[i] + 15) & ~15;
        for (int32_t p = n_ctx[i]; p < n_pad; p++) s[p] = -INFINITY;
        /* the softmax's scaling and the F16 rounding of the probabilities in one pass */
        f->kern->scale_round_f16(n_ctx[i], s, op_softmax_exp(f->kern, s, n_pad));
    }
    if (w->use_vt) {
        f->kern->att_wsumt4(nr, dv, w->vt, w->ldv, pr, n_ctx, out);
    } else {
        f->kern->att_wsum4(nr, dv, w->vp, pr, n_ctx, out, cold);
    }
}

/* Work units: a block of tb consecutive tokens times the r query heads of one KV head, with
 * tb * r a multiple of ATT_ROWS (tb = ATT_ROWS / gcd(r, ATT_ROWS)). A unit's rows, token by
 * token, go in groups of ATT_ROWS; a group closes early where the sequence changes (rows of
 * a group share the cells). The threads claim units one at a time from a counter, KV head
 * by KV head (causal attention makes later tokens dearer, so contiguous ranges would load the
 * last thread most; dealt out round-robin, the caller waited for the other thread 0.02-1.2 ms
 * a job where a neighbour held one back: recur-bench pp512 --profile, qwen3-0.6b Q8_0, 2
 * threads, 3 alternating pairs, 20-1185 -> 29-87 us a job, attention 0.70-0.96 -> 0.75-0.81
 * ms a token). Grouping changes no row's operations (att_group), so outputs do not depend on
 * it, nor on the thread split. */
static void att_job_fn(void *arg, int ith, int nth) {
    const att_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v, r = hp->n_head / hp->n_head_kv;
    const int tb = r % 4 == 0 ? 1 : r % 2 == 0 ? 2 : 4;
    const long n_blk = (f->n_tok + tb - 1) / tb;
    int64_t slot;
    att_scratch w;
    float *ws = att_workspace(f, ith, dk, &slot, &w);
    (void)nth;
    atomic_long *next = &((att_job *)j)->next;   /* the job's one mutable field */
    for (long u; (u = atomic_fetch_add_explicit(next, 1, memory_order_relaxed)) < n_blk * hp->n_head_kv;) {
        const int g = (int)(u / n_blk);
        const int32_t t0 = (int32_t)(u % n_blk) * tb;
        const int32_t t1 = t0 + tb < f->n_tok ? t0 + tb : f->n_tok;
        att_row rows[ATT_ROWS];
        int nr = 0;
        for (int32_t t = t0; t < t1; t++) {
            for (int h = g * r; h < (g + 1) * r; h++) {
                if (nr == ATT_ROWS || (nr > 0 && f->seq[t] != f->seq[rows[0].t])) {
                    att_group(j, rows, nr, g, &w);
                    nr = 0;
                }
                float *wr = ws + nr * slot;
                rows[nr++] = (att_row){ .t = t, .n_ctx = f->pos[t] + 1, .h = h, .qr = wr, .sc = wr + dk,
                                        .out = f->att + (int64_t)t * hp->n_head * dv + (int64_t)h * dv };
            }
        }
        if (nr > 0) att_group(j, rows, nr, g, &w);
    }
}

/* Per-head RMSNorm (qwen3 q/k norm) and RoPE of token t's query heads of KV heads [g0, g1)
 * and of those key heads, then their K and V rows into the token's cell. Every head is a row
 * of its own (the same bits as one op_rmsnorm / op_rope_apply per head), so any split of the
 * heads gives the same values. */
static void att_prep_heads(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer, int32_t t,
                           int g0, int g1) {
    const model_hparams *hp = &m->hp;
    const int dk = hp->head_dim_k, dv = hp->head_dim_v, r = hp->n_head / hp->n_head_kv;
    float *q = f->q + (int64_t)t * hp->n_head * dk + (int64_t)g0 * r * dk;
    float *k = f->k + (int64_t)t * hp->n_head_kv * dk + (int64_t)g0 * dk;
    const float *v = f->v + (int64_t)t * hp->n_head_kv * dv + (int64_t)g0 * dv;
    const float *cs = f->rope + (int64_t)t * hp->n_rot;
    const int nq = (g1 - g0) * r, nk = g1 - g0;
    if (L->q_norm.data) op_rmsnorm_rows(f->kern, q, q, L->q_norm.data, dk, nq, dk, hp->rms_eps);
    if (L->k_norm.data) op_rmsnorm_rows(f->kern, k, k, L->k_norm.data, dk, nk, dk, hp->rms_eps);
    for (int h = 0; h < nq; h++) op_rope_apply(f->kern, q + h * dk, cs, hp->n_rot, hp->rope_kind);
    for (int h = 0; h < nk; h++) op_rope_apply(f->kern, k + h * dk, cs, hp->n_rot, hp->rope_kind);
    for (int h = 0; h < nk; h++) {   /* the cache keeps each head apart (kv.h) */
        f->kern->f32_to_f16_row(k + h * dk, kv_k_head(f->kv, kv_layer, g0 + h, f->cell[t]), dk);
        f->kern->f32_to_f16_row(v + h * dv, kv_v_head(f->kv, kv_layer, g0 + h, f->cell[t]), dv);
    }
}

/* A batch's norms, RoPE and K/V stores, before its attention job: tokens are independent, so
 * they are split among the threads. */
static void att_prepare_fn(void *arg, int ith, int nth) {
    const att_job *j = arg;
    long lo, hi;
    tp_split(j->f->n_tok, ith, nth, 1, &lo, &hi);
    for (int32_t t = (int32_t)lo; t < (int32_t)hi; t++)
        att_prep_heads(j->m, j->f, j->L, j->kv_layer, t, 0, j->m->hp.n_head_kv);
}

/* Positions of a decode step's K and V rows fetched ahead (ATT_PF_POS of each, 256 bytes a row
 * for head_dim 128): a KV head's rows are a short run that the hardware prefetchers barely
 * start on before the scores need it, so the thread asks for them first and prepares the
 * head's query and key while they arrive. recur-bench tg128, qwen3-0.6b Q4_K_M, 2 threads,
 * 10 alternating rounds (medians), on Zen 4: the serial preparation before this job 118.9
 * t/s, this job without the prefetch 117.9, with 64 positions 124.6, with 128 122.7; heads
 * dealt out one share each instead of one run per thread: 0.98x. On Zen 5, tokens of one
 * process alternating in runs of 8 (a patch outside the repo), the time a token with 128
 * over 64: qwen3-0.6b Q4_K_M 0.991 and 0.994, Q8_0 0.999 and 0.994, qwen35-0.8b Q4_K_M (6
 * attention layers) 0.998 and 1.001; at a depth of 4096, qwen3-0.6b Q4_K_M 0.999 and 0.994. */
#define ATT_PF_POS 128

/* On Zen 5, qwen3-0.6b tg128, a group (2 query heads, 1 KV head) takes ~0.2 us to list and
 * fetch its rows, ~1 us to prepare (the three norms are serial double sums) and 0.7-2.4 us to
 * attend (timer outside the repo). Preparing all of a thread's groups first (their norms side
 * by side in one sumsq_rows call), with each group's rows fetched ahead of the group before
 * it, changed nothing (tokens alternating in runs of 8: 1.000x and 1.003x the time a token);
 * fetching every group's rows before the preparation was slower (1.010-1.013x).
 * Why the job costs what it does (qwen3-0.6b Q4_K_M tg128, 2 threads, ~20 us a layer, each
 * thread busy ~18.6: listing and fetching 3.4, preparing 4.5 of which the norms 3.1, the
 * groups 10.7; a group's scores 0.8 us, softmax 0.2, weighted sums 1.1): its K/V rows come from
 * memory at the rate the L1 miss buffers allow. A plain read of one thread's rows of a layer
 * at depth 64 (8 runs of 16 KiB, cold, 2 MiB pages; a program outside the repo) takes 11 us,
 * ~12 GB/s, against ~30 that a weight stream gets with the L2 prefetchers' help. Moving that
 * wait elsewhere did not pay (tokens alternating in runs of 8, medians, time a token): the rows
 * fetched during the last 256 or 512 KiB of the thread's q/k/v matmul share cut the job from
 * 18-25 to 14-17 us but slowed the matmul as much (0.997-1.015x); the o-projection's first
 * 128-512 KiB fetched from here made this job 12 us longer and the o-projection only 4 us
 * shorter (1.012-1.051x); the listing's fetches as T1 (1.002-1.017x), or only 0, 16 or 32
 * positions ahead (1.016-1.024x). The caller waits 3-5 us a job for the other thread's last
 * head (recur-bench --profile, the thread pool table): the heads' times vary, not the starts
 * (the worker starts 0.4 us after the caller). Heads claimed one at a time from a counter in
 * the job instead of a run per thread: 0.999-1.019x (qwen3-0.6b Q4_K_M and Q8_0). */

/* One token (a decode step): each thread takes whole KV heads, and for each prepares its
 * query and key heads, stores its K/V row and computes its query heads' outputs — one job per
 * layer instead of a serial preparation and a job. The operations per head are att_prep_heads'
 * and att_group's, as in the batch path, so the bits are the same. */
static void att_decode_fn(void *arg, int ith, int nth) {
    const att_job *j = arg;
    model_fwd *f = j->f;
    const model_hparams *hp = &j->m->hp;
    const int dk = hp->head_dim_k, r = hp->n_head / hp->n_head_kv;
    int64_t slot;
    att_scratch w;
    float *ws = att_workspace(f, ith, dk, &slot, &w);
    w.seq = f->seq[0];
    const int32_t n_ctx = f->pos[0] + 1;
    long g0, g1;
    tp_split(hp->n_head_kv, ith, nth, 1, &g0, &g1);
    const int32_t *cells = kv_seq_cells(f->kv, w.seq);   /* the token's position is in range */
    for (int g = (int)g0; g < (int)g1; g++) {
        w.g = g;
        const uint16_t *kb = kv_k_rows(f->kv, j->kv_layer, g), *vb = kv_v_rows(f->kv, j->kv_layer, g);
        for (int32_t p = 0; p < n_ctx; p++) {
            const int32_t c = cells[p];
            w.kp[p] = c < 0 ? NULL : kb + (int64_t)c * dk;
            w.vp[p] = c < 0 ? NULL : vb + (int64_t)c * hp->head_dim_v;
            if (p >= ATT_PF_POS || p == n_ctx - 1 || c < 0) continue;
            for (int o = 0; o < 2 * dk; o += 64) __builtin_prefetch((const char *)w.kp[p] + o);
            for (int o = 0; o < 2 * hp->head_dim_v; o += 64) __builtin_prefetch((const char *)w.vp[p] + o);
        }
        if (w.kp[n_ctx - 1]) {   /* the row this step writes: fetched for writing */
            for (int o = 0; o < 2 * dk; o += 64) __builtin_prefetch((const char *)w.kp[n_ctx - 1] + o, 1);
            for (int o = 0; o < 2 * hp->head_dim_v; o += 64) __builtin_prefetch((const char *)w.vp[n_ctx - 1] + o, 1);
        }
        w.n = n_ctx;
        att_prep_heads(j->m, f, j->L, j->kv_layer, 0, g, g + 1);
        att_row rows[ATT_ROWS];
        int nr = 0;
        for (int h = g * r; h < (g + 1) * r; h++) {
            if (nr == ATT_ROWS) {
                att_group(j, rows, nr, g, &w);
                nr = 0;
            }
            float *wr = ws + nr * slot;
            rows[nr++] = (att_row){ .t = 0, .n_ctx = n_ctx, .h = h, .qr = wr, .sc = wr + dk,
                                    .out = f->att + (int64_t)h * hp->head_dim_v };
        }
        if (nr > 0) att_group(j, rows, nr, g, &w);
    }
}

/* RMSNorm + RoPE of q and k, K/V into cells, then every (token, head) output into f->att. */
static void att_run(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    att_job j = { m, f, L, kv_layer, 0 };
    /* a small job runs on the caller alone: waking the workers would cost more */
    const double work = (double)f->n_tok * m->hp.n_head * (f->pos[f->n_tok - 1] + 1) * m->hp.head_dim_k;
    tp_pool *pool = work < (1 << 15) ? NULL : f->pool;
    if (f->n_tok == 1) {
        fwd_job(f, RECUR_PROF_ATTENTION, pool, att_decode_fn, &j, 0);
        return;
    }
    fwd_job(f, RECUR_PROF_ATTENTION, f->pool, att_prepare_fn, &j, 0);
    fwd_job(f, RECUR_PROF_ATTENTION, pool, att_job_fn, &j, 0);
}

void block_attention(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    fwd_matmul_n(f, f->xb, 3, (const model_w *[]){ &L->wq, &L->wk, &L->wv }, (float *[]){ f->q, f->k, f->v });
    att_run(m, f, L, kv_layer);
    fwd_matmul(f, &L->wo, f->att, f->tmp);
    if (L->bo.data) {
        for (int32_t t = 0; t < f->n_tok; t++) op_add(f->tmp + (int64_t)t * m->hp.n_embd, L->bo.data, m->hp.n_embd);
    }
    fwd_add_rows(f, f->x, f->tmp, m->hp.n_embd);
}

/* The gated attention's steps on each token's rows (threads split the tokens): before the
 * attention, each head's query out of its [query | gate] pair; after it, the output times the
 * sigmoid of the gate (dv == D for these models). */
typedef struct att_gate_job {
    const model_hparams *hp;
    model_fwd           *f;
    bool                 after;
} att_gate_job;

static void att_gate_fn(void *arg, int ith, int nth) {
    const att_gate_job *j = arg;
    model_fwd *f = j->f;
    const int64_t H = j->hp->n_head, D = j->hp->head_dim_k, dv = j->hp->head_dim_v;
    long lo, hi;
    tp_split(f->n_tok, ith, nth, 1, &lo, &hi);
    for (long t = lo; t < hi; t++)
        for (int64_t h = 0; h < H; h++) {
            const float *qg = f->qg + t * 2 * H * D + h * 2 * D;
            if (!j->after) {
                memcpy(f->q + (t * H + h) * D, qg, (size_t)D * sizeof(float));
                continue;
            }
            float *o = f->att + (t * H + h) * dv;
            for (int64_t e = 0; e < dv; e++) o[e] *= 1.0f / (1.0f + expf(-qg[D + e]));
        }
}

void block_attention_gated(const struct recur_model *m, model_fwd *f, const model_layer *L, int kv_layer) {
    const model_hparams *hp = &m->hp;
    tp_pool *pool = f->n_tok > 1 ? f->pool : NULL;
    fwd_matmul_n(f, f->xb, 3, (const model_w *[]){ &L->wq, &L->wk, &L->wv }, (float *[]){ f->qg, f->k, f->v });
    fwd_job(f, RECUR_PROF_ATTENTION, pool, att_gate_fn, &(att_gate_job){ hp, f, false }, 0);
    att_run(m, f, L, kv_layer);
    fwd_job(f, RECUR_PROF_ATTENTION, pool, att_gate_fn, &(att_gate_job){ hp, f, true }, 0);
    fwd_matmul(f, &L->wo, f->att, f->tmp);
    fwd_add_rows(f, f->x, f->tmp, hp->n_embd);
}
