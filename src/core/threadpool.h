/* threadpool.h — persistent kernel workers.
 *
 * Invariants:
 *  1. Work is split by *outputs*: a job is cut into shares; share ith of nth computes the
 *     outputs it owns completely, and no output is ever reduced across shares. So the result
 *     of a job never depends on nth or on which thread runs which share, only on the job's
 *     own fixed reduction order.
 *  2. tp_run / tp_run_n return only when every share is finished (a full barrier), so jobs
 *     may be chained without further synchronisation.
 *  3. Each share runs exactly once, on whichever thread claims it first (the caller claims
 *     too); at most n_threads shares run at a time. Workers are created once in tp_new and
 *     sleep on a condition variable after a short spin when idle. A share must not depend on
 *     the identity of its thread: per-share scratch is indexed by the share (tp_run has
 *     n_threads shares, so scratch sized per thread fits).
 *  4. One caller at a time: a pool is owned by one thread (the scheduler). */
#ifndef RECUR_CORE_THREADPOOL_H
#define RECUR_CORE_THREADPOOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct tp_pool tp_pool;

/* A job body: computes share ith of nth (any thread may run any share). */
typedef void (*tp_job_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 picks the number of online CPUs. Returns NULL on failure. */
tp_pool *tp_new(int n_threads);
void     tp_free(tp_pool *p);
int      tp_n_threads(const tp_pool *p);

/* Runs fn(arg, i, n) for every share i in [0, n), n = the pool's thread count, on the pool's
 * threads and waits for all. p may be NULL (then fn(arg, 0, 1) runs on the caller). */
void tp_run(tp_pool *p, tp_job_fn fn, void *arg);
/* The same with n_shares shares (more than threads: a thread the OS does not schedule holds
 * back less of the job). n_shares <= 1 or a pool of one thread: fn(arg, 0, 1) on the caller. */
void tp_run_n(tp_pool *p, tp_job_fn fn, void *arg, int n_shares);

/* Job timing, off until asked for (recur-bench --profile). While on, every job that runs on
 * several threads (not the ones tp_run_n runs on the caller alone) adds its time on the caller:
 * from publishing the job to tp_run_n's return, and the part of that the caller spent waiting
 * for the other threads' last shares once it found none left. Only the caller writes them
 * (invariant 4), so read them on the caller. */
typedef struct tp_times {
    uint64_t jobs;      /* jobs run on several threads */
    uint64_t job_ns;    /* their time on the caller, publishing to return */
    uint64_t wait_ns;   /* of which waiting for the other threads' shares */
} tp_times;
void     tp_set_timing(tp_pool *p, bool on);   /* p NULL: nothing */
tp_times tp_get_times(const tp_pool *p);       /* p NULL: zeros */

/* Splits [0, n) into nth contiguous ranges; share ith is [*lo, *hi). Ranges are rounded to
 * multiples of `unit` (except the last) so SIMD tiles stay whole. */
void tp_split(long n, int ith, int nth, long unit, long *lo, long *hi);
/* As tp_split, but share i gets a part proportional to nth - i (nth, nth - 1, ..., 1): shares
 * are claimed in order, so the big ones go first and the last ones, which decide how long
 * the first thread to run out waits for the others, are small. */
void tp_split_tapered(long n, int ith, int nth, long unit, long *lo, long *hi);

#endif
