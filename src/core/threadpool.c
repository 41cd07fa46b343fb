/* threadpool.c — persistent workers with a generation counter.
 *
 * tp_run publishes (fn, arg) and bumps `gen`; each worker waits for a new generation (spinning
 * briefly, then sleeping on a condition variable), runs its share and increments `done`. The
 * caller runs share 0 and then waits until done == n_threads - 1. */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#define TP_SPIN 20000   /* iterations a waiting thread spins before it sleeps */

struct tp_pool {
    int              n_threads;
    pthread_t       *threads;
    pthread_mutex_t  mu;
    pthread_cond_t   cv_work;     /* workers sleep here for a new generation */
    pthread_cond_t   cv_done;     /* the caller sleeps here for the last worker */
    atomic_uint      gen;         /* bumped once per job */
    atomic_int       done;        /* workers finished with the current generation */
    atomic_int       sleeping_caller;
    atomic_bool      stop;
    tp_job_fn        fn;
    void            *arg;
};

typedef struct { tp_pool *p; int ith; } tp_worker_arg;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void *tp_worker(void *varg) {
    tp_worker_arg *wa = varg;
    tp_pool *p = wa->p;
    const int ith = wa->ith;
    free(wa);
    /* gen was 0 when the thread was created; reading it here instead would miss a job
     * published before this thread first ran (and tp_run would wait forever). */
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
            if (++spins < TP_SPIN) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->gen);
        p->fn(p->arg, ith, p->n_threads);
        if (atomic_fetch_add(&p->done, 1) + 1 == p->n_threads - 1 &&
            atomic_load(&p->sleeping_caller)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
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
    atomic_init(&p->gen, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->sleeping_caller, 0);
    atomic_init(&p->stop, false);
    p->threads = calloc((size_t)n_threads, sizeof *p->threads);
    if (!p->threads) { free(p); return NULL; }
    for (int i = 1; i < n_threads; i++) {
        tp_worker_arg *wa = malloc(sizeof *wa);
        if (!wa || pthread_create(&p->threads[i], NULL, tp_worker, (wa->p = p, wa->ith = i, wa)) != 0) {
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

void tp_run(tp_pool *p, tp_job_fn fn, void *arg) {
    if (!p || p->n_threads == 1) { fn(arg, 0, 1); return; }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->done, 0);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);

    fn(arg, 0, p->n_threads);

    const int want = p->n_threads - 1;
    int spins = 0;
    while (atomic_load_explicit(&p->done, memory_order_acquire) != want) {
        if (++spins < TP_SPIN) { cpu_relax(); continue; }
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->sleeping_caller, 1);
        while (atomic_load(&p->done) != want) pthread_cond_wait(&p->cv_done, &p->mu);
        atomic_store(&p->sleeping_caller, 0);
        pthread_mutex_unlock(&p->mu);
    }
}

void tp_split(long n, int ith, int nth, long unit, long *lo, long *hi) {
    if (unit < 1) unit = 1;
    long units = (n + unit - 1) / unit;
    long per = units / nth, rem = units % nth;
    long u0 = ith * per + (ith < rem ? ith : rem);
    long u1 = u0 + per + (ith < rem ? 1 : 0);
    *lo = u0 * unit < n ? u0 * unit : n;
    *hi = u1 * unit < n ? u1 * unit : n;
}
