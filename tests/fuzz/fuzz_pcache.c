/* fuzz_pcache.c — libFuzzer target for prompt-cache files (slot saves and --cache-dir): the
 * bytes are read by pcache_read into a fresh cache of the tiny hybrid lfm2 model under a small
 * budget, and whatever loads is used as the server uses it: the longest path is looked up,
 * restored into a sequence and decoded one token further.
 *
 * The first input byte is a mode, the rest the data:
 *   bit 0: write the right XXH3 at the end (else almost everything stops at the checksum);
 *   bit 1: patch mode: the data is a list of (offset u16 LE, byte) edits applied to a real
 *          file made at start-up (a tree of two conversations with checkpoints and logits);
 *   else the data is the whole file.
 * Any crash, leak, UB report or hang is a bug.
 *
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_pcache
 *   /tmp/build-fuzz/fuzz_pcache /tmp/pcache-corpus
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "cache/pcache.h"
#include "recur.h"

#define MODEL RECUR_TESTDATA "/models/pub-lfm2-Q8_0.gguf"
#define N 12

typedef struct fz {
    recur_model *m;
    recur_ctx   *ctx;
    uint8_t     *seed;
    size_t       seed_len;
    char         path[64];
} fz;

static void decode(recur_ctx *ctx, const recur_token *tok, recur_seq_id seq, recur_pos p0, int n) {
    recur_pos pos[N + 1];
    recur_seq_id sid[N + 1];
    int8_t want[N + 1];
    for (int i = 0; i < n; i++) { pos[i] = p0 + i; sid[i] = seq; want[i] = 1; }
    const recur_batch b = { .n_tokens = n, .token = tok + p0, .pos = pos, .seq_id = sid, .logits = want };
    char err[256];
    if (recur_decode(ctx, &b, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
}

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) abort();
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(*len);
    if (!buf || fread(buf, 1, *len, f) != *len) abort();
    fclose(f);
    return buf;
}

/* A real file: two conversations sharing 6 tokens, checkpoints at 5, 9 and 11 (with logits). */
static void make_seed(fz *z) {
    const pcache_params pp = { .budget_bytes = -1, .max_ckpt_path = 8 };
    pcache *pc;
    if (pcache_new(z->ctx, &pp, &pc, NULL, 0)) abort();
    for (int conv = 0; conv < 2; conv++) {
        recur_token tok[N];
        for (int i = 0; i < N; i++) tok[i] = (recur_token)(17 + 31 * i + (i >= 6 ? 7 * conv : 0)) % 500;
        recur_seq_rm(z->ctx, 0, -1, -1);
        const recur_pos at[3] = { 5, 9, N - 1 };
        pcache_ckpt *ck[3];
        recur_capture caps[3];
        for (int k = 0; k < 3; k++) {
            ck[k] = pcache_ckpt_new(pc, k == 2);
            caps[k] = (recur_capture){ 0, at[k], pcache_ckpt_snap(ck[k]) };
        }
        recur_pos pos[N];
        recur_seq_id sid[N];
        int8_t want[N];
        for (int i = 0; i < N; i++) { pos[i] = i; sid[i] = 0; want[i] = 1; }
        const recur_batch b = { N, tok, pos, sid, want };
        if (recur_decode_capture(z->ctx, &b, caps, 3, NULL, 0)) abort();
        for (int k = 0; k < 3; k++)
            if (pcache_ckpt_commit(pc, 0, tok, at[k], ck[k], recur_get_logits(z->ctx, at[k]), 0)) abort();
    }
    if (pcache_write(pc, NULL, 0, z->path, NULL, NULL, 0)) abort();
    z->seed = slurp(z->path, &z->seed_len);
    pcache_free(pc);
    recur_seq_rm(z->ctx, 0, -1, -1);
}

static fz z;

/* The input file goes when the run ends (the fuzzer calls exit), not left in /tmp. */
static void rm_input(void) { remove(z.path); }

static fz *init(void) {
    if (z.m) return &z;
    recur_init();
    char err[256];
    if (recur_model_load(MODEL, NULL, &z.m, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 2;
    cp.n_batch = 32;
    cp.n_ubatch = 32;
    cp.n_threads = 1;
    if (recur_ctx_new(z.m, &cp, &z.ctx, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
    snprintf(z.path, sizeof z.path, "/tmp/fuzz_pcache.%d.bin", (int)getpid());
    atexit(rm_input);
    make_seed(&z);
    return &z;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz *z = init();
    if (size < 1) return 0;
    const uint8_t mode = data[0];
    data++;
    size--;
    uint8_t *buf;
    size_t len;
    if (mode & 2) {
        len = z->seed_len;
        buf = malloc(len);
        memcpy(buf, z->seed, len);
        for (size_t i = 0; i + 3 <= size; i += 3) buf[(data[i] | (size_t)data[i + 1] << 8) % len] = data[i + 2];
    } else {
        len = size;
        buf = malloc(len ? len : 1);
        memcpy(buf, data, len);
    }
    if ((mode & 1) && len >= 8) {
        const uint64_t h = XXH3_64bits(buf, len - 8);
        memcpy(buf + len - 8, &h, 8);
    }
    FILE *f = fopen(z->path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) abort();
    fclose(f);
    free(buf);

    const pcache_params pp = { .budget_bytes = 400 * 1024, .max_ckpt_path = 4 };
    pcache *pc;
    if (pcache_new(z->ctx, &pp, &pc, NULL, 0)) abort();
    recur_token *tok = NULL;
    int32_t n = 0;
    char err[256];
    if (pcache_read(pc, z->path, &tok, &n, NULL, err, sizeof err) == RECUR_OK && n > 0 && n < 48) {
        recur_token ext[64];
        memcpy(ext, tok, (size_t)n * sizeof *tok);
        ext[n] = 3;
        const pcache_hit h = pcache_lookup(pc, ext, n + 1);
        recur_seq_rm(z->ctx, 1, -1, -1);
        if (h.n_restore > 0 && pcache_restore(pc, 1, ext, n + 1, &h, 0, NULL, err, sizeof err) == RECUR_OK &&
            recur_seq_pos_max(z->ctx, 1) == h.n_restore - 1)
            decode(z->ctx, ext, 1, h.n_restore, 1);
        recur_seq_rm(z->ctx, 1, -1, -1);
    }
    free(tok);
    pcache_stats st;
    pcache_stats_get(pc, &st);
    if (st.bytes > pp.budget_bytes) abort();   /* the budget holds, whatever the file says */
    pcache_free(pc);
    return 0;
}
