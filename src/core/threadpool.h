/* threadpool.h — persistent kernel workers.
 *
 * Invariants:
 *  1. Work is split by *outputs*: a job receives (ith, nth) and computes the outputs it owns
 *     completely; no output is ever reduced across threads. So the result of a job never
 *     depends on nth, only on the job's own fixed reduction order.
 *  2. tp_run returns only when every thread finished the job (a full barrier), so jobs may
 *     be chained without further synchronisation.
 *  3. The calling thread runs share 0; workers are created once in tp_new and sleep on a
 *     condition variable after a short spin when idle.
 *  4. One caller at a time: a pool is owned by one thread (the scheduler). */
#ifndef RECUR_CORE_THREADPOOL_H
#define RECUR_CORE_THREADPOOL_H

typedef struct tp_pool tp_pool;

/* A job body: computes share ith of nth. */
typedef void (*tp_job_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 picks the number of online CPUs. Returns NULL on failure. */
tp_pool *tp_new(int n_threads);
void     tp_free(tp_pool *p);
int      tp_n_threads(const tp_pool *p);

/* Runs fn(arg, i, n) for i in [0, n) on the pool's threads and waits for all. p may be NULL
 * (then fn(arg, 0, 1) runs on the caller). */
void tp_run(tp_pool *p, tp_job_fn fn, void *arg);

/* Splits [0, n) into nth contiguous ranges; share ith is [*lo, *hi). Ranges are rounded to
 * multiples of `unit` (except the last) so SIMD tiles stay whole. */
void tp_split(long n, int ith, int nth, long unit, long *lo, long *hi);

#endif
