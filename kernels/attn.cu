/* attn.cu — attention over the KV cache for a batch of query tokens, each
 * seeing cells 0..pos of its own sequence (decode and causal prefill are the
 * same kernel). A block is one (token, query head, split); its warps stride
 * over the split's positions with an online softmax and merge through
 * shared memory. With nsplit > 1 (decode: few blocks, long caches) a token
 * uses up to nsplit splits, one per ATTN_SPLIT_MIN cached positions (attn_split.h); with more
 * than one its blocks write partial (o, max, sum) rows, merged by the
 * head's last split block (a.cnt: counted with an atomic, saving a launch)
 * or else by attn_combine; with one the block writes o (and its q8 copy)
 * itself. */
#include "attn_split.h"
#include "qtypes.h"

#define EPL 8 /* head elements per lane: hd <= EPL · WARP */

/* Merge the ns partial rows of (token t, head h) into o and its q8 copy. blockDim >= ns (a multiple of
 * hd: blockDim / hd groups of threads share the splits); with oq, hd % 32 == 0 (the lanes of each 32-group are in one warp and take the same iterations). Partials
 * may come from other blocks of this grid: read past L1 (ld_cg). */
static __device__ void attn_merge(const struct attn_args &a, int t, int h, int ns)
{
    __shared__ float sw[256];
    __shared__ float red[32];
    const float *pp = a.part + ((long long)t * a.n_head + h) * a.nsplit * (a.hd + 2);
    const int s = threadIdx.x;
    const float ls = s < ns ? ld_cg(pp + s * (a.hd + 2) + a.hd + 1) : 0.0f;
    const float ms = s < ns && ls > 0.0f ? ld_cg(pp + s * (a.hd + 2) + a.hd) : -INF_F;
    const float M = block_max(ms, red);
    const float ws = ls > 0.0f ? expf(ms - M) : 0.0f;
    const float L = block_sum(ls * ws, red);
    if (s < ns)
        sw[s] = ws;
    __syncthreads();
    /* ng groups of hd threads, each summing every ng-th split, eight partials' loads in flight at a time
     * (one after another, each waited for, the merge of 128 splits took 17.7 µs a layer) */
    const int ng = a.hd % 32 == 0 && (int)blockDim.x % a.hd == 0 ? min((int)blockDim.x / a.hd, 1024 / a.hd) : 1;
    __shared__ float so[1024];
    for (int d0 = 0; d0 < a.hd; d0 += ng == 1 ? (int)blockDim.x : a.hd) {
        const int q = ng == 1 ? 0 : (int)threadIdx.x / a.hd, d = d0 + (ng == 1 ? (int)threadIdx.x : (int)threadIdx.x % a.hd);
        float O = 0.0f;
        if (d < a.hd && q < ng) {
            int k = q;
            for (; k + 7 * ng < ns; k += 8 * ng) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[j] = ld_cg(pp + (k + j * ng) * (a.hd + 2) + d);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    O += sw[k + j * ng] > 0.0f ? v[j] * sw[k + j * ng] : 0.0f;
            }
            for (; k < ns; k += ng)
                if (sw[k] > 0.0f)
                    O += ld_cg(pp + k * (a.hd + 2) + d) * sw[k];
        }
        if (ng > 1) { /* the groups' sums, added in group order by the first group */
            if (q < ng)
                so[q * a.hd + d] = O;
            __syncthreads();
            if (q == 0)
                for (int i = 1; i < ng; i++)
                    O += so[i * a.hd + d];
        }
        if (q == 0 && d < a.hd) {
            const float v = L > 0.0f ? O / L : 0.0f;
            a.o[(long long)t * a.o_stride + (long long)h * a.hd + d] = v;
            if (a.oq)
                q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2, h * a.hd + d);
        }
    }
    __syncthreads(); /* sw and red are reused by the next head's merge */
}

/* After this block wrote its partials: whether it is the last of the ns split blocks of counter i
 * (which it then resets for the next launch). Every thread of the block gets the answer. */
