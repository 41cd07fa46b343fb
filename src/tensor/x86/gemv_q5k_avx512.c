/* gemv_q5k_avx512.c — many Q5_K weight rows × one Q8_K activation row (tensor.h, gemv): the
 * single-token matmul of token generation.
 *
 * Every y[r] performs exactly the AVX-512 table's Q5_K dot (dot_avx512.c rt_dot_q5_K_avx512):
 * per block, lane L of the exact integer sum Σ_j sc·Σ4 q·y over the 64-element chunks j
 * (lanes 0-7: the even sub-blocks, 8-15: the odd ones) is converted to float and FMAed with
 * d·yd into a 16-lane accumulator, and lane k of the exact min sum m[k]·(bs[2k] + bs[2k+1])
 * with dmin·yd into an 8-lane one; then hsum512(acc) − x86_hsum_ps(accm). The integer lanes
 * are the same numbers reached another way, which does a block in fewer operations: a 64-byte
 * load holds two chunks, whose low nibbles are sub-blocks (2j, 2j+2) and high nibbles
 * (2j+1, 2j+3); each such vector gets its fifth bits in one shift and one ternary logic op,
 * its products in one maddubs against the activations arranged to match (once per block for
 * all rows) and its scales in one madd; the even and odd vectors' halves are then added lane
 * for lane into the dot's layout (integers: any order gives the same sums). Four rows run side
 * by side, r + k·q (k = 0..3, q = n_rows / 4): four streams that each run straight through a
 * quarter of the memory, which the hardware prefetchers follow (gemv_avx512.c), helped by a
 * software prefetch (Q5_PF). */
#include "tensor/x86/simd_x86.h"

/* The block's activations as the four vectors the row loop takes: sub-blocks (0, 2), (1, 3),
 * (4, 6), (5, 7), 32 bytes each. */
static inline void q5v_acts(const int8_t *y, __m512i a[4]) {
    const __m512i y0 = _mm512_loadu_si512(y), y1 = _mm512_loadu_si512(y + 64);
    const __m512i y2 = _mm512_loadu_si512(y + 128), y3 = _mm512_loadu_si512(y + 192);
    a[0] = _mm512_shuffle_i64x2(y0, y1, 0x44);
    a[1] = _mm512_shuffle_i64x2(y0, y1, 0xEE);
    a[2] = _mm512_shuffle_i64x2(y2, y3, 0x44);
    a[3] = _mm512_shuffle_i64x2(y2, y3, 0xEE);
}

/* Word indices of the scales of the four vectors: [s_a ×16 | s_b ×16]. */
static inline __m512i q5v_sidx(int a, int b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16((short)a)), _mm256_set1_epi16((short)b), 1);
}

typedef struct q5v_consts {
    __m512i lo4, bit4, sidx[4], sh[4];
} q5v_consts;

static inline q5v_consts q5v_make(void) {
    q5v_consts k = { .lo4 = _mm512_set1_epi8(0x0F), .bit4 = _mm512_set1_epi8(0x10) };
    k.sidx[0] = q5v_sidx(0, 2);
    k.sidx[1] = q5v_sidx(1, 3);
    k.sidx[2] = q5v_sidx(4, 6);
    k.sidx[3] = q5v_sidx(5, 7);
    /* bit b of each byte to bit 4: left by 4 − b (b = 0, 2 | 1, 3), right by b − 4 (4, 6 | 5, 7) */
    k.sh[0] = q5v_sidx(4, 2);
    k.sh[1] = q5v_sidx(3, 1);
    k.sh[2] = q5v_sidx(0, 2);
    k.sh[3] = q5v_sidx(1, 3);
    return k;
}

