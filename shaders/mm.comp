#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 4
// variants: types
/* mm — y[t][r] = W[r]·x[t] (+ bias[r]) (mode 0) or y[t][r] += that (mode 1: the residual) for NT tokens
 * of one row a workgroup: the threads stride over the row's 32-element groups, dequantize each once
 * (deq.glsl) and dot it with every token's activations; partial sums meet in shared memory. Rows are
 * gl_WorkGroupID.x + 32768·gl_WorkGroupID.z (a grid's x is only sure to reach 65535), token blocks y.
 * k is a multiple of the type's block; a float type's may end in a short group, so a weight buffer
 * carries a 128-byte tail the last group's reads may touch. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer WB { uint Wq[]; };
layout(std430, binding = 1) readonly buffer XB { float X[]; };
layout(std430, binding = 2) buffer YB { float Y[]; };
layout(std430, binding = 3) readonly buffer BB { float Bias[]; };
layout(push_constant) uniform PC {
    uint w_off, row_bytes, k, n_rows, n_tok;
    uint x_off, x_stride, y_off, y_stride;
    uint mode, b_off; /* b_off = ~0: no bias */
    uint s_off;       /* Q8 integer forms: the activations' block (d, s) pairs in X (act.comp's mode 1) */
} p;
#include "deq.glsl"
#define NT 8
shared float red[NT][64];
void main()
{
    const uint r = gl_WorkGroupID.x + 32768u * gl_WorkGroupID.z, t0 = gl_WorkGroupID.y * NT;
    const uint tid = gl_LocalInvocationID.x;
    if (r >= p.n_rows)
        return;
    const uint nt = min(uint(NT), p.n_tok - t0);
    float acc[NT];
    for (uint j = 0u; j < NT; j++)
        acc[j] = 0.0;
    const uint row = p.w_off + r * p.row_bytes;
    for (uint g = tid; g < (p.k + 31u) / 32u; g += 64u) {
#if defined(DEQ_Q8_INT_MIN)
        float q[32], dw, mw;
        deq32_q(row, g, q, dw, mw);
#elif defined(DEQ_Q8_INT)
        float q[32], dw;
        deq32_q(row, g, q, dw);
#else
        float v[32];
        deq32(row, g, v);
#endif
        /* a float row's last group may be short (k = 172): its elements past k are not used */
        const uint lim = min(32u, p.k - 32u * g);
        for (uint j = 0u; j < NT; j++) {
            if (j >= nt)
                break;
            const uint xb = p.x_off + (t0 + j) * p.x_stride + 32u * g;
            float s = 0.0;
#if defined(DEQ_Q8_INT_MIN) || defined(DEQ_Q8_INT)
            /* the CPU's block product: (d_w·d_a)·Σ q_w·q_a (+ m_w·s_a), with X holding the activations'
             * Q8 integers and each block's (fp16 d_a, fp16 s_a) at s_off (act.comp's mode 1); the integer
             * sum is exact in f32 (|Σ| < 2^24), so a block's value is rounded where the CPU rounds it */
            float sumi = 0.0;
            for (uint i = 0u; i < 32u; i++)
                sumi += q[i] * X[xb + i];
            const uint sb = p.s_off + 2u * ((t0 + j) * (p.k / 32u) + g);
            s = (dw * X[sb]) * sumi;
#if defined(DEQ_Q8_INT_MIN)
            s += mw * X[sb + 1u];
#endif
#else
            for (uint i = 0u; i < lim; i++)
                s += v[i] * X[xb + i];
#endif
            acc[j] += s;
        }
    }
    for (uint j = 0u; j < NT; j++)
        red[j][tid] = acc[j];
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k)
            for (uint j = 0u; j < NT; j++)
                red[j][tid] += red[j][tid + k];
        barrier();
    }
    if (tid < nt) {
        float v = red[tid][0];
        if (p.b_off != 0xffffffffu)
            v += Bias[p.b_off + r];
        const uint yi = p.y_off + (t0 + tid) * p.y_stride + r;
        Y[yi] = p.mode == 1u ? Y[yi] + v : v;
    }
}
