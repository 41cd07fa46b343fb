/* pcache.c — the prompt cache's tree: lookup of the deepest restorable point, restore into a
 * sequence, insertion of token paths with their K/V rows, and checkpoints (see pcache.h). */
#include "cache/pcache_internal.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "core/err.h"

size_t pc_node_bytes(const pcache *pc, int32_t n) {
    return sizeof(pc_node) + (size_t)n * (sizeof(recur_token) + pc->row_bytes);
}

recur_status pcache_new(recur_ctx *ctx, const pcache_params *p, pcache **out, char *err, size_t err_len) {
    *out = NULL;
    pcache *pc = calloc(1, sizeof *pc);
    if (!pc) return rc_fail(err, err_len, RECUR_E_NOMEM, "pcache: out of memory");
    pc->ctx = ctx;
    pc->p = *p;
    pc->row_bytes = recur_ctx_kv_row_bytes(ctx);
    pc->snap_bytes = recur_snapshot_size(ctx, RECUR_SNAP_CHECKPOINT, 0);
    pc->recurrent = recur_model_state_bytes(recur_ctx_model(ctx)) > 0;
    if (!pc->recurrent) pc->snap_bytes = 0;
    pc->n_vocab = recur_model_n_vocab(recur_ctx_model(ctx));
    pc->st.budget = p->budget_bytes;
    *out = pc;
    return RECUR_OK;
}

void pcache_free(pcache *pc) {
    if (!pc) return;
    while (pc->all) {   /* leaves first, so every free unlinks a leaf */
        pc_node *nd = pc->all;
        while (nd->kids) nd = nd->kids;
        pc_node_free(pc, nd);
    }
    free(pc);
}

void pcache_stats_get(const pcache *pc, pcache_stats *out) {
    *out = pc->st;
    out->bytes = pc->bytes;
}

static uint64_t prefix_hash(const recur_token *tok, recur_pos pos) {
    return XXH3_64bits(tok, (size_t)(pos + 1) * sizeof *tok);
}

static pc_node *find_kid(pc_node *nd, recur_token t) {
    for (pc_node *k = nd->kids; k; k = k->sib)
        if (k->tok[0] == t) return k;
    return NULL;
}

