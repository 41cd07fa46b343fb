#include "memory/kv.h"

#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/err.h"

struct kv_cache {
    kv_params  p;
    uint16_t  *k;          /* [n_layer][n_head_kv][n_cells][dk] */
    uint16_t  *v;          /* [n_layer][n_head_kv][n_cells][dv] */
    int64_t    dk, dv;     /* values per head */
    uint64_t  *mask;       /* [n_cells] sequences using the cell */
    int32_t   *cell_pos;   /* [n_cells] position of the token in the cell (-1 free) */
    int32_t   *map;        /* [n_seq_max][n_cells] position -> cell, -1 = none */
    int32_t   *pos_max;    /* [n_seq_max] */
    uint32_t   n_free;
    uint32_t   next_free;  /* search hint */
};

recur_status kv_new(const kv_params *p, kv_cache **out, char *err, size_t err_len) {
    *out = NULL;
    if (p->n_seq_max < 1 || p->n_seq_max > KV_MAX_SEQ)
        return rc_fail(err, err_len, RECUR_E_INVALID, "kv: n_seq_max %u outside 1..%d", p->n_seq_max, KV_MAX_SEQ);
    if (p->n_head_kv < 1 || p->n_embd_k % p->n_head_kv || p->n_embd_v % p->n_head_kv)
        return rc_fail(err, err_len, RECUR_E_INVALID, "kv: %d heads do not divide rows of %lld and %lld", p->n_head_kv,
                       (long long)p->n_embd_k, (long long)p->n_embd_v);
    if (p->n_cells < 1 || p->n_cells > (1u << 26))
        return rc_fail(err, err_len, RECUR_E_INVALID, "kv: n_ctx %u outside 1..%u", p->n_cells, 1u << 26);
    kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) return rc_fail(err, err_len, RECUR_E_NOMEM, "kv: out of memory");
    kv->p = *p;
    kv->dk = p->n_embd_k / p->n_head_kv;
    kv->dv = p->n_embd_v / p->n_head_kv;
    size_t nk, nv, nmap;
    int bad = rc_mul_size((size_t)p->n_layer * p->n_cells, (size_t)p->n_embd_k * 2, &nk) ||
              rc_mul_size((size_t)p->n_layer * p->n_cells, (size_t)p->n_embd_v * 2, &nv) ||
              rc_mul_size((size_t)p->n_seq_max * p->n_cells, sizeof(int32_t), &nmap);
    if (!bad) {
        kv->k = rc_alloc_huge(nk);   /* rows are written before attention reads them */
        kv->v = rc_alloc_huge(nv);
        kv->mask = calloc(p->n_cells, sizeof *kv->mask);
        kv->cell_pos = malloc(p->n_cells * sizeof *kv->cell_pos);
        kv->map = malloc(nmap);
        kv->pos_max = malloc(p->n_seq_max * sizeof *kv->pos_max);
    }
    if (bad || !kv->k || !kv->v || !kv->mask || !kv->cell_pos || !kv->map || !kv->pos_max) {
        kv_free(kv);
        return rc_fail(err, err_len, RECUR_E_NOMEM, "kv: cannot allocate %u cells x %d layers", p->n_cells, p->n_layer);
    }
    memset(kv->cell_pos, 0xff, p->n_cells * sizeof *kv->cell_pos);
    memset(kv->map, 0xff, nmap);
    memset(kv->pos_max, 0xff, p->n_seq_max * sizeof *kv->pos_max);
    kv->n_free = p->n_cells;
    *out = kv;
    return RECUR_OK;
}

void kv_free(kv_cache *kv) {
    if (!kv) return;
    rc_free_aligned(kv->k);
    rc_free_aligned(kv->v);
    free(kv->mask);
    free(kv->cell_pos);
    free(kv->map);
    free(kv->pos_max);
    free(kv);
}

uint32_t kv_n_cells(const kv_cache *kv) { return kv->p.n_cells; }
uint32_t kv_n_free(const kv_cache *kv) { return kv->n_free; }
uint32_t kv_n_seq_max(const kv_cache *kv) { return kv->p.n_seq_max; }

static int32_t *seq_map(const kv_cache *kv, recur_seq_id seq) {
    return kv->map + (size_t)seq * kv->p.n_cells;
}

