#include "model/forward.h"

#include <stdio.h>
#include <string.h>

#include "tensor/ops.h"

/* Below this many elements a row-wise op runs on the caller alone (waking the workers would
 * cost more than it saves). */
#define FWD_MIN_PARALLEL 16384


/* The pool's job times since fwd_prof_start, added to kind's; returns the job time. */
static uint64_t prof_pool(model_fwd *f, recur_prof_kind kind) {
    const tp_times now = tp_get_times(f->pool), *was = &f->prof_tp;
    f->prof->jobs[kind] += now.jobs - was->jobs;
    f->prof->job_ns[kind] += now.job_ns - was->job_ns;
    f->prof->wait_ns[kind] += now.wait_ns - was->wait_ns;
    return now.job_ns - was->job_ns;
}

void fwd_prof_stop(model_fwd *f, recur_prof_kind kind, int64_t t0) {
    if (!f->prof || kind == RECUR_PROF_OTHER) return;   /* OTHER: the decode's remainder (context.c) */
    f->prof->ns[kind] += (uint64_t)(rc_time_ns() - t0);
    f->prof->steps[kind]++;
    prof_pool(f, kind);
}

/* The entry of p->mm that calls like *key add to: found, else new, else p->mm_rest. */
static recur_prof_mm *prof_mm_entry(recur_profile *p, const recur_prof_mm *key) {
    for (int32_t i = 0; i < p->n_mm; i++) {
        const recur_prof_mm *e = &p->mm[i];
        if (e->rows == key->rows && e->cols == key->cols && e->n_mats == key->n_mats && e->experts == key->experts &&
            !strcmp(e->types, key->types))
            return &p->mm[i];
    }
    if (p->n_mm == RECUR_PROF_MM_MAX) return &p->mm_rest;
    p->mm[p->n_mm] = *key;
    return &p->mm[p->n_mm++];
}

void fwd_prof_matmul(model_fwd *f, int64_t t0, const model_w *const *w, int n, bool experts, uint64_t bytes) {
    if (!f->prof) return;
    const uint64_t ns = (uint64_t)(rc_time_ns() - t0), job_ns = prof_pool(f, RECUR_PROF_MATMUL);
    recur_profile *p = f->prof;
    p->ns[RECUR_PROF_MATMUL] += ns;
    p->steps[RECUR_PROF_MATMUL]++;
    p->matmul_bytes += bytes;
    recur_prof_mm key = { .n_mats = n, .experts = experts, .cols = w[0]->ne[0] };
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        key.rows += w[i]->ne[1];
        const int k = snprintf(key.types + len, sizeof key.types - len, "%s%s", i ? "," : "", gguf_type_name(w[i]->type));
        if (k > 0) len = len + (size_t)k < sizeof key.types ? len + (size_t)k : sizeof key.types - 1;
    }
    recur_prof_mm *e = prof_mm_entry(p, &key);
    e->steps++;
    e->ns += ns;
    e->job_ns += job_ns;
    e->bytes += bytes;
}

void fwd_job(model_fwd *f, recur_prof_kind kind, tp_pool *pool, tp_job_fn fn, void *arg, int n_shares) {
    const int64_t t0 = fwd_prof_start(f);
    tp_run_n(pool, fn, arg, n_shares > 0 ? n_shares : tp_n_threads(pool));
    fwd_prof_stop(f, kind, t0);
}

uint64_t fwd_w_bytes(const model_w *w) { return (uint64_t)tensor_row_bytes(w->type, w->ne[0]) * (uint64_t)w->ne[1]; }

void fwd_matmul(model_fwd *f, const model_w *w, const float *X, float *Y) {
    const int64_t t0 = fwd_prof_start(f);
    tensor_matmul(f->pool, f->kern, model_w_wtype(w), w->data, w->ne[0], w->ne[1], X, f->n_tok, Y, w->ne[1],
                  f->mm_scratch);
    if (f->prof) fwd_prof_matmul(f, t0, &w, 1, false, f->n_tok > 0 ? fwd_w_bytes(w) : 0);
}

