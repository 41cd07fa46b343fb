/* rs.c — recurrent state memory (see rs.h for the invariants). */
#include "memory/rs.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/err.h"

struct rs_state {
    rs_params  p;
    float     *data;      /* [n_seq_max][seq_floats] */
    int64_t    seq_floats;
    int32_t   *pos_max;   /* [n_seq_max] */
};

recur_status rs_new(const rs_params *p, rs_state **out, char *err, size_t err_len) {
    *out = NULL;
    if (p->n_seq_max < 1 || p->n_layer < 0 || p->n_conv < 0 || p->n_ssm < 0)
        return rc_fail(err, err_len, RECUR_E_INVALID, "rs: bad parameters");
    rs_state *rs = calloc(1, sizeof *rs);
    if (!rs) return rc_fail(err, err_len, RECUR_E_NOMEM, "rs: out of memory");
    rs->p = *p;
    rs->seq_floats = (int64_t)p->n_layer * (p->n_conv + p->n_ssm);
    size_t n;
    const int bad = rc_mul_size((size_t)p->n_seq_max, (size_t)rs->seq_floats * sizeof(float) + 64, &n);
    if (!bad) rs->data = rc_calloc_huge(n);
    rs->pos_max = malloc(p->n_seq_max * sizeof *rs->pos_max);
    if (bad || !rs->data || !rs->pos_max) {
        rs_free(rs);
        return rc_fail(err, err_len, RECUR_E_NOMEM, "rs: cannot allocate the states of %u sequences", p->n_seq_max);
    }
    memset(rs->pos_max, 0xff, p->n_seq_max * sizeof *rs->pos_max);
    *out = rs;
    return RECUR_OK;
}

void rs_free(rs_state *rs) {
    if (!rs) return;
    rc_free_aligned(rs->data);
    free(rs->pos_max);
    free(rs);
}

uint32_t rs_n_seq_max(const rs_state *rs) { return rs->p.n_seq_max; }

static bool seq_ok(const rs_state *rs, recur_seq_id seq) { return seq >= 0 && (uint32_t)seq < rs->p.n_seq_max; }

recur_pos rs_seq_pos_max(const rs_state *rs, recur_seq_id seq) { return seq_ok(rs, seq) ? rs->pos_max[seq] : -1; }

static float *seq_base(const rs_state *rs, recur_seq_id seq) { return rs->data + (size_t)seq * rs->seq_floats; }

float *rs_conv(rs_state *rs, int il, recur_seq_id seq) { return seq_base(rs, seq) + (int64_t)il * rs->p.n_conv; }

float *rs_ssm(rs_state *rs, int il, recur_seq_id seq) {
    return seq_base(rs, seq) + (int64_t)rs->p.n_layer * rs->p.n_conv + (int64_t)il * rs->p.n_ssm;
}

int64_t rs_seq_floats(const rs_state *rs) { return rs->seq_floats; }
int64_t rs_n_conv(const rs_state *rs) { return rs->p.n_conv; }
float *rs_seq_state(rs_state *rs, recur_seq_id seq) { return seq_base(rs, seq); }

void rs_seq_set(rs_state *rs, recur_seq_id seq, const float *state, recur_pos pos_max) {
    memcpy(seq_base(rs, seq), state, (size_t)rs->seq_floats * sizeof(float));
    rs->pos_max[seq] = pos_max;
}

void rs_seq_advance(rs_state *rs, recur_seq_id seq, recur_pos pos) { rs->pos_max[seq] = pos; }

static void seq_clear(rs_state *rs, recur_seq_id seq) {
    memset(seq_base(rs, seq), 0, (size_t)rs->seq_floats * sizeof(float));
    rs->pos_max[seq] = -1;
}

/* What removing [p0, p1) does to seq: 0 nothing, 1 clear, -1 impossible. */
static int rm_effect(const rs_state *rs, recur_seq_id seq, recur_pos p0, recur_pos p1) {
    const recur_pos pm = rs->pos_max[seq];
    const int64_t lo = p0 < 0 ? 0 : p0, hi = p1 < 0 ? INT64_MAX : p1;
    if (pm < 0 || hi <= lo || lo > pm) return 0;
    if (lo == 0 && hi > pm) return 1;
    return -1;
}

recur_status rs_seq_rm(rs_state *rs, recur_seq_id seq, recur_pos p0, recur_pos p1) {
    if (seq >= 0 && !seq_ok(rs, seq)) return RECUR_E_INVALID;
    const uint32_t s0 = seq < 0 ? 0 : (uint32_t)seq, s1 = seq < 0 ? rs->p.n_seq_max : (uint32_t)seq + 1;
    for (uint32_t s = s0; s < s1; s++)
        if (rm_effect(rs, (recur_seq_id)s, p0, p1) < 0) return RECUR_E_STATE;
    for (uint32_t s = s0; s < s1; s++)
        if (rm_effect(rs, (recur_seq_id)s, p0, p1) > 0) seq_clear(rs, (recur_seq_id)s);
    return RECUR_OK;
}

recur_status rs_seq_cp(rs_state *rs, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1) {
    if (!seq_ok(rs, src) || !seq_ok(rs, dst)) return RECUR_E_INVALID;
    if (src == dst) return RECUR_OK;
    const int64_t lo = p0 < 0 ? 0 : p0, hi = p1 < 0 ? INT64_MAX : p1;
    const recur_pos pm = rs->pos_max[src] > rs->pos_max[dst] ? rs->pos_max[src] : rs->pos_max[dst];
    if (pm >= 0 && (lo > 0 || hi <= pm)) return RECUR_E_STATE;
    memcpy(seq_base(rs, dst), seq_base(rs, src), (size_t)rs->seq_floats * sizeof(float));
    rs->pos_max[dst] = rs->pos_max[src];
    return RECUR_OK;
}

recur_status rs_seq_keep(rs_state *rs, recur_seq_id seq) {
    if (!seq_ok(rs, seq)) return RECUR_E_INVALID;
    for (uint32_t s = 0; s < rs->p.n_seq_max; s++)
        if ((recur_seq_id)s != seq && rs->pos_max[s] >= 0) seq_clear(rs, (recur_seq_id)s);
    return RECUR_OK;
}
