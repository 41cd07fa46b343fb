/* slot_ban.h — banned strings on a slot: generated tokens wait in a window until no banned text
 * can start in them; a banned text that appears is taken back (rewind) and resampled with the
 * token that began it banned at that position. Works on recurrent models too: the state after
 * each of the last `window` evaluated positions is kept in a ring of checkpoints.
 *
 * Private to the scheduler thread, like slot.h.
 *
 * One step (slot_ban_on_logits, for the token at position q = n_cache):
 *   record: ring[q-1] = (recurrent state after q-1, logits after q-1)
 *   loop:   sample q (logits + banned_bias on the tokens banned at q) -> push to the window ->
 *           search the window's text; a complete match starting in window token k (position
 *           P = pos0 + k) -> if a rewind is allowed: bans at P += the first banned_n tokens
 *           of the match, the sequence goes back to P-1 (restore ring[P-1], or seq_rm of
 *           attention cells), the window drops tokens k.., the sampler's history becomes
 *           cache[0 .. P), q = P, resample from ring[P-1]'s logits (no decode needed)
 *   release: the tokens before the hold-back (sample_ban_find's *hold), at least enough to
 *           keep the window under `window` tokens, everything at EOS / the limits, and, when a
 *           match may not be rewound, every token up to the one where it starts (the banned
 *           text goes out, as ik_llama.cpp lets it through) -> slot_emit each (detokenizer,
 *           stop strings, events); bans at released positions are dropped; the rewind count
 *           restarts when a token is released (as ik_llama.cpp).
 * A rewind cannot miss the ring (invariant 2); should taking or restoring a checkpoint fail
 * all the same, that match is let through like one over rewind_count_max, with one log line
 * per task (ik_llama.cpp, which cannot rewind a recurrent model, turns bans off there).
 *
 * Why the ring keeps logits: resampling position P needs the logits after P-1. With them a
 * rewind is one restore and no decode, and the ring needs no state before the last prompt
 * token, so it is filled with recur_snapshot_take after each step (generation evaluates one
 * token per slot per step, so the sequence's state is exactly the one after it) instead of
 * entries in the scheduler's capture list, which refuses a (seq, pos) listed twice.
 *
 * Invariants:
 *  1. Window tokens occupy positions pos0 .. pos0+n_win-1; all but the last are evaluated
 *     (in cache[]), the last is the slot's pending token. Their text is text[0, n_text), token
 *     i's bytes start at win[i].off. No window token has reached the detokenizer or a client.
 *  2. The ring holds, for each of the last ring_n evaluated positions p >= the first
 *     generated token's position - 1, the logits after p and (recurrent models) the state after
 *     p; rpos[p % ring_n] == p marks an entry valid. ring_n > window, so every position a
 *     match in the window can start at has its predecessor in the ring.
 *  3. Bans are (position, token) pairs for positions inside the window or just after it;
 *     a rewind to P drops those after P (they belonged to the discarded continuation).
 *  4. Nothing is allocated per token: slot_ban_start sizes everything for the task (grow-only
 *     across tasks); only a rewind may grow the ban list. */
#ifndef RECUR_SERVER_SLOT_BAN_H
#define RECUR_SERVER_SLOT_BAN_H

#include <stdbool.h>

#include "recur.h"
#include "server/slot.h"
#include "server/srv_ban.h"

typedef struct slot_ban slot_ban;

/* Prepares s for a task with bans (allocating s->ban or growing it). RECUR_E_NOMEM. */
recur_status slot_ban_start(slot *s, const slot_env *env, const srv_ban_cfg *cfg);
/* The task ends: held tokens are dropped. s->ban may be NULL. */
void slot_ban_stop(slot *s);
void slot_ban_free(slot_ban *b);   /* NULL: no-op */
bool slot_ban_active(const slot *s);

/* slot_on_logits for a task with bans (see above). */
void slot_ban_on_logits(slot *s, const slot_env *env, const float *logits, double now_ms);

#endif
