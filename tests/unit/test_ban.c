/* test_ban.c — banned strings and regexes (sample/ban.h): the earliest match over all patterns,
 * ASCII case folding of strings, the hold-back of a possible match at the end of the text,
 * regexes (complete matches win over a longer possible one, no empty matches, lookbehind,
 * caseless), bad regexes, empty patterns, text that ends inside a UTF-8 character. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sample/ban.h"

typedef struct pat { sample_ban_kind kind; const char *s; } pat;

static sample_ban *make(const pat *p, int n) {
    sample_ban *b = sample_ban_new();
    assert_non_null(b);
    char err[256];
    for (int i = 0; i < n; i++) assert_int_equal(sample_ban_add(b, p[i].kind, p[i].s, strlen(p[i].s), err, sizeof err), RECUR_OK);
    return b;
}

/* One search over a NUL-terminated text: found?, *at, *hold. */
static void expect(sample_ban *b, const char *text, bool want, size_t want_at, size_t want_hold) {
    size_t at = 999, hold = 999;
    assert_int_equal(sample_ban_find(b, text, strlen(text), &at, &hold), want);
    assert_int_equal(at, want_at);
    assert_int_equal(hold, want_hold);
}

static void test_strings(void **state) {
    (void)state;
    const pat p[] = { { SAMPLE_BAN_STRING, "I cannot" }, { SAMPLE_BAN_STRING, "sorry" } };
    sample_ban *b = make(p, 2);
    assert_int_equal(sample_ban_count(b), 2);
    assert_int_equal(sample_ban_max_len(b), 8);
    expect(b, "Well, I cannot do that", true, 6, 6);
    expect(b, "well, i CANNOT", true, 6, 6);            /* ASCII case folds both ways */
    expect(b, "SORRY, I cannot", true, 0, 0);           /* the earliest match of all patterns */
    expect(b, "I cannot, sorry", true, 0, 0);
    expect(b, "Well, I can", false, 11, 6);             /* "I can" may still become "I cannot" */
    expect(b, "Well, I", false, 7, 6);
    expect(b, "Well, ", false, 6, 6);
    expect(b, "so", false, 2, 0);                       /* the whole text may start "sorry" */
    expect(b, "Well", false, 4, 4);
    expect(b, "", false, 0, 0);
    expect(b, "I cannXt", false, 8, 8);                 /* was a prefix, is not any more */
    sample_ban_free(b);

    /* non-ASCII bytes compare exactly: no Unicode folding (ik_llama lowercases ASCII only) */
    const pat u[] = { { SAMPLE_BAN_STRING, "\xC3\xA9t\xC3\xA9" } };   /* "été" */
    b = make(u, 1);
    expect(b, "un \xC3\xA9T\xC3\xA9!", true, 3, 3);
    expect(b, "un \xC3\x89t\xC3\xA9!", false, 9, 9);  /* "Été": É is another byte sequence */
    expect(b, "un \xC3", false, 4, 3);                 /* ends inside é: held */
    sample_ban_free(b);
}

static void test_regex(void **state) {
    (void)state;
    const pat p[] = { { SAMPLE_BAN_REGEX, "fo+" } };
    sample_ban *b = make(p, 1);
    assert_int_equal(sample_ban_max_len(b), 3);
    expect(b, "a foo", true, 2, 2);                    /* complete, although "fooo" could follow */
    expect(b, "a f", false, 3, 2);
    expect(b, "a b", false, 3, 3);
    sample_ban_free(b);

    const pat q[] = { { SAMPLE_BAN_REGEX, "[0-9]{3}-[0-9]{4}" }, { SAMPLE_BAN_REGEX, "x*" } };
    b = make(q, 2);
    expect(b, "call 555-12", false, 11, 5);
    expect(b, "call 555-1234 now", true, 5, 5);
    expect(b, "abc", false, 3, 3);                     /* `x*` never matches the empty string */
    expect(b, "abxc", true, 2, 2);
    sample_ban_free(b);

    const pat ci[] = { { SAMPLE_BAN_REGEX_CI, "hello\\s+world" } };
    b = make(ci, 1);
    expect(b, "HeLLo   WORLD!", true, 0, 0);
    expect(b, "say HELLO ", false, 10, 4);
    sample_ban_free(b);

    const pat cs[] = { { SAMPLE_BAN_REGEX, "hello" } };
    b = make(cs, 1);
    expect(b, "HELLO", false, 5, 5);                   /* banned_regex is case-sensitive */
    sample_ban_free(b);

    /* a lookbehind: the hold starts where the pattern looked, not where the match would */
    const pat lb[] = { { SAMPLE_BAN_REGEX, "(?<=ab)cd" } };
    b = make(lb, 1);
    expect(b, "zabcd", true, 3, 3);
    size_t at, hold;
    assert_false(sample_ban_find(b, "zabc", 4, &at, &hold));
    assert_true(hold <= 3);
    sample_ban_free(b);

    /* UTF-8: `.` is one character; a window ending inside a character is a valid subject */
    const pat dot[] = { { SAMPLE_BAN_REGEX, "\xC3\xA9.\xC3\xA9" } };
    b = make(dot, 1);
    expect(b, "\xC3\xA9\xE2\x82\xAC\xC3\xA9", true, 0, 0);   /* "é€é" */
    assert_false(sample_ban_find(b, "x\xC3\xA9\xE2\x82", 5, &at, &hold));   /* "xé" + half of € */
    assert_int_equal(hold, 1);
    expect(b, "\xFF\xFE ok", false, 5, 5);            /* invalid bytes never match */
    sample_ban_free(b);
}

static void test_errors(void **state) {
    (void)state;
    sample_ban *b = sample_ban_new();
    char err[256] = "";
    assert_int_equal(sample_ban_add(b, SAMPLE_BAN_REGEX, "a(b", 3, err, sizeof err), RECUR_E_INVALID);
    assert_non_null(strstr(err, "Invalid regex in banned_regex: a(b"));
    assert_int_equal(sample_ban_add(b, SAMPLE_BAN_REGEX_CI, "[z-a]", 5, err, sizeof err), RECUR_E_INVALID);
    assert_non_null(strstr(err, "banned_regex_case_insensitive"));
    assert_int_equal(sample_ban_count(b), 0);
    /* regex syntax in a banned string is literal text */
    assert_int_equal(sample_ban_add(b, SAMPLE_BAN_STRING, "a(b", 3, err, sizeof err), RECUR_OK);
    assert_int_equal(sample_ban_add(b, SAMPLE_BAN_STRING, "", 0, err, sizeof err), RECUR_OK);   /* ignored */
    assert_int_equal(sample_ban_count(b), 1);
    expect(b, "xa(bx", true, 1, 1);
    expect(b, "xab", false, 3, 3);
    sample_ban_free(b);
    sample_ban_free(NULL);
    size_t at, hold;
    assert_false(sample_ban_find(NULL, "abc", 3, &at, &hold));
    assert_int_equal(hold, 3);
}

/* catastrophic backtracking stops at the match limit instead of stalling */
static void test_limit(void **state) {
    (void)state;
    const pat p[] = { { SAMPLE_BAN_REGEX, "(a+)+$b" } };
    sample_ban *b = make(p, 1);
    char text[64];
    memset(text, 'a', sizeof text - 1);
    text[sizeof text - 1] = 0;
    size_t at, hold;
    assert_false(sample_ban_find(b, text, strlen(text), &at, &hold));
    sample_ban_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_regex),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
