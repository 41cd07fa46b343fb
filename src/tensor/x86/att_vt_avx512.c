/* att_vt_avx512.c — AVX-512 weighted sums of attention over a transposed V (tensor.h
 * att_wsumt4).
 *
 * With V transposed (row d holds output d of every position), the reference's 16 lanes
 * (lane p % 16 taking position p) are one 16-position vector: a chunk of 16 positions is one
 * FMA per (row, output), each lane's chain in increasing position, and rt_hsum16_ggml at the
 * end (x86_reduce16, 16 accumulators at once). A tile holds R rows x ND outputs (R·ND <= 16
 * accumulators, 4 x 4 for a full group); in the last 16 positions each row's lanes past its
 * context are masked off (no operation). Positions without a row hold +0 in vt: a finite
 * probability times +0 added to a lane leaves it as it was (a lane that starts at +0 never
 * becomes -0), which is the reference's skipping.
 *
 * The positions go in chunks of WT_CH, every tile of a block of WT_DB outputs over a chunk
 * before the next chunk, the tiles' accumulators parked on the stack between chunks, so a
 * chunk's probabilities stay in L1 while the tiles pass and only vt's rows stream (the AVX2
 * version's plan, att_vt_avx2.c). Measured on the Zen 5 machine class (/tmp/s32/atd.c outside
 * the repo: one thread, 4 rows, head dim 128, 4349-4352 positions, one KV head called
 * again and again as a prompt's groups do, FLOP a TSC cycle, 5 runs): att_wsum4 33-35,
 * this 58-65 (the AVX2 table's 8-lane version here: slower than att_wsum4 in the model);
 * recur-bench -p 512 -n 0 -d 4096, qwen3-0.6b Q8_0, 2 threads, 3 alternating runs:
 * 98.1 -> 112.8 t/s (medians). */
#include "tensor/tensor_impl.h"
#include "tensor/x86/reduce_avx512.h"
#include "tensor/x86/simd_x86.h"

#define WT_CH 512   /* positions a chunk (a multiple of 16) */
#define WT_DB 128   /* outputs a block: 32 tiles of 4 outputs parked at most (32 KB) */
_Static_assert(WT_CH % 16 == 0, "a chunk starts a run of 16 lanes");

static inline __m512 ld_f16x16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}

/* Positions [k0, kc) that every row sees, then [kc, k1) where row i takes only those below
 * n_ctx[i], into a[ND·i + j] (row i, output j). */
static inline __attribute__((always_inline)) void wt_pass(int R, int ND, int64_t k0, int64_t kc, int64_t k1,
                                                           const uint16_t *const vr[16], const float *const pr[4],
                                                           const int32_t n_ctx[4], __m512 a[16]) {
    int64_t k = k0;
    for (; k < kc; k += 16) {
        __m512 vv[16];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < ND; j++) vv[j] = ld_f16x16(vr[j] + k);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < R; i++) {
            __m512 pv = _mm512_loadu_ps(pr[i] + k);
            __asm__("" : "+v"(pv));   /* one load for the ND outputs (gcc would fold it into each FMA) */
            _Pragma("GCC unroll 16")
            for (int j = 0; j < ND; j++) a[ND * i + j] = _mm512_fmadd_ps(vv[j], pv, a[ND * i + j]);
        }
    }
    for (; k < k1; k += 16) {
        __m512 vv[16];
        _Pragma("GCC unroll 16")
        for (int j = 0; j < ND; j++) vv[j] = ld_f16x16(vr[j] + k);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < R; i++) {
            const int64_t rem = n_ctx[i] - k;
            const __mmask16 m = rem >= 16 ? (__mmask16)0xFFFF : rem <= 0 ? (__mmask16)0 : (__mmask16)((1u << rem) - 1u);
            const __m512 pv = _mm512_maskz_loadu_ps(m, pr[i] + k);
            _Pragma("GCC unroll 16")
            for (int j = 0; j < ND; j++) a[ND * i + j] = _mm512_mask3_fmadd_ps(vv[j], pv, a[ND * i + j], m);
        }
    }
}

