/* alloc.h — aligned allocation. Buffers that SIMD kernels stream through are 64-byte aligned. */
#ifndef RECUR_CORE_ALLOC_H
#define RECUR_CORE_ALLOC_H

#include <stddef.h>

#define RC_ALIGN 64

/* Returns a RC_ALIGN-aligned block of at least n bytes (n == 0 gives a valid block), or NULL.
 * Release with rc_free_aligned. */
void *rc_alloc_aligned(size_t n);
/* As rc_alloc_aligned, zero-filled. */
void *rc_calloc_aligned(size_t n);
void  rc_free_aligned(void *p);
/* As rc_alloc_aligned / rc_calloc_aligned for large buffers streamed every token (KV cells,
 * recurrent states): from 2 MiB on, 2 MiB-aligned and marked for transparent huge pages
 * (madvise); release with rc_free_aligned. */
void *rc_alloc_huge(size_t n);
void *rc_calloc_huge(size_t n);

/* a*b and a+b with overflow detection: return 0 and set *out, or return -1 on overflow. */
int rc_mul_size(size_t a, size_t b, size_t *out);
int rc_add_size(size_t a, size_t b, size_t *out);

#endif
