/* ban.h — banned strings and regexes in generated text: where a banned text starts, and how
 * much of the text must still be held back because a banned text may start in it.
 *
 * The semantics follow ik_llama.cpp's server (banned_strings, banned_regex,
 * banned_regex_case_insensitive): a banned string matches case-insensitively in ASCII ('A'-'Z'
 * fold to 'a'-'z', other bytes compare as they are); a regex is a PCRE2 pattern (ik_llama uses
 * ECMAScript std::regex; the common syntax is the same), matched as UTF-8 (invalid bytes never
 * match) and never as the empty string; the _ci kind matches caselessly. Matching is on bytes
 * of the text given (the server gives the window of generated text not shown yet).
 *
 * Invariants:
 *  1. A set is built on one thread (sample_ban_add) and then used by one thread at a time:
 *     it owns the PCRE2 match data that sample_ban_find writes.
 *  2. sample_ban_find allocates nothing (the match data and match context are made by
 *     sample_ban_new), so the server may call it once per generated token.
 *  3. Matching is bounded: a regex that backtracks too much counts as not matching there
 *     (PCRE2's match limit), so a request cannot stall the scheduler. */
#ifndef RECUR_SAMPLE_BAN_H
#define RECUR_SAMPLE_BAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

typedef enum sample_ban_kind {
    SAMPLE_BAN_STRING = 0,       /* a literal, ASCII-case-insensitive */
    SAMPLE_BAN_REGEX,            /* a regex */
    SAMPLE_BAN_REGEX_CI,         /* a regex, case-insensitive */
} sample_ban_kind;

typedef struct sample_ban sample_ban;

/* An empty set; NULL when out of memory. */
sample_ban *sample_ban_new(void);
void        sample_ban_free(sample_ban *b);   /* NULL: no-op */

/* Adds one banned text (pat[0, len), need not be NUL-terminated). An empty pattern is ignored
 * (RECUR_OK), as ik_llama.cpp drops empty entries. RECUR_E_INVALID when a regex does not compile
 * (err says why and where); RECUR_E_NOMEM. The set is unchanged on error. */
recur_status sample_ban_add(sample_ban *b, sample_ban_kind kind, const char *pat, size_t len, char *err,
                            size_t err_len);

int32_t sample_ban_count(const sample_ban *b);
/* The longest pattern in bytes (a regex counts its source), as ik_llama sizes its buffer. */
size_t  sample_ban_max_len(const sample_ban *b);

/* Searches text[0, len). Returns true when some banned text matches completely: *at is then the
 * earliest byte where a match starts (over all patterns). Otherwise *at = len and *hold is the
 * earliest byte from which the text could still become a match if more text were appended
 * (len when none could): bytes before *hold can be shown; an unfinished UTF-8 character at the
 * end is always held. *hold = *at when a match is found. */
bool sample_ban_find(sample_ban *b, const char *text, size_t len, size_t *at, size_t *hold);

#endif
