/* vocab.h — the tokenizer a GGUF file carries (tokenizer.ggml.*).
 *
 * SPM ("llama": scores, byte fallback <0xXX>, space prefix) and byte-level BPE ("gpt2":
 * merges by rank, PCRE2 pre-tokenizers) behave as llama.cpp's tokenizer does; the reference
 * vectors in ../shared/testdata/tokenizer are the judge.
 *
 * Invariants:
 *  1. A vocab owns copies of everything it read: it outlives the gguf_file it came from.
 *  2. Tokenizing is pure and thread-safe (const vocab; scratch is per call).
 */
#ifndef RECUR_VOCAB_H
#define RECUR_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "recur.h"

typedef struct vocab vocab;

typedef enum vocab_kind { VOCAB_NONE = 0, VOCAB_SPM, VOCAB_BPE } vocab_kind;

/* token_type values of tokenizer.ggml.token_type */
enum { VOCAB_TT_NORMAL = 1, VOCAB_TT_UNKNOWN = 2, VOCAB_TT_CONTROL = 3,
       VOCAB_TT_USER_DEFINED = 4, VOCAB_TT_UNUSED = 5, VOCAB_TT_BYTE = 6 };

/* Reads the tokenizer keys. A file with no tokenizer gives a VOCAB_NONE vocab (tokenize then
 * fails). Unknown tokenizer models or pre-tokenizers fail with a message listing the
 * supported ones. */
recur_status vocab_load(const gguf_file *g, vocab **out, char *err, size_t err_len);
void vocab_free(vocab *v);

vocab_kind  vocab_kind_of(const vocab *v);
int32_t     vocab_n_tokens(const vocab *v);
recur_token vocab_bos(const vocab *v);        /* -1 when none */
recur_token vocab_eos(const vocab *v);        /* -1 when none */
bool        vocab_add_bos(const vocab *v);
bool        vocab_add_eos(const vocab *v);
bool        vocab_is_eog(const vocab *v, recur_token t);   /* eos, eot, eom, ... */
bool        vocab_is_control(const vocab *v, recur_token t);
/* The stored text of a token (not decoded); NULL when out of range. */
const char *vocab_token_text(const vocab *v, recur_token t, size_t *len);
/* The id whose stored text is exactly text[0, len), -1 when none (with duplicate texts the
 * highest id, as llama.cpp). */
recur_token vocab_text_to_token(const vocab *v, const char *text, size_t len);
recur_token vocab_eot(const vocab *v);        /* end-of-turn token, -1 when none */
/* The longest stored token text in bytes: no piece is longer. */
int32_t     vocab_max_piece_len(const vocab *v);

/* Same contracts as recur_tokenize / recur_token_to_piece in recur.h. */
int vocab_tokenize(const vocab *v, const char *text, size_t text_len, recur_token *tokens,
                   int max_tokens, bool add_special, bool parse_special);
int vocab_token_to_piece(const vocab *v, recur_token t, char *buf, int buf_len, bool special);
/* Tokens to text as llama.cpp's llama_detokenize: remove_special drops a leading BOS and a
 * trailing EOS when the vocab adds them; unparse_special renders CONTROL/UNKNOWN tokens; an SPM
 * vocab with add_space_prefix drops the first piece's leading space (unless a BOS was
 * dropped); BPE vocabs whose pre-tokenizer cleans spaces turn " ," into "," and the like.
 * Returns the byte count, which may exceed buf_len (nothing is written past buf_len);
 * negative (-recur_status) for an out-of-range token or no memory. Thread-safe. */
int vocab_detokenize(const vocab *v, const recur_token *tokens, int n_tokens, char *buf, int buf_len,
                     bool remove_special, bool unparse_special);

/* ---- streaming detokenizer ---------------------------------------------------------------
 * Feeds token pieces and emits only complete UTF-8 characters: an incomplete sequence at the
 * end is held back until the next piece completes it; invalid bytes come out as U+FFFD. */
typedef struct vocab_stream {
    char   pending[8];
    int    n_pending;
} vocab_stream;

void vocab_stream_init(vocab_stream *s);
/* Appends the decodable text of token t to out (capacity out_cap); returns the bytes written,
 * negative on error: -RECUR_E_FULL when out_cap is too small (then nothing is consumed). Each
 * invalid byte sequence costs 3 bytes (U+FFFD), so out_cap >= 16 + 3 * vocab_max_piece_len
 * always suffices; 64 + the longest piece suffices for valid UTF-8. */
int  vocab_stream_push(const vocab *v, vocab_stream *s, recur_token t, bool special,
                       char *out, int out_cap);
/* Flushes what is held back (as U+FFFD for an unfinished character). */
int  vocab_stream_flush(vocab_stream *s, char *out, int out_cap);

#endif
