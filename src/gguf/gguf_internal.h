/* gguf_internal.h — what the files of src/gguf/ share; not API.
 *
 * The reader keeps, per KV, where its value starts in the mapping; scalars and array elements
 * are read from there with memcpy (they are unaligned, invariant 3 of gguf.h). Keys and tensor
 * names are indexed by an open-addressing hash table built once at open, so lookups and the
 * uniqueness checks take expected O(1) time even in files with a million entries.
 */
#ifndef RECUR_GGUF_INTERNAL_H
#define RECUR_GGUF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "gguf/gguf.h"

typedef struct gguf_kv {
    gguf_str     key;
    gguf_kv_type type;
    uint64_t     val_off;  /* file offset of the value (arrays: of the first element) */
    uint64_t     val_len;  /* bytes from val_off to the end of the value */
    gguf_arr     arr;      /* type == ARRAY: elem_type, n, data, strs */
} gguf_kv;

/* Open-addressing table of indices; slots hold index + 1 (0 = empty). cap is a power of 2. */
typedef struct gguf_index {
    int64_t *slot;
    uint64_t cap;
} gguf_index;

struct gguf_file {
    const uint8_t *base;        /* the mapping or the caller's buffer */
    uint64_t       size;
    int            mapped;      /* 1 when base must be munmap'ed at close */
    int            fd;          /* the mapped file, open until close (its cache, gguf_map.c); -1 */
    uint32_t       version;
    uint32_t       alignment;
    uint64_t       data_offset;
    int64_t        n_kv;
    gguf_kv       *kv;          /* n_kv */
    int64_t        n_tensors;
    gguf_tensor   *tensors;     /* n_tensors */
    gguf_str      *str_pool;    /* element index of every string array, back to back */
    gguf_index     kv_index;
    gguf_index     tensor_index;
};

/* Index of keys (which = 0) or tensor names (which = 1). */
enum { GGUF_IX_KEYS = 0, GGUF_IX_TENSORS = 1 };
/* Sizes the table for n entries; false when out of memory. */
bool    gguf_index_init(gguf_index *ix, uint64_t n);
void    gguf_index_free(gguf_index *ix);
/* Index of the entry named (p, len), or -1. */
int64_t gguf_index_find(const gguf_file *g, int which, const char *p, uint64_t len);
/* Inserts entry i; returns -1, or the index of an earlier entry with the same name (then
 * nothing is inserted). */
int64_t gguf_index_add(gguf_file *g, int which, int64_t i);

/* FNV-1a over bytes. */
static inline uint64_t gguf_hash(const void *p, uint64_t n) {
    const uint8_t *b = (const uint8_t *)p;
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Size in bytes of a scalar KV type; 0 for STRING, ARRAY and unknown ids. */
uint32_t gguf_kv_scalar_size(uint32_t t);

/* Little-endian loads from possibly unaligned memory. */
static inline uint16_t gguf_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t gguf_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t gguf_ld64(const uint8_t *p) {
    return (uint64_t)gguf_ld32(p) | ((uint64_t)gguf_ld32(p + 4) << 32);
}

/* Reads one scalar of type t at p as an int64 (integers and bool). Returns false for floats,
 * strings and uint64 values above INT64_MAX. */
bool gguf_scalar_int(uint32_t t, const uint8_t *p, int64_t *out);
/* Reads one scalar of type t at p as a double (every integer type, bool and the floats). */
bool gguf_scalar_float(uint32_t t, const uint8_t *p, double *out);

#endif
