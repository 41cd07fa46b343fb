/* pcache_file.c — the prompt cache on disk: the whole tree (--cache-dir) or the path of one
 * conversation (a slot save), written atomically, read back into the tree (see pcache.h). */
#include "cache/pcache_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "core/err.h"

#define PCF_VERSION 1
#define PCF_HEADER 64
static const char pcf_magic[8] = { 'R', 'E', 'C', 'U', 'R', 'P', 'C', 'F' };

/* ---- writing --------------------------------------------------------------------------------- */

typedef struct pcf_out {
    FILE         *f;
    XXH3_state_t *h;
    size_t        bytes;
    bool          ok;
    int           errno_first;   /* errno of the first failed call (ENOSPC, EFBIG, EIO, ...) */
} pcf_out;

static void out_fail(pcf_out *o) {
    if (o->ok) o->errno_first = errno;
    o->ok = false;
}

static void out_put(pcf_out *o, const void *p, size_t n) {
    if (!o->ok || !n) return;
    if (fwrite(p, 1, n, o->f) != n) out_fail(o);
    XXH3_64bits_update(o->h, p, n);
    o->bytes += n;
}

static void out_u32(pcf_out *o, uint32_t v) { out_put(o, &v, 4); }
static void out_u64(pcf_out *o, uint64_t v) { out_put(o, &v, 8); }

/* Nodes to write: the whole tree in pre-order, or the path along tok[0 .. n). Each gets its
 * record index in idx (nodes are numbered by the walk); returns how many, or -1 (no memory). */
typedef struct pcf_sel {
    pc_node **nd;
    int32_t  *parent, *len;   /* record index of the parent (-1: root); tokens written */
    int32_t   n, cap;
} pcf_sel;

static bool sel_add(pcf_sel *s, pc_node *nd, int32_t parent, int32_t len) {
    if (s->n == s->cap) {
        const int32_t cap = s->cap ? s->cap * 2 : 64;
        pc_node **a = realloc(s->nd, (size_t)cap * sizeof *a);
        if (a) s->nd = a;
        int32_t *b = realloc(s->parent, (size_t)cap * sizeof *b);
        if (b) s->parent = b;
        int32_t *c = realloc(s->len, (size_t)cap * sizeof *c);
        if (c) s->len = c;
        if (!a || !b || !c) return false;
        s->cap = cap;
    }
    s->nd[s->n] = nd;
    s->parent[s->n] = parent;
    s->len[s->n++] = len;
    return true;
}

static bool sel_tree(pcf_sel *s, pc_node *nd, int32_t parent) {
    for (pc_node *k = nd->kids; k; k = k->sib) {
        if (!sel_add(s, k, parent, k->n)) return false;
        if (!sel_tree(s, k, s->n - 1)) return false;
    }
    return true;
}

static bool sel_path(pcache *pc, pcf_sel *s, const recur_token *tok, int32_t n) {
    pc_node *nd = &pc->root;
    int32_t d = 0;
    while (d < n) {
        pc_node *k = NULL;
        for (pc_node *c = nd->kids; c; c = c->sib)
            if (c->tok[0] == tok[d]) k = c;
        if (!k) break;
        int32_t m = 0;
        while (m < k->n && d + m < n && k->tok[m] == tok[d + m]) m++;
        if (!sel_add(s, k, s->n - 1, m)) return false;
        d += m;
        if (m < k->n) break;
        nd = k;
    }
    return true;
}

static void write_records(pcache *pc, pcf_out *o, const pcf_sel *s, int32_t n_ck) {
    unsigned char hdr[PCF_HEADER] = { 0 };
    memcpy(hdr, pcf_magic, 8);
    const uint32_t ver = PCF_VERSION;
    const uint64_t mid = recur_ctx_state_id(pc->ctx), rb = pc->row_bytes, sb = pc->snap_bytes;
    memcpy(hdr + 8, &ver, 4);
    memcpy(hdr + 16, &mid, 8);
    memcpy(hdr + 24, &rb, 8);
    memcpy(hdr + 32, &sb, 8);
    memcpy(hdr + 40, &pc->n_vocab, 4);
    memcpy(hdr + 44, &s->n, 4);
    memcpy(hdr + 48, &n_ck, 4);
    out_put(o, hdr, sizeof hdr);
    for (int32_t i = 0; i < s->n; i++) {
        out_u32(o, (uint32_t)s->parent[i]);
        out_u32(o, (uint32_t)s->len[i]);
        out_put(o, s->nd[i]->tok, (size_t)s->len[i] * sizeof(recur_token));
        out_put(o, s->nd[i]->kv, (size_t)s->len[i] * pc->row_bytes);
    }
    unsigned char *buf = pc->snap_bytes ? malloc(pc->snap_bytes) : NULL;
    if (pc->snap_bytes && !buf) o->ok = false;
    for (int32_t i = 0; i < s->n && o->ok; i++)
        for (const pcache_ckpt *c = s->nd[i]->ck; c; c = c->next) {
            if (c->pos >= s->nd[i]->p0 + s->len[i]) continue;
            const size_t sl = c->snap ? recur_snapshot_save(c->snap, buf, pc->snap_bytes) : 0;
            out_u32(o, (uint32_t)i);
            out_u32(o, (uint32_t)c->pos);
            out_u32(o, c->flags);
            out_u32(o, c->logits != NULL);
            out_u64(o, sl);
            out_put(o, buf, sl);
            if (c->logits) out_put(o, c->logits, (size_t)pc->n_vocab * sizeof(float));
        }
    free(buf);
}

