/* gemm_q5k_avx512.c — tiles of Q5_K weight rows × Q8_K activation rows (tensor.h, gemm),
 * each element bit-identical to the AVX-512 table's Q5_K dot (dot_avx512.c rt_dot_q5_K_avx512).
 *
 * That dot keeps, per output element, a 16-lane float accumulator and an 8-lane one: per
 * block, lane L of the exact integer sum Σ_j sc·Σ q·y over the four dword-lanes L of each
 * 64-element chunk j (lanes 0-7: sub-block 2j, lanes 8-15: sub-block 2j+1) is FMAed with
 * d·yd, and lane k of the exact min sum m[k]·(bs[2k] + bs[2k+1]) with dmin·yd; at the end
 * hsum512(acc) − x86_hsum_ps(accm). Here every element keeps those same lanes (so the float chains
 * and the final sums are the dot's, operation for operation); what is shared is the work
 * around them:
 *  - a panel of up to 32 rows is decoded once per call into a stack buffer: each block's 256
 *    five-bit values as bytes in the dot's chunk order, the scales as int16 pairs, the mins
 *    duplicated for two tokens' bsums, d and dmin as floats;
 *  - the activations of 4 tokens are copied once per panel into a 64-byte aligned buffer (a
 *    Q8_K block's 256 values sit at 4 + 292·b: every 64-byte load would straddle two lines);
 *  - a register tile of 2 rows × 4 tokens shares every panel load over 4 tokens and every
 *    activation load over 2 rows. The integer lanes: vpdpbusd sums each dword (4 products),
 *    two chunks are packed into the int16 halves of a lane and one vpdpwssd applies both
 *    scales (tile has the arithmetic; exact); the min lanes of two tokens come from one
 *    512-bit vpmaddwd; the 8 elements' final sums are done side by side (finish8).
 * Any n (a multiple of 256; file rows longer than PMAX/2 blocks take the dot, packed ones go
 * in pieces; longer than YMAXB blocks, unaligned activation loads), any row and token counts,
 * unaligned rows and strides. */
#include "tensor/x86/reduce_avx512.h"
#include "tensor/x86/simd_x86.h"

/* 128-bit quarter k of v (k a constant once the callers' loops are unrolled; the switch keeps
 * the intrinsic's immediate a literal for builds that do not unroll, e.g. -O1 and clang). */
static inline __m128 quarter(__m512 v, int k) {
    switch (k) {
    case 0: return _mm512_castps512_ps128(v);
    case 1: return _mm512_extractf32x4_ps(v, 1);
    case 2: return _mm512_extractf32x4_ps(v, 2);
    default: return _mm512_extractf32x4_ps(v, 3);
    }
}

#define QR 32     /* rows per panel at most (each panel reads every token once) */
#define QT 4      /* tokens per register tile (rows: 8 / QT) */
#define PMAX 384  /* panel entries (row-blocks) in the stack buffer: 216 KB */
#define YMAXB 64  /* blocks of the aligned activation buffer: 64 KB */

/* One block of one row, decoded (576 bytes, a multiple of 64). */
typedef struct q5k_pent {
    uint8_t q[4][64];   /* chunk j: sub-block 2j's 32 values (0..31), then 2j+1's; ×4 for odd j */
    int16_t s[2][32];   /* chunk pair p, lane L: the scales of chunks 2p (low), 2p+1 (high) */
    int32_t c[16];      /* lane L: −16384 × (the scales of chunks 0 and 2): the packing bias */
    int16_t m[32];      /* m0, m0, m1, m1, ..., m7, m7, twice (one copy per token of a pair) */
    float   d, dmin;
    uint8_t pad[56];
} q5k_pent;
_Static_assert(sizeof(q5k_pent) % 64 == 0, "panel entries are loaded aligned");

static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* dot_avx512.c's horizontal sum of 16 lanes: the two halves added, then x86_hsum_ps. */
static inline float hsum512(__m512 v) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return x86_hsum_ps(s);
}

