/* gguf_synth_write.c — a GGUF v3 file written as its tensors are produced.
 *
 * src/gguf's writer copies every tensor into memory before writing, which a 4B model at Q8_0
 * (4.6 GB) or a 35B one cannot afford. Here the header comes first — the KVs serialised by
 * gguf_writer (a writer holding no tensors), then the tensor infos with their offsets — and
 * each tensor's bytes are then written at their place. Bytes never written (alignment padding,
 * tensors left out in --weights zero) stay holes of the file: zeros that take no disk space on
 * filesystems with sparse files. Layout is the same as gguf_writer_write's for the same KVs,
 * tensors and alignment (32): the data section starts at the padded end of the header, each
 * tensor at a multiple of 32.
 *
 * States: open (header written) --write*--> --close(keep)--> renamed over path;
 *         any failure or close(!keep) removes the temporary "<path>.tmp".
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf_synth.h"

static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

typedef struct hbuf {
    uint8_t *p;
    size_t   n, cap;
    bool     oom;
} hbuf;

static void put(hbuf *b, const void *src, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_le(hbuf *b, uint64_t v, int bytes) {
    uint8_t le[8];
    for (int i = 0; i < bytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, (size_t)bytes);
}

/* The header: KV bytes of a tensor-less writer (magic, version, n_tensors = 0, n_kv, KVs),
 * n_tensors patched in, tensor infos appended, zero padding to the alignment. */
static recur_status build_header(const gguf_writer *kv, const synth_tensor *t, const uint32_t *type, int n,
                                 synth_out *o, hbuf *b, char *err, size_t err_len) {
    void *kvb;
    size_t kvn;
    recur_status st = gguf_writer_to_memory(kv, &kvb, &kvn, err, err_len);
    if (st) return st;
    put(b, kvb, kvn);
    free(kvb);
    if (b->oom || kvn < 24) return RECUR_E_NOMEM;
    for (int i = 0; i < 8; i++) b->p[8 + i] = (uint8_t)((uint64_t)n >> (8 * i));
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t nbytes;
        if (!gguf_tensor_nbytes(type[i], t[i].ne, &nbytes)) {
            snprintf(err, err_len, "tensor %s: bad shape for its type", t[i].name);
            return RECUR_E_INVALID;
        }
        put_le(b, strlen(t[i].name), 8);
        put(b, t[i].name, strlen(t[i].name));
        put_le(b, t[i].n_dims, 4);
        for (uint32_t d = 0; d < t[i].n_dims; d++) put_le(b, (uint64_t)t[i].ne[d], 8);
        put_le(b, type[i], 4);
        put_le(b, off, 8);
        o->off[i] = off;
        off += pad_to(nbytes, GGUF_DEFAULT_ALIGNMENT);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT] = {0};
    put(b, zeros, (size_t)(pad_to(b->n, GGUF_DEFAULT_ALIGNMENT) - b->n));
    o->data_start = b->n;
    o->data_bytes = off;
    return b->oom ? RECUR_E_NOMEM : RECUR_OK;
}

static bool pwrite_all(int fd, const void *p, size_t n, uint64_t at) {
    const uint8_t *c = p;
    while (n) {
        ssize_t k = pwrite(fd, c, n > (1u << 30) ? (1u << 30) : n, (off_t)at);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        c += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return true;
}

recur_status synth_out_open(synth_out *o, const char *path, const gguf_writer *kv, const synth_tensor *t,
                            const uint32_t *type, int n, char *err, size_t err_len) {
    *o = (synth_out){.fd = -1, .path = path};
    size_t plen = strlen(path);
    o->tmp = malloc(plen + 5);
    o->off = malloc((size_t)(n ? n : 1) * sizeof *o->off);
    if (!o->tmp || !o->off) {
        synth_out_close(o, false, NULL, 0);
        snprintf(err, err_len, "out of memory");
        return RECUR_E_NOMEM;
    }
    memcpy(o->tmp, path, plen);
    memcpy(o->tmp + plen, ".tmp", 5);
    hbuf b = {0};
    recur_status st = build_header(kv, t, type, n, o, &b, err, err_len);
    if (st == RECUR_E_NOMEM) snprintf(err, err_len, "out of memory for the header");
    if (!st && (o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0) {
        snprintf(err, err_len, "cannot create '%s': %s", o->tmp, strerror(errno));
        st = RECUR_E_IO;
    }
    if (!st && !pwrite_all(o->fd, b.p, b.n, 0)) {
        snprintf(err, err_len, "cannot write '%s': %s", o->tmp, strerror(errno));
        st = RECUR_E_IO;
    }
    free(b.p);
    if (st) synth_out_close(o, false, NULL, 0);
    return st;
}

recur_status synth_out_write(synth_out *o, int i, uint64_t at, const void *data, size_t n, char *err,
                             size_t err_len) {
    if (pwrite_all(o->fd, data, n, o->data_start + o->off[i] + at)) return RECUR_OK;
    snprintf(err, err_len, "cannot write '%s': %s", o->tmp, strerror(errno));
    return RECUR_E_IO;
}

recur_status synth_out_close(synth_out *o, bool keep, char *err, size_t err_len) {
    recur_status st = RECUR_OK;
    if (o->fd >= 0) {
        /* the full size: trailing padding and unwritten tensors become holes */
        bool ok = !keep || (ftruncate(o->fd, (off_t)(o->data_start + o->data_bytes)) == 0 && fsync(o->fd) == 0);
        int e = errno;
        if (close(o->fd) != 0 && ok) { ok = false; e = errno; }
        if (ok && keep && rename(o->tmp, o->path) != 0) { ok = false; e = errno; }
        if (!ok || !keep) unlink(o->tmp);
        if (!ok) {
            if (err) snprintf(err, err_len, "cannot write '%s': %s", o->path, strerror(e));
            st = RECUR_E_IO;
        }
    }
    free(o->tmp);
    free(o->off);
    *o = (synth_out){.fd = -1};
    return st;
}
