/* slot_ban.c — banned strings on a slot: the window of held tokens, the ring of checkpoints and
 * logits, and the rewind (see slot_ban.h for the step and the invariants). */
#include "server/slot_ban.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ban_tok {
    recur_token      tok;
    size_t           off;      /* where its bytes start in text */
    srv_token_probs *probs;    /* the event's, owned until released */
} ban_tok;

typedef struct ban_at {
    recur_pos   pos;
    recur_token tok;
} ban_at;

struct slot_ban {
    const srv_ban_cfg *cfg;    /* the running task's; NULL when idle */
    int32_t          rewinds;  /* since the last released token */
    bool             warned;   /* a rewind was impossible (logged once per task) */

    ban_tok         *win;      /* [win_cap] invariant 1 */
    int32_t          n_win, win_cap;
    recur_pos        pos0;
    char            *text;     /* [text_cap] */
    size_t           n_text, text_cap;

    ban_at          *bans;     /* [n_bans] invariant 3 */
    int32_t          n_bans, bans_cap;

    recur_snapshot **snap;     /* [ring_n] recurrent models only, else NULL entries */
    float           *logits;   /* [ring_n][n_vocab] */
    recur_pos       *rpos;     /* [ring_n] invariant 2 */
    int32_t          ring_n, ring_cap;
    float           *scratch;  /* [n_vocab] logits with the position's bans */
    char            *piece;    /* [piece_max] */
};

/* ---- lifetime ---------------------------------------------------------------------------------- */

void slot_ban_free(slot_ban *b) {
    if (!b) return;
    for (int32_t i = 0; i < b->n_win; i++) srv_token_probs_free(b->win[i].probs);
    for (int32_t i = 0; b->snap && i < b->ring_cap; i++) recur_snapshot_free(b->snap[i]);
    free(b->snap);
    free(b->win);
    free(b->text);
    free(b->bans);
    free(b->logits);
    free(b->rpos);
    free(b->scratch);
    free(b->piece);
    free(b);
}

bool slot_ban_active(const slot *s) { return s->ban && s->ban->cfg; }

void slot_ban_stop(slot *s) {
    slot_ban *b = s->ban;
    if (!b) return;
    for (int32_t i = 0; i < b->n_win; i++) srv_token_probs_free(b->win[i].probs);
    b->n_win = 0;
    b->n_text = 0;
    b->n_bans = 0;
    b->cfg = NULL;
}

/* Grows the ring to n entries (snapshots for recurrent models). */
static recur_status ban_grow_ring(slot_ban *b, const slot_env *env, int32_t n) {
    const bool grows = n > b->ring_cap;
    if (grows) {
        recur_snapshot **sn = realloc(b->snap, (size_t)n * sizeof *sn);
        if (!sn) return RECUR_E_NOMEM;
        b->snap = sn;
        for (int32_t i = b->ring_cap; i < n; i++) b->snap[i] = NULL;
        recur_pos *rp = realloc(b->rpos, (size_t)n * sizeof *rp);
        if (!rp) return RECUR_E_NOMEM;
        b->rpos = rp;
        float *lg = realloc(b->logits, (size_t)n * (size_t)env->n_vocab * sizeof *lg);
        if (!lg) return RECUR_E_NOMEM;
        b->logits = lg;
        b->ring_cap = n;
    }
    for (int32_t i = 0; env->recurrent && i < n; i++)
        if (!b->snap[i] && !(b->snap[i] = recur_snapshot_new(env->ctx, RECUR_SNAP_CHECKPOINT, -1))) return RECUR_E_NOMEM;
    if (grows)   /* worth a line: the ring is most of what bans cost */
        fprintf(stderr, "slot_ban: ring of %d positions: %zu KiB of state + %zu KiB of logits each\n", n,
                env->recurrent ? recur_snapshot_size(env->ctx, RECUR_SNAP_CHECKPOINT, 0) >> 10 : 0,
                ((size_t)env->n_vocab * sizeof(float)) >> 10);
    b->ring_n = n;
    for (int32_t i = 0; i < n; i++) b->rpos[i] = -1;
    return RECUR_OK;
}

