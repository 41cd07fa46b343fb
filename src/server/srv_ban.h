/* srv_ban.h — a request's banned strings and regexes (ik_llama.cpp's request fields) and what
 * the scheduler needs of them (slot_ban.h does the rewinding).
 *
 * Fields (as ik_llama.cpp's server reads them; null or absent = the default):
 *   banned_strings                 array of strings, ASCII-case-insensitive; when absent, the
 *                                  server's --banned-string-file list applies (an empty array
 *                                  turns that list off for the request)
 *   banned_regex                   array of regexes (PCRE2 here; ik_llama: ECMAScript)
 *   banned_regex_case_insensitive  array of regexes matched caselessly
 *   banned_n          (--banned-n, default 1) tokens banned at the rewind position: the first
 *                     banned_n tokens of the matched text; -1 all of them; 0 none
 *   banned_bias       (-999) the logit bias that bans them there
 *   rewind_count_max  (-1) rewinds allowed before a token is released: -1 = ik_llama's
 *                     heuristic (refuse once count >= 20 and count > 2 * number of patterns),
 *                     0 = unlimited
 *   banbuffer_size    (0) most tokens held back; 0 = longest pattern in bytes + 1
 *   saturate_predict  (false) rewound tokens do not count against n_predict
 * Non-string array entries and empty strings are skipped (as ik_llama). A regex that does not
 * compile is a 400: "Invalid regex in banned_regex: <pattern> (<reason> at offset N)"; so are
 * patterns past the limits below. */
#ifndef RECUR_SERVER_SRV_BAN_H
#define RECUR_SERVER_SRV_BAN_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "recur.h"
#include "sample/ban.h"

/* banbuffer_size limit: a slot keeps the state and logits of that many positions (slot_ban.h) */
#define SRV_BAN_WINDOW_MAX 256

/* Every generated token is searched for every pattern over the held-back text, on the
 * scheduler thread that serves all slots: the patterns' number and size bound that time (as
 * SRV_MAX_STOP does for stop strings). Per request, banned_strings (or the
 * --banned-string-file list it replaces), banned_regex and banned_regex_case_insensitive
 * together; a request past them is a 400, a --banned-string-file past them stops the start. */
#define SRV_BAN_MAX_PATTERNS 256          /* entries */
#define SRV_BAN_MAX_LEN      1024         /* bytes of one string or regex */
#define SRV_BAN_MAX_BYTES    (64 << 10)   /* bytes of them all */

typedef struct srv_ban_cfg {
    sample_ban *set;               /* owned */
    int32_t     banned_n;
    float       bias;
    int32_t     rewind_count_max;
    int32_t     window;            /* tokens held back at most (ik_llama's n_buffer), >= 2 */
    bool        saturate_predict;
} srv_ban_cfg;

/* Reads the fields above from a request body. *out stays NULL when no pattern applies.
 * file_strings[0 .. n_file) is the server's --banned-string-file list; banned_n_default its
 * --banned-n. RECUR_E_INVALID (HTTP 400) with a message for a bad field or regex. */
recur_status srv_ban_parse(const json_t *body, char *const *file_strings, int n_file, int32_t banned_n_default,
                           srv_ban_cfg **out, char *err, size_t err_len);
void srv_ban_cfg_free(srv_ban_cfg *c);   /* NULL: no-op */

#endif
