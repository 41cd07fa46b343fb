/* snapshot.h — the state of one sequence at one position, and its byte format (internal side
 * of recur_snapshot; the public contract is in recur.h).
 *
 * Invariants:
 *  1. rs holds l.rs_floats floats in the layout of one sequence of rs_state (rs.h invariant 3),
 *     so a capture or restore is a copy of the same offsets.
 *  2. kv (sequence snapshots only) holds max_pos + 1 position rows; row p is, for every
 *     attention layer in order, the K row (n_embd_k F16) then the V row (n_embd_v F16) of the
 *     token at position p. Rows 0..pos are valid; a prefix of positions is contiguous.
 *  3. pos == -1 (empty) until a capture, take or load succeeds; then the contents are exactly
 *     the sequence's memory after its token at pos.
 *
 * Byte format (little-endian): a 64-byte header
 *   0 magic "RECURSNP" | 8 version u32 | 12 kind u32 | 16 model id u64 | 24 pos i32 |
 *   28 n_layer_kv u32 | 32 rs_floats u64 | 40 n_embd_k u32 | 44 n_embd_v u32 |
 *   48 payload bytes u64 | 56 reserved u64 (0)
 * then the payload (rs floats, then kv rows 0..pos for a sequence snapshot), then an XXH3-64 of
 * every byte before it. */
#ifndef RECUR_MEMORY_SNAPSHOT_H
#define RECUR_MEMORY_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "memory/kv.h"
#include "memory/rs.h"
#include "recur.h"

#define SNAP_VERSION 1
#define SNAP_HEADER_BYTES 64

/* What a context's snapshots look like; two layouts must agree except n_ctx. */
typedef struct snap_layout {
    uint64_t model_id;
    int64_t  rs_floats;    /* recurrent floats per sequence (0 without recurrent layers) */
    int32_t  n_layer_kv;   /* attention layers (0 without) */
    int64_t  n_embd_k;     /* F16 values per K row */
    int64_t  n_embd_v;     /* F16 values per V row */
    uint32_t n_ctx;        /* positions of the context (a sequence snapshot's default reach) */
} snap_layout;

struct recur_snapshot {
    snap_layout          l;
    recur_snapshot_kind  kind;
    recur_pos            pos;       /* -1: empty */
    recur_pos            max_pos;   /* last position kv can hold (-1 for checkpoints) */
    float               *rs;        /* [l.rs_floats] */
    uint16_t            *kv;        /* [max_pos + 1][n_layer_kv][n_embd_k + n_embd_v] */
};

recur_snapshot *snap_new(const snap_layout *l, recur_snapshot_kind kind, recur_pos max_pos);
/* Serialized bytes of a snapshot of this layout, kind and position (0 when invalid). */
size_t snap_size(const snap_layout *l, recur_snapshot_kind kind, recur_pos pos);
/* RECUR_E_INVALID (with a message) unless s is non-NULL and of layout l's model. */
recur_status snap_check_model(const recur_snapshot *s, const snap_layout *l, char *err, size_t err_len);

/* Copies the K/V rows of seq at positions 0..pos from kv into s (every cell exists). */
void snap_put_kv(recur_snapshot *s, kv_cache *kv, recur_seq_id seq, recur_pos pos);
/* Takes the current state of seq (rs and/or kv may be NULL) at position pos. */
void snap_take(recur_snapshot *s, kv_cache *kv, rs_state *rs, recur_seq_id seq, recur_pos pos);
/* Plans, then restores s into seq (see recur_snapshot_restore); nothing changes on error. */
recur_status snap_restore(const recur_snapshot *s, kv_cache *kv, rs_state *rs, recur_seq_id seq, char *err,
                          size_t err_len);
/* Reads a serialized snapshot that must match layout l (see recur_snapshot_load). */
recur_status snap_load(const snap_layout *l, const void *buf, size_t len, recur_snapshot **out, char *err,
                       size_t err_len);

#endif
