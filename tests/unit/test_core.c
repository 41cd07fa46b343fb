/* test_core.c — the thread pool splits work by outputs, waits for every share and times its jobs
 * when asked. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdlib.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/threadpool.h"

typedef struct job { long n; int *hits; } job;

static void mark(void *arg, int ith, int nth) {
    job *j = arg;
    long lo, hi;
    tp_split(j->n, ith, nth, 4, &lo, &hi);
    for (long i = lo; i < hi; i++) j->hits[i]++;
}

static void test_split_covers_once(void **state) {
    (void)state;
    for (int nth = 1; nth <= 7; nth++) {
        tp_pool *p = tp_new(nth);
        assert_non_null(p);
        assert_int_equal(tp_n_threads(p), nth);
        for (long n = 0; n < 70; n += 3) {
            int *hits = calloc((size_t)n + 1, sizeof *hits);
            job j = { n, hits };
            for (int rep = 0; rep < 3; rep++) tp_run(p, mark, &j);
            for (long i = 0; i < n; i++) assert_int_equal(hits[i], 3);
            free(hits);
        }
        tp_free(p);
    }
    tp_free(NULL);
}

/* More shares than threads, and many short jobs back to back (a late worker must never run a
 * share of a finished job or miss one of the next): every share exactly once per job. */
typedef struct share_job { int n; atomic_int *hits; } share_job;

static void count_share(void *arg, int ith, int nth) {
    share_job *j = arg;
    assert_int_equal(nth, j->n);
    atomic_fetch_add(&j->hits[ith], 1);
}

static void test_shares(void **state) {
    (void)state;
    for (int nth = 1; nth <= 4; nth++) {
        tp_pool *p = tp_new(nth);
        assert_non_null(p);
        atomic_int hits[37];
        for (int rep = 0; rep < 20000; rep++) {
            const int n = 1 + rep % 37;
            for (int i = 0; i < n; i++) atomic_init(&hits[i], 0);
            const int runs = nth == 1 ? 1 : n;   /* a pool of one thread: fn(arg, 0, 1) */
            share_job j = { runs, hits };
            tp_run_n(p, count_share, &j, n);
            for (int i = 0; i < runs; i++) assert_int_equal(atomic_load(&hits[i]), 1);
            if (nth == 1 && n > 1) assert_int_equal(atomic_load(&hits[1]), 0);
            if (nth == 1) rep += 997;   /* one thread: nothing to race */
        }
        tp_free(p);
    }
}

static void test_split_units(void **state) {
    (void)state;
    long lo, hi, prev = 0;
    for (int i = 0; i < 3; i++) {
        tp_split(100, i, 3, 8, &lo, &hi);
        assert_int_equal(lo, prev);
        if (i < 2) assert_int_equal(lo % 8, 0);
        prev = hi;
    }
    assert_int_equal(prev, 100);
}

/* The tapered split: contiguous shares that cover [0, n) once, whole units but the last,
 * none larger than the one before it by more than a unit (rounding), the last ones small. */
static void test_split_tapered(void **state) {
    (void)state;
    static const long units[] = { 1, 4, 16 };
    for (int nth = 1; nth <= 16; nth++)
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
            for (long n = 0; n < 700; n += 7) {
                long prev = 0, prev_size = n + units[u];
                for (int i = 0; i < nth; i++) {
                    long lo, hi;
                    tp_split_tapered(n, i, nth, units[u], &lo, &hi);
                    assert_int_equal(lo, prev);
                    assert_true(hi >= lo);
                    if (hi < n) assert_int_equal(hi % units[u], 0);
                    assert_true(hi - lo <= prev_size + units[u]);
                    prev = hi;
                    prev_size = hi - lo;
                }
                assert_int_equal(prev, n);
            }
    /* 8 shares of 512 rows in 16-row tiles: 7 of the 32 tiles first, 1 last */
    long lo, hi;
    tp_split_tapered(512, 0, 8, 16, &lo, &hi);
    assert_int_equal(hi - lo, 112);
    tp_split_tapered(512, 7, 8, 16, &lo, &hi);
    assert_int_equal(hi - lo, 16);
}

/* Job timing: nothing counts while off; on, each job spread over the threads counts once, the
 * caller's wait within the job's time; a job the caller runs alone (one share, a pool of one
 * thread) does not count. */
static void busy_share(void *arg, int ith, int nth) {
    (void)nth;
    volatile long *sink = arg;
    for (long i = 0; i < 20000L * (ith + 1); i++) *sink += i;
}

static void test_timing(void **state) {
    (void)state;
    volatile long sink = 0;
    tp_pool *p = tp_new(2);
    assert_non_null(p);
    tp_run(p, busy_share, (void *)&sink);
    tp_times t = tp_get_times(p);
    assert_true(t.jobs == 0 && t.job_ns == 0 && t.wait_ns == 0);
    tp_set_timing(p, true);
    for (int i = 0; i < 10; i++) tp_run(p, busy_share, (void *)&sink);
    tp_run_n(p, busy_share, (void *)&sink, 1);   /* on the caller alone */
    t = tp_get_times(p);
    assert_int_equal(t.jobs, 10);
    assert_true(t.job_ns > 0 && t.wait_ns <= t.job_ns);
    tp_set_timing(p, false);
    tp_run(p, busy_share, (void *)&sink);
    assert_int_equal(tp_get_times(p).jobs, 10);
    tp_free(p);
    tp_pool *one = tp_new(1);
    tp_set_timing(one, true);
    tp_run(one, busy_share, (void *)&sink);
    assert_int_equal(tp_get_times(one).jobs, 0);
    tp_free(one);
    tp_set_timing(NULL, true);
    assert_int_equal(tp_get_times(NULL).jobs, 0);
}

static void test_alloc(void **state) {
    (void)state;
    void *p = rc_alloc_aligned(100);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % RC_ALIGN, 0);
    rc_free_aligned(p);
    size_t out;
    assert_int_equal(rc_mul_size(SIZE_MAX / 2, 3, &out), -1);
    assert_int_equal(rc_add_size(SIZE_MAX, 1, &out), -1);
    assert_int_equal(rc_mul_size(6, 7, &out), 0);
    assert_int_equal(out, 42);
}

/* Large buffers come 2 MiB-aligned (so whole huge pages back them), small ones as
 * rc_alloc_aligned's; the calloc form is zero; sizes that overflow the rounding fail. */
static void test_alloc_huge(void **state) {
    (void)state;
    const size_t mib2 = (size_t)2 << 20;
    unsigned char *big = rc_calloc_huge(3 * mib2 + 5);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % mib2, 0);
    for (size_t i = 0; i < 3 * mib2 + 5; i += 4093) assert_int_equal(big[i], 0);
    assert_int_equal(big[3 * mib2 + 4], 0);
    rc_free_aligned(big);
    void *small = rc_alloc_huge(100);
    assert_non_null(small);
    assert_int_equal((uintptr_t)small % RC_ALIGN, 0);
    rc_free_aligned(small);
    assert_null(rc_alloc_huge(SIZE_MAX - 10));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_covers_once), cmocka_unit_test(test_shares),
        cmocka_unit_test(test_split_units),       cmocka_unit_test(test_split_tapered),
        cmocka_unit_test(test_timing),            cmocka_unit_test(test_alloc),
        cmocka_unit_test(test_alloc_huge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
