/* expf_libm_ref.c — libm's expf as glibc (2.28 and later) computes it on x86-64 with FMA,
 * written out, one float at a time: the oracle of the Mamba-1 scan's vector exp
 * (x86/scan_avx2.c).
 *
 * llama.cpp's Mamba-1 scan calls libm's expf for every state element (ggml's ssm_scan), so
 * its bits are glibc's, whose x86-64 build picks a variant compiled with FMA contraction on
 * CPUs that have it. That variant, read off the machine code of Debian 12's libm (glibc
 * 2.36), is, in double precision:
 *
 *   t = fma(x, N/ln2, 1.5·2^52);  ki = bits(t);  k = t − 1.5·2^52         (N = 32)
 *   r = fma(N/ln2, x, −k)
 *   s = double with bits TAB[ki % 32] + (ki << 47)                       (2^(k/N))
 *   y = fma(fma(r, C0, C1), r·r, fma(r, C2, 1)) · s,  rounded once to float;
 *
 * |x| >= 88 (the top 12 bits of x above 0x42a) takes the checks first: -inf gives 0, NaN and
 * +inf x + x, x > 0x1.62e42ep6 +inf, x < -0x1.9fe368p6 0; the rest the formula (subnormal
 * results included). rt_expf_libm equals this machine's expf for all 2^32 inputs (a program
 * outside the repo compared every one: 0 differences), so recur's Mamba-1 states carry
 * llama.cpp's bits there, and every kernel table gives these bits everywhere (libm's own
 * would not be the same on every system). The constants: the table is 2^(i/32) as doubles
 * with i << 47 taken off (so adding ki << 47 puts k's integer part in the exponent), N/ln2,
 * and the polynomial's coefficients. */
#include <math.h>

#include "tensor/tensor_impl.h"

const uint64_t rt_expf_tab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51, 0x3fef72b83c7d517b,
    0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1, 0x3fef06fe0a31b715, 0x3feef1a7373aa9cb,
    0x3feedea64c123422, 0x3feece086061892d, 0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429,
    0x3feea47eb03a5585, 0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d, 0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069, 0x3fef5818dcfba487, 0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};

float rt_expf_libm(float x) {
    uint32_t ux;
    memcpy(&ux, &x, sizeof ux);
    if (((ux >> 20) & 0x7ff) > RT_EXPF_TOP_MAX) {
        if (ux == 0xff800000u) return 0.0f;
        if (((ux >> 20) & 0x7ff) > 0x7f7) return x + x;
        if (x > RT_EXPF_OFLOW) return INFINITY;
        if (x < RT_EXPF_UFLOW) return 0.0f;
    }
    const double xd = (double)x, shift = rt_f64_from_bits(RT_EXPF_SHIFT), invln2n = rt_f64_from_bits(RT_EXPF_INVLN2N);
    const double t = fma(xd, invln2n, shift);
    uint64_t ki;
    memcpy(&ki, &t, sizeof ki);
    const double k = t - shift;
    const double r = fma(invln2n, xd, -k);
    const double s = rt_f64_from_bits(rt_expf_tab[ki % 32] + (ki << 47));
    const double z = fma(r, rt_f64_from_bits(RT_EXPF_C0), rt_f64_from_bits(RT_EXPF_C1));
    const double y = fma(z, r * r, fma(r, rt_f64_from_bits(RT_EXPF_C2), 1.0));
    return (float)(y * s);
}
