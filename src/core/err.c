#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>

recur_status rc_fail(char *err, size_t err_len, recur_status st, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}

const char *recur_status_str(recur_status s) {
    switch (s) {
    case RECUR_OK:            return "ok";
    case RECUR_E_IO:          return "io error";
    case RECUR_E_FORMAT:      return "format error";
    case RECUR_E_NOMEM:       return "out of memory";
    case RECUR_E_INVALID:     return "invalid argument";
    case RECUR_E_UNSUPPORTED: return "unsupported";
    case RECUR_E_FULL:        return "full";
    case RECUR_E_STATE:       return "state unavailable";
    }
    return "unknown status";
}
