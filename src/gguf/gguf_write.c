/* gguf_write.c — builds GGUF v3 files.
 *
 * Each KV is kept as its key, its type id and the exact bytes that follow the type id in the
 * file (for arrays: element type, count, elements), so serialising is a copy and replacing a
 * value is a swap. Tensors keep a copy of their data. The layout is ggml's: header, padding to
 * the alignment, then each tensor's data padded to the alignment, in the order added. A file
 * without tensors ends right after the header, as ggml writes vocab-only files; so rewriting
 * a ggml-written file with the same KVs and tensors gives the same bytes.
 */
#include "gguf/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/err.h"

typedef struct wkv {
    char    *key;
    uint32_t type;
    uint8_t *val;       /* serialised value */
    size_t   val_len;
} wkv;

typedef struct wtensor {
    char     name[GGUF_MAX_NAME];
    uint32_t type, n_dims;
    int64_t  ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    void    *data;
} wtensor;

struct gguf_writer {
    wkv     *kv;
    size_t   n_kv, cap_kv;
    wtensor *t;
    size_t   n_t, cap_t;
};

/* A growable byte buffer; `oom` latches the first allocation failure. */
typedef struct wbuf {
    uint8_t *p;
    size_t   n, cap;
    bool     oom;
} wbuf;

static void put(wbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) { b->oom = true; return; }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(wbuf *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, x, 4);
}

static void put_u64(wbuf *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(wbuf *b, const char *s, uint64_t len) {
    put_u64(b, len);
    put(b, s, (size_t)len);
}

/* ---- lifetime ----------------------------------------------------------------------------- */

gguf_writer *gguf_writer_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].data);
    free(w->kv);
    free(w->t);
    free(w);
}

/* ---- KVs ---------------------------------------------------------------------------------- */

/* Sets key to (type, value bytes); takes ownership of val->p on success and on failure. */
static recur_status set_kv(gguf_writer *w, const char *key, uint32_t type, wbuf *val) {
    if (!w || !key || !key[0] || val->oom) {
        free(val->p);
        return val->oom ? RECUR_E_NOMEM : RECUR_E_INVALID;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, key) != 0) continue;
        free(w->kv[i].val);
        w->kv[i].type = type;
        w->kv[i].val = val->p;
        w->kv[i].val_len = val->n;
        return RECUR_OK;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 16;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) { free(val->p); return RECUR_E_NOMEM; }
        w->kv = kv;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) { free(val->p); return RECUR_E_NOMEM; }
    w->kv[w->n_kv++] = (wkv){k, type, val->p, val->n};
    return RECUR_OK;
}

static recur_status set_scalar(gguf_writer *w, const char *key, uint32_t type, uint64_t bits) {
    wbuf b = {0};
    uint32_t n = gguf_kv_scalar_size(type);
    for (uint32_t i = 0; i < n; i++) {
        uint8_t x = (uint8_t)(bits >> (8 * i));
        put(&b, &x, 1);
    }
    return set_kv(w, key, type, &b);
}

recur_status gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) {
    return set_scalar(w, key, GGUF_KV_UINT32, v);
}

recur_status gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) {
    return set_scalar(w, key, GGUF_KV_INT32, (uint32_t)v);
}

recur_status gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v) {
    return set_scalar(w, key, GGUF_KV_UINT64, v);
}

recur_status gguf_writer_set_f32(gguf_writer *w, const char *key, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    return set_scalar(w, key, GGUF_KV_FLOAT32, u);
}

recur_status gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    return set_scalar(w, key, GGUF_KV_BOOL, v ? 1 : 0);
}

recur_status gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    if (!v) return RECUR_E_INVALID;
    wbuf b = {0};
    put_str(&b, v, strlen(v));
    return set_kv(w, key, GGUF_KV_STRING, &b);
}

recur_status gguf_writer_set_arr_strn(gguf_writer *w, const char *key, const char *const *strs,
                                      const uint64_t *lens, uint64_t n) {
    if (n && (!strs || !lens)) return RECUR_E_INVALID;
    wbuf b = {0};
    put_u32(&b, GGUF_KV_STRING);
    put_u64(&b, n);
    for (uint64_t i = 0; i < n; i++) {
        if (!strs[i] && lens[i]) { free(b.p); return RECUR_E_INVALID; }
        put_str(&b, strs[i], lens[i]);
    }
    return set_kv(w, key, GGUF_KV_ARRAY, &b);
}

