/* stop.h — stop strings in generated text, with the hold-back streaming needs.
 *
 * While streaming, text that might be the start of a stop string must not be shown yet: if the
 * generated text ends with "<|im", and "<|im_end|>" is a stop string, those bytes are held until
 * the next tokens decide. sample_stop_find answers both questions over the text so far. */
#ifndef RECUR_SAMPLE_STOP_H
#define RECUR_SAMPLE_STOP_H

#include <stddef.h>

/* Looks for the stop strings stops[0 .. n_stops) in text[0, len), searching matches that end
 * after byte `from` (pass the previous call's *safe_len to scan only new text; 0 scans all).
 * Returns the index of the stop string of the earliest match (the longest one when several
 * start at the same byte), or -1 when none matches. *match_at = the byte where it starts
 * (len when none). *safe_len = how many bytes of text may be shown now: *match_at when one
 * matched, else len minus the longest suffix of text that is a proper prefix of a stop string.
 * Empty stop strings are ignored. */
int sample_stop_find(const char *text, size_t len, size_t from, const char *const *stops, int n_stops,
                     size_t *match_at, size_t *safe_len);

#endif
