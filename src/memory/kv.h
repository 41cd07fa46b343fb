/* kv.h — attention KV cells shared by the sequences of one context.
 *
 * Invariants:
 *  1. A cell holds, for every attention layer, one K row and one V row (F16) of the token at
 *     position `pos`, and the set of sequences that use it (a bit mask: n_seq_max <= 64).
 *     Rows are stored head by head: a layer's K is [n_head_kv][n_cells][head dim], so a KV
 *     head's keys of consecutive cells are one contiguous stream (decode attention walks a
 *     head over every position; 256-byte pieces 2 KiB apart read at a third of the speed).
 *     seq_cp shares cells (the mask gains a bit); a cell with an empty mask is free.
 *  2. Each sequence maps positions 0 .. n_pos-1 to cells (-1 = no cell). A sequence's
 *     positions are read in increasing order by attention, so the reduction order over the
 *     context never depends on where cells were placed.
 *  3. Only kv_cell_alloc, kv_seq_rm, kv_seq_cp and kv_seq_keep change the cells; a caller plans
 *     first (kv_n_free) and then applies, so a failing batch changes nothing.
 *
 * States of a cell:  free --alloc(seq,pos)--> used{seq} --cp--> used{seq,seq2} --rm all--> free
 */
#ifndef RECUR_MEMORY_KV_H
#define RECUR_MEMORY_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

#define KV_MAX_SEQ 64

typedef struct kv_cache kv_cache;

typedef struct kv_params {
    int      n_layer;     /* attention layers that store K/V */
    int64_t  n_embd_k;    /* K row length (n_head_kv * head_dim_k) */
    int64_t  n_embd_v;    /* V row length */
    int      n_head_kv;   /* heads each row splits into (divides n_embd_k and n_embd_v) */
    uint32_t n_cells;     /* cells in all; also the largest position + 1 of any sequence */
    uint32_t n_seq_max;   /* <= KV_MAX_SEQ */
} kv_params;

recur_status kv_new(const kv_params *p, kv_cache **out, char *err, size_t err_len);
void kv_free(kv_cache *kv);

uint32_t  kv_n_cells(const kv_cache *kv);
uint32_t  kv_n_free(const kv_cache *kv);
uint32_t  kv_n_seq_max(const kv_cache *kv);
recur_pos kv_seq_pos_max(const kv_cache *kv, recur_seq_id seq);      /* -1 when empty */
int32_t   kv_seq_cell(const kv_cache *kv, recur_seq_id seq, recur_pos pos);  /* -1 when none */

/* Cells used by seq and no other sequence (freed if seq were removed). */
uint32_t  kv_seq_n_own(const kv_cache *kv, recur_seq_id seq);

/* Takes a free cell for (seq, pos); the caller checked kv_n_free and that pos is in range and
 * not yet mapped for seq. Returns the cell index. */
int32_t kv_cell_alloc(kv_cache *kv, recur_seq_id seq, recur_pos pos);

/* KV head h's part of a cell's K / V row for attention layer il (n_embd_k / n_head_kv and
 * n_embd_v / n_head_kv F16 values). */
uint16_t *kv_k_head(kv_cache *kv, int il, int h, int32_t cell);
uint16_t *kv_v_head(kv_cache *kv, int il, int h, int32_t cell);
/* The same rows in bulk, for a loop over many positions (decode attention): seq's position ->
 * cell map (-1: no cell; positions 0 .. kv_n_cells - 1; NULL for a seq out of range), valid
 * until the cells next change (invariant 3); and KV head h's rows of layer il, cell c's at
 * [c * head dim] (invariant 1), so kv_k_head(kv, il, h, c) == kv_k_rows(kv, il, h) + c * dk. */
const int32_t *kv_seq_cells(const kv_cache *kv, recur_seq_id seq);
uint16_t      *kv_k_rows(kv_cache *kv, int il, int h);
uint16_t      *kv_v_rows(kv_cache *kv, int il, int h);

/* A cell's whole K row and V row of layer il, heads in order (n_embd_k and n_embd_v values),
 * copied out of / into the cache: the layout snapshots and the prompt cache keep. */
void kv_rows_get(const kv_cache *kv, int il, int32_t cell, void *k, void *v);
void kv_rows_set(kv_cache *kv, int il, int32_t cell, const void *k, const void *v);

/* Sequence ops (p0 < 0 = 0, p1 < 0 = infinity); seq < 0 in kv_seq_rm means every sequence. */
recur_status kv_seq_rm(kv_cache *kv, recur_seq_id seq, recur_pos p0, recur_pos p1);
recur_status kv_seq_cp(kv_cache *kv, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1);
recur_status kv_seq_keep(kv_cache *kv, recur_seq_id seq);

/* Debug check of the invariants; returns false (and says why in err) on a violation. */
bool kv_check(const kv_cache *kv, char *err, size_t err_len);

#endif
