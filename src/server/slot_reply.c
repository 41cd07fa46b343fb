/* slot_reply.c — after a response, the checkpoint where the client's copy of the reply will
 * diverge from the generated tokens (see slot.h). Scheduler thread, while it is idle. */
#include <string.h>

#include "server/slot.h"

static int32_t lcp(const recur_token *a, int32_t na, const recur_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Evaluates tok[from .. d) on seq (which holds tok[0 .. from) with its exact state) in chunks,
 * capturing the state after d - 1 into snap with the last one. false when stopped (a request
 * waits) or failed. */
static bool reply_eval(const slot_env *env, recur_seq_id seq, const recur_token *tok, int32_t from, int32_t d,
                       recur_snapshot *snap, const slot_scratch *b, bool (*stop)(void *), void *arg,
                       slot_reply_result *out) {
    const int32_t chunk = b->cap < SLOT_REPLY_CHUNK ? b->cap : SLOT_REPLY_CHUNK;
    for (int32_t p0 = from; p0 < d;) {
        if (stop && stop(arg)) { out->what = "given way to a request"; return false; }
        const int32_t n = d - p0 < chunk ? d - p0 : chunk;
        for (int32_t i = 0; i < n; i++) {
            b->tok[i] = tok[p0 + i];
            b->pos[i] = p0 + i;
            b->seq[i] = seq;
            b->want[i] = 0;
        }
        const recur_batch bt = { n, b->tok, b->pos, b->seq, b->want };
        recur_capture cap = { seq, d - 1, snap };
        char err[256];
        const recur_status st = p0 + n == d ? recur_decode_capture(env->ctx, &bt, &cap, 1, err, sizeof err)
                                            : recur_decode(env->ctx, &bt, err, sizeof err);
        if (st) { out->what = st == RECUR_E_FULL ? "no free cells" : "decode failed"; return false; }
        out->n_eval += n;
        p0 += n;
    }
    return true;
}

/* The slot's sequence copied into spare (cells shared), then brought back to h's checkpoint. */
static bool reply_branch(const slot *s, const slot_env *env, recur_seq_id spare, const recur_token *pred, int32_t d,
                         const pcache_hit *h, slot_reply_result *out) {
    char err[256];
    recur_seq_rm(env->ctx, spare, -1, -1);
    if (recur_seq_cp(env->ctx, s->id, spare, -1, -1)) { out->what = "the sequence could not be copied"; return false; }
    /* spare's cells 0 .. d-1 hold pred[0 .. d): only the state goes back */
    if (pcache_restore(env->pc, spare, pred, d + 1, h, d, NULL, err, sizeof err)) {
        out->what = "the restore failed";
        return false;
    }
    return true;
}

void slot_reply_derive(const slot *s, const slot_env *env, recur_seq_id spare, int32_t n_prompt,
                       const recur_token *pred, int32_t n_pred, const slot_scratch *b, bool (*stop)(void *),
                       void *arg, slot_reply_result *out) {
    *out = (slot_reply_result){ .d = -1, .what = "" };
    if (!env->pc || !env->recurrent) { out->what = "nothing to do: every prefix is restorable"; return; }
    if (spare < 0) { out->what = "no spare sequence"; return; }
    const int32_t d = out->d = lcp(s->cache, s->n_cache, pred, n_pred);
    if (d <= n_prompt) { out->what = "it diverges at or before the end of the prompt, where checkpoints are"; return; }
    if (d >= s->n_cache) { out->what = "it re-tokenizes as generated: the end-of-response checkpoint serves"; return; }
    if (d >= n_pred) { out->what = "the prediction ends inside the reply"; return; }
    pcache_hit h = pcache_lookup(env->pc, pred, d + 1);
    out->from = h.n_restore;
    if (h.n_restore >= d) { out->what = "a checkpoint is there already"; return; }
    pcache_ckpt *ck = pcache_ckpt_new(env->pc, false);
    recur_snapshot *snap = pcache_ckpt_snap(ck);
    if (!snap) { pcache_ckpt_drop(env->pc, ck); out->what = "no room for a checkpoint"; return; }
    h = pcache_lookup(env->pc, pred, d + 1);   /* again: making room may have evicted the first answer */
    out->from = h.n_restore;
    if (h.n_restore < n_prompt) { pcache_ckpt_drop(env->pc, ck); out->what = "the prompt's own checkpoint is gone"; return; }
    bool ok = reply_branch(s, env, spare, pred, d, &h, out) &&
              reply_eval(env, spare, s->cache, h.n_restore, d, snap, b, stop, arg, out);
    if (ok) {
        const size_t bytes = recur_snapshot_bytes(snap);
        ok = pcache_ckpt_commit(env->pc, spare, s->cache, d - 1, ck, NULL, 0) == RECUR_OK;   /* owns ck now */
        out->bytes = ok ? bytes : 0;
        out->what = ok ? "checkpoint derived" : "the cache could not hold it";
    } else {
        pcache_ckpt_drop(env->pc, ck);
    }
    recur_seq_rm(env->ctx, spare, -1, -1);   /* removing everything always succeeds; shared cells stay */
}
