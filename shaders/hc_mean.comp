#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 3
/* hc_mean — a hyper-connection mix's output (cpu_hc.c mean_task): h[t][i] = (Σ_s xn[t][s·width + i] ·
 * sigmoid(g[t][s·width + i])) · inv over the hc streams, each product rounded, summed from stream 0 on
 * without fused multiply-adds, as the CPU; inv is the host's 1/hc. Rows at xn_off + t·xn_stride (g and h
 * likewise). An invocation an output element; the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer XB { float XN[]; };
layout(std430, binding = 1) readonly buffer GB { float G[]; };
layout(std430, binding = 2) buffer HB { float H[]; };
layout(push_constant) uniform PC {
    uint xn_off, xn_stride, g_off, g_stride, h_off, h_stride;
    uint width, hc, total; /* total: n · width */
    float inv;
} p;
#include "fmath.glsl"
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint t = i / p.width, c = i % p.width;
    const uint xb = p.xn_off + t * p.xn_stride + c, gb = p.g_off + t * p.g_stride + c;
    precise float acc = XN[xb] * sigmoid_f(G[gb]);
    for (uint s = 1u; s < p.hc; s++) {
        precise float pr = XN[xb + s * p.width] * sigmoid_f(G[gb + s * p.width]);
        acc = acc + pr;
    }
    precise float v = acc * p.inv;
    H[p.h_off + t * p.h_stride + c] = v;
}
