#version 450
// bind: 2
/* copy_heads — DST head h of token t (dst_off + t·dst_stride + h·dst_hs) = SRC head h (src_off +
 * t·src_stride + h·src_hs), `width` floats, hpt heads, n tokens: gated attention's queries out of their
 * interleaved [q | gate] heads. An invocation an element; the index is x + 65535·64·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer SB { float SRC[]; };
layout(std430, binding = 1) buffer DB { float DST[]; };
layout(push_constant) uniform PC {
    uint src_off, src_stride, src_hs;
    uint dst_off, dst_stride, dst_hs;
    uint width, hpt, total; /* total: n · hpt · width */
} p;
void main()
{
    const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * 65535u * 64u;
    if (i >= p.total)
        return;
    const uint j = i % p.width, th = i / p.width, t = th / p.hpt, h = th % p.hpt;
    DST[p.dst_off + t * p.dst_stride + h * p.dst_hs + j] = SRC[p.src_off + t * p.src_stride + h * p.src_hs + j];
}
