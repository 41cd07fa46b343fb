/* gguf_synth.c — `recur-gguf synth`: a model file with random weights.
 *
 * The file carries the exact tensor names, shapes and hyperparameter keys that llama.cpp's
 * converter (convert_hf_to_gguf.py) writes for the arch, in the converter's order, so loaders
 * can be tested on full-size shapes without downloading weights. Differences from a converted
 * model: the weights are random (deterministic in --seed and the tensor name), and the
 * vocabulary is a SentencePiece stand-in (gguf_presets.c) even for qwen3, whose real tokenizer
 * is byte-level BPE — text round-trips without a download, but ids differ from the real model.
 *
 * Weights: linear layers and embeddings ~ N(0, 0.02²) (an Irwin-Hall approximation), norm
 * weights 1 + N(0, 0.02²). 1-D tensors stay F32 (as the converter keeps norms); all 2-D
 * tensors, token_embd included, take --type, or F16 when their rows are not a multiple of the
 * type's block size. Quantization uses the scalar reference quantizers of src/tensor.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf_synth.h"
#include "gguf_tool.h"
#include "tensor/tensor.h"

#define SYNTH_STD 0.02f

/* --type names and the general.file_type (llama_ftype) llama.cpp writes for them. */
static const struct { const char *name; uint32_t type, ftype; } k_types[] = {
    {"F32", GGUF_T_F32, 0},   {"F16", GGUF_T_F16, 1},   {"BF16", GGUF_T_BF16, 32},
    {"Q8_0", GGUF_T_Q8_0, 7}, {"Q4_0", GGUF_T_Q4_0, 2},
    {"Q4_K", GGUF_T_Q4_K, 15},   /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    {"Q5_K", GGUF_T_Q5_K, 17},   /* LLAMA_FTYPE_MOSTLY_Q5_K_M */
    {"Q6_K", GGUF_T_Q6_K, 18},   /* LLAMA_FTYPE_MOSTLY_Q6_K */
};

typedef struct synth_opts {
    const char         *arch, *out;
    const synth_preset *preset;
    uint32_t            type, ftype;
    uint64_t            seed;
} synth_opts;

