/* context.c — recur_ctx: sequence memory, buffers and the batch evaluator.
 *
 * recur_decode plans first (validates the batch and checks there are enough free cells) and
 * only then changes anything, so a rejected batch leaves the context as it was. The batch is
 * cut into ubatches of n_ubatch consecutive entries; every token's result depends only on its
 * own row and the cells of its sequence at positions <= its own, so the cut never changes a
 * logit (see the determinism tests). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/err.h"
#include "memory/kv.h"
#include "memory/rs.h"
#include "memory/snapshot.h"
#include "model/forward.h"
#include "tensor/ops.h"

struct recur_ctx {
    recur_model     *m;
    recur_ctx_params p;
    tp_pool         *pool;
    kv_cache        *kv;         /* NULL without attention layers */
    rs_state        *rs;         /* NULL without recurrent layers */
    model_fwd        f;          /* buffers of one ubatch */
    int32_t         *cells;      /* [n_ubatch] */
    int32_t         *out_tok;    /* [n_ubatch] the ubatch rows that want logits (f.out_tok) */
    recur_pos       *next_pos;   /* [n_seq_max] planning scratch */
    float           *out_x;      /* [n_ubatch][n_embd] normed rows that want logits */
    float           *logits;     /* [n_batch][n_vocab] */
    int32_t         *logit_row;  /* [n_batch] row in logits of batch entry i, -1 = none */
    int32_t          n_batch_last;
    void            *arena;      /* one block for every float buffer of f */
    float          **cap;        /* [n_ubatch] capture destinations of a ubatch (f.cap) */
    snap_layout      sl;         /* what this context's snapshots look like */
};

recur_ctx_params recur_ctx_default_params(void) {
    recur_ctx_params p = { .n_ctx = 0, .n_seq_max = 1, .n_batch = 512, .n_ubatch = 512, .n_threads = 0 };
    return p;
}

const recur_ctx_params *recur_ctx_params_of(const recur_ctx *ctx) { return &ctx->p; }
recur_model *recur_ctx_model(const recur_ctx *ctx) { return ctx->m; }
uint64_t recur_ctx_state_id(const recur_ctx *ctx) { return ctx->sl.model_id; }

/* The model's id, changed when the context's numbers differ from the default's. */
static uint64_t ctx_state_id(const recur_model *m, uint32_t q8_order) {
    const uint64_t id = recur_model_id(m);
    return q8_order == RECUR_Q8_GGML ? id : id ^ (0x9E3779B97F4A7C15ull * q8_order);
}

/* Largest quantized-activation scratch any matmul of the model needs for n_tok rows (the
 * experts' grouped matmuls: n_tok · n_expert_used rows). */
static size_t mm_scratch_bytes(const recur_model *m, int64_t n_tok) {
    const model_hparams *hp = &m->hp;
    const int64_t pairs = n_tok * (hp->n_expert ? hp->n_expert_used : 0);
    const int64_t n_in[7] = { hp->n_embd, hp->n_ff, (int64_t)hp->n_head * hp->head_dim_v, hp->ssm_d_inner,
                              hp->ssm_dt_rank, hp->n_embd, hp->n_ff_exp };
    const int64_t rows[7] = { n_tok, n_tok, n_tok, n_tok, n_tok, pairs, pairs };
    size_t best = 0;
    for (uint32_t ty = 0; ty < GGUF_T_COUNT; ty++) {
        if (!tensor_type_supported(ty)) continue;
        for (int i = 0; i < 7; i++) {
            size_t b = tensor_matmul_scratch_bytes(ty, n_in[i], rows[i]);
            if (b > best) best = b;
        }
    }
    return best;
}

