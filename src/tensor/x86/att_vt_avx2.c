/* att_vt_avx2.c — AVX2 weighted sums of attention over a transposed V (tensor.h att_wsumt4).
 *
 * With V transposed (row d holds output d of every position), the reference's 16 lanes
 * (lane p % 16 taking position p) are one 16-position dot product per output: lanes 0..7 of
 * a chunk of 16 positions in one vector, 8..15 in another, each lane's chain in increasing
 * position, then x86_hsum_ps(lo + hi), which is rt_hsum16_ggml. A tile of R rows x ND outputs
 * (R·ND <= 8 accumulators) runs the lo lanes in one pass and the hi lanes in another, as the
 * scores tile does; positions past a row's context in the last chunk of 16 are blended out,
 * so they get no operation. Positions without a row hold +0 in vt, and a finite probability
 * times +0 added to a lane leaves it as it was (a lane that starts at +0 never becomes -0),
 * which is what the reference's skipping gives.
 *
 * The positions go in chunks of WT_CH, every tile of a block of WT_DB outputs over a chunk
 * before the next chunk, the tiles' accumulators parked on the stack between chunks: a
 * chunk's probabilities (4 rows x 2 KB) stay in L1 while the tiles pass, and only vt's rows
 * stream from L2. Over the whole context at once the rows' probabilities came from L2 on
 * every pass: one thread, 4 rows, head dim 128, 4224-4352 positions (/tmp/s31/wst.c outside
 * the repo, 3 runs each): 11.2-12.8 FLOP a TSC cycle whole, 19.4-21.3 in chunks of 512,
 * 21.4-22.6 of 1024, against 8.1-13.6 for att_wsum4 over the rows as they are. */
#include "tensor/tensor_impl.h"
#include "tensor/x86/simd_x86.h"

#define WT_CH 512   /* positions a chunk (a multiple of 16) */
#define WT_DB 128   /* outputs a block: 64 tiles of 2 outputs parked at most (32 KB) */
_Static_assert(WT_CH % 16 == 0, "a chunk starts a run of 16 lanes");

static inline __m256 ld_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Lanes h..h+7 of positions [k0, kc) that every row sees, then of [kc, k1) where each row
 * takes only the positions below its n_ctx, into a[ND·i + j] (row i, output j). */
static inline __attribute__((always_inline)) void wt_pass(int R, int ND, int64_t k0, int64_t kc, int64_t k1,
                                                           const uint16_t *const vr[8], const float *const pr[4],
                                                           const int32_t n_ctx[4], int h, __m256 a[8]) {
    int64_t k = k0 + h;
    for (; k < kc; k += 16) {
        __m256 vv[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < ND; j++) vv[j] = ld_f16x8(vr[j] + k);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < R; i++) {
            __m256 pv = _mm256_loadu_ps(pr[i] + k);
            __asm__("" : "+x"(pv));   /* one load for the ND outputs (gcc would fold it into each FMA) */
            _Pragma("GCC unroll 8")
            for (int j = 0; j < ND; j++) a[ND * i + j] = _mm256_fmadd_ps(vv[j], pv, a[ND * i + j]);
        }
    }
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (; k < k1; k += 16) {
        __m256 vv[8];
        _Pragma("GCC unroll 8")
        for (int j = 0; j < ND; j++) vv[j] = ld_f16x8(vr[j] + k);
        _Pragma("GCC unroll 4")
        for (int i = 0; i < R; i++) {
            const __m256 pv = _mm256_loadu_ps(pr[i] + k);
            const __m256 m = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)(n_ctx[i] - k)), iota));
            _Pragma("GCC unroll 8")
            for (int j = 0; j < ND; j++)
                a[ND * i + j] = _mm256_blendv_ps(a[ND * i + j], _mm256_fmadd_ps(vv[j], pv, a[ND * i + j]), m);
        }
    }
}

