/* gemm_q5k_avx512.c — tiles of Q5_K weight rows × Q8_K activation rows (tensor.h, gemm),
 * each element bit-identical to the AVX-512 table's Q5_K dot (dot_avx512.c dot_q5_K).
 *
 * That dot keeps, per output element, a 16-lane float accumulator and an 8-lane one: per
 * block, lane L of the exact integer sum Σ_j sc·Σ q·y over the four dword-lanes L of each
 * 64-element chunk j (lanes 0-7: sub-block 2j, lanes 8-15: sub-block 2j+1) is FMAed with
 * d·yd, and lane k of the exact min sum m[k]·(bs[2k] + bs[2k+1]) with dmin·yd; at the end
 * hsum512(acc) − hsum(accm). Here every element keeps those same lanes (so the float chains
 * and the final sums are the dot's, operation for operation); what is shared is the work
 * around them:
 *  - a panel of up to 16 rows is decoded once per call into a stack buffer: each block's 256
 *    five-bit values as bytes in the dot's chunk order, the scales as the int16 vectors the
 *    dot's madd uses, the mins duplicated for two tokens' bsums, d and dmin as floats;
 *  - a register tile of 2 rows × 4 tokens shares every panel load over 4 tokens and every
 *    activation load over 2 rows; the integer lanes come from vpmaddubsw (u8 × s8, no
 *    saturation: 31·127·2 < 2^15) then vpdpwssd with the scales (exact, any order), and the
 *    min lanes of two tokens come from one 512-bit vpmaddwd.
 * Any n (a multiple of 256; rows longer than PMAX/2 blocks take the dot), any row and token
 * counts, unaligned rows and strides. */
#include "tensor/x86/simd_x86.h"

#define QR 16     /* rows per panel at most */
#define QT 4      /* tokens per register tile (rows: 8 / QT) */
#define PMAX 320  /* panel entries (row-blocks) in the stack buffer: 220 KB */

/* One block of one row, decoded (704 bytes, a multiple of 64). */
typedef struct q5k_pent {
    uint8_t q[4][64];   /* chunk j: sub-block 2j's 32 values (0..31), then sub-block 2j+1's */
    int16_t s[4][32];   /* chunk j: sc[2j] in int16 lanes 0-15, sc[2j+1] in 16-31 */
    float   m[16];      /* the 8 mins as floats, twice (one copy per token of a pair) */
    float   d[16];      /* d in every lane: d·yd is then one vmulps with a broadcast yd */
    float   dmin;
    uint8_t pad[60];
} q5k_pent;

/* One block of a token tile's activation fields, prepared once per panel (320 bytes). */
typedef struct q5k_tblk {
    float bsp[QT / 2][16];   /* pair u: bs[2k] + bs[2k+1] of tokens 2u (lanes 0-7), 2u+1 (8-15) */
    float ydp[QT / 2][16];   /* pair u: yd of token 2u in lanes 0-7, of token 2u+1 in 8-15 */
    float yd[QT];
    float pad[16 - QT];
} q5k_tblk;

static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* dot_avx512.c's horizontal sum of 16 lanes: the two halves added, then x86_hsum_ps. */
static inline float hsum512(__m512 v) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    return x86_hsum_ps(s);
}

/* Decodes the nb blocks of the Q5_K row a into p[0..nb). */
static void pack_row(q5k_pent *p, const uint8_t *a, int64_t nb) {
    const __m512i idx = _mm512_set_epi16(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i lo4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++, p++, a += Q5_K_BYTES) {
        uint64_t sc, m;
        rt_k4_scales_u64(a + Q5_K_SCALES, &sc, &m);
        const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        for (int j = 0; j < 4; j++)
            _mm512_store_si512(p->s[j], _mm512_permutexvar_epi16(_mm512_add_epi16(idx, _mm512_set1_epi16((short)(2 * j))), s16));
        const __m256 m8 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m)));
        _mm512_store_ps(p->m, _mm512_insertf32x8(_mm512_castps256_ps512(m8), m8, 1));
        const __m256i h256 = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QH));
        const __m512i h = join256(h256, _mm256_srli_epi16(h256, 1));   /* bit 2j serves both halves */
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a + Q5_K_QS + 32 * j));
            const __m512i v = _mm512_and_si512(join256(q, _mm256_srli_epi16(q, 4)), lo4);
            const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(h, 2 * j), one);
            _mm512_store_si512(p->q[j], _mm512_or_si512(v, _mm512_slli_epi16(hb, 4)));
        }
        _mm512_store_ps(p->d, _mm512_set1_ps(x86_f16(a)));
        p->dmin = x86_f16(a + Q5_K_DMIN);
    }
}