/* Carves every activation buffer of one ubatch out of one allocation. */
static recur_status ctx_alloc_buffers(recur_ctx *c, char *err, size_t err_len) {
    const model_hparams *hp = &c->m->hp;
    const int64_t U = c->p.n_ubatch, nth = tp_n_threads(c->pool);
    /* attention (blocks/attention.c): 4 query rows of [dk + n_ctx + 16], a [dk] F16 scratch,
     * then (from a multiple of 16 floats) K and V row pointers for n_ctx positions; a
     * multiple of 16 floats per thread keeps every thread's pointers aligned */
    c->f.att_ws_floats = ((4 * ((int64_t)hp->head_dim_k + c->p.n_ctx + 16) + hp->head_dim_k + 15) & ~(int64_t)15) +
                         2 * c->p.n_ctx * (int64_t)(sizeof(void *) / sizeof(float));
    /* then, from a multiple of 16 floats, V transposed: [head_dim_v][n_ctx rounded up to 16] F16 */
    if (hp->n_layer_kv)
        c->f.att_ws_floats = ((c->f.att_ws_floats + 15) & ~(int64_t)15) +
                             (int64_t)hp->head_dim_v * ((c->p.n_ctx + 15) & ~(int64_t)15) / 2;
    if (c->f.att_ws_floats < (int64_t)hp->ssm_d_state + 16) c->f.att_ws_floats = (int64_t)hp->ssm_d_state + 16;
    c->f.att_ws_floats = (c->f.att_ws_floats + 15) & ~(int64_t)15;
    const int64_t n_xdb = (int64_t)hp->ssm_dt_rank + 2 * hp->ssm_d_state;
    const int64_t sizes[] = {
        U * hp->n_embd, U * hp->n_embd, U * hp->n_embd,                        /* x xb tmp */
        U * hp->n_head * hp->head_dim_k, U * hp->n_head_kv * hp->head_dim_k,   /* q k */
        U * hp->n_head_kv * hp->head_dim_v, U * hp->n_head * hp->head_dim_v,   /* v att */
        U * hp->n_ff, U * hp->n_ff, U * hp->n_rot,                             /* hb hb2 rope */
        nth * c->f.att_ws_floats, U * hp->n_embd,                              /* att_ws out_x */
        U * hp->rs_n_in, U * hp->rs_n_conv,                                    /* r_in r_conv */
        U * (n_xdb > 2 * (int64_t)hp->ssm_dt_rank ? n_xdb : 2 * (int64_t)hp->ssm_dt_rank),   /* r_xdb */
        U * hp->ssm_d_inner, U * hp->ssm_d_inner,                              /* r_dt r_y */
        hp->attn_gated ? U * 2 * hp->n_head * hp->head_dim_k : 0,              /* qg */
        U * hp->n_expert, hp->n_expert ? U : 0,                                /* moe moe_g */
        hp->n_expert ? U * hp->n_expert_used * hp->n_embd : 0,                 /* moe_y */
        hp->n_expert ? U * hp->n_expert_used * hp->n_ff_exp : 0,               /* moe_gate */
        hp->n_expert ? U * hp->n_expert_used * hp->n_ff_exp : 0,               /* moe_up */
        U * hp->n_expert_used, U * hp->n_expert_used,                          /* moe_w moe_sel (int32) */
        U * hp->n_expert_used, U * hp->n_expert_used,                          /* moe_tok moe_pos (int32) */
        hp->n_expert * (int64_t)(sizeof(tensor_mm_group) / sizeof(float)),    /* moe_grp */
    };
    float *sel = NULL, *tok = NULL, *pos = NULL, *grp = NULL;
    float **dst[] = { &c->f.x, &c->f.xb, &c->f.tmp, &c->f.q, &c->f.k, &c->f.v, &c->f.att,
                      &c->f.hb, &c->f.hb2, &c->f.rope, &c->f.att_ws, &c->out_x,
                      &c->f.r_in, &c->f.r_conv, &c->f.r_xdb, &c->f.r_dt, &c->f.r_y, &c->f.qg,
                      &c->f.moe, &c->f.moe_g, &c->f.moe_y, &c->f.moe_gate, &c->f.moe_up, &c->f.moe_w, &sel,
                      &tok, &pos, &grp };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) total += ((size_t)sizes[i] * 4 + 63) / 64 * 64;
    const size_t mm = mm_scratch_bytes(c->m, U);
    c->arena = rc_calloc_aligned(total + mm);
    c->logits = malloc((size_t)c->p.n_batch * hp->n_vocab * sizeof(float));
    c->logit_row = malloc((size_t)c->p.n_batch * sizeof(int32_t));
    c->cells = malloc((size_t)U * sizeof(int32_t));
    c->out_tok = malloc((size_t)U * sizeof(int32_t));
    c->next_pos = malloc((size_t)c->p.n_seq_max * sizeof(recur_pos));
    c->cap = calloc((size_t)U, sizeof *c->cap);
    if (!c->arena || !c->logits || !c->logit_row || !c->cells || !c->out_tok || !c->next_pos || !c->cap)
        return rc_fail(err, err_len, RECUR_E_NOMEM, "ctx: cannot allocate %zu MiB of buffers",
                       (total + mm + (size_t)c->p.n_batch * hp->n_vocab * 4) >> 20);
    char *p = c->arena;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = (float *)p;
        p += ((size_t)sizes[i] * 4 + 63) / 64 * 64;
    }
    c->f.moe_sel = (int32_t *)(void *)sel;   /* 4-byte elements, 64-byte aligned like the rest */
    c->f.moe_tok = (int32_t *)(void *)tok;
    c->f.moe_pos = (int32_t *)(void *)pos;
    c->f.moe_grp = (tensor_mm_group *)(void *)grp;
    c->f.mm_scratch = p;
    return RECUR_OK;
}

