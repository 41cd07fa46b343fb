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
    float   w;       /* a weight (unnormalized probability), set by the stage that needs it */
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

/* Rearranges c[0 .. n) so that c[0 .. m) are the first m candidates of the order, for the
 * smallest m whose weights sum to at least target (more than target when strict), and at least
 * min_keep (clamped to n); returns m, or n when the whole sum falls short. Unlike a sort, this is
 * O(n) expected however long the kept run is. c[0 .. m) is left in no particular order (but a
 * deterministic one: the same input gives the same arrangement). The running sums are taken
 * over blocks the partitioning makes, so rounding may differ from a sum in sorted order. */
int32_t sample_cand_mass_select(sample_cand *c, int32_t n, double target, bool strict, int32_t min_keep);

/* A bounded heap that keeps the first k candidates of the total order seen so far, for top-k
 * during one pass over the vocabulary (the 150k-token array is never written in full).
 * c[0 .. *n) is the heap (the worst kept candidate at c[0]); cap = k. */
void sample_cand_heap_offer(sample_cand *c, int32_t *n, int32_t cap, sample_cand x);
/* Turns the heap c[0 .. n) into a sorted array (first in the order at c[0]). */
void sample_cand_heap_sort(sample_cand *c, int32_t n);

#endif
