/* gguf_map.c — how a mapped file's pages are mapped: all at once, in 2 MiB pages where the
 * kernel can, and dropped where the caller will not read them again.
 *
 * Decode streams every weight once a token, so the mapping's page size shows in its speed:
 * a 2 MiB page is one TLB entry where 4 KiB pages are 512, and the hardware prefetchers stop
 * at every 4 KiB page boundary. A file mapping gets 2 MiB pages only where the page cache
 * holds the file in 2 MiB folios, which depends on how the file got there (written by a
 * download, read by a program that mapped it without the hint: small folios; read through a
 * mapping with the MADV_HUGEPAGE hint, gguf_open's: 2 MiB folios where the filesystem has
 * large folios). So gguf_map_all, where most of the file is cached in small pieces, drops
 * the file's cached pages (those no other process maps) and reads them again through the
 * hinted mapping. The weights stay in place, one copy in the page cache; the cost is one
 * read of the file, once: the page cache keeps the 2 MiB folios for later loads.
 * Measured on this machine (Linux 6.18, ext4), qwen3-0.6b Q8_0 just copied (cp; sync), so
 * cached in small folios: none of its 625 MB mapped in 2 MiB pages without this, 623 MB
 * with it (the read again took 0.3 s); recur-bench -p 0 -n 64, 6 rounds, a fresh copy before
 * every run, the order alternating: 4 KiB pages 56-98 t/s, 2 MiB pages 67-102, 1.18x median
 * (2 MiB won 5). */
#include "gguf/gguf_internal.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAP_HUGE_BYTES ((uintptr_t)2 << 20)

#ifdef MADV_POPULATE_READ

/* Whether transparent huge pages may back a hinted mapping ("always" or "madvise"). */
static bool thp_enabled(void) {
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return false;
    char line[128] = { 0 };
    const bool ok = fgets(line, sizeof line, f) && !strstr(line, "[never]");
    fclose(f);
    return ok;
}

/* Bytes of [lo, hi) the process maps in 2 MiB pages of a file (smaps' FilePmdMapped of the
 * areas that overlap it: the file's own), or -1 when smaps cannot be read. */
static int64_t pmd_mapped(uintptr_t lo, uintptr_t hi) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[512];
    int64_t sum = 0;
    bool in = false;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) in = a < hi && b > lo;
        else if (in && sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) sum += (int64_t)kb << 10;
    }
    fclose(f);
    return sum;
}

/* Drops the cached pages of [lo, hi) (the mapping's, and the page cache's where nobody else
 * maps them) and maps them in again, read through the hinted mapping. */
static void map_again(const gguf_file *g, uintptr_t lo, uintptr_t hi) {
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    (void)posix_fadvise(g->fd, (off_t)(lo - (uintptr_t)g->base), (off_t)(hi - lo), POSIX_FADV_DONTNEED);
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_READ);
}

/* After the first population: where under 90 % of the file's whole 2 MiB pages are mapped
 * so, map them again; where none is, first try one page (a kernel or filesystem without
 * large folios would be read again for nothing). */
static void map_huge(const gguf_file *g) {
    const uintptr_t lo = ((uintptr_t)g->base + MAP_HUGE_BYTES - 1) & ~(MAP_HUGE_BYTES - 1);
    const uintptr_t hi = ((uintptr_t)g->base + (uintptr_t)g->size) & ~(MAP_HUGE_BYTES - 1);
    if (hi <= lo || !thp_enabled()) return;
    const int64_t want = (int64_t)(hi - lo), have = pmd_mapped(lo, hi);
    if (have < 0 || have >= want / 10 * 9) return;
    if (have == 0) {
        map_again(g, lo, lo + MAP_HUGE_BYTES);
        if (pmd_mapped(lo, hi) <= 0) return;
    }
    map_again(g, lo, hi);
}
#endif

bool gguf_mapped(const gguf_file *g) { return g && g->mapped; }

void gguf_map_all(const gguf_file *g) {
    if (!g || !g->mapped) return;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)(uintptr_t)g->base, (size_t)g->size, MADV_POPULATE_READ) == 0) {
        map_huge(g);
        return;
    }
#endif
    volatile uint8_t sink = 0;   /* kernels before 5.14: touch every page */
    const long ps = sysconf(_SC_PAGESIZE);
    for (uint64_t o = 0; o < g->size; o += ps > 0 ? (uint64_t)ps : 4096) sink ^= g->base[o];
    (void)sink;
}

void gguf_drop_range(const gguf_file *g, const void *p, uint64_t n) {
    if (!g || !g->mapped || !p) return;
    const long ps = sysconf(_SC_PAGESIZE);
    const uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096, lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + (uintptr_t)n) & ~(page - 1), end = (uintptr_t)g->base + (uintptr_t)g->size;
    if ((uintptr_t)p < (uintptr_t)g->base || (uintptr_t)p + n > end || hi <= lo) return;
#ifdef MADV_NOHUGEPAGE
    /* else khugepaged, folding a 2 MiB page's small mappings back into one, maps the range again */
    (void)madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE);
#endif
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}
