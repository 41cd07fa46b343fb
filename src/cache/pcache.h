/* pcache.h — the shared prompt cache: a prefix tree over token ids that holds attention K/V rows
 * and checkpoints (the recurrent state right after a token, sometimes with that token's
 * logits), shared by every sequence of one context, within one byte budget.
 *
 * A request resumes from the deepest *restorable* point on its prompt's path: a checkpoint at
 * position p (the state after token p) whose rows 0..p the tree holds. Without recurrent layers
 * any prefix the tree holds is restorable (its rows are the whole memory). A checkpoint holding
 * the logits of the last prompt token makes an identical resend evaluate nothing.
 *
 * Invariants:
 *  1. Every node but the root holds n >= 1 tokens at positions [p0, p0 + n) and their K/V rows
 *     (recur_ctx_kv_row_bytes each); a child starts where its parent ends; siblings differ in
 *     their first token. A path from the root spells a token prefix.
 *  2. A checkpoint lives in the node that holds its position; its path (rows 0..pos) is in the
 *     tree, and it carries the XXH3 of tokens 0..pos, checked again on restore.
 *  3. bytes (every node, token, row, checkpoint and logits buffer, and the reservations of
 *     checkpoints being captured) never exceeds the budget: room is made (eviction) before
 *     anything is allocated, also while the tree is being split or extended.
 *  4. Eviction removes the entry of least value first — tokens of recompute it saves divided
 *     by (1 + its age in cache operations) — leaves and checkpoints only; the checkpoint at the
 *     end of a system prefix (PCACHE_SYSTEM) and the deepest checkpoint of every leaf (each
 *     conversation's last turn) go only when nothing else is left.
 *  5. At most max_ckpt_path checkpoints lie on one root-to-node path; a new one beyond that
 *     evicts the least valuable other one on its path.
 *
 * Not thread-safe: one owner (the scheduler thread) calls everything.
 */
#ifndef RECUR_CACHE_PCACHE_H
#define RECUR_CACHE_PCACHE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "recur.h"

typedef struct pcache pcache;
typedef struct pcache_ckpt pcache_ckpt;

enum { PCACHE_SYSTEM = 1u };   /* checkpoint flags */

typedef struct pcache_params {
    int64_t budget_bytes;      /* < 0: unlimited */
    int32_t max_ckpt_path;     /* checkpoints per path (--ctx-checkpoints); <= 0: none kept */
    FILE   *log;               /* one line per decision (created, evicted); NULL: silent */
} pcache_params;

/* A cache for ctx's model (ctx must outlive it). */
recur_status pcache_new(recur_ctx *ctx, const pcache_params *p, pcache **out, char *err, size_t err_len);
void         pcache_free(pcache *pc);

/* What the tree offers a prompt tok[0 .. n). */
typedef struct pcache_hit {
    int32_t            n_match;     /* prompt tokens on a tree path (their rows are held) */
    int32_t            n_restore;   /* tokens restorable: resume after token n_restore - 1; 0: none */
    bool               logits;      /* n_restore == n: the last token's logits are cached too */
    const pcache_ckpt *ck;          /* the checkpoint behind it (NULL: rows only) */
} pcache_hit;

/* The deepest restorable point for the prompt: never n tokens without logits (the last prompt
 * token must be evaluated to give the first sampled token). Touches the path (recency). */
pcache_hit pcache_lookup(pcache *pc, const recur_token *tok, int32_t n);

/* Puts hit h (from pcache_lookup of the same prompt, no cache call in between) into seq, whose
 * cells 0 .. have-1 already hold tok[0 .. have) (have = 0 when unknown; cells beyond are
 * dropped). Afterwards seq holds exactly tok[0 .. n_restore) with its exact state, and logits
 * (n_vocab floats, may be NULL) the cached logits when h->logits. On error (prefix hash
 * mismatch: RECUR_E_STATE; no cells: RECUR_E_FULL) seq may be changed: remove it. */
recur_status pcache_restore(pcache *pc, recur_seq_id seq, const recur_token *tok, int32_t n, const pcache_hit *h,
                            int32_t have, float *logits, char *err, size_t err_len);

/* Extends the tree along tok[0 .. n), which seq holds at positions 0 .. n-1 (its rows are
 * copied). Returns the tokens of tok now on a tree path (< n when the budget was too small). */
int32_t pcache_insert(pcache *pc, recur_seq_id seq, const recur_token *tok, int32_t n);

/* A checkpoint being made: its bytes are reserved now (evicting as needed); NULL when it cannot
 * fit, or when max_ckpt_path is 0. Capture into pcache_ckpt_snap (NULL for a model without
 * recurrent state: then the checkpoint only carries logits), then commit or drop it. */
pcache_ckpt    *pcache_ckpt_new(pcache *pc, bool with_logits);
recur_snapshot *pcache_ckpt_snap(pcache_ckpt *ck);
void            pcache_ckpt_drop(pcache *pc, pcache_ckpt *ck);
/* Files ck (its snapshot holds the state after tok[pos]; seq holds tok[0 .. pos] now, whose
 * rows are inserted first) with the logits of token pos when it was made with_logits (logits
 * must then be non-NULL). The cache owns ck afterwards, also on failure (dropped: RECUR_E_FULL
 * when its path does not fit). A checkpoint already at that place is kept instead unless the
 * new one adds logits. */
recur_status pcache_ckpt_commit(pcache *pc, recur_seq_id seq, const recur_token *tok, recur_pos pos,
                                pcache_ckpt *ck, const float *logits, uint32_t flags);

/* ---- on disk -------------------------------------------------------------------------------
 * A file holds tree nodes (tokens and K/V rows) and their checkpoints (snapshot bytes, logits),
 * for the model that wrote it (its id, row and state sizes, vocabulary), and an XXH3-64 of every
 * byte before it. Little-endian: a 64-byte header ("RECURPCF", version u32, 0 u32, model id u64,
 * row bytes u64, snapshot bytes u64, n_vocab i32, nodes i32, checkpoints i32, zeros), node
 * records (parent record i32 or -1, n i32, tokens, rows) in an order where a parent comes
 * first, checkpoint records (node i32, pos i32, flags u32, has logits u32, snapshot length u64,
 * recur_snapshot_save bytes, n_vocab F32 logits when it has them), the checksum.
 *
 * pcache_write writes the whole tree (tok NULL) or the path along tok[0 .. n) with every
 * checkpoint on it, to path.tmp, fsyncs and renames it over path (a reader sees the old file or
 * the new one, never a part). pcache_read checks everything (RECUR_E_FORMAT: corrupt or
 * truncated; RECUR_E_INVALID: another model's; RECUR_E_IO) before it changes the tree, then
 * merges the file into it within the budget (what does not fit is left out), and returns the
 * longest path's tokens (malloc'd) in *deepest when asked. */
recur_status pcache_write(pcache *pc, const recur_token *tok, int32_t n, const char *path, size_t *bytes, char *err,
                          size_t err_len);
recur_status pcache_read(pcache *pc, const char *path, recur_token **deepest, int32_t *n_deepest, size_t *bytes,
                         char *err, size_t err_len);

typedef struct pcache_stats {
    int64_t  bytes, budget;                  /* budget < 0: unlimited */
    int32_t  n_nodes, n_ckpt;
    int64_t  n_tokens;                       /* rows held */
    uint64_t ckpt_created, ckpt_restored, ckpt_evicted, nodes_evicted;
} pcache_stats;

void pcache_stats_get(const pcache *pc, pcache_stats *out);

#endif
