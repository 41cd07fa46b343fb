/* repack.c — Q4_K, Q6_K, Q8_0, Q4_0 and Q5_K matrices packed 16 rows to a group at load
 * (tensor.h tensor_q4_K_r16_pack, tensor_q6_K_r16_pack, tensor_q8_0_r16_pack,
 * tensor_q4_0_r16_pack, tensor_q5_K_r16_pack; Q6_K, Q8_0, Q4_0 and Q5_K: their kernels,
 * x86/gemv_q6k16_avx512.c, x86/gemv_q8016_avx512.c, x86/gemv_q40_avx512.c and
 * x86/gemv_q4k16_avx512.c / x86/gemv_q4k16_avx2.c, say why).
 *
 * A token's matmuls read every weight byte once; the Q4_K ones in the file's layout cost the
 * single-token kernel a scale unpack and a sum across lanes per row and block, which on the
 * 2-core Zen 5 machine this was measured on kept them below the memory's speed. Packed, 16
 * rows side by side need neither (x86/gemv_q4k16_avx512.c). tensor_matmul on 2 threads over
 * 150 matrices of 6144 x 1024 (530 MB, past every cache; a program outside the repo, 4 KiB
 * pages both): 59-63 GB/s packed, 44-46 in the file's layout. In a model the file's layout
 * runs from 2 MiB pages and gains less: recur-bench tg64, 8 alternating rounds against
 * RECUR_NO_REPACK=1: qwen35-0.8b Q4_K_M 86.9 -> 89.2 t/s (5 won), qwen3-0.6b Q4_K_M 103.8 ->
 * 111.1 (8 won); pp512 unchanged within noise (batches read an unpacked copy of 64 rows at a
 * time, tensor/matmul.c). The packed bytes replace the file's (same size; the file's pages of
 * the matrix are unmapped, gguf_drop_range, so the process holds one copy), and every result
 * keeps its bits (tensor_matmul takes TENSOR_T_Q4_K_R16).
 * Only where the kernel table has the packed kernel (recur.h recur_model_params; Q8_0 where it
 * also prefers it, tensor.h tensor_q8_0_r16_preferred), and never
 * a Q4_K, Q4_0 or Q5_K token embedding, whose rows are looked up one by one (a packed Q6_K or Q8_0 one is:
 * the output head of tied models, a third of a Q4_K_M token's bytes, and tensor_get_row
 * unpacks a row). Other matrices stay in the file's mapping, except those whose 2 MiB pages are
 * mostly the packed ones' (move_to_huge_pages). */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "model/model.h"
#include "tensor/tensor.h"

/* Packed matrices are carved one after the other from chunks of PACK_CHUNK bytes (2 MiB
 * pages, core/alloc.h): a matrix of its own allocation below 2 MiB would sit on 4 KiB pages,
 * whose TLB misses cost the streaming kernel more than the packing gains (qwen35-0.8b: most
 * of its Q4_K matrices are 1.2-2.1 MB). */
#define PACK_CHUNK ((size_t)64 << 20)
#define PACK_ALIGN 64
#define PACK_DROP_STEP ((size_t)8 << 20)   /* file bytes packed between two drops */

static uint8_t *pack_alloc(struct recur_model *m, size_t bytes) {
    if (bytes > m->pack_left) {
        if (m->n_packed == m->cap_packed) {
            const int cap = m->cap_packed ? 2 * m->cap_packed : 16;
            void **p = realloc(m->packed, (size_t)cap * sizeof *p);
            if (!p) return NULL;
            m->packed = p;
            m->cap_packed = cap;
        }
        const size_t sz = bytes > PACK_CHUNK ? bytes : PACK_CHUNK;
        uint8_t *c = rc_alloc_huge(sz);
        if (!c) return NULL;
        m->packed[m->n_packed++] = c;
        m->pack_at = c;
        m->pack_left = sz;
    }
    uint8_t *p = m->pack_at;
    const size_t used = (bytes + PACK_ALIGN - 1) & ~(size_t)(PACK_ALIGN - 1);
    m->pack_at += used < m->pack_left ? used : m->pack_left;
    m->pack_left -= used < m->pack_left ? used : m->pack_left;
    return p;
}

/* Whether model_repack packs a matrix of this type and shape (lookup: see model.h). */
static bool packs_matrix(const struct recur_model *m, uint32_t type, const int64_t *ne, bool lookup) {
    const bool kind = type == GGUF_T_Q4_K   ? m->repack && !lookup
                    : type == GGUF_T_Q6_K ? m->repack_q6
                    : type == GGUF_T_Q4_0 ? m->repack_q40 && !lookup
                    : type == GGUF_T_Q5_K ? m->repack_q5 && !lookup
                                          : type == GGUF_T_Q8_0 && m->repack_q8;
    return kind && ne[1] > 0 && ne[1] % TENSOR_R16_ROWS == 0 && ne[2] == 1 && ne[3] == 1;
}

