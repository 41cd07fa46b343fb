/* vocab_piece.c — token ids back to bytes: single pieces and whole sequences.
 *
 * As llama.cpp's token_to_piece / detokenize:
 *  - CONTROL and UNKNOWN tokens render as nothing unless `special`, then as their text;
 *    USER_DEFINED tokens always render as their text.
 *  - NORMAL: SPM turns "▁" into " "; BPE maps each GPT-2 bytes_to_unicode character back to
 *    its byte (a character outside that table renders as "[UNK_BYTE_0x<hex><text>]").
 *  - BYTE: the byte of "<0xXX>". UNUSED and undefined types render as nothing.
 *  - detokenize: with remove_special a leading BOS / trailing EOS is dropped when the vocab
 *    adds them; the first piece loses one leading space when add_space_prefix (unless a BOS was
 *    dropped); BPE vocabs with clean_spaces then undo tokenization spaces (" ," -> ",", ...).
 */
#include "vocab/vocab_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes bytes into buf[0, cap) and counts all of them; drops up to `strip` leading spaces. */
typedef struct sink { char *buf; size_t cap, n; int strip; } sink;

static void sink_put(sink *s, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s->strip > 0) {
            if (p[i] == ' ') { s->strip--; continue; }
            s->strip = 0;
        }
        if (s->n < s->cap) s->buf[s->n] = p[i];
        s->n++;
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 0;
}

static void bpe_decode(const vocab *v, const char *t, size_t n, sink *s) {
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t c = vocab_utf8_decode_lax(t + i, n - i, &adv);
        i += adv;
        if (c < 512 && v->cpt_byte[c] >= 0) {
            char b = (char)v->cpt_byte[c];
            sink_put(s, &b, 1);
            continue;
        }
        char u[4], hex[12] = { 0 };
        size_t un = vocab_utf8_encode(c > 0x10FFFF ? 0xFFFD : c, u);
        for (size_t k = 0; k < un; k++) snprintf(hex + 2 * k, 3, "%02x", (unsigned)(uint8_t)u[k]);
        sink_put(s, "[UNK_BYTE_0x", 12);
        sink_put(s, hex, 2 * un);
        sink_put(s, t, n);
        sink_put(s, "]", 1);
    }
}

static void piece(const vocab *v, recur_token t, bool special, sink *s) {
    uint16_t a = v->attr[t];
    const char *text = v->text_buf + v->text_off[t];
    size_t n = v->text_len[t];
    if (!special && (a & (VA_CONTROL | VA_UNKNOWN))) return;
    if (a & (VA_CONTROL | VA_UNKNOWN | VA_USER_DEFINED)) {
        sink_put(s, text, n);
    } else if (a & VA_NORMAL) {
        if (v->kind == VOCAB_BPE) { bpe_decode(v, text, n, s); return; }
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(text + i, "\xe2\x96\x81", 3) == 0) { sink_put(s, " ", 1); i += 3; }
            else sink_put(s, text + i++, 1);
        }
    } else if ((a & VA_BYTE) && n >= 5) {
        char b = (char)(hexval(text[3]) * 16 + hexval(text[4]));
        sink_put(s, &b, 1);
    }
}

int vocab_token_to_piece(const vocab *v, recur_token t, char *buf, int buf_len, bool special) {
    if (t < 0 || t >= v->n_tokens) return -RECUR_E_INVALID;
    sink s = { buf, buf && buf_len > 0 ? (size_t)buf_len : 0, 0, 0 };
    piece(v, t, special, &s);
    return (int)s.n;
}

/* llama.cpp's clean_spaces passes over the detokenized text. */
static size_t clean_spaces(char *t, size_t n) {
    size_t total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {                 /* " ?", " !", " .", " ," */
        char x = t[i];
        if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        t[total++] = x;
    }
    n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {                 /* " ' " -> "'" */
        char x = t[i];
        if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
            total--;
            t[++i] = '\0';
        }
        t[total++] = x;
    }
    n = total;
    total = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {                 /* " 's", " 'm", " 're", " 've" */
        char x = t[i];
        if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = t[i + 1], x2 = i + 2 < n ? t[i + 2] : '\0';
            if (x1 == 's' || x1 == 'm') total--;
            else if (i + 2 < n && ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))) total--;
        }
        t[total++] = x;
    }
    return total;
}

int vocab_detokenize(const vocab *v, const recur_token *tokens, int n_tokens, char *buf, int buf_len,
                     bool remove_special, bool unparse_special) {
    if (v->kind == VOCAB_NONE || n_tokens <= 0) return 0;
    if (!tokens) return -RECUR_E_INVALID;
    int strip = v->add_space_prefix;
    if (remove_special && v->add_bos && tokens[0] == v->bos) {
        strip = 0;
        tokens++;
        n_tokens--;
    }
    if (remove_special && v->add_eos && n_tokens > 0 && tokens[n_tokens - 1] == v->eos) n_tokens--;

    sink s = { NULL, 0, 0, 0 };
    for (int i = 0; i < n_tokens; i++) {                /* first pass: the size */
        if (tokens[i] < 0 || tokens[i] >= v->n_tokens) return -RECUR_E_INVALID;
        s.strip = i == 0 ? strip : 0;
        piece(v, tokens[i], unparse_special, &s);
    }
    if (s.n > INT_MAX) return -RECUR_E_FULL;
    char *tmp = malloc(s.n ? s.n : 1);
    if (!tmp) return -RECUR_E_NOMEM;
    size_t total = s.n;
    s = (sink){ tmp, total, 0, 0 };
    for (int i = 0; i < n_tokens; i++) {
        s.strip = i == 0 ? strip : 0;
        piece(v, tokens[i], unparse_special, &s);
    }
    if (v->clean_spaces) total = clean_spaces(tmp, total);
    if (buf && buf_len > 0) memcpy(buf, tmp, total < (size_t)buf_len ? total : (size_t)buf_len);
    free(tmp);
    return (int)total;
}
