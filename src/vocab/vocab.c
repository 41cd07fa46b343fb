/* vocab.c — loading a tokenizer from GGUF metadata, token lookups, special ids.
 *
 * Everything is copied out of the gguf_file: texts into one buffer, scores, attributes, BPE
 * merges. Text -> id and (left, right) -> merge rank are open-addressing hash tables keyed by
 * XXH3. After vocab_load returns the vocab is immutable, so every reader is thread-safe.
 *
 * llama.cpp facts reproduced here (the reference vectors depend on them):
 *  - An empty token text is stored as "[EMPTY_<id>]"; with duplicate texts the last id wins.
 *  - Defaults: SPM bos=1 eos=2 unk=0, add_bos, add_space_prefix; BPE bos=eos=11; the
 *    pre-tokenizer may turn on add_bos (llama3 family) and clean_spaces (all but qwen2/35).
 *  - A special-id key whose value is out of range is ignored (the default stays).
 *  - Tokens whose text is a known end-of-turn / fill-in-the-middle marker ("<|im_end|>",
 *    "</s>", "<|fim_pad|>", ...) are forced to CONTROL and join the end-of-generation set.
 */
#include "vocab/vocab_internal.h"
#include "core/err.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- hashing ------------------------------------------------------------------------------ */

static uint64_t pow2_slots(uint64_t n) {
    uint64_t s = 16;
    while (s < 2 * n) s <<= 1;
    return s;
}

recur_token vocab_find(const vocab *v, const char *s, size_t n) {
    if (!v->tok_slot) return -1;
    uint64_t i = XXH3_64bits(s, n) & v->tok_mask;
    for (;; i = (i + 1) & v->tok_mask) {
        int32_t id = v->tok_slot[i];
        if (id < 0) return -1;
        if (v->text_len[id] == n && memcmp(v->text_buf + v->text_off[id], s, n) == 0) return id;
    }
}

static uint64_t merge_hash(const char *l, size_t nl, const char *r, size_t nr) {
    return XXH3_64bits_withSeed(r, nr, XXH3_64bits(l, nl));
}

int32_t vocab_merge_rank(const vocab *v, const char *l, size_t nl, const char *r, size_t nr) {
    if (!v->mrg_slot) return -1;
    uint64_t i = merge_hash(l, nl, r, nr) & v->mrg_mask;
    for (;; i = (i + 1) & v->mrg_mask) {
        int32_t m = v->mrg_slot[i];
        if (m < 0) return -1;
        const vocab_merge *e = &v->merges[m];
        const char *s = v->merge_buf + e->off;
        if (e->left_len == nl && e->right_len == nr && memcmp(s, l, nl) == 0 &&
            memcmp(s + nl + 1, r, nr) == 0)
            return m;
    }
}

/* ---- loading: tokens ---------------------------------------------------------------------- */

