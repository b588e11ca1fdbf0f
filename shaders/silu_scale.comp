#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 1
/* silu_scale — x ← silu(x · scale) in place over n rows of `width` (row t at x_off + t·x_stride): the
 * hyper-connection gate MLP's hidden layer (cpu_hc_mix: ops_silu(lo · (1/hc))), the product rounded to
 * f32 first and the SiLU as ops_silu computes it (fmath.glsl). An invocation an element; the index is
 * x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer XB { float X[]; };
layout(push_constant) uniform PC {
    uint x_off, x_stride, width, total; /* total: n · width */
    float scale;
} p;
#include "fmath.glsl"
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint xi = p.x_off + (i / p.width) * p.x_stride + i % p.width;
    precise float v = X[xi] * p.scale;
    X[xi] = silu_f(v);
}
