/* gemv_q40_avx512.c — many Q4_0 weight rows × one Q8_0 activation row (tensor.h, gemv): the
 * single-token matmul of token generation.
 *
 * Every y[r] performs exactly the AVX-512 table's dot_q4_0 (dot_avx512.c): per block pair,
 * the 16 exact int32 lanes (lanes 0-7: block 2i, 8-15: block 2i+1), converted to float and
 * added with one FMA scaled by dup2(dw·dx of block 2i, of block 2i+1) into one 16-lane
 * accumulator; hsum512; then an odd last block added as the 8-lane hsum of its scaled lanes.
 * Only where the activation side comes from differs: its bytes, its correction −8·Σ4 y (so
 * dpbusd starting from it gives the dot's dpbusd(q, y) − dpbusd(8, y), the same integer) and
 * its scales as floats are computed once per call into a stack panel, and two rows run side
 * by side (two FMA chains), with the rows that follow in address order prefetched as in
 * gemv_avx512.c (interleaved streams are followed badly by the hardware prefetchers).
 *
 * Where the time goes: from L2 (one thread, 512 rows of 1024, Zen 5) the kernel runs at 25-33
 * GB/s, not memory's pace: it is bound by its vector work, of which the weights' unpacking is
 * most (taking the scales out entirely, a test outside the repo, ran 1.3x faster). So the
 * quants come as broadcast loads and the scales from one load and a word permutation
 * (nib_pair, scale_pair) instead of 128-bit loads put together and two scalar loads
 * broadcast: 1.05-1.08x from L2; recur-bench tg128 qwen3-0.6b Q4_0, 3 alternating process
 * pairs, 89.0-92.5 -> 93.4-104.7 t/s. Four rows side by side instead of two ran slower
 * (0.9x). Fewer operations a byte needed the rows packed 16 to a group, which this kernel's
 * order allows (its 16 lanes a row accumulate independently): gemv_q4_0_r16 below, which the
 * AVX-512 table's models take (model/repack.c); this one stays for the file's layout
 * (RECUR_NO_REPACK). */
#include "tensor/x86/simd_x86.h"

#define PF_DIST 8192   /* bytes of software prefetch ahead of the rows being read */
#define XMAXP 256      /* block pairs in the activation panel (n <= 16384; longer rows: the dot) */

typedef struct q4v_x {
    __m512i y, c;   /* the activation bytes of the pair; −8·Σ4 y */
    __m512  dx;     /* the two scales as floats (lanes 0-7, 8-15) */
} q4v_x;

static inline __m256i bcast_h(const uint8_t *p) { return _mm256_set1_epi16((short)rd_u16(p)); }

static inline __m512 dup2_h(const uint8_t *p0, const uint8_t *p1) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(bcast_h(p0), _mm256_castsi256_si128(bcast_h(p1)), 1));
}

/* Blocks at a and a + Q4_0_BYTES as bytes 0..15: [lo, hi nibbles of block 2i, lo, hi of 2i+1].
 * Each block's 16 quant bytes come broadcast to both halves of a 256-bit half straight from
 * memory (a load, no shuffle), and the high copies are shifted down by a masked shift. */
static inline __m512i nib_pair(const uint8_t *a) {
    const __m256i q0 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a + Q4_0_QS)));
    const __m256i q1 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(a + Q4_0_BYTES + Q4_0_QS)));
    const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(q0), q1, 1);
    return _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
}

/* dup2_h(a, a + Q4_0_BYTES): the two blocks' scales (words 0 and 9 of the pair) picked out of
 * one 32-byte load by a word permutation. */
static inline __m512 scale_pair(const uint8_t *a) {
    const __m256i id = _mm256_set_epi16(9, 9, 9, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_cvtph_ps(_mm256_permutexvar_epi16(id, _mm256_loadu_si256((const __m256i *)a)));
}

static void pack_x(q4v_x *xp, int64_t np, const uint8_t *x) {
    const __m512i eight = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
    for (int64_t i = 0; i < np; i++) {
        const uint8_t *b = x + (size_t)i * 2 * Q8_0_BYTES;
        xp[i].y = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b + Q8_0_QS))),
                                     _mm256_loadu_si256((const __m256i *)(b + Q8_0_BYTES + Q8_0_QS)), 1);
        xp[i].c = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, eight, xp[i].y));
        xp[i].dx = dup2_h(b, b + Q8_0_BYTES);
    }
}

