/* pcache_internal.h — the tree and budget shared by pcache.c (structure, lookup, restore) and
 * pcache_evict.c (the budget and what leaves it first). Private to src/cache/. */
#ifndef RECUR_CACHE_PCACHE_INTERNAL_H
#define RECUR_CACHE_PCACHE_INTERNAL_H

#include "cache/pcache.h"

typedef struct pc_node pc_node;

struct pcache_ckpt {
    recur_pos       pos;        /* the state right after the token at pos */
    uint64_t        hash;       /* XXH3 of tokens 0 .. pos */
    recur_snapshot *snap;       /* NULL without recurrent layers */
    float          *logits;     /* [n_vocab] or NULL */
    uint32_t        flags;
    uint64_t        used;       /* clock of the last commit or restore */
    size_t          bytes;      /* what it counts in the budget */
    pc_node        *node;       /* NULL while pending (reserved, not filed) */
    pcache_ckpt    *next;       /* in its node, increasing pos */
};

struct pc_node {
    pc_node       *parent, *kids, *sib;
    pc_node       *all_prev, *all_next;   /* every node but the root, for eviction scans */
    int32_t        p0, n;                 /* tokens [p0, p0 + n) */
    recur_token   *tok;                   /* [n] */
    unsigned char *kv;                    /* [n][row_bytes], NULL when row_bytes == 0 */
    pcache_ckpt   *ck;                    /* sorted by pos */
    uint64_t       used;
    int32_t        pin;                   /* > 0: on a path being changed (never evicted) */
};

struct pcache {
    recur_ctx    *ctx;
    pcache_params p;
    size_t        row_bytes;     /* K/V bytes per token */
    size_t        snap_bytes;    /* one checkpoint snapshot (0 without recurrent layers) */
    int32_t       n_vocab;
    bool          recurrent;
    pc_node       root;
    pc_node      *all;           /* list head of every other node */
    int64_t       bytes;
    uint64_t      clock;
    pcache_stats  st;
};

/* Where new rows come from: a sequence of the context, or a function (a file being read). */
typedef struct pc_rows {
    recur_seq_id seq;                                                /* used when get is NULL */
    bool (*get)(void *ud, int32_t p0, int32_t p1, unsigned char *dst);   /* rows [p0, p1) */
    void        *ud;
} pc_rows;

size_t pc_node_bytes(const pcache *pc, int32_t n);
/* Extends the tree along tok[0 .. n) with rows from src; the node holding position n-1 (the
 * root for n == 0) pinned with its path (pc_unpin_path it), or NULL when the budget is too
 * small (nothing pinned). *held: the tokens on a path afterwards. */
pc_node *pc_insert_path(pcache *pc, const pc_rows *src, const recur_token *tok, int32_t n, int32_t *held);
void     pc_unpin_path(pc_node *nd);
/* Files a reserved checkpoint ck (snapshot filled, logits copied) at pos on tok's path, which
 * the tree holds (end: the pinned node of pc_insert_path). Unpins end. */
void     pc_attach(pcache *pc, pc_node *end, const recur_token *tok, recur_pos pos, pcache_ckpt *ck, uint32_t flags);
/* Makes room for b more bytes (evicting unpinned entries of least value) and counts them.
 * false (nothing changed but evictions) when that is impossible. */
bool   pc_reserve(pcache *pc, size_t b);
void   pc_release(pcache *pc, size_t b);
/* Frees a filed or pending checkpoint and its bytes (unlinks it from its node). */
void   pc_ckpt_free(pcache *pc, pcache_ckpt *ck);
/* Frees a leaf node and its checkpoints (unlinks it). */
void   pc_node_free(pcache *pc, pc_node *nd);
/* Keeps at most max_ckpt_path checkpoints on the path of nd (keep is never evicted). */
void   pc_limit_path(pcache *pc, pc_node *nd, const pcache_ckpt *keep);

#endif