void fwd_matmul_n(model_fwd *f, const float *X, int n, const model_w *const *w, float *const *Y) {
    const int64_t t0 = fwd_prof_start(f);
    tensor_mm mm[TENSOR_MM_MAX];
    for (int i = 0; i < n; i++) mm[i] = (tensor_mm){ model_w_wtype(w[i]), w[i]->data, w[i]->ne[1], Y[i], w[i]->ne[1] };
    tensor_matmul_n(f->pool, f->kern, mm, n, w[0]->ne[0], X, f->n_tok, f->mm_scratch);
    if (!f->prof) return;
    uint64_t bytes = 0;
    for (int i = 0; i < n && f->n_tok > 0; i++) bytes += fwd_w_bytes(w[i]);
    fwd_prof_matmul(f, t0, w, n, false, bytes);
}

/* Row-wise ops over the ubatch's token rows, split among the threads (a row's result is the
 * same on any of them): on the caller alone they would leave the other threads idle. */
typedef enum fwd_rows_op { FWD_ROWS_NORM, FWD_ROWS_ADD, FWD_ROWS_SWIGLU } fwd_rows_op;

typedef struct fwd_rows_job {
    model_fwd   *f;
    fwd_rows_op  op;
    float       *out;      /* norm: the output; add: x; swiglu: g */
    const float *in, *w;   /* norm: the input and weight; add: y; swiglu: u */
    int64_t      n;
    float        eps;
    int64_t      n_rows;   /* the ubatch's n_tok unless given */
} fwd_rows_job;

static void fwd_rows_fn(void *arg, int ith, int nth) {
    const fwd_rows_job *j = arg;
    long lo, hi;
    tp_split((long)j->n_rows, ith, nth, 1, &lo, &hi);
    float *out = j->out + lo * j->n;
    const float *in = j->in + lo * j->n;
    switch (j->op) {
    case FWD_ROWS_NORM:   /* each row one op_rmsnorm (a serial double sum) */
        op_rmsnorm_rows(j->f->kern, out, in, j->w, j->n, hi - lo, j->n, j->eps);
        break;
    case FWD_ROWS_ADD:
        op_add(out, in, (hi - lo) * j->n);
        break;
    case FWD_ROWS_SWIGLU:   /* row by row: ggml's op starts its exp chunks at each row */
        for (long t = 0; t < hi - lo; t++) op_swiglu(j->f->kern, out + t * j->n, out + t * j->n, in + t * j->n, j->n);
        break;
    }
}

static void fwd_rows(fwd_rows_job j) {
    if (!j.n_rows) j.n_rows = j.f->n_tok;
    const bool par = j.n_rows > 1 && (j.op == FWD_ROWS_NORM || j.n_rows * j.n >= FWD_MIN_PARALLEL);
    fwd_job(j.f, j.op == FWD_ROWS_NORM ? RECUR_PROF_NORM : RECUR_PROF_ELEMENTWISE, par ? j.f->pool : NULL, fwd_rows_fn,
            &j, 0);
}

void fwd_rmsnorm_rows(model_fwd *f, float *out, const float *in, const model_w *w, int64_t n, float eps) {
    fwd_rows((fwd_rows_job){ f, FWD_ROWS_NORM, out, in, w ? (const float *)w->data : NULL, n, eps, 0 });
}

bool fwd_keep_out_rows(model_fwd *f, int64_t n_embd) {
    if (!f->out_tok || f->n_out == f->n_tok) return f->n_tok > 0;
    for (int32_t k = 0; k < f->n_out; k++)   /* ascending, so out_tok[k] >= k: front to back is safe */
        if (f->out_tok[k] != k)
            memmove(f->x + (int64_t)k * n_embd, f->x + (int64_t)f->out_tok[k] * n_embd, (size_t)n_embd * sizeof(float));
    f->n_tok = f->n_out;
    f->cap = NULL;
    return f->n_tok > 0;
}

void fwd_add_rows(model_fwd *f, float *x, const float *y, int64_t n) {
    fwd_rows((fwd_rows_job){ f, FWD_ROWS_ADD, x, y, NULL, n, 0.0f, 0 });
}

void fwd_swiglu_rows(model_fwd *f, float *g, const float *u, int64_t n, int64_t n_rows) {
    if (n_rows > 0) fwd_rows((fwd_rows_job){ f, FWD_ROWS_SWIGLU, g, u, NULL, n, 0.0f, n_rows });
}