/* The entry's scales, biases, mins, d and dmin from its 8 scales and 8 mins (byte k: sub-block
 * k's, rt_k4_scales_u64) and its fp16 d and dmin at d and dm. */
static inline void pent_scales(q5k_pent *p, uint64_t sc, uint64_t m, const uint8_t *d, const uint8_t *dm) {
    const __m512i cidx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i sidx = _mm512_set_epi16(3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1,
                                          2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0);
    /* lane l takes sub-block 2j + (l >= 8) of chunk j: s[q] pairs (sc[4q+h], sc[4q+2+h]),
     * c = −16384 · (sc[h] + sc[4+h]) */
    const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    _mm512_store_si512(p->s[0], _mm512_permutexvar_epi16(sidx, s16));
    _mm512_store_si512(p->s[1], _mm512_permutexvar_epi16(_mm512_add_epi16(sidx, _mm512_set1_epi16(4)), s16));
    const __m512i s32 = _mm512_cvtepu8_epi32(_mm_cvtsi64_si128((long long)sc));
    const __m512i c0 = _mm512_add_epi32(_mm512_permutexvar_epi32(cidx, s32),
                                        _mm512_permutexvar_epi32(_mm512_add_epi32(cidx, _mm512_set1_epi32(4)), s32));
    _mm512_store_si512(p->c, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(c0, 14)));
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m));
    const __m256i m16 = _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8));
    _mm512_store_si512(p->m, join256(m16, m16));
    p->d = x86_f16(d);
    p->dmin = x86_f16(dm);
}

/* Decodes the nb blocks of the Q5_K row a into p[0..nb). */
static void pack_row(q5k_pent *p, const uint8_t *a, int64_t nb) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++, p++, a += Q5_K_BYTES) {
        uint64_t sc, m;
        rt_k4_scales_u64(a + Q5_K_SCALES, &sc, &m);
        pent_scales(p, sc, m, a, a + Q5_K_DMIN);
        const __m256i h256 = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QH));
        const __m512i h = join256(h256, _mm256_srli_epi16(h256, 1));   /* bit 2j serves both halves */
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QS + 32 * j));
            const __m512i v = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), lo4);
            const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(h, 2 * j), one);
            const __m512i q5 = _mm512_or_si512(v, _mm512_slli_epi16(hb, 4));
            _mm512_store_si512(p->q[j], j % 2 ? _mm512_slli_epi16(q5, 2) : q5);   /* 4q <= 124 */
        }
    }
}

/* v[0..16) as a 16 x 16 matrix of 32-bit words, transposed in place (word k of v[r] <-> word
 * r of v[k]). */
static inline __attribute__((always_inline)) void transpose16x16(__m512i v[16]) {
    __m512i t[16];
    _Pragma("GCC unroll 8")
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_epi32(v[k], v[k + 1]);
        t[k + 1] = _mm512_unpackhi_epi32(v[k], v[k + 1]);
    }
    _Pragma("GCC unroll 4")
    for (int k = 0; k < 16; k += 4) {
        v[k] = _mm512_unpacklo_epi64(t[k], t[k + 2]);
        v[k + 1] = _mm512_unpackhi_epi64(t[k], t[k + 2]);
        v[k + 2] = _mm512_unpacklo_epi64(t[k + 1], t[k + 3]);
        v[k + 3] = _mm512_unpackhi_epi64(t[k + 1], t[k + 3]);
    }
    /* v[4g + i]: 128-bit lane l holds words 4l..4l+3 of rows 4g..4g+3, column 4l + i */
    _Pragma("GCC unroll 4")
    for (int i = 0; i < 4; i++) {
        const __m512i a0 = _mm512_shuffle_i32x4(v[i], v[4 + i], 0x88), a1 = _mm512_shuffle_i32x4(v[i], v[4 + i], 0xDD);
        const __m512i b0 = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0x88);
        const __m512i b1 = _mm512_shuffle_i32x4(v[8 + i], v[12 + i], 0xDD);
        t[i] = _mm512_shuffle_i32x4(a0, b0, 0x88);
        t[8 + i] = _mm512_shuffle_i32x4(a0, b0, 0xDD);
        t[4 + i] = _mm512_shuffle_i32x4(a1, b1, 0x88);
        t[12 + i] = _mm512_shuffle_i32x4(a1, b1, 0xDD);
    }
    _Pragma("GCC unroll 16")
    for (int k = 0; k < 16; k++) v[k] = t[k];
}

