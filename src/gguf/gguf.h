/* gguf.h — GGUF v2/v3 reader (over mmap) and writer.
 *
 * Invariants of a gguf_file returned by gguf_open:
 *  1. Every field was validated before the open returned: magic, version (2 or 3), counts
 *     against the bytes left, string lengths, key uniqueness, known KV and tensor type ids,
 *     n_dims <= 4, element counts without overflow, ne[0] a multiple of the block size,
 *     `general.alignment` a power of two, every tensor's data inside the file and aligned.
 *     A malformed file fails with RECUR_E_FORMAT and a message naming the field and offset.
 *  2. Pointers it hands out (strings, arrays, tensor data) point into the mapping and stay
 *     valid until gguf_close. Strings are NOT NUL-terminated: use their length.
 *  3. Metadata scalars and arrays are unaligned in the file: read array elements through the
 *     gguf_arr_* accessors, never by casting the data pointer.
 *  4. A read-only, shared mapping: the file is never written through it.
 *  5. Nothing is allocated for a count before the count is checked against the bytes left, so
 *     the reader's memory stays within a small multiple of the file size whatever the header
 *     claims (a 2^62 n_kv fails at once).
 *
 * Accepted: n_dims 0 (a scalar), ne[i] == 0 (an empty tensor), bool values other than 0/1
 * (read as true), and — only when there are no tensors — a file that
 * ends right after the header without the padding (vocab-only files); gguf_data_offset then
 * lies past the end of the file. Stricter than ggml: tensor names must be non-empty and hold no
 * NUL byte.
 */
#ifndef RECUR_GGUF_H
#define RECUR_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

#define GGUF_MAX_NAME 64        /* tensor names are shorter than this (GGML_MAX_NAME) */
#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef enum gguf_kv_type {
    GGUF_KV_UINT8 = 0, GGUF_KV_INT8 = 1, GGUF_KV_UINT16 = 2, GGUF_KV_INT16 = 3,
    GGUF_KV_UINT32 = 4, GGUF_KV_INT32 = 5, GGUF_KV_FLOAT32 = 6, GGUF_KV_BOOL = 7,
    GGUF_KV_STRING = 8, GGUF_KV_ARRAY = 9, GGUF_KV_UINT64 = 10, GGUF_KV_INT64 = 11,
    GGUF_KV_FLOAT64 = 12,
    GGUF_KV_COUNT
} gguf_kv_type;

/* ggml tensor type ids as stored in files (ggml.h). GGUF_T_COUNT bounds the known ids. */
enum {
    GGUF_T_F32 = 0, GGUF_T_F16 = 1, GGUF_T_Q4_0 = 2, GGUF_T_Q4_1 = 3, GGUF_T_Q5_0 = 6,
    GGUF_T_Q5_1 = 7, GGUF_T_Q8_0 = 8, GGUF_T_Q8_1 = 9, GGUF_T_Q2_K = 10, GGUF_T_Q3_K = 11,
    GGUF_T_Q4_K = 12, GGUF_T_Q5_K = 13, GGUF_T_Q6_K = 14, GGUF_T_Q8_K = 15,
    GGUF_T_IQ2_XXS = 16, GGUF_T_IQ2_XS = 17, GGUF_T_IQ3_XXS = 18, GGUF_T_IQ1_S = 19,
    GGUF_T_IQ4_NL = 20, GGUF_T_IQ3_S = 21, GGUF_T_IQ2_S = 22, GGUF_T_IQ4_XS = 23,
    GGUF_T_I8 = 24, GGUF_T_I16 = 25, GGUF_T_I32 = 26, GGUF_T_I64 = 27, GGUF_T_F64 = 28,
    GGUF_T_IQ1_M = 29, GGUF_T_BF16 = 30, GGUF_T_TQ1_0 = 34, GGUF_T_TQ2_0 = 35,
    GGUF_T_MXFP4 = 39, GGUF_T_NVFP4 = 40, GGUF_T_Q1_0 = 41, GGUF_T_Q2_0 = 42,
    GGUF_T_COUNT = 43
};

