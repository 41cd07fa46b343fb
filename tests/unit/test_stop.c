/* test_stop.c — stop strings: the earliest (then longest) match, the held-back tail for
 * streaming, the `from` hint, matches split over many pieces, UTF-8, empty stop strings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sample/stop.h"

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* One call over a NUL-terminated text: checks the index, *match_at and *safe_len. */
static void expect(const char *text, size_t from, const char *const *stops, int n_stops, int want, size_t want_at,
                   size_t want_safe) {
    size_t at = 12345, safe = 12345;
    assert_int_equal(sample_stop_find(text, strlen(text), from, stops, n_stops, &at, &safe), want);
    assert_int_equal(at, want_at);
    assert_int_equal(safe, want_safe);
}

static void test_match_and_hold(void **state) {
    (void)state;
    const char *im[] = { "<|im_end|>" };
    expect("Hello<|im_end|>more", 0, im, 1, 0, 5, 5);
    expect("<|im_end|>", 0, im, 1, 0, 0, 0);          /* the whole text */
    expect("Hello<|im", 0, im, 1, -1, 9, 5);          /* "<|im" may still become the stop */
    expect("Hello<", 0, im, 1, -1, 6, 5);
    expect("Hello", 0, im, 1, -1, 5, 5);
    expect("<|im_end", 0, im, 1, -1, 8, 0);           /* shorter than the stop string: all held */
    expect("Hello<|im_end|", 0, im, 1, -1, 14, 5);    /* one byte short */
    expect("a<|ix", 0, im, 1, -1, 5, 5);              /* was a prefix, is not any more */
    expect("", 0, im, 1, -1, 0, 0);
    const char *none[] = { NULL };
    expect("text", 0, none, 0, -1, 4, 4);             /* no stop strings at all */
    expect("text", 0, NULL, 0, -1, 4, 4);
}

static void test_several(void **state) {
    (void)state;
    const char *a[] = { "world", "lo w" };            /* the earliest match wins, whatever the index */
    expect("hello world", 0, a, 2, 1, 3, 3);
    const char *b[] = { "ab", "abc" };                /* same start: the longest */
    expect("xxabcd", 0, b, 2, 1, 2, 2);
    const char *c[] = { "abc", "ab" };
    expect("xxabcd", 0, c, 2, 0, 2, 2);
    expect("xxabd", 0, c, 2, 1, 2, 2);                /* only the shorter one is complete */
    const char *d[] = { "end", "end" };               /* identical: the lower index */
    expect("the end", 0, d, 2, 0, 4, 4);
    const char *e[] = { "<|im_end|>", "ing" };        /* the longest held-back tail over all */
    expect("runnin", 0, e, 2, -1, 6, 4);
    expect("run<|i", 0, e, 2, -1, 6, 3);
    expect("running", 0, e, 2, 1, 4, 4);
    const char *f[] = { "<|im", "<|im_end|>" };       /* a complete shorter stop stops at once */
    expect("a<|im_end|>", 0, f, 2, 1, 1, 1);
    expect("a<|im", 0, f, 2, 0, 1, 1);
}

static void test_overlap(void **state) {
    (void)state;
    const char *a[] = { "aab" };
    expect("aaab", 0, a, 1, 0, 1, 1);                 /* the first try at 0 fails on the third byte */
    const char *b[] = { "abab" };
    expect("xaba", 0, b, 1, -1, 4, 1);                /* "aba" is a prefix of "abab" */
    expect("xabaa", 0, b, 1, -1, 5, 4);               /* only "a" is */
    expect("xababab", 0, b, 1, 0, 1, 1);
    const char *c[] = { "aaa" };
    expect("baaaa", 0, c, 1, 0, 1, 1);
    expect("baa", 0, c, 1, -1, 3, 1);
}

static void test_empty_ignored(void **state) {
    (void)state;
    const char *a[] = { "", "x", NULL };
    expect("abc", 0, a, 3, -1, 3, 3);
    expect("abxc", 0, a, 3, 1, 2, 2);
    const char *b[] = { "" };
    expect("abc", 0, b, 1, -1, 3, 3);
    expect("", 0, b, 1, -1, 0, 0);
}

/* from: matches that end after it only */
static void test_from(void **state) {
    (void)state;
    const char *s[] = { "stop" };
    const char *text = "stop here stop";          /* matches at 0 (ends 4) and 10 (ends 14) */
    expect(text, 0, s, 1, 0, 0, 0);
    expect(text, 3, s, 1, 0, 0, 0);                /* the first ends at 4 > 3 */
    expect(text, 4, s, 1, 0, 10, 10);
    expect(text, 12, s, 1, 0, 10, 10);            /* starts before from, ends after it */
    expect(text, 14, s, 1, -1, 14, 14);
    expect(text, 99, s, 1, -1, 14, 14);            /* past the end: clamped */
    expect("xxsto", 5, s, 1, -1, 5, 2);            /* the hold-back does not depend on from */
}

