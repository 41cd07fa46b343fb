/* gguf_synth.c — `recur-gguf synth`: a model file with random weights.
 *
 * The file carries the exact tensor names, shapes and hyperparameter keys that llama.cpp's
 * converter (convert_hf_to_gguf.py) writes for the arch (gguf_synth_plan.c; presets in
 * gguf_presets.c), so loaders can be tested on full-size shapes without downloading weights.
 * Differences from a converted model: the weights are random (deterministic in --seed and the
 * tensor name) or zero, the general.* keys are few, and the vocabulary is a SentencePiece
 * stand-in (gguf_presets.c) whatever the real tokenizer (byte-level BPE for all the presets'
 * models) — text round-trips without a download, but ids differ from the real model.
 *
 * Weights: linear layers and embeddings ~ N(0, 0.02²) (an Irwin-Hall approximation), norm
 * weights and Mamba's D 1 + N(0, 0.02²), decays ssm_a -1 + N(0, 0.02²). Types follow the
 * converter: 1-D tensors, norms, routers, conv kernels and names without ".weight" stay F32;
 * the other tensors, token_embd included, take --type, or F16 when their rows are not a
 * multiple of the type's block size. Quantization uses the scalar reference quantizers of
 * src/tensor. The file is streamed (gguf_synth_write.c): memory stays at a few MB whatever
 * the model size.
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
    bool                zero;          /* --weights zero: header only, a sparse file */
    bool                allow_large;   /* --allow-large */
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

/* ---- metadata ----------------------------------------------------------------------------- */