static int32_t count_ckpts(const pcf_sel *s) {
    int32_t n = 0;
    for (int32_t i = 0; i < s->n; i++)
        for (const pcache_ckpt *c = s->nd[i]->ck; c; c = c->next) n += c->pos < s->nd[i]->p0 + s->len[i];
    return n;
}

/* Writes to path.tmp, fsyncs, renames: a reader sees the old file or the whole new one. */
recur_status pcache_write(pcache *pc, const recur_token *tok, int32_t n, const char *path, size_t *bytes, char *err,
                          size_t err_len) {
    pcf_sel s = { 0 };
    bool ok = tok ? sel_path(pc, &s, tok, n) : sel_tree(&s, &pc->root, -1);
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) ok = false;
    pcf_out o = { .f = ok ? fopen(tmp, "wb") : NULL, .h = XXH3_createState(), .ok = true };
    recur_status st = RECUR_OK;
    if (!ok || !o.h) st = rc_fail(err, err_len, RECUR_E_NOMEM, "pcache: out of memory (or path too long)");
    else if (!o.f) st = rc_fail(err, err_len, RECUR_E_IO, "pcache: cannot create %s: %s", tmp, strerror(errno));
    if (!st) {
        XXH3_64bits_reset(o.h);
        write_records(pc, &o, &s, count_ckpts(&s));
        const uint64_t sum = XXH3_64bits_digest(o.h);
        out_put(&o, &sum, 8);
        /* a full disk may only show at the flush, at fsync (delayed allocation) or at close */
        if (o.ok && (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0)) out_fail(&o);
        if (fclose(o.f) != 0) out_fail(&o);
        if (o.ok && rename(tmp, path) != 0) out_fail(&o);
        if (!o.ok) {
            /* the previous file at path is untouched: only tmp was written */
            st = rc_fail(err, err_len, RECUR_E_IO, "pcache: writing %s failed: %s", path, strerror(o.errno_first));
            unlink(tmp);
        }
    }
    if (bytes) *bytes = st ? 0 : o.bytes;
    XXH3_freeState(o.h);
    free(s.nd);
    free(s.parent);
    free(s.len);
    return st;
}

/* ---- reading --------------------------------------------------------------------------------- */

typedef struct pcf_node {
    int32_t                parent, n, p0;
    const recur_token     *tok;
    const unsigned char   *rows;
} pcf_node;

typedef struct pcf_in {
    const unsigned char *p;
    size_t               len, at;
    bool                 ok;
} pcf_in;

static const void *in_take(pcf_in *in, size_t n) {
    if (!in->ok || n > in->len - in->at) { in->ok = false; return NULL; }
    const void *r = in->p + in->at;
    in->at += n;
    return r;
}

static uint32_t in_u32(pcf_in *in) {
    uint32_t v = 0;
    const void *p = in_take(in, 4);
    if (p) memcpy(&v, p, 4);
    return v;
}

static uint64_t in_u64(pcf_in *in) {
    uint64_t v = 0;
    const void *p = in_take(in, 8);
    if (p) memcpy(&v, p, 8);
    return v;
}

typedef struct pcf_rows_ud {
    const pcf_node *nodes;
    int32_t         leaf;     /* the record whose path is being inserted */
    size_t          rb;
} pcf_rows_ud;

