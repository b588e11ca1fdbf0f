#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 5
/* gdn_conv — the Gated DeltaNet's causal depthwise conv + SiLU (gdn_conv) over each sequence group's rows
 * in batch order: out[r][c] = silu(Σ_k state[c][k]·w[c][k] + in[r][c]·w[c][d_conv − 1]), the taps oldest
 * first and summed in that order without fused multiply-adds (as the CPU), then the channel's state
 * [d_conv − 1] (oldest first) rolled on by in[r][c]. Input row r at in_off + r·in_stride, output at
 * out_off + r·out_stride, taps W[w_off + c·d_conv + k], group i's {seq, start, len} at GRP[grp_off + 4i]
 * and its rows at GRP[rows_off + start …], the state at state_off + seq·state_stride + c·(d_conv − 1).
 * An invocation a (group, channel): grid (channels / 64, groups). */
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
    uint conv_dim, d_conv;
} p;
#include "fmath.glsl"
void main()
{
    const uint c = gl_GlobalInvocationID.x, gi = gl_WorkGroupID.y;
    if (c >= p.conv_dim)
        return;
    const uint seq = uint(GRP[p.grp_off + 4u * gi]), start = uint(GRP[p.grp_off + 4u * gi + 1u]);
    const uint len = uint(GRP[p.grp_off + 4u * gi + 2u]);
    const uint ns = p.d_conv - 1u, sb = p.state_off + seq * p.state_stride + c * ns, wb = p.w_off + c * p.d_conv;
    for (uint t = 0u; t < len; t++) {
        const uint r = uint(GRP[p.rows_off + start + t]);
        const float xt = IN[p.in_off + r * p.in_stride + c];
        precise float sum = 0.0;
        for (uint k = 0u; k < ns; k++) {
            precise float pr = ST[sb + k] * W[wb + k];
            sum = sum + pr;
        }
        precise float px = xt * W[wb + ns];
        sum = sum + px;
        OUT[p.out_off + r * p.out_stride + c] = silu_f(sum);
        if (ns > 0u) {
            for (uint k = 0u; k + 1u < ns; k++)
                ST[sb + k] = ST[sb + k + 1u];
            ST[sb + ns - 1u] = xt;
        }
    }
}