static __device__ __forceinline__ bool attn_last_split(const struct attn_args &a, long long i, int ns)
{
    __shared__ int last;
    __threadfence(); /* this block's partials are visible before its count */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(a.cnt + i, 1) + 1 == ns;
        if (last)
            a.cnt[i] = 0;
    }
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

extern "C" __global__ void __launch_bounds__(256) attn(const struct attn_args a)
{
    __shared__ float sm_m[8], sm_l[8];
    __shared__ float sm_o[8][256];
    PDL_ENTER();
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const int g = h / (a.n_head / a.n_head_kv);
    const int n_kv = a.pos[t] + 1;
    const int ns = attn_splits(a, n_kv);
    if ((int)blockIdx.y >= ns)
        return;
    const int chunk = (n_kv + ns - 1) / ns;
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
        if (ns == 1) {
            const float v = L > 0.0f ? O / L : 0.0f;
            a.o[(long long)t * a.o_stride + (long long)h * a.hd + d] = v;
            if (a.oq) /* hd a multiple of WARP: whole warps are here */
                q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2,
                         h * a.hd + d);
        } else {
            float *pp = a.part + ((long long)blockIdx.x * a.nsplit + blockIdx.y) * (a.hd + 2);
            pp[d] = O;
            if (d == 0)
                pp[a.hd] = M, pp[a.hd + 1] = L;
        }
    }
    if (ns > 1 && a.cnt && attn_last_split(a, blockIdx.x, ns))
        attn_merge(a, t, h, ns);
}

/* Merge the splits of each (token, head) that used more than one. Grid: n · n_head; blockDim >= hd
 * (== hd with oq), and >= the splits. The split weights exp(m_s - M) / L are computed once, in shared memory. */
extern "C" __global__ void attn_combine(const struct attn_args a)
{
    PDL_ENTER();
    const int t = blockIdx.x / a.n_head, h = blockIdx.x % a.n_head;
    const int ns = attn_splits(a, a.pos[t] + 1);
    if (ns == 1 || a.cnt)
        return; /* attn wrote o, or its last split block merged */
    attn_merge(a, t, h, ns);
}

#define GQA_MAX 8 /* query heads per KV head handled by attn_gqa */

/* attn for the G = n_head / n_head_kv query heads that share one KV head (G <= GQA_MAX,
 * G · hd <= 1024): a block is one (token, KV head, split) of 256 threads, and each K/V row is read
 * once for all G heads. Same online softmax, splits and outputs (o and its q8 copy, or partials per
 * query head for attn_combine) as attn. Grid: (n · n_head_kv, nsplit). */
