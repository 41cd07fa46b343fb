/* cand.h — sampling candidates and their one total order.
 *
 * Invariants:
 *  1. Candidates are ordered by (key descending, id ascending). Ids are unique, so this is a total
 *     order: any correct sort or selection gives the same arrangement, whatever the algorithm.
 *     This is what makes sampling deterministic without a stable sort.
 *  2. key is the logit, except inside a stage that sorts by something else (typical_p sorts by
 *     minus its score); such a stage sets key back to logit before it returns.
 *  3. Nothing here allocates: all work happens in place in the caller's array. */
#ifndef RECUR_SAMPLE_CAND_H
#define RECUR_SAMPLE_CAND_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sample_cand {
    float   logit;   /* biased, penalized logit (before temperature) */
    float   key;     /* what the order sorts by (see invariant 2) */
    int32_t id;      /* token id */
} sample_cand;

/* a comes before b in the total order */
static inline bool sample_cand_before(const sample_cand *a, const sample_cand *b) {
    return a->key > b->key || (a->key == b->key && a->id < b->id);
}

/* Rearranges c[0 .. n) so that c[0 .. k) holds the first k candidates of the total order, sorted;
 * c[k .. n) holds the rest in an unspecified (but deterministic) arrangement. O(n + k log k)
 * expected, O(n log n) worst case. k is clamped to [0, n]. */
void sample_cand_select(sample_cand *c, int32_t n, int32_t k);

/* A bounded heap that keeps the first k candidates of the total order seen so far, for top-k
 * during one pass over the vocabulary (the 150k-token array is never written in full).
 * c[0 .. *n) is the heap (the worst kept candidate at c[0]); cap = k. */
void sample_cand_heap_offer(sample_cand *c, int32_t *n, int32_t cap, sample_cand x);
/* Turns the heap c[0 .. n) into a sorted array (first in the order at c[0]). */
void sample_cand_heap_sort(sample_cand *c, int32_t n);

#endif
