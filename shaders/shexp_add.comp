#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 4
/* shexp_add — a[t] += s[t] · sigmoid(w · h[t]) over rows of `width` (cpu_hybrid_shexp's gated add of the
 * shared expert's output s): the dot's f32 products summed as a float pair (about 48 bits) where the CPU
 * sums them in double, so its f32 value is the CPU's but at a near-tie; then a = a + s·γ per element
 * without a fused multiply-add. Rows at a_off + t·a_stride (h, s likewise), w at W[w_off …]. A workgroup
 * a token; the grid is tokens x + 65535·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer AB { float A[]; };
layout(std430, binding = 1) readonly buffer HB { float H[]; };
layout(std430, binding = 2) readonly buffer SB { float S[]; };
layout(std430, binding = 3) readonly buffer WB { float W[]; };
layout(push_constant) uniform PC {
    uint a_off, a_stride, h_off, h_stride, s_off, s_stride;
    uint w_off, width, n;
} p;
#include "fmath.glsl"
shared float red_hi[64], red_lo[64];
void main()
{
    const uint t = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, tid = gl_LocalInvocationID.x;
    if (t >= p.n)
        return; /* the whole workgroup: no barrier is skipped by part of it */
    const uint hb = p.h_off + t * p.h_stride;
    float hi = 0.0, lo = 0.0;
    for (uint i = tid; i < p.width; i += 64u) {
        precise float pr = W[p.w_off + i] * H[hb + i];
        pair_add(hi, lo, pr, 0.0);
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
    const float gam = sigmoid_f(red_hi[0]);
    const uint ab = p.a_off + t * p.a_stride, sb = p.s_off + t * p.s_stride;
    for (uint i = tid; i < p.width; i += 64u) {
        precise float v = A[ab + i] + S[sb + i] * gam;
        A[ab + i] = v;
    }
}
