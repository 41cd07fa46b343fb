/* rs.h — recurrent state memory: per sequence and per recurrent layer, a conv state and an SSM
 * state (F32), plus the position of the last token the state has absorbed.
 *
 * Invariants:
 *  1. A sequence with pos_max == -1 (new, removed, or dropped by keep) has all-zero states.
 *  2. The states of a sequence are exactly those after its tokens 0 .. pos_max, in order. There
 *     is no history: an operation that would need the state after an earlier token (removing a
 *     tail [p0, ..) with 0 < p0 <= pos_max, or a part in the middle, or copying a prefix) fails
 *     with RECUR_E_STATE and changes nothing.
 *  3. Layout per sequence: [n_layer][n_conv] conv floats, then [n_layer][n_ssm] SSM floats, so a
 *     sequence's whole state is two contiguous blocks. The conv state of one layer is
 *     token-major: row k of (K-1) rows holds the input of token pos_max-(K-2)+k.
 */
#ifndef RECUR_MEMORY_RS_H
#define RECUR_MEMORY_RS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "recur.h"

typedef struct rs_state rs_state;

typedef struct rs_params {
    int      n_layer;     /* recurrent layers */
    int64_t  n_conv;      /* conv-state floats per layer (may be 0) */
    int64_t  n_ssm;       /* SSM-state floats per layer (may be 0) */
    uint32_t n_seq_max;
} rs_params;

recur_status rs_new(const rs_params *p, rs_state **out, char *err, size_t err_len);
void rs_free(rs_state *rs);

uint32_t  rs_n_seq_max(const rs_state *rs);
recur_pos rs_seq_pos_max(const rs_state *rs, recur_seq_id seq);   /* -1 when empty */

/* The states of recurrent layer il of seq (the caller checked seq). */
float *rs_conv(rs_state *rs, int il, recur_seq_id seq);
float *rs_ssm(rs_state *rs, int il, recur_seq_id seq);

/* Floats of one sequence's whole state (invariant 3), and of one layer's conv state. */
int64_t rs_seq_floats(const rs_state *rs);
int64_t rs_n_conv(const rs_state *rs);
/* The first float of seq's state: rs_conv / rs_ssm minus this is the offset of a layer's
 * state inside a copy of the whole state (snapshots use the same layout). */
float *rs_seq_state(rs_state *rs, recur_seq_id seq);
/* Replaces seq's whole state (rs_seq_floats floats, same layout) and sets its pos_max. */
void rs_seq_set(rs_state *rs, recur_seq_id seq, const float *state, recur_pos pos_max);

/* Records that seq's states now include the token at pos (pos == pos_max + 1). */
void rs_seq_advance(rs_state *rs, recur_seq_id seq, recur_pos pos);

/* Sequence ops (p0 < 0 = 0, p1 < 0 = infinity; seq < 0 in rs_seq_rm = every sequence).
 * rm: a range that misses [0, pos_max] is a no-op; one that covers it clears the sequence;
 * anything else is RECUR_E_STATE. cp: the range must cover both sequences' tokens (the whole
 * state is copied), else RECUR_E_STATE. RECUR_E_INVALID for a bad seq id. On error nothing
 * changed. */
recur_status rs_seq_rm(rs_state *rs, recur_seq_id seq, recur_pos p0, recur_pos p1);
recur_status rs_seq_cp(rs_state *rs, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1);
recur_status rs_seq_keep(rs_state *rs, recur_seq_id seq);

#endif
