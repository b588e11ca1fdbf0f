#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 6
/* attn_sel — attn.comp over the cells a selection names (QSA sparse attention: cpu_hybrid.c attn_task,
 * which gathers the selected K/V rows in cell order and runs ops_attn over them): token t attends to
 * cells SEL[sel_off + t·sel_stride + j], j < SEL[nsel_off + t] (ascending), or, where that count is
 * negative, to its first pos + 1 cells as attn.comp. The arithmetic is attn.glsl's, in the same order, so
 * a list of cells equals attn.comp over a cache holding those cells in order, bit for bit. A workgroup a
 * (token, query head): grid (token, head). */
layout(std430, binding = 5) readonly buffer SB { int SEL[]; };
layout(push_constant) uniform PC {
    uint q_off, q_stride, o_off, o_stride;
    uint n_head, n_head_kv, hd, kv_dim, n_ctx, f16;
    float scale;
    uint sel_off, sel_stride, nsel_off;
} p;
#include "attn.glsl"

bool g_listed; /* token t reads its cells from its list (set once in main, uniform over the workgroup) */

uint cell_at(uint t, uint j) { return g_listed ? uint(SEL[p.sel_off + t * p.sel_stride + j]) : j; }

void main()
{
    const uint t = gl_WorkGroupID.x;
    const int ns = SEL[p.nsel_off + t];
    g_listed = ns >= 0;
    attend(t, gl_WorkGroupID.y, uint(TOK[4u * t + 2u]), g_listed ? uint(ns) : uint(TOK[4u * t + 1u]) + 1u);
}
