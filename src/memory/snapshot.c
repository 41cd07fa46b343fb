/* snapshot.c — snapshots of one sequence: copies in and out of kv / rs, and the byte format
 * (see snapshot.h for the invariants and the layout). */
#include "memory/snapshot.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/alloc.h"
#include "core/err.h"

static const char snap_magic[8] = { 'R', 'E', 'C', 'U', 'R', 'S', 'N', 'P' };

static bool kind_ok(recur_snapshot_kind k) { return k == RECUR_SNAP_CHECKPOINT || k == RECUR_SNAP_SEQUENCE; }

static int64_t kv_row_vals(const snap_layout *l) { return (int64_t)l->n_layer_kv * (l->n_embd_k + l->n_embd_v); }

/* Payload bytes of a snapshot at pos. */
static size_t payload_bytes(const snap_layout *l, recur_snapshot_kind kind, recur_pos pos) {
    size_t n = (size_t)l->rs_floats * sizeof(float);
    /* widened before + 1: a file's pos may be INT32_MAX (snap_load compares before it checks
     * pos against the context) */
    if (kind == RECUR_SNAP_SEQUENCE) n += ((size_t)pos + 1) * (size_t)kv_row_vals(l) * sizeof(uint16_t);
    return n;
}

size_t snap_size(const snap_layout *l, recur_snapshot_kind kind, recur_pos pos) {
    if (!kind_ok(kind) || pos < 0 || (kind == RECUR_SNAP_SEQUENCE && (uint32_t)pos >= l->n_ctx)) return 0;
    return SNAP_HEADER_BYTES + payload_bytes(l, kind, pos) + sizeof(uint64_t);
}

recur_snapshot *snap_new(const snap_layout *l, recur_snapshot_kind kind, recur_pos max_pos) {
    if (!kind_ok(kind)) return NULL;
    recur_snapshot *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->l = *l;
    s->kind = kind;
    s->pos = -1;
    s->max_pos = kind == RECUR_SNAP_SEQUENCE ? max_pos : -1;
    s->rs = rc_calloc_aligned((size_t)l->rs_floats * sizeof(float) + 64);
    if (kind == RECUR_SNAP_SEQUENCE)
        s->kv = rc_calloc_aligned((size_t)(max_pos + 1) * (size_t)kv_row_vals(l) * sizeof(uint16_t) + 64);
    if (!s->rs || (kind == RECUR_SNAP_SEQUENCE && !s->kv)) {
        recur_snapshot_free(s);
        return NULL;
    }
    return s;
}

void recur_snapshot_free(recur_snapshot *s) {
    if (!s) return;
    rc_free_aligned(s->rs);
    rc_free_aligned(s->kv);
    free(s);
}

recur_snapshot_kind recur_snapshot_kind_of(const recur_snapshot *s) { return s->kind; }
recur_pos recur_snapshot_pos(const recur_snapshot *s) { return s->pos; }
uint64_t recur_snapshot_model_id(const recur_snapshot *s) { return s->l.model_id; }

size_t recur_snapshot_bytes(const recur_snapshot *s) {
    return s->pos < 0 ? 0 : SNAP_HEADER_BYTES + payload_bytes(&s->l, s->kind, s->pos) + sizeof(uint64_t);
}

static bool layout_eq(const snap_layout *a, const snap_layout *b) {
    return a->model_id == b->model_id && a->rs_floats == b->rs_floats && a->n_layer_kv == b->n_layer_kv &&
           a->n_embd_k == b->n_embd_k && a->n_embd_v == b->n_embd_v;
}

recur_status snap_check_model(const recur_snapshot *s, const snap_layout *l, char *err, size_t err_len) {
    if (!s) return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: NULL");
    if (!layout_eq(&s->l, l))
        return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: made for model %016llx, not this one (%016llx)",
                       (unsigned long long)s->l.model_id, (unsigned long long)l->model_id);
    return RECUR_OK;
}

/* ---- copies between a snapshot and the context's memory ---------------------------------- */