recur_status recur_ctx_new(recur_model *m, const recur_ctx_params *params, recur_ctx **out, char *err,
                           size_t err_len) {
    *out = NULL;
    if (!m || !m->arch) return rc_fail(err, err_len, RECUR_E_INVALID, "ctx: the model has no weights loaded");
    recur_ctx_params p = params ? *params : recur_ctx_default_params();
    if (p.n_ctx == 0) p.n_ctx = m->hp.n_ctx_train < 4096 ? (uint32_t)m->hp.n_ctx_train : 4096;
    if (p.n_batch == 0) p.n_batch = 512;
    if (p.n_ubatch == 0 || p.n_ubatch > p.n_batch) p.n_ubatch = p.n_batch;
    if (p.n_seq_max == 0) p.n_seq_max = 1;
    if (p.n_seq_max > KV_MAX_SEQ || p.n_batch > (1u << 20))
        return rc_fail(err, err_len, RECUR_E_INVALID, "ctx: n_seq_max %u (max %d) or n_batch %u out of range",
                       p.n_seq_max, KV_MAX_SEQ, p.n_batch);
    if (p.q8_order != RECUR_Q8_GGML && p.q8_order != RECUR_Q8_BLOCK)
        return rc_fail(err, err_len, RECUR_E_INVALID, "ctx: unknown q8_order %u", p.q8_order);
    recur_ctx *c = calloc(1, sizeof *c);
    if (!c) return rc_fail(err, err_len, RECUR_E_NOMEM, "ctx: out of memory");
    c->m = m;
    c->p = p;
    c->pool = tp_new(p.n_threads);
    recur_status st = RECUR_OK;
    if (!c->pool) st = rc_fail(err, err_len, RECUR_E_NOMEM, "ctx: cannot start %d threads", p.n_threads);
    c->p.n_threads = tp_n_threads(c->pool);
    kv_params kp = { .n_layer = m->hp.n_layer_kv, .n_embd_k = (int64_t)m->hp.n_head_kv * m->hp.head_dim_k,
                     .n_embd_v = (int64_t)m->hp.n_head_kv * m->hp.head_dim_v, .n_head_kv = m->hp.n_head_kv,
                     .n_cells = p.n_ctx,
                     .n_seq_max = p.n_seq_max };
    if (!st && m->hp.n_layer_kv) st = kv_new(&kp, &c->kv, err, err_len);
    rs_params rp = { .n_layer = m->hp.n_layer_rs, .n_conv = (int64_t)(m->hp.ssm_d_conv - 1) * m->hp.rs_n_conv,
                     .n_ssm = m->hp.rs_n_ssm, .n_seq_max = p.n_seq_max };
    if (!st && m->hp.n_layer_rs) st = rs_new(&rp, &c->rs, err, err_len);
    if (!st) st = ctx_alloc_buffers(c, err, err_len);
    if (st) {
        recur_ctx_free(c);
        return st;
    }
    c->f.kv = c->kv;
    c->f.rs = c->rs;
    c->f.pool = c->pool;
    c->f.kern = p.q8_order == RECUR_Q8_BLOCK ? tensor_kernels_q8blk(tensor_kernels_active()) : tensor_kernels_active();
    c->sl = (snap_layout){ .model_id = ctx_state_id(m, p.q8_order), .rs_floats = c->rs ? rs_seq_floats(c->rs) : 0,
                           .n_layer_kv = m->hp.n_layer_kv, .n_embd_k = kp.n_embd_k, .n_embd_v = kp.n_embd_v,
                           .n_ctx = p.n_ctx };
    *out = c;
    return RECUR_OK;
}