/* ---- random numbers ----------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* ~N(0, 1): the sum of four 16-bit uniforms, centred and scaled (range ±3.46). */
static float normalish(uint64_t *s) {
    uint64_t r = splitmix64(s);
    uint32_t sum = (uint32_t)(r & 0xFFFF) + (uint32_t)((r >> 16) & 0xFFFF) +
                   (uint32_t)((r >> 32) & 0xFFFF) + (uint32_t)(r >> 48);
    return ((float)sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

/* A stream per tensor: the same name and seed give the same values in any file layout. */
static uint64_t tensor_seed(uint64_t seed, const char *name) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t s = seed ^ h;
    return splitmix64(&s);
}

/* ---- the tensor plan ---------------------------------------------------------------------- */

typedef struct synth_tensor {
    char     name[GGUF_MAX_NAME];
    uint32_t n_dims;
    int64_t  ne[GGUF_MAX_DIMS];
} synth_tensor;

static void plan_add(synth_tensor *t, int *n, const char *name, int64_t ne0, int64_t ne1) {
    synth_tensor *x = &t[(*n)++];
    snprintf(x->name, sizeof x->name, "%s", name);
    x->n_dims = ne1 ? 2 : 1;
    x->ne[0] = ne0;
    x->ne[1] = ne1 ? ne1 : 1;
    x->ne[2] = x->ne[3] = 1;
}

/* Tensors in the converter's order; returns the count (t has room for 3 + 11 per layer). */
static int plan_tensors(const synth_preset *p, synth_tensor *t) {
    int n = 0;
    int64_t E = p->n_embd, Q = (int64_t)p->n_head * p->head_dim, KV = (int64_t)p->n_head_kv * p->head_dim;
    bool qk_norm = !strcmp(p->arch, "qwen3");
    char name[GGUF_MAX_NAME];
    plan_add(t, &n, "token_embd.weight", E, p->n_vocab);
    if (!p->tied) plan_add(t, &n, "output.weight", E, p->n_vocab);
    plan_add(t, &n, "output_norm.weight", E, 0);
    for (int il = 0; il < p->n_layer; il++) {
#define LAYER(suffix, ne0, ne1) \
    (snprintf(name, sizeof name, "blk.%d." suffix, il), plan_add(t, &n, name, ne0, ne1))
        LAYER("attn_norm.weight", E, 0);
        LAYER("attn_q.weight", E, Q);
        LAYER("attn_k.weight", E, KV);
        LAYER("attn_v.weight", E, KV);
        LAYER("attn_output.weight", Q, E);
        if (qk_norm) {
            LAYER("attn_q_norm.weight", p->head_dim, 0);
            LAYER("attn_k_norm.weight", p->head_dim, 0);
        }
        LAYER("ffn_norm.weight", E, 0);
        LAYER("ffn_gate.weight", E, p->n_ff);
        LAYER("ffn_up.weight", E, p->n_ff);
        LAYER("ffn_down.weight", p->n_ff, E);
#undef LAYER
    }
    return n;
}

/* ---- metadata ----------------------------------------------------------------------------- */

static recur_status put_hparams(gguf_writer *w, const synth_opts *o) {
    const synth_preset *p = o->preset;
    char key[128], name[128];
    recur_status st = RECUR_OK;
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, p->arch), key)
    snprintf(name, sizeof name, "recur synth %s (random weights)", p->name);
    st |= gguf_writer_set_str(w, "general.architecture", p->arch);
    st |= gguf_writer_set_str(w, "general.name", name);
    st |= gguf_writer_set_u32(w, KEY("block_count"), (uint32_t)p->n_layer);
    st |= gguf_writer_set_u32(w, KEY("context_length"), (uint32_t)p->n_ctx);
    st |= gguf_writer_set_u32(w, KEY("embedding_length"), (uint32_t)p->n_embd);
    st |= gguf_writer_set_u32(w, KEY("feed_forward_length"), (uint32_t)p->n_ff);
    st |= gguf_writer_set_u32(w, KEY("attention.head_count"), (uint32_t)p->n_head);
    st |= gguf_writer_set_u32(w, KEY("attention.head_count_kv"), (uint32_t)p->n_head_kv);
    st |= gguf_writer_set_f32(w, KEY("rope.freq_base"), p->rope_base);
    st |= gguf_writer_set_f32(w, KEY("attention.layer_norm_rms_epsilon"), p->eps);
    if (!strcmp(p->arch, "qwen3")) {          /* Qwen3 configs carry head_dim */
        st |= gguf_writer_set_u32(w, KEY("attention.key_length"), (uint32_t)p->head_dim);
        st |= gguf_writer_set_u32(w, KEY("attention.value_length"), (uint32_t)p->head_dim);
    } else {                                  /* LlamaModel writes both always */
        st |= gguf_writer_set_u32(w, KEY("rope.dimension_count"), (uint32_t)p->head_dim);
        st |= gguf_writer_set_u32(w, KEY("vocab_size"), (uint32_t)p->n_vocab);
    }
#undef KEY
    st |= gguf_writer_set_u32(w, "general.file_type", o->ftype);
    if (o->type != GGUF_T_F32) st |= gguf_writer_set_u32(w, "general.quantization_version", 2);
    return st ? RECUR_E_NOMEM : RECUR_OK;
}

/* The SPM stand-in vocabulary (see gguf_synth.h). */
static recur_status put_vocab(gguf_writer *w, const synth_preset *p) {
    synth_vocab v;
    if (!synth_vocab_build(&v, (uint64_t)p->n_vocab)) {
        synth_vocab_free(&v);
        return RECUR_E_NOMEM;
    }
    recur_status st = RECUR_OK;
    st |= gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    st |= gguf_writer_set_str(w, "tokenizer.ggml.pre", "default");
    st |= gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_KV_STRING, v.text, v.n);
    st |= gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_KV_FLOAT32, v.score, v.n);
    st |= gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_KV_INT32, v.type, v.n);
    st |= gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    st |= gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    st |= gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    st |= gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    st |= gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false);
    st |= gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", true);
    synth_vocab_free(&v);
    return st ? RECUR_E_NOMEM : RECUR_OK;
}

/* ---- weights ------------------------------------------------------------------------------ */