/* Whether model_repack packs the file's tensor t (from the file's facts). */
static bool packs(const struct recur_model *m, const gguf_tensor *t) {
    return packs_matrix(m, t->type, t->ne, strcmp(t->name, "token_embd.weight") == 0);
}

#define PAGE_2M ((uintptr_t)2 << 20)
#define MOVE_MIN ((uint64_t)64 << 10)

/* Bytes of [p, p + n) in 2 MiB pages of the mapping that also hold part of a packed matrix.
 * Only its first and last page can: the matrices do not overlap. */
static uint64_t shares_pages(const struct recur_model *m, const uint8_t *p, uint64_t n) {
    const uintptr_t a = (uintptr_t)p, e = a + n, first = a & ~(PAGE_2M - 1), last = (e - 1) & ~(PAGE_2M - 1);
    bool in_first = false, in_last = false;
    for (int64_t i = 0; i < gguf_n_tensors(m->g); i++) {
        const gguf_tensor *t = gguf_tensor_at(m->g, i);
        if (!packs(m, t) || !t->nbytes) continue;
        const uintptr_t ta = (uintptr_t)t->data, te = ta + t->nbytes;
        in_first |= ta < first + PAGE_2M && te > first;
        in_last |= ta < last + PAGE_2M && te > last;
    }
    const uint64_t head = (e < first + PAGE_2M ? e : first + PAGE_2M) - a;
    return (in_first ? head : 0) + (in_last && last != first ? e - last : 0);
}

/* A matrix used in place whose 2 MiB pages of the file are mostly shared with packed ones:
 * dropping those (gguf_drop_range) leaves its part of them mapped in 4 KiB pages (one TLB
 * entry each, and a stop for the hardware prefetchers at every one), so it moves into the
 * packed weights' 2 MiB pages and its own pages are dropped (still one copy). qwen3-0.6b
 * Q4_K_M (Q6_K ffn_down and attn_v: 48 MB a token), recur-bench tg64, 12 alternating rounds
 * against not moving them, one binary: 1.020x (8 won); qwen35-0.8b Q4_K_M, fewer moved:
 * 0.975x (5 won), noise. Below MOVE_MIN bytes (norms, biases) not worth it. */
static void move_to_huge_pages(struct recur_model *m, model_w *w) {
    uint64_t bytes;
    if (!gguf_mapped(m->g) || w->ne[1] < 2 || w->ne[2] != 1 || w->ne[3] != 1 ||
        !gguf_tensor_nbytes(w->type, w->ne, &bytes) || bytes < MOVE_MIN || shares_pages(m, w->data, bytes) <= bytes / 2)
        return;
    uint8_t *dst = pack_alloc(m, bytes);
    if (!dst) return;
    memcpy(dst, w->data, bytes);
    gguf_drop_range(m->g, w->data, bytes);
    w->data = dst;
}

void model_repack(struct recur_model *m, model_w *w, bool lookup) {
    if (!m->repack || !w->data) return;
    if (!packs_matrix(m, w->type, w->ne, lookup)) {
        move_to_huge_pages(m, w);
        return;
    }
    const size_t rb = tensor_row_bytes(w->type, w->ne[0]);
    size_t bytes;
    if (!rb || rc_mul_size(rb, (size_t)w->ne[1], &bytes)) return;
    uint8_t *dst = pack_alloc(m, bytes);
    if (!dst) return;
    const uint8_t *src = w->data;
    const size_t gb = rb * TENSOR_R16_ROWS;
    void (*q5)(const void *, size_t, int64_t, void *) = m->repack_q5_fives ? tensor_q5_K_r16f_pack
                                                                          : tensor_q5_K_r16_pack;
    void (*pack)(const void *, size_t, int64_t, void *) = w->type == GGUF_T_Q4_K   ? tensor_q4_K_r16_pack
                                                        : w->type == GGUF_T_Q6_K ? tensor_q6_K_r16_pack
                                                        : w->type == GGUF_T_Q4_0 ? tensor_q4_0_r16_pack
                                                        : w->type == GGUF_T_Q5_K ? q5
                                                                                 : tensor_q8_0_r16_pack;
    size_t dropped = 0;   /* the file's bytes already let go: a big matrix (a 200 MB token
                           * embedding) would otherwise hold both copies at its end */
    for (int64_t g = 0; g < w->ne[1] / TENSOR_R16_ROWS; g++) {
        pack(src + (size_t)g * gb, rb, w->ne[0], dst + (size_t)g * gb);
        if ((size_t)(g + 1) * gb - dropped >= PACK_DROP_STEP) {
            gguf_drop_range(m->g, src + dropped, (size_t)(g + 1) * gb - dropped);
            dropped = (size_t)(g + 1) * gb;
        }
    }
    gguf_drop_range(m->g, src, bytes);
    w->data = dst;
    w->r16 = true;
}

void model_repack_free(struct recur_model *m) {
    for (int i = 0; i < m->n_packed; i++) rc_free_aligned(m->packed[i]);
    free(m->packed);
    m->packed = NULL;
    m->n_packed = m->cap_packed = 0;
    m->pack_at = NULL;
    m->pack_left = 0;
}