static inline __attribute__((always_inline)) void wt_rows(int R, int ND, int64_t dv, const uint16_t *vt, int64_t ldv,
                                                           const float *const pr[4], const int32_t n_ctx[4],
                                                           float *const out[4]) {
    int32_t n_min = n_ctx[0], n_max = n_ctx[0];
    for (int i = 1; i < R; i++) n_min = n_ctx[i] < n_min ? n_ctx[i] : n_min, n_max = n_ctx[i] > n_max ? n_ctx[i] : n_max;
    const int64_t nc = n_min & ~15, ne = ((int64_t)n_max + 15) & ~15;
    _Alignas(32) __m256 park[WT_DB / 2][2][8];
    for (int64_t d_lo = 0; d_lo < dv; d_lo += WT_DB) {
        const int64_t nt = ((dv - d_lo < WT_DB ? dv - d_lo : WT_DB)) / ND;   /* tiles of this block */
        for (int64_t c0 = 0; c0 == 0 || c0 < ne; c0 += WT_CH) {   /* one chunk even when empty: it zeroes the lanes */
            const int64_t c1 = c0 + WT_CH < ne ? c0 + WT_CH : ne, cc = nc < c0 ? c0 : nc > c1 ? c1 : nc;
            for (int64_t t = 0; t < nt; t++) {
                const uint16_t *vr[8];
                _Pragma("GCC unroll 8")
                for (int j = 0; j < ND; j++) vr[j] = vt + (d_lo + ND * t + j) * ldv;
                for (int h = 0; h < 2; h++) {
                    __m256 a[8];
                    _Pragma("GCC unroll 8")
                    for (int m = 0; m < 8; m++) a[m] = c0 == 0 ? _mm256_setzero_ps() : park[t][h][m];
                    wt_pass(R, ND, c0, cc, c1, vr, pr, n_ctx, 8 * h, a);
                    _Pragma("GCC unroll 8")
                    for (int m = 0; m < 8; m++) park[t][h][m] = a[m];
                }
            }
        }
        for (int64_t t = 0; t < nt; t++) {
            __m256 v[8];
            _Pragma("GCC unroll 8")
            for (int m = 0; m < 8; m++) v[m] = _mm256_add_ps(park[t][0][m], park[t][1][m]);
            float o[8];
            _mm256_storeu_ps(o, x86_hsum8_ps(v));
            for (int m = 0; m < R * ND; m++) out[m / ND][d_lo + ND * t + m % ND] = o[m];
        }
    }
}

static void att_wsumt4(int nr, int64_t dv, const uint16_t *vt, int64_t ldv, const float *const pr[4],
                       const int32_t n_ctx[4], float *const out[4]) {
    if (dv % 8) {
        rt_att_wsumt4(nr, dv, vt, ldv, pr, n_ctx, out);
        return;
    }
    switch (nr) {
    case 1: wt_rows(1, 8, dv, vt, ldv, pr, n_ctx, out); break;
    case 2: wt_rows(2, 4, dv, vt, ldv, pr, n_ctx, out); break;
    case 3: wt_rows(3, 2, dv, vt, ldv, pr, n_ctx, out); break;
    default: wt_rows(4, 2, dv, vt, ldv, pr, n_ctx, out); break;
    }
}

/* 8 rows x 8 outputs at a time: an 8 x 8 transposition of 16-bit values in 24 unpacks (pairs,
 * then quads, then halves); the edges as the reference does them. */
static void f16_cols(int32_t n, int64_t dv, const uint16_t *const *rows, uint16_t *dst, int64_t ld) {
    const int32_t n8 = n & ~7;
    const int64_t d8 = dv & ~7;
    for (int32_t j = 0; j < n8; j += 8)
        for (int64_t d = 0; d < d8; d += 8) {
            __m128i r[8], a[8], b[8];
            for (int i = 0; i < 8; i++)
                r[i] = rows[j + i] ? _mm_loadu_si128((const __m128i *)(rows[j + i] + d)) : _mm_setzero_si128();
            for (int i = 0; i < 4; i++) {   /* a[2i]: rows 2i, 2i+1 interleaved, outputs 0-3; a[2i+1]: 4-7 */
                a[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
                a[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
            }
            for (int h = 0; h < 2; h++)   /* b[4h + ...]: rows 0-3 then 4-7 of outputs 4h.. */
                for (int i = 0; i < 2; i++) {
                    b[4 * h + 2 * i] = _mm_unpacklo_epi32(a[4 * i + h], a[4 * i + 2 + h]);
                    b[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(a[4 * i + h], a[4 * i + 2 + h]);
                }
            /* b[4h + 2i + c] holds rows 4i..4i+3 of outputs 4h + 2c and 4h + 2c + 1 */
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < 2; c++) {
                    const __m128i lo = b[4 * h + c], hi = b[4 * h + 2 + c];
                    _mm_storeu_si128((__m128i *)(dst + (d + 4 * h + 2 * c) * ld + j), _mm_unpacklo_epi64(lo, hi));
                    _mm_storeu_si128((__m128i *)(dst + (d + 4 * h + 2 * c + 1) * ld + j), _mm_unpackhi_epi64(lo, hi));
                }
        }
    for (int32_t j = 0; j < n8; j++)   /* outputs past the last 8 */
        for (int64_t d = d8; d < dv; d++) dst[d * ld + j] = rows[j] ? rows[j][d] : 0;
    rt_f16_cols(n - n8, dv, rows + n8, dst + n8, ld);
}

void rt_fill_att_vt_avx2(tensor_kernels *k) {
    k->att_wsumt4 = att_wsumt4;
    /* recur-bench -p N -n 0 -d 4096, qwen3-0.6b Q8_0 (2 query heads a KV head), 2 threads,
     * RECUR_ISA=avx2 on the Zen 5 machine class, 3 alternating runs, medians, through vt
     * against att_wsum4: 32 tokens 96.1 / 95.1 t/s, 64 tokens 106.4 / 99.4 */
    k->att_wsumt4_min_rows = 64;
    k->f16_cols = f16_cols;
}