recur_pos kv_seq_pos_max(const kv_cache *kv, recur_seq_id seq) {
    if (seq < 0 || (uint32_t)seq >= kv->p.n_seq_max) return -1;
    return kv->pos_max[seq];
}

int32_t kv_seq_cell(const kv_cache *kv, recur_seq_id seq, recur_pos pos) {
    if (seq < 0 || (uint32_t)seq >= kv->p.n_seq_max || pos < 0 || (uint32_t)pos >= kv->p.n_cells) return -1;
    return seq_map(kv, seq)[pos];
}

uint32_t kv_seq_n_own(const kv_cache *kv, recur_seq_id seq) {
    if (seq < 0 || (uint32_t)seq >= kv->p.n_seq_max) return 0;
    uint32_t n = 0;
    for (uint32_t c = 0; c < kv->p.n_cells; c++) n += kv->mask[c] == 1ull << seq;
    return n;
}

int32_t kv_cell_alloc(kv_cache *kv, recur_seq_id seq, recur_pos pos) {
    uint32_t c = kv->next_free;
    while (kv->mask[c]) c = (c + 1) % kv->p.n_cells;
    kv->mask[c] = 1ull << seq;
    kv->cell_pos[c] = pos;
    seq_map(kv, seq)[pos] = (int32_t)c;
    if (pos > kv->pos_max[seq]) kv->pos_max[seq] = pos;
    kv->n_free--;
    kv->next_free = (c + 1) % kv->p.n_cells;
    return (int32_t)c;
}

static size_t head_at(const kv_cache *kv, int il, int h, int32_t cell) {
    return ((size_t)il * (size_t)kv->p.n_head_kv + (size_t)h) * kv->p.n_cells + (size_t)cell;
}

uint16_t *kv_k_head(kv_cache *kv, int il, int h, int32_t cell) { return kv->k + head_at(kv, il, h, cell) * kv->dk; }
uint16_t *kv_v_head(kv_cache *kv, int il, int h, int32_t cell) { return kv->v + head_at(kv, il, h, cell) * kv->dv; }
uint16_t *kv_k_rows(kv_cache *kv, int il, int h) { return kv_k_head(kv, il, h, 0); }
uint16_t *kv_v_rows(kv_cache *kv, int il, int h) { return kv_v_head(kv, il, h, 0); }

const int32_t *kv_seq_cells(const kv_cache *kv, recur_seq_id seq) {
    return seq < 0 || (uint32_t)seq >= kv->p.n_seq_max ? NULL : seq_map(kv, seq);
}

void kv_rows_get(const kv_cache *kv, int il, int32_t cell, void *k, void *v) {
    const size_t kb = (size_t)kv->dk * sizeof(uint16_t), vb = (size_t)kv->dv * sizeof(uint16_t);
    for (int h = 0; h < kv->p.n_head_kv; h++) {
        memcpy((unsigned char *)k + h * kb, kv->k + head_at(kv, il, h, cell) * kv->dk, kb);
        memcpy((unsigned char *)v + h * vb, kv->v + head_at(kv, il, h, cell) * kv->dv, vb);
    }
}

void kv_rows_set(kv_cache *kv, int il, int32_t cell, const void *k, const void *v) {
    const size_t kb = (size_t)kv->dk * sizeof(uint16_t), vb = (size_t)kv->dv * sizeof(uint16_t);
    for (int h = 0; h < kv->p.n_head_kv; h++) {
        memcpy(kv->k + head_at(kv, il, h, cell) * kv->dk, (const unsigned char *)k + h * kb, kb);
        memcpy(kv->v + head_at(kv, il, h, cell) * kv->dv, (const unsigned char *)v + h * vb, vb);
    }
}

static void pos_range(const kv_cache *kv, recur_pos p0, recur_pos p1, uint32_t *lo, uint32_t *hi) {
    *lo = p0 < 0 ? 0 : (uint32_t)p0;
    *hi = (p1 < 0 || (uint32_t)p1 > kv->p.n_cells) ? kv->p.n_cells : (uint32_t)p1;
}

