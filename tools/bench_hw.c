/* bench_hw.c — what the machine can do on the benchmark's threads, for the efficiency figures:
 *  - read bandwidth: each thread streams over its share of a buffer far larger than the caches
 *    (1 GiB by default), summing 64-bit lanes with 4 independent accumulators; a pass is timed
 *    from a barrier before the first load to a barrier after the last thread finished; best of
 *    BW_PASSES passes (after one untimed pass that also faults the pages in). Passes cycle
 *    through one stream per thread, two (the two halves of its share side by side) and four
 *    (its quarters, with a software prefetch ahead in each), since the single-token matmuls
 *    read several straight streams per thread and on the Zen 5 machine this was written on
 *    more streams read faster: the roofline is the fastest pattern, so that no kernel of ours
 *    reads faster than the roofline says memory can.
 *  - FMA peak: each thread runs independent fp32 FMA chains that live in registers (16 chains of
 *    16 lanes on AVX-512, 12 of 8 on AVX2: more chains than FMA latency x ports, so the ports
 *    are the limit); 2 FLOPs per lane per FMA; best of FMA_PASSES.
 *  - int8 dot peak (AVX512-VNNI only): the same with 16 vpdpbusd chains, 2 ops per byte product:
 *    what the quantized dots (Q8_0, K-quants) are built on, so their pp is held against it.
 * All run in a forked child, so the buffer never counts in the benchmark's peak RSS; the ISA
 * kernels are compiled per function (target attributes) and chosen with the CPU's flags.
 * bench_read_bw measures the bandwidth alone, the same way (next to each tg test: a shared
 * machine's bandwidth moves during a run). */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define BW_PASSES 9   /* passes 1, 4, 7: one stream per thread; 2, 5, 8: two; 3, 6, 9: four */
#define FMA_PASSES 3
#define FMA_ITERS 20000000L   /* per thread and pass: ~0.1 s at 3 GHz */

/* ---- kernels ------------------------------------------------------------------------------ */

__attribute__((target("avx512f"))) static uint64_t read_avx512(const uint8_t *p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 256 <= n; i += 256) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + i + 128)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + i + 192)));
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    return (uint64_t)_mm512_reduce_add_epi64(a0);
}

/* The two halves of p[0..n) side by side (n a multiple of 256). */
__attribute__((target("avx512f"))) static uint64_t read2_avx512(const uint8_t *p, size_t n) {
    const uint8_t *q = p + n / 2;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n / 2; i += 128) {
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + i + 64)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(q + i)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(q + i + 64)));
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    return (uint64_t)_mm512_reduce_add_epi64(a0);
}

/* The four quarters of p[0..n) side by side, each asked for READ_PF bytes ahead (n a multiple
 * of 256): the single-token Q8_0 kernel's pattern, which reads faster than one or two plain
 * streams on the Zen 5 machine this was written on (pr outside the repo, 2 threads, 1 GiB in
 * huge pages, 7 passes a run, medians of 7 runs: 61-73 GB/s against 47-56 for one stream and
 * 50-61 for two). Its prefetches run up to READ_PF bytes past a quarter's end: a prefetch
 * does not fault. */
#define READ_PF 2048
__attribute__((target("avx512f"))) static uint64_t read4_avx512(const uint8_t *p, size_t n) {
    const size_t q = n / 4;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= q; i += 64) {
        for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(p + k * q + i + READ_PF), _MM_HINT_T0);
        a0 = _mm512_add_epi64(a0, _mm512_load_si512((const void *)(p + i)));
        a1 = _mm512_add_epi64(a1, _mm512_load_si512((const void *)(p + q + i)));
        a2 = _mm512_add_epi64(a2, _mm512_load_si512((const void *)(p + 2 * q + i)));
        a3 = _mm512_add_epi64(a3, _mm512_load_si512((const void *)(p + 3 * q + i)));
    }
    a0 = _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3));
    return (uint64_t)_mm512_reduce_add_epi64(a0);
}

__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a0);
    return l[0] + l[1] + l[2] + l[3];
}

__attribute__((target("avx2"))) static uint64_t read2_avx2(const uint8_t *p, size_t n) {
    const uint8_t *q = p + n / 2;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= n / 2; i += 64) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(q + i)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(q + i + 32)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a0);
    return l[0] + l[1] + l[2] + l[3];
}