extern "C" __global__ void __launch_bounds__(256) attn_gqa(const struct attn_args a)
{
    __shared__ float sm_m[8][GQA_MAX], sm_l[8][GQA_MAX];
    __shared__ float sm_o[8][1024];
    PDL_ENTER();
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int G = a.n_head / a.n_head_kv;
    const int t = blockIdx.x / a.n_head_kv, g = blockIdx.x % a.n_head_kv;
    const int n_kv = a.pos[t] + 1;
    const int ns = attn_splits(a, n_kv);
    if ((int)blockIdx.y >= ns)
        return;
    const int chunk = (n_kv + ns - 1) / ns;
    const int p0 = blockIdx.y * chunk, p1 = min(n_kv, p0 + chunk);
    float qv[GQA_MAX][EPL], o[GQA_MAX][EPL], m[GQA_MAX], l[GQA_MAX];
#pragma unroll
    for (int i = 0; i < GQA_MAX; i++) {
        const float *q = a.q + (long long)t * a.q_stride + (long long)(g * G + i) * a.hd;
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const int d = lane + e * WARP;
            float v = i < G && d < a.hd ? q[d] : 0.0f;
            if (a.kv_f16)
                v = h2f(f2h(v)); /* as the CPU reference rounds q for the f16 cache */
            qv[i][e] = v;
            o[i][e] = 0.0f;
        }
        m[i] = -INF_F;
        l[i] = 0.0f;
    }
    const long long base = (long long)a.seq[t] * a.seq_stride + (long long)g * a.hd;
    for (int p = p0 + warp; p < p1; p += 2 * nw) {
        const bool two = p + nw < p1;
        float kk[2][EPL], vv[2][EPL];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const long long off = base + (long long)(two || j == 0 ? p + j * nw : p) * a.kv_dim;
#pragma unroll
            for (int e = 0; e < EPL; e++) {
                const int d = lane + e * WARP;
                if (d < a.hd) {
                    if (a.kv_f16) {
                        kk[j][e] = h2f(((const u16 *)a.k)[off + d]);
                        vv[j][e] = h2f(((const u16 *)a.v)[off + d]);
                    } else {
                        kk[j][e] = ((const float *)a.k)[off + d];
                        vv[j][e] = ((const float *)a.v)[off + d];
                    }
                } else {
                    kk[j][e] = vv[j][e] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int i = 0; i < GQA_MAX; i++) {
            if (i >= G)
                break;
            float s[2] = { 0.0f, 0.0f };
#pragma unroll
            for (int e = 0; e < EPL; e++) {
                s[0] += qv[i][e] * kk[0][e];
                s[1] += qv[i][e] * kk[1][e];
            }
            s[0] = warp_sum(s[0]) * a.scale;
            s[1] = warp_sum(s[1]) * a.scale;
            if (!two)
                s[1] = -INF_F;
            const float mn = fmaxf(m[i], fmaxf(s[0], s[1]));
            const float corr = expf(m[i] - mn), pe0 = expf(s[0] - mn), pe1 = two ? expf(s[1] - mn) : 0.0f;
            l[i] = l[i] * corr + pe0 + pe1;
#pragma unroll
            for (int e = 0; e < EPL; e++)
                o[i][e] = o[i][e] * corr + pe0 * vv[0][e] + pe1 * vv[1][e];
            m[i] = mn;
        }
    }
#pragma unroll
    for (int i = 0; i < GQA_MAX; i++) {
        if (i >= G)
            break;
        if (lane == 0)
            sm_m[warp][i] = m[i], sm_l[warp][i] = l[i];
#pragma unroll
        for (int e = 0; e < EPL; e++) {
            const int d = lane + e * WARP;
            if (d < a.hd)
                sm_o[warp][i * a.hd + d] = o[i][e];
        }
    }
    __syncthreads();
    /* idx = i·hd + d runs over the group's heads in order: o of head g·G + i at (g·G)·hd + idx */
    for (int idx = threadIdx.x; idx < G * a.hd; idx += blockDim.x) {
        const int i = idx / a.hd, d = idx % a.hd, h = g * G + i;
        float M = -INF_F;
        for (int w = 0; w < nw; w++)
            M = fmaxf(M, sm_m[w][i]);
        float L = 0.0f, O = 0.0f;
        for (int w = 0; w < nw; w++)
            if (sm_l[w][i] > 0.0f) {
                const float c = expf(sm_m[w][i] - M);
                L += sm_l[w][i] * c;
                O += sm_o[w][idx] * c;
            }
        if (ns == 1) {
            const float v = L > 0.0f ? O / L : 0.0f;
            a.o[(long long)t * a.o_stride + (long long)h * a.hd + d] = v;
            if (a.oq) /* hd a multiple of WARP: whole warps are here */
                q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2,
                         h * a.hd + d);
        } else {
            float *pp = a.part + (((long long)t * a.n_head + h) * a.nsplit + blockIdx.y) * (a.hd + 2);
            pp[d] = O;
            if (d == 0)
                pp[a.hd] = M, pp[a.hd + 1] = L;
        }
    }
    if (ns > 1 && a.cnt && attn_last_split(a, blockIdx.x, ns))
        for (int i = 0; i < G; i++)
            attn_merge(a, t, g * G + i, ns);
}