void recur_ctx_free(recur_ctx *c) {
    if (!c) return;
    tp_free(c->pool);
    kv_free(c->kv);
    rs_free(c->rs);
    rc_free_aligned(c->arena);
    free(c->logits);
    free(c->logit_row);
    free(c->cells);
    free(c->out_tok);
    free(c->next_pos);
    free(c->cap);
    free(c);
}

/* ---- decode ------------------------------------------------------------------------------ */

static recur_status batch_check(recur_ctx *c, const recur_batch *b, char *err, size_t err_len) {
    if (!b || b->n_tokens < 1 || (uint32_t)b->n_tokens > c->p.n_batch || !b->token || !b->pos || !b->seq_id)
        return rc_fail(err, err_len, RECUR_E_INVALID, "decode: batch must hold 1..%u tokens with token, pos, seq_id",
                       c->p.n_batch);
    for (uint32_t s = 0; s < c->p.n_seq_max; s++) c->next_pos[s] = recur_seq_pos_max(c, (recur_seq_id)s) + 1;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const recur_seq_id s = b->seq_id[i];
        if (b->token[i] < 0 || b->token[i] >= c->m->hp.n_vocab)
            return rc_fail(err, err_len, RECUR_E_INVALID, "decode: token %d at entry %d is outside the vocabulary (%d)",
                           b->token[i], i, c->m->hp.n_vocab);
        if (s < 0 || (uint32_t)s >= c->p.n_seq_max)
            return rc_fail(err, err_len, RECUR_E_INVALID, "decode: seq_id %d at entry %d outside 0..%u", s, i,
                           c->p.n_seq_max - 1);
        if (b->pos[i] != c->next_pos[s])
            return rc_fail(err, err_len, RECUR_E_INVALID, "decode: entry %d of seq %d has pos %d, expected %d", i, s,
                           b->pos[i], c->next_pos[s]);
        if ((uint32_t)b->pos[i] >= c->p.n_ctx)
            return rc_fail(err, err_len, RECUR_E_FULL, "decode: position %d exceeds the context size %u", b->pos[i],
                           c->p.n_ctx);
        c->next_pos[s]++;
    }
    if (c->kv && kv_n_free(c->kv) < (uint32_t)b->n_tokens)
        return rc_fail(err, err_len, RECUR_E_FULL, "decode: %d tokens need cells, %u are free", b->n_tokens,
                       kv_n_free(c->kv));
    return RECUR_OK;
}

/* Final norm + lm head for the rows of this ubatch that want logits: f.x row t, or row k for
 * the k-th of them when the last layer kept only those (fwd_keep_out_rows: f.n_tok < n). */
