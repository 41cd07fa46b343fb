/* cpu.c — CPU feature detection and the kernel tables.
 *
 * Invariants:
 *  1. The tables are filled exactly once (pthread_once) and are read-only afterwards (house
 *     rule 5): the only mutable globals of tensor/.
 *  2. A SIMD table exists only when the CPU has every extension its file is compiled with
 *     (CMakeLists.txt) and the OS saves the registers (XGETBV): AVX2 = AVX2+FMA+F16C+BMI2
 *     with YMM state; AVX-512 = the AVX2 set plus F/BW/VL/DQ/VNNI with ZMM and opmask state.
 *  3. Every SIMD table starts as a copy of the scalar one and overwrites the entries its ISA
 *     has versions of, so no entry of a supported type is ever NULL. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/tensor_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define RT_X86 1
#else
#define RT_X86 0
#endif

typedef struct cpu_features {
    bool avx2, avx512, avx512bf16;
} cpu_features;

static pthread_once_t        g_once = PTHREAD_ONCE_INIT;
static tensor_kernels        g_scalar, g_avx2, g_avx512;
static tensor_kernels        g_blk_scalar, g_blk_avx2, g_blk_avx512;   /* the Q8_0 block-order twins */
static const tensor_kernels *g_has_avx2, *g_has_avx512, *g_active;

#if RT_X86
static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static cpu_features detect(void) {
    cpu_features f = { false, false, false };
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!osxsave || !avx) return f;
    const uint64_t xcr0 = xgetbv0();
    const bool ymm_os = (xcr0 & 0x6) == 0x6, zmm_os = (xcr0 & 0xE6) == 0xE6;
    if (__get_cpuid_max(0, NULL) < 7) return f;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned max_sub7 = a;
    const bool avx2 = b & (1u << 5), bmi2 = b & (1u << 8);
    const bool f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
               vl = b & (1u << 31), vnni = c & (1u << 11);
    f.avx2 = ymm_os && avx2 && fma && f16c && bmi2;
    f.avx512 = f.avx2 && zmm_os && f512 && dq && bw && vl && vnni;
    if (max_sub7 >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        f.avx512bf16 = f.avx512 && (a & (1u << 5));
    }
    return f;
}
#else
static cpu_features detect(void) { return (cpu_features){ false, false, false }; }
#endif

void tensor_fill_scalar(tensor_kernels *k) {
    memset(k, 0, sizeof *k);
    k->isa = "scalar";
#define RT_TYPE(T, to, from, dot) \
    (k->to_float[T] = (to), k->from_float[T] = (from), k->vec_dot[T] = (dot))
    RT_TYPE(GGUF_T_F32, rt_to_float_f32, rt_from_float_f32, rt_dot_f32);
    RT_TYPE(GGUF_T_F16, rt_to_float_f16, rt_from_float_f16, rt_dot_f16);
    RT_TYPE(GGUF_T_BF16, rt_to_float_bf16, rt_from_float_bf16, rt_dot_bf16);
    RT_TYPE(GGUF_T_Q8_0, rt_to_float_q8_0, rt_from_float_q8_0, rt_dot_q8_0);
    RT_TYPE(GGUF_T_Q4_0, rt_to_float_q4_0, rt_from_float_q4_0, rt_dot_q4_0);
    RT_TYPE(GGUF_T_Q4_K, rt_to_float_q4_K, rt_from_float_q4_K, rt_dot_q4_K_lanes);
    RT_TYPE(GGUF_T_Q5_K, rt_to_float_q5_K, rt_from_float_q5_K, rt_dot_q5_K);
    RT_TYPE(GGUF_T_Q6_K, rt_to_float_q6_K, rt_from_float_q6_K, rt_dot_q6_K);
    RT_TYPE(GGUF_T_IQ4_XS, rt_to_float_iq4_xs, rt_from_float_iq4_xs, rt_dot_iq4_xs);
    RT_TYPE(GGUF_T_Q8_K, rt_to_float_q8_K, rt_from_float_q8_K, NULL);
#undef RT_TYPE
    k->dot_q4_K_rp = rt_dot_q4_K_rp;
    rt_fill_q4k_r16(k);
    rt_fill_q6k_r16(k);
    rt_fill_q8_0_r16(k);
    k->dot_f16_f32 = rt_dot_f16_f32;
    k->axpy_f16 = rt_axpy_f16;
    k->dot4_f16_f32 = rt_dot4_f16_f32;
    k->axpy4_f16 = rt_axpy4_f16;
    k->att_scores4 = rt_att_scores4;
    k->att_wsum4 = rt_att_wsum4;
    k->att_wsumt4 = rt_att_wsumt4;
    k->att_wsumt4_min_rows = 64;   /* AVX2's figure: the scalar tiles were not measured */
    k->f16_cols = rt_f16_cols;
    k->dot_f32 = rt_dot_f32_f32;
    k->f32_to_f16_row = rt_f32_to_f16_row;
    k->exp_f32 = rt_exp_f32;
    k->silu_f32 = rt_silu_f32;
    k->swiglu_f32 = rt_swiglu_f32;
    k->gdn_step = rt_gdn_step;
    k->ssm2_rows = rt_ssm2_rows;
    k->ssm1_step = rt_ssm1_step;
    k->conv_step = rt_conv_step;
    k->conv_run = rt_conv_run;
    k->rope_f32 = rt_rope_f32;
    k->sumsq_rows = rt_sumsq_rows;
    k->scale_round_f16 = rt_scale_round_f16;
    k->exp_sum_f32 = rt_exp_sum_f32;
    k->max_f32 = rt_max_f32;
}

