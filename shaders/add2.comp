#version 450
// bind: 3
/* add2 — x ← x + (g + c) elementwise over n rows of `width` (cpu_hybrid.c ple_add_task: PLE's gated value
 * and conv output added into the wide residual, g + c first as the CPU). Rows at x_off + t·x_stride (g
 * and c likewise). An invocation an element; the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer XB { float X[]; };
layout(std430, binding = 1) readonly buffer GB { float G[]; };
layout(std430, binding = 2) readonly buffer CB { float C[]; };
layout(push_constant) uniform PC {
    uint x_off, x_stride, g_off, g_stride, c_off, c_stride;
    uint width, total; /* total: n · width */
} p;
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint t = i / p.width, j = i % p.width, xi = p.x_off + t * p.x_stride + j;
    precise float s = G[p.g_off + t * p.g_stride + j] + C[p.c_off + t * p.c_stride + j];
    precise float v = X[xi] + s;
    X[xi] = v;
}