/* One block of one row: the dot's integer lanes and its min lanes. */
static inline __attribute__((always_inline)) void q5v_block(const uint8_t *a, const __m512i act[4], __m256i bs,
                                                             const q5v_consts *k, __m512i *isum, __m256i *imin) {
    uint64_t sc, m;
    rt_k4_scales_u64(a + Q5_K_SCALES, &sc, &m);
    const __m512i s16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a + Q5_K_QH)));
    const __m512i q0 = _mm512_loadu_si512(a + Q5_K_QS), q1 = _mm512_loadu_si512(a + Q5_K_QS + 64);
    const __m512i nib[4] = { q0, _mm512_srli_epi16(q0, 4), q1, _mm512_srli_epi16(q1, 4) };
    __m512i p[4];
    _Pragma("GCC unroll 4")
    for (int v = 0; v < 4; v++) {
        /* sub-block b's fifth bit is bit b of qh[l]: moved to bit 4 of each byte (bit 4 of a
         * byte only ever receives a bit of the same byte: shifts of at most 4) */
        const __m512i hb = v < 2 ? _mm512_sllv_epi16(h, k->sh[v]) : _mm512_srlv_epi16(h, k->sh[v]);
        /* (nib & 0x0F) | (hb & 0x10) */
        const __m512i q5 = _mm512_ternarylogic_epi32(_mm512_and_si512(nib[v], k->lo4), hb, k->bit4, 0xF8);
        p[v] = _mm512_madd_epi16(_mm512_maddubs_epi16(q5, act[v]), _mm512_permutexvar_epi16(k->sidx[v], s16));
    }
    const __m512i e = _mm512_add_epi32(p[0], p[2]), o = _mm512_add_epi32(p[1], p[3]);
    *isum = _mm512_add_epi32(_mm512_shuffle_i64x2(e, o, 0x44), _mm512_shuffle_i64x2(e, o, 0xEE));
    const __m128i m8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)m));
    *imin = _mm256_madd_epi16(bs, _mm256_set_m128i(_mm_unpackhi_epi16(m8, m8), _mm_unpacklo_epi16(m8, m8)));
}

static inline float q5v_finish(__m512 acc, __m256 accm) {
    const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
    return x86_hsum_ps(s) - x86_hsum_ps(accm);
}

/* Software prefetch distance of the four streams: the hardware prefetchers follow them, but
 * not far enough ahead. Tokens of one process alternating in runs of 8 (a patch outside the
 * repo, RECUR_PREFETCH=on, median time a token), qwen3-0.6b Q5_K_M tg128, 2 threads: 4096
 * bytes against none 0.944, 0.971, 0.967; 8192 against 4096 1.005, 1.010. The lean twin
 * (tensor.h) goes without, for the minutes the neighbours keep memory busy. */
#define Q5_PF 4096

/* Rows w[0..R) against x; y[k] for each; pf: each row's bytes fetched Q5_PF ahead. */
static inline __attribute__((always_inline)) void q5v_rows(int R, int64_t nb, const uint8_t *const *w,
                                                            const uint8_t *x, float *const *y, bool pf) {
    const q5v_consts kc = q5v_make(), *k = &kc;
    __m512 acc[4];
    __m256 accm[4];
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) {
        acc[r] = _mm512_setzero_ps();
        accm[r] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *b = x + (size_t)i * Q8_K_BYTES;
        __m512i act[4];
        q5v_acts((const int8_t *)(b + Q8_K_QS), act);
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(b + Q8_K_BSUMS));
        const float yd = rd_f32(b);
        _Pragma("GCC unroll 4")
        for (int r = 0; r < R; r++) {
            const uint8_t *a = w[r] + (size_t)i * Q5_K_BYTES;
            if (pf)   /* three lines a block cover its 176 bytes as the blocks pass */
                for (int o = 0; o < 192; o += 64) _mm_prefetch((const char *)(a + Q5_PF + o), _MM_HINT_T0);
            __m512i isum;
            __m256i imin;
            q5v_block(a, act, bs, k, &isum, &imin);
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(x86_f16(a) * yd), _mm512_cvtepi32_ps(isum), acc[r]);
            accm[r] = _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(a + Q5_K_DMIN) * yd), _mm256_cvtepi32_ps(imin), accm[r]);
        }
    }
    _Pragma("GCC unroll 4")
    for (int r = 0; r < R; r++) *y[r] = q5v_finish(acc[r], accm[r]);
}

X86_GEMV_ROWS4_TWINS(gemv_q5_K, q5v_rows, QK_K)

void rt_fill_gemv_q5k_avx512(tensor_kernels *k) {
    k->gemv[GGUF_T_Q5_K] = (tensor_gemv){ gemv_q5_K, 4, gemv_q5_K_lean, 0, NULL, 0 };
}