/* Decodes the nb blocks of the 16 rows of the packed group g (tensor.h tensor_q5_K_r16_pack)
 * into p[r·nb + b]: the same entries as pack_row of the rows they were. A chunk's 64 qs bytes
 * (4 of each row) become each row's 5-bit values as the single-token kernel makes them (a
 * masked byte add of the fifth bits), then one transposition of 32-bit words gives each row
 * its chunk: sub-block 2j's elements 4u.. in word u, 2j+1's in word 8 + u. */
static void pack_group_r16(q5k_pent *p, const uint8_t *g, int64_t nb) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F), c16 = _mm512_set1_epi8(16);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *h = g + (size_t)b * TENSOR_Q5R16_BLOCK;
        /* the 16 rows' scales and mins unpacked side by side, then each row's 8 as the bytes of
         * two 32-bit lanes (gathering them byte by byte took 1.3x this decode's time) */
        __m512i sv[2], mv[2];
        x86_r16_k4_scales(h + Q5R16_SCALES, sv, mv);
        _Alignas(64) uint32_t sw[4][16];
        _Pragma("GCC unroll 4")
        for (int k = 0; k < 4; k++) {
            const __m512i v = k < 2 ? sv[k] : mv[k - 2];
            const __m512i w = _mm512_or_si512(
                _mm512_or_si512(x86_u8_lane_epi32(v, 0), _mm512_slli_epi32(x86_u8_lane_epi32(v, 1), 8)),
                _mm512_or_si512(_mm512_slli_epi32(x86_u8_lane_epi32(v, 2), 16), _mm512_slli_epi32(x86_u8_lane_epi32(v, 3), 24)));
            _mm512_store_si512(sw[k], w);
        }
        for (int r = 0; r < TENSOR_R16_ROWS; r++)
            pent_scales(p + r * nb + b, sw[0][r] | (uint64_t)sw[1][r] << 32, sw[2][r] | (uint64_t)sw[3][r] << 32,
                        h + Q5R16_D + 2 * r, h + Q5R16_DMIN + 2 * r);
        for (int j = 0; j < 4; j++) {
            __m512i v[16];
            _Pragma("GCC unroll 8")
            for (int u = 0; u < 8; u++) {
                const __m512i w = _mm512_loadu_si512(h + Q5R16_QS + 64 * (8 * j + u));
                uint64_t mlo, mhi;
                memcpy(&mlo, h + Q5R16_QH + 16 * (8 * j + u), 8);
                memcpy(&mhi, h + Q5R16_QH + 16 * (8 * j + u) + 8, 8);
                const __m512i lo = _mm512_and_si512(w, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), lo4);
                v[u] = _mm512_mask_add_epi8(lo, (__mmask64)mlo, lo, c16);
                v[8 + u] = _mm512_mask_add_epi8(hi, (__mmask64)mhi, hi, c16);
                if (j % 2) {   /* 4q <= 124, as pack_row */
                    v[u] = _mm512_slli_epi16(v[u], 2);
                    v[8 + u] = _mm512_slli_epi16(v[8 + u], 2);
                }
            }
            transpose16x16(v);
            _Pragma("GCC unroll 16")
            for (int r = 0; r < 16; r++) _mm512_store_si512(p[r * nb + b].q[j], v[r]);
        }
    }
}