/* Rows w0, w1 (w1 == w0 for a lone last row: y[1] not stored). */
static inline void q4_pair_rows(int64_t nb, const uint8_t *w0, const uint8_t *w1, const q4v_x *xp, const uint8_t *x,
                                float *y, bool store_hi, const uint8_t *pf, const uint8_t *pf_end) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const int64_t np = nb / 2;
    for (int64_t i = 0; i < np; i++, pf += 4 * Q4_0_BYTES) {
        if (pf < pf_end) {   /* the 72 bytes touch at most two lines */
            _mm_prefetch((const char *)pf, _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 4 * Q4_0_BYTES - 1), _MM_HINT_T0);
        }
        const size_t off = (size_t)i * 2 * Q4_0_BYTES;
        const __m512 p0 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xp[i].c, nib_pair(w0 + off), xp[i].y));
        const __m512 p1 = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(xp[i].c, nib_pair(w1 + off), xp[i].y));
        acc0 = _mm512_fmadd_ps(_mm512_mul_ps(scale_pair(w0 + off), xp[i].dx), p0, acc0);
        acc1 = _mm512_fmadd_ps(_mm512_mul_ps(scale_pair(w1 + off), xp[i].dx), p1, acc1);
    }
    float s0 = x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc0), _mm512_extractf32x8_ps(acc0, 1)));
    float s1 = x86_hsum_ps(_mm256_add_ps(_mm512_castps512_ps256(acc1), _mm512_extractf32x8_ps(acc1, 1)));
    if (nb & 1) {   /* the dot's odd last block */
        const uint8_t *a0 = w0 + (size_t)np * 2 * Q4_0_BYTES, *a1 = w1 + (size_t)np * 2 * Q4_0_BYTES;
        const uint8_t *b = x + (size_t)np * 2 * Q8_0_BYTES;
        const __m256i yv = _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS)), m8 = _mm256_set1_epi8(8);
        const float dx = x86_f16(b);
        const __m256i i0 = x86_dot_i8(_mm256_sub_epi8(x86_unpack_nib16(a0 + Q4_0_QS), m8), yv);
        const __m256i i1 = x86_dot_i8(_mm256_sub_epi8(x86_unpack_nib16(a1 + Q4_0_QS), m8), yv);
        s0 += x86_hsum_ps(_mm256_mul_ps(_mm256_set1_ps(x86_f16(a0) * dx), _mm256_cvtepi32_ps(i0)));
        s1 += x86_hsum_ps(_mm256_mul_ps(_mm256_set1_ps(x86_f16(a1) * dx), _mm256_cvtepi32_ps(i1)));
    }
    y[0] = s0;
    if (store_hi) y[1] = s1;
}

static inline __attribute__((always_inline)) void gemv_q4_0_pf(int64_t n, const void *w, size_t ws, int64_t n_rows,
                                                               int64_t g0, int64_t g1, const void *x, float *y,
                                                               bool pf) {
    const uint8_t *W = w, *end = W + (size_t)n_rows * ws;
    const int64_t nb = n / QK4_0, r1 = 2 * g1 < n_rows ? 2 * g1 : n_rows;   /* group g: rows 2g, 2g + 1 */
    if (nb / 2 > XMAXP) {   /* the panel does not fit: the dot itself, row by row */
        const tensor_vec_dot_fn dot = tensor_kernels_avx512()->vec_dot[GGUF_T_Q4_0];
        for (int64_t r = 2 * g0; r < r1; r++) y[r] = dot(n, W + (size_t)r * ws, x);
        return;
    }
    _Alignas(64) q4v_x xp[XMAXP];   /* 48 KB */
    pack_x(xp, nb / 2, x);
    int64_t r = 2 * g0;
    for (; r + 2 <= r1; r += 2) {
        const uint8_t *w0 = W + (size_t)r * ws;
        q4_pair_rows(nb, w0, w0 + ws, xp, x, y + r, true, pf ? w0 + PF_DIST : end, end);
    }
    if (r < r1) q4_pair_rows(nb, W + (size_t)r * ws, W + (size_t)r * ws, xp, x, y + r, false, end, end);
}

X86_GEMV_PF_TWINS(gemv_q4_0)

/* ---- rows packed 16 to a group (tensor.h tensor_q4_0_r16_pack) ------------------------------
 *
 * One lane per row: each packed vector holds 4 quant bytes of the 16 rows, whose low nibbles
 * are the dot's int32 lane u of the block and high ones lane u + 4, so one dpbusd against
 * those 4 activation bytes (broadcast), started from their −8·Σ4 y, gives all 16 rows' lane
 * exactly; converted and FMAed with the rows' d·dx into that lane's chain (16 chains: lanes
 * 0-7 the even blocks, 8-15 the odd ones, as dot_q4_0 pairs them), whose tree is then taken
 * lane by lane, and an odd last block's scaled lanes by theirs (rt_dot_q4_0_r16 is the
 * oracle). No nibble shuffles, no scale permutations, no sums across lanes. One thread, a
 * 1024 x 512 matrix from L2 (a program outside the repo, best of 200): 36 GB/s in the file's
 * layout, 51 packed. recur-bench tg128 qwen3-0.6b Q4_0 (Q6_K head), 2 threads, 4 alternating
 * process pairs against RECUR_NO_REPACK=q40: 102.2-118.0 -> 122.8-146.9 t/s (4 won), median
 * token 7.70-8.99 -> 6.39-7.75 ms.
 * The software prefetch runs Q40R16_PF bytes ahead: tokens of one process alternating between
 * distances in runs of 8 (a patch outside the repo, RECUR_PREFETCH=on, median time a token,
 * two runs each): 16 blocks against 4 0.87-0.90, 24 against 16 0.97, 32 against 16 0.96, 12
 * against 16 1.03-1.04, 48 against 32 1.03, 64 against 32 1.01-1.02. */
