/* gguf_get.c — lookups and typed getters over a validated gguf_file. */
#include "gguf/gguf_internal.h"

#include <stdlib.h>

/* ---- name index --------------------------------------------------------------------------- */

bool gguf_index_init(gguf_index *ix, uint64_t n) {
    uint64_t cap = 8;
    while (cap < 2 * n) cap *= 2;   /* n <= file size / 14: no overflow */
    ix->slot = calloc((size_t)cap, sizeof *ix->slot);
    ix->cap = ix->slot ? cap : 0;
    return ix->slot != NULL;
}

void gguf_index_free(gguf_index *ix) {
    free(ix->slot);
    ix->slot = NULL;
    ix->cap = 0;
}

static gguf_str entry_name(const gguf_file *g, int which, int64_t i) {
    if (which == GGUF_IX_KEYS) return g->kv[i].key;
    gguf_str s = {g->tensors[i].name, strlen(g->tensors[i].name)};
    return s;
}

static const gguf_index *index_of(const gguf_file *g, int which) {
    return which == GGUF_IX_KEYS ? &g->kv_index : &g->tensor_index;
}

/* The slot holding (p, len), or the empty slot where it would go. */
static uint64_t probe(const gguf_file *g, int which, const char *p, uint64_t len) {
    const gguf_index *ix = index_of(g, which);
    uint64_t mask = ix->cap - 1, h = gguf_hash(p, len) & mask;
    for (;;) {
        int64_t v = ix->slot[h];
        if (v == 0) return h;
        gguf_str s = entry_name(g, which, v - 1);
        if (s.len == len && memcmp(s.ptr, p, len) == 0) return h;
        h = (h + 1) & mask;
    }
}

int64_t gguf_index_find(const gguf_file *g, int which, const char *p, uint64_t len) {
    const gguf_index *ix = index_of(g, which);
    if (!ix->cap) return -1;
    return ix->slot[probe(g, which, p, len)] - 1;
}

int64_t gguf_index_add(gguf_file *g, int which, int64_t i) {
    gguf_index *ix = which == GGUF_IX_KEYS ? &g->kv_index : &g->tensor_index;
    gguf_str s = entry_name(g, which, i);
    uint64_t h = probe(g, which, s.ptr, s.len);
    if (ix->slot[h]) return ix->slot[h] - 1;
    ix->slot[h] = i + 1;
    return -1;
}

/* ---- file facts --------------------------------------------------------------------------- */

uint32_t gguf_version(const gguf_file *g) { return g->version; }
uint32_t gguf_alignment(const gguf_file *g) { return g->alignment; }
uint64_t gguf_data_offset(const gguf_file *g) { return g->data_offset; }
uint64_t gguf_file_size(const gguf_file *g) { return g->size; }

/* ---- metadata ----------------------------------------------------------------------------- */

int64_t gguf_n_kv(const gguf_file *g) { return g->n_kv; }

static const gguf_kv *kv_at(const gguf_file *g, int64_t i) {
    return (i >= 0 && i < g->n_kv) ? &g->kv[i] : NULL;
}

gguf_str gguf_kv_key(const gguf_file *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    gguf_str none = {"", 0};
    return kv ? kv->key : none;
}

gguf_kv_type gguf_kv_type_of(const gguf_file *g, int64_t i) {
    const gguf_kv *kv = kv_at(g, i);
    return kv ? kv->type : GGUF_KV_COUNT;
}

int64_t gguf_find_key(const gguf_file *g, const char *key) {
    return gguf_index_find(g, GGUF_IX_KEYS, key, strlen(key));
}

bool gguf_kv_int(const gguf_file *g, int64_t i, int64_t *out) {
    const gguf_kv *kv = kv_at(g, i);
    return kv && gguf_scalar_int(kv->type, g->base + kv->val_off, out);
}

bool gguf_kv_float(const gguf_file *g, int64_t i, double *out) {
    const gguf_kv *kv = kv_at(g, i);
    if (!kv || (kv->type != GGUF_KV_FLOAT32 && kv->type != GGUF_KV_FLOAT64)) return false;
    return gguf_scalar_float(kv->type, g->base + kv->val_off, out);
}

bool gguf_kv_str(const gguf_file *g, int64_t i, gguf_str *out) {
    const gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != GGUF_KV_STRING) return false;
    out->len = gguf_ld64(g->base + kv->val_off);
    out->ptr = (const char *)g->base + kv->val_off + 8;
    return true;
}

bool gguf_kv_arr(const gguf_file *g, int64_t i, gguf_arr *out) {
    const gguf_kv *kv = kv_at(g, i);
    if (!kv || kv->type != GGUF_KV_ARRAY) return false;
    *out = kv->arr;
    return true;
}

bool gguf_get_int(const gguf_file *g, const char *key, int64_t *out) {
    return gguf_kv_int(g, gguf_find_key(g, key), out);
}

bool gguf_get_float(const gguf_file *g, const char *key, double *out) {
    return gguf_kv_float(g, gguf_find_key(g, key), out);
}

bool gguf_get_bool(const gguf_file *g, const char *key, bool *out) {
    const gguf_kv *kv = kv_at(g, gguf_find_key(g, key));
    if (!kv || kv->type != GGUF_KV_BOOL) return false;
    *out = g->base[kv->val_off] != 0;
    return true;
}

bool gguf_get_str(const gguf_file *g, const char *key, gguf_str *out) {
    return gguf_kv_str(g, gguf_find_key(g, key), out);
}

bool gguf_get_arr(const gguf_file *g, const char *key, gguf_arr *out) {
    return gguf_kv_arr(g, gguf_find_key(g, key), out);
}

int64_t gguf_arr_int(const gguf_arr *a, uint64_t i) {
    if (i >= a->n || a->elem_type == GGUF_KV_STRING) return 0;
    uint32_t es = gguf_kv_scalar_size(a->elem_type);
    const uint8_t *p = (const uint8_t *)a->data + i * es;
    int64_t v;
    if (gguf_scalar_int(a->elem_type, p, &v)) return v;
    if (a->elem_type == GGUF_KV_UINT64) return INT64_MAX;   /* saturate values above INT64_MAX */
    double d;
    if (!gguf_scalar_float(a->elem_type, p, &d) || d != d) return 0;
    if (d >= 9.2233720368547758e18) return INT64_MAX;
    if (d <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)d;
}

double gguf_arr_float(const gguf_arr *a, uint64_t i) {
    if (i >= a->n || a->elem_type == GGUF_KV_STRING) return 0;
    double d;
    const uint8_t *p = (const uint8_t *)a->data + i * gguf_kv_scalar_size(a->elem_type);
    return gguf_scalar_float(a->elem_type, p, &d) ? d : 0;
}

/* ---- tensors ------------------------------------------------------------------------------ */

int64_t gguf_n_tensors(const gguf_file *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_file *g, int64_t i) {
    return (i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name) {
    return gguf_tensor_at(g, gguf_index_find(g, GGUF_IX_TENSORS, name, strlen(name)));
}
