#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 6
/* gdn_rec — the delta rule token by token (gdn_recurrent_ref) for one (sequence group, value head vh) a
 * workgroup: grid (H_v, groups). Invocation b (and b + 64) owns value column b: its state row S[b][0 … d)
 * at state_off + seq·state_stride + vh·d·d + b·d. For each of the group's rows r, in batch order:
 *   S[b] ← e^g · S[b];  u = Σ_a S[b][a]·k[a];  δ = (v[b] − u)·β;  S[b] += k·δ;  o[b] = (Σ_a S[b][a]·q[a])·scale
 * in the CPU's order, the sums over a in turn and without fused multiply-adds, so a result differs from the
 * CPU's only through e^g (fmath.glsl, within about an ulp of expf). Row r of Y holds q (H_k heads of d),
 * then k (H_k heads), then v (H_v heads) at y_off + r·y_stride; value head vh reads key head vh % H_k;
 * β and g at b_off + r·b_stride + vh and g_off + r·g_stride + vh; o at o_off + r·o_stride + vh·d.
 * The row's q and k are staged in shared memory; the state is read and written in the buffer each token.
 * d ≤ 128. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer YB { float Y[]; };
layout(std430, binding = 1) readonly buffer BB { float BETA[]; };
layout(std430, binding = 2) readonly buffer GB { float G[]; };
layout(std430, binding = 3) buffer OB { float O[]; };
layout(std430, binding = 4) buffer SB { float S[]; };
layout(std430, binding = 5) readonly buffer RB { int GRP[]; };
layout(push_constant) uniform PC {
    uint y_off, y_stride, b_off, b_stride, g_off, g_stride, o_off, o_stride;
    uint state_off, state_stride;
    uint rows_off, grp_off;
    uint n_k_heads, d;
    float scale;
} p;
#include "fmath.glsl"
shared float qs[128], ks[128];
void main()
{
    const uint vh = gl_WorkGroupID.x, gi = gl_WorkGroupID.y, tid = gl_LocalInvocationID.x, d = p.d;
    const uint kh = vh % p.n_k_heads;
    const uint seq = uint(GRP[p.grp_off + 4u * gi]), start = uint(GRP[p.grp_off + 4u * gi + 1u]);
    const uint len = uint(GRP[p.grp_off + 4u * gi + 2u]);
    const uint sb = p.state_off + seq * p.state_stride + vh * d * d;
    const uint q0 = kh * d, k0 = (p.n_k_heads + kh) * d, v0 = 2u * p.n_k_heads * d + vh * d;
    for (uint t = 0u; t < len; t++) { /* len is the workgroup's own: the barriers are in uniform flow */
        const uint r = uint(GRP[p.rows_off + start + t]), yb = p.y_off + r * p.y_stride;
        barrier(); /* the previous row's q and k are no longer read */
        for (uint a = tid; a < d; a += 64u) {
            qs[a] = Y[yb + q0 + a];
            ks[a] = Y[yb + k0 + a];
        }
        barrier();
        const float beta = BETA[p.b_off + r * p.b_stride + vh];
        const float decay = exp_f(G[p.g_off + r * p.g_stride + vh]);
        for (uint b = tid; b < d; b += 64u) {
            const uint sr = sb + b * d;
            precise float u = 0.0;
            for (uint a = 0u; a < d; a++) {
                precise float s = S[sr + a] * decay;
                S[sr + a] = s;
                precise float sk = s * ks[a];
                u = u + sk;
            }
            precise float dl = (Y[yb + v0 + b] - u) * beta;
            precise float y = 0.0;
            for (uint a = 0u; a < d; a++) {
                precise float kd = ks[a] * dl;
                precise float s = S[sr + a] + kd;
                S[sr + a] = s;
                precise float sq = s * qs[a];
                y = y + sq;
            }
            precise float ob = y * p.scale;
            O[p.o_off + r * p.o_stride + vh * d + b] = ob;
        }
    }
}