/* The last two steps of x86_hsum_ps on each quarter of c (lanes 0 of the result's 128-bit
 * pairs) and of e (lanes 2): (x0 + x2) + (x1 + x3). */
static inline __m512 fold_last(__m512 c, __m512 e) {
    const __m512 d = _mm512_add_ps(_mm512_shuffle_ps(c, e, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(c, e, _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(d, _mm512_movehdup_ps(d));
}

/* dot_q5_K's ending, hsum512(acc) − x86_hsum_ps(accm), for the 8 elements of a full tile
 * at once: the same additions on the same operands, shuffled side by side. a[e] is element
 * e's 16-lane sum, m[k] holds elements 2k and 2k+1's 8-lane min sums in its two halves.
 * Element e ends in lane L(e) = 4e (e < 4) or 4(e − 4) + 2; idx gathers them for the stores. */
static inline __attribute__((always_inline)) __m512 finish8(const __m512 a[8], const __m512 m[4]) {
    const __m512 c0 = x86_red_quarters(x86_red_halves(a[0], a[1]), x86_red_halves(a[2], a[3]));
    const __m512 c1 = x86_red_quarters(x86_red_halves(a[4], a[5]), x86_red_halves(a[6], a[7]));
    return _mm512_sub_ps(fold_last(c0, c1), fold_last(x86_red_quarters(m[0], m[1]), x86_red_quarters(m[2], m[3])));
}

static inline int finish_lane(int e) { return e < 4 ? 4 * e : 4 * (e - 4) + 2; }

/* dot_q5_K's ending for the R × T elements of a tile (acc[r][t], accm[r][t / 2]'s half
 * t % 2): y[t * ldy + r] for r < nr; a full tile side by side (finish8), else one by one. */
static inline __attribute__((always_inline)) void store_tile(int R, int T, __m512 acc[4][4], __m512 accm[4][2],
                                                              float *y, int64_t ldy, int nr) {
    if (R * T == 8) {   /* element e = r·T + t; the stores take lanes t·R .. t·R + R − 1 */
        __m512 a[8], m[4];
        int32_t idx[16] = { 0 };
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) {
                a[r * T + t] = acc[r][t];
                idx[t * R + r] = finish_lane(r * T + t);
            }
            _Pragma("GCC unroll 2")
            for (int u = 0; u < T / 2; u++) m[(r * T) / 2 + u] = accm[r][u];
        }
        const __m512 g = _mm512_permutexvar_ps(_mm512_loadu_si512(idx), finish8(a, m));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* plain stores: masked ones are slow on some cores */
            __m128 q = quarter(g, (t * R) / 4);
            if ((t * R) % 4) q = _mm_movehl_ps(q, q);
            if (nr >= R && R == 2) _mm_storel_pi((__m64 *)(y + t * ldy), q);
            else if (nr >= R && R == 4) _mm_storeu_ps(y + t * ldy, q);
            else {
                float f[4];
                _mm_storeu_ps(f, q);
                for (int r = 0; r < nr && r < R; r++) y[t * ldy + r] = f[r];
            }
        }
        return;
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        if (r >= nr) break;
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            const __m512 am = accm[r][t / 2];
            const __m256 mm = t % 2 ? _mm512_extractf32x8_ps(am, 1) : _mm512_castps512_ps256(am);
            y[t * ldy + r] = hsum512(acc[r][t]) - x86_hsum_ps(mm);
        }
    }
}

/* The chains of a panel of 16 rows × X86_PARK_TOKENS tokens between pieces of their blocks
 * (gemm_q5_K_r16, simd_x86.h X86_PARK_IN): row r, token t's acc, and the accm its token pair
 * shares. A tile reaches it through q5k_parking's r (its first row) and t (its first token,
 * even). */
typedef struct q5k_park {
    __m512 acc[TENSOR_R16_ROWS][X86_PARK_TOKENS];
    __m512 accm[TENSOR_R16_ROWS][X86_PARK_TOKENS / 2];
} q5k_park;