/* Streaming: pieces arrive one by one; each call passes the previous safe_len as from. What
 * is shown (text[0, safe_len)) only grows, never contains a stop string or part of one that
 * then matched, and each answer equals a full scan (from = 0). */
static void stream(const char *const *pieces, int n_pieces, const char *const *stops, int n_stops, int want,
                   const char *want_shown) {
    char text[256] = "";
    size_t len = 0, from = 0;
    int got = -1;
    for (int i = 0; i < n_pieces && got < 0; i++) {
        const size_t n = strlen(pieces[i]);
        memcpy(text + len, pieces[i], n);
        len += n;
        size_t at, safe, at0, safe0;
        got = sample_stop_find(text, len, from, stops, n_stops, &at, &safe);
        assert_int_equal(sample_stop_find(text, len, 0, stops, n_stops, &at0, &safe0), got);
        assert_int_equal(at, at0);
        assert_int_equal(safe, safe0);
        assert_true(safe >= from);                 /* never takes back what was shown */
        assert_true(safe <= strlen(want_shown));
        assert_memory_equal(text, want_shown, safe);
        if (got >= 0) assert_int_equal(safe, strlen(want_shown));
        from = safe;
    }
    assert_int_equal(got, want);
}

static void test_streaming(void **state) {
    (void)state;
    const char *im[] = { "<|im_end|>", "</s>" };
    const char *p1[] = { "He", "llo <", "|", "im", "_e", "nd", "|>", " tail" };
    stream(p1, N_OF(p1), im, 2, 0, "Hello ");
    const char *p2[] = { "a <", "/", "b> <", "/s", ">" };   /* "</" twice: the first is not a stop */
    stream(p2, N_OF(p2), im, 2, 1, "a </b> ");
    const char *p3[] = { "<", "|", "im", "_x", " ok" };     /* held, then released */
    stream(p3, N_OF(p3), im, 2, -1, "<|im_x ok");
    const char *ab[] = { "abab" };
    const char *p4[] = { "x", "a", "b", "a", "c", "a", "b", "a", "b", "z" };
    stream(p4, N_OF(p4), ab, 1, 0, "xabac");
}

/* UTF-8: matching is on bytes, and with whole characters in text and stop strings the answers
 * fall between characters. */
static void test_utf8(void **state) {
    (void)state;
    const char *dot[] = { "\xE3\x80\x82" };                 /* "。" */
    expect("\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80\x82\xE5\x86\x8D", 0, dot, 1, 0, 6, 6);   /* 你好。再 */
    expect("\xE4\xBD\xA0\xE5\xA5\xBD\xE3\x80", 0, dot, 1, -1, 8, 6);                 /* a partial 。 */
    const char *ea[] = { "\xC3\xA9" "a" };                   /* "éa" */
    expect("caf\xC3\xA9", 0, ea, 1, -1, 5, 3);              /* "café": é may start the stop */
    expect("caf\xC3\xA3", 0, ea, 1, -1, 5, 5);              /* "cafã": same lead byte, no */
    const char *e[] = { "\xC3\xA9" };
    expect("\xC3\xA3\xC3\xA9", 0, e, 1, 0, 2, 2);            /* "ãé": not at the shared lead byte */
    /* char by char through mixed text: every safe_len is on a character boundary */
    const char *stops[] = { "\xE4\xBD\xA0\xE5\xA5\xBD!", "\xF0\x9F\x98\x80\xF0\x9F\x98\x81", "\xC3\xA9t\xC3\xA9" };
    const char *text = "a\xE4\xBD\xA0\xE5\xA5\xBD b \xF0\x9F\x98\x80 \xC3\xA9t\xC3\xA8 \xF0\x9F\x98\x80\xF0\x9F\x98\x81 z";
    const size_t n = strlen(text);
    size_t from = 0;
    int got = -1;
    for (size_t len = 1; len <= n && got < 0; len++) {
        if (len < n && (text[len] & 0xC0) == 0x80) continue;   /* whole characters only */
        size_t at, safe;
        got = sample_stop_find(text, len, from, stops, N_OF(stops), &at, &safe);
        assert_true(safe == len || (text[safe] & 0xC0) != 0x80);
        from = safe;
        if (got >= 0) assert_int_equal(at, 21);            /* the emoji pair */
    }
    assert_int_equal(got, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_match_and_hold), cmocka_unit_test(test_several),  cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_empty_ignored),  cmocka_unit_test(test_from),     cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
