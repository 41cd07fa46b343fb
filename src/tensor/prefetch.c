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
 * How: one chooser for all the calls, in epochs: an epoch runs every single-token call of the
 * process in one mode until the calls have read RT_PF_EPOCH bytes of weights, and its time per
 * MiB (the calls' time, not the time between them) is a sample of that mode. Each mode keeps
 * its last RT_PF_RING samples and is judged by their lower median; each is measured PF_WARM
 * times first (the two in turn), then an epoch takes the faster mode, except one in PF_EXPLORE
 * (at random) that takes the other to keep its samples current, fewer where the other is much
 * slower: one in PF_EXPLORE · 16 · gap, so that exploring costs at most 1/256 of the time
 * while the gap is under 1 (one in PF_EXPLORE cost 6 % of the slower way's extra time, 40 %
 * with prefetch off on an idle machine), up to one in PF_EXPLORE_MAX.
 * Why epochs: the way a call runs can change how fast the next one does (a call's prefetch
 * reaches past its end, into what the next call reads), which calls timed one by one do not
 * see and an epoch's sample holds; and one chooser for all the calls needs no tables by type
 * and size (calls of different sizes read at different speeds, so per-call samples had to be
 * kept apart, and the rarely called ones, such as the output head, were sampled least).
 * Against per-call choosers (one per packed type and power of two of bytes, each judged by the
 * lower median of its last 8 calls), recur-bench --prefetch-ab 48 (median B/A of auto against
 * prefetch on, and against off; memory idle, probe 74-88 GB/s): qwen35-0.8b Q4_K_M
 * 0.9991 / 0.6546 against 1.0089 / 0.6684, qwen3-0.6b Q4_K_M 1.0025 / 0.6620 against
 * 1.0093 / 0.6975; the Q8_0 models alike within the noise (0.9344 / 1.0042 against
 * 0.9495 / 1.0113, 0.9256 / 1.0071 against 0.9305 / 1.0049).
 * An epoch of 1 GiB is two or three tokens of a small model (qwen3-0.6b Q4_K_M reads 398 MB
 * a token), so every epoch has about the same mix of matrices, and ~13 ms at 80 GB/s.
 * Why a median: calls that the OS or the machine's neighbours hold back (stalls of 20-60 ms
 * come in bursts on the Zen 5 machine), and cold first calls, are outliers the median
 * ignores, where a mean carried them: the earlier per-call means (the second sample replacing
 * the first, samples clipped at twice the mean) gave the output head of qwen3-0.6b Q4_K_M
 * (127 MB of packed Q6_K, one call a token) one prefetch sample, 138542 ns/MiB, against
 * lean's 30827, so it was explored one call in 896 and ran lean all of recur-bench's 384
 * tokens at half the speed prefetch reads it (15107 ns/MiB): tg128 109-127 t/s where
 * RECUR_PREFETCH=on gave 141-142.
 * The chooser is behind a spin lock (held for a few instructions, twice a call), since several
 * contexts may run calls at once. */
#include <stdatomic.h>
#include <string.h>

#include "tensor/tensor_impl.h"

#define PF_EXPLORE   16                     /* one epoch in this many measures the other mode, */
#define PF_EXPLORE_MAX 256                  /* down to this many where it is much slower */
#define PF_WARM      3                      /* epochs of each mode before the first choice */

static atomic_int g_mode = TENSOR_PF_AUTO;
static rt_pf_chooser g_chooser;

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

static void pf_lock(rt_pf_chooser *c) {
    while (atomic_exchange_explicit(&c->lock, 1, memory_order_acquire)) {
    }
}

static void pf_unlock(rt_pf_chooser *c) { atomic_store_explicit(&c->lock, 0, memory_order_release); }

void tensor_gemv_prefetch_stats(uint64_t calls[2]) {
    rt_pf_chooser *c = rt_pf_shared();
    pf_lock(c);
    calls[0] = c->calls[0];
    calls[1] = c->calls[1];
    pf_unlock(c);
}

rt_pf_chooser *rt_pf_shared(void) { return &g_chooser; }

/* xorshift32: the exploring epochs' dice (any state but 0) */
static uint32_t pf_rand(rt_pf_chooser *c) {
    uint32_t x = c->rng ? c->rng : 0x9E3779B9u;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return c->rng = x;
}

uint64_t rt_pf_estimate(const rt_pf_chooser *c, bool lean) {
    uint64_t v[RT_PF_RING];
    const int n = c->epochs[lean] < RT_PF_RING ? (int)c->epochs[lean] : RT_PF_RING;
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && v[j - 1] > c->ns_per_mib[lean][i]; j--) v[j] = v[j - 1];
        v[j] = c->ns_per_mib[lean][i];
    }
    return n ? v[(n - 1) / 2] : 0;
}

/* The mode of the epoch after one that just ended. */
static bool pf_next(rt_pf_chooser *c) {
    if (c->epochs[0] < PF_WARM || c->epochs[1] < PF_WARM) return c->epochs[1] < c->epochs[0];
    const uint64_t on = rt_pf_estimate(c, false), off = rt_pf_estimate(c, true);
    const bool lean = off < on;
    const uint64_t fast = lean ? off : on, slow = lean ? on : off;
    /* one epoch in PF_EXPLORE, fewer the slower the other mode: one in PF_EXPLORE · 16 · gap,
     * gap = slow / fast − 1 (from 1/16 on), up to one in PF_EXPLORE_MAX */
    uint64_t every = PF_EXPLORE * (16 * (slow - fast) / fast);
    every = every < PF_EXPLORE ? PF_EXPLORE : every > PF_EXPLORE_MAX ? PF_EXPLORE_MAX : every;
    return pf_rand(c) % every == 0 ? !lean : lean;
}

bool rt_pf_pick_lean(rt_pf_chooser *c) {
    pf_lock(c);
    const bool lean = c->lean;
    pf_unlock(c);
    return lean;
}

void rt_pf_record(rt_pf_chooser *c, bool lean, uint64_t ns, uint64_t bytes) {
    pf_lock(c);
    c->calls[lean]++;
    if (lean == c->lean) {   /* not a call that began in the epoch before */
        c->ep_ns += ns;
        c->ep_bytes += bytes;
        if (c->ep_bytes >= RT_PF_EPOCH) {
            uint64_t v = (uint64_t)((double)c->ep_ns * (double)(1u << 20) / (double)c->ep_bytes);
            c->ns_per_mib[lean][c->epochs[lean]++ % RT_PF_RING] = v;
            c->ep_ns = c->ep_bytes = 0;
            c->lean = pf_next(c);
        }
    }
    pf_unlock(c);
}
