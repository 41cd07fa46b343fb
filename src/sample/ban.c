/* ban.c — banned strings and regexes over PCRE2 (contract in ban.h).
 *
 * Every banned text is one compiled PCRE2 pattern: a banned string is a PCRE2_LITERAL pattern
 * compiled caselessly without UTF, which folds exactly 'A'-'Z' (PCRE2's default tables are the
 * C locale's), as ik_llama.cpp lowercases ASCII; a regex is compiled with UTF and
 * MATCH_INVALID_UTF, so the byte window, which may end inside a character, is a valid subject.
 *
 * Why a plain search first, then a partial one: under PCRE2_PARTIAL_HARD a match that reaches
 * the end of the text and could grow (`fo+` on "xfoo") is reported as partial, but for a ban any
 * complete match already counts. When no pattern matches completely, PARTIAL_HARD gives the
 * leftmost start from which the text could still grow into a match (ovector[0], which for a
 * partial match includes what a lookbehind inspected): that is where the hold-back begins. */
#include "sample/ban.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>

#include "core/err.h"

#define BAN_MATCH_LIMIT 200000u   /* backtracking steps per search and pattern (invariant 3) */

typedef struct ban_pat {
    pcre2_code *code;
    size_t      len;       /* source length in bytes */
    uint32_t    opts;      /* pcre2_match options */
} ban_pat;

struct sample_ban {
    ban_pat             *pat;
    int32_t              n, cap;
    size_t               max_len;
    pcre2_match_data    *md;
    pcre2_match_context *mctx;
};

sample_ban *sample_ban_new(void) {
    sample_ban *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->md = pcre2_match_data_create(1, NULL);
    b->mctx = pcre2_match_context_create(NULL);
    if (!b->md || !b->mctx) { sample_ban_free(b); return NULL; }
    pcre2_set_match_limit(b->mctx, BAN_MATCH_LIMIT);
    return b;
}

void sample_ban_free(sample_ban *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n; i++) pcre2_code_free(b->pat[i].code);
    free(b->pat);
    pcre2_match_data_free(b->md);
    pcre2_match_context_free(b->mctx);
    free(b);
}

static const char *kind_field(sample_ban_kind kind) {
    return kind == SAMPLE_BAN_REGEX ? "banned_regex" : kind == SAMPLE_BAN_REGEX_CI ? "banned_regex_case_insensitive"
                                                                                   : "banned_strings";
}

recur_status sample_ban_add(sample_ban *b, sample_ban_kind kind, const char *pat, size_t len, char *err,
                            size_t err_len) {
    if (len == 0) return RECUR_OK;
    if (b->n == b->cap) {
        const int32_t cap = b->cap ? b->cap * 2 : 8;
        ban_pat *np = realloc(b->pat, (size_t)cap * sizeof *np);
        if (!np) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory (banned strings)");
        b->pat = np;
        b->cap = cap;
    }
    uint32_t copts = PCRE2_CASELESS | PCRE2_LITERAL, mopts = 0;
    if (kind != SAMPLE_BAN_STRING) {
        copts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (kind == SAMPLE_BAN_REGEX_CI ? PCRE2_CASELESS : 0);
        mopts = PCRE2_NOTEMPTY;   /* a ban is some text: `a*` bans runs of a, not every position */
    }
    int ec = 0;
    PCRE2_SIZE eoff = 0;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pat, len, copts, &ec, &eoff, NULL);
    if (!c) {
        if (ec == PCRE2_ERROR_NOMEMORY) return rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory (banned strings)");
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return rc_fail(err, err_len, RECUR_E_INVALID, "Invalid regex in %s: %.*s (%s at offset %zu)", kind_field(kind),
                       len > 200 ? 200 : (int)len, pat, (const char *)msg, (size_t)eoff);
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);   /* best effort: the interpreter is the fallback */
    b->pat[b->n++] = (ban_pat){ c, len, mopts };
    if (len > b->max_len) b->max_len = len;
    return RECUR_OK;
}

int32_t sample_ban_count(const sample_ban *b) { return b ? b->n : 0; }
size_t  sample_ban_max_len(const sample_ban *b) { return b ? b->max_len : 0; }

/* pcre2_match of pattern i over text with extra options; the match start, or -1 (no match, or
 * a partial one when want_partial is false; the limit errors count as no match). */
static long ban_match(sample_ban *b, int32_t i, const char *text, size_t len, bool want_partial) {
    const uint32_t opts = b->pat[i].opts | (want_partial ? PCRE2_PARTIAL_HARD : 0);
    const int rc = pcre2_match(b->pat[i].code, (PCRE2_SPTR)text, len, 0, opts, b->md, b->mctx);
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
    if (rc >= 0 && !want_partial) return (long)ov[0];
    if (rc == PCRE2_ERROR_PARTIAL && want_partial) return (long)ov[0];
    return -1;
}

/* Where an unfinished UTF-8 character at the end of text[0, len) starts (len when none). */
static size_t utf8_tail(const char *text, size_t len) {
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        const unsigned char c = (unsigned char)text[len - k];
        if ((c & 0xC0) == 0x80) continue;   /* a continuation byte: look further back */
        const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > k ? len - k : len;
    }
    return len;
}

bool sample_ban_find(sample_ban *b, const char *text, size_t len, size_t *at, size_t *hold) {
    /* An unfinished character is not searched (under MATCH_INVALID_UTF it would be an invalid
     * one, never part of a partial match) but held: the next token completes it. */
    const size_t full = len;
    len = utf8_tail(text, len);
    size_t best = len;
    bool found = false;
    for (int32_t i = 0; b && i < b->n; i++) {
        const long s = ban_match(b, i, text, len, false);
        if (s >= 0 && (!found || (size_t)s < best)) {
            best = (size_t)s;
            found = true;
        }
    }
    *at = found ? best : full;
    *hold = found ? best : len;
    if (found) return true;
    for (int32_t i = 0; b && i < b->n; i++) {
        const long s = ban_match(b, i, text, len, true);
        if (s >= 0 && (size_t)s < *hold) *hold = (size_t)s;
    }
    return false;
}
