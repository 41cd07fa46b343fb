/* logf_libm_ref.c — libm's logf as glibc (2.28 and later) computes it on x86-64 with FMA,
 * written out, one float at a time, and the softplus of llama.cpp's Mamba-1 scan made of it
 * and rt_expf_libm: the oracle of the scan's vector softplus (x86/scan_avx2.c).
 *
 * The variant glibc picks on FMA CPUs, read off the machine code of Debian 12's libm (glibc
 * 2.36), is, for a positive normal x (bits ix):
 *
 *   tmp = ix − 0x3f330000;  i = (tmp >> 19) % 16;  k = tmp >> 23 (arithmetic)
 *   z = (double) the float with bits ix − (tmp & 0xff800000)        (in [0.7, 1.4))
 *   r = fma(z, invc[i], −1);  y0 = fma(k, ln 2, logc[i])
 *   y = fma(A0, r·r, fma(r, A1, A2));  logf = (float) fma(r·r, y, r + y0)
 *
 * x = 1 gives +0; zero, subnormal, negative, infinite and NaN inputs the checks below (the
 * subnormals scaled by 2^23 first, as glibc does). rt_logf_libm equals this machine's logf
 * for all 2^32 inputs (a program outside the repo compared every one). The table holds
 * 1/c and log c for 16 subintervals (c near their centres), then ln 2 and the polynomial. */
#include <math.h>

#include "tensor/tensor_impl.h"

const uint64_t rt_logf_tab[16][2] = {
    { 0x3ff661ec79f8f3be, 0xbfd57bf7808caade }, { 0x3ff571ed4aaf883d, 0xbfd2bef0a7c06ddb },
    { 0x3ff49539f0f010b0, 0xbfd01eae7f513a67 }, { 0x3ff3c995b0b80385, 0xbfcb31d8a68224e9 },
    { 0x3ff30d190c8864a5, 0xbfc6574f0ac07758 }, { 0x3ff25e227b0b8ea0, 0xbfc1aa2bc79c8100 },
    { 0x3ff1bb4a4a1a343f, 0xbfba4e76ce8c0e5e }, { 0x3ff12358f08ae5ba, 0xbfb1973c5a611ccc },
    { 0x3ff0953f419900a7, 0xbfa252f438e10c1e }, { 0x3ff0000000000000, 0x0000000000000000 },
    { 0x3fee608cfd9a47ac, 0x3faaa5aa5df25984 }, { 0x3feca4b31f026aa0, 0x3fbc5e53aa362eb4 },
    { 0x3feb2036576afce6, 0x3fc526e57720db08 }, { 0x3fe9c2d163a1aa2d, 0x3fcbc2860d224770 },
    { 0x3fe886e6037841ed, 0x3fd1058bc8a07ee1 }, { 0x3fe767dcf5534862, 0x3fd4043057b6ee09 },
};

float rt_logf_libm(float x) {
    uint32_t ix;
    memcpy(&ix, &x, sizeof ix);
    if (ix == 0x3f800000u) return 0.0f;
    if (ix - 0x00800000u > 0x7effffffu) {   /* zero, subnormal, negative, inf, NaN */
        if (ix * 2 == 0) return -INFINITY;
        if (ix == 0x7f800000u) return x;
        if ((ix & 0x80000000u) || ix * 2 >= 0xff000000u) return (x - x) / (x - x);
        const float xs = x * 0x1p23f;   /* subnormal: normalized, k adjusted below */
        memcpy(&ix, &xs, sizeof ix);
        ix -= 23u << 23;
    }
    const uint32_t tmp = ix - RT_LOGF_OFF;
    const int i = (int)((tmp >> 19) % 16);
    const int32_t k = (int32_t)tmp >> 23;
    const uint32_t iz = ix - (tmp & 0xff800000u);
    float zf;
    memcpy(&zf, &iz, sizeof zf);
    const double r = fma((double)zf, rt_f64_from_bits(rt_logf_tab[i][0]), -1.0);
    const double y0 = fma((double)k, rt_f64_from_bits(RT_LOGF_LN2), rt_f64_from_bits(rt_logf_tab[i][1]));
    const double r2 = r * r;
    const double y = fma(rt_f64_from_bits(RT_LOGF_A0), r2, fma(r, rt_f64_from_bits(RT_LOGF_A1), rt_f64_from_bits(RT_LOGF_A2)));
    return (float)fma(r2, y, r + y0);
}

float rt_softplus_libm(float x) {
    return x > 20.0f ? x : rt_logf_libm(1.0f + rt_expf_libm(x));
}
