#include "core/alloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *rc_alloc_aligned(size_t n) {
    size_t sz = (n + RC_ALIGN - 1) / RC_ALIGN * RC_ALIGN;
    if (sz < n) return NULL;
    if (sz == 0) sz = RC_ALIGN;
    return aligned_alloc(RC_ALIGN, sz);
}

void *rc_calloc_aligned(size_t n) {
    void *p = rc_alloc_aligned(n);
    if (p) memset(p, 0, n);
    return p;
}

void rc_free_aligned(void *p) { free(p); }

/* Huge pages for the buffers decode streams every token: a straight read of anonymous memory
 * on this machine's VM, one thread, 4 KiB pages 19.7-20.3 GB/s, 2 MiB pages 28.2-28.8 (a
 * strided read or two streams gain little); recur-bench -p 0 -n 32 -d 8192, qwen3-0.6b Q8_0,
 * 2 threads, 5 alternating pairs: median 13.4 -> 15.9 t/s. The price: a touched KV region
 * holds a whole 2 MiB page, so a long context used briefly holds up to 2 MiB per layer, KV
 * head and K/V (still at most the cache's full size, which llama.cpp holds from the start). */
#define RC_HUGE ((size_t)2 << 20)

void *rc_alloc_huge(size_t n) {
    if (n < RC_HUGE) return rc_alloc_aligned(n);
    const size_t sz = (n + RC_HUGE - 1) / RC_HUGE * RC_HUGE;
    if (sz < n) return NULL;
    void *p = aligned_alloc(RC_HUGE, sz);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, sz, MADV_HUGEPAGE);   /* a hint: without THP the pages stay 4 KiB */
#endif
    return p;
}

void *rc_calloc_huge(size_t n) {
    void *p = rc_alloc_huge(n);
    if (p) memset(p, 0, n);
    return p;
}

int rc_mul_size(size_t a, size_t b, size_t *out) {
    if (a && b > SIZE_MAX / a) return -1;
    *out = a * b;
    return 0;
}

int rc_add_size(size_t a, size_t b, size_t *out) {
    if (b > SIZE_MAX - a) return -1;
    *out = a + b;
    return 0;
}
