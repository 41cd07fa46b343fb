/* sched_ctl.c — the scheduler's slot actions (save, restore, erase: /slots/{id}?action=...),
 * answered on the scheduler thread between steps, and the --cache-dir file of the prompt
 * cache (loaded at start, written behind when idle and at exit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "server/sched_internal.h"

/* The state after the slot's last token into pc: a checkpoint (rows alone without recurrent
 * layers). false when pc cannot hold all of it. */
static bool sched_file_slot(sched *s, pcache *pc, slot *sl) {
    if (sl->n_cache == 0) return true;
    pcache_ckpt *ck = pcache_ckpt_new(pc, false);
    recur_snapshot *snap = pcache_ckpt_snap(ck);
    if (s->env.recurrent) {
        if (!snap || recur_snapshot_take(s->env.ctx, sl->id, snap, NULL, 0) != RECUR_OK) {
            pcache_ckpt_drop(pc, ck);
            return false;
        }
        return pcache_ckpt_commit(pc, sl->id, sl->cache, sl->n_cache - 1, ck, NULL, 0) == RECUR_OK;
    }
    pcache_ckpt_drop(pc, ck);
    return pcache_insert(pc, sl->id, sl->cache, sl->n_cache) == sl->n_cache;
}

/* The shared cache, or (cache off, or it cannot hold the slot) a private unlimited one. */
static recur_status sched_action_cache(sched *s, pcache **tmp, char *err, size_t err_len) {
    const pcache_params pp = { .budget_bytes = -1, .max_ckpt_path = s->p.ctx_checkpoints > 0 ? s->p.ctx_checkpoints : 32 };
    return pcache_new(s->env.ctx, &pp, tmp, err, err_len);
}

static recur_status sched_slot_save(sched *s, slot *sl, const char *path, sched_slot_result *r, char *err,
                                    size_t err_len) {
    pcache *pc = s->env.pc, *tmp = NULL;
    recur_status st = RECUR_OK;
    if (!pc || !sched_file_slot(s, pc, sl)) {
        if ((st = sched_action_cache(s, &tmp, err, err_len))) return st;
        pc = tmp;
        if (!sched_file_slot(s, pc, sl)) st = rc_fail(err, err_len, RECUR_E_NOMEM, "cannot take slot %d's state", sl->id);
    }
    if (!st) st = pcache_write(pc, sl->cache, sl->n_cache, path, &r->bytes, err, err_len);
    r->n_tokens = st ? 0 : sl->n_cache;
    pcache_free(tmp);
    return st;
}

static recur_status sched_slot_restore(sched *s, slot *sl, const char *path, sched_slot_result *r, char *err,
                                       size_t err_len) {
    pcache *pc = s->env.pc, *tmp = NULL;
    recur_status st = pc ? RECUR_OK : sched_action_cache(s, &tmp, err, err_len);
    if (st) return st;
    pc = pc ? pc : tmp;
    recur_token *tok = NULL;
    int32_t n = 0;
    st = pcache_read(pc, path, &tok, &n, &r->bytes, err, err_len);
    if (!st && n >= s->p.n_ctx_slot)
        st = rc_fail(err, err_len, RECUR_E_FULL, "the file holds %d tokens, a slot %d", n, s->p.n_ctx_slot);
    /* one token more than saved: then the saved state after the last one is a usable resume point */
    recur_token *ext = st ? NULL : realloc(tok, ((size_t)n + 1) * sizeof *tok);
    if (!st && !ext) st = rc_fail(err, err_len, RECUR_E_NOMEM, "out of memory");
    if (ext) { tok = ext; tok[n] = 0; }
    recur_seq_rm(s->env.ctx, sl->id, -1, -1);
    sl->n_cache = 0;
    if (!st && n > 0) {
        const pcache_hit h = pcache_lookup(pc, tok, n + 1);
        st = pcache_restore(pc, sl->id, tok, n + 1, &h, 0, NULL, err, err_len);
        if (st) recur_seq_rm(s->env.ctx, sl->id, -1, -1);
        else {
            memcpy(sl->cache, tok, (size_t)h.n_restore * sizeof *tok);
            sl->n_cache = h.n_restore;
        }
    }
    r->n_tokens = sl->n_cache;
    free(tok);
    pcache_free(tmp);
    return st;
}