void snap_put_kv(recur_snapshot *s, kv_cache *kv, recur_seq_id seq, recur_pos pos) {
    const int64_t nk = s->l.n_embd_k, nv = s->l.n_embd_v;
    uint16_t *row = s->kv;
    for (recur_pos p = 0; p <= pos; p++) {
        const int32_t cell = kv_seq_cell(kv, seq, p);
        for (int il = 0; il < s->l.n_layer_kv; il++) {
            kv_rows_get(kv, il, cell, row, row + nk);
            row += nk + nv;
        }
    }
}

void snap_take(recur_snapshot *s, kv_cache *kv, rs_state *rs, recur_seq_id seq, recur_pos pos) {
    if (rs) memcpy(s->rs, rs_seq_state(rs, seq), (size_t)s->l.rs_floats * sizeof(float));
    if (kv && s->kind == RECUR_SNAP_SEQUENCE) snap_put_kv(s, kv, seq, pos);
    s->pos = pos;
}

/* Re-creates seq's cells for positions 0..pos from the snapshot rows (seq holds no cell). */
static void kv_fill(const recur_snapshot *s, kv_cache *kv, recur_seq_id seq) {
    const int64_t nk = s->l.n_embd_k, nv = s->l.n_embd_v;
    const uint16_t *row = s->kv;
    for (recur_pos p = 0; p <= s->pos; p++) {
        const int32_t cell = kv_cell_alloc(kv, seq, p);
        for (int il = 0; il < s->l.n_layer_kv; il++) {
            kv_rows_set(kv, il, cell, row, row + nk);
            row += nk + nv;
        }
    }
}

/* The checks of snap_restore; changes nothing. */
static recur_status restore_plan(const recur_snapshot *s, kv_cache *kv, recur_seq_id seq, char *err,
                                 size_t err_len) {
    if (s->pos < 0) return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: restore of an empty snapshot");
    if (!kv) return RECUR_OK;
    if (s->kind == RECUR_SNAP_SEQUENCE) {
        const uint32_t need = (uint32_t)s->pos + 1, have = kv_n_free(kv) + kv_seq_n_own(kv, seq);
        if (need > kv_n_cells(kv) || need > have)
            return rc_fail(err, err_len, RECUR_E_FULL, "snapshot: restore needs %u cells, %u are free (of %u)", need,
                           have, kv_n_cells(kv));
        return RECUR_OK;
    }
    for (recur_pos p = 0; p <= s->pos; p++)
        if (kv_seq_cell(kv, seq, p) < 0)
            return rc_fail(err, err_len, RECUR_E_STATE,
                           "snapshot: checkpoint at %d needs seq %d's attention cell at position %d", s->pos, seq, p);
    return RECUR_OK;
}

recur_status snap_restore(const recur_snapshot *s, kv_cache *kv, rs_state *rs, recur_seq_id seq, char *err,
                          size_t err_len) {
    const recur_status st = restore_plan(s, kv, seq, err, err_len);
    if (st) return st;
    if (kv && s->kind == RECUR_SNAP_SEQUENCE) {
        kv_seq_rm(kv, seq, -1, -1);
        kv_fill(s, kv, seq);
    } else if (kv) {
        kv_seq_rm(kv, seq, s->pos + 1, -1);
    }
    if (rs) rs_seq_set(rs, seq, s->rs, s->pos);
    return RECUR_OK;
}

/* ---- bytes ------------------------------------------------------------------------------- */

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }

size_t recur_snapshot_save(const recur_snapshot *s, void *buf, size_t cap) {
    const size_t total = recur_snapshot_bytes(s);
    if (!total || cap < total) return 0;
    unsigned char *p = buf;
    memset(p, 0, SNAP_HEADER_BYTES);
    memcpy(p, snap_magic, 8);
    put_u32(p + 8, SNAP_VERSION);
    put_u32(p + 12, (uint32_t)s->kind);
    put_u64(p + 16, s->l.model_id);
    put_u32(p + 24, (uint32_t)s->pos);
    put_u32(p + 28, (uint32_t)s->l.n_layer_kv);
    put_u64(p + 32, (uint64_t)s->l.rs_floats);
    put_u32(p + 40, (uint32_t)s->l.n_embd_k);
    put_u32(p + 44, (uint32_t)s->l.n_embd_v);
    const size_t rs_bytes = (size_t)s->l.rs_floats * sizeof(float), pay = payload_bytes(&s->l, s->kind, s->pos);
    put_u64(p + 48, pay);
    memcpy(p + SNAP_HEADER_BYTES, s->rs, rs_bytes);
    if (s->kind == RECUR_SNAP_SEQUENCE) memcpy(p + SNAP_HEADER_BYTES + rs_bytes, s->kv, pay - rs_bytes);
    put_u64(p + SNAP_HEADER_BYTES + pay, XXH3_64bits(p, SNAP_HEADER_BYTES + pay));
    return total;
}

/* Checks the framing of a serialized snapshot: magic, version, kind, sizes, checksum. */
static recur_status load_frame(const unsigned char *p, size_t len, char *err, size_t err_len) {
    if (len < SNAP_HEADER_BYTES + 8)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: %zu bytes, shorter than a header", len);
    if (memcmp(p, snap_magic, 8) != 0) return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: bad magic at offset 0");
    if (get_u32(p + 8) != SNAP_VERSION)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: version %u at offset 8, expected %d", get_u32(p + 8),
                       SNAP_VERSION);
    const uint32_t kind = get_u32(p + 12);
    const int32_t pos = (int32_t)get_u32(p + 24);
    if (!kind_ok((recur_snapshot_kind)kind) || pos < 0)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: kind %u (offset 12) or position %d (offset 24) invalid",
                       kind, pos);
    const uint64_t pay = get_u64(p + 48);
    if (pay != len - SNAP_HEADER_BYTES - 8)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: payload of %llu bytes (offset 48) but %zu bytes given",
                       (unsigned long long)pay, len);
    if (XXH3_64bits(p, len - 8) != get_u64(p + len - 8))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: checksum mismatch (offset %zu)", len - 8);
    return RECUR_OK;
}

recur_status snap_load(const snap_layout *l, const void *buf, size_t len, recur_snapshot **out, char *err,
                       size_t err_len) {
    *out = NULL;
    const unsigned char *p = buf;
    recur_status st = buf ? load_frame(p, len, err, err_len) : rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: NULL");
    if (st) return st;
    const snap_layout got = { get_u64(p + 16), (int64_t)get_u64(p + 32), (int32_t)get_u32(p + 28),
                              get_u32(p + 40), get_u32(p + 44), l->n_ctx };
    if (got.model_id != l->model_id)
        return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: made for model %016llx, not this one (%016llx)",
                       (unsigned long long)got.model_id, (unsigned long long)l->model_id);
    const recur_snapshot_kind kind = (recur_snapshot_kind)get_u32(p + 12);
    const recur_pos pos = (recur_pos)get_u32(p + 24);
    if (!layout_eq(&got, l) || get_u64(p + 56) != 0 || get_u64(p + 48) != payload_bytes(l, kind, pos))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "snapshot: sizes (offsets 28..56) disagree with the model");
    /* checkpoints too: no context decodes at a position >= its n_ctx, and a restored position
     * of INT32_MAX would overflow the next position (pos_max + 1) */
    if ((uint32_t)pos >= l->n_ctx)
        return rc_fail(err, err_len, RECUR_E_FULL, "snapshot: position %d beyond the context (%u)", pos, l->n_ctx);
    recur_snapshot *s = snap_new(l, kind, pos);
    if (!s) return rc_fail(err, err_len, RECUR_E_NOMEM, "snapshot: out of memory");
    const size_t rs_bytes = (size_t)l->rs_floats * sizeof(float);
    memcpy(s->rs, p + SNAP_HEADER_BYTES, rs_bytes);
    if (kind == RECUR_SNAP_SEQUENCE)
        memcpy(s->kv, p + SNAP_HEADER_BYTES + rs_bytes, payload_bytes(l, kind, pos) - rs_bytes);
    s->pos = pos;
    *out = s;
    return RECUR_OK;
}