static recur_status put_general(gguf_writer *w, const synth_opts *o) {
    char name[128];
    snprintf(name, sizeof name, "recur synth %s (%s weights)", o->preset->name, o->zero ? "zero" : "random");
    recur_status st = gguf_writer_set_str(w, "general.architecture", o->preset->arch);
    st |= gguf_writer_set_str(w, "general.name", name);
    st |= synth_put_hparams(w, o->preset);
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

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The converter's F32 list (conversion/base.py): 1-D tensors, norms, names without ".weight"
 * (ssm_a, ssm_d, biases), routers and conv kernels. Others take the wanted type, or F16 when
 * their rows are not a multiple of its block. */
static uint32_t tensor_type(const synth_tensor *t, uint32_t want) {
    if (t->n_dims == 1 || ends_with(t->name, "_norm.weight") || !ends_with(t->name, ".weight") ||
        strstr(t->name, "ffn_gate_inp") || strstr(t->name, "ssm_conv1d") || strstr(t->name, "shortconv.conv"))
        return GGUF_T_F32;
    uint32_t blck;
    gguf_type_block(want, &blck, NULL);
    return t->ne[0] % blck ? GGUF_T_F16 : want;
}

/* Centre of a tensor's values: norms and the Mamba skip D near 1, the decays A near -1 (the
 * converter stores A = -exp(A_log); a positive A would make the recurrences blow up), the
 * rest near 0. */
static float tensor_centre(const char *name) {
    if (ends_with(name, "ssm_a")) return -1.0f;
    if (ends_with(name, "norm.weight") || ends_with(name, "ssm_d")) return 1.0f;
    return 0.0f;
}

/* Writes tensor i: rows of random floats through the quantizer of its type, in chunks of
 * about 8 MiB (buf: SYNTH_CHUNK bytes or one row if larger; row: ne[0] floats). */
#define SYNTH_CHUNK (8u << 20)
static int write_weights(synth_out *out, int i, const synth_tensor *t, uint32_t type, const synth_opts *o,
                         const tensor_kernels *k, uint8_t *buf, float *row) {
    tensor_from_float_fn quant = k->from_float[type];
    if (!quant) {
        fprintf(stderr, "recur-gguf synth: this build has no quantizer for %s\n", gguf_type_name(type));
        return 1;
    }
    const size_t row_bytes = tensor_row_bytes(type, t->ne[0]);
    const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
    const int64_t per_chunk = row_bytes < SYNTH_CHUNK ? (int64_t)(SYNTH_CHUNK / row_bytes) : 1;
    const float centre = tensor_centre(t->name);
    uint64_t s = tensor_seed(o->seed, t->name);
    char err[256];
    for (int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
        const int64_t nr = rows - r0 < per_chunk ? rows - r0 : per_chunk;
        for (int64_t r = 0; r < nr; r++) {
            for (int64_t j = 0; j < t->ne[0]; j++) row[j] = centre + SYNTH_STD * normalish(&s);
            quant(row, buf + (size_t)r * row_bytes, t->ne[0]);
        }
        if (synth_out_write(out, i, (uint64_t)r0 * row_bytes, buf, (size_t)nr * row_bytes, err, sizeof err)) {
            fprintf(stderr, "recur-gguf synth: %s\n", err);
            return 1;
        }
    }
    return 0;
}

/* ---- command line ------------------------------------------------------------------------- */

static void synth_usage(FILE *f) {
    fprintf(f, "usage: recur-gguf synth --arch A --preset P -o FILE [--type T] [--seed N]\n"
               "                        [--weights random|zero] [--allow-large]\n"
               "Writes a model with the tensor names, shapes and hyperparameter keys llama.cpp's\n"
               "converter writes for the preset's released model, random (or zero) weights and a\n"
               "stand-in SPM vocabulary.\n"
               "  --preset P       one of (architecture in brackets):\n");
    for (int i = 0; synth_preset_at(i); i++) {
        const synth_preset *p = synth_preset_at(i);
        fprintf(f, "%s%s (%s)%s", i % 3 ? "" : "                     ", p->name, p->arch,
                !synth_preset_at(i + 1) ? "\n" : i % 3 == 2 ? ",\n" : ", ");
    }
    fprintf(f, "  --arch A         the preset's architecture, as a check\n"
               "  --type T         2-D weights: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K (default Q8_0);\n"
               "                   norms, routers, conv kernels, ssm_a/ssm_d and biases stay F32\n"
               "  --seed N         random seed (default 1); same seed, same file\n"
               "  --weights zero   write only the header: every weight is 0 and the file is sparse\n"
               "                   (instant, takes no disk space where the filesystem has holes)\n"
               "  --allow-large    needed for the presets of tens of GB (qwen35moe-35b-a3b,\n"
               "                   qwen3next-80b-a3b)\n");
}

/* Returns 0 with o filled, 2 on a usage error (message printed), -1 after --help. */
static int parse_args(int argc, char **argv, synth_opts *o) {
    const char *preset = NULL, *type = "Q8_0";
    *o = (synth_opts){.seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { synth_usage(stdout); return -1; }
        if (!strcmp(a, "--allow-large")) { o->allow_large = true; continue; }
        if (!v) { fprintf(stderr, "recur-gguf synth: %s needs a value\n", a); return 2; }
        i++;   /* every other option takes a value */
        if (!strcmp(a, "--arch")) o->arch = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) o->out = v;
        else if (!strcmp(a, "--type")) type = v;
        else if (!strcmp(a, "--weights") && (!strcmp(v, "zero") || !strcmp(v, "random"))) o->zero = !strcmp(v, "zero");
        else if (!strcmp(a, "--seed")) {
            char *end;
            o->seed = strtoull(v, &end, 0);
            if (!*v || *end) { fprintf(stderr, "recur-gguf synth: bad seed '%s'\n", v); return 2; }
        } else { fprintf(stderr, "recur-gguf synth: bad option '%s %s'\n", a, v); synth_usage(stderr); return 2; }
    }
    if (!o->arch || !preset || !o->out) { synth_usage(stderr); return 2; }
    if (!(o->preset = synth_preset_find(preset))) {
        fprintf(stderr, "recur-gguf synth: unknown preset '%s' (`recur-gguf synth --help` lists them)\n", preset);
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

/* Types of every tensor; reports the F16 fallbacks once. Returns the data bytes. */
static uint64_t plan_types(const synth_tensor *t, int n, uint32_t want, uint32_t *type, int64_t *max_ne0) {
    uint64_t bytes = 0;
    int n_f16 = 0, first = -1;
    *max_ne0 = 1;
    for (int i = 0; i < n; i++) {
        type[i] = tensor_type(&t[i], want);
        if (type[i] == GGUF_T_F16 && want != GGUF_T_F16 && !n_f16++) first = i;
        uint64_t nb = 0;
        gguf_tensor_nbytes(type[i], t[i].ne, &nb);
        bytes += nb;
        if (t[i].ne[0] > *max_ne0) *max_ne0 = t[i].ne[0];
    }
    if (n_f16)
        fprintf(stderr, "recur-gguf synth: %d tensor(s) with rows not a multiple of the %s block written as F16 "
                "(%s, ...)\n", n_f16, gguf_type_name(want), t[first].name);
    return bytes;
}

/* Header, then (random weights) every tensor in order. */
static int write_model(const synth_opts *o, const synth_tensor *plan, const uint32_t *type, int n, int64_t max_ne0) {
    tensor_init();
    const tensor_kernels *k = tensor_kernels_scalar();
    gguf_writer *w = gguf_writer_new();
    char err[512];
    int rc = 0;
    if (!w || put_general(w, o) || put_vocab(w, o->preset)) {
        fprintf(stderr, "recur-gguf synth: out of memory\n");
        gguf_writer_free(w);
        return 1;
    }
    synth_out out;
    if (synth_out_open(&out, o->out, w, plan, type, n, err, sizeof err)) {
        fprintf(stderr, "recur-gguf synth: %s\n", err);
        gguf_writer_free(w);
        return 1;
    }
    gguf_writer_free(w);
    size_t max_row = 0;
    for (int i = 0; i < n; i++)
        if (tensor_row_bytes(type[i], plan[i].ne[0]) > max_row) max_row = tensor_row_bytes(type[i], plan[i].ne[0]);
    uint8_t *buf = o->zero ? NULL : malloc(max_row > SYNTH_CHUNK ? max_row : SYNTH_CHUNK);
    float *row = o->zero ? NULL : malloc((size_t)max_ne0 * sizeof *row);
    if (!o->zero && (!buf || !row)) {
        fprintf(stderr, "recur-gguf synth: out of memory\n");
        rc = 1;
    }
    for (int i = 0; i < n && !rc && !o->zero; i++) rc = write_weights(&out, i, &plan[i], type[i], o, k, buf, row);
    free(buf);
    free(row);
    if (synth_out_close(&out, rc == 0, err, sizeof err)) {
        fprintf(stderr, "recur-gguf synth: %s\n", err);
        rc = 1;
    }
    return rc;
}

int cmd_synth(int argc, char **argv) {
    synth_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    synth_tensor *plan;
    const int n = synth_plan(o.preset, &plan);
    uint32_t *type = n > 0 ? malloc((size_t)n * sizeof *type) : NULL;
    if (!type) {
        fprintf(stderr, "recur-gguf synth: out of memory\n");
        free(plan);
        return 1;
    }
    int64_t max_ne0;
    const uint64_t bytes = plan_types(plan, n, o.type, type, &max_ne0);
    if (o.preset->large && !o.allow_large) {
        fprintf(stderr, "recur-gguf synth: %s holds %.1f GB of %s weights; pass --allow-large to write it\n",
                o.preset->name, (double)bytes / 1e9, gguf_type_name(o.type));
        rc = 2;
    }
    if (!rc) rc = write_model(&o, plan, type, n, max_ne0);
    if (!rc)
        printf("wrote %s: %s (%s), %d tensors, %" PRIu64 " bytes of weights %s%s, seed %" PRIu64 "\n", o.out,
               o.preset->name, o.preset->arch, n, bytes, gguf_type_name(o.type), o.zero ? " (all zero)" : "", o.seed);
    free(type);
    free(plan);
    return rc;
}
