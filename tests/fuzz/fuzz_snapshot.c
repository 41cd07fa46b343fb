/* fuzz_snapshot.c — libFuzzer target for serialized snapshots (slot files and the disk cache
 * are made of them): recur_snapshot_load on a context of the tiny hybrid lfm2 model (attention
 * cells + short-conv state: small snapshots, 4-8 KB), and whatever loads is restored into a sequence and decoded one
 * token further, so the bytes that pass validation are used the way the server uses them.
 *
 * The first input byte is a mode, the rest the data:
 *   bit 0: write the right XXH3 at the end (else the checksum is the fuzzer's: then almost
 *          everything stops at the checksum, which is the point of that path);
 *   bit 1: patch mode: the data is a list of (offset u16 LE, byte) edits applied to a real
 *          snapshot made at start-up (bit 2: the checkpoint, else the sequence snapshot), so
 *          header fields are explored even from an empty corpus;
 *   else the data is the whole serialized snapshot.
 * Any crash, leak, UB report or hang is a bug; so is a load that succeeds on bytes whose
 * re-serialization differs (abort).
 *
 * Seeds (tests/fuzz/seeds/snapshot/) are real snapshots: RECUR_FUZZ_SNAPSHOT_SEEDS=DIR
 * fuzz_snapshot writes them into DIR and exits.
 *
 *   CC=clang cmake -S . -B /tmp/build-fuzz -DRECUR_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug
 *   cmake --build /tmp/build-fuzz --target fuzz_snapshot
 *   /tmp/build-fuzz/fuzz_snapshot /tmp/snap-corpus /tmp/build-fuzz/fuzz_corpus/snapshot
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "recur.h"

#define MODEL RECUR_TESTDATA "/models/pub-lfm2-Q8_0.gguf"
#define N_PROMPT 8   /* seq 0 holds this prompt for the whole run */

typedef struct fz {
    recur_model *m;
    recur_ctx   *ctx;
    uint8_t     *seed[2];   /* [0] sequence snapshot, [1] checkpoint, both at N_PROMPT - 1 */
    size_t       seed_len[2];
} fz;

static uint8_t *save(const recur_snapshot *s, size_t *len) {
    *len = recur_snapshot_bytes(s);
    uint8_t *buf = malloc(*len);
    if (!buf || recur_snapshot_save(s, buf, *len) != *len) abort();
    return buf;
}

static void decode(recur_ctx *ctx, recur_seq_id seq, recur_pos p0, int n) {
    recur_token tok[N_PROMPT];
    recur_pos pos[N_PROMPT];
    recur_seq_id sid[N_PROMPT];
    for (int i = 0; i < n; i++) { tok[i] = (recur_token)(17 + 31 * (p0 + i)) % 500; pos[i] = p0 + i; sid[i] = seq; }
    const recur_batch b = { .n_tokens = n, .token = tok, .pos = pos, .seq_id = sid, .logits = NULL };
    char err[256];
    if (recur_decode(ctx, &b, err, sizeof err)) { fprintf(stderr, "%s\n", err); abort(); }
    volatile float x = recur_get_logits(ctx, n - 1)[0];
    (void)x;
}

static fz *state(void) {
    static fz f;
    if (f.ctx) return &f;
    char err[256];
    recur_ctx_params cp = recur_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_seq_max = 2;
    cp.n_batch = cp.n_ubatch = 16;
    cp.n_threads = 1;
    if (recur_model_load(MODEL, NULL, &f.m, err, sizeof err) || recur_ctx_new(f.m, &cp, &f.ctx, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        abort();
    }
    decode(f.ctx, 0, 0, N_PROMPT);
    for (int k = 0; k < 2; k++) {
        recur_snapshot *s = recur_snapshot_new(f.ctx, k ? RECUR_SNAP_CHECKPOINT : RECUR_SNAP_SEQUENCE, N_PROMPT - 1);
        if (!s || recur_snapshot_take(f.ctx, 0, s, err, sizeof err)) abort();
        f.seed[k] = save(s, &f.seed_len[k]);
        recur_snapshot_free(s);
    }
    return &f;
}

/* A loaded snapshot goes where the server would put it (a copy of seq 0 for a checkpoint,
 * which needs its attention cells; an empty seq 1 for a sequence snapshot), then one more
 * token is decoded on top of it. */
static void use(fz *f, const recur_snapshot *s, const uint8_t *bytes, size_t len) {
    uint8_t *again = malloc(len);
    if (!again || recur_snapshot_save(s, again, len) != len || memcmp(again, bytes, len)) abort();
    free(again);
    char err[256];
    const bool ckpt = recur_snapshot_kind_of(s) == RECUR_SNAP_CHECKPOINT;
    if (ckpt && recur_seq_cp(f->ctx, 0, 1, -1, -1)) abort();
    if (!recur_snapshot_restore(f->ctx, s, 1, err, sizeof err)) {
        const recur_pos p = recur_seq_pos_max(f->ctx, 1);
        if (p != recur_snapshot_pos(s)) abort();
        if (p + 1 < 64) decode(f->ctx, 1, p + 1, 1);
    }
    if (recur_seq_rm(f->ctx, 1, -1, -1)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz *f = state();
    if (size < 1) return 0;
    const unsigned mode = data[0];
    data++, size--;
    uint8_t *buf;
    size_t len;
    if (mode & 2) {
        const int k = (mode & 4) ? 1 : 0;
        len = f->seed_len[k];
        if (!(buf = malloc(len))) return 0;
        memcpy(buf, f->seed[k], len);
        for (size_t i = 0; i + 3 <= size; i += 3) {
            const size_t off = (size_t)data[i] | (size_t)data[i + 1] << 8;
            buf[off % len] = data[i + 2];
        }
    } else {
        len = size;
        if (!(buf = malloc(len ? len : 1))) return 0;   /* exact size: a read past the end is caught */
        memcpy(buf, data, len);
    }
    if ((mode & 1) && len >= 8) {
        const uint64_t h = XXH3_64bits(buf, len - 8);
        memcpy(buf + len - 8, &h, 8);
    }
    recur_snapshot *s = NULL;
    char err[256];
    if (recur_snapshot_load(f->ctx, buf, len, &s, err, sizeof err) == RECUR_OK) {
        if (!s) abort();
        use(f, s, buf, len);
        recur_snapshot_free(s);
    } else if (s) {
        abort();   /* *out is NULL on failure */
    }
    free(buf);
    return 0;
}

/* RECUR_FUZZ_SNAPSHOT_SEEDS=DIR: writes the seed corpus (real snapshots, mode byte 1) and exits. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    const char *dir = getenv("RECUR_FUZZ_SNAPSHOT_SEEDS");
    if (!dir) return 0;
    fz *f = state();
    static const char *const names[2] = { "sequence", "checkpoint" };
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s-pos%d.snap", dir, names[k], N_PROMPT - 1);
        FILE *o = fopen(path, "wb");
        const uint8_t mode = 1;
        if (!o || fwrite(&mode, 1, 1, o) != 1 || fwrite(f->seed[k], 1, f->seed_len[k], o) != f->seed_len[k]) abort();
        fclose(o);
        printf("wrote %s (%zu bytes)\n", path, f->seed_len[k] + 1);
    }
    exit(0);
}