recur_status slot_ban_start(slot *s, const slot_env *env, const srv_ban_cfg *cfg) {
    if (!s->ban && !(s->ban = calloc(1, sizeof *s->ban))) return RECUR_E_NOMEM;
    slot_ban *b = s->ban;
    slot_ban_stop(s);
    const int32_t w = cfg->window + 1;   /* + the token pushed before the window is trimmed */
    if (w > b->win_cap) {
        ban_tok *nw = realloc(b->win, (size_t)w * sizeof *nw);
        if (!nw) return RECUR_E_NOMEM;
        b->win = nw;
        b->win_cap = w;
    }
    const size_t tc = (size_t)w * (size_t)env->piece_max + 1;
    if (tc > b->text_cap) {
        char *nt = realloc(b->text, tc);
        if (!nt) return RECUR_E_NOMEM;
        b->text = nt;
        b->text_cap = tc;
    }
    if (!b->scratch && !(b->scratch = malloc((size_t)env->n_vocab * sizeof *b->scratch))) return RECUR_E_NOMEM;
    if (!b->piece && !(b->piece = malloc((size_t)env->piece_max + 1))) return RECUR_E_NOMEM;
    if (!b->bans && !(b->bans = malloc(64 * sizeof *b->bans))) return RECUR_E_NOMEM;
    if (b->bans_cap < 64) b->bans_cap = 64;
    if (ban_grow_ring(b, env, w + 1)) return RECUR_E_NOMEM;
    b->rewinds = 0;
    b->warned = false;
    b->cfg = cfg;
    return RECUR_OK;
}

/* ---- the ring, bans, sampling -------------------------------------------------------------------- */

/* Keeps the state and logits after position p (the last one evaluated). */
static void ban_record(slot_ban *b, const slot *s, const slot_env *env, recur_pos p, const float *logits) {
    const int32_t i = p % b->ring_n;
    b->rpos[i] = -1;
    if (env->recurrent && recur_snapshot_take(env->ctx, s->id, b->snap[i], NULL, 0) != RECUR_OK) return;
    memcpy(b->logits + (size_t)i * (size_t)env->n_vocab, logits, (size_t)env->n_vocab * sizeof *logits);
    b->rpos[i] = p;
}

/* Samples position q: the logits plus banned_bias on the tokens banned there. */
static recur_token ban_sample(slot_ban *b, const slot *s, const slot_env *env, const float *logits, recur_pos q) {
    const float *l = logits;
    for (int32_t i = 0; i < b->n_bans; i++) {
        if (b->bans[i].pos != q) continue;
        if (l == logits) {
            memcpy(b->scratch, logits, (size_t)env->n_vocab * sizeof *logits);
            l = b->scratch;
        }
        b->scratch[b->bans[i].tok] += b->cfg->bias;
    }
    return recur_sampler_sample(s->smp, l);
}

static bool ban_add(slot_ban *b, recur_pos pos, recur_token tok) {
    for (int32_t i = 0; i < b->n_bans; i++)
        if (b->bans[i].pos == pos && b->bans[i].tok == tok) return true;
    if (b->n_bans == b->bans_cap) {   /* only a rewind gets here (invariant 4) */
        ban_at *nb = realloc(b->bans, (size_t)b->bans_cap * 2 * sizeof *nb);
        if (!nb) return false;
        b->bans = nb;
        b->bans_cap *= 2;
    }
    b->bans[b->n_bans++] = (ban_at){ pos, tok };
    return true;
}

/* Drops the bans at positions in [lo, hi]. */
static void ban_drop(slot_ban *b, recur_pos lo, recur_pos hi) {
    int32_t k = 0;
    for (int32_t i = 0; i < b->n_bans; i++)
        if (b->bans[i].pos < lo || b->bans[i].pos > hi) b->bans[k++] = b->bans[i];
    b->n_bans = k;
}

/* ik_llama.cpp's rule: -1 refuses once count >= 20 and count > 2 * patterns; 0 never refuses. */
static bool ban_may_rewind(const slot_ban *b) {
    const int32_t max = b->cfg->rewind_count_max, n = b->rewinds;
    if (max == 0) return true;
    if (max > 0) return n < max;
    return !(n >= 20 && n > 2 * sample_ban_count(b->cfg->set));
}

/* ---- the window ---------------------------------------------------------------------------------- */

static void ban_push(slot_ban *b, const slot_env *env, recur_token tok, srv_token_probs *probs, recur_pos q) {
    if (b->n_win == 0) b->pos0 = q;
    int n = recur_token_to_piece(env->model, tok, b->piece, env->piece_max, false);
    if (n < 0) n = 0;
    if (n > env->piece_max) n = env->piece_max;
    b->win[b->n_win++] = (ban_tok){ tok, b->n_text, probs };
    memcpy(b->text + b->n_text, b->piece, (size_t)n);
    b->n_text += (size_t)n;
}

/* The window token whose bytes hold byte `at`. */
static int32_t ban_token_at(const slot_ban *b, size_t at) {
    int32_t k = 0;
    while (k + 1 < b->n_win && b->win[k + 1].off <= at) k++;
    return k;
}

/* Takes the match that starts in window token k back (see slot_ban.h). false when the ring has
 * no entry for the position before it, or the sequence refused: nothing changed then. */
