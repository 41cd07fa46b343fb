/* repack.c — Q4_K matrices packed 16 rows to a group at load (tensor.h tensor_q4_K_r16_pack).
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
 * Only where the kernel table has the packed kernel (recur.h recur_model_params), and never
 * the token embedding, whose rows are looked up one by one. */
#include <stdlib.h>

#include "core/alloc.h"
#include "model/model.h"
#include "tensor/tensor.h"

/* Packed matrices are carved one after the other from chunks of PACK_CHUNK bytes (2 MiB
 * pages, core/alloc.h): a matrix of its own allocation below 2 MiB would sit on 4 KiB pages,
 * whose TLB misses cost the streaming kernel more than the packing gains (qwen35-0.8b: most
 * of its Q4_K matrices are 1.2-2.1 MB). */
#define PACK_CHUNK ((size_t)64 << 20)
#define PACK_ALIGN 64

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

void model_repack(struct recur_model *m, model_w *w) {
    if (!m->repack || w->type != GGUF_T_Q4_K || !w->data || w->ne[1] <= 0 || w->ne[1] % TENSOR_R16_ROWS ||
        w->ne[2] != 1 || w->ne[3] != 1)
        return;
    const size_t rb = tensor_row_bytes(GGUF_T_Q4_K, w->ne[0]);
    size_t bytes;
    if (!rb || rc_mul_size(rb, (size_t)w->ne[1], &bytes)) return;
    uint8_t *dst = pack_alloc(m, bytes);
    if (!dst) return;
    const uint8_t *src = w->data;
    const size_t gb = rb * TENSOR_R16_ROWS;
    for (int64_t g = 0; g < w->ne[1] / TENSOR_R16_ROWS; g++)
        tensor_q4_K_r16_pack(src + (size_t)g * gb, rb, w->ne[0], dst + (size_t)g * gb);
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
