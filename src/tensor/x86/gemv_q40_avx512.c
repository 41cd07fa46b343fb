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
 * (0.9x). What would change the picture is fewer operations a byte: rows packed 16 to a
 * group as Q8_0's (q8_0_r16.c), which this kernel's order allows (its 16 lanes a row
 * accumulate independently). */
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

void rt_fill_gemv_q40_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q4_0] = (tensor_gemv){ gemv_q4_0, 2, gemv_q4_0_lean, 0, NULL, 0 };
}
