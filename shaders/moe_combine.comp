#version 450
// bind: 4
/* moe_combine — x[t] += Σ_k w[t][k] · EY[SLOT[t][k]] for n tokens of k_used experts each: the expert
 * outputs (rows of `width` in expert order) weighted and summed in selection order as the CPU does,
 * ((w0·y0) + w1·y1) + …, with no fused multiply-add (`precise`), then added to the residual. Grid: tokens. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer YB { float EY[]; };
layout(std430, binding = 1) readonly buffer SB { int SLOT[]; };
layout(std430, binding = 2) readonly buffer WB { float W[]; };
layout(std430, binding = 3) buffer XB { float X[]; };
layout(push_constant) uniform PC {
    uint width, k_used;
} p;
void main()
{
    const uint t = gl_WorkGroupID.x, b = t * p.k_used;
    for (uint j = gl_LocalInvocationID.x; j < p.width; j += 64u) {
        precise float a = W[b] * EY[uint(SLOT[b]) * p.width + j];
        for (uint k = 1u; k < p.k_used; k++) {
            precise float q = W[b + k] * EY[uint(SLOT[b + k]) * p.width + j];
            a = a + q;
        }
        X[t * p.width + j] += a;
    }
}