typedef struct q5k_parking {
    q5k_park *park;   /* NULL: the tile runs over the whole row */
    int       phase, r;
    int64_t   t;
} q5k_parking;

/* R rows (pr[r], nb blocks each) × T tokens at x, R·T ≤ 8; y[t * ldy + r] for r < nr, or the
 * chains parked (pk). ya, when not NULL: the tokens' quants, copied aligned
 * ([block][token][256]). */
static inline __attribute__((always_inline)) void tile(int R, int T, int64_t nb, const q5k_pent *const *pr,
                                                        const uint8_t *x, size_t xs, float *y, int64_t ldy, int nr,
                                                        int8_t (*ya)[QT][256], q5k_parking pk) {
    __m512 acc[4][4], accm[4][2];   /* sized for the tail tiles too */
    const bool in = pk.park && (pk.phase & X86_PARK_IN);
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = in ? pk.park->acc[pk.r + r][pk.t + t] : _mm512_setzero_ps();
        _Pragma("GCC unroll 2")
        for (int u = 0; u < (T + 1) / 2; u++) accm[r][u] = in ? pk.park->accm[pk.r + r][pk.t / 2 + u] : _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb[4];
        __m512i is[4][4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const __m512i c = _mm512_load_si512(pr[r][b].c);
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) is[r][t] = c;
        }
        /* Chunks 2q, 2q+1: D0, D1 = their dword sums (|D| <= 4·31·128 = 15872) by vpdpbusd,
         * chunk 2q+1's values stored ×4 (<= 124): (4·D1 + 1) << 14, then + D0, is
         * D1·2^16 + (D0 + 16384), so the high int16 is D1 and the low one D0 + 16384, in
         * [512, 32256]; one vpdpwssd adds sc0·D0 + sc1·D1 + 16384·sc0, the bias that c (the
         * start value) takes off. All exact: each lane ends at the dot's integer sum. */
        const __m512i one = _mm512_set1_epi32(1);
        _Pragma("GCC unroll 2")
        for (int q = 0; q < 2; q++) {
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m512i w0 = _mm512_load_si512(pr[r][b].q[2 * q]), w1 = _mm512_load_si512(pr[r][b].q[2 * q + 1]);
                const __m512i sc = _mm512_load_si512(pr[r][b].s[q]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    const int8_t *yq = ya ? ya[b][t] + 128 * q : (const int8_t *)xb[t] + Q8_K_QS + 128 * q;
                    __m512i h = _mm512_dpbusd_epi32(one, w1, _mm512_loadu_si512(yq + 64));
                    h = _mm512_dpbusd_epi32(_mm512_slli_epi32(h, 14), w0, _mm512_loadu_si512(yq));
                    is[r][t] = _mm512_dpwssd_epi32(is[r][t], h, sc);
                }
            }
        }
        /* d·yd, the dot's float product, for every (r, t): one 4-lane product per row */
        _Alignas(16) float dyd[4][4];
        const __m128 ydv = _mm_setr_ps(rd_f32(xb[0]), rd_f32(xb[T > 1 ? 1 : 0]), rd_f32(xb[T > 2 ? 2 : 0]),
                                       rd_f32(xb[T > 3 ? 3 : 0]));
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) _mm_store_ps(dyd[r], _mm_mul_ps(_mm_set1_ps(pr[r][b].d), ydv));
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(_mm512_set1_ps(dyd[r][t]), _mm512_cvtepi32_ps(is[r][t]), acc[r][t]);
        }
        _Pragma("GCC unroll 2")
        for (int u = 0; u < (T + 1) / 2; u++) {   /* tokens 2u, 2u+1 in the two halves */
            const int t0 = 2 * u, t1 = 2 * u + 1 < T ? 2 * u + 1 : 2 * u;
            const __m512i bs = join256(_mm256_loadu_si256((const __m256i *)(xb[t0] + Q8_K_BSUMS)),
                                       _mm256_loadu_si256((const __m256i *)(xb[t1] + Q8_K_BSUMS)));
            const __m512 yd = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(rd_f32(xb[t0]))),
                                                 _mm256_set1_ps(rd_f32(xb[t1])), 1);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m512i ml = _mm512_madd_epi16(bs, _mm512_load_si512(pr[r][b].m));
                const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(pr[r][b].dmin), yd);
                accm[r][u] = _mm512_fmadd_ps(dm, _mm512_cvtepi32_ps(ml), accm[r][u]);
            }
        }
    }
    if (pk.park && (pk.phase & X86_PARK_OUT)) {
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) pk.park->acc[pk.r + r][pk.t + t] = acc[r][t];
            _Pragma("GCC unroll 2")
            for (int u = 0; u < (T + 1) / 2; u++) pk.park->accm[pk.r + r][pk.t / 2 + u] = accm[r][u];
        }
        return;
    }
    store_tile(R, T, acc, accm, y, ldy, nr);
}

