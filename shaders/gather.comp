#version 450
// bind: 3
/* gather — DST row i = SRC row IDX[idx_off + i] (rows of `width` floats at src_off + r·src_stride and
 * dst_off + i·dst_stride):
 * a MoE layer's input rows in expert order. A workgroup a row; the grid is rows x + 65535·y. */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer SB { float SRC[]; };
layout(std430, binding = 1) readonly buffer IB { int IDX[]; };
layout(std430, binding = 2) buffer DB { float DST[]; };
layout(push_constant) uniform PC {
    uint width, src_off, src_stride, dst_off, dst_stride, idx_off, rows;
} p;
void main()
{
    const uint i = gl_WorkGroupID.x + gl_WorkGroupID.y * 65535u;
    if (i >= p.rows)
        return;
    const uint s = p.src_off + uint(IDX[p.idx_off + i]) * p.src_stride, d = p.dst_off + i * p.dst_stride;
    for (uint j = gl_LocalInvocationID.x; j < p.width; j += 64u)
        DST[d + j] = SRC[s + j];
}