/* rows [p0, p1) of the path ending at record ud->leaf */
static bool file_rows(void *udp, int32_t p0, int32_t p1, unsigned char *dst) {
    const pcf_rows_ud *ud = udp;
    for (int32_t i = ud->leaf; i >= 0; i = ud->nodes[i].parent) {
        const pcf_node *nd = &ud->nodes[i];
        const int32_t a = p0 > nd->p0 ? p0 : nd->p0, b = p1 < nd->p0 + nd->n ? p1 : nd->p0 + nd->n;
        if (a < b) memcpy(dst + (size_t)(a - p0) * ud->rb, nd->rows + (size_t)(a - nd->p0) * ud->rb, (size_t)(b - a) * ud->rb);
    }
    return true;
}

/* The tokens of the path ending at record i (length nodes[i].p0 + nodes[i].n). */
static void path_tokens(const pcf_node *nodes, int32_t i, recur_token *out) {
    for (; i >= 0; i = nodes[i].parent) memcpy(out + nodes[i].p0, nodes[i].tok, (size_t)nodes[i].n * sizeof *out);
}

static recur_status read_nodes(pcache *pc, pcf_in *in, pcf_node *nodes, int32_t n_nodes, char *err, size_t err_len) {
    for (int32_t i = 0; i < n_nodes; i++) {
        pcf_node *nd = &nodes[i];
        nd->parent = (int32_t)in_u32(in);
        nd->n = (int32_t)in_u32(in);
        if (!in->ok || nd->parent < -1 || nd->parent >= i || nd->n < 1 || nd->n > (1 << 24))
            return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: node record %d is invalid", i);
        nd->p0 = nd->parent < 0 ? 0 : nodes[nd->parent].p0 + nodes[nd->parent].n;
        nd->tok = in_take(in, (size_t)nd->n * sizeof(recur_token));
        nd->rows = in_take(in, (size_t)nd->n * pc->row_bytes);
        if (!in->ok) return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: truncated in node %d", i);
        for (int32_t k = 0; k < nd->n; k++) {
            recur_token t;
            memcpy(&t, nd->tok + k, sizeof t);
            if (t < 0 || t >= pc->n_vocab)
                return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: token %d outside the vocabulary", t);
        }
    }
    return RECUR_OK;
}

/* Inserts every node's path, then every checkpoint (rows from the file). */
static recur_status read_into(pcache *pc, pcf_in *in, const pcf_node *nodes, int32_t n_nodes, int32_t n_ck,
                              recur_token *scratch, char *err, size_t err_len) {
    pcf_rows_ud ud = { nodes, 0, pc->row_bytes };
    for (int32_t i = 0; i < n_nodes; i++) {
        int32_t held = 0;
        ud.leaf = i;
        path_tokens(nodes, i, scratch);
        const pc_rows src = { 0, file_rows, &ud };
        pc_node *end = pc_insert_path(pc, &src, scratch, nodes[i].p0 + nodes[i].n, &held);
        if (end) pc_unpin_path(end);
    }
    for (int32_t k = 0; k < n_ck; k++) {
        const int32_t node = (int32_t)in_u32(in), pos = (int32_t)in_u32(in);
        const uint32_t flags = in_u32(in), has_logits = in_u32(in);
        const uint64_t sl = in_u64(in);
        const void *snap = in_take(in, (size_t)sl);
        const void *lg = has_logits ? in_take(in, (size_t)pc->n_vocab * sizeof(float)) : NULL;
        if (!in->ok || node < 0 || node >= n_nodes || pos < nodes[node].p0 || pos >= nodes[node].p0 + nodes[node].n ||
            has_logits > 1 || (pc->recurrent && !sl))
            return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: checkpoint record %d is invalid", k);
        path_tokens(nodes, node, scratch);
        ud.leaf = node;
        int32_t held = 0;
        const pc_rows src = { 0, file_rows, &ud };
        pc_node *end = pc_insert_path(pc, &src, scratch, pos + 1, &held);
        pcache_ckpt *ck = end ? pcache_ckpt_new(pc, has_logits) : NULL;
        if (!ck) {   /* out of budget: the file is fine, the cache just keeps less */
            if (end) pc_unpin_path(end);
            continue;
        }
        if (ck->snap) {
            recur_snapshot *s = NULL;
            const recur_status st = recur_snapshot_load(pc->ctx, snap, (size_t)sl, &s, err, err_len);
            if (st || recur_snapshot_pos(s) != pos) {
                recur_snapshot_free(s);
                pc_unpin_path(end);
                pc_ckpt_free(pc, ck);
                return st ? st : rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: checkpoint %d at the wrong position", k);
            }
            recur_snapshot_free(ck->snap);
            ck->snap = s;
        }
        if (lg) memcpy(ck->logits, lg, (size_t)pc->n_vocab * sizeof(float));
        pc_attach(pc, end, scratch, pos, ck, flags);
    }
    return RECUR_OK;
}

