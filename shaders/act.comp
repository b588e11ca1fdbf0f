#version 450
#extension GL_GOOGLE_include_directive : require
// bind: 2
/* act — activations rounded as the CPU rounds them for a weight type's dot product (its vec_dot type,
 * quant_act_row), kept as f32: XR[t][i] = the value the quantized activation stands for.
 *   mode 1  Q8_0 / Q8_1, kept as integers: per 32 elements d = amax/127, q = RNE(x·127/amax);
 *           XR[t][i] = q, and block b's (fp16(d), fp16(d·Σq)) (d before its f16 rounding) at
 *           XR[s_off + 2·(t·k/32 + b)]: the products take the CPU's integer form per block (mm.comp)
 *   mode 2  Q8_K: per 256 elements the largest-magnitude x (first of ties) maps to −127,
 *           q = min(RNE(x·iscale), 127) with iscale = −127/x_max; q / iscale
 *   mode 3  F16, mode 4 BF16: x rounded to nearest even
 * So mm.comp's products see the CPU's activation rounding; what differs is only the order of the sums. Rows of k elements from X at x_off + t·x_stride into XR at t·k. Grid (256-element chunk, token). */
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer XB { float X[]; };
layout(std430, binding = 1) buffer RB { float XR[]; };
layout(push_constant) uniform PC {
    uint k, x_off, x_stride, mode, s_off;
} p;
#include "half.glsl"
/* the CPU divides with IEEE rounding: a quotient an ulp off moves x·127/amax across a rounding tie
 * (q4_0 embeddings normed by unit weights land on them: x / amax = 1/2) */
#include "exact.glsl"
shared float ax[256];
shared float qv[256];
shared float xmax;

float round_bf16(float f)
{
    const uint x = floatBitsToUint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return f;
    return uintBitsToFloat((x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u);
}

void main()
{
    const uint t = gl_WorkGroupID.y, i = gl_LocalInvocationID.x, j = gl_WorkGroupID.x * 256u + i;
    const bool in_row = j < p.k;
    const float x = in_row ? X[p.x_off + t * p.x_stride + j] : 0.0;
    float y = x;
    if (p.mode == 1u || p.mode == 2u) { /* block modes: k is a multiple of the block */
        ax[i] = abs(x);
        barrier();
        if (p.mode == 1u) {
            const uint g0 = i & ~31u;
            float amax = 0.0;
            for (uint u = 0u; u < 32u; u++)
                amax = max(amax, ax[g0 + u]);
            const float d = div_rn(amax, 127.0), id = amax != 0.0 ? div_rn(127.0, amax) : 0.0;
            const float q = roundEven(x * id);
            y = q;
            qv[i] = q;
            barrier();
            if (i == g0 && in_row) {
                float sum = 0.0; /* integers below 2^24: exact in any order */
                for (uint u = 0u; u < 32u; u++)
                    sum += qv[g0 + u];
                const uint sb = p.s_off + 2u * (t * (p.k / 32u) + j / 32u);
                XR[sb] = round_h(d);
                XR[sb + 1u] = round_h(d * sum);
            }
        } else {
            if (i == 0u) {
                float amax = 0.0;
                uint at = 0u;
                for (uint u = 0u; u < 256u; u++)
                    if (ax[u] > amax) {
                        amax = ax[u];
                        at = u;
                    }
                xmax = amax == 0.0 ? 0.0 : X[p.x_off + t * p.x_stride + gl_WorkGroupID.x * 256u + at];
            }
            barrier();
            if (xmax == 0.0) {
                y = 0.0;
            } else {
                const float iscale = div_rn(-127.0, xmax);
                y = min(roundEven(iscale * x), 127.0) * div_rn(1.0, iscale);
            }
        }
    } else if (p.mode == 3u) {
        y = round_h(x);
    } else if (p.mode == 4u) {
        y = round_bf16(x);
    }
    if (in_row)
        XR[t * p.k + j] = y;
}
