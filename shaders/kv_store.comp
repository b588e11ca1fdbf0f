#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 4
/* kv_store — token t's K and V rows (SRC at k_off / v_off + t·src_stride, kv_dim each) into the layer's
 * caches at (seq, pos) of the step's token table: [n_seq][n_ctx][kv_dim] f32, or with F16 pairs of f16
 * rounded to nearest even (the CPU's fp16_from_f32) two to a word. Grid: tokens. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer SB { float S[]; };
layout(std430, binding = 1) buffer KB { uint KC[]; };
layout(std430, binding = 2) buffer VB { uint VC[]; };
layout(std430, binding = 3) readonly buffer TB { int TOK[]; }; /* [n][4]: token, pos, seq, unused */
layout(push_constant) uniform PC {
    uint k_off, v_off, src_stride, kv_dim, n_ctx, f16;
} p;
#include "half.glsl"
void main()
{
    const uint t = gl_WorkGroupID.x;
    const uint pos = uint(TOK[4u * t + 1u]), seq = uint(TOK[4u * t + 2u]);
    const uint cell = (seq * p.n_ctx + pos) * p.kv_dim;
    const uint kb = p.k_off + t * p.src_stride, vb = p.v_off + t * p.src_stride;
    if (p.f16 != 0u) {
        for (uint i = gl_LocalInvocationID.x; i < p.kv_dim / 2u; i += 64u) {
            KC[cell / 2u + i] = h_from_f(S[kb + 2u * i]) | (h_from_f(S[kb + 2u * i + 1u]) << 16);
            VC[cell / 2u + i] = h_from_f(S[vb + 2u * i]) | (h_from_f(S[vb + 2u * i + 1u]) << 16);
        }
    } else {
        for (uint i = gl_LocalInvocationID.x; i < p.kv_dim; i += 64u) {
            KC[cell + i] = floatBitsToUint(S[kb + i]);
            VC[cell + i] = floatBitsToUint(S[vb + i]);
        }
    }
}
