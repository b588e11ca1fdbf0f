#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 2
/* gate — y ← y · act(z) elementwise (the Gated DeltaNet's output gate, silu or sigmoid, and gated
 * attention's sigmoid) over n tokens of hpt heads of `width`: y head h of token t at y_off + t·y_stride +
 * h·y_hs, z's at z_off + t·z_stride + h·z_hs (z may lie in y's buffer, beside y). act = sigmoid when
 * `sigmoid`, else silu, as gdn_sigmoid / ops_silu compute them (fmath.glsl). An invocation an element;
 * the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer YB { float Y[]; };
layout(std430, binding = 1) readonly buffer ZB { float Z[]; };
layout(push_constant) uniform PC {
    uint y_off, y_stride, y_hs;
    uint z_off, z_stride, z_hs;
    uint width, hpt, total; /* total: n · hpt · width */
    uint sigmoid;
} p;
#include "fmath.glsl"
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint j = i % p.width, th = i / p.width, t = th / p.hpt, h = th % p.hpt;
    const uint yi = p.y_off + t * p.y_stride + h * p.y_hs + j;
    const float z = Z[p.z_off + t * p.z_stride + h * p.z_hs + j];
    precise float v = Y[yi] * (p.sigmoid != 0u ? sigmoid_f(z) : silu_f(z));
    Y[yi] = v;
}
