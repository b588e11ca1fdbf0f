/* attn.cu — attention over the KV cache for a batch of query tokens, each
 * seeing cells 0..pos of its own sequence (decode and causal prefill are the
 * same kernel). A block is one (token, query head, split); its warps stride
 * over the split's positions with an online softmax and merge through
 * shared memory. With nsplit > 1 (decode: few blocks, long caches) blocks
 * write partial (o, max, sum) rows and attn_combine merges the splits. */
#include "qtypes.h"

#define EPL 8 /* head elements per lane: hd <= EPL · WARP */

extern "C" __global__ void __launch_bounds__(256) attn(const struct attn_args a)
{
    __shared__ float sm_m[8], sm_l[8];
    __shared__ float sm_o[8][256];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const int g = h / (a.n_head / a.n_head_kv);
    const int n_kv = a.pos[t] + 1;
    const int chunk = (n_kv + a.nsplit - 1) / a.nsplit;
    const int p0 = blockIdx.y * chunk, p1 = min(n_kv, p0 + chunk);
    const float *q = a.q + (long long)t * a.q_stride + (long long)h * a.hd;
    float qv[EPL], o[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int d = lane + e * WARP;
        float v = d < a.hd ? q[d] : 0.0f;
        if (a.kv_f16)
            v = h2f(f2h(v)); /* as the CPU reference rounds q for the f16 cache */
        qv[e] = v;
        o[e] = 0.0f;
    }
    float m = -INF_F, l = 0.0f;
    const long long base = (long long)a.seq[t] * a.seq_stride + (long long)g * a.hd;
    /* two positions per step: both rows' loads are in flight before the first reduction */
    for (int p = p0 + warp; p < p1; p += 2 * nw) {
        const bool two = p + nw < p1;
        float s[2] = { 0.0f, 0.0f };
        float vv[2][EPL];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const long long off = base + (long long)(two || j == 0 ? p + j * nw : p) * a.kv_dim;
            if (a.kv_f16) {
                const u16 *K = (const u16 *)a.k + off, *V = (const u16 *)a.v + off;
#pragma unroll
                for (int e = 0; e < EPL; e++) {
                    const int d = lane + e * WARP;
                    if (d < a.hd) {
                        s[j] += qv[e] * h2f(K[d]);
                        vv[j][e] = h2f(V[d]);
                    } else {
                        vv[j][e] = 0.0f;
                    }
                }
            } else {
                const float *K = (const float *)a.k + off, *V = (const float *)a.v + off;
#pragma unroll
                for (int e = 0; e < EPL; e++) {
                    const int d = lane + e * WARP;
                    if (d < a.hd) {
                        s[j] += qv[e] * K[d];
                        vv[j][e] = V[d];
                    } else {
                        vv[j][e] = 0.0f;
                    }
                }
            }
        }
        s[0] = warp_sum(s[0]) * a.scale;
        s[1] = warp_sum(s[1]) * a.scale;
        if (!two)
            s[1] = -INF_F;
        const float mn = fmaxf(m, fmaxf(s[0], s[1]));
        const float corr = expf(m - mn), pe0 = expf(s[0] - mn), pe1 = two ? expf(s[1] - mn) : 0.0f;
        l = l * corr + pe0 + pe1;
#pragma unroll
        for (int e = 0; e < EPL; e++)
            o[e] = o[e] * corr + pe0 * vv[0][e] + pe1 * vv[1][e];
        m = mn;
    }
    if (lane == 0)
        sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
    for (int e = 0; e < EPL; e++) {
        const int d = lane + e * WARP;
        if (d < a.hd)
            sm_o[warp][d] = o[e];
    }
    __syncthreads();
    float M = -INF_F;
    for (int w = 0; w < nw; w++)
        M = fmaxf(M, sm_m[w]);
    float L = 0.0f;
    for (int w = 0; w < nw; w++)
        if (sm_l[w] > 0.0f)
            L += sm_l[w] * expf(sm_m[w] - M);
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float O = 0.0f;
        for (int w = 0; w < nw; w++)
            if (sm_l[w] > 0.0f)
                O += sm_o[w][d] * expf(sm_m[w] - M);
        if (a.nsplit == 1) {
            a.o[(long long)t * a.o_stride + (long long)h * a.hd + d] = L > 0.0f ? O / L : 0.0f;
        } else {
            float *pp = a.part + ((long long)blockIdx.x * a.nsplit + blockIdx.y) * (a.hd + 2);
            pp[d] = O;
            if (d == 0)
                pp[a.hd] = M, pp[a.hd + 1] = L;
        }
    }
}

/* Merge the nsplit partials of each (token, head). Grid: n · n_head; blockDim >= hd (== hd with oq). */
extern "C" __global__ void attn_combine(const struct attn_args a)
{
    const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const float *pp = a.part + (long long)blockIdx.x * a.nsplit * (a.hd + 2);
    float M = -INF_F;
    for (int s = 0; s < a.nsplit; s++)
        if (pp[s * (a.hd + 2) + a.hd + 1] > 0.0f)
            M = fmaxf(M, pp[s * (a.hd + 2) + a.hd]);
    float L = 0.0f;
    for (int s = 0; s < a.nsplit; s++) {
        const float ls = pp[s * (a.hd + 2) + a.hd + 1];
        if (ls > 0.0f)
            L += ls * expf(pp[s * (a.hd + 2) + a.hd] - M);
    }
    for (int d = threadIdx.x; d < a.hd; d += blockDim.x) {
        float O = 0.0f;
        for (int s = 0; s < a.nsplit; s++) {
            const float ls = pp[s * (a.hd + 2) + a.hd + 1];
            if (ls > 0.0f)
                O += pp[s * (a.hd + 2) + d] * expf(pp[s * (a.hd + 2) + a.hd] - M);
        }
        const float v = L > 0.0f ? O / L : 0.0f;
        a.o[(long long)t * a.o_stride + (long long)h * a.hd + d] = v;
        if (a.oq) /* blockDim == hd: every lane of each 32-group is here */
            q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2, h * a.hd + d);
    }
}