recur_status gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_kv_type elem_type,
                                 const void *data, uint64_t n) {
    if ((unsigned)elem_type >= GGUF_KV_COUNT || elem_type == GGUF_KV_ARRAY || (n && !data))
        return RECUR_E_INVALID;
    if (elem_type == GGUF_KV_STRING) {
        const char *const *s = data;
        uint64_t *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
        if (!lens) return RECUR_E_NOMEM;
        for (uint64_t i = 0; i < n; i++) lens[i] = s[i] ? strlen(s[i]) : 0;
        recur_status st = gguf_writer_set_arr_strn(w, key, s, lens, n);
        free(lens);
        return st;
    }
    size_t es = gguf_kv_scalar_size(elem_type), bytes;
    if (n > SIZE_MAX / es) return RECUR_E_NOMEM;
    bytes = (size_t)n * es;
    wbuf b = {0};
    put_u32(&b, elem_type);
    put_u64(&b, n);
    put(&b, data, bytes);
    return set_kv(w, key, GGUF_KV_ARRAY, &b);
}

recur_status gguf_writer_set_kv_from(gguf_writer *w, const gguf_file *g, int64_t i) {
    if (!g || i < 0 || i >= g->n_kv) return RECUR_E_INVALID;
    const gguf_kv *kv = &g->kv[i];
    char *key = strndup(kv->key.ptr, (size_t)kv->key.len);
    if (!key) return RECUR_E_NOMEM;
    wbuf b = {0};
    if (kv->type == GGUF_KV_ARRAY) {
        put_u32(&b, kv->arr.elem_type);
        put_u64(&b, kv->arr.n);
    }
    put(&b, g->base + kv->val_off, (size_t)kv->val_len);
    recur_status st = set_kv(w, key, kv->type, &b);
    free(key);
    return st;
}

/* ---- tensors ------------------------------------------------------------------------------ */

static recur_status check_tensor(const gguf_writer *w, const char *name, uint32_t type,
                                 uint32_t n_dims, const int64_t *ne, char *err, size_t err_len) {
    if (!name || !name[0] || strlen(name) >= GGUF_MAX_NAME)
        return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: tensor name '%s' must be 1..%d bytes",
                       name ? name : "(null)", GGUF_MAX_NAME - 1);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: duplicate tensor '%s'", name);
    if (n_dims > GGUF_MAX_DIMS || (n_dims && !ne))
        return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: tensor '%s': %" PRIu32 " dimensions",
                       name, n_dims);
    uint32_t blck;
    if (!gguf_type_block(type, &blck, NULL))
        return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: tensor '%s': unknown type %" PRIu32,
                       name, type);
    return RECUR_OK;
}

recur_status gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type,
                                    uint32_t n_dims, const int64_t ne[GGUF_MAX_DIMS],
                                    const void *data, char *err, size_t err_len) {
    if (!w) return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: NULL writer");
    recur_status st = check_tensor(w, name, type, n_dims, ne, err, err_len);
    if (st) return st;
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    for (uint32_t d = 0; d < n_dims; d++) t.ne[d] = ne[d];
    if (!gguf_tensor_nbytes(type, t.ne, &t.nbytes) || t.nbytes > SIZE_MAX)
        return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: tensor '%s': bad shape for %s "
                       "(negative, overflowing, or ne[0] not a multiple of the block)", name,
                       gguf_type_name(type));
    if (t.nbytes && !data)
        return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: tensor '%s': no data", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *nt = realloc(w->t, cap * sizeof *nt);
        if (!nt) return rc_fail(err, err_len, RECUR_E_NOMEM, "gguf writer: out of memory");
        w->t = nt;
        w->cap_t = cap;
    }
    t.data = malloc(t.nbytes ? (size_t)t.nbytes : 1);
    if (!t.data)
        return rc_fail(err, err_len, RECUR_E_NOMEM, "gguf writer: out of memory for tensor '%s' (%"
                       PRIu64 " bytes)", name, t.nbytes);
    if (t.nbytes) memcpy(t.data, data, (size_t)t.nbytes);
    strcpy(t.name, name);
    w->t[w->n_t++] = t;
    return RECUR_OK;
}

/* ---- serialising -------------------------------------------------------------------------- */

static recur_status writer_alignment(const gguf_writer *w, uint32_t *align, char *err, size_t err_len) {
    *align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        uint32_t a = w->kv[i].type == GGUF_KV_UINT32 ? gguf_ld32(w->kv[i].val) : 0;
        if (a == 0 || (a & (a - 1)))
            return rc_fail(err, err_len, RECUR_E_INVALID,
                           "gguf writer: general.alignment must be a uint32 power of 2");
        *align = a;
    }
    return RECUR_OK;
}

static uint64_t pad_to(uint64_t n, uint32_t a) { return (n + a - 1) / a * a; }