static bool ban_rewind(slot_ban *b, slot *s, const slot_env *env, int32_t k, const float **logits) {
    const recur_pos P = b->pos0 + k, q = P - 1;
    if (q < 0) return false;
    const int32_t i = q % b->ring_n;
    if (b->rpos[i] != q) return false;
    recur_status st = RECUR_OK;
    if (P < s->n_cache)
        st = env->recurrent ? recur_snapshot_restore(env->ctx, b->snap[i], s->id, NULL, 0)
                            : recur_seq_rm(env->ctx, s->id, P, -1);
    if (st != RECUR_OK) return false;
    ban_drop(b, P + 1, INT32_MAX);
    for (int32_t j = k, n = 0; j < b->n_win && (b->cfg->banned_n < 0 || n < b->cfg->banned_n); j++, n++)
        if (!ban_add(b, P, b->win[j].tok)) break;   /* out of memory: this rewind bans fewer */
    if (b->cfg->saturate_predict) s->n_decoded -= b->n_win - k;
    for (int32_t j = k; j < b->n_win; j++) srv_token_probs_free(b->win[j].probs);
    b->n_text = b->win[k].off;
    b->n_win = k;
    s->n_cache = P;
    recur_sampler_set_history(s->smp, s->cache, P);
    for (int32_t j = 0; j < b->ring_n; j++)
        if (b->rpos[j] >= P) b->rpos[j] = -1;
    b->rewinds++;
    *logits = b->logits + (size_t)i * (size_t)env->n_vocab;
    return true;
}

/* Releases the first n window tokens to the client; false when the task ended. */
static bool ban_release(slot_ban *b, slot *s, const slot_env *env, int32_t n, double now_ms) {
    if (n <= 0) return true;
    const recur_pos pos0 = b->pos0;
    for (int32_t i = 0; i < n; i++) {
        srv_token_probs *p = b->win[i].probs;
        b->win[i].probs = NULL;
        if (!slot_emit(s, env, b->win[i].tok, p, now_ms)) return false;   /* slot_release dropped the rest */
    }
    const size_t cut = n < b->n_win ? b->win[n].off : b->n_text;
    memmove(b->win, b->win + n, (size_t)(b->n_win - n) * sizeof *b->win);
    b->n_win -= n;
    for (int32_t i = 0; i < b->n_win; i++) b->win[i].off -= cut;
    memmove(b->text, b->text + cut, b->n_text - cut);
    b->n_text -= cut;
    b->pos0 = pos0 + n;
    ban_drop(b, pos0, pos0 + n - 1);
    b->rewinds = 0;
    return true;
}

/* ---- one step ------------------------------------------------------------------------------------ */

void slot_ban_on_logits(slot *s, const slot_env *env, const float *logits, double now_ms) {
    slot_ban *b = s->ban;
    srv_task *t = s->task;
    ban_record(b, s, env, s->n_cache - 1, logits);
    recur_token tok;
    bool eog;
    int32_t let_through = 0;   /* tokens to release because their match may not be rewound */
    size_t at, hold;
    for (;;) {
        tok = ban_sample(b, s, env, logits, s->n_cache);
        recur_sampler_accept(s->smp, tok);
        s->n_decoded++;
        srv_token_probs *probs = slot_probs(env, t->params.n_probs, logits, tok);
        eog = !t->params.ignore_eos && recur_token_is_eog(env->model, tok);
        if (eog) { srv_token_probs_free(probs); break; }   /* no text: it cannot start a ban */
        ban_push(b, env, tok, probs, s->n_cache);
        if (!sample_ban_find(b->cfg->set, b->text, b->n_text, &at, &hold)) break;
        const int32_t k = ban_token_at(b, at);
        const bool may = ban_may_rewind(b) && !srv_task_cancelled(t);
        if (may && ban_rewind(b, s, env, k, &logits)) continue;
        if (may && !b->warned) {
            fprintf(stderr, "slot %d: cannot rewind to position %d: the banned text is let through\n", s->id, b->pos0 + k);
            b->warned = true;
        }
        let_through = k + 1;
        break;
    }
    const bool limit = (t->params.n_predict > 0 && s->n_decoded >= t->params.n_predict) ||
                       s->n_cache + 1 >= env->n_ctx_slot;
    int32_t n = 0;
    if (eog || limit) n = b->n_win;
    else {
        while (n < b->n_win && (n + 1 < b->n_win ? b->win[n + 1].off : b->n_text) <= hold) n++;
        if (n < let_through) n = let_through;
        if (b->n_win - n >= b->cfg->window) n = b->n_win - b->cfg->window + 1;   /* ik_llama's FIFO */
    }
    if (!ban_release(b, s, env, n, now_ms)) return;
    if (eog) slot_finish(s, env, SRV_STOP_EOS, now_ms);
    else if (limit) slot_finish(s, env, SRV_STOP_LIMIT, now_ms);
    else s->pending = tok;
}