static recur_status check_header(pcache *pc, const unsigned char *p, size_t len, int32_t *n_nodes, int32_t *n_ck,
                                 char *err, size_t err_len) {
    if (len < PCF_HEADER + 8 || memcmp(p, pcf_magic, 8))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: not a recur cache file");
    uint32_t ver;
    uint64_t mid, rb, sb, sum;
    int32_t nv;
    memcpy(&ver, p + 8, 4);
    memcpy(&mid, p + 16, 8);
    memcpy(&rb, p + 24, 8);
    memcpy(&sb, p + 32, 8);
    memcpy(&nv, p + 40, 4);
    memcpy(n_nodes, p + 44, 4);
    memcpy(n_ck, p + 48, 4);
    memcpy(&sum, p + len - 8, 8);
    if (ver != PCF_VERSION) return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: version %u, expected %d", ver, PCF_VERSION);
    if (XXH3_64bits(p, len - 8) != sum) return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: checksum mismatch");
    if (mid != recur_ctx_state_id(pc->ctx) || rb != pc->row_bytes || sb != pc->snap_bytes || nv != pc->n_vocab)
        return rc_fail(err, err_len, RECUR_E_INVALID, "pcache file: written for another model (%016llx)",
                       (unsigned long long)mid);
    if (*n_nodes < 0 || *n_ck < 0 || (size_t)*n_nodes > len / 8 || (size_t)*n_ck > len / 24)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: record counts are invalid");
    return RECUR_OK;
}

static unsigned char *read_all(const char *path, size_t *len, char *err, size_t err_len, recur_status *st) {
    FILE *f = fopen(path, "rb");
    unsigned char *buf = NULL;
    *st = RECUR_OK;
    if (!f) { *st = rc_fail(err, err_len, RECUR_E_IO, "cannot open %s: %s", path, strerror(errno)); return NULL; }
    if (fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n)) && fread(buf, 1, (size_t)n, f) == (size_t)n)
            *len = (size_t)n;
        else if (n >= 0) { free(buf); buf = NULL; }
    }
    fclose(f);
    if (!buf) *st = rc_fail(err, err_len, RECUR_E_IO, "cannot read %s", path);
    return buf;
}

recur_status pcache_read(pcache *pc, const char *path, recur_token **deepest, int32_t *n_deepest, size_t *bytes,
                         char *err, size_t err_len) {
    if (deepest) *deepest = NULL;
    if (n_deepest) *n_deepest = 0;
    size_t len = 0;
    recur_status st;
    unsigned char *buf = read_all(path, &len, err, err_len, &st);
    if (!buf) return st;
    int32_t n_nodes = 0, n_ck = 0;
    st = check_header(pc, buf, len, &n_nodes, &n_ck, err, err_len);
    pcf_in in = { buf, len - 8, PCF_HEADER, true };
    pcf_node *nodes = st ? NULL : calloc((size_t)n_nodes + 1, sizeof *nodes);
    if (!st && !nodes) st = rc_fail(err, err_len, RECUR_E_NOMEM, "pcache file: out of memory");
    if (!st) st = read_nodes(pc, &in, nodes, n_nodes, err, err_len);
    int32_t longest = -1, n_long = 0;
    for (int32_t i = 0; !st && i < n_nodes; i++)
        if (nodes[i].p0 + nodes[i].n > n_long) { n_long = nodes[i].p0 + nodes[i].n; longest = i; }
    recur_token *scratch = st ? NULL : malloc(((size_t)n_long + 1) * sizeof *scratch);
    if (!st && !scratch) st = rc_fail(err, err_len, RECUR_E_NOMEM, "pcache file: out of memory");
    pc->clock++;
    if (!st) st = read_into(pc, &in, nodes, n_nodes, n_ck, scratch, err, err_len);
    if (!st && in.at != in.len) st = rc_fail(err, err_len, RECUR_E_FORMAT, "pcache file: %zu bytes after the records", in.len - in.at);
    if (!st && deepest && longest >= 0) {
        path_tokens(nodes, longest, scratch);
        *deepest = scratch;
        *n_deepest = n_long;
        scratch = NULL;
    }
    if (bytes) *bytes = st ? 0 : len;
    free(scratch);
    free(nodes);
    free(buf);
    return st;
}
