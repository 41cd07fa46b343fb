/* threadpool.c — persistent workers that claim the shares of a job one at a time.
 *
 * One 64-bit word, `claim`, holds the job's generation (high 32 bits) and the next unclaimed
 * share (low 32 bits). tp_run_n writes the job's fields, then publishes generation G with
 * share 0; every thread (the caller included) takes shares by compare-and-swap on the word
 * while its generation is still G and shares remain, and counts each finished share in `done`.
 * The caller returns when done == n_shares, then closes the word (share = TP_CLOSED), so:
 *  - nobody waits for a thread that took no share: a worker the OS has not scheduled yet
 *    simply finds the job gone when it runs (on an oversubscribed machine the caller does its
 *    shares instead of waiting for it);
 *  - a late worker can never take a share of a finished job, nor one of the next job with a
 *    torn read of the fields: it read the fields after seeing G in `claim` (acquire) and its
 *    claim only succeeds while the word still says G with shares left, i.e. before the
 *    caller touches the fields again.
 * Idle workers spin a while on the word, then sleep on a condition variable (counted in
 * `sleeping`, so a job wakes them with a broadcast only when one sleeps). */
#include "core/threadpool.h"

#include "core/timing.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define TP_SPIN   20000        /* iterations a waiting thread spins before it sleeps */
#define TP_CLOSED 0xFFFFFFFFu  /* share field of a finished job: larger than any share count */

struct tp_pool {
    int                  n_threads;
    pthread_t           *threads;
    pthread_mutex_t      mu;
    pthread_cond_t       cv_work;    /* workers sleep here for a new generation */
    pthread_cond_t       cv_done;    /* the caller sleeps here for the last share */
    _Atomic uint64_t     claim;      /* generation << 32 | next share */
    atomic_long          done;       /* shares finished in the current job */
    atomic_int           sleeping;   /* workers asleep on cv_work */
    atomic_int           sleeping_caller;
    atomic_bool          stop;
    _Atomic(tp_job_fn)   fn;         /* the job: written only while no share can be claimed */
    _Atomic(void *)      arg;
    atomic_long          n_shares;
    bool                 timing;     /* tp_set_timing: the caller's fields below count */
    tp_times             times;
};

typedef struct { tp_pool *p; } tp_worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static inline uint32_t gen_of(uint64_t c) { return (uint32_t)(c >> 32); }

/* Takes and runs shares of generation g until none is left (or the job is another one). */
static void run_shares(tp_pool *p, uint32_t g) {
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        if (gen_of(c) != g) return;
        const tp_job_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        const long n = atomic_load_explicit(&p->n_shares, memory_order_relaxed);
        if ((long)(uint32_t)c >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        fn(arg, (int)(uint32_t)c, (int)n);
        if (atomic_fetch_add(&p->done, 1) + 1 == n && atomic_load(&p->sleeping_caller)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *tp_worker(void *varg) {
    tp_pool *p = ((tp_worker_arg *)varg)->p;
    free(varg);
    /* generation 0 is the closed word tp_new leaves: a job published before this thread
     * first ran is generation >= 1 and is not missed */
    uint32_t seen = 0;
    for (;;) {
        int spins = 0;
        uint64_t c;
        while (gen_of(c = atomic_load_explicit(&p->claim, memory_order_acquire)) == seen && !atomic_load(&p->stop)) {
            if (++spins < TP_SPIN) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleeping, 1);   /* then the check: tp_run_n's store + load pair */
            while (gen_of(atomic_load(&p->claim)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = gen_of(c);
        run_shares(p, seen);
    }
    return NULL;
}

tp_pool *tp_new(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (n_threads > 512) n_threads = 512;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->claim, (uint64_t)TP_CLOSED);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleeping, 0);
    atomic_init(&p->sleeping_caller, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n_shares, 0);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        tp_worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->threads[i], NULL, tp_worker, (wa->p = p, wa)) != 0) {
            free(wa);
            p->n_threads = i;   /* tp_free joins the ones that started */
            tp_free(p);
            return NULL;
        }
    }
    return p;
}

void tp_free(tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    free(p->threads);
    free(p);
}

int tp_n_threads(const tp_pool *p) { return p ? p->n_threads : 1; }

void tp_run_n(tp_pool *p, tp_job_fn fn, void *arg, int n_shares) {
    if (!p || p->n_threads == 1 || n_shares <= 1) { fn(arg, 0, 1); return; }
    const int64_t t0 = p->timing ? rc_time_ns() : 0;
    /* the word is closed (TP_CLOSED): no share can be claimed while the fields change */
    const uint32_t g = gen_of(atomic_load(&p->claim)) + 1;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_shares, n_shares, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store(&p->claim, (uint64_t)g << 32);   /* publishes the fields (seq_cst) */
    if (atomic_load(&p->sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    run_shares(p, g);
    const int64_t t1 = p->timing ? rc_time_ns() : 0;

    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != n_shares) {
        if (++spins < TP_SPIN) { cpu_relax(); continue; }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->sleeping_caller, 1);
        while (atomic_load(&p->done) != n_shares) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->sleeping_caller, 0);
        pthread_mutex_unlock(&p->mu);
    }
    atomic_store(&p->claim, (uint64_t)g << 32 | TP_CLOSED);
    if (p->timing) {
        const int64_t t2 = rc_time_ns();
        p->times.jobs++;
        p->times.job_ns += (uint64_t)(t2 - t0);
        p->times.wait_ns += (uint64_t)(t2 - t1);
    }
}

void tp_set_timing(tp_pool *p, bool on) {
    if (p) p->timing = on;
}

tp_times tp_get_times(const tp_pool *p) { return p ? p->times : (tp_times){ 0 }; }

void tp_run(tp_pool *p, tp_job_fn fn, void *arg) { tp_run_n(p, fn, arg, tp_n_threads(p)); }

void tp_split(long n, int ith, int nth, long unit, long *lo, long *hi) {
    if (unit < 1) unit = 1;
    long units = (n + unit - 1) / unit;
    long per = units / nth, rem = units % nth;
    long u0 = ith * per + (ith < rem ? ith : rem);
    long u1 = u0 + per + (ith < rem ? 1 : 0);
    *lo = u0 * unit < n ? u0 * unit : n;
    *hi = u1 * unit < n ? u1 * unit : n;
}

/* The first unit of share i: units · (weights of shares 0..i-1) / (all weights), weights
 * nth - k (their sum up to i: i·nth - i(i-1)/2, of all nth(nth+1)/2). */
static long tapered_start(long units, long i, long nth) {
    const long before = i * nth - i * (i - 1) / 2, all = nth * (nth + 1) / 2;
    return units * before / all;
}

void tp_split_tapered(long n, int ith, int nth, long unit, long *lo, long *hi) {
    if (unit < 1) unit = 1;
    const long units = (n + unit - 1) / unit;
    const long u0 = tapered_start(units, ith, nth), u1 = tapered_start(units, ith + 1, nth);
    *lo = u0 * unit < n ? u0 * unit : n;
    *hi = u1 * unit < n ? u1 * unit : n;
}
