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
 * How: each mode keeps its last RT_PF_RING samples of nanoseconds per MiB of weights, fed by
 * every call of at least PF_MIN_BYTES, and is judged by their lower median; each is measured
 * PF_WARM times first (the two in turn), then a call takes the faster mode, except one in
 * PF_EXPLORE (picked at random, so the explored calls are not always the same matrices of a
 * token) that takes the other to keep its samples current, fewer where the other is much
 * slower: one in PF_EXPLORE · 16 · gap, so that exploring costs at most 1/256 of the time
 * while the gap is under 1 (one in PF_EXPLORE cost 6 % of the calls the slower way's extra
 * time, 40 % with prefetch off on an idle machine), up to one in PF_EXPLORE_MAX.
 * Calls of different sizes read at different speeds (a 1 MB matrix spends more of its time
 * starting up than the 200 MB output head), so each power of two of call bytes has its own
 * chooser: with one for all, a rare explored call of a fast size made the other mode look
 * faster, and a quarter of the calls ran the slower way.
 * And each weight type (packed or not) has its own: the kernels need the prefetch to different
 * degrees (memory idle: a 208 MB matrix at 2 threads, prefetch on / off, packed Q6_K 74 / 47
 * GB/s, packed Q4_K 96 / 50, packed Q8_0 90 / 80), so with one chooser per size for all types
 * qwen35-0.8b Q4_K_M ran 76-91 t/s where prefetch always on gave 105-111.
 * Why a median: a call that the OS or the machine's neighbours hold back (stalls of 20-60 ms
 * come in bursts on the Zen 5 machine), or a cold first call, is an outlier the median
 * ignores, where a mean carried it. The earlier mean (the second sample replacing the first,
 * samples clipped at twice the mean) still lost: the output head of qwen3-0.6b Q4_K_M (127 MB
 * of packed Q6_K, one call a token) had one prefetch sample, 138542 ns/MiB, against lean's
 * 30827, so it was explored one call in 896 and ran lean all of recur-bench's 384 tokens at
 * half the speed prefetch reads it (15107 ns/MiB): tg128 109-127 t/s where RECUR_PREFETCH=on
 * gave 141-142.
 * The samples are relaxed atomics: several contexts may feed them at once, and a lost update
 * only costs a sample. */
#include <stdatomic.h>
#include <string.h>

#include "tensor/tensor_impl.h"

#define PF_EXPLORE   16                     /* one call in this many measures the other mode, */
#define PF_EXPLORE_MAX 256                  /* down to this many where it is much slower */
#define PF_WARM      3                      /* samples of each mode before the first choice */
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

uint64_t rt_pf_estimate(rt_pf_chooser *c, bool lean) {
    uint64_t v[RT_PF_RING];
    int n = 0;
    for (int i = 0; i < RT_PF_RING; i++) {
        const uint64_t x = atomic_load_explicit(&c->ns_per_mib[lean][i], memory_order_relaxed);
        if (!x) continue;   /* not yet written */
        int j = n++;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
    return n ? v[(n - 1) / 2] : 0;
}

bool rt_pf_pick_lean(rt_pf_chooser *c) {
    const uint64_t n_on = atomic_load_explicit(&c->calls[0], memory_order_relaxed),
                   n_off = atomic_load_explicit(&c->calls[1], memory_order_relaxed);
    if (n_on < PF_WARM || n_off < PF_WARM) return n_off < n_on;   /* the less measured, prefetch first */
    const uint64_t on = rt_pf_estimate(c, false), off = rt_pf_estimate(c, true);
    if (!on || !off) return on != 0;   /* another context's sample not written yet */
    const bool lean = off < on;
    const uint64_t fast = lean ? off : on, slow = lean ? on : off;
    /* one call in PF_EXPLORE, fewer the slower the other mode: one in PF_EXPLORE · 16 · gap,
     * gap = slow / fast − 1 (from 1/16 on), up to one in PF_EXPLORE_MAX */
    uint64_t every = PF_EXPLORE * (16 * (slow - fast) / fast);
    every = every < PF_EXPLORE ? PF_EXPLORE : every > PF_EXPLORE_MAX ? PF_EXPLORE_MAX : every;
    return pf_rand(c) % every == 0 ? !lean : lean;
}

void rt_pf_record(rt_pf_chooser *c, bool lean, uint64_t ns, uint64_t bytes) {
    if (bytes < PF_MIN_BYTES) return;
    uint64_t v = (uint64_t)((double)ns * (double)(1u << 20) / (double)bytes);
    if (!v) v = 1;   /* 0 marks a slot not yet written */
    const uint64_t n = atomic_fetch_add_explicit(&c->calls[lean], 1, memory_order_relaxed);
    atomic_store_explicit(&c->ns_per_mib[lean][n % RT_PF_RING], v, memory_order_relaxed);
}