/* Two 16-lane sums a, b -> [hsum halves of a | of b]: lane i of a 256-bit half is
 * v[i] + v[i + 8], the first step of hsum512 (the same additions, two elements at once). */
static inline __m512 fold_halves(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
}

/* Two vectors of two 8-lane sums each -> the 4 sums' 128-bit steps of x86_hsum_ps
 * (lo128 + hi128), one per 128-bit quarter: [a.0, a.1, b.0, b.1]. */
static inline __m512 fold_quarters(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
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
    const __m512 c0 = fold_quarters(fold_halves(a[0], a[1]), fold_halves(a[2], a[3]));
    const __m512 c1 = fold_quarters(fold_halves(a[4], a[5]), fold_halves(a[6], a[7]));
    return _mm512_sub_ps(fold_last(c0, c1), fold_last(fold_quarters(m[0], m[1]), fold_quarters(m[2], m[3])));
}

static inline int finish_lane(int e) { return e < 4 ? 4 * e : 4 * (e - 4) + 2; }

/* R rows (pr[r], nb blocks each) × T tokens at x, R·T ≤ 8; y[t * ldy + r] for r < nr. */
static inline __attribute__((always_inline)) void tile(int R, int T, int64_t nb, const q5k_pent *const *pr,
                                                        const q5k_tblk *tb, const uint8_t *x, size_t xs, float *y,
                                                        int64_t ldy, int nr) {
    __m512 acc[4][4], accm[4][2];   /* sized for the tail tiles too */
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
        _Pragma("GCC unroll 2")
        for (int u = 0; u < (T + 1) / 2; u++) accm[r][u] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *xb[4];
        __m512i is[4][4];
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) xb[t] = x + t * xs + (size_t)b * Q8_K_BYTES;
        _Pragma("GCC unroll 4")
        for (int j = 0; j < 4; j++) {
            __m512i yv[4];
            _Pragma("GCC unroll 4")
            for (int t = 0; t < T; t++) yv[t] = _mm512_loadu_si512(xb[t] + Q8_K_QS + 64 * j);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m512i w = _mm512_load_si512(pr[r][b].q[j]), sc = _mm512_load_si512(pr[r][b].s[j]);
                _Pragma("GCC unroll 4")
                for (int t = 0; t < T; t++) {
                    const __m512i p16 = _mm512_maddubs_epi16(w, yv[t]);
                    is[r][t] = j ? _mm512_dpwssd_epi32(is[r][t], p16, sc) : _mm512_madd_epi16(p16, sc);
                }
            }
        }
        const q5k_tblk *tk = tb + b;
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {   /* d·yd: the dot's float product, in every lane */
            const __m512 yd = _mm512_set1_ps(tk->yd[t]);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++)
                acc[r][t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(pr[r][b].d), yd), _mm512_cvtepi32_ps(is[r][t]),
                                            acc[r][t]);
        }
        /* min lanes m[k]·(bs[2k] + bs[2k+1]): exact integers below 2^24, so the float product
         * is the dot's converted vpmaddwd lane */
        _Pragma("GCC unroll 2")
        for (int u = 0; u < (T + 1) / 2; u++) {
            const __m512 bsp = _mm512_load_ps(tk->bsp[u]), ydp = _mm512_load_ps(tk->ydp[u]);
            _Pragma("GCC unroll 4")
            for (int r = 0; r < R; r++) {
                const __m512 dm = _mm512_mul_ps(_mm512_set1_ps(pr[r][b].dmin), ydp);
                accm[r][u] = _mm512_fmadd_ps(dm, _mm512_mul_ps(_mm512_load_ps(pr[r][b].m), bsp), accm[r][u]);
            }
        }
    }
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
        const __mmask8 rows = (__mmask8)((1u << (nr < R ? nr : R)) - 1);
        _Pragma("GCC unroll 4")
        for (int t = 0; t < T; t++) {
            __m128 q = _mm512_extractf32x4_ps(g, (t * R) / 4);
            if ((t * R) % 4) q = _mm_movehl_ps(q, q);
            _mm_mask_storeu_ps(y + t * ldy, rows, q);
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

/* The activation fields of tokens x, x + xs, ... (T of them; the missing repeat the last). */
static void prep_tokens(q5k_tblk *tb, int64_t nb, const uint8_t *x, size_t xs, int T) {
    const __m512i ones = _mm512_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++, tb++) {
        const uint8_t *xb[QT];
        for (int t = 0; t < QT; t++) xb[t] = x + (size_t)(t < T ? t : T - 1) * xs + (size_t)b * Q8_K_BYTES;
        for (int t = 0; t < QT; t++) tb->yd[t] = rd_f32(xb[t]);
        for (int u = 0; u < QT / 2; u++) {
            const __m512i bs = join256(_mm256_loadu_si256((const __m256i *)(xb[2 * u] + Q8_K_BSUMS)),
                                       _mm256_loadu_si256((const __m256i *)(xb[2 * u + 1] + Q8_K_BSUMS)));
            _mm512_store_ps(tb->bsp[u], _mm512_cvtepi32_ps(_mm512_madd_epi16(bs, ones)));
            _mm512_store_ps(tb->ydp[u], _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(tb->yd[2 * u])),
                                                           _mm256_set1_ps(tb->yd[2 * u + 1]), 1));
        }
    }
}

