#version 450
// bind: 2
/* swiglu — g = silu(g) · u elementwise over n tokens' rows of `width` (g and u [n][width]) */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer GB { float G[]; };
layout(std430, binding = 1) readonly buffer UB { float U[]; };
layout(push_constant) uniform PC {
    uint total;
} p;
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const float g = G[i];
    G[i] = g / (1.0 + exp(-g)) * U[i];
}
