/* gguf_info.c — `recur-gguf info FILE`: a gguf-dump-like listing.
 *
 * Output (stable; tests/cli/synth.sh and presets.sh parse it):
 *
 *   file:        PATH
 *   version:     3
 *   ...
 *   tensors:     39
 *   model:       qwen35 4 layers, 256 embd, F32, 2.9M params, 10.9 MiB     (recur_model_desc)
 *   state:       3158016 bytes per sequence (recurrent layers, F32)
 *   KV cache:    1024 bytes per token (attention layers, F16 K and V)
 *
 * (model/state/KV cache: what a recur context allocates per sequence; "model: not loadable by
 * recur: REASON" instead when librecur cannot load the file, e.g. an unsupported architecture)
 *
 *   KVs (23):
 *       0  general.architecture                     string         "llama"
 *      14  tokenizer.ggml.tokens                    [string; 512]  ["<unk>", "<s>", ...]
 *
 *   tensors (39):
 *         #  type      bytes      offset  shape          name
 *         0  F32      524288           0  [256, 512]     token_embd.weight
 *
 * Strings are quoted with C escapes and cut after INFO_STR_MAX bytes; arrays show their element
 * type, count and first INFO_ARR_MAX elements.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf_tool.h"
#include "recur.h"

#define INFO_STR_MAX 60
#define INFO_ARR_MAX 5

/* Prints s quoted, escaping quotes, backslashes and control bytes; cuts long strings at a
 * UTF-8 character boundary and appends "..." and the full length. */
static void print_str(FILE *f, gguf_str s) {
    uint64_t n = s.len;
    if (n > INFO_STR_MAX) {
        n = INFO_STR_MAX;
        while (n > 0 && ((unsigned char)s.ptr[n] & 0xC0) == 0x80) n--;   /* not mid-character */
    }
    fputc('"', f);
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (n < s.len) fprintf(f, "... (%" PRIu64 " bytes)", s.len);
}

static void print_arr_elem(FILE *f, const gguf_arr *a, uint64_t i) {
    switch (a->elem_type) {
    case GGUF_KV_STRING:  print_str(f, a->strs[i]); break;
    case GGUF_KV_FLOAT32:
    case GGUF_KV_FLOAT64: fprintf(f, "%.7g", gguf_arr_float(a, i)); break;
    case GGUF_KV_BOOL:    fputs(gguf_arr_int(a, i) ? "true" : "false", f); break;
    case GGUF_KV_UINT64:  fprintf(f, "%.0f", gguf_arr_float(a, i)); break;
    default:              fprintf(f, "%" PRId64, gguf_arr_int(a, i)); break;
    }
}

static void print_value(FILE *f, const gguf_file *g, int64_t i) {
    gguf_kv_type t = gguf_kv_type_of(g, i);
    gguf_str s;
    gguf_arr a;
    int64_t v;
    double d;
    if (gguf_kv_str(g, i, &s)) {
        print_str(f, s);
    } else if (gguf_kv_arr(g, i, &a)) {
        fputc('[', f);
        for (uint64_t j = 0; j < a.n && j < INFO_ARR_MAX; j++) {
            if (j) fputs(", ", f);
            print_arr_elem(f, &a, j);
        }
        fputs(a.n > INFO_ARR_MAX ? ", ...]" : "]", f);
    } else if (gguf_kv_float(g, i, &d)) {
        fprintf(f, t == GGUF_KV_FLOAT32 ? "%.7g" : "%.15g", d);
    } else if (t == GGUF_KV_BOOL && gguf_kv_int(g, i, &v)) {
        fputs(v ? "true" : "false", f);
    } else if (gguf_kv_int(g, i, &v)) {
        fprintf(f, "%" PRId64, v);
    } else {
        fputs("(uint64 above INT64_MAX)", f);
    }
}

