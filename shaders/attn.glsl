/* attn.glsl — the attention of one query head of one token over a list of its sequence's cells, shared by
 * attn.comp (the first pos + 1 cells) and attn_sel.comp (the cells a selection names): the arithmetic of
 * the CPU's ops_attn, s_p = (q·K_p)·scale, softmax (max subtracted, 1/Σ as one factor), o = Σ p·V_p; with
 * an f16 cache q is rounded to f16 for q·K and the probabilities to f16 for p·V. Three passes over K (max,
 * sum, probabilities) instead of a stored score row, so any context length fits. The includer declares
 * the push constants p (q_off, q_stride, o_off, o_stride, n_head, n_head_kv, hd, kv_dim, n_ctx, f16,
 * scale first) and defines cell_at(t, j), the cache cell of token t's j-th attended position, so that
 * both shaders do the same operations in the same order. A workgroup of 64 a (token, head). */
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QB { float Q[]; };
layout(std430, binding = 1) readonly buffer KB { uint KC[]; };
layout(std430, binding = 2) readonly buffer VB { uint VC[]; };
layout(std430, binding = 3) readonly buffer TB { int TOK[]; };
layout(std430, binding = 4) buffer OB { float O[]; };
#include "half.glsl"
#define MAX_HD 256
shared float qs[MAX_HD];
shared float ps[64];
shared float red[64];

uint cell_at(uint t, uint j);

float kv_at(uint i, bool v)
{
    if (p.f16 != 0u) {
        const uint w = v ? VC[i >> 1] : KC[i >> 1];
        return f_from_h((i & 1u) != 0u ? w >> 16 : w);
    }
    return uintBitsToFloat(v ? VC[i] : KC[i]);
}

float score(uint base, uint cell)
{
    float s = 0.0;
    const uint b = base + cell * p.kv_dim;
    for (uint d = 0u; d < p.hd; d++)
        s += qs[d] * kv_at(b + d, false);
    return s * p.scale;
}

float reduce(float v, bool is_max)
{
    const uint tid = gl_LocalInvocationID.x;
    barrier();
    red[tid] = v;
    barrier();
    for (uint k = 32u; k > 0u; k >>= 1) {
        if (tid < k)
            red[tid] = is_max ? max(red[tid], red[tid + k]) : red[tid] + red[tid + k];
        barrier();
    }
    return red[0];
}

/* head h of token t over cells cell_at(t, 0 … n_kv − 1) of sequence seq, into O */
void attend(uint t, uint h, uint seq, uint n_kv)
{
    const uint tid = gl_LocalInvocationID.x;
    const uint kvh = h / (p.n_head / p.n_head_kv);
    const uint base = seq * p.n_ctx * p.kv_dim + kvh * p.hd;
    const uint qb = p.q_off + t * p.q_stride + h * p.hd;
    for (uint d = tid; d < p.hd; d += 64u)
        qs[d] = p.f16 != 0u ? round_h(Q[qb + d]) : Q[qb + d];
    barrier();
    float m = -1.0 / 0.0;
    for (uint j = tid; j < n_kv; j += 64u)
        m = max(m, score(base, cell_at(t, j)));
    m = reduce(m, true);
    float l = 0.0;
    for (uint j = tid; j < n_kv; j += 64u)
        l += exp(score(base, cell_at(t, j)) - m);
    l = reduce(l, false);
    const float inv = 1.0 / l;
    float acc[MAX_HD / 64];
    for (uint i = 0u; i < MAX_HD / 64u; i++)
        acc[i] = 0.0;
    for (uint c = 0u; c < n_kv; c += 64u) {
        const uint j = c + tid;
        float pr = j < n_kv ? exp(score(base, cell_at(t, j)) - m) * inv : 0.0;
        ps[tid] = p.f16 != 0u ? round_h(pr) : pr;
        barrier();
        const uint nc = min(64u, n_kv - c);
        for (uint jj = 0u; jj < nc; jj++) {
            const uint vb = base + cell_at(t, c + jj) * p.kv_dim;
            for (uint i = 0u; i < MAX_HD / 64u; i++) {
                const uint d = tid + 64u * i;
                if (d < p.hd)
                    acc[i] += ps[jj] * kv_at(vb + d, true);
            }
        }
        barrier();
    }
    const uint ob = p.o_off + t * p.o_stride + h * p.hd;
    for (uint i = 0u; i < MAX_HD / 64u; i++) {
        const uint d = tid + 64u * i;
        if (d < p.hd)
            O[ob + d] = acc[i];
    }
}