static void init_once(void) {
    const cpu_features f = detect();
    tensor_fill_scalar(&g_scalar);
    g_active = &g_scalar;
    if (f.avx2) {
        g_avx2 = g_scalar;
        g_avx2.isa = "avx2";
        tensor_fill_avx2(&g_avx2);
        g_has_avx2 = g_active = &g_avx2;
    }
    if (f.avx512) {
        g_avx512 = g_avx2;
        g_avx512.isa = "avx512";
        tensor_fill_avx512(&g_avx512);
        rt_fill_bf16_avx512(&g_avx512, f.avx512bf16);
        rt_fill_att_avx512(&g_avx512);
        g_has_avx512 = g_active = &g_avx512;
    }
    g_blk_scalar = g_scalar;
    g_blk_scalar.isa = "scalar+q8blk";
    g_blk_scalar.q8_block = true;
    g_blk_scalar.vec_dot[GGUF_T_Q8_0] = rt_dot_q8_0_blk;
    g_blk_scalar.vec_dot4[GGUF_T_Q8_0] = NULL;
    g_blk_scalar.gemv[GGUF_T_Q8_0] = (tensor_gemv){ 0 };
    g_blk_scalar.gemm[GGUF_T_Q8_0] = NULL;
    rt_fill_q8_0_r16(&g_blk_scalar);
    if (g_has_avx2) {
        g_blk_avx2 = g_avx2;
        g_blk_avx2.isa = "avx2+q8blk";
        g_blk_avx2.q8_block = true;
        rt_fill_q8_0_r16(&g_blk_avx2);
        rt_fill_q8blk_avx2(&g_blk_avx2);
    }
    if (g_has_avx512) {
        g_blk_avx512 = g_avx512;
        g_blk_avx512.isa = "avx512+q8blk";
        g_blk_avx512.q8_block = true;
        rt_fill_q8blk_avx2(&g_blk_avx512);
        rt_fill_q8blk_avx512(&g_blk_avx512);
    }
    tensor_gemv_prefetch_set(tensor_gemv_prefetch_parse(getenv("RECUR_PREFETCH")));   /* unknown: stays auto */
    /* RECUR_ISA may only lower the choice; an unknown value is ignored. */
    const char *want = getenv("RECUR_ISA");
    if (want && strcmp(want, "scalar") == 0) g_active = &g_scalar;
    if (want && strcmp(want, "avx2") == 0 && g_has_avx2) g_active = g_has_avx2;
}

void tensor_init(void) { pthread_once(&g_once, init_once); }

const tensor_kernels *tensor_kernels_scalar(void) { tensor_init(); return &g_scalar; }
const tensor_kernels *tensor_kernels_avx2(void) { tensor_init(); return g_has_avx2; }
const tensor_kernels *tensor_kernels_avx512(void) { tensor_init(); return g_has_avx512; }
const tensor_kernels *tensor_kernels_active(void) { tensor_init(); return g_active; }

const tensor_kernels *tensor_kernels_q8blk(const tensor_kernels *base) {
    tensor_init();
    if (base == &g_scalar || base == &g_blk_scalar) return &g_blk_scalar;
    if (base == &g_avx2 || base == &g_blk_avx2) return &g_blk_avx2;
    if (base == &g_avx512 || base == &g_blk_avx512) return &g_blk_avx512;
    return NULL;
}
