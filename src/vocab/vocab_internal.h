/* vocab_internal.h — what the vocab/ files share; not part of any API.
 *
 * Layout of a loaded vocab (all owned, nothing points into the gguf mapping):
 *   text_buf  all token texts, each followed by a NUL; token i is text_buf[text_off[i]],
 *             text_len[i] bytes.
 *   tok_slot  open-addressing hash (linear probing) text -> id, tok_mask + 1 slots, -1 = empty.
 *   merges    BPE only: merge i is "left right" (split at the first space after byte 0) stored
 *             in merge_buf; mrg_slot hashes (left, right) -> rank, first occurrence wins.
 *   special   ids of CONTROL / USER_DEFINED / UNKNOWN tokens, longest text first (ties: lower
 *             id first); the raw-text splitter matches them in this order.
 */
#ifndef RECUR_VOCAB_INTERNAL_H
#define RECUR_VOCAB_INTERNAL_H

#include "vocab/vocab.h"

/* Token attributes (bit set; llama.cpp's llama_token_attr subset). */
enum {
    VA_UNKNOWN = 1u << 0, VA_UNUSED = 1u << 1, VA_NORMAL = 1u << 2, VA_CONTROL = 1u << 3,
    VA_USER_DEFINED = 1u << 4, VA_BYTE = 1u << 5,
};

/* A pre-tokenizer: a chain of regexes, each splitting the pieces the previous one produced. */
typedef struct vocab_pretok vocab_pretok;

typedef struct vocab_merge {
    uint32_t off;        /* into merge_buf: left bytes, one space, right bytes */
    uint32_t left_len;
    uint32_t right_len;
} vocab_merge;

struct vocab {
    vocab_kind kind;
    int32_t    n_tokens;

    char      *text_buf;
    uint64_t  *text_off;          /* [n_tokens] */
    uint32_t  *text_len;          /* [n_tokens] */
    float     *scores;            /* [n_tokens], SPM; 0 when the file has none */
    uint16_t  *attr;              /* [n_tokens], VA_* */
    uint32_t   max_text_len;

    int32_t   *tok_slot;          /* [tok_mask + 1] */
    uint64_t   tok_mask;

    char        *merge_buf;
    vocab_merge *merges;          /* [n_merges] */
    int32_t      n_merges;
    int32_t     *mrg_slot;        /* [mrg_mask + 1], merge index or -1 */
    uint64_t     mrg_mask;

    int32_t   *special;           /* [n_special] */
    int32_t    n_special;
    int32_t   *eog;               /* [n_eog], sorted */
    int32_t    n_eog;

    recur_token bos, eos, eot, eom, unk, sep, pad, mask;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;           /* BPE: a piece that is a whole token skips the merges */
    bool clean_spaces;            /* detokenize: " ," -> "," etc. (llama.cpp clean_spaces) */

    vocab_pretok *pretok;         /* BPE only */
    uint32_t byte_cpt[256];       /* GPT-2 bytes_to_unicode: byte -> code point */
    int16_t  cpt_byte[512];       /* inverse for code points < 512, -1 when none */
};

/* ---- vocab.c ------------------------------------------------------------------------------ */
/* Token id of exactly these bytes, -1 when none. */
recur_token vocab_find(const vocab *v, const char *s, size_t n);
/* BPE merge rank of (left, right), -1 when none. */
int32_t vocab_merge_rank(const vocab *v, const char *l, size_t nl, const char *r, size_t nr);

/* ---- growable token buffer (vocab_tokenize.c); oom is sticky ----------------------------- */
typedef struct tokvec { recur_token *ids; size_t n, cap; bool oom; } tokvec;
void tokvec_push(tokvec *tv, recur_token t);

/* ---- tokenizers --------------------------------------------------------------------------- */
/* Tokenize one raw-text fragment (no special tokens inside) and append the ids. */
void vocab_spm_fragment(const vocab *v, const char *text, size_t len, bool space_prefix, tokvec *out);
void vocab_bpe_fragment(const vocab *v, const char *text, size_t len, tokvec *out);

/* ---- UTF-8 (vocab_pretok.c) --------------------------------------------------------------- */
/* Length of the UTF-8 sequence a lead byte announces (1 for continuation bytes), as
 * llama.cpp's unicode_len_utf8. */
size_t vocab_utf8_len(uint8_t lead);
/* Lax decode as llama.cpp: accepts overlong forms and surrogates; an invalid byte gives
 * U+FFFD and advances one byte. */
uint32_t vocab_utf8_decode_lax(const char *s, size_t n, size_t *adv);
/* Encodes cpt (<= 0x10FFFF) into out; returns the byte count (1..4). */
size_t vocab_utf8_encode(uint32_t cpt, char out[4]);

/* ---- pre-tokenizers (vocab_pretok.c) ------------------------------------------------------ */
typedef struct vocab_pre_info {
    const char *name;
    int         regexes;          /* index into the regex-chain table */
    bool        ignore_merges, add_bos, clean_spaces;
} vocab_pre_info;

/* The entry for a tokenizer.ggml.pre name, NULL when unsupported. */
const vocab_pre_info *vocab_pre_lookup(const char *name, size_t len);
/* "default, gpt-2, ..." for error messages. */
const char *vocab_pre_supported(void);
recur_status vocab_pretok_new(const vocab_pre_info *pi, vocab_pretok **out, char *err, size_t err_len);
void vocab_pretok_free(vocab_pretok *p);

/* Splits text into words as llama.cpp's unicode_regex_split: the text is first decoded laxly
 * and re-encoded (invalid bytes become U+FFFD), then every regex of the chain splits every
 * piece (matches and the gaps between them both become pieces). On success *words holds the
 * re-encoded text and (*spans)[2k], (*spans)[2k+1] the offset and length of word k in it;
 * the caller frees both. Fails with RECUR_E_NOMEM (also when PCRE2 gives up on a match). */
recur_status vocab_pretok_split(const vocab_pretok *p, const char *text, size_t len,
                                char **words, size_t **spans, size_t *n_words);

#endif