static void seq_recount(kv_cache *kv, recur_seq_id seq) {
    const int32_t *m = seq_map(kv, seq);
    int32_t p = (int32_t)kv->p.n_cells - 1;
    while (p >= 0 && m[p] < 0) p--;
    kv->pos_max[seq] = p;
}

/* Drops seq from the cells of positions [lo, hi). */
static void seq_drop(kv_cache *kv, recur_seq_id seq, uint32_t lo, uint32_t hi) {
    int32_t *m = seq_map(kv, seq);
    for (uint32_t p = lo; p < hi; p++) {
        const int32_t c = m[p];
        if (c < 0) continue;
        m[p] = -1;
        kv->mask[c] &= ~(1ull << seq);
        if (!kv->mask[c]) {
            kv->cell_pos[c] = -1;
            kv->n_free++;
        }
    }
    seq_recount(kv, seq);
}

static bool seq_ok(const kv_cache *kv, recur_seq_id seq) {
    return seq >= 0 && (uint32_t)seq < kv->p.n_seq_max;
}

recur_status kv_seq_rm(kv_cache *kv, recur_seq_id seq, recur_pos p0, recur_pos p1) {
    uint32_t lo, hi;
    pos_range(kv, p0, p1, &lo, &hi);
    if (seq < 0) {
        for (uint32_t s = 0; s < kv->p.n_seq_max; s++) seq_drop(kv, (recur_seq_id)s, lo, hi);
        return RECUR_OK;
    }
    if (!seq_ok(kv, seq)) return RECUR_E_INVALID;
    seq_drop(kv, seq, lo, hi);
    return RECUR_OK;
}

recur_status kv_seq_cp(kv_cache *kv, recur_seq_id src, recur_seq_id dst, recur_pos p0, recur_pos p1) {
    if (!seq_ok(kv, src) || !seq_ok(kv, dst)) return RECUR_E_INVALID;
    if (src == dst) return RECUR_OK;
    uint32_t lo, hi;
    pos_range(kv, p0, p1, &lo, &hi);
    seq_drop(kv, dst, lo, hi);
    const int32_t *ms = seq_map(kv, src);
    int32_t *md = seq_map(kv, dst);
    for (uint32_t p = lo; p < hi; p++) {
        const int32_t c = ms[p];
        if (c < 0) continue;
        md[p] = c;
        kv->mask[c] |= 1ull << dst;
    }
    seq_recount(kv, dst);
    return RECUR_OK;
}

recur_status kv_seq_keep(kv_cache *kv, recur_seq_id seq) {
    if (!seq_ok(kv, seq)) return RECUR_E_INVALID;
    for (uint32_t s = 0; s < kv->p.n_seq_max; s++)
        if ((recur_seq_id)s != seq) seq_drop(kv, (recur_seq_id)s, 0, kv->p.n_cells);
    return RECUR_OK;
}

bool kv_check(const kv_cache *kv, char *err, size_t err_len) {
    uint32_t n_free = 0;
    for (uint32_t c = 0; c < kv->p.n_cells; c++) {
        if (!kv->mask[c]) { n_free++; continue; }
        for (uint32_t s = 0; s < kv->p.n_seq_max; s++) {
            if (!(kv->mask[c] >> s & 1)) continue;
            const int32_t pos = kv->cell_pos[c];
            if (pos < 0 || seq_map(kv, (recur_seq_id)s)[pos] != (int32_t)c) {
                rc_fail(err, err_len, RECUR_E_STATE, "kv: cell %u used by seq %u is not mapped at pos %d", c, s, pos);
                return false;
            }
        }
    }
    if (n_free != kv->n_free) {
        rc_fail(err, err_len, RECUR_E_STATE, "kv: %u free cells counted, %u recorded", n_free, kv->n_free);
        return false;
    }
    for (uint32_t s = 0; s < kv->p.n_seq_max; s++) {
        const int32_t *m = seq_map(kv, (recur_seq_id)s);
        for (uint32_t p = 0; p < kv->p.n_cells; p++) {
            if (m[p] >= 0 && (!(kv->mask[m[p]] >> s & 1) || kv->cell_pos[m[p]] != (int32_t)p)) {
                rc_fail(err, err_len, RECUR_E_STATE, "kv: seq %u pos %u maps to a cell that disagrees", s, p);
                return false;
            }
        }
    }
    return true;
}
