/* pcache_evict.c — the prompt cache's budget: reservations, and eviction by value (tokens of
 * recompute an entry saves divided by 1 + its age), protected entries last (pcache.h, 3-5). */
#include "cache/pcache_internal.h"

#include <stdlib.h>
#include <string.h>

void pc_release(pcache *pc, size_t b) { pc->bytes -= (int64_t)b; }

void pc_ckpt_free(pcache *pc, pcache_ckpt *ck) {
    if (ck->node) {
        pcache_ckpt **at = &ck->node->ck;
        while (*at != ck) at = &(*at)->next;
        *at = ck->next;
        pc->st.n_ckpt--;
    }
    recur_snapshot_free(ck->snap);
    free(ck->logits);
    pc_release(pc, ck->bytes);
    free(ck);
}

void pc_node_free(pcache *pc, pc_node *nd) {
    while (nd->ck) pc_ckpt_free(pc, nd->ck);
    pc_node **link = &nd->parent->kids;
    while (*link != nd) link = &(*link)->sib;
    *link = nd->sib;
    if (nd->all_prev) nd->all_prev->all_next = nd->all_next;
    else pc->all = nd->all_next;
    if (nd->all_next) nd->all_next->all_prev = nd->all_prev;
    pc->st.n_nodes--;
    pc->st.n_tokens -= nd->n;
    pc_release(pc, pc_node_bytes(pc, nd->n));
    free(nd->tok);
    free(nd->kv);
    free(nd);
}

static double age_weight(const pcache *pc, uint64_t used) { return 1.0 / (1.0 + (double)(pc->clock - used)); }

/* Position of the deepest checkpoint on ck's path before it, -1 when none. */
static recur_pos prev_ckpt_pos(const pcache_ckpt *ck) {
    recur_pos best = -1;
    for (const pcache_ckpt *c = ck->node->ck; c != ck; c = c->next) best = c->pos;
    for (const pc_node *nd = ck->node->parent; best < 0 && nd; nd = nd->parent)
        for (const pcache_ckpt *c = nd->ck; c; c = c->next) best = c->pos;
    return best;
}

static double ckpt_value(const pcache *pc, const pcache_ckpt *ck) {
    const double saved = pc->recurrent ? (double)(ck->pos - prev_ckpt_pos(ck)) : 1.0;
    return saved * age_weight(pc, ck->used);
}

/* The last turn of a conversation (the deepest checkpoint of a leaf) and a system prefix. */
static bool ckpt_protected(const pcache_ckpt *ck) {
    return (ck->flags & PCACHE_SYSTEM) || (!ck->node->kids && !ck->next);
}

/* Rows of a leaf are worth their tokens — with recurrent layers only when a checkpoint there
 * makes them restorable. */
static double leaf_value(const pcache *pc, const pc_node *nd) {
    const double saved = pc->recurrent && !nd->ck ? 0.0 : (double)nd->n;
    return saved * age_weight(pc, nd->used);
}

typedef struct victim {
    pc_node     *leaf;
    pcache_ckpt *ck;
    double       value;
    bool         prot;
} victim;

/* v becomes (leaf or ck) when that is a better victim: unprotected first, then least value. */
static void consider(victim *v, pc_node *leaf, pcache_ckpt *ck, double value, bool prot) {
    const bool better = !v->leaf && !v->ck ? true : prot != v->prot ? !prot : value < v->value;
    if (better) *v = (victim){ leaf, ck, value, prot };
}

static bool evict_one(pcache *pc) {
    victim v = { 0 };
    for (pc_node *nd = pc->all; nd; nd = nd->all_next) {
        if (!nd->kids && nd->pin == 0) {
            bool prot = false;
            for (const pcache_ckpt *c = nd->ck; c; c = c->next) prot |= ckpt_protected(c);
            consider(&v, nd, NULL, leaf_value(pc, nd), prot);
        }
        for (pcache_ckpt *c = nd->ck; c; c = c->next) consider(&v, NULL, c, ckpt_value(pc, c), ckpt_protected(c));
    }
    if (v.ck) {
        if (pc->p.log) fprintf(pc->p.log, "pcache: checkpoint evicted at %d (%zu bytes)\n", v.ck->pos, v.ck->bytes);
        pc->st.ckpt_evicted++;
        pc_ckpt_free(pc, v.ck);
        return true;
    }
    if (v.leaf) {
        if (pc->p.log)
            fprintf(pc->p.log, "pcache: tokens [%d, %d) evicted (%zu bytes, %s checkpoints)\n", v.leaf->p0,
                    v.leaf->p0 + v.leaf->n, pc_node_bytes(pc, v.leaf->n), v.leaf->ck ? "with" : "no");
        for (const pcache_ckpt *c = v.leaf->ck; c; c = c->next) pc->st.ckpt_evicted++;
        pc->st.nodes_evicted++;
        pc_node_free(pc, v.leaf);
        return true;
    }
    return false;
}

bool pc_reserve(pcache *pc, size_t b) {
    if (pc->p.budget_bytes >= 0) {
        if ((int64_t)b > pc->p.budget_bytes) return false;
        while (pc->bytes + (int64_t)b > pc->p.budget_bytes)
            if (!evict_one(pc)) return false;
    }
    pc->bytes += (int64_t)b;
    return true;
}

void pc_limit_path(pcache *pc, pc_node *nd, const pcache_ckpt *keep) {
    for (;;) {
        int32_t n = 0;
        victim v = { 0 };
        for (pc_node *p = nd; p; p = p->parent)
            for (pcache_ckpt *c = p->ck; c; c = c->next) {
                n++;
                if (c != keep) consider(&v, NULL, c, ckpt_value(pc, c), ckpt_protected(c));
            }
        if (n <= pc->p.max_ckpt_path || !v.ck) return;
        if (pc->p.log)
            fprintf(pc->p.log, "pcache: checkpoint evicted at %d (%zu bytes): more than %d on its path\n", v.ck->pos,
                    v.ck->bytes, pc->p.max_ckpt_path);
        pc->st.ckpt_evicted++;
        pc_ckpt_free(pc, v.ck);
    }
}
