/* fuzz_gguf.c — libFuzzer target for the GGUF reader: any bytes are validated by
 * gguf_open_memory; a file that opens is walked completely (every KV through the typed getters
 * and array accessors, every tensor's data touched) and handed to the tokenizer loader. Any
 * crash, leak, UB report or read outside the buffer is a bug.
 *
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_gguf
 *   /tmp/build-fuzz/fuzz_gguf /tmp/gguf-corpus /tmp/build-fuzz/fuzz_corpus/gguf -max_len=65536
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "vocab/vocab.h"

static volatile uint64_t g_sink;

static void walk_kv(const gguf_file *g, int64_t i) {
    int64_t iv;
    double fv;
    gguf_str s;
    gguf_arr a;
    gguf_str k = gguf_kv_key(g, i);
    g_sink += k.len ? (unsigned char)k.ptr[k.len - 1] : 0;
    if (gguf_kv_int(g, i, &iv)) g_sink += (uint64_t)iv;
    if (gguf_kv_float(g, i, &fv)) g_sink += (uint64_t)(fv == fv);
    if (gguf_kv_str(g, i, &s) && s.len) g_sink += (unsigned char)s.ptr[s.len - 1];
    if (gguf_kv_arr(g, i, &a)) {
        for (uint64_t e = 0; e < a.n && e < 4096; e++) {
            if (a.elem_type == GGUF_KV_STRING) g_sink += a.strs[e].len ? (unsigned char)a.strs[e].ptr[0] : 0;
            else g_sink += (uint64_t)gguf_arr_int(&a, e) + (uint64_t)(gguf_arr_float(&a, e) == 0);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* an exact-size copy, so reading one byte past the end is caught */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    gguf_file *g;
    char err[256];
    if (gguf_open_memory(buf, size, &g, err, sizeof err) == RECUR_OK) {
        for (int64_t i = 0; i < gguf_n_kv(g); i++) walk_kv(g, i);
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            if (t->nbytes) g_sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
            if (gguf_find_tensor(g, t->name) != t) abort();
        }
        vocab *v = NULL;
        if (vocab_load(g, &v, err, sizeof err) == RECUR_OK) vocab_free(v);
        gguf_close(g);
    }
    free(buf);
    return 0;
}
