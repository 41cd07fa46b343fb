/* err.h — error reporting shared by every module.
 *
 * Fallible internal functions return a recur_status and take (char *err, size_t err_len);
 * err may be NULL. rc_fail formats the message and returns the status, so a failure
 * reads `return rc_fail(err, err_len, RECUR_E_FORMAT, "tensor '%s': ...", name);`. */
#ifndef RECUR_CORE_ERR_H
#define RECUR_CORE_ERR_H

#include <stddef.h>
#include "recur.h"

#if defined(__GNUC__)
#define RC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RC_PRINTF(a, b)
#endif

/* Writes the formatted message into err (when err != NULL) and returns st. */
recur_status rc_fail(char *err, size_t err_len, recur_status st, const char *fmt, ...) RC_PRINTF(4, 5);

#endif
