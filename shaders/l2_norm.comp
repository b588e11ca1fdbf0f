#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 1
/* l2_norm — x ← x / max(‖x‖₂, eps) in place over rows of n elements (gdn_l2_norm, the Gated DeltaNet's
 * q and k heads); a row is head h of token t at x_off + t·x_stride + h·n (hpt heads a token). A workgroup
 * a row; the grid is rows x + 65535·y. The CPU sums the f32 squares in double: here they are summed as a
 * float pair (about 48 bits), so ‖x‖² rounds to the same float but at a near-tie; the square root and the
 * division are IEEE-rounded (exact.glsl), which makes the scale the CPU's. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer XB { float X[]; };
layout(push_constant) uniform PC {
    uint n, hpt;
    uint x_off, x_stride;
    float eps;
    uint rows; /* n tokens · hpt */
} p;
#include "fmath.glsl"
shared float red_hi[64], red_lo[64];
void main()
{
    const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = row / p.hpt, h = row % p.hpt;
    const uint tid = gl_LocalInvocationID.x;
    if (row >= p.rows)
        return; /* the whole workgroup: no barrier is skipped by part of it */
    const uint xb = p.x_off + t * p.x_stride + h * p.n;
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
    /* the renormalised pair's high part is the sum rounded to f32, as the CPU's (float)sum */
    const float ss = red_hi[0], nrm = ss > 0.0 ? sqrt_rn(ss) : 0.0;
    const float scale = div_rn(1.0, nrm > p.eps ? nrm : p.eps);
    for (uint i = tid; i < p.n; i += 64u) {
        precise float v = X[xb + i] * scale;
        X[xb + i] = v;
    }
}
