#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 5
/* ple_conv — PLE's dilated causal depthwise conv + SiLU (cpu_hybrid.c ple_conv_task) over each sequence
 * group's rows in batch order: out_r[c] = silu(Σ_k w[c][k] · in_{r − (taps−1−k)·dil}[c]), k = 0 first,
 * each product rounded and summed without fused multiply-adds (as the CPU), the inputs before the
 * group's first row from the sequence's history [hist][channels] (hist = (taps − 1)·dil, oldest first),
 * which is then moved on to the last hist inputs of [history | the group's rows]. Input row r at in_off +
 * r·in_stride, output at out_off + r·out_stride, taps W[w_off + c·taps + k], group i's {seq, start, len}
 * at GRP[grp_off + 4i] and its rows at GRP[rows_off + start …], the history at state_off +
 * seq·state_stride. An invocation a (group, channel), reading and writing only its channel's history:
 * grid (channels / 64, groups). */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer IB { float IN[]; };
layout(std430, binding = 1) buffer OB { float OUT[]; };
layout(std430, binding = 2) readonly buffer WB { float W[]; };
layout(std430, binding = 3) buffer SB { float ST[]; };
layout(std430, binding = 4) readonly buffer RB { int GRP[]; };
layout(push_constant) uniform PC {
    uint in_off, in_stride, out_off, out_stride;
    uint w_off, state_off, state_stride;
    uint rows_off, grp_off;
    uint channels, taps, dil;
} p;
#include "fmath.glsl"

/* element q of [history | the group's rows] (q < hist: the history) */
float in_at(uint q, uint hist, uint hb, uint rb, uint c)
{
    return q < hist ? ST[hb + q * p.channels] : IN[p.in_off + uint(GRP[rb + q - hist]) * p.in_stride + c];
}

void main()
{
    const uint c = gl_GlobalInvocationID.x, gi = gl_WorkGroupID.y;
    if (c >= p.channels)
        return;
    const uint seq = uint(GRP[p.grp_off + 4u * gi]), start = uint(GRP[p.grp_off + 4u * gi + 1u]);
    const uint len = uint(GRP[p.grp_off + 4u * gi + 2u]), rb = p.rows_off + start;
    const uint hist = (p.taps - 1u) * p.dil, hb = p.state_off + seq * p.state_stride + c, wb = p.w_off + c * p.taps;
    for (uint tt = 0u; tt < len; tt++) {
        /* row tt is element hist + tt; tap k reads element hist + tt − (taps − 1 − k)·dil ≥ 0 */
        precise float acc = W[wb] * in_at(tt, hist, hb, rb, c);
        for (uint k = 1u; k < p.taps; k++) {
            precise float term = W[wb + k] * in_at(tt + k * p.dil, hist, hb, rb, c);
            acc = acc + term;
        }
        OUT[p.out_off + uint(GRP[rb + tt]) * p.out_stride + c] = silu_f(acc);
    }
    /* ascending, each slot from a later element: none is read after it is overwritten */
    for (uint m = 0u; m < hist; m++)
        ST[hb + m * p.channels] = in_at(len + m, hist, hb, rb, c);
}
