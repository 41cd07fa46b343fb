/* gguf_synth.h — presets, tensor plans and the stand-in vocabulary of `recur-gguf synth`.
 *
 *   gguf_presets.c     the preset table and the SentencePiece stand-in vocabulary
 *   gguf_synth_plan.c  per architecture: the {arch}.* keys and the tensor list the converter
 *                      (llama.cpp's convert_hf_to_gguf.py) writes
 *   gguf_synth.c       the command: options, weight values and types, the streaming writer
 */
#ifndef RECUR_TOOLS_GGUF_SYNTH_H
#define RECUR_TOOLS_GGUF_SYNTH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

/* A model shape, with the hyperparameters llama.cpp's converter writes for its arch. Fields an
 * arch does not use are 0. */
typedef struct synth_preset {
    const char *name;        /* "qwen35-0.8b" */
    const char *arch;        /* general.architecture: llama qwen3 qwen35 qwen35moe qwen3next mamba mamba2 lfm2 */
    int   n_embd;
    int   n_layer;           /* main stack (block_count = n_layer + n_nextn) */
    int   n_ff;              /* feed_forward_length; 0: not written (qwen35moe has none) */
    int   n_vocab, n_ctx;
    int   n_head, n_head_kv, head_dim;   /* attention layers (0 heads: mamba) */
    float rope_base, eps;
    bool  tied;              /* no output.weight: the head reuses token_embd */
    /* Qwen3.5 / Qwen3-Next */
    int   n_rot;             /* rope.dimension_count (partial rotary) */
    int   rope_sections[4];  /* rope.dimension_sections (qwen35, qwen35moe) */
    int   full_attn;         /* full_attention_interval: layer il is attention iff (il+1) % it == 0 */
    int   n_nextn;           /* MTP blocks after the main stack (nextn_predict_layers) */
    /* recurrent layers: ssm.* (lfm2: ssm_conv is shortconv.l_cache) */
    int   ssm_conv, ssm_inner, ssm_state, ssm_dt_rank, ssm_groups;
    /* mixture of experts */
    int   n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    uint64_t attn_layers;    /* lfm2: bit il set for an attention layer (else short conv) */
    bool  large;             /* tens of GB: written only with --allow-large */
} synth_preset;

const synth_preset *synth_preset_find(const char *name);   /* NULL when unknown */
/* Preset i of the table (NULL past its end), for listings. */
const synth_preset *synth_preset_at(int i);

/* ---- tensor plan (gguf_synth_plan.c) --------------------------------------------------------- */

typedef struct synth_tensor {
    char     name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t  ne[GGUF_MAX_DIMS];
} synth_tensor;

/* The tensors of p in the converter's layer order (globals, then each block, MTP blocks last;
 * llama.cpp's converter emits them in the checkpoint's order, which loaders ignore).
 * *out is malloc'd; returns the count, -1 when out of memory or the arch is unknown. */
int synth_plan(const synth_preset *p, synth_tensor **out);

/* The {arch}.* keys the converter writes for p (general.* and tokenizer.* are the caller's).
 * Returns RECUR_OK, RECUR_E_NOMEM or RECUR_E_INVALID (unknown arch). */
recur_status synth_put_hparams(gguf_writer *w, const synth_preset *p);

/* ---- streaming output (gguf_synth_write.c) ---------------------------------------------------- */

/* A GGUF file written tensor by tensor without holding the weights: the header (KVs of a
 * tensor-less gguf_writer + the infos of t[0..n) with types type[]) is written by _open, each
 * tensor's bytes by _write at their offset, and _close(keep) gives the file its full size
 * (bytes never written read as zeros: holes of a sparse file), fsyncs it and renames
 * "<path>.tmp" over path; close(!keep) or a failure removes the temporary file. */
typedef struct synth_out {
    int         fd;
    const char *path;
    char       *tmp;          /* "<path>.tmp" */
    uint64_t   *off;          /* [n] offset of tensor i in the data section */
    uint64_t    data_start;   /* file offset of the data section (header padded to 32) */
    uint64_t    data_bytes;   /* padded size of the data section */
} synth_out;

recur_status synth_out_open(synth_out *o, const char *path, const gguf_writer *kv, const synth_tensor *t,
                            const uint32_t *type, int n, char *err, size_t err_len);
/* Writes n bytes of tensor i starting at byte `at` of the tensor. */
recur_status synth_out_write(synth_out *o, int i, uint64_t at, const void *data, size_t n, char *err,
                             size_t err_len);
recur_status synth_out_close(synth_out *o, bool keep, char *err, size_t err_len);

/* ---- vocabulary (gguf_presets.c) -------------------------------------------------------------- */

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
