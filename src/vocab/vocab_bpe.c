/* vocab_bpe.c — byte-level BPE tokenizing of one raw-text fragment.
 *
 * As llama.cpp's BPE tokenizer: the pre-tokenizer splits the fragment into words; each word's
 * bytes are mapped to GPT-2 bytes_to_unicode characters; with ignore_merges (llama3 family) a
 * word that is a whole token is emitted at once; otherwise, repeatedly, the adjacent pair with
 * the lowest merge rank is merged (ties: the leftmost pair). A final symbol that is no token
 * falls back to the tokens of its single bytes (bytes that are no token are dropped).
 *
 * Merge-loop invariant as in vocab_spm.c: symbols only grow rightwards from a fixed offset, so
 * a queued pair is current iff both lengths are unchanged.
 */
#include "vocab/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct bpe_sym { int32_t prev, next; uint32_t off, n; } bpe_sym;
typedef struct bpe_pair { int32_t rank, left, right; uint32_t nl, nr; } bpe_pair;

typedef struct bpe_scratch {
    char     *enc;  size_t enc_cap;    /* the byte-encoded word */
    bpe_sym  *sym;  size_t sym_cap;
    bpe_pair *heap; size_t heap_n, heap_cap;
    bool      oom;
} bpe_scratch;

static bool pair_before(const bpe_pair *x, const bpe_pair *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(bpe_scratch *s, bpe_pair p) {
    if (s->heap_n == s->heap_cap) {
        size_t nc = s->heap_cap ? s->heap_cap * 2 : 64;
        bpe_pair *na = realloc(s->heap, nc * sizeof *na);
        if (!na) { s->oom = true; return; }
        s->heap = na; s->heap_cap = nc;
    }
    size_t i = s->heap_n++;
    while (i > 0 && pair_before(&p, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = p;
}

static bpe_pair heap_pop(bpe_scratch *s) {
    bpe_pair top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_before(&s->heap[c + 1], &s->heap[c])) c++;
        if (!pair_before(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static void try_pair(const vocab *v, bpe_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const bpe_sym *a = &s->sym[l], *b = &s->sym[r];
    int32_t rank = vocab_merge_rank(v, s->enc + a->off, a->n, s->enc + b->off, b->n);
    if (rank >= 0) heap_push(s, (bpe_pair){ rank, l, r, a->n, b->n });
}

static bool reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t nc = need < 64 ? 64 : need * 2;
    void *np = realloc(*p, nc * elem);
    if (!np) return false;
    *p = np; *cap = nc;
    return true;
}

static void emit_symbol(const vocab *v, const char *s, uint32_t n, tokvec *out) {
    recur_token id = vocab_find(v, s, n);
    if (id >= 0) { tokvec_push(out, id); return; }
    for (uint32_t i = 0; i < n; i++) {
        recur_token b = vocab_find(v, s + i, 1);
        if (b >= 0) tokvec_push(out, b);
    }
}

static void bpe_word(const vocab *v, const char *w, size_t wn, bpe_scratch *s, tokvec *out) {
    if (!reserve((void **)&s->enc, &s->enc_cap, wn * 2, 1) ||
        !reserve((void **)&s->sym, &s->sym_cap, wn, sizeof *s->sym)) { s->oom = true; return; }
    size_t n = 0;
    for (size_t i = 0; i < wn; i++) n += vocab_utf8_encode(v->byte_cpt[(uint8_t)w[i]], s->enc + n);
    if (v->ignore_merges) {
        recur_token id = vocab_find(v, s->enc, n);
        if (id >= 0) { tokvec_push(out, id); return; }
    }
    int32_t ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t cl = vocab_utf8_len((uint8_t)s->enc[off]);
        if (cl > n - off) cl = n - off;
        s->sym[ns] = (bpe_sym){ ns - 1, off + cl == n ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl };
        off += cl;
    }
    s->heap_n = 0;
    for (int32_t i = 1; i < ns; i++) try_pair(v, s, i - 1, i);
    while (s->heap_n && !s->oom) {
        bpe_pair p = heap_pop(s);
        bpe_sym *l = &s->sym[p.left], *r = &s->sym[p.right];
        if (l->n != p.nl || r->n != p.nr || r->n == 0) continue;    /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        try_pair(v, s, l->prev, p.left);
        try_pair(v, s, p.left, l->next);
    }
    if (s->oom) return;
    for (int32_t i = 0; i != -1 && ns > 0; i = s->sym[i].next)
        emit_symbol(v, s->enc + s->sym[i].off, s->sym[i].n, out);
}

void vocab_bpe_fragment(const vocab *v, const char *text, size_t len, tokvec *out) {
    char *words;
    size_t *spans, n_words;
    if (vocab_pretok_split(v->pretok, text, len, &words, &spans, &n_words)) { out->oom = true; return; }
    bpe_scratch s = { 0 };
    for (size_t k = 0; k < n_words && !s.oom && !out->oom; k++)
        bpe_word(v, words + spans[2 * k], spans[2 * k + 1], &s, out);
    if (s.oom) out->oom = true;
    free(s.enc); free(s.sym); free(s.heap);
    free(words); free(spans);
}