static void ubatch_logits(recur_ctx *c, const recur_batch *b, int32_t i0, int32_t n) {
    const model_hparams *hp = &c->m->hp;
    const bool kept = c->f.n_tok != n;
    int32_t n_out = 0, first_row = -1;
    const int64_t t0 = fwd_prof_start(&c->f);
    for (int32_t t = 0; t < n; t++) {
        if (c->logit_row[i0 + t] < 0) continue;
        if (first_row < 0) first_row = c->logit_row[i0 + t];
        op_rmsnorm(c->out_x + (int64_t)n_out * hp->n_embd, c->f.x + (int64_t)(kept ? n_out : t) * hp->n_embd,
                   c->m->w.output_norm.data, hp->n_embd, hp->rms_eps);
        n_out++;
    }
    (void)b;
    if (!n_out) return;
    fwd_prof_stop(&c->f, RECUR_PROF_NORM, t0);
    const int32_t saved = c->f.n_tok;
    c->f.n_tok = n_out;   /* rows wanting logits are consecutive in the logits buffer */
    fwd_matmul(&c->f, &c->m->w.output, c->out_x, c->logits + (int64_t)first_row * hp->n_vocab);
    c->f.n_tok = saved;
}

/* Points f.cap at the snapshots captured inside the ubatch [i0, i0 + n) (NULL when none). */
static void capture_map(recur_ctx *c, const recur_batch *b, const recur_capture *list, int n_cap, int32_t i0,
                        int32_t n) {
    c->f.cap = NULL;
    if (!n_cap || !c->rs) return;
    for (int32_t t = 0; t < n; t++) c->cap[t] = NULL;
    for (int k = 0; k < n_cap; k++)
        for (int32_t t = 0; t < n; t++)
            if (b->seq_id[i0 + t] == list[k].seq && b->pos[i0 + t] == list[k].pos) {
                c->cap[t] = list[k].snap->rs;
                c->f.cap = c->cap;
            }
}

/* A decode of n tokens that took ns: OTHER is what no other kind took. */
static void profile_decode(recur_profile *p, int32_t n, uint64_t ns) {
    p->decodes++;
    p->tokens += (uint64_t)n;
    p->total_ns += ns;
    uint64_t kinds = 0;
    for (int k = 0; k < RECUR_PROF_KINDS; k++)
        if (k != RECUR_PROF_OTHER) kinds += p->ns[k];
    p->ns[RECUR_PROF_OTHER] = p->total_ns > kinds ? p->total_ns - kinds : 0;
    p->steps[RECUR_PROF_OTHER] = p->decodes;
}

void recur_ctx_set_profile(recur_ctx *c, recur_profile *p) {
    c->f.prof = p;
    tp_set_timing(c->pool, p != NULL);   /* the job times profiling reads (tp_get_times) */
}

static void ubatch_eval(recur_ctx *c, const recur_batch *b, int32_t i0, int32_t n) {
    const recur_model *m = c->m;
    const model_hparams *hp = &m->hp;
    const float *ff = m->w.rope_freqs.data;
    for (int32_t t = 0; t < n; t++) {
        c->cells[t] = c->kv ? kv_cell_alloc(c->kv, b->seq_id[i0 + t], b->pos[i0 + t]) : -1;
        tensor_get_row(c->f.kern, model_w_wtype(&m->w.token_embd), m->w.token_embd.data, hp->n_embd, b->token[i0 + t],
                       c->f.x + (int64_t)t * hp->n_embd);
        if (hp->n_rot) op_rope_cache(c->f.rope + (int64_t)t * hp->n_rot, b->pos[i0 + t], hp->n_rot, hp->rope_base,
                      hp->rope_freq_scale, ff);
    }
    c->f.n_tok = n;
    c->f.token = b->token + i0;
    c->f.pos = b->pos + i0;
    c->f.seq = b->seq_id + i0;
    c->f.cell = c->cells;
    c->f.n_out = 0;
    for (int32_t t = 0; t < n; t++)
        if (c->logit_row[i0 + t] >= 0) c->out_tok[c->f.n_out++] = t;
    c->f.out_tok = c->out_tok;
    m->arch->forward(m, &c->f);
    c->f.cap = NULL;
    if (c->rs)
        for (int32_t t = 0; t < n; t++) rs_seq_advance(c->rs, b->seq_id[i0 + t], b->pos[i0 + t]);
    ubatch_logits(c, b, i0, n);
}