/* Header (through the padding before the data) into b; *data_bytes = padded tensor data. */
static recur_status build_header(const gguf_writer *w, wbuf *b, uint32_t *align, uint64_t *data_bytes,
                                 char *err, size_t err_len) {
    recur_status st = writer_alignment(w, align, err, err_len);
    if (st) return st;
    put(b, "GGUF", 4);
    put_u32(b, 3);
    put_u64(b, w->n_t);
    put_u64(b, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        put_str(b, w->kv[i].key, strlen(w->kv[i].key));
        put_u32(b, w->kv[i].type);
        put(b, w->kv[i].val, w->kv[i].val_len);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        put_str(b, t->name, strlen(t->name));
        put_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) put_u64(b, (uint64_t)t->ne[d]);
        put_u32(b, t->type);
        put_u64(b, off);
        off += pad_to(t->nbytes, *align);
    }
    /* ggml pads the header only when a data blob follows (vocab-only files end unpadded) */
    static const uint8_t zeros[256] = {0};
    for (uint64_t pad = pad_to(b->n, *align) - b->n; w->n_t && pad && !b->oom; pad = pad_to(b->n, *align) - b->n)
        put(b, zeros, pad < sizeof zeros ? (size_t)pad : sizeof zeros);
    *data_bytes = off;
    if (b->oom) return rc_fail(err, err_len, RECUR_E_NOMEM, "gguf writer: out of memory for the header");
    return RECUR_OK;
}

recur_status gguf_writer_to_memory(const gguf_writer *w, void **out, size_t *out_len,
                                   char *err, size_t err_len) {
    if (!w || !out || !out_len) return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: NULL argument");
    wbuf b = {0};
    uint32_t align;
    uint64_t data_bytes;
    recur_status st = build_header(w, &b, &align, &data_bytes, err, err_len);
    if (st) { free(b.p); return st; }
    size_t hdr = b.n, total;
    if (data_bytes > SIZE_MAX - hdr || !(b.p = realloc(b.p, (total = hdr + (size_t)data_bytes) ? total : 1))) {
        free(b.p);
        return rc_fail(err, err_len, RECUR_E_NOMEM, "gguf writer: out of memory");
    }
    memset(b.p + hdr, 0, (size_t)data_bytes);
    size_t off = hdr;
    for (size_t i = 0; i < w->n_t; i++) {
        memcpy(b.p + off, w->t[i].data, (size_t)w->t[i].nbytes);
        off += (size_t)pad_to(w->t[i].nbytes, align);
    }
    *out = b.p;
    *out_len = total;
    return RECUR_OK;
}

static bool write_all(int fd, const void *p, uint64_t n) {
    const uint8_t *c = p;
    while (n) {
        ssize_t k = write(fd, c, n > (1u << 30) ? (1u << 30) : (size_t)n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (uint64_t)k;
    }
    return true;
}

static bool write_tensors(const gguf_writer *w, int fd, uint32_t align) {
    static const uint8_t zeros[256] = {0};
    for (size_t i = 0; i < w->n_t; i++) {
        if (!write_all(fd, w->t[i].data, w->t[i].nbytes)) return false;
        uint64_t pad = pad_to(w->t[i].nbytes, align) - w->t[i].nbytes;
        for (; pad; pad -= pad < sizeof zeros ? pad : sizeof zeros)
            if (!write_all(fd, zeros, pad < sizeof zeros ? pad : sizeof zeros)) return false;
    }
    return true;
}

recur_status gguf_writer_write(const gguf_writer *w, const char *path, char *err, size_t err_len) {
    if (!w || !path) return rc_fail(err, err_len, RECUR_E_INVALID, "gguf writer: NULL argument");
    wbuf b = {0};
    uint32_t align;
    uint64_t data_bytes;
    recur_status st = build_header(w, &b, &align, &data_bytes, err, err_len);
    if (st) { free(b.p); return st; }
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 5);
    if (!tmp) { free(b.p); return rc_fail(err, err_len, RECUR_E_NOMEM, "gguf writer: out of memory"); }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st = rc_fail(err, err_len, RECUR_E_IO, "gguf writer: cannot create '%s': %s", tmp, strerror(errno));
    } else {
        bool ok = write_all(fd, b.p, b.n) && write_tensors(w, fd, align) && fsync(fd) == 0;
        int e = errno;
        if (close(fd) != 0 && ok) { ok = false; e = errno; }
        if (ok && rename(tmp, path) != 0) { ok = false; e = errno; }
        if (!ok) {
            unlink(tmp);
            st = rc_fail(err, err_len, RECUR_E_IO, "gguf writer: cannot write '%s': %s", path, strerror(e));
        }
    }
    free(tmp);
    free(b.p);
    return st;
}