static recur_status load_tokens(vocab *v, const gguf_file *g, char *err, size_t err_len) {
    gguf_arr toks, types, scores;
    if (!gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) || toks.elem_type != GGUF_KV_STRING)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.tokens: missing or not a string array");
    if (toks.n == 0 || toks.n > INT32_MAX)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.tokens: bad count %llu",
                       (unsigned long long)toks.n);
    bool has_types = gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    bool has_scores = gguf_get_arr(g, "tokenizer.ggml.scores", &scores);
    if (has_types && (types.n != toks.n || types.elem_type == GGUF_KV_STRING))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.token_type: %llu entries for %llu tokens",
                       (unsigned long long)types.n, (unsigned long long)toks.n);
    if (has_scores && (scores.n != toks.n || scores.elem_type == GGUF_KV_STRING))
        return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.scores: %llu entries for %llu tokens",
                       (unsigned long long)scores.n, (unsigned long long)toks.n);

    size_t n = (size_t)toks.n, total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = toks.strs[i].len ? toks.strs[i].len : 24;   /* "[EMPTY_<id>]" */
        if (len > UINT32_MAX / 2) return rc_fail(err, err_len, RECUR_E_FORMAT, "token %zu: too long", i);
        total += len + 1;
    }
    v->n_tokens = (int32_t)n;
    v->text_buf = malloc(total);
    v->text_off = malloc(n * sizeof *v->text_off);
    v->text_len = malloc(n * sizeof *v->text_len);
    v->scores = calloc(n, sizeof *v->scores);
    v->attr = malloc(n * sizeof *v->attr);
    if (!v->text_buf || !v->text_off || !v->text_len || !v->scores || !v->attr) return RECUR_E_NOMEM;

    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const gguf_str *s = &toks.strs[i];
        v->text_off[i] = off;
        if (s->len) {
            memcpy(v->text_buf + off, s->ptr, s->len);
            v->text_len[i] = (uint32_t)s->len;
        } else {
            v->text_len[i] = (uint32_t)snprintf(v->text_buf + off, 25, "[EMPTY_%zu]", i);
        }
        off += v->text_len[i];
        v->text_buf[off++] = '\0';
        if (v->text_len[i] > v->max_text_len) v->max_text_len = v->text_len[i];
        if (has_scores) v->scores[i] = (float)gguf_arr_float(&scores, i);
        uint16_t a = VA_NORMAL;
        if (has_types) {
            switch (gguf_arr_int(&types, i)) {
            case VOCAB_TT_NORMAL:       a = VA_NORMAL; break;
            case VOCAB_TT_UNKNOWN:      a = VA_UNKNOWN; break;
            case VOCAB_TT_CONTROL:      a = VA_CONTROL; break;
            case VOCAB_TT_USER_DEFINED: a = VA_USER_DEFINED; break;
            case VOCAB_TT_UNUSED:       a = VA_UNUSED; break;
            case VOCAB_TT_BYTE:         a = VA_BYTE; break;
            default:                    a = 0; break;     /* undefined: renders as nothing */
            }
        }
        v->attr[i] = a;
    }

    v->tok_mask = pow2_slots(n) - 1;
    v->tok_slot = malloc((v->tok_mask + 1) * sizeof *v->tok_slot);
    if (!v->tok_slot) return RECUR_E_NOMEM;
    memset(v->tok_slot, 0xff, (v->tok_mask + 1) * sizeof *v->tok_slot);
    for (size_t i = 0; i < n; i++) {
        const char *s = v->text_buf + v->text_off[i];
        uint64_t h = XXH3_64bits(s, v->text_len[i]) & v->tok_mask;
        for (;; h = (h + 1) & v->tok_mask) {
            int32_t id = v->tok_slot[h];
            if (id < 0 || (v->text_len[id] == v->text_len[i] &&
                           memcmp(v->text_buf + v->text_off[id], s, v->text_len[i]) == 0)) {
                v->tok_slot[h] = (int32_t)i;     /* duplicates: the last id wins */
                break;
            }
        }
    }
    return RECUR_OK;
}

/* ---- loading: BPE merges ------------------------------------------------------------------ */

static recur_status load_merges(vocab *v, const gguf_file *g, char *err, size_t err_len) {
    gguf_arr m;
    if (!gguf_get_arr(g, "tokenizer.ggml.merges", &m) || m.elem_type != GGUF_KV_STRING)
        return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.merges: missing or not a string array (gpt2 tokenizer)");
    if (m.n > INT32_MAX) return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.merges: too many");
    size_t total = 0;
    for (uint64_t i = 0; i < m.n; i++) total += m.strs[i].len + 1;
    if (total > UINT32_MAX) return rc_fail(err, err_len, RECUR_E_FORMAT, "tokenizer.ggml.merges: too large");
    v->merge_buf = malloc(total ? total : 1);
    v->merges = malloc((m.n ? m.n : 1) * sizeof *v->merges);
    v->mrg_mask = pow2_slots(m.n) - 1;
    v->mrg_slot = malloc((v->mrg_mask + 1) * sizeof *v->mrg_slot);
    if (!v->merge_buf || !v->merges || !v->mrg_slot) return RECUR_E_NOMEM;
    memset(v->mrg_slot, 0xff, (v->mrg_mask + 1) * sizeof *v->mrg_slot);

    uint32_t off = 0;
    for (uint64_t i = 0; i < m.n; i++) {
        const gguf_str *s = &m.strs[i];
        vocab_merge *e = &v->merges[i];
        memcpy(v->merge_buf + off, s->ptr, s->len);
        v->merge_buf[off + s->len] = '\0';
        e->off = off;
        off += (uint32_t)s->len + 1;
        const char *sp = s->len > 1 ? memchr(s->ptr + 1, ' ', s->len - 1) : NULL;
        if (!sp) { e->left_len = e->right_len = 0; continue; }   /* never matches a pair */
        e->left_len = (uint32_t)(sp - s->ptr);
        e->right_len = (uint32_t)(s->len - e->left_len - 1);
        const char *l = v->merge_buf + e->off, *r = l + e->left_len + 1;
        uint64_t h = merge_hash(l, e->left_len, r, e->right_len) & v->mrg_mask;
        for (;; h = (h + 1) & v->mrg_mask) {
            int32_t o = v->mrg_slot[h];
            if (o < 0) { v->mrg_slot[h] = (int32_t)i; break; }
            const vocab_merge *oe = &v->merges[o];
            const char *os = v->merge_buf + oe->off;
            if (oe->left_len == e->left_len && oe->right_len == e->right_len &&
                memcmp(os, l, s->len) == 0)
                break;                                  /* duplicate pair: the first rank wins */
        }
    }
    v->n_merges = (int32_t)m.n;
    return RECUR_OK;
}