#define Q40R16_PF (32 * TENSOR_Q40R16_BLOCK)

/* Block h's 8 lanes for the 16 rows (the block's int32 lanes as floats), against activation
 * block b. */
static inline __attribute__((always_inline)) void q40r16_lanes(const uint8_t *h, const uint8_t *b, __m512 p[8]) {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const __m256i yv = _mm256_loadu_si256((const __m256i *)(b + Q8_0_QS));
    int32_t c[8], y4[8];
    _mm256_storeu_si256((__m256i *)c, _mm256_sub_epi32(_mm256_setzero_si256(),
                                                        _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(8), yv)));
    _mm256_storeu_si256((__m256i *)y4, yv);
    _Pragma("GCC unroll 4")
    for (int u = 0; u < 4; u++) {
        const __m512i q = _mm512_loadu_si512(h + Q40R16_QS + 64 * u);
        const __m512i ql = _mm512_and_si512(q, lo4), qh = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
        p[u] = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_set1_epi32(c[u]), ql, _mm512_set1_epi32(y4[u])));
        p[u + 4] = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_set1_epi32(c[u + 4]), qh, _mm512_set1_epi32(y4[u + 4])));
    }
}

/* x86_hsum_ps's tree over 8 vectors, lane by lane. */
static inline __m512 q40r16_tree8(const __m512 v[8]) {
    return _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6])),
                         _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7])));
}

static inline __attribute__((always_inline)) void q40r16_group(int64_t nb, const uint8_t *w, const uint8_t *x, float *y,
                                                               bool pf) {
    __m512 acc[16], p[8];
    _Pragma("GCC unroll 16")
    for (int l = 0; l < 16; l++) acc[l] = _mm512_setzero_ps();
    const int64_t ne = nb & ~(int64_t)1;
    for (int64_t i = 0; i < ne; i++) {
        const uint8_t *h = w + (size_t)i * TENSOR_Q40R16_BLOCK, *b = x + (size_t)i * Q8_0_BYTES;
        for (int o = 0; pf && o < TENSOR_Q40R16_BLOCK; o += 64)
            _mm_prefetch((const char *)(h + Q40R16_PF + o), _MM_HINT_T0);
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q40R16_D))),
                                       _mm512_set1_ps(x86_f16(b)));
        q40r16_lanes(h, b, p);
        if (i & 1)
            _Pragma("GCC unroll 8")
            for (int l = 0; l < 8; l++) acc[8 + l] = _mm512_fmadd_ps(d, p[l], acc[8 + l]);
        else
            _Pragma("GCC unroll 8")
            for (int l = 0; l < 8; l++) acc[l] = _mm512_fmadd_ps(d, p[l], acc[l]);
    }
    __m512 v[8];
    _Pragma("GCC unroll 8")
    for (int l = 0; l < 8; l++) v[l] = _mm512_add_ps(acc[l], acc[l + 8]);   /* hsum512's halves */
    __m512 s = q40r16_tree8(v);
    if (nb & 1) {   /* the odd last block: its lanes scaled, then their own tree */
        const uint8_t *h = w + (size_t)ne * TENSOR_Q40R16_BLOCK, *b = x + (size_t)ne * Q8_0_BYTES;
        const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + Q40R16_D))),
                                       _mm512_set1_ps(x86_f16(b)));
        q40r16_lanes(h, b, p);
        _Pragma("GCC unroll 8")
        for (int l = 0; l < 8; l++) p[l] = _mm512_mul_ps(d, p[l]);
        s = _mm512_add_ps(s, q40r16_tree8(p));
    }
    _mm512_storeu_ps(y, s);
}

X86_GEMV_R16_TWINS(gemv_q4_0_r16, q40r16_group, QK4_0)

void rt_fill_gemv_q40_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q4_0] = (tensor_gemv){ gemv_q4_0, 2, gemv_q4_0_lean, 0, NULL, 0 };
    k->gemv_q4_0_r16 = (tensor_gemv){ gemv_q4_0_r16, TENSOR_R16_ROWS, gemv_q4_0_r16_lean, 0, NULL, 0 };
    k->q4_0_r16_native = true;
}