/* Answers the posted slot action. mu held on entry and exit; released while working. */
void sched_do_ctl(sched *s) {
    struct sched_ctl c = s->ctl;
    pthread_mutex_unlock(&s->mu);
    const double t0 = slot_now_ms();
    slot *sl = &s->slots[c.id];
    c.res = (sched_slot_result){ 0 };
    c.err[0] = 0;
    if (sl->task) c.st = rc_fail(c.err, sizeof c.err, RECUR_E_STATE, "slot %d is busy", c.id);
    else if (c.op == SCHED_SLOT_SAVE) c.st = sched_slot_save(s, sl, c.path, &c.res, c.err, sizeof c.err);
    else if (c.op == SCHED_SLOT_RESTORE) c.st = sched_slot_restore(s, sl, c.path, &c.res, c.err, sizeof c.err);
    else {
        c.res.n_tokens = sl->n_cache;
        recur_seq_rm(s->env.ctx, sl->id, -1, -1);
        sl->n_cache = 0;
        c.st = RECUR_OK;
    }
    c.res.ms = slot_now_ms() - t0;
    fprintf(stderr, "slot %d: %s %s: %s, %d tokens, %zu bytes, %.1f ms\n", c.id,
            c.op == SCHED_SLOT_SAVE ? "save" : c.op == SCHED_SLOT_RESTORE ? "restore" : "erase", c.path ? c.path : "",
            c.st ? c.err : "ok", c.res.n_tokens, c.res.bytes, c.res.ms);
    pthread_mutex_lock(&s->mu);
    sched_publish_locked(s);
    s->ctl = c;
    s->ctl.pending = false;
    s->ctl.done = true;
    pthread_cond_broadcast(&s->ctl_cv);
}

recur_status sched_slot_action(sched *s, int32_t id, sched_slot_op op, const char *path, sched_slot_result *out,
                               char *err, size_t err_len) {
    if (id < 0 || id >= s->p.n_slots)
        return rc_fail(err, err_len, RECUR_E_INVALID, "id_slot %d out of range (0 .. %d)", id, s->p.n_slots - 1);
    pthread_mutex_lock(&s->mu);
    while (!s->quit && (s->ctl.pending || s->ctl.done)) pthread_cond_wait(&s->ctl_cv, &s->mu);
    if (s->quit) {
        pthread_mutex_unlock(&s->mu);
        return rc_fail(err, err_len, RECUR_E_STATE, "the server is shutting down");
    }
    s->ctl = (struct sched_ctl){ .pending = true, .id = id, .op = op, .path = path };
    pthread_cond_signal(&s->cv);
    while (!s->ctl.done && !s->quit) pthread_cond_wait(&s->ctl_cv, &s->mu);
    recur_status st = s->ctl.done ? s->ctl.st : RECUR_E_STATE;
    if (s->ctl.done) {
        *out = s->ctl.res;
        if (st) rc_fail(err, err_len, st, "%s", s->ctl.err);
    } else {
        rc_fail(err, err_len, st, "the server is shutting down");
    }
    s->ctl.done = s->ctl.pending = false;
    pthread_cond_broadcast(&s->ctl_cv);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* --cache-dir: the prompt cache's file, written when it changed (write-behind). */
static void sched_cache_file(const sched *s, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/prompt-cache.bin", s->p.cache_dir);
}

uint64_t sched_cache_sig(const sched *s) {
    pcache_stats ps;
    pcache_stats_get(s->env.pc, &ps);
    return ps.ckpt_created * 1000003u + ps.ckpt_evicted * 10007u + (uint64_t)ps.n_tokens + ps.nodes_evicted;
}

void sched_write_cache(sched *s) {
    if (!s->p.cache_dir || !s->env.pc || sched_cache_sig(s) == s->cache_gen) return;
    char path[4096], err[256];
    size_t bytes = 0;
    sched_cache_file(s, path, sizeof path);
    const double t0 = slot_now_ms();
    const recur_status st = pcache_write(s->env.pc, NULL, 0, path, &bytes, err, sizeof err);
    if (st) fprintf(stderr, "sched: prompt cache not written: %s\n", err);
    else fprintf(stderr, "sched: prompt cache written to %s (%zu bytes, %.1f ms)\n", path, bytes, slot_now_ms() - t0);
    s->cache_gen = sched_cache_sig(s);
}


/* --cache-dir: what an earlier run left (a missing file is a first start; a bad one is logged). */
void sched_load_cache(sched *s) {
    char path[4096], err[256];
    size_t bytes = 0;
    sched_cache_file(s, path, sizeof path);
    if (access(path, F_OK) != 0) return;
    const double t0 = slot_now_ms();
    const recur_status st = pcache_read(s->env.pc, path, NULL, NULL, &bytes, err, sizeof err);
    if (st) fprintf(stderr, "sched: prompt cache %s not loaded: %s\n", path, err);
    else fprintf(stderr, "sched: prompt cache loaded from %s (%zu bytes, %.1f ms)\n", path, bytes, slot_now_ms() - t0);
    s->cache_gen = sched_cache_sig(s);
}
