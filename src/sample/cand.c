/* cand.c — selection and sorting of sampling candidates in their total order (cand.h). */
#include "sample/cand.h"

static inline void swap(sample_cand *a, sample_cand *b) {
    const sample_cand t = *a;
    *a = *b;
    *b = t;
}

/* ---- heap: the root is the candidate that comes last in the order (the worst kept) --------- */

static void sift_down(sample_cand *c, int32_t n, int32_t i) {
    for (;;) {
        int32_t worst = i;
        const int32_t l = 2 * i + 1, r = l + 1;
        if (l < n && sample_cand_before(&c[worst], &c[l])) worst = l;
        if (r < n && sample_cand_before(&c[worst], &c[r])) worst = r;
        if (worst == i) return;
        swap(&c[i], &c[worst]);
        i = worst;
    }
}

void sample_cand_heap_offer(sample_cand *c, int32_t *n, int32_t cap, sample_cand x) {
    if (cap <= 0) return;
    if (*n < cap) {
        int32_t i = (*n)++;
        c[i] = x;
        while (i > 0) {   /* sift up while the parent comes before the child */
            const int32_t parent = (i - 1) / 2;
            if (!sample_cand_before(&c[parent], &c[i])) break;
            swap(&c[parent], &c[i]);
            i = parent;
        }
    } else if (sample_cand_before(&x, &c[0])) {
        c[0] = x;
        sift_down(c, *n, 0);
    }
}

void sample_cand_heap_sort(sample_cand *c, int32_t n) {
    for (int32_t end = n - 1; end > 0; end--) {   /* the worst goes to the back, one at a time */
        swap(&c[0], &c[end]);
        sift_down(c, end, 0);
    }
}

static void heap_sort_range(sample_cand *c, int32_t n) {
    for (int32_t i = n / 2 - 1; i >= 0; i--) sift_down(c, n, i);
    sample_cand_heap_sort(c, n);
}

/* ---- partial quicksort ---------------------------------------------------------------------- */

static void insertion_sort(sample_cand *c, int32_t n) {
    for (int32_t i = 1; i < n; i++) {
        const sample_cand x = c[i];
        int32_t j = i;
        while (j > 0 && sample_cand_before(&x, &c[j - 1])) { c[j] = c[j - 1]; j--; }
        c[j] = x;
    }
}

/* Median of c[a], c[b], c[d] in the order: its index. */
static int32_t median3(const sample_cand *c, int32_t a, int32_t b, int32_t d) {
    if (sample_cand_before(&c[a], &c[b])) {
        if (sample_cand_before(&c[b], &c[d])) return b;
        return sample_cand_before(&c[a], &c[d]) ? d : a;
    }
    if (sample_cand_before(&c[a], &c[d])) return a;
    return sample_cand_before(&c[b], &c[d]) ? d : b;
}

/* Lomuto partition of c[lo .. hi) around a median-of-three pivot; returns the pivot's place.
 * No two candidates are equal in the order, so the split is exact. */
static int32_t partition(sample_cand *c, int32_t lo, int32_t hi) {
    const int32_t m = median3(c, lo, lo + (hi - lo) / 2, hi - 1);
    swap(&c[m], &c[hi - 1]);
    const sample_cand pivot = c[hi - 1];
    int32_t i = lo;
    for (int32_t j = lo; j < hi - 1; j++)
        if (sample_cand_before(&c[j], &pivot)) swap(&c[i++], &c[j]);
    swap(&c[i], &c[hi - 1]);
    return i;
}

/* Sorts what of c[lo .. hi) falls before index k. depth bounds the recursion: past it the range
 * is heap-sorted whole (introsort's guard against quadratic inputs). */
static void partial_quicksort(sample_cand *c, int32_t lo, int32_t hi, int32_t k, int depth) {
    while (hi - lo > 16) {
        if (depth-- == 0) { heap_sort_range(c + lo, hi - lo); return; }
        const int32_t p = partition(c, lo, hi);
        if (p + 1 < k) partial_quicksort(c, p + 1, hi, k, depth);
        hi = p;   /* the left part always reaches below k, since lo < k */
    }
    insertion_sort(c + lo, hi - lo);
}

void sample_cand_select(sample_cand *c, int32_t n, int32_t k) {
    if (k > n) k = n;
    if (k <= 0) return;
    int depth = 2;
    for (int32_t m = n; m > 1; m >>= 1) depth += 2;
    partial_quicksort(c, 0, n, k, depth);
}
