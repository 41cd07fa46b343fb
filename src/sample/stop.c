/* stop.c — stop strings in generated text, with the hold-back streaming needs (stop.h).
 *
 * Why `from` is safe to pass as the previous *safe_len: a match that was not complete in the
 * previous text either starts in the held-back tail (a suffix that was a proper prefix of a stop
 * string, so at or after the previous safe_len) or lies wholly in the new bytes. Either way it
 * ends after the previous safe_len. Matching is on bytes; with valid UTF-8 text and stop
 * strings, a match or a held-back tail starts on a lead byte (a continuation byte never equals
 * the lead byte a stop string starts with), so *match_at and *safe_len fall between characters. */
#include "sample/stop.h"

#include <string.h>

/* Where stop string st (length n) first occurs in text[0, len) ending after byte from, starting
 * no later than last; -1 when it does not. */
static long first_match(const char *text, size_t len, size_t from, const char *st, size_t n, size_t last) {
    if (n > len) return -1;
    const size_t lo = from >= n ? from - n + 1 : 0;
    size_t hi = len - n;   /* the last start that fits */
    if (hi > last) hi = last;
    if (lo > hi) return -1;
    const char *hit = memmem(text + lo, hi - lo + n, st, n);
    return hit ? (long)(hit - text) : -1;
}

/* The longest suffix of text[0, len) that is a proper prefix of st (length n). */
static size_t held_back(const char *text, size_t len, const char *st, size_t n, size_t at_least) {
    size_t k = n - 1 < len ? n - 1 : len;
    for (; k > at_least; k--)
        if (memcmp(text + len - k, st, k) == 0) return k;
    return at_least;
}

int sample_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int n_stops,
                     size_t *match_at, size_t *safe_len) {
    int best = -1;
    size_t best_at = len, best_n = 0;
    if (from > len) from = len;
    for (int i = 0; i < n_stops; i++) {
        const char *st = stops ? stops[i] : NULL;
        const size_t n = st ? strlen(st) : 0;
        if (n == 0) continue;   /* empty stop strings are ignored */
        const long at = first_match(text, len, from, st, n, best >= 0 ? best_at : len);
        if (at < 0) continue;
        if ((size_t)at < best_at || ((size_t)at == best_at && n > best_n)) {
            best = i;
            best_at = (size_t)at;
            best_n = n;
        }
    }
    *match_at = best_at;
    if (best >= 0) {
        *safe_len = best_at;
        return best;
    }
    size_t hold = 0;
    for (int i = 0; i < n_stops; i++) {
        const char *st = stops ? stops[i] : NULL;
        const size_t n = st ? strlen(st) : 0;
        if (n > 1) hold = held_back(text, len, st, n, hold);
    }
    *safe_len = len - hold;
    return -1;
}
