#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 5
/* attn — causal attention of one query head of one token (a workgroup, grid (token, head)) over the
 * first pos + 1 cells of its sequence in the layer's cache (kv_store's layout); the arithmetic is
 * attn.glsl's (ops_attn's, q and the probabilities rounded to f16 with an f16 cache). */
layout(push_constant) uniform PC {
    uint q_off, q_stride, o_off, o_stride;
    uint n_head, n_head_kv, hd, kv_dim, n_ctx, f16;
    float scale;
} p;
#include "attn.glsl"

uint cell_at(uint t, uint j) { return j; }

void main()
{
    const uint t = gl_WorkGroupID.x;
    attend(t, gl_WorkGroupID.y, uint(TOK[4u * t + 2u]), uint(TOK[4u * t + 1u]) + 1u);
}
