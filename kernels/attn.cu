/* attn.cu — attention over the KV cache for a batch of query tokens, each
 * seeing cells 0..pos of its own sequence (decode and causal prefill are the
 * same kernel). A block is one (token, query head, split); its warps stride
 * over the split's positions with an online softmax and merge through
 * shared memory. With nsplit > 1 (decode: few blocks, long caches) blocks
 * write partial (o, max, sum) rows and attn_combine merges the splits. */
#include "qtypes.h"

#define EPV 2 /* 4-element vectors per lane: hd <= 4 · EPV · WARP, hd % 4 == 0 */
#define PPS 4 /* positions per warp step: their loads are in flight together */

static __device__ __forceinline__ void ld4(const unsigned char *base, long long off, int f16, float *d)
{
    if (f16) {
        const uint2 u = *(const uint2 *)((const u16 *)base + off);
        d[0] = h2f((u16)(u.x & 0xFFFF)), d[1] = h2f((u16)(u.x >> 16));
        d[2] = h2f((u16)(u.y & 0xFFFF)), d[3] = h2f((u16)(u.y >> 16));
    } else {
        const float4 v = *(const float4 *)((const float *)base + off);
        d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
    }
}

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
    const int nv = a.hd / 4;
    const float *q = a.q + (long long)t * a.q_stride + (long long)h * a.hd;
    float qv[EPV][4], o[EPV][4];
#pragma unroll
    for (int e = 0; e < EPV; e++) {
        const int v = lane + e * WARP;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float x = v < nv ? q[4 * v + i] : 0.0f;
            if (a.kv_f16)
                x = h2f(f2h(x)); /* as the CPU reference rounds q for the f16 cache */
            qv[e][i] = x;
            o[e][i] = 0.0f;
        }
    }
    float m = -INF_F, l = 0.0f;
    const long long base = (long long)a.seq[t] * a.seq_stride + (long long)g * a.hd;
    for (int p = p0 + warp * PPS; p < p1; p += nw * PPS) {
        float s[PPS], vv[PPS][EPV][4];
#pragma unroll
        for (int j = 0; j < PPS; j++) {
            const long long off = base + (long long)min(p + j, p1 - 1) * a.kv_dim;
            s[j] = 0.0f;
#pragma unroll
            for (int e = 0; e < EPV; e++) {
                const int v = lane + e * WARP;
                if (v < nv) {
                    float kk[4];
                    ld4(a.k, off + 4 * v, a.kv_f16, kk);
                    ld4(a.v, off + 4 * v, a.kv_f16, vv[j][e]);
                    s[j] += qv[e][0] * kk[0] + qv[e][1] * kk[1] + qv[e][2] * kk[2] + qv[e][3] * kk[3];
                } else {
                    vv[j][e][0] = vv[j][e][1] = vv[j][e][2] = vv[j][e][3] = 0.0f;
                }
            }
        }
        float mn = m;
#pragma unroll
        for (int j = 0; j < PPS; j++) {
            s[j] = p + j < p1 ? warp_sum(s[j]) * a.scale : -INF_F;
            mn = fmaxf(mn, s[j]);
        }
        const float corr = expf(m - mn);
        float pe[PPS];
        l *= corr;
#pragma unroll
        for (int j = 0; j < PPS; j++) {
            pe[j] = p + j < p1 ? expf(s[j] - mn) : 0.0f;
            l += pe[j];
        }
#pragma unroll
        for (int e = 0; e < EPV; e++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                float acc = o[e][i] * corr;
#pragma unroll
                for (int j = 0; j < PPS; j++)
                    acc += pe[j] * vv[j][e][i];
                o[e][i] = acc;
            }
        m = mn;
    }
    if (lane == 0)
        sm_m[warp] = m, sm_l[warp] = l;
#pragma unroll
    for (int e = 0; e < EPV; e++) {
        const int v = lane + e * WARP;
        if (v < nv)
#pragma unroll
            for (int i = 0; i < 4; i++)
                sm_o[warp][4 * v + i] = o[e][i];
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
