#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 3
/* gdn_gates — the Gated DeltaNet's gates in place (cpu_hybrid.c gdn_block): β = sigmoid(β) and the log
 * decay g = softplus(g + dt[h]) · a[h] (softplus(x) = x past 20), for n tokens of n_head heads; β of head h
 * of token t at b_off + t·b_stride + h, g at g_off + t·g_stride + h (one buffer may hold both).
 * An invocation an element; the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer BB { float BETA[]; };
layout(std430, binding = 1) buffer GB { float G[]; };
layout(std430, binding = 2) readonly buffer VB { float VEC[]; };
layout(push_constant) uniform PC {
    uint b_off, b_stride, g_off, g_stride;
    uint dt_off, a_off;
    uint n_head, total; /* total: n · n_head */
} p;
#include "fmath.glsl"
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint t = i / p.n_head, h = i % p.n_head;
    const uint bi = p.b_off + t * p.b_stride + h, gi = p.g_off + t * p.g_stride + h;
    BETA[bi] = sigmoid_f(BETA[bi]);
    precise float x = G[gi] + VEC[p.dt_off + h];
    precise float g = softplus_f(x) * VEC[p.a_off + h];
    G[gi] = g;
}