/* Validates a capture list against a checked batch (c->next_pos holds each sequence's next
 * position after the batch); changes nothing. */
static recur_status capture_check(recur_ctx *c, const recur_capture *list, int n, char *err, size_t err_len) {
    if (n < 0 || (n > 0 && !list)) return rc_fail(err, err_len, RECUR_E_INVALID, "capture: bad list (n = %d)", n);
    for (int k = 0; k < n; k++) {
        const recur_capture *e = &list[k];
        const recur_status st = snap_check_model(e->snap, &c->sl, err, err_len);
        if (st) return st;
        if (e->seq < 0 || (uint32_t)e->seq >= c->p.n_seq_max)
            return rc_fail(err, err_len, RECUR_E_INVALID, "capture %d: seq %d outside 0..%u", k, e->seq,
                           c->p.n_seq_max - 1);
        const recur_pos first = recur_seq_pos_max(c, e->seq) + 1;
        if (e->pos < first || e->pos >= c->next_pos[e->seq])
            return rc_fail(err, err_len, RECUR_E_INVALID, "capture %d: (seq %d, pos %d) is not a token of the batch", k,
                           e->seq, e->pos);
        if (e->snap->kind == RECUR_SNAP_SEQUENCE && e->pos > e->snap->max_pos)
            return rc_fail(err, err_len, RECUR_E_INVALID, "capture %d: pos %d beyond the snapshot's reach %d", k, e->pos,
                           e->snap->max_pos);
        for (int j = 0; j < k; j++)
            if ((list[j].seq == e->seq && list[j].pos == e->pos) || list[j].snap == e->snap)
                return rc_fail(err, err_len, RECUR_E_INVALID, "capture %d: same position or snapshot as capture %d", k,
                               j);
        for (recur_pos p = 0; c->kv && e->snap->kind == RECUR_SNAP_SEQUENCE && p < first; p++)
            if (kv_seq_cell(c->kv, e->seq, p) < 0)
                return rc_fail(err, err_len, RECUR_E_STATE, "capture %d: seq %d has no cell at position %d", k, e->seq,
                               p);
    }
    return RECUR_OK;
}

recur_status recur_decode_capture(recur_ctx *c, const recur_batch *b, const recur_capture *list, int n_cap,
                                  char *err, size_t err_len) {
    recur_status st = batch_check(c, b, err, err_len);
    if (!st) st = capture_check(c, list, n_cap, err, err_len);
    if (st) return st;
    int32_t rows = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        const bool want = b->logits ? b->logits[i] != 0 : i == b->n_tokens - 1;
        c->logit_row[i] = want ? rows++ : -1;
    }
    c->n_batch_last = b->n_tokens;
    const int64_t t0 = fwd_prof_start(&c->f);
    for (int32_t i0 = 0; i0 < b->n_tokens; i0 += (int32_t)c->p.n_ubatch) {
        const int32_t n = b->n_tokens - i0 < (int32_t)c->p.n_ubatch ? b->n_tokens - i0 : (int32_t)c->p.n_ubatch;
        capture_map(c, b, list, n_cap, i0, n);
        ubatch_eval(c, b, i0, n);
    }
    for (int k = 0; k < n_cap; k++) {   /* cells of positions <= pos are final now */
        if (c->kv && list[k].snap->kind == RECUR_SNAP_SEQUENCE) snap_put_kv(list[k].snap, c->kv, list[k].seq, list[k].pos);
        list[k].snap->pos = list[k].pos;
    }
    if (c->f.prof) profile_decode(c->f.prof, b->n_tokens, (uint64_t)(rc_time_ns() - t0));
    return RECUR_OK;
}