/* Fills and adds one tensor, row by row: random floats, then the quantizer of its type. */
static int add_weights(gguf_writer *w, const synth_tensor *t, const synth_opts *o, const tensor_kernels *k) {
    uint32_t type = t->n_dims == 1 ? GGUF_T_F32 : o->type, blck;
    gguf_type_block(type, &blck, NULL);
    if (t->ne[0] % blck) {
        fprintf(stderr, "recur-gguf synth: %s: rows of %" PRId64 " are not a multiple of the %s block; "
                "writing F16\n", t->name, t->ne[0], gguf_type_name(type));
        type = GGUF_T_F16;
    }
    tensor_from_float_fn quant = k->from_float[type];
    if (!quant) {
        fprintf(stderr, "recur-gguf synth: this build has no quantizer for %s\n", gguf_type_name(type));
        return 1;
    }
    size_t row_bytes = tensor_row_bytes(type, t->ne[0]);
    int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    uint8_t *data = malloc(row_bytes * (size_t)rows + 1);
    float *row = malloc((size_t)t->ne[0] * sizeof *row);
    uint64_t s = tensor_seed(o->seed, t->name);
    int rc = 0;
    if (!data || !row) {
        fprintf(stderr, "recur-gguf synth: out of memory for %s\n", t->name);
        rc = 1;
    }
    for (int64_t r = 0; r < rows && !rc; r++) {
        for (int64_t i = 0; i < t->ne[0]; i++)
            row[i] = (t->n_dims == 1 ? 1.0f : 0.0f) + SYNTH_STD * normalish(&s);
        quant(row, data + (size_t)r * row_bytes, t->ne[0]);
    }
    char err[256];
    if (!rc && gguf_writer_add_tensor(w, t->name, type, t->n_dims, t->ne, data, err, sizeof err)) {
        fprintf(stderr, "recur-gguf synth: %s\n", err);
        rc = 1;
    }
    free(row);
    free(data);
    return rc;
}

/* ---- command line ------------------------------------------------------------------------- */

static void synth_usage(FILE *f) {
    fprintf(f, "usage: recur-gguf synth --arch A --preset P -o FILE [--type T] [--seed N]\n"
               "Writes a model with random weights and the tensor names, shapes and hyperparameter\n"
               "keys llama.cpp's converter writes for the arch, plus a stand-in SPM vocabulary.\n"
               "  --preset P   %s\n"
               "  --arch A     the preset's architecture (llama or qwen3), as a check\n"
               "  --type T     2-D weights: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K (default Q8_0);\n"
               "               1-D tensors (norms) stay F32\n"
               "  --seed N     random seed (default 1); same seed, same file\n",
            synth_preset_names());
}

/* Returns 0 with o filled, 2 on a usage error (message printed), -1 after --help. */
static int parse_args(int argc, char **argv, synth_opts *o) {
    const char *preset = NULL, *type = "Q8_0";
    *o = (synth_opts){.seed = 1};
    for (int i = 1; i < argc; i += 2) {   /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { synth_usage(stdout); return -1; }
        if (!v) { fprintf(stderr, "recur-gguf synth: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--arch")) o->arch = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) o->out = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 0);
            if (!*v || *end) { fprintf(stderr, "recur-gguf synth: bad seed '%s'\n", v); return 2; }
        } else { fprintf(stderr, "recur-gguf synth: unknown option '%s'\n", a); synth_usage(stderr); return 2; }
    }
    if (!o->arch || !preset || !o->out) { synth_usage(stderr); return 2; }
    if (!(o->preset = synth_preset_find(preset))) {
        fprintf(stderr, "recur-gguf synth: unknown preset '%s' (have: %s)\n", preset, synth_preset_names());
        return 2;
    }
    if (strcmp(o->arch, o->preset->arch)) {
        fprintf(stderr, "recur-gguf synth: preset %s is arch %s, not %s\n", preset, o->preset->arch, o->arch);
        return 2;
    }
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++)
        if (!strcmp(type, k_types[i].name)) { o->type = k_types[i].type; o->ftype = k_types[i].ftype; return 0; }
    fprintf(stderr, "recur-gguf synth: unsupported --type '%s'\n", type);
    return 2;
}

int cmd_synth(int argc, char **argv) {
    synth_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    tensor_init();
    const tensor_kernels *k = tensor_kernels_scalar();
    gguf_writer *w = gguf_writer_new();
    synth_tensor *plan = malloc((size_t)(3 + 11 * o.preset->n_layer) * sizeof *plan);
    if (!w || !plan || put_hparams(w, &o) || put_vocab(w, o.preset)) {
        fprintf(stderr, "recur-gguf synth: out of memory\n");
        rc = 1;
    }
    int n = rc ? 0 : plan_tensors(o.preset, plan);
    for (int i = 0; i < n && !rc; i++) rc = add_weights(w, &plan[i], &o, k);
    char err[512];
    if (!rc && gguf_writer_write(w, o.out, err, sizeof err)) {
        fprintf(stderr, "recur-gguf synth: %s\n", err);
        rc = 1;
    }
    if (!rc)
        printf("wrote %s: %s (%s), %d tensors, weights %s, seed %" PRIu64 "\n", o.out, o.preset->name,
               o.preset->arch, n, gguf_type_name(o.type), o.seed);
    free(plan);
    gguf_writer_free(w);
    return rc;
}