static inline __attribute__((always_inline)) void wt_rows(int R, int ND, int64_t dv, const uint16_t *vt, int64_t ldv,
                                                           const float *const pr[4], const int32_t n_ctx[4],
                                                           float *const out[4]) {
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < R; i++) n_min = n_ctx[i] < n_min ? n_ctx[i] : n_min, n_max = n_ctx[i] > n_max ? n_ctx[i] : n_max;
    const int64_t nc = n_min & ~15, ne = ((int64_t)n_max + 15) & ~15;
    _Alignas(64) __m512 park[WT_DB / 4][16];
    for (int64_t d_lo = 0; d_lo < dv; d_lo += WT_DB) {
        const int64_t nt = ((dv - d_lo < WT_DB ? dv - d_lo : WT_DB)) / ND;   /* tiles of this block */
        for (int64_t c0 = 0; c0 == 0 || c0 < ne; c0 += WT_CH) {   /* one chunk even when empty: it zeroes the lanes */
            const int64_t c1 = c0 + WT_CH < ne ? c0 + WT_CH : ne, cc = nc < c0 ? c0 : nc > c1 ? c1 : nc;
            for (int64_t t = 0; t < nt; t++) {
                const uint16_t *vr[16];
                _Pragma("GCC unroll 16")
                for (int j = 0; j < ND; j++) vr[j] = vt + (d_lo + ND * t + j) * ldv;
                __m512 a[16];
                _Pragma("GCC unroll 16")
                for (int m = 0; m < R * ND; m++) a[m] = c0 == 0 ? _mm512_setzero_ps() : park[t][m];
                wt_pass(R, ND, c0, cc, c1, vr, pr, n_ctx, a);
                _Pragma("GCC unroll 16")
                for (int m = 0; m < R * ND; m++) park[t][m] = a[m];
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            /* accumulator f = ND·i + j (row i, output j) goes in slot 4(f % 4) + f / 4 of the
             * network, so its sum lands at r[f] */
            __m512 a[16];
            _Pragma("GCC unroll 16")
            for (int f = 0; f < 16; f++) a[4 * (f % 4) + f / 4] = f < R * ND ? park[t][f] : _mm512_setzero_ps();
            float r[16];
            _mm512_storeu_ps(r, x86_reduce16(a));
            for (int f = 0; f < R * ND; f++) out[f / ND][d_lo + ND * t + f % ND] = r[f];
        }
    }
}

static void att_wsumt4(int nr, int64_t dv, const uint16_t *vt, int64_t ldv, const float *const pr[4],
                       const int32_t n_ctx[4], float *const out[4]) {
    switch (nr) {
    case 1: if (dv % 16 == 0) { wt_rows(1, 16, dv, vt, ldv, pr, n_ctx, out); return; } break;
    case 2: if (dv % 8 == 0) { wt_rows(2, 8, dv, vt, ldv, pr, n_ctx, out); return; } break;
    case 3: if (dv % 4 == 0) { wt_rows(3, 4, dv, vt, ldv, pr, n_ctx, out); return; } break;
    default: if (dv % 4 == 0) { wt_rows(4, 4, dv, vt, ldv, pr, n_ctx, out); return; } break;
    }
    rt_att_wsumt4(nr, dv, vt, ldv, pr, n_ctx, out);
}

void rt_fill_att_vt_avx512(tensor_kernels *k) {
    k->att_wsumt4 = att_wsumt4;
    /* att_wsum4 is faster here, so more rows must share the transposition: recur-bench -p N
     * -n 0 -d 4096, 2 threads, 3 alternating runs, medians, through vt against att_wsum4:
     * qwen3-0.6b Q8_0 (2 query heads a KV head, dim 128) 8 tokens 91.2 / 131.5 t/s, 16
     * 115.2 / 150.9, 24 136.3 / 168.9, 32 155.5 / 178.6, 64 186.7 / 195.8, 128 207.8 / 201.1;
     * qwen35-0.8b Q8_0 (4 a KV head, dim 256) 32 tokens 339.3 / 357.3, 64 417.3 / 415.0 */
    k->att_wsumt4_min_rows = 256;
}
