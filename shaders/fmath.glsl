/* fmath.glsl — e^x and ln x within about half an ulp, the sigmoid, SiLU and softplus the CPU computes from
 * them, and the float-pair sum, for the hybrids' shaders. Vulkan lets exp be off by 3 + 2|x| ulp and log
 * by 2^-21 absolute near 1 (NVIDIA's are approximations of that size): a log of 1 + e^x for x = −10 would
 * be off by 1% of itself, and the decay e^g of the delta rule multiplies a state many tokens long. These,
 * from adds, multiplies and IEEE-rounded divisions (exact.glsl), mostly equal glibc's expf (0.502 ulp) and
 * logf (0.82 ulp): e^x measured within 0.524 ulp. Includes exact.glsl. */
#ifndef FMATH_GLSL
#define FMATH_GLSL
#include "exact.glsl"

/* e^x: x = k·ln2 + r, |r| ≤ ln2/2, with ln2 in two parts (the first exact times any k in range) and r kept
 * as a pair (r + r_lo). e^r = 1 + r + r²/2 + r³·c(r) (Taylor to r^9: truncation below 0.01 ulp) with r²
 * exact (two_prod) and the large terms added exactly (1 + r, then + r²/2, each with its error term), so
 * that about only the last addition rounds: within 0.52 ulp, as glibc's expf (0.502) but for a fraction of
 * a percent of arguments. Times 2^k in two halves (each a normal float). */
float exp_f(float x)
{
    if (x > 88.72284)
        return uintBitsToFloat(0x7f800000u);
    if (x < -103.97208)
        return 0.0;
    precise float k = roundEven(x * 1.44269504);
    precise float rh = x - k * 0.693145751953125; /* exact */
    precise float rl = -(k * 1.4286068e-6);
    precise float r = rh + rl;
    precise float r_lo = (rh - r) + rl;
    precise float c = 1.0 / 362880.0;
    c = c * r + 1.0 / 40320.0;
    c = c * r + 1.0 / 5040.0;
    c = c * r + 1.0 / 720.0;
    c = c * r + 1.0 / 120.0;
    c = c * r + 1.0 / 24.0;
    c = c * r + 1.0 / 6.0;
    float p, pe;
    two_prod(r, r, p, pe);
    precise float hp = 0.5 * p;
    precise float s1 = 1.0 + r;
    precise float e1 = (1.0 - s1) + r; /* exact: |r| < 1 */
    precise float s2 = s1 + hp;
    precise float e2 = hp - (s2 - s1); /* exact: s1 > hp */
    precise float tail = ((e1 + e2) + (r_lo + r_lo * r)) + (0.5 * pe + (p * r) * c);
    precise float q = s2 + tail;
    const int ki = int(k), k1 = ki >> 1, k2 = ki - k1;
    precise float v = (q * intBitsToFloat((k1 + 127) << 23)) * intBitsToFloat((k2 + 127) << 23);
    return v;
}

/* a + b = s + err exactly (Knuth's two-sum) */
void two_sum(float a, float b, out float s, out float err)
{
    precise float ss = a + b;
    precise float bb = ss - a;
    precise float ee = (a - (ss - bb)) + (b - bb);
    s = ss;
    err = ee;
}

/* ln u for a positive normal u: u = m·2^e with m in [√½, √2), f = m − 1 (exact), and as fdlibm's logf
 * ln m = f − f²/2 + s·(f²/2 + R(s²)), s = f/(2 + f), R = 2s²/3 + 2s⁴/5 + … to s^10 (truncation below
 * 1e-10). f² is exact (two_prod) and the large terms e·ln2 + f − f²/2 are added exactly, so that about
 * only the last addition rounds (the rest errs by under 0.1 ulp). */
float log_f(float u)
{
    int e;
    float m = frexp(u, e);
    if (m < 0.70710678) {
        m *= 2.0;
        e -= 1;
    }
    precise float f = m - 1.0;
    precise float den = 2.0 + f;
    precise float den_lo = f - (den - 2.0); /* 2 + f = den + den_lo exactly */
    const float s0 = div_rn(f, den);
    precise float s = s0 - s0 * (den_lo / den);
    precise float z = s * s;
    precise float r = 2.0 / 11.0;
    r = r * z + 2.0 / 9.0;
    r = r * z + 2.0 / 7.0;
    r = r * z + 2.0 / 5.0;
    r = r * z + 2.0 / 3.0;
    r = r * z;
    float fp, fe;
    two_prod(f, f, fp, fe);
    precise float hp = 0.5 * fp, he = 0.5 * fe; /* f²/2 = hp + he */
    const float ef = float(e);
    precise float big = ef * 0.693145751953125; /* exact */
    float a1, t1, a2, t2;
    two_sum(big, f, a1, t1);
    two_sum(a1, -hp, a2, t2);
    precise float tail = ((t1 + t2) - he) + (s * ((hp + he) + r) + ef * 1.4286068e-6);
    precise float v = a2 + tail;
    return v;
}

/* a / b rounded as IEEE rounds it, for b ≥ 1 (div_rn's split of b overflows past ~8e34: plain division
 * there, where the quotient is negligible) */
float div_big(float a, float b)
{
    return b < 1e30 ? div_rn(a, b) : a / b;
}

/* gdn_sigmoid: 1 / (1 + e^−x) */
float sigmoid_f(float x)
{
    precise float den = 1.0 + exp_f(-x);
    return div_big(1.0, den);
}

/* ops_silu: x / (1 + e^−x) */
float silu_f(float x)
{
    precise float den = 1.0 + exp_f(-x);
    return div_big(x, den);
}

/* gdn_softplus: x past 20, else ln(1 + e^x) */
float softplus_f(float x)
{
    precise float u = 1.0 + exp_f(x);
    return x > 20.0 ? x : log_f(u);
}

/* (hi, lo) + (bh, bl), renormalised (an unevaluated sum of two floats: about 48 bits; `precise` keeps the
 * compiler from reassociating) */
void pair_add(inout float hi, inout float lo, float bh, float bl)
{
    precise float s = hi + bh;
    precise float v = s - hi;
    precise float err = (hi - (s - v)) + (bh - v);
    precise float t = err + (lo + bl);
    precise float h2 = s + t;
    precise float l2 = t - (h2 - s);
    hi = h2;
    lo = l2;
}

#endif
