/* vocab_spm.c — SentencePiece-style tokenizing of one raw-text fragment.
 *
 * As llama.cpp's SPM tokenizer: spaces become U+2581 ("▁"), optionally one is prefixed; the
 * text is cut into UTF-8 characters (a lead byte announces the length; a stray byte is a
 * character of its own); then, repeatedly, the adjacent pair whose concatenation is the
 * highest-scoring token is merged (ties: the leftmost pair). A final symbol that is no token
 * is emitted byte by byte as <0xXX> tokens.
 *
 * Invariant of the merge loop: a symbol's text starts at a fixed offset and only grows by
 * absorbing its right neighbour, so a queued pair is still current iff both symbols are alive
 * and their lengths still add up to the length recorded when it was queued.
 */
#include "vocab/vocab_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym { int32_t prev, next; uint32_t off, n; } spm_sym;
typedef struct spm_pair { float score; int32_t left, right; uint32_t size; } spm_pair;

typedef struct spm_heap { spm_pair *a; size_t n, cap; bool oom; } spm_heap;

/* true when x must come out of the queue before y */
static bool pair_before(const spm_pair *x, const spm_pair *y) {
    return x->score > y->score || (x->score == y->score && x->left < y->left);
}

static void heap_push(spm_heap *h, spm_pair p) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        spm_pair *na = realloc(h->a, nc * sizeof *na);
        if (!na) { h->oom = true; return; }
        h->a = na; h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0 && pair_before(&p, &h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = p;
}

static spm_pair heap_pop(spm_heap *h) {
    spm_pair top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && pair_before(&h->a[c + 1], &h->a[c])) c++;
        if (!pair_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (h->n) h->a[i] = last;
    return top;
}

static void try_pair(const vocab *v, const char *text, const spm_sym *sym, int32_t l, int32_t r,
                     spm_heap *h) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].n + sym[r].n;
    recur_token id = vocab_find(v, text + sym[l].off, size);
    if (id < 0) return;
    heap_push(h, (spm_pair){ v->scores[id], l, r, size });
}

/* <0xXX>, else the byte itself as a token, else unk. */
static recur_token byte_token(const vocab *v, uint8_t b) {
    static const char hex[] = "0123456789ABCDEF";
    char buf[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
    recur_token id = vocab_find(v, buf, 6);
    if (id < 0) id = vocab_find(v, (const char *)&b, 1);
    return id >= 0 ? id : v->unk;
}

static void emit(const vocab *v, const char *s, uint32_t n, tokvec *out) {
    recur_token id = vocab_find(v, s, n);
    if (id >= 0) { tokvec_push(out, id); return; }
    for (uint32_t i = 0; i < n; i++) {
        recur_token b = byte_token(v, (uint8_t)s[i]);
        if (b >= 0) tokvec_push(out, b);
    }
}

void vocab_spm_fragment(const vocab *v, const char *raw, size_t len, bool space_prefix, tokvec *out) {
    /* escape: ' ' -> U+2581, after an optional leading space */
    size_t n_spaces = space_prefix;
    for (size_t i = 0; i < len; i++) n_spaces += raw[i] == ' ';
    size_t n = len + space_prefix + 2 * n_spaces;
    if (n == 0) return;
    if (n >= UINT32_MAX) { out->oom = true; return; }
    char *text = malloc(n);
    spm_sym *sym = malloc(n * sizeof *sym);
    spm_heap h = { 0 };
    if (!text || !sym) goto oom;
    size_t k = 0;
    for (size_t i = 0; i < len + space_prefix; i++) {
        char c = space_prefix ? (i == 0 ? ' ' : raw[i - 1]) : raw[i];
        if (c == ' ') { memcpy(text + k, "\xe2\x96\x81", 3); k += 3; } else text[k++] = c;
    }

    int32_t ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t cl = vocab_utf8_len((uint8_t)text[off]);
        if (cl > n - off) cl = n - off;
        sym[ns] = (spm_sym){ ns - 1, off + cl == n ? -1 : ns + 1, (uint32_t)off, (uint32_t)cl };
        off += cl;
    }
    for (int32_t i = 1; i < ns; i++) try_pair(v, text, sym, i - 1, i, &h);

    while (h.n && !h.oom) {
        spm_pair p = heap_pop(&h);
        spm_sym *l = &sym[p.left], *r = &sym[p.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != p.size) continue;   /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = p.left;
        try_pair(v, text, sym, l->prev, p.left, &h);
        try_pair(v, text, sym, p.left, l->next, &h);
    }
    if (h.oom) goto oom;
    for (int32_t i = 0; i != -1; i = sym[i].next) emit(v, text + sym[i].off, sym[i].n, out);
    free(h.a); free(sym); free(text);
    return;
oom:
    out->oom = true;
    free(h.a); free(sym); free(text);
}
