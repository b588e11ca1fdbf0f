#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 3
/* rms_norm — y = (x · scale) · w, scale = 1/sqrt(mean(x²) + eps), over rows of n elements (a workgroup
 * a row); a row is head h of token t at x_off + t·x_stride + h·n (hpt heads a token; 1 for whole rows).
 * w_off = ~0: no weight; the grid is rows x + 65535·y.
 *
 * scale is the CPU's bit for bit (ops_rms_norm: f32 squares summed in double, the mean rounded to f32,
 * then IEEE sqrt and division): a last-bit difference here would move every activation an ulp, and
 * where quantized embeddings put them on a lattice (a q4_0 block's x / amax = 1/2) that ulp decides
 * which way the products' Q8 rounding goes, for many elements at once. So the squares are summed as an
 * unevaluated pair of floats (about 48 bits; `precise` keeps the compiler from reassociating), and the
 * divisions and the square root are rounded as IEEE rounds them (exact.glsl). */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer XB { float X[]; };
layout(std430, binding = 1) readonly buffer WB { float W[]; };
layout(std430, binding = 2) buffer YB { float Y[]; };
layout(push_constant) uniform PC {
    uint n, hpt;
    uint x_off, x_stride;
    uint y_off, y_stride;
    uint w_off;
    float eps;
    uint rows; /* rows in all (n tokens · hpt) */
} p;
#include "exact.glsl"
shared float red_hi[64], red_lo[64];

/* (hi, lo) + (bh, bl), renormalised */
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

void main()
{
    const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = row / p.hpt, h = row % p.hpt;
    const uint tid = gl_LocalInvocationID.x;
    if (row >= p.rows)
        return; /* the whole workgroup: no barrier is skipped by part of it */
    const uint xb = p.x_off + t * p.x_stride + h * p.n, yb = p.y_off + t * p.y_stride + h * p.n;
    float hi = 0.0, lo = 0.0;
    for (uint i = tid; i < p.n; i += 64u) {
        const float v = X[xb + i];
        precise float sq = v * v;
        pair_add(hi, lo, sq, 0.0);
    }
    red_hi[tid] = hi;
    red_lo[tid] = lo;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k) {
            float a = red_hi[tid], b = red_lo[tid];
            pair_add(a, b, red_hi[tid + k], red_lo[tid + k]);
            red_hi[tid] = a;
            red_lo[tid] = b;
        }
        barrier();
    }
    /* mean = (hi + lo) / n rounded once: the quotient of hi, corrected by the exact residual plus lo */
    const float nf = float(p.n), shi = red_hi[0], slo = red_lo[0];
    precise float q = div_rn(shi, nf);
    float qp, qe;
    two_prod(q, nf, qp, qe);
    precise float r = ((shi - qp) - qe) + slo;
    precise float mean = q + r / nf;
    precise float me = mean + p.eps;
    const float scale = div_rn(1.0, sqrt_rn(me));
    for (uint i = tid; i < p.n; i += 64u) {
        precise float v = X[xb + i] * scale;
        Y[yb + i] = p.w_off == 0xffffffffu ? v : v * W[p.w_off + i];
    }
}