/* ---- loading: special ids and text-detected markers --------------------------------------- */

static void read_id(const vocab *v, const gguf_file *g, const char *key, recur_token *id) {
    int64_t x;
    if (gguf_get_int(g, key, &x) && x >= 0 && x < v->n_tokens) *id = (recur_token)x;
}

static void force_control(vocab *v, recur_token id) {
    if (id >= 0) v->attr[id] |= VA_CONTROL;
}

/* The id of the first text of list that is a token (forced to CONTROL), or -1. */
static recur_token find_marker(vocab *v, const char *const *list) {
    for (; *list; list++) {
        recur_token id = vocab_find(v, *list, strlen(*list));
        if (id >= 0) { force_control(v, id); return id; }
    }
    return -1;
}

static void eog_add(vocab *v, recur_token id) {
    if (id < 0) return;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) return;
    v->eog[v->n_eog++] = id;
}

static void eog_remove(vocab *v, recur_token id) {
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) { v->eog[i] = v->eog[--v->n_eog]; return; }
}

static const char *const k_eot[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>", NULL };
static const char *const k_eom[] = { "<|eom_id|>", NULL };
static const char *const k_fim_pre[] = { "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>",
    "<|code_prefix|>", "<|prefix|>", NULL };
static const char *const k_fim_suf[] = { "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>",
    "<|code_suffix|>", "<|suffix|>", NULL };
static const char *const k_fim_mid[] = { "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>",
    "<|code_middle|>", "<|middle|>", NULL };
static const char *const k_fim_pad[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL };
static const char *const k_fim_rep[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<reponame>", NULL };
static const char *const k_fim_sep[] = { "<|file_sep|>", NULL };
static const char *const k_eog[] = { "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
    "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", NULL };
static const char *const k_user_defined[] = { "<|channel|>", "<|message|>", "<|start|>",
    "<|constrain|>", NULL };

static recur_token find_text(const vocab *v, const char *s) { return vocab_find(v, s, strlen(s)); }

static recur_status detect_markers(vocab *v) {
    if (v->eot < 0) v->eot = find_marker(v, k_eot);
    if (v->eom < 0) v->eom = find_marker(v, k_eom);
    find_marker(v, k_fim_pre);
    find_marker(v, k_fim_suf);
    find_marker(v, k_fim_mid);
    recur_token pad = find_marker(v, k_fim_pad), rep = find_marker(v, k_fim_rep);
    recur_token fsep = find_marker(v, k_fim_sep);

    v->eog = malloc(64 * sizeof *v->eog);
    if (!v->eog) return RECUR_E_NOMEM;
    eog_add(v, pad); eog_add(v, rep); eog_add(v, fsep);
    for (const char *const *s = k_eog; *s; s++) {
        recur_token id = find_text(v, *s);
        if (id >= 0) { eog_add(v, id); force_control(v, id); }
    }
    for (const char *const *s = k_user_defined; *s; s++) {
        recur_token id = find_text(v, *s);
        if (id >= 0) v->attr[id] = VA_USER_DEFINED;
    }
    eog_add(v, v->eos); eog_add(v, v->eot); eog_add(v, v->eom);

    /* harmony-style vocabs: "<|end|>" ends a message, not the generation */
    recur_token end = find_text(v, "<|end|>");
    bool call = find_text(v, "<|call|>") >= 0 || find_text(v, "<|calls|>") >= 0;
    if (end >= 0 && call && (find_text(v, "<|return|>") >= 0 || find_text(v, "<|flush|>") >= 0)) {
        eog_remove(v, end);
        v->attr[end] = VA_USER_DEFINED;
    }
    /* gemma4-style vocabs: "</s>" is text there */
    recur_token s = find_text(v, "</s>");
    if (s >= 0 && find_text(v, "<|tool_response>") >= 0) {
        eog_remove(v, s);
        v->attr[s] = VA_NORMAL;
    }
    for (int32_t i = 1; i < v->n_eog; i++)            /* insertion sort: a handful of ids */
        for (int32_t j = i; j > 0 && v->eog[j - 1] > v->eog[j]; j--) {
            recur_token t = v->eog[j]; v->eog[j] = v->eog[j - 1]; v->eog[j - 1] = t;
        }
    return RECUR_OK;
}

/* Length descending, then id ascending (a merge sort: qsort has no context argument). */
static void sort_special(const vocab *v, int32_t *a, int32_t *tmp, int32_t n) {
    if (n < 2) return;
    int32_t h = n / 2;
    sort_special(v, a, tmp, h);
    sort_special(v, a + h, tmp, n - h);
    int32_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        uint32_t li = v->text_len[a[i]], lj = v->text_len[a[j]];
        bool take_left = li > lj || (li == lj && a[i] < a[j]);
        tmp[k++] = take_left ? a[i++] : a[j++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

static recur_status build_special(vocab *v) {
    int32_t n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (VA_CONTROL | VA_USER_DEFINED | VA_UNKNOWN)) n++;
    v->special = malloc((n ? n : 1) * sizeof *v->special);
    int32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!v->special || !tmp) { free(tmp); return RECUR_E_NOMEM; }
    n = 0;
    for (int32_t i = 0; i < v->n_tokens; i++)
        if (v->attr[i] & (VA_CONTROL | VA_USER_DEFINED | VA_UNKNOWN)) v->special[n++] = i;
    sort_special(v, v->special, tmp, n);
    free(tmp);
    v->n_special = n;
    return RECUR_OK;
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
 * U+0100.. in byte order. */
static void build_byte_tables(vocab *v) {
    uint32_t next = 256;
    for (int i = 0; i < 512; i++) v->cpt_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        v->byte_cpt[b] = self ? (uint32_t)b : next++;
        v->cpt_byte[v->byte_cpt[b]] = (int16_t)b;
    }
}

/* ---- loading: the whole vocab ------------------------------------------------------------- */

static recur_status load_kind(vocab *v, const gguf_file *g, char *err, size_t err_len) {
    gguf_str model, pre;
    if (!gguf_get_str(g, "tokenizer.ggml.model", &model) || gguf_str_eq(model, "none") ||
        gguf_str_eq(model, "no_vocab")) {
        v->kind = VOCAB_NONE;
        return RECUR_OK;
    }
    if (gguf_str_eq(model, "llama")) {
        v->kind = VOCAB_SPM;
        v->bos = 1; v->eos = 2; v->unk = 0;
        v->add_bos = true; v->add_space_prefix = true;
        return RECUR_OK;
    }
    if (!gguf_str_eq(model, "gpt2"))
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED,
                       "tokenizer.ggml.model '%.*s' is not supported (supported: llama, gpt2, none)",
                       (int)(model.len > 64 ? 64 : model.len), model.ptr);
    v->kind = VOCAB_BPE;
    v->bos = 11; v->eos = 11;
    v->clean_spaces = true;
    bool has_pre = gguf_get_str(g, "tokenizer.ggml.pre", &pre) && pre.len > 0;
    const vocab_pre_info *pi = has_pre ? vocab_pre_lookup(pre.ptr, pre.len) : vocab_pre_lookup("default", 7);
    if (!pi)
        return rc_fail(err, err_len, RECUR_E_UNSUPPORTED,
                       "tokenizer.ggml.pre '%.*s' is not supported (supported: %s)",
                       (int)(pre.len > 64 ? 64 : pre.len), pre.ptr, vocab_pre_supported());
    v->ignore_merges = pi->ignore_merges;
    v->add_bos = pi->add_bos;
    v->clean_spaces = pi->clean_spaces;
    return vocab_pretok_new(pi, &v->pretok, err, err_len);
}

static recur_status load_all(vocab *v, const gguf_file *g, char *err, size_t err_len) {
    recur_status rc = load_kind(v, g, err, err_len);
    if (rc || v->kind == VOCAB_NONE) return rc;
    if ((rc = load_tokens(v, g, err, err_len))) return rc;
    if (v->kind == VOCAB_BPE && (rc = load_merges(v, g, err, err_len))) return rc;

    recur_token *ids[] = { &v->bos, &v->eos, &v->unk };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (*ids[i] >= v->n_tokens) *ids[i] = -1;
    read_id(v, g, "tokenizer.ggml.bos_token_id", &v->bos);
    read_id(v, g, "tokenizer.ggml.eos_token_id", &v->eos);
    read_id(v, g, "tokenizer.ggml.eot_token_id", &v->eot);
    read_id(v, g, "tokenizer.ggml.eom_token_id", &v->eom);
    read_id(v, g, "tokenizer.ggml.unknown_token_id", &v->unk);
    read_id(v, g, "tokenizer.ggml.seperator_token_id", &v->sep);
    read_id(v, g, "tokenizer.ggml.padding_token_id", &v->pad);
    read_id(v, g, "tokenizer.ggml.mask_token_id", &v->mask);
    gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos);
    gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos);
    gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
    if (v->add_bos && v->bos < 0) v->add_bos = false;
    if (v->add_eos && v->eos < 0) v->add_eos = false;

    if ((rc = detect_markers(v))) return rc;
    if ((rc = build_special(v))) return rc;
    build_byte_tables(v);
    return RECUR_OK;
}