/* The tokens of the call against the decoded panel pk of nr rows (nb blocks each), RT rows
 * per register tile; park: NULL, or the panel's parked chains (phase as tile's). */
static void panel_tokens(const q5k_pent *pk, int nr, int64_t nb, const uint8_t *X, size_t xs, int64_t n_tok,
                         float *y, int64_t ldy, q5k_park *park, int phase) {
    enum { RT = 8 / QT };
    _Alignas(64) int8_t ya[YMAXB][QT][256];
    const bool aligned = nb <= YMAXB;
    int64_t t = 0;
    for (; t + QT <= n_tok; t += QT) {
        for (int64_t b = 0; aligned && b < nb; b++)
            for (int u = 0; u < QT; u++) memcpy(ya[b][u], X + (t + u) * xs + b * Q8_K_BYTES + Q8_K_QS, 256);
        for (int r = 0; r < nr; r += RT) {
            const q5k_pent *pr[RT];
            for (int i = 0; i < RT; i++) pr[i] = pk + (r + i < nr ? r + i : nr - 1) * nb;
            tile(RT, QT, nb, pr, X + t * xs, xs, y + t * ldy + r, ldy, nr - r, aligned ? ya : NULL,
                 (q5k_parking){ park, phase, r, t });
        }
    }
    if (t == n_tok) return;
    for (int r = 0; r < nr; r += RT) {
        const q5k_pent *pr[RT];
        for (int i = 0; i < RT; i++) pr[i] = pk + (r + i < nr ? r + i : nr - 1) * nb;
        float *yr = y + t * ldy + r;
        const q5k_parking pt = { park, phase, r, t };
        switch (n_tok - t) {
        case 3: tile(RT, 3, nb, pr, X + t * xs, xs, yr, ldy, nr - r, NULL, pt); break;
        case 2: tile(RT, 2, nb, pr, X + t * xs, xs, yr, ldy, nr - r, NULL, pt); break;
        default: tile(RT, 1, nb, pr, X + t * xs, xs, yr, ldy, nr - r, NULL, pt); break;
        }
    }
}