/* Block facts of a tensor type id: elements per block and bytes per block. Returns false for
 * ids that are unknown or removed (4, 5, 31-33, 36-38 and >= GGUF_T_COUNT). */
bool        gguf_type_block(uint32_t type, uint32_t *blck, uint32_t *bytes);
const char *gguf_type_name(uint32_t type);              /* "Q8_0"; "?" when unknown */
const char *gguf_kv_type_name(gguf_kv_type t);          /* "uint32", "array", ...   */
/* Bytes of a tensor of `type` with ne[0..3]; false on unknown type, ne[0] not a multiple of
 * the block, or overflow. */
bool gguf_tensor_nbytes(uint32_t type, const int64_t ne[GGUF_MAX_DIMS], uint64_t *out);

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct gguf_str {
    const char *ptr;   /* into the mapping, not NUL-terminated */
    uint64_t    len;
} gguf_str;

/* An array value: n elements of elem_type. For strings, strs[i] is element i (an index the
 * reader built); otherwise data points at the packed, possibly unaligned elements. */
typedef struct gguf_arr {
    gguf_kv_type    elem_type;
    uint64_t        n;
    const void     *data;
    const gguf_str *strs;
} gguf_arr;

typedef struct gguf_tensor {
    char        name[GGUF_MAX_NAME];  /* NUL-terminated copy */
    uint32_t    n_dims;
    int64_t     ne[GGUF_MAX_DIMS];    /* elements per dimension, ne[0] innermost; unused = 1 */
    uint32_t    type;                 /* GGUF_T_* */
    uint64_t    offset;               /* from the start of the data section */
    uint64_t    nbytes;
    const void *data;                 /* into the mapping; its file offset is a multiple of the
                                         alignment (so is the address for gguf_open when the
                                         alignment is at most the page size) */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and validates a file. On failure *out is NULL and err names the field and the byte
 * offset where the problem was found. */
recur_status gguf_open(const char *path, gguf_file **out, char *err, size_t err_len);
/* Validates a file already in memory (the buffer must outlive the gguf_file; used by the
 * fuzzers and tests). */
recur_status gguf_open_memory(const void *buf, size_t len, gguf_file **out, char *err, size_t err_len);
void gguf_close(gguf_file *g);
/* Whether the file is mapped (gguf_open), not a caller's buffer. */
bool gguf_mapped(const gguf_file *g);
/* Maps every page of the file in now (reading what is not cached), in 2 MiB pages where the
 * kernel can: where most of the file is cached in small pieces, its cached pages are dropped
 * and read again (gguf_map.c). A caller that drops ranges (below) does this first: otherwise
 * reading a neighbour later maps a whole 2 MiB page again, the dropped part with it. Nothing
 * for a file read from a buffer. */
void gguf_map_all(const gguf_file *g);
/* A hint that [p, p + n), inside the file's data, will not be read again: the whole pages of
 * the mapping within it are unmapped (they stay in the page cache; reading them again would
 * map them back), so they no longer count in the process's memory. A 2 MiB page of the
 * mapping that is only partly unmapped maps the rest in small pages. Nothing for a file read
 * from a buffer. */
void gguf_drop_range(const gguf_file *g, const void *p, uint64_t n);

uint32_t gguf_version(const gguf_file *g);
uint32_t gguf_alignment(const gguf_file *g);
uint64_t gguf_data_offset(const gguf_file *g);      /* file offset of the tensor data blob */
uint64_t gguf_file_size(const gguf_file *g);

/* Metadata, by index in file order. Out of range, gguf_kv_key gives an empty string and
 * gguf_kv_type_of GGUF_KV_COUNT. */
int64_t      gguf_n_kv(const gguf_file *g);
gguf_str     gguf_kv_key(const gguf_file *g, int64_t i);
gguf_kv_type gguf_kv_type_of(const gguf_file *g, int64_t i);
int64_t      gguf_find_key(const gguf_file *g, const char *key);   /* -1 when absent */

/* Typed getters by key. Each returns false when the key is absent or has an incompatible
 * type. gguf_get_int accepts every integer type and bool (and fails if the value does not fit
 * int64); gguf_get_float accepts float32 and float64. */
bool gguf_get_int(const gguf_file *g, const char *key, int64_t *out);
bool gguf_get_float(const gguf_file *g, const char *key, double *out);
bool gguf_get_bool(const gguf_file *g, const char *key, bool *out);
bool gguf_get_str(const gguf_file *g, const char *key, gguf_str *out);
bool gguf_get_arr(const gguf_file *g, const char *key, gguf_arr *out);
/* The same by index. */
bool gguf_kv_int(const gguf_file *g, int64_t i, int64_t *out);
bool gguf_kv_float(const gguf_file *g, int64_t i, double *out);
bool gguf_kv_str(const gguf_file *g, int64_t i, gguf_str *out);
bool gguf_kv_arr(const gguf_file *g, int64_t i, gguf_arr *out);

/* Array element i as a number (any integer/bool/float element type; 0 when out of range or
 * a string array). gguf_arr_int truncates floats toward zero and saturates values outside
 * int64 (uint64 elements above INT64_MAX give INT64_MAX). */
int64_t gguf_arr_int(const gguf_arr *a, uint64_t i);
double  gguf_arr_float(const gguf_arr *a, uint64_t i);

/* Tensors. */
int64_t            gguf_n_tensors(const gguf_file *g);
const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);   /* NULL if absent */

