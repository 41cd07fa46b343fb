/* fuzz_tokenizer.c — libFuzzer target for the tokenizers: the first input byte picks a
 * vocabulary (byte-level BPE qwen2, BPE llama3, SPM llama, SPM stories260K) and the flags, the
 * rest is text. It is tokenized, every id is turned back into a piece, and the ids go through
 * the streaming detokenizer. Any crash, leak, UB report or hang is a bug; so is an id out of
 * range or a stream that emits invalid UTF-8.
 *
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_tokenizer
 *   /tmp/build-fuzz/fuzz_tokenizer /tmp/tok-corpus -max_len=4096 -timeout=10
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "gguf/gguf.h"
#include "vocab/vocab.h"

static const char *const k_vocabs[] = {
    RECUR_TESTDATA "/vocab/qwen3-vocab.gguf", RECUR_TESTDATA "/vocab/llama3-vocab.gguf",
    RECUR_TESTDATA "/vocab/ggml-vocab-llama-spm.gguf", RECUR_TESTDATA "/models/stories260K.gguf",
};
#define N_VOCABS (sizeof k_vocabs / sizeof k_vocabs[0])

static vocab *load(const char *path) {
    gguf_file *g;
    vocab *v = NULL;
    char err[256];
    if (gguf_open(path, &g, err, sizeof err) != RECUR_OK) abort();   /* the test data must load */
    if (vocab_load(g, &v, err, sizeof err) != RECUR_OK) abort();
    gguf_close(g);
    return v;
}

/* Strict UTF-8 check of what the stream emitted. */
static bool valid_utf8(const unsigned char *s, int n) {
    for (int i = 0; i < n;) {
        const unsigned c = s[i];
        const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static vocab *vocabs[N_VOCABS];
    static recur_token ids[8192];
    static char out[65536];
    if (size < 1) return 0;
    const unsigned sel = data[0] % N_VOCABS;
    if (!vocabs[sel]) vocabs[sel] = load(k_vocabs[sel]);
    const vocab *v = vocabs[sel];
    const bool add_special = data[0] & 16, parse_special = data[0] & 32, special = data[0] & 64;
    const int n = vocab_tokenize(v, (const char *)data + 1, size - 1, ids, 8192, add_special, parse_special);
    if (n < 0) return 0;
    vocab_stream st;
    vocab_stream_init(&st);
    for (int i = 0; i < n && i < 8192; i++) {
        if (ids[i] < 0 || ids[i] >= vocab_n_tokens(v)) abort();
        char piece[1024];
        vocab_token_to_piece(v, ids[i], piece, sizeof piece, special);
        const int k = vocab_stream_push(v, &st, ids[i], special, out, sizeof out);
        if (k > 0 && !valid_utf8((const unsigned char *)out, k)) abort();
    }
    const int k = vocab_stream_flush(&st, out, sizeof out);
    if (k > 0 && !valid_utf8((const unsigned char *)out, k)) abort();
    return 0;
}
