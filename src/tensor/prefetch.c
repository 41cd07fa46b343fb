/* prefetch.c — whether the single-token matmuls run their kernels or the kernels' lean twins
 * (tensor.h tensor_gemv.lean: without software prefetch, or two streams where the kernel reads
 * four), chosen by timing the calls as they run.
 *
 * Why: a software prefetch far ahead in each weight stream reads faster where memory is idle
 * apart from us (the earlier sessions' Zen 5 machine: Q8_0 +4-13 %, Q4_K packed needs it to
 * follow its one stream), and slower where the machine's neighbours keep memory busy: there,
 * on the same machine, recur's own per-token A/B (a harness outside the repo that switches the
 * kernels between tokens, ABBA, 150 quads, medians) gave without it qwen3-0.6b Q4_K_M 0.86x
 * the time a token, qwen3-0.6b Q8_0 0.92x, qwen35-0.8b Q8_0 0.89x, while the read bandwidth
 * swung between 25 and 53 GB/s from one minute to the next. Which one is faster changes
 * with the neighbours, so it is measured, not fixed. The results are the same bits either way.
 *
 * How: an exponentially weighted mean of nanoseconds per MiB of weights for each mode, fed by
 * every call of at least PF_MIN_BYTES; a call takes the faster mode, except one in PF_EXPLORE
 * (picked at random, so the explored calls are not always the same matrices of a token) that
 * takes the other to keep its mean current, fewer where the other is much slower: exploring
 * costs at most 1/256 of the time (one in PF_EXPLORE cost 6 % of the calls the slower way's
 * extra time, 40 % with prefetch off on an idle machine). Calls of different sizes read at
 * different speeds (a 1 MB matrix spends more of its time starting up than the 200 MB output
 * head), so each power of two of call bytes has its own chooser: with one for all, a rare
 * explored call of a fast size made the other mode look faster, and a quarter of the calls ran
 * the slower way.
 * And each weight type (packed or not) has its own: the kernels need the prefetch to different
 * degrees (memory idle: a 208 MB matrix at 2 threads, prefetch on / off, packed Q6_K 74 / 47
 * GB/s, packed Q4_K 96 / 50, packed Q8_0 90 / 80), so with one chooser per size for all types
 * qwen35-0.8b Q4_K_M ran 76-91 t/s where prefetch always on gave 105-111. A mode's second
 * sample replaces its first (a cold call can take many times as long) and the mean follows
 * the next ones as their plain mean (weight 1/n up to 1/PF_WEIGHT), so one slow call does not
 * hold a mode back for hundreds of calls. And a sample counts at most as twice the mean: a
 * call that the OS or the neighbours held back for a millisecond moved its mode's mean so far
 * that the slower mode ran for hundreds of calls (qwen3-0.6b Q4_K_M: the 1-2 MiB o projections
 * ran lean 55 % of the time at 0.8x the speed; recur-bench --prefetch-ab 64, prefetch always
 * on against auto, median B/A: 1.029/1.057/1.018 before these two changes, 1.007/1.007/1.008
 * after, alternating binaries).
 * The means are relaxed atomics: several contexts may feed them at once, and a lost update
 * only costs a sample. */
#include <stdatomic.h>
#include <string.h>

#include "tensor/tensor_impl.h"

#define PF_EXPLORE   16                     /* one call in this many measures the other mode, */
#define PF_EXPLORE_MAX 1024                 /* down to this many where it is much slower */
#define PF_WEIGHT    32                     /* from the 33rd sample on, each moves its mean by 1/32 of the gap */
#define PF_MIN_BYTES ((uint64_t)256 << 10)  /* smaller calls are mostly start-up: not measured */
#define PF_SIZES     12                     /* choosers: 256 KiB, 512 KiB, ... and the rest */
#define PF_KINDS     (2 * GGUF_T_COUNT)     /* weight types, file layout or packed (rt_pf_kind) */

static atomic_int g_mode = TENSOR_PF_AUTO;
static rt_pf_chooser g_choosers[PF_KINDS][PF_SIZES];