/* The tokens of the call against the decoded panel pk of nr rows (nb blocks each), RT rows
 * per register tile; tb: room for nb token blocks. */
static void panel_tokens(const q5k_pent *pk, int nr, int64_t nb, q5k_tblk *tb, const uint8_t *X, size_t xs,
                         int64_t n_tok, float *y, int64_t ldy) {
    enum { RT = 8 / QT };
    for (int64_t t = 0; t < n_tok; t += QT) {
        const int T = n_tok - t < QT ? (int)(n_tok - t) : QT;
        prep_tokens(tb, nb, X + t * xs, xs, T);
        for (int r = 0; r < nr; r += RT) {
            const q5k_pent *pr[RT];
            for (int i = 0; i < RT; i++) pr[i] = pk + (r + i < nr ? r + i : nr - 1) * nb;
            float *yr = y + t * ldy + r;
            switch (T) {
            case QT: tile(RT, QT, nb, pr, tb, X + t * xs, xs, yr, ldy, nr - r); break;
            case 3: tile(RT, 3, nb, pr, tb, X + t * xs, xs, yr, ldy, nr - r); break;
            case 2: tile(RT, 2, nb, pr, tb, X + t * xs, xs, yr, ldy, nr - r); break;
            default: tile(RT, 1, nb, pr, tb, X + t * xs, xs, yr, ldy, nr - r); break;
            }
        }
    }
}

static void gemm_q5_K(int64_t n, const void *w, size_t ws, int64_t n_rows, const void *x, size_t xs, int64_t n_tok,
                      float *y, int64_t ldy) {
    const tensor_vec_dot_fn dot = rt_dot_q5_K_avx512;
    const uint8_t *W = w, *X = x;
    const int64_t nb = n / QK_K;
    if (nb > PMAX / (8 / QT)) {   /* no room for one register tile's rows: the dot */
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t r = 0; r < n_rows; r++) y[t * ldy + r] = dot(n, W + r * ws, X + t * xs);
        return;
    }
    const int64_t fit = (PMAX / nb) & ~(int64_t)(8 / QT - 1);
    const int pr = fit < QR ? (int)fit : QR;
    _Alignas(64) q5k_pent pk[PMAX];
    _Alignas(64) q5k_tblk tb[PMAX / (8 / QT)];
    for (int64_t r0 = 0; r0 < n_rows; r0 += pr) {
        const int nr = n_rows - r0 < pr ? (int)(n_rows - r0) : pr;
        for (int r = 0; r < nr; r++) pack_row(pk + r * nb, W + (size_t)(r0 + r) * ws, nb);
        panel_tokens(pk, nr, nb, tb, X, xs, n_tok, y + r0, ldy);
    }
}

void rt_fill_gemm_q5k_avx512(tensor_kernels *k) {
    k->gemm[GGUF_T_Q5_K] = gemm_q5_K;
}