/* Compares a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *c);

/* ---- writer ------------------------------------------------------------------------------ */

/* Builds a GGUF v3 file in memory order: KVs in the order set (setting an existing key again
 * replaces its value in place), tensors in the order added, data padded to the alignment
 * (general.alignment when set, else 32). A file without tensors ends right after the header,
 * unpadded, as ggml writes vocab-only files: a file rewritten from the KVs and tensors of a
 * ggml-written one is byte-identical to it.
 *
 * The setters return RECUR_OK, RECUR_E_INVALID (NULL writer, NULL or empty key, NULL value,
 * bad element type) or RECUR_E_NOMEM; on failure the writer is unchanged. */
typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);

recur_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
recur_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
recur_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v);
recur_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
recur_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
recur_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
/* An array of n elements of elem_type (any type but ARRAY) from raw little-endian element
 * bytes (for copying KVs between files): for elem_type STRING, data is an array of n
 * `const char *` (NUL-terminated). data may be NULL when n is 0. */
recur_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_kv_type elem_type,
                                 const void *data, uint64_t n);
/* Strings with explicit lengths (may contain NUL bytes). */
recur_status gguf_writer_set_arr_strn(gguf_writer *w, const char *key, const char *const *strs,
                                      const uint64_t *lens, uint64_t n);

/* Copies KV i of an open file (any type, arrays included) under the same key, replacing a
 * value already set for it. RECUR_E_INVALID when i is out of range. (Added for tools that
 * rewrite files: quantizers, splitters, tests.) */
recur_status gguf_writer_set_kv_from(gguf_writer *w, const gguf_file *g, int64_t i);

/* Adds a tensor; the bytes are copied (nbytes must equal gguf_tensor_nbytes). Only
 * ne[0..n_dims-1] are read; the other dimensions are 1. RECUR_E_INVALID for an empty, too
 * long (>= GGUF_MAX_NAME bytes) or duplicate name, n_dims > 4, an unknown type, a negative or
 * overflowing shape, or ne[0] not a multiple of the type's block size. */
recur_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t ne[GGUF_MAX_DIMS],
                                    const void *data, char *err, size_t err_len);

/* Writes the file atomically: to "<path>.tmp", fsync, rename over path (the temp file is
 * removed on failure). RECUR_E_INVALID when general.alignment is set but is not a uint32
 * power of 2; RECUR_E_IO when the file cannot be written. Both serialisers leave w as is. */
recur_status gguf_writer_write(const gguf_writer *w, const char *path, char *err, size_t err_len);
/* Serialises into a malloc'd buffer (*out, *out_len); for tests and fuzz corpora. */
recur_status gguf_writer_to_memory(const gguf_writer *w, void **out, size_t *out_len,
                                   char *err, size_t err_len);

#endif