recur_status vocab_load(const gguf_file *g, vocab **out, char *err, size_t err_len) {
    *out = NULL;
    vocab *v = calloc(1, sizeof *v);
    if (!v) return rc_fail(err, err_len, RECUR_E_NOMEM, "vocab: out of memory");
    v->bos = v->eos = v->eot = v->eom = v->unk = v->sep = v->pad = v->mask = -1;
    recur_status rc = load_all(v, g, err, err_len);
    if (rc) {
        if (rc == RECUR_E_NOMEM) rc_fail(err, err_len, rc, "vocab: out of memory");
        vocab_free(v);
        return rc;
    }
    *out = v;
    return RECUR_OK;
}

void vocab_free(vocab *v) {
    if (!v) return;
    vocab_pretok_free(v->pretok);
    free(v->text_buf); free(v->text_off); free(v->text_len); free(v->scores); free(v->attr);
    free(v->tok_slot); free(v->merge_buf); free(v->merges); free(v->mrg_slot);
    free(v->special); free(v->eog);
    free(v);
}

/* ---- accessors ---------------------------------------------------------------------------- */

vocab_kind  vocab_kind_of(const vocab *v)  { return v->kind; }
int32_t     vocab_n_tokens(const vocab *v) { return v->n_tokens; }
recur_token vocab_bos(const vocab *v)      { return v->bos; }
recur_token vocab_eos(const vocab *v)      { return v->eos; }
recur_token vocab_eot(const vocab *v)      { return v->eot; }
bool        vocab_add_bos(const vocab *v)  { return v->add_bos; }
bool        vocab_add_eos(const vocab *v)  { return v->add_eos; }
int32_t     vocab_max_piece_len(const vocab *v) { return (int32_t)v->max_text_len; }

bool vocab_is_eog(const vocab *v, recur_token t) {
    int32_t lo = 0, hi = v->n_eog;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        if (v->eog[mid] == t) return true;
        if (v->eog[mid] < t) lo = mid + 1; else hi = mid;
    }
    return false;
}

bool vocab_is_control(const vocab *v, recur_token t) {
    return t >= 0 && t < v->n_tokens && (v->attr[t] & VA_CONTROL);
}

const char *vocab_token_text(const vocab *v, recur_token t, size_t *len) {
    if (t < 0 || t >= v->n_tokens) return NULL;
    if (len) *len = v->text_len[t];
    return v->text_buf + v->text_off[t];
}

recur_token vocab_text_to_token(const vocab *v, const char *text, size_t len) {
    return v->kind == VOCAB_NONE ? -1 : vocab_find(v, text, len);
}