static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const tensor_vec_dot_fn dot = rt_dot_q5_K_avx512;
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    if (nb > PMAX / (8 / QT)) {   /* no room for one register tile's rows: the dot */
        x86_gemm_by_dot(dot, n, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    const int64_t fit = (PMAX / nb) & ~(int64_t)(8 / QT - 1);
    const int pr = fit < QR ? (int)fit : QR;
    _Alignas(64) q5k_pent pk[PMAX];
    for (int64_t r0 = 0; r0 < n_rows; r0 += pr) {
        const int nr = n_rows - r0 < pr ? (int)(n_rows - r0) : pr;
        for (int r = 0; r < nr; r++) pack_row(pk + r * nb, W + (size_t)(r0 + r) * ws, nb);
        panel_tokens(pk, nr, nb, X, xs, n_tok, y + r0, ldy, NULL, 0);
    }
}

/* Rows of one group too long for the panel buffer: their blocks in pieces of PMAX / 16,
 * X86_PARK_TOKENS tokens at a time, the tiles' chains parked between the pieces (the same
 * bits). Before, such rows were unpacked 16 at a time for gemm_q5_K. 256 x 14336, 256 tokens,
 * 2 threads (/tmp/s16/mmn.c outside the repo, best of 5, a busy minute): 9.0 -> 7.1 ms (8192:
 * 4.2 -> 3.5); recur-bench pp512 -r 1 on a Q5_K llama3-8b (recur-gguf synth, zero weights)
 * 27.7 -> 29.1 t/s, where ik_llama.cpp's llama-bench reads 51.3: at these widths the gemm's
 * panels hold 16 rows (32 below 12 blocks) and the activations of a pass over 512 tokens no
 * longer fit L2 (4096 elements: 402 GFLOP/s, 6144: 300, in the same program). Pieces of
 * 256 tokens instead of 64 (fewer decodes of a panel): no clear difference (247 against 212
 * GFLOP/s at 14336, the other way round a minute earlier). */
static void gemm_q5_K_r16_pieces(int64_t nb, const uint8_t *W, size_t ws, int64_t n_rows, const uint8_t *X, size_t xs,
                                 int64_t n_tok, float *y, int64_t ldy) {
    const int64_t pb = PMAX / TENSOR_R16_ROWS;
    _Alignas(64) q5k_pent pk[PMAX];
    _Alignas(64) q5k_park park;   /* 96 KB */
    for (int64_t r0 = 0; r0 < n_rows; r0 += TENSOR_R16_ROWS)
        for (int64_t t0 = 0; t0 < n_tok; t0 += X86_PARK_TOKENS) {
            const int64_t nt = n_tok - t0 < X86_PARK_TOKENS ? n_tok - t0 : X86_PARK_TOKENS;
            for (int64_t b0 = 0; b0 < nb; b0 += pb) {
                const int64_t len = nb - b0 < pb ? nb - b0 : pb;
                const int phase = (b0 > 0 ? X86_PARK_IN : 0) | (b0 + len < nb ? X86_PARK_OUT : 0);
                pack_group_r16(pk, W + (size_t)r0 * ws + (size_t)b0 * TENSOR_Q5R16_BLOCK, len);
                panel_tokens(pk, TENSOR_R16_ROWS, len, X + t0 * xs + (size_t)b0 * Q8_K_BYTES, xs, nt, y + r0 + t0 * ldy,
                             ldy, &park, phase);
            }
        }
}

/* gemm_q5_K over rows packed 16 to a group (tensor.h gemm_q5_K_r16): panels of whole groups
 * decoded from the packed bytes (pack_group_r16), the same entries and so the same tiles and
 * bits; rows too long for a panel of 16 in pieces. */
static void gemm_q5_K_r16(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs,
                          int64_t n_tok, float *y, int64_t ldy) {
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    if (nb > PMAX / TENSOR_R16_ROWS) {
        gemm_q5_K_r16_pieces(nb, W, ws, n_rows, X, xs, n_tok, y, ldy);
        return;
    }
    const int pr = PMAX / nb >= QR ? QR : TENSOR_R16_ROWS;
    _Alignas(64) q5k_pent pk[PMAX];
    for (int64_t r0 = 0; r0 < n_rows; r0 += pr) {
        const int nr = n_rows - r0 < pr ? (int)(n_rows - r0) : pr;
        for (int r = 0; r < nr; r += TENSOR_R16_ROWS) pack_group_r16(pk + r * nb, W + (size_t)(r0 + r) * ws, nb);
        panel_tokens(pk, nr, nb, X, xs, n_tok, y + r0, ldy, NULL, 0);
    }
}

void rt_fill_gemm_q5k_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q5_K] = gemm_q5_K;
    k->gemm_q5_K_r16 = gemm_q5_K_r16;
}