__attribute__((target("avx2"))) static uint64_t read4_avx2(const uint8_t *p, size_t n) {
    const size_t q = n / 4;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 64 <= q; i += 64) {
        for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(p + k * q + i + READ_PF), _MM_HINT_T0);
        for (int h = 0; h < 64; h += 32) {
            a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i + h)));
            a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + q + i + h)));
            a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + 2 * q + i + h)));
            a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + 3 * q + i + h)));
        }
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, a0);
    return l[0] + l[1] + l[2] + l[3];
}

static uint64_t read_scalar(const uint8_t *p, size_t n) {
    const uint64_t *q = (const uint64_t *)(const void *)p;
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (size_t i = 0; i + 4 <= n / 8; i += 4) {
        a0 += q[i];
        a1 += q[i + 1];
        a2 += q[i + 2];
        a3 += q[i + 3];
    }
    return a0 + a1 + a2 + a3;
}

/* The chains are named variables, not an array: an array would live in memory at -O2. */
#define FMA_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

__attribute__((target("avx512f"))) static float fma_avx512(long iters) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
#define DECL(k) __m512 a##k = _mm512_set1_ps(1.0f + (float)(k));
#define STEP(k) a##k = _mm512_fmadd_ps(a##k, m, c);
#define SUM(k) s = _mm512_add_ps(s, a##k);
    FMA_CHAINS(DECL) DECL(12) DECL(13) DECL(14) DECL(15)
    for (long it = 0; it < iters; it++) { FMA_CHAINS(STEP) STEP(12) STEP(13) STEP(14) STEP(15) }
    __m512 s = _mm512_setzero_ps();
    FMA_CHAINS(SUM) SUM(12) SUM(13) SUM(14) SUM(15)
#undef DECL
#undef STEP
#undef SUM
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_avx2(long iters) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
#define DECL(k) __m256 a##k = _mm256_set1_ps(1.0f + (float)(k));
#define STEP(k) a##k = _mm256_fmadd_ps(a##k, m, c);
#define SUM(k) s = _mm256_add_ps(s, a##k);
    FMA_CHAINS(DECL)
    for (long it = 0; it < iters; it++) { FMA_CHAINS(STEP) }
    __m256 s = _mm256_setzero_ps();
    FMA_CHAINS(SUM)
#undef DECL
#undef STEP
#undef SUM
    float l[8];
    _mm256_storeu_ps(l, s);
    return l[0] + l[1] + l[2] + l[3] + l[4] + l[5] + l[6] + l[7];
}