recur_status recur_decode(recur_ctx *c, const recur_batch *b, char *err, size_t err_len) {
    return recur_decode_capture(c, b, NULL, 0, err, err_len);
}

const float *recur_get_logits(const recur_ctx *c, int32_t i) {
    if (i < 0 || i >= c->n_batch_last || c->logit_row[i] < 0) return NULL;
    return c->logits + (int64_t)c->logit_row[i] * c->m->hp.n_vocab;
}

/* ---- sequences --------------------------------------------------------------------------- */

/* With recurrent layers the recurrent memory decides first (it may refuse: RECUR_E_STATE), and
 * only then the KV cells change, so a refused operation changes nothing. */
recur_status recur_seq_rm(recur_ctx *c, recur_seq_id seq, recur_pos p0, recur_pos p1) {
    if (c->rs) {
        const recur_status st = rs_seq_rm(c->rs, seq, p0, p1);
        if (st || !c->kv) return st;
    }
    return kv_seq_rm(c->kv, seq, p0, p1);
}

recur_status recur_seq_cp(recur_ctx *c, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1) {
    if (c->rs) {
        const recur_status st = rs_seq_cp(c->rs, src, dst, p0, p1);
        if (st || !c->kv) return st;
    }
    return kv_seq_cp(c->kv, src, dst, p0, p1);
}

recur_status recur_seq_keep(recur_ctx *c, recur_seq_id seq) {
    if (c->rs) {
        const recur_status st = rs_seq_keep(c->rs, seq);
        if (st || !c->kv) return st;
    }
    return kv_seq_keep(c->kv, seq);
}

recur_pos recur_seq_pos_max(const recur_ctx *c, recur_seq_id seq) {
    return c->kv ? kv_seq_pos_max(c->kv, seq) : rs_seq_pos_max(c->rs, seq);
}

/* ---- raw attention rows (the prompt cache keeps them outside the context) ------------------ */

size_t recur_ctx_kv_row_bytes(const recur_ctx *c) {
    return c->kv ? (size_t)c->sl.n_layer_kv * (size_t)(c->sl.n_embd_k + c->sl.n_embd_v) * sizeof(uint16_t) : 0;
}

/* K then V row of every attention layer of the cell: the layout of a sequence snapshot's row. */
static void kv_row_out(recur_ctx *c, int32_t cell, unsigned char *row) {
    const size_t kb = (size_t)c->sl.n_embd_k * sizeof(uint16_t), vb = (size_t)c->sl.n_embd_v * sizeof(uint16_t);
    for (int il = 0; il < c->sl.n_layer_kv; il++, row += kb + vb) kv_rows_get(c->kv, il, cell, row, row + kb);
}

static void kv_row_in(recur_ctx *c, int32_t cell, const unsigned char *row) {
    const size_t kb = (size_t)c->sl.n_embd_k * sizeof(uint16_t), vb = (size_t)c->sl.n_embd_v * sizeof(uint16_t);
    for (int il = 0; il < c->sl.n_layer_kv; il++, row += kb + vb) kv_rows_set(c->kv, il, cell, row, row + kb);
}

recur_status recur_seq_kv_get(recur_ctx *c, recur_seq_id seq, recur_pos p0, recur_pos p1, void *buf, char *err,
                              size_t err_len) {
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max || p0 < 0 || p1 < p0)
        return rc_fail(err, err_len, RECUR_E_INVALID, "kv_get: seq %d or positions [%d, %d) invalid", seq, p0, p1);
    if (!c->kv || p1 == p0) return RECUR_OK;
    for (recur_pos p = p0; p < p1; p++)
        if (kv_seq_cell(c->kv, seq, p) < 0)
            return rc_fail(err, err_len, RECUR_E_STATE, "kv_get: seq %d has no cell at position %d", seq, p);
    const size_t rb = recur_ctx_kv_row_bytes(c);
    for (recur_pos p = p0; p < p1; p++) kv_row_out(c, kv_seq_cell(c->kv, seq, p), (unsigned char *)buf + (size_t)(p - p0) * rb);
    return RECUR_OK;
}