static int32_t common_len(const recur_token *a, int32_t na, const recur_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* ---- lookup and restore -------------------------------------------------------------------- */

/* Whether ck can serve a prompt of n tokens: the token after it must be evaluated, unless its
 * logits are cached for the last prompt token. */
static bool ck_usable(const pcache *pc, const pcache_ckpt *ck, int32_t n) {
    if (ck->pos == n - 1) return ck->logits != NULL;
    return ck->pos < n - 1 && (!pc->recurrent || ck->snap);
}

pcache_hit pcache_lookup(pcache *pc, const recur_token *tok, int32_t n) {
    pcache_hit h = { 0, 0, false, NULL };
    pc->clock++;
    pc_node *nd = &pc->root;
    int32_t d = 0;
    while (d < n) {
        pc_node *k = find_kid(nd, tok[d]);
        if (!k) break;
        const int32_t m = common_len(k->tok, k->n, tok + d, n - d);
        k->used = pc->clock;
        for (const pcache_ckpt *ck = k->ck; ck; ck = ck->next)
            if (ck->pos < d + m && ck_usable(pc, ck, n) && (!h.ck || ck->pos > h.ck->pos)) h.ck = ck;
        d += m;
        if (m < k->n) break;
        nd = k;
    }
    h.n_match = d;
    if (pc->recurrent) h.n_restore = h.ck ? h.ck->pos + 1 : 0;
    else h.n_restore = d < n ? d : n - 1;
    if (h.ck && h.ck->pos == n - 1 && h.ck->logits) {
        h.n_restore = n;
        h.logits = true;
    } else if (!pc->recurrent) {
        h.ck = NULL;
    }
    return h;
}

/* Appends the tree's rows of positions [from, to) along tok to seq. */
static recur_status put_rows(pcache *pc, recur_seq_id seq, const recur_token *tok, int32_t from, int32_t to,
                             char *err, size_t err_len) {
    pc_node *nd = &pc->root;
    int32_t d = 0;
    while (d < to) {
        pc_node *k = find_kid(nd, tok[d]);
        if (!k) return rc_fail(err, err_len, RECUR_E_STATE, "pcache: the path ends at %d, rows to %d needed", d, to);
        const int32_t a = from > k->p0 ? from : k->p0, b = to < k->p0 + k->n ? to : k->p0 + k->n;
        if (a < b) {
            const recur_status st = recur_seq_kv_put(pc->ctx, seq, a, b, k->kv + (size_t)(a - k->p0) * pc->row_bytes,
                                                     err, err_len);
            if (st) return st;
        }
        d = k->p0 + k->n;
        nd = k;
    }
    return RECUR_OK;
}

recur_status pcache_restore(pcache *pc, recur_seq_id seq, const recur_token *tok, int32_t n, const pcache_hit *h,
                            int32_t have, float *logits, char *err, size_t err_len) {
    pcache_ckpt *ck = (pcache_ckpt *)(uintptr_t)h->ck;
    const int32_t nr = h->logits ? n : h->n_restore;
    if (ck && prefix_hash(tok, ck->pos) != ck->hash)
        return rc_fail(err, err_len, RECUR_E_STATE, "pcache: prefix hash mismatch at position %d", ck->pos);
    const int32_t rows = h->logits ? n : nr;   /* rows 0 .. rows-1 end in the sequence */
    recur_status st = RECUR_OK;
    if (pc->recurrent) {
        if (have < rows) {
            recur_seq_rm(pc->ctx, seq, -1, -1);
            st = put_rows(pc, seq, tok, 0, rows, err, err_len);
        }
        if (!st && ck) st = recur_snapshot_restore(pc->ctx, ck->snap, seq, err, err_len);
    } else {
        const int32_t keep = have < rows ? have : rows;
        st = recur_seq_rm(pc->ctx, seq, keep, -1);
        if (!st) st = put_rows(pc, seq, tok, keep, rows, err, err_len);
    }
    if (st) return st;
    if (ck) {
        ck->used = pc->clock;
        pc->st.ckpt_restored++;
    }
    if (h->logits && logits) memcpy(logits, ck->logits, (size_t)pc->n_vocab * sizeof *logits);
    return RECUR_OK;
}

/* ---- insertion ----------------------------------------------------------------------------- */

static void link_all(pcache *pc, pc_node *nd) {
    nd->all_prev = NULL;
    nd->all_next = pc->all;
    if (pc->all) pc->all->all_prev = nd;
    pc->all = nd;
    pc->st.n_nodes++;
}

static bool rows_get(pcache *pc, const pc_rows *src, int32_t p0, int32_t p1, unsigned char *dst) {
    if (src->get) return !pc->row_bytes || src->get(src->ud, p0, p1, dst);
    return recur_seq_kv_get(pc->ctx, src->seq, p0, p1, dst, NULL, 0) == RECUR_OK;
}

/* A new leaf under parent for tok[d .. d + n), rows from src; NULL when out of budget. */
static pc_node *new_leaf(pcache *pc, pc_node *parent, const pc_rows *src, const recur_token *tok, int32_t d, int32_t n) {
    if (!pc_reserve(pc, pc_node_bytes(pc, n))) return NULL;
    pc_node *nd = calloc(1, sizeof *nd);
    if (nd) nd->tok = malloc((size_t)n * sizeof *nd->tok);
    if (nd && pc->row_bytes) nd->kv = malloc((size_t)n * pc->row_bytes);
    if (!nd || !nd->tok || (pc->row_bytes && !nd->kv) || !rows_get(pc, src, d, d + n, nd->kv)) {
        if (nd) { free(nd->tok); free(nd->kv); }
        free(nd);
        pc_release(pc, pc_node_bytes(pc, n));
        return NULL;
    }
    memcpy(nd->tok, tok + d, (size_t)n * sizeof *nd->tok);
    nd->p0 = d;
    nd->n = n;
    nd->used = pc->clock;
    nd->parent = parent;
    nd->sib = parent->kids;
    parent->kids = nd;
    link_all(pc, nd);
    pc->st.n_tokens += n;
    return nd;
}

/* Splits k after its first m tokens (0 < m < k->n): a new head node takes them (and their
 * checkpoints), k keeps the rest under it. Returns the head; NULL when out of budget. */
static pc_node *split(pcache *pc, pc_node *k, int32_t m) {
    if (!pc_reserve(pc, pc_node_bytes(pc, m))) return NULL;
    pc_node *h = calloc(1, sizeof *h);
    if (h) h->tok = malloc((size_t)m * sizeof *h->tok);
    if (h && pc->row_bytes) h->kv = malloc((size_t)m * pc->row_bytes);
    if (!h || !h->tok || (pc->row_bytes && !h->kv)) {
        if (h) { free(h->tok); free(h->kv); }
        free(h);
        pc_release(pc, pc_node_bytes(pc, m));
        return NULL;
    }
    const size_t rb = pc->row_bytes;
    memcpy(h->tok, k->tok, (size_t)m * sizeof *h->tok);
    if (rb) memcpy(h->kv, k->kv, (size_t)m * rb);
    memmove(k->tok, k->tok + m, (size_t)(k->n - m) * sizeof *k->tok);
    if (rb) memmove(k->kv, k->kv + (size_t)m * rb, (size_t)(k->n - m) * rb);
    /* shrinking never needs more memory; a failed shrink keeps the larger block */
    recur_token *t2 = realloc(k->tok, (size_t)(k->n - m) * sizeof *k->tok);
    if (t2) k->tok = t2;
    if (rb) {
        unsigned char *k2 = realloc(k->kv, (size_t)(k->n - m) * rb);
        if (k2) k->kv = k2;
    }
    h->p0 = k->p0;
    h->n = m;
    h->used = k->used;
    k->p0 += m;
    k->n -= m;
    pc_release(pc, (size_t)m * (sizeof(recur_token) + rb));   /* they moved to h */
    pcache_ckpt **tail = &h->ck;
    while (k->ck && k->ck->pos < k->p0) {   /* checkpoints before the cut move up */
        pcache_ckpt *c = k->ck;
        k->ck = c->next;
        c->next = NULL;
        c->node = h;
        *tail = c;
        tail = &c->next;
    }
    pc_node **link = &k->parent->kids;   /* h takes k's place among its siblings */
    while (*link != k) link = &(*link)->sib;
    *link = h;
    h->sib = k->sib;
    h->parent = k->parent;
    h->kids = k;
    k->sib = NULL;
    k->parent = h;
    link_all(pc, h);
    return h;
}

void pc_unpin_path(pc_node *nd) {
    for (; nd; nd = nd->parent) nd->pin--;
}

pc_node *pc_insert_path(pcache *pc, const pc_rows *src, const recur_token *tok, int32_t n, int32_t *held) {
    pc_node *nd = &pc->root;
    nd->pin++;
    int32_t d = 0;
    while (d < n) {
        pc_node *k = find_kid(nd, tok[d]);
        pc_node *next = NULL;
        if (!k) {
            next = new_leaf(pc, nd, src, tok, d, n - d);
            if (next) d = n;
        } else {
            const int32_t m = common_len(k->tok, k->n, tok + d, n - d);
            k->used = pc->clock;
            if (m == k->n || d + m == n) next = k;
            else {
                k->pin++;   /* the split must not evict it */
                next = split(pc, k, m);
                k->pin--;
            }
            if (next) d += m;
        }
        if (!next) break;
        next->pin++;
        nd = next;
    }
    *held = d;
    if (d < n) { pc_unpin_path(nd); return NULL; }
    return nd;
}

int32_t pcache_insert(pcache *pc, recur_seq_id seq, const recur_token *tok, int32_t n) {
    pc->clock++;
    int32_t held = 0;
    const pc_rows src = { seq, NULL, NULL };
    pc_node *nd = pc_insert_path(pc, &src, tok, n, &held);
    if (nd) pc_unpin_path(nd);
    return held;
}

/* ---- checkpoints --------------------------------------------------------------------------- */

pcache_ckpt *pcache_ckpt_new(pcache *pc, bool with_logits) {
    if (pc->p.max_ckpt_path <= 0) return NULL;
    const size_t b = sizeof(pcache_ckpt) + pc->snap_bytes + (with_logits ? (size_t)pc->n_vocab * sizeof(float) : 0);
    if (!pc_reserve(pc, b)) return NULL;
    pcache_ckpt *ck = calloc(1, sizeof *ck);
    if (ck && pc->recurrent) ck->snap = recur_snapshot_new(pc->ctx, RECUR_SNAP_CHECKPOINT, -1);
    if (ck && with_logits) ck->logits = malloc((size_t)pc->n_vocab * sizeof(float));
    if (!ck || (pc->recurrent && !ck->snap) || (with_logits && !ck->logits)) {
        if (ck) { recur_snapshot_free(ck->snap); free(ck->logits); free(ck); }
        pc_release(pc, b);
        return NULL;
    }
    ck->pos = -1;
    ck->bytes = b;
    return ck;
}

recur_snapshot *pcache_ckpt_snap(pcache_ckpt *ck) { return ck ? ck->snap : NULL; }

void pcache_ckpt_drop(pcache *pc, pcache_ckpt *ck) {
    if (ck) pc_ckpt_free(pc, ck);
}

/* The node on tok's path that holds position pos (the path exists). */
static pc_node *node_at(pcache *pc, const recur_token *tok, recur_pos pos) {
    pc_node *nd = &pc->root;
    while (nd->p0 + nd->n <= pos) {   /* the root holds [0, 0) */
        pc_node *k = find_kid(nd, tok[nd->p0 + nd->n]);
        if (!k) return NULL;
        nd = k;
    }
    return nd;
}

void pc_attach(pcache *pc, pc_node *end, const recur_token *tok, recur_pos pos, pcache_ckpt *ck, uint32_t flags) {
    pc_node *nd = node_at(pc, tok, pos);
    pcache_ckpt **at = &nd->ck;
    while (*at && (*at)->pos < pos) at = &(*at)->next;
    if (*at && (*at)->pos == pos) {   /* the same state is filed already */
        pcache_ckpt *old = *at;
        old->used = pc->clock;
        old->flags |= flags;
        if (old->logits || !ck->logits) {
            pc_unpin_path(end);
            pc_ckpt_free(pc, ck);
            return;
        }
        flags |= old->flags;
        pc_ckpt_free(pc, old);
        at = &nd->ck;
        while (*at && (*at)->pos < pos) at = &(*at)->next;
    }
    ck->pos = pos;
    ck->hash = prefix_hash(tok, pos);
    ck->flags = flags;
    ck->used = pc->clock;
    ck->node = nd;
    ck->next = *at;
    *at = ck;
    pc->st.n_ckpt++;
    pc->st.ckpt_created++;
    if (pc->p.log)
        fprintf(pc->p.log, "pcache: checkpoint created at %d (%zu bytes%s), cache %lld bytes\n", pos, ck->bytes,
                ck->logits ? ", with logits" : "", (long long)pc->bytes);
    pc_limit_path(pc, nd, ck);
    pc_unpin_path(end);
}

recur_status pcache_ckpt_commit(pcache *pc, recur_seq_id seq, const recur_token *tok, recur_pos pos,
                                pcache_ckpt *ck, const float *logits, uint32_t flags) {
    pc->clock++;
    int32_t held = 0;
    const pc_rows src = { seq, NULL, NULL };
    pc_node *end = pc_insert_path(pc, &src, tok, pos + 1, &held);
    if (!end) {
        if (pc->p.log) fprintf(pc->p.log, "pcache: checkpoint at %d dropped: its path does not fit (%d tokens held)\n",
                               pos, held);
        pc_ckpt_free(pc, ck);
        return RECUR_E_FULL;
    }
    if (ck->logits) memcpy(ck->logits, logits, (size_t)pc->n_vocab * sizeof *logits);
    pc_attach(pc, end, tok, pos, ck, flags);
    return RECUR_OK;
}
