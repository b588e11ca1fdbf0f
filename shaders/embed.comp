#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 3
// variants: types
/* embed — x[t] = row TOK[t].token of the embedding matrix, dequantized (deq.glsl). Grid: tokens. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer WB { uint Wq[]; };
layout(std430, binding = 1) readonly buffer TB { int TOK[]; };
layout(std430, binding = 2) buffer XB { float X[]; };
layout(push_constant) uniform PC {
    uint w_off, row_bytes, n_embd;
} p;
#include "deq.glsl"
void main()
{
    const uint t = gl_WorkGroupID.x;
    const uint row = p.w_off + uint(TOK[4u * t]) * p.row_bytes;
    for (uint g = gl_LocalInvocationID.x; g < (p.n_embd + 31u) / 32u; g += 64u) {
        float v[32];
        deq32(row, g, v);
        const uint lim = min(32u, p.n_embd - 32u * g); /* a float row's short last group (mm.comp) */
        for (uint i = 0u; i < lim; i++)
            X[t * p.n_embd + 32u * g + i] = v[i];
    }
}
