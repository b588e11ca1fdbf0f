#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 3
/* hc_combine — a hyper-connection write-back (cpu_hc_combine): x[t][s·width + i] += a[t][i] · w_s with
 * w_s = 2·sigmoid(j[t][s] · inv) (inv the host's 1/hc), each step rounded as the CPU rounds it and no
 * fused multiply-add. Rows at x_off + t·x_stride (a and j likewise; j holds hc logits a token). An
 * invocation an element of the hc streams; the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer XB { float X[]; };
layout(std430, binding = 1) readonly buffer AB { float A[]; };
layout(std430, binding = 2) readonly buffer JB { float J[]; };
layout(push_constant) uniform PC {
    uint x_off, x_stride, a_off, a_stride, j_off, j_stride;
    uint width, hc, total; /* total: n · hc · width */
    float inv;
} p;
#include "fmath.glsl"
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint c = i % p.width, ts = i / p.width, t = ts / p.hc, s = ts % p.hc;
    precise float z = J[p.j_off + t * p.j_stride + s] * p.inv;
    precise float w = 2.0 * sigmoid_f(z);
    const uint xi = p.x_off + t * p.x_stride + s * p.width + c;
    precise float v = X[xi] + A[p.a_off + t * p.a_stride + c] * w;
    X[xi] = v;
}
