/* vocab_tokenize.c — text to token ids: special-token splitting, then SPM or BPE per fragment.
 *
 * As llama.cpp's tokenize:
 *  1. The text is cut into fragments at every occurrence of a special token (CONTROL,
 *     USER_DEFINED, UNKNOWN), longest token first; each token, in turn, splits all the raw
 *     fragments left by the previous ones (leftmost occurrences, no overlap). Without
 *     parse_special only USER_DEFINED tokens are matched.
 *  2. SPM: BOS when add_special and add_bos; a "▁" is prefixed (add_space_prefix) to the first
 *     raw fragment and to every raw fragment that follows a special token. BPE: BOS likewise.
 *  3. EOS at the end when add_special and add_eos.
 * All scratch memory is per call, so concurrent calls on one vocab are safe.
 */
#include "vocab/vocab_internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void tokvec_push(tokvec *tv, recur_token t) {
    if (tv->oom) return;
    if (tv->n == tv->cap) {
        size_t nc = tv->cap ? tv->cap * 2 : 64;
        recur_token *ni = realloc(tv->ids, nc * sizeof *ni);
        if (!ni) { tv->oom = true; return; }
        tv->ids = ni; tv->cap = nc;
    }
    tv->ids[tv->n++] = t;
}

/* A fragment: raw text [off, off+len) when tok < 0, else the special token tok. */
typedef struct frag { recur_token tok; size_t off, len; } frag;
typedef struct fragvec { frag *f; size_t n, cap; bool oom; } fragvec;

static void frag_push(fragvec *fv, recur_token tok, size_t off, size_t len) {
    if (fv->oom) return;
    if (fv->n == fv->cap) {
        size_t nc = fv->cap ? fv->cap * 2 : 16;
        frag *nf = realloc(fv->f, nc * sizeof *nf);
        if (!nf) { fv->oom = true; return; }
        fv->f = nf; fv->cap = nc;
    }
    fv->f[fv->n++] = (frag){ tok, off, len };
}

static bool occurs_in_raw(const fragvec *fv, const char *text, const char *s, size_t n) {
    for (size_t i = 0; i < fv->n; i++)
        if (fv->f[i].tok < 0 && memmem(text + fv->f[i].off, fv->f[i].len, s, n)) return true;
    return false;
}

/* Splits every raw fragment of *cur at the occurrences of token id; the result goes to *nxt,
 * and the two are swapped. */
static void split_at(const vocab *v, recur_token id, const char *text, fragvec *cur, fragvec *nxt) {
    const char *s = v->text_buf + v->text_off[id];
    size_t n = v->text_len[id];
    nxt->n = 0;
    for (size_t i = 0; i < cur->n; i++) {
        frag f = cur->f[i];
        if (f.tok >= 0) { frag_push(nxt, f.tok, 0, 0); continue; }
        size_t pos = f.off, end = f.off + f.len;
        const char *m;
        while (pos < end && (m = memmem(text + pos, end - pos, s, n)) != NULL) {
            size_t at = (size_t)(m - text);
            if (at > pos) frag_push(nxt, -1, pos, at - pos);
            frag_push(nxt, id, 0, 0);
            pos = at + n;
        }
        if (pos < end) frag_push(nxt, -1, pos, end - pos);
    }
    fragvec t = *cur; *cur = *nxt; *nxt = t;
}

static bool partition(const vocab *v, const char *text, size_t len, bool parse_special, fragvec *out) {
    fragvec tmp = { 0 };
    out->n = 0;
    if (len > 0) frag_push(out, -1, 0, len);
    for (int32_t k = 0; k < v->n_special && !out->oom && !tmp.oom; k++) {
        recur_token id = v->special[k];
        if (!parse_special && (v->attr[id] & (VA_CONTROL | VA_UNKNOWN))) continue;
        if (!occurs_in_raw(out, text, v->text_buf + v->text_off[id], v->text_len[id])) continue;
        split_at(v, id, text, out, &tmp);
    }
    bool ok = !out->oom && !tmp.oom;
    free(tmp.f);
    return ok;
}

int vocab_tokenize(const vocab *v, const char *text, size_t text_len, recur_token *tokens,
                   int max_tokens, bool add_special, bool parse_special) {
    if (v->kind == VOCAB_NONE) return -RECUR_E_UNSUPPORTED;
    if ((!text && text_len) || max_tokens < 0 || (!tokens && max_tokens > 0)) return -RECUR_E_INVALID;
    fragvec fv = { 0 };
    tokvec out = { 0 };
    if (!partition(v, text, text_len, parse_special, &fv)) out.oom = true;

    if (add_special && v->add_bos) tokvec_push(&out, v->bos);
    bool prev_special = true;                  /* SPM: prefix a space to the first fragment */
    for (size_t i = 0; i < fv.n && !out.oom; i++) {
        const frag *f = &fv.f[i];
        if (f->tok >= 0) {
            tokvec_push(&out, f->tok);
            prev_special = true;
        } else if (v->kind == VOCAB_SPM) {
            vocab_spm_fragment(v, text + f->off, f->len, v->add_space_prefix && prev_special, &out);
            prev_special = false;
        } else {
            vocab_bpe_fragment(v, text + f->off, f->len, &out);
        }
    }
    if (add_special && v->add_eos) tokvec_push(&out, v->eos);
    free(fv.f);

    int rc;
    if (out.oom) rc = -RECUR_E_NOMEM;
    else if (out.n > INT_MAX) rc = -RECUR_E_FULL;
    else {
        rc = (int)out.n;
        size_t k = out.n < (size_t)max_tokens ? out.n : (size_t)max_tokens;
        if (k) memcpy(tokens, out.ids, k * sizeof *tokens);
    }
    free(out.ids);
    return rc;
}