static void print_kvs(FILE *f, const gguf_file *g) {
    fprintf(f, "\nKVs (%" PRId64 "):\n", gguf_n_kv(g));
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str key = gguf_kv_key(g, i);
        gguf_arr a;
        char type[48];
        if (gguf_kv_arr(g, i, &a))
            snprintf(type, sizeof type, "[%s; %" PRIu64 "]", gguf_kv_type_name(a.elem_type), a.n);
        else
            snprintf(type, sizeof type, "%s", gguf_kv_type_name(gguf_kv_type_of(g, i)));
        fprintf(f, "%6" PRId64 "  %-40.*s %-14s ", i, (int)(key.len > 200 ? 200 : key.len), key.ptr, type);
        print_value(f, g, i);
        fputc('\n', f);
    }
}

static void print_tensors(FILE *f, const gguf_file *g) {
    fprintf(f, "\ntensors (%" PRId64 "):\n", gguf_n_tensors(g));
    fprintf(f, "%6s  %-7s %12s %12s  %-20s %s\n", "#", "type", "bytes", "offset", "shape", "name");
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        char shape[128] = "[";
        for (uint32_t d = 0; d < t->n_dims; d++) {
            size_t n = strlen(shape);
            snprintf(shape + n, sizeof shape - n, "%s%" PRId64, d ? ", " : "", t->ne[d]);
        }
        strcat(shape, "]");
        fprintf(f, "%6" PRId64 "  %-7s %12" PRIu64 " %12" PRIu64 "  %-20s %s\n", i, gguf_type_name(t->type),
                t->nbytes, t->offset, shape, t->name);
    }
}

/* Loads the file as a model (weights stay mapped, nothing is read) for the per-sequence memory
 * figures; prints why not when librecur cannot. */
static void print_memory(FILE *f, const char *path) {
    recur_model *m;
    char err[512], desc[256];
    if (recur_model_load(path, NULL, &m, err, sizeof err)) {
        fprintf(f, "model:       not loadable by recur: %s\n", err);
        return;
    }
    recur_model_desc(m, desc, sizeof desc);
    const size_t rs = recur_model_state_bytes(m), kv = recur_model_kv_bytes_per_token(m);
    fprintf(f, "model:       %s\n", desc);
    fprintf(f, "state:       %zu bytes per sequence (recurrent layers, F32; %.2f MiB)\n", rs, (double)rs / 1048576.0);
    fprintf(f, "KV cache:    %zu bytes per token (attention layers, F16 K and V; %.2f KiB)\n", kv, (double)kv / 1024.0);
    recur_model_free(m);
}

int cmd_info(int argc, char **argv) {
    if (argc != 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        FILE *f = argc == 2 ? stdout : stderr;
        fprintf(f, "usage: recur-gguf info FILE\n"
                   "Validates FILE and prints its version, alignment, counts, what a recur context\n"
                   "allocates per sequence (recurrent state bytes, KV-cache bytes per token), every KV\n"
                   "(arrays: type, count, first %d elements) and every tensor (index, type, bytes,\n"
                   "offset, shape, name).\n",
                INFO_ARR_MAX);
        return argc == 2 ? 0 : 2;
    }
    gguf_file *g;
    char err[512];
    if (gguf_open(argv[1], &g, err, sizeof err)) {
        fprintf(stderr, "recur-gguf: %s: %s\n", argv[1], err);
        return 1;
    }
    printf("file:        %s\n", argv[1]);
    printf("version:     %" PRIu32 "\n", gguf_version(g));
    printf("alignment:   %" PRIu32 "\n", gguf_alignment(g));
    printf("data offset: %" PRIu64 "\n", gguf_data_offset(g));
    printf("file size:   %" PRIu64 " bytes\n", gguf_file_size(g));
    printf("KV count:    %" PRId64 "\n", gguf_n_kv(g));
    printf("tensors:     %" PRId64 "\n", gguf_n_tensors(g));
    print_memory(stdout, argv[1]);
    print_kvs(stdout, g);
    print_tensors(stdout, g);
    gguf_close(g);
    return 0;
}
