/* timing.h — a monotonic clock for speed reports. */
#ifndef RECUR_CORE_TIMING_H
#define RECUR_CORE_TIMING_H

#include <stdint.h>

/* Microseconds from an arbitrary fixed origin (CLOCK_MONOTONIC). */
int64_t rc_time_us(void);
/* Nanoseconds from the same origin (a single-token matmul takes a few microseconds). */
int64_t rc_time_ns(void);

#endif