static float fma_scalar(long iters) {
    float a[8];
    for (int k = 0; k < 8; k++) a[k] = 1.0f + (float)k;
    for (long it = 0; it < iters; it++)
        for (int k = 0; k < 8; k++) a[k] = a[k] * 0.999999f + 1e-7f;
    return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

/* int8 dot peak: 16 independent vpdpbusd chains (64 byte products each). */
__attribute__((target("avx512f,avx512vnni"))) static int32_t dp_avx512(long iters) {
    const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
#define DECL(k) __m512i a##k = _mm512_set1_epi32(k);
#define STEP(k) a##k = _mm512_dpbusd_epi32(a##k, u, v);
#define SUM(k) s = _mm512_add_epi32(s, a##k);
    FMA_CHAINS(DECL) DECL(12) DECL(13) DECL(14) DECL(15)
    for (long it = 0; it < iters; it++) { FMA_CHAINS(STEP) STEP(12) STEP(13) STEP(14) STEP(15) }
    __m512i s = _mm512_setzero_si512();
    FMA_CHAINS(SUM) SUM(12) SUM(13) SUM(14) SUM(15)
#undef DECL
#undef STEP
#undef SUM
    return _mm512_reduce_add_epi32(s);
}

typedef enum hw_isa { HW_SCALAR, HW_AVX2, HW_AVX512 } hw_isa;

static hw_isa hw_detect(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return HW_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return HW_AVX2;
    return HW_SCALAR;
}

/* FLOPs one thread does in fma_*(iters). */
static double fma_flops(hw_isa isa, long iters) {
    const double per_iter = isa == HW_AVX512 ? 16 * 16 * 2 : isa == HW_AVX2 ? 12 * 8 * 2 : 8 * 2;
    return per_iter * (double)iters;
}

/* ---- threads ------------------------------------------------------------------------------ */

typedef struct hw_shared {
    hw_isa            isa;
    int               n_threads;
    uint8_t          *buf;
    size_t            bytes;          /* per pass, all threads */
    long              fma_iters;
    pthread_barrier_t bar;
    volatile uint64_t sink;           /* keeps the results alive */
    double            best_read_s, best_fma_s, best_dp_s;
    double            best_pat_s[3];  /* the best pass of each pattern (1, 2, 4 streams) */
    bool              vnni;           /* measure the int8 dot peak too */
    bool              bw_only;        /* the read passes alone */
} hw_shared;

typedef struct hw_thread {
    hw_shared *s;
    int        ith;
} hw_thread;

/* Pass pattern: 1, 2 or 4 streams a thread. */
static void hw_read_slice(hw_shared *s, int ith, int streams) {
    const size_t per = s->bytes / (size_t)s->n_threads / 256 * 256;
    const uint8_t *p = s->buf + per * (size_t)ith;
    const uint64_t v = s->isa == HW_AVX512 ? (streams == 4   ? read4_avx512(p, per)
                                              : streams == 2 ? read2_avx512(p, per)
                                                             : read_avx512(p, per))
                       : s->isa == HW_AVX2 ? (streams == 4   ? read4_avx2(p, per)
                                              : streams == 2 ? read2_avx2(p, per)
                                                             : read_avx2(p, per))
                                           : read_scalar(p, per);
    if (v == 42) s->sink = v;
}

static void *hw_worker(void *arg) {
    const hw_thread *t = arg;
    hw_shared *s = t->s;
    const size_t per = s->bytes / (size_t)s->n_threads / 256 * 256;
    memset(s->buf + per * (size_t)t->ith, 1 + t->ith, per);   /* first touch by the reading thread */
    for (int pass = 0; pass <= BW_PASSES; pass++) {           /* pass 0 is untimed */
        pthread_barrier_wait(&s->bar);
        const uint64_t t0 = bench_now_ns();
        const int pat = (pass + 2) % 3;   /* passes 1, 4, 7: pattern 0 (one stream) */
        hw_read_slice(s, t->ith, 1 << pat);
        pthread_barrier_wait(&s->bar);
        const double dt = (double)(bench_now_ns() - t0) * 1e-9;
        if (t->ith == 0 && pass > 0 && (s->best_read_s == 0 || dt < s->best_read_s)) s->best_read_s = dt;
        if (t->ith == 0 && pass > 0 && (s->best_pat_s[pat] == 0 || dt < s->best_pat_s[pat])) s->best_pat_s[pat] = dt;
    }
    for (int pass = 0; !s->bw_only && pass < FMA_PASSES; pass++) {
        pthread_barrier_wait(&s->bar);
        const uint64_t t0 = bench_now_ns();
        const float v = s->isa == HW_AVX512 ? fma_avx512(s->fma_iters) : s->isa == HW_AVX2 ? fma_avx2(s->fma_iters)
                                                                                           : fma_scalar(s->fma_iters);
        pthread_barrier_wait(&s->bar);
        const double dt = (double)(bench_now_ns() - t0) * 1e-9;
        if (v == 42.0f) s->sink = 1;
        if (t->ith == 0 && (s->best_fma_s == 0 || dt < s->best_fma_s)) s->best_fma_s = dt;
    }
    for (int pass = 0; s->vnni && !s->bw_only && pass < FMA_PASSES; pass++) {
        pthread_barrier_wait(&s->bar);
        const uint64_t t0 = bench_now_ns();
        const int32_t v = dp_avx512(s->fma_iters);
        pthread_barrier_wait(&s->bar);
        const double dt = (double)(bench_now_ns() - t0) * 1e-9;
        if (v == 42) s->sink = 1;
        if (t->ith == 0 && (s->best_dp_s == 0 || dt < s->best_dp_s)) s->best_dp_s = dt;
    }
    return NULL;
}

/* Runs in the child: fills out (the bandwidth alone when bw_only), returns 0 on success. */
static int hw_measure_here(int n_threads, size_t bw_bytes, bool bw_only, bench_hw *out) {
    hw_shared s = { .isa = hw_detect(), .n_threads = n_threads, .bytes = bw_bytes, .fma_iters = FMA_ITERS,
                    .bw_only = bw_only };
    s.vnni = s.isa == HW_AVX512 && __builtin_cpu_supports("avx512vnni");
    hw_thread th[BENCH_MAX_LIST * 8];
    pthread_t tid[BENCH_MAX_LIST * 8];
    if (n_threads < 1 || n_threads > (int)(sizeof th / sizeof th[0])) return 1;
    /* in huge pages where the kernel gives them, as the weights are (gguf_read.c, alloc.c):
     * the same TLB reach as the matmuls' reads */
    const size_t huge = (size_t)2 << 20, alloc = (bw_bytes + huge - 1) / huge * huge;
    s.buf = aligned_alloc(huge, alloc);
#ifdef MADV_HUGEPAGE
    if (s.buf) (void)madvise(s.buf, alloc, MADV_HUGEPAGE);
#endif
    if (!s.buf || pthread_barrier_init(&s.bar, NULL, (unsigned)n_threads)) return 1;
    int started = 0;
    for (; started < n_threads; started++) {
        th[started] = (hw_thread){ .s = &s, .ith = started };
        if (pthread_create(&tid[started], NULL, hw_worker, &th[started])) break;
    }
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    free(s.buf);
    pthread_barrier_destroy(&s.bar);
    if (started < n_threads || s.best_read_s <= 0 || (!bw_only && s.best_fma_s <= 0)) return 1;
    const size_t per = bw_bytes / (size_t)n_threads / 256 * 256;
    out->read_gbs = (double)(per * (size_t)n_threads) / s.best_read_s * 1e-9;
    for (int i = 0; i < 3; i++)
        out->read_gbs_by[i] = s.best_pat_s[i] > 0 ? (double)(per * (size_t)n_threads) / s.best_pat_s[i] * 1e-9 : 0;
    if (bw_only) return 0;
    out->fma_gflops = fma_flops(s.isa, s.fma_iters) * n_threads / s.best_fma_s * 1e-9;
    snprintf(out->fma_isa, sizeof out->fma_isa, "%s", s.isa == HW_AVX512 ? "avx512" : s.isa == HW_AVX2 ? "avx2" : "scalar");
    /* 16 chains x 64 byte products x 2 ops per iteration */
    out->int8_gops = s.best_dp_s > 0 ? 16.0 * 64 * 2 * (double)s.fma_iters * n_threads / s.best_dp_s * 1e-9 : 0;
    return 0;
}

static void hw_measure_child(int n_threads, size_t bw_bytes, bool bw_only, bench_hw *out) {
    *out = (bench_hw){ .n_threads = n_threads, .bw_bytes = bw_bytes };
    int fd[2];
    if (pipe(fd)) return;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return;
    }
    if (pid == 0) {
        close(fd[0]);
        bench_hw r = *out;
        const int rc = hw_measure_here(n_threads, bw_bytes, bw_only, &r);
        if (rc == 0 && write(fd[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(1);
        _exit(rc);
    }
    close(fd[1]);
    bench_hw r;
    const ssize_t got = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got == (ssize_t)sizeof r && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        *out = r;
        out->ok = true;
    }
}

void bench_hw_measure(int n_threads, size_t bw_bytes, bench_hw *out) {
    hw_measure_child(n_threads, bw_bytes, false, out);
}

double bench_read_bw(int n_threads, size_t bw_bytes, double by[3]) {
    bench_hw r;
    hw_measure_child(n_threads, bw_bytes, true, &r);
    for (int i = 0; i < 3; i++) by[i] = r.ok ? r.read_gbs_by[i] : 0;
    return r.ok ? r.read_gbs : 0;
}

/* ---- process and CPU facts ---------------------------------------------------------------- */

static uint64_t status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            sscanf(line + kl + 1, "%llu", &v);
            break;
        }
    fclose(f);
    return (uint64_t)v * 1024u;
}

uint64_t bench_rss(void) { return status_kib("VmRSS"); }
uint64_t bench_rss_peak(void) { return status_kib("VmHWM"); }

void bench_cpu_name(char *buf, size_t len) {
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(buf, len, "%.*s", (int)strcspn(v, "\n"), v);
        break;
    }
    fclose(f);
}
