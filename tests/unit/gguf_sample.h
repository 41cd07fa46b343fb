/* gguf_sample.h — a small GGUF file with every KV type, shared by the gguf tests.
 * Header-only (static functions): each test is its own executable. */
#ifndef RECUR_TESTS_GGUF_SAMPLE_H
#define RECUR_TESTS_GGUF_SAMPLE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

/* Deterministic bytes for tensor data. */
static inline void sample_fill(void *p, size_t n, uint32_t seed) {
    uint8_t *b = p;
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        b[i] = (uint8_t)x;
    }
}

typedef struct sample_tensor {
    const char *name;
    uint32_t    type, n_dims;
    int64_t     ne[GGUF_MAX_DIMS];
} sample_tensor;

/* The last tensor's size is a multiple of 32, so the file ends where its data ends. */
static const sample_tensor k_sample_tensors[] = {
    {"token_embd.weight", GGUF_T_Q8_0, 2, {64, 8, 1, 1}},
    {"output_norm.weight", GGUF_T_F32, 1, {13, 1, 1, 1}},      /* 52 bytes: padded */
    {"blk.0.attn_q.weight", GGUF_T_F16, 2, {7, 3, 1, 1}},
    {"blk.0.ffn_up.weight", GGUF_T_Q4_K, 3, {256, 2, 2, 1}},
    {"blk.0.ffn_dn.weight", GGUF_T_I8, 4, {2, 2, 2, 2}},
    {"empty", GGUF_T_BF16, 2, {0, 5, 1, 1}},
    {"blk.0.ffn_gate.weight", GGUF_T_F32, 2, {8, 4, 1, 1}},
};
#define SAMPLE_N_TENSORS ((int)(sizeof k_sample_tensors / sizeof k_sample_tensors[0]))

/* A writer holding one KV of every scalar type, arrays of every element type (one empty, one
 * with strings holding NUL bytes), two same-length keys (key.dup1/key.dup2, for duplicate
 * tests), general.alignment = align (0: not set) and the tensors above. */
static inline gguf_writer *sample_writer(uint32_t align) {
    gguf_writer *w = gguf_writer_new();
    if (!w) return NULL;
    int bad = 0;
    bad |= gguf_writer_set_str(w, "general.architecture", "llama");
    if (align) bad |= gguf_writer_set_u32(w, "general.alignment", align);
    bad |= gguf_writer_set_u32(w, "key.dup1", 7);
    bad |= gguf_writer_set_u32(w, "key.dup2", 8);
    bad |= gguf_writer_set_i32(w, "t.i32", -123456);
    bad |= gguf_writer_set_u64(w, "t.u64", 0xFFFFFFFFFFFFFFF0ull);
    bad |= gguf_writer_set_f32(w, "t.f32", 1e-6f);
    bad |= gguf_writer_set_bool(w, "t.bool", true);
    bad |= gguf_writer_set_str(w, "t.str", "h\xc3\xa9llo \"world\"\n");
    static const uint8_t u8[] = {1, 2, 255};
    static const int8_t i8[] = {-1, 0, 127};
    static const uint16_t u16[] = {65535, 3};
    static const int16_t i16[] = {-32768, 9};
    static const uint32_t u32[] = {4000000000u, 1};
    static const int32_t i32[] = {-2, 2, 6};
    static const float f32[] = {0.5f, -1.25f, 3e10f};
    static const uint8_t bl[] = {1, 0, 1, 1};
    static const uint64_t u64[] = {1ull << 63, 5};
    static const int64_t i64[] = {INT64_MIN, INT64_MAX};
    static const double f64[] = {3.141592653589793, -0.0};
    bad |= gguf_writer_set_arr(w, "a.u8", GGUF_KV_UINT8, u8, 3);
    bad |= gguf_writer_set_arr(w, "a.i8", GGUF_KV_INT8, i8, 3);
    bad |= gguf_writer_set_arr(w, "a.u16", GGUF_KV_UINT16, u16, 2);
    bad |= gguf_writer_set_arr(w, "a.i16", GGUF_KV_INT16, i16, 2);
    bad |= gguf_writer_set_arr(w, "a.u32", GGUF_KV_UINT32, u32, 2);
    bad |= gguf_writer_set_arr(w, "a.i32", GGUF_KV_INT32, i32, 3);
    bad |= gguf_writer_set_arr(w, "a.f32", GGUF_KV_FLOAT32, f32, 3);
    bad |= gguf_writer_set_arr(w, "a.bool", GGUF_KV_BOOL, bl, 4);
    bad |= gguf_writer_set_arr(w, "a.u64", GGUF_KV_UINT64, u64, 2);
    bad |= gguf_writer_set_arr(w, "a.i64", GGUF_KV_INT64, i64, 2);
    bad |= gguf_writer_set_arr(w, "a.f64", GGUF_KV_FLOAT64, f64, 2);
    bad |= gguf_writer_set_arr(w, "a.empty", GGUF_KV_INT32, NULL, 0);
    static const char *const strs[] = {"<unk>", "", "\xe2\x96\x81the"};
    bad |= gguf_writer_set_arr(w, "a.str", GGUF_KV_STRING, strs, 3);
    static const char *const strn[] = {"a\0b", "xyz"};
    static const uint64_t lens[] = {3, 3};
    bad |= gguf_writer_set_arr_strn(w, "a.strn", strn, lens, 2);
    for (int i = 0; i < SAMPLE_N_TENSORS && !bad; i++) {
        const sample_tensor *t = &k_sample_tensors[i];
        uint64_t nb = 0;
        gguf_tensor_nbytes(t->type, t->ne, &nb);
        void *d = malloc(nb ? nb : 1);
        sample_fill(d, nb, (uint32_t)i);
        bad |= gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, d, NULL, 0);
        free(d);
    }
    if (bad) {
        gguf_writer_free(w);
        return NULL;
    }
    return w;
}

#endif
