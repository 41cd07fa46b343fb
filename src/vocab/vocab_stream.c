/* vocab_stream.c — streaming detokenizer: emits only whole, valid UTF-8 characters.
 *
 * Bytes are validated strictly (no overlong forms, no surrogates, nothing above U+10FFFF).
 * A maximal ill-formed subsequence (Unicode §3.9 "best practice") becomes one U+FFFD; a valid
 * but unfinished sequence at the end of the input is held in s->pending (at most 3 bytes)
 * until a later piece completes or breaks it.
 */
#include "vocab/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

static const char k_fffd[3] = { (char)0xEF, (char)0xBF, (char)0xBD };

/* How many bytes of s[0, n) form a valid prefix of the sequence that s[0] starts, and the full
 * length that sequence needs (0 when s[0] cannot start one). */
static size_t utf8_prefix(const uint8_t *s, size_t n, size_t *need) {
    uint8_t c = s[0];
    uint8_t lo = 0x80, hi = 0xBF;
    if (c < 0x80) { *need = 1; return 1; }
    if (c >= 0xC2 && c <= 0xDF) *need = 2;
    else if (c >= 0xE0 && c <= 0xEF) { *need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { *need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else { *need = 0; return 0; }
    size_t k = 1;
    for (; k < *need && k < n; k++) {
        uint8_t b = s[k];
        if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    return k;
}

/* Processes in[0, n): complete characters and U+FFFD go to out (when out != NULL), an
 * unfinished tail (only when !final) to *tail_len bytes at the end. Returns the output size. */
static size_t process(const uint8_t *in, size_t n, bool final, char *out, size_t *tail_len) {
    size_t i = 0, o = 0;
    *tail_len = 0;
    while (i < n) {
        size_t need, k = utf8_prefix(in + i, n - i, &need);
        if (need && k == need) {
            if (out) memcpy(out + o, in + i, k);
            o += k; i += k;
        } else if (need && i + k == n && !final) {
            *tail_len = k;                          /* valid so far: wait for more bytes */
            break;
        } else {
            if (out) memcpy(out + o, k_fffd, 3);
            o += 3; i += k ? k : 1;
        }
    }
    return o;
}

void vocab_stream_init(vocab_stream *s) {
    memset(s, 0, sizeof *s);
}

int vocab_stream_push(const vocab *v, vocab_stream *s, recur_token t, bool special,
                      char *out, int out_cap) {
    if (!out || out_cap < 0 || s->n_pending < 0 || s->n_pending > 3) return -RECUR_E_INVALID;
    int n = vocab_token_to_piece(v, t, NULL, 0, special);
    if (n < 0) return n;
    uint8_t stackbuf[256];
    size_t len = (size_t)s->n_pending + (size_t)n;
    uint8_t *in = len <= sizeof stackbuf ? stackbuf : malloc(len);
    if (!in) return -RECUR_E_NOMEM;
    memcpy(in, s->pending, (size_t)s->n_pending);
    vocab_token_to_piece(v, t, (char *)in + s->n_pending, n, special);

    size_t tail, need = process(in, len, false, NULL, &tail);
    int rc;
    if (need > (size_t)out_cap) {
        rc = -RECUR_E_FULL;                         /* nothing consumed */
    } else {
        process(in, len, false, out, &tail);
        memcpy(s->pending, in + len - tail, tail);
        s->n_pending = (int)tail;
        rc = (int)need;
    }
    if (in != stackbuf) free(in);
    return rc;
}

int vocab_stream_flush(vocab_stream *s, char *out, int out_cap) {
    if (!out || out_cap < 0 || s->n_pending < 0 || s->n_pending > 3) return -RECUR_E_INVALID;
    size_t tail, need = process((const uint8_t *)s->pending, (size_t)s->n_pending, true, NULL, &tail);
    if (need > (size_t)out_cap) return -RECUR_E_FULL;
    process((const uint8_t *)s->pending, (size_t)s->n_pending, true, out, &tail);
    s->n_pending = 0;
    return (int)need;
}
