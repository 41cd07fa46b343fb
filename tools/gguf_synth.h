/* gguf_synth.h — presets and the stand-in vocabulary of `recur-gguf synth`. */
#ifndef RECUR_TOOLS_GGUF_SYNTH_H
#define RECUR_TOOLS_GGUF_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

/* A model shape, with the hyperparameters llama.cpp's converter writes for its arch. */
typedef struct synth_preset {
    const char *name;        /* "qwen3-tiny" */
    const char *arch;        /* general.architecture: "llama" or "qwen3" */
    int   n_embd, n_layer, n_ff, n_vocab, n_ctx;
    int   n_head, n_head_kv, head_dim;
    float rope_base, eps;
    bool  tied;              /* no output.weight: the head reuses token_embd */
} synth_preset;

const synth_preset *synth_preset_find(const char *name);   /* NULL when unknown */
/* Names of all presets, comma separated, for usage messages. */
const char *synth_preset_names(void);

/* The SentencePiece stand-in vocabulary: n_vocab pieces with scores and token types
 * (1 normal, 2 unknown, 3 control, 5 unused, 6 byte), laid out as
 *   0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then "▁" + common English words and
 *   fragments (each with all its prefixes, so SPM's bigram merges can reach it; scores
 *   descend), then <unused_N> up to n_vocab.
 * n_vocab must be at least 259. */
typedef struct synth_vocab {
    uint64_t  n;
    char    **text;      /* NUL-terminated pieces */
    float    *score;
    int32_t  *type;
} synth_vocab;

bool synth_vocab_build(synth_vocab *v, uint64_t n_vocab);   /* false: out of memory */
void synth_vocab_free(synth_vocab *v);

#endif