recur_status recur_seq_kv_put(recur_ctx *c, recur_seq_id seq, recur_pos p0, recur_pos p1, const void *buf,
                              char *err, size_t err_len) {
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max || p0 < 0 || p1 < p0 || (uint32_t)p1 > c->p.n_ctx)
        return rc_fail(err, err_len, RECUR_E_INVALID, "kv_put: seq %d or positions [%d, %d) invalid", seq, p0, p1);
    if (!c->kv || p1 == p0) return RECUR_OK;
    if (kv_seq_pos_max(c->kv, seq) != p0 - 1)
        return rc_fail(err, err_len, RECUR_E_STATE, "kv_put: seq %d ends at %d, rows start at %d", seq,
                       kv_seq_pos_max(c->kv, seq), p0);
    if (kv_n_free(c->kv) < (uint32_t)(p1 - p0))
        return rc_fail(err, err_len, RECUR_E_FULL, "kv_put: %d rows need cells, %u are free", p1 - p0, kv_n_free(c->kv));
    const size_t rb = recur_ctx_kv_row_bytes(c);
    for (recur_pos p = p0; p < p1; p++)
        kv_row_in(c, kv_cell_alloc(c->kv, seq, p), (const unsigned char *)buf + (size_t)(p - p0) * rb);
    return RECUR_OK;
}

/* ---- snapshots (memory/snapshot.c holds the copies and the byte format) -------------------- */

recur_snapshot *recur_snapshot_new(const recur_ctx *c, recur_snapshot_kind kind, recur_pos max_pos) {
    if (!c) return NULL;
    if (max_pos < 0 || (uint32_t)max_pos >= c->p.n_ctx) max_pos = (recur_pos)c->p.n_ctx - 1;
    return snap_new(&c->sl, kind, max_pos);
}

size_t recur_snapshot_size(const recur_ctx *c, recur_snapshot_kind kind, recur_pos pos) {
    return snap_size(&c->sl, kind, pos);
}

recur_status recur_snapshot_take(recur_ctx *c, recur_seq_id seq, recur_snapshot *s, char *err, size_t err_len) {
    const recur_status st = snap_check_model(s, &c->sl, err, err_len);
    if (st) return st;
    const recur_pos pm = recur_seq_pos_max(c, seq);
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max || pm < 0)
        return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: seq %d is invalid or empty", seq);
    if (s->kind == RECUR_SNAP_SEQUENCE && pm > s->max_pos)
        return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: pos %d beyond the snapshot's reach %d", pm, s->max_pos);
    for (recur_pos p = 0; c->kv && s->kind == RECUR_SNAP_SEQUENCE && p <= pm; p++)
        if (kv_seq_cell(c->kv, seq, p) < 0)
            return rc_fail(err, err_len, RECUR_E_STATE, "snapshot: seq %d has no cell at position %d", seq, p);
    snap_take(s, c->kv, c->rs, seq, pm);
    return RECUR_OK;
}

recur_status recur_snapshot_restore(recur_ctx *c, const recur_snapshot *s, recur_seq_id seq, char *err,
                                    size_t err_len) {
    const recur_status st = snap_check_model(s, &c->sl, err, err_len);
    if (st) return st;
    if (seq < 0 || (uint32_t)seq >= c->p.n_seq_max)
        return rc_fail(err, err_len, RECUR_E_INVALID, "snapshot: seq %d outside 0..%u", seq, c->p.n_seq_max - 1);
    return snap_restore(s, c->kv, c->rs, seq, err, err_len);
}

recur_status recur_snapshot_load(const recur_ctx *c, const void *buf, size_t len, recur_snapshot **out, char *err,
                                 size_t err_len) {
    return snap_load(&c->sl, buf, len, out, err, err_len);
}