void tensor_gemv_prefetch_set(int mode) {
    if (mode == TENSOR_PF_AUTO || mode == TENSOR_PF_ON || mode == TENSOR_PF_OFF)
        atomic_store_explicit(&g_mode, mode, memory_order_relaxed);
}

int tensor_gemv_prefetch_parse(const char *name) {
    static const char *names[] = { "auto", "on", "off" };   /* by TENSOR_PF_* */
    for (int m = 0; name && m < 3; m++)
        if (!strcmp(name, names[m])) return m;
    return -1;
}

const char *tensor_gemv_prefetch_name(int mode) {
    return mode == TENSOR_PF_ON ? "on" : mode == TENSOR_PF_OFF ? "off" : "auto";
}

int tensor_gemv_prefetch_get(void) { return atomic_load_explicit(&g_mode, memory_order_relaxed); }

void tensor_gemv_prefetch_stats(uint64_t calls[2]) {
    calls[0] = calls[1] = 0;
    for (int k = 0; k < PF_KINDS; k++)
        for (int s = 0; s < PF_SIZES; s++)
            for (int m = 0; m < 2; m++) calls[m] += atomic_load_explicit(&g_choosers[k][s].calls[m], memory_order_relaxed);
}

int rt_pf_kind(uint32_t wtype, bool packed) {
    return wtype < GGUF_T_COUNT ? (int)wtype + (packed ? GGUF_T_COUNT : 0) : 0;
}

rt_pf_chooser *rt_pf_for(int kind, uint64_t bytes) {
    int s = 0;
    while (s + 1 < PF_SIZES && bytes >= PF_MIN_BYTES << (s + 1)) s++;
    return &g_choosers[kind >= 0 && kind < PF_KINDS ? kind : 0][s];
}

/* xorshift32: the exploring calls' dice (any state but 0) */
static uint32_t pf_rand(rt_pf_chooser *c) {
    uint32_t x = atomic_load_explicit(&c->rng, memory_order_relaxed);
    if (!x) x = 0x9E3779B9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    atomic_store_explicit(&c->rng, x, memory_order_relaxed);
    return x;
}

bool rt_pf_pick_lean(rt_pf_chooser *c) {
    const uint64_t on = atomic_load_explicit(&c->ns_per_mib[0], memory_order_relaxed),
                   off = atomic_load_explicit(&c->ns_per_mib[1], memory_order_relaxed);
    if (!on || !off) return on != 0;   /* each mode measured once before any choice */
    const bool lean = off < on;
    const uint64_t fast = lean ? off : on, slow = lean ? on : off;
    /* one call in PF_EXPLORE, fewer the slower the other mode: one in PF_EXPLORE · 16 · gap,
     * gap = slow / fast − 1 (from 1/16 on), so that exploring never costs more than 1/256 of
     * the time, up to one in PF_EXPLORE_MAX */
    uint64_t every = PF_EXPLORE * (16 * (slow - fast) / fast);
    every = every < PF_EXPLORE ? PF_EXPLORE : every > PF_EXPLORE_MAX ? PF_EXPLORE_MAX : every;
    return pf_rand(c) % every == 0 ? !lean : lean;
}

void rt_pf_record(rt_pf_chooser *c, bool lean, uint64_t ns, uint64_t bytes) {
    if (bytes < PF_MIN_BYTES) return;
    uint64_t v = (uint64_t)((double)ns * (double)(1u << 20) / (double)bytes) + 1;   /* never 0 */
    _Atomic uint64_t *mean = &c->ns_per_mib[lean];
    const uint64_t m = atomic_load_explicit(mean, memory_order_relaxed);
    if (m && v > 2 * m) v = 2 * m;
    /* the second sample replaces the first (which may be a cold call), then the plain mean of
     * those after it, up to 1/PF_WEIGHT */
    const uint64_t n = atomic_load_explicit(&c->calls[lean], memory_order_relaxed);   /* samples before */
    const int64_t step = ((int64_t)v - (int64_t)m) / (int64_t)(n < 1 ? 1 : n < PF_WEIGHT ? n : PF_WEIGHT);
    atomic_store_explicit(mean, m ? (uint64_t)((int64_t)m + step) : v, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->calls[lean], 1, memory_order_relaxed);
}
