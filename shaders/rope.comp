#version 450
// bind: 2
/* rope — rotate n_head heads of each token in place by the host's cos/sin table (ops_rope_cache:
 * cs[t·n_rot + 2i] = cos, + 1 = sin of pair i); neox pairs (i, i + n_rot/2), else (2i, 2i + 1), as
 * ops_rope_apply. Grid (token, head); dims ≥ n_rot stay. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer XB { float X[]; };
layout(std430, binding = 1) readonly buffer CB { float CS[]; };
layout(push_constant) uniform PC {
    uint x_off, x_stride, hd, n_rot, neox;
} p;
void main()
{
    const uint t = gl_WorkGroupID.x, h = gl_WorkGroupID.y;
    const uint xb = p.x_off + t * p.x_stride + h * p.hd, cb = t * p.n_rot;
    const uint half_ = p.n_rot / 2u;
    for (uint i = gl_LocalInvocationID.x; i < half_; i += 64u) {
        const float c = CS[cb + 2u * i], s = CS[cb + 2u * i + 1u];
        const uint i0 = p.neox != 0u ? i : 2u * i, i1 = p.neox != 0u ? i + half_ : 2u * i + 1u;
        const float x0 = X[xb + i0], x1 = X[xb + i1];
        X[xb + i0] = x0 * c - x1 * s;
        X[xb + i1] = x0 * s + x1 * c;
    }
}
