#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 4
/* ple_gate — PLE's gate per stream (cpu_hybrid.c ple_gate_task, after the key's and the query's grouped
 * norms): σ = (key_s · query_s) · inv (inv the host's 1/sqrt(width)), gate = sigmoid(sgn(σ) ·
 * sqrt(max(|σ|, 1e-6))), g_s = v · gate, for stream s of token t (key, query and g rows of hc·width, v
 * rows of width; rows at key_off + t·key_stride and likewise). The dot's f32 products are summed as a
 * float pair (about 48 bits) where the CPU sums them in double, so its f32 value is the CPU's but at a
 * near-tie; the square root IEEE-rounded (exact.glsl). A workgroup a (token, stream): the grid is
 * t·hc + s as x + 65535·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer KB { float K[]; };
layout(std430, binding = 1) readonly buffer QB { float Q[]; };
layout(std430, binding = 2) readonly buffer VB { float V[]; };
layout(std430, binding = 3) buffer GB { float G[]; };
layout(push_constant) uniform PC {
    uint k_off, k_stride, q_off, q_stride, v_off, v_stride, g_off, g_stride;
    uint width, hc, rows; /* rows: n · hc */
    float inv;
} p;
#include "fmath.glsl"
shared float red_hi[64], red_lo[64];
void main()
{
    const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u, t = row / p.hc, s = row % p.hc;
    const uint tid = gl_LocalInvocationID.x;
    if (row >= p.rows)
        return; /* the whole workgroup: no barrier is skipped by part of it */
    const uint kb = p.k_off + t * p.k_stride + s * p.width, qb = p.q_off + t * p.q_stride + s * p.width;
    float hi = 0.0, lo = 0.0;
    for (uint i = tid; i < p.width; i += 64u) {
        precise float pr = K[kb + i] * Q[qb + i];
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
    /* the renormalised pair's high part is the sum rounded to f32, as the CPU's (float)dot */
    precise float sig = red_hi[0] * p.inv;
    const float mag = sqrt_rn(max(abs(sig), 1e-6));
    const float gate = sigmoid_f(sig > 0.0 ? mag : sig < 0.0 ? -mag : 0.0);
    const uint vb = p.v_off + t * p.v_stride, gb = p.g_off + t * p.g_stride + s * p.width;
    for (uint i = tid; i < p.width; i += 64u) {
        precise float v = V[vb + i] * gate;
        G[gb + i] = v;
    }
}
