/* fattn.cu — causal attention of a prompt batch on tensor cores (NVIDIA
 * sm_80+), flash-attention style: a block takes 64 query tokens of one head
 * (4 warps of 16), walks the head's f16 K/V cache in tiles of 64 positions
 * up to the last position its tokens see, and keeps S = Q·Kᵀ, the online
 * softmax and O = P·V in registers (mma.sync m16n8k16, f16 operands, f32
 * accumulation; P is rounded to f16 for its product with V). Every token
 * of the batch belongs to one sequence (the host checks); each sees cells
 * 0..pos of it. Q is rounded to f16, as the CPU rounds q for an f16 cache.
 * attn_args as attn.cu; o gets the normalised rows (no split, no q8 copy). */
#include "qtypes.h"
#include "tc.h"

#if !defined(LLM_HIP)

#define FQ 64 /* query tokens per block */
#define FK 64 /* cache positions per tile */

/* HD: head size (a multiple of 16); n: tokens in the batch. Grid (⌈n / 64⌉, n_head), 128 threads. */
template <int HD>
static __device__ __forceinline__ void fattn_body(const struct attn_args &a, const int n)
{
    constexpr int P = HD + 8; /* shared row pitch in halves: ldmatrix rows on distinct banks */
    __shared__ __align__(16) u16 Ks[FK * P]; /* K tile [position][d]; first Q [token][d] */
    __shared__ __align__(16) u16 Vs[FK * P]; /* V tile [position][d] */
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int gid = lane >> 2, tig = lane & 3;
    const int t0 = blockIdx.x * FQ, h = blockIdx.y;
    const int g = h / (a.n_head / a.n_head_kv);
    const int tl = min(n, t0 + FQ) - 1; /* the block's last token */
    /* positions seen: the largest pos among the block's tokens (positions need not be ordered) */
    int pmax = 0;
    for (int t = t0 + lane; t <= tl; t += 32)
        pmax = max(pmax, a.pos[t]);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        pmax = max(pmax, __shfl_xor_sync(0xffffffffu, pmax, m));
    const int n_kv = pmax + 1;
    /* Q → f16 into Ks (64 tokens × HD), then each warp's 16 rows into A fragments */
    for (int i = tid; i < FQ * HD / 4; i += 128) {
        const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
        const int t = t0 + r;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < n)
            v = *(const float4 *)(a.q + (long long)t * a.q_stride + (long long)h * HD + d);
        u32 *dst = (u32 *)(Ks + r * P + d);
        dst[0] = h2pack(v.x, v.y);
        dst[1] = h2pack(v.z, v.w);
    }
    __syncthreads();
    u32 qf[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldsm4(qf[kk], Ks + (warp * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
    /* this thread's two query rows (gid, gid + 8 of the warp's 16) and the positions they see */
    const int ra = t0 + warp * 16 + gid, rb = ra + 8;
    const int pa = ra < n ? a.pos[ra] : -1, pb = rb < n ? a.pos[rb] : -1;
    int wmax = max(pa, pb);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, m));
    const float sl2 = a.scale * 1.4426950408889634f; /* exp(x·scale) = exp2(x·scale·log2 e) */
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float ma = -INF_F, mb = -INF_F, la = 0.0f, lb = 0.0f; /* running max (scaled, log2) and partial sums */
    const long long base = (long long)a.seq[t0] * a.seq_stride + (long long)g * HD;
    const u16 *K = (const u16 *)a.k, *V = (const u16 *)a.v;
    for (int kv0 = 0; kv0 < n_kv; kv0 += FK) {
        __syncthreads(); /* the previous tile (or Q) is no longer read */
        for (int i = tid; i < FK * HD / 8; i += 128) {
            const int r = i / (HD / 8), d = (i % (HD / 8)) * 8;
            const int p = kv0 + r;
            uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;
            if (p < n_kv) {
                const long long off = base + (long long)p * a.kv_dim + d;
                kv = *(const uint4 *)(K + off);
                vv = *(const uint4 *)(V + off);
            }
            *(uint4 *)(Ks + r * P + d) = kv;
            *(uint4 *)(Vs + r * P + d) = vv;
        }
        __syncthreads();
        if (kv0 > wmax) /* every row of this warp is done */
            continue;
        /* S = Q·Kᵀ: 16 rows × 64 positions */
        float s[FK / 8][4];
#pragma unroll
        for (int j = 0; j < FK / 8; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
#pragma unroll
            for (int jj = 0; jj < FK / 16; jj++) {
                u32 b[4];
                ldsm4(b, Ks + (jj * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816h(s[2 * jj], qf[kk], b[0], b[1]);
                mma16816h(s[2 * jj + 1], qf[kk], b[2], b[3]);
            }
        /* mask (causal, tile end), scale, row max */
        float xa = -INF_F, xb = -INF_F;
#pragma unroll
        for (int j = 0; j < FK / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int p = kv0 + j * 8 + 2 * tig + e;
                s[j][e] = p <= pa ? s[j][e] * sl2 : -INF_F;
                s[j][2 + e] = p <= pb ? s[j][2 + e] * sl2 : -INF_F;
                xa = fmaxf(xa, s[j][e]);
                xb = fmaxf(xb, s[j][2 + e]);
            }
#pragma unroll
        for (int m = 1; m < 4; m <<= 1) {
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, m));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, m));
        }
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
        /* rows with nothing seen yet keep max −inf: their factors stay 0 / 1 without NaN */
        const float ca = na == -INF_F ? 1.0f : exp2f(ma - na), cb = nb == -INF_F ? 1.0f : exp2f(mb - nb);
        ma = na, mb = nb;
        la *= ca, lb *= cb;
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
            o[j][0] *= ca, o[j][1] *= ca, o[j][2] *= cb, o[j][3] *= cb;
        /* P = exp2(S − max), rounded to f16 as the A operand of P·V (its sums use the same rounded values) */
        u32 pf[FK / 16][4];
#pragma unroll
        for (int j = 0; j < FK / 8; j++) {
            const float e0 = na == -INF_F ? 0.0f : exp2f(s[j][0] - na), e1 = na == -INF_F ? 0.0f : exp2f(s[j][1] - na);
            const float e2 = nb == -INF_F ? 0.0f : exp2f(s[j][2] - nb), e3 = nb == -INF_F ? 0.0f : exp2f(s[j][3] - nb);
            const u32 top = h2pack(e0, e1), bot = h2pack(e2, e3);
            la += h2f((u16)(top & 0xFFFF)) + h2f((u16)(top >> 16));
            lb += h2f((u16)(bot & 0xFFFF)) + h2f((u16)(bot >> 16));
            pf[j / 2][(j % 2) * 2] = top;     /* a0 / a2: row gid, positions 2tig (+8) */
            pf[j / 2][(j % 2) * 2 + 1] = bot; /* a1 / a3: row gid + 8 */
        }
        /* O += P·V: V tile [position][d] read transposed */
#pragma unroll
        for (int kk = 0; kk < FK / 16; kk++)
#pragma unroll
            for (int dj = 0; dj < HD / 16; dj++) {
                u32 b[4];
                ldsm4t(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * P + dj * 16 + (lane >> 4) * 8);
                mma16816h(o[2 * dj], pf[kk], b[0], b[1]);
                mma16816h(o[2 * dj + 1], pf[kk], b[2], b[3]);
            }
    }
#pragma unroll
    for (int m = 1; m < 4; m <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, m);
        lb += __shfl_xor_sync(0xffffffffu, lb, m);
    }
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int d = j * 8 + 2 * tig;
        if (ra < n)
            *(float2 *)(a.o + (long long)ra * a.o_stride + (long long)h * HD + d) = make_float2(o[j][0] * ia, o[j][1] * ia);
        if (rb < n)
            *(float2 *)(a.o + (long long)rb * a.o_stride + (long long)h * HD + d) = make_float2(o[j][2] * ib, o[j][3] * ib);
    }
}

extern "C" __global__ void __launch_bounds__(128) fattn_64(const struct attn_args a, const int n) { fattn_body<64>(a, n); }
extern "C" __global__ void __launch_bounds__(128) fattn_128(const struct attn_args a, const int n)
{
    fattn_body<128>(a, n);
}

#endif
