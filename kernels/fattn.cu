/* fattn.cu — causal attention of a prompt batch on tensor cores (NVIDIA
 * sm_80+), flash-attention style: a block takes 64 query tokens of one head
 * (4 warps of 16), walks the head's f16 K/V cache in tiles of 64 positions
 * up to the last position its tokens see, and keeps S = Q·Kᵀ, the online
 * softmax and O = P·V in registers (mma.sync m16n8k16, f16 operands, f32
 * accumulation; P is rounded to f16 for its product with V). Every token
 * of the batch belongs to one sequence (the host checks); each sees cells
 * 0..pos of it. Q is rounded to f16, as the CPU rounds q for an f16 cache.
 * attn_args as attn.cu; o gets the normalised rows (no split, no q8 copy). */
#include "attn_split.h"
#include "qtypes.h"
#include "tc.h"

#if !defined(LLM_HIP)

#define FQ 64 /* query tokens per block */
#define FK 64 /* cache positions per tile */

/* Cache positions kv0..kv0 + FK − 1 of one KV head (base: its first element) into the shared tiles Ks
 * and Vs (f16, row pitch HD + 8), zeros from position end on; the block's 128 threads, 16-byte loads. */
template <int HD>
static __device__ __forceinline__ void kv_tile(u16 *Ks, u16 *Vs, const u16 *K, const u16 *V, long long base, int kv_dim,
                                               int kv0, int end, int tid)
{
    constexpr int P = HD + 8;
    for (int i = tid; i < FK * HD / 8; i += 128) {
        const int r = i / (HD / 8), d = (i % (HD / 8)) * 8;
        const int p = kv0 + r;
        uint4 kv = make_uint4(0u, 0u, 0u, 0u), vv = kv;
        if (p < end) {
            const long long off = base + (long long)p * kv_dim + d;
            kv = *(const uint4 *)(K + off);
            vv = *(const uint4 *)(V + off);
        }
        *(uint4 *)(Ks + r * P + d) = kv;
        *(uint4 *)(Vs + r * P + d) = vv;
    }
}

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
        kv_tile<HD>(Ks, Vs, K, V, base, a.kv_dim, kv0, n_kv, tid);
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

/* Decode attention on tensor cores: a block is one (token, KV head, split) of 4 warps, and the G =
 * n_head / n_head_kv query heads sharing the KV head are the rows of one 16-row A operand (rows past G
 * zero), so each K/V row is read once for the whole group and the dot products run as mma. The split's
 * positions go in tiles of 64 (loaded by all warps into shared memory, f16 cache); warp w takes
 * positions 16w..16w+15 of each tile: S = Q·Kᵀ (16 × 16), its own online softmax, O += P·V. The four
 * warps' (max, sum, O) meet through shared memory at the end. Splits as attn (attn_split.h): with one
 * split the block writes o (and its q8 copy), else partial rows (o, max, sum) per query head for
 * attn_combine (max in natural-log units, as attn's). G <= 16, HD % 16 == 0, blockDim 128. */
template <int HD>
static __device__ __forceinline__ void fattn_dec_body(const struct attn_args &a)
{
    constexpr int P = HD + 8;
    __shared__ __align__(16) u16 KVs[2 * FK * P]; /* K tile [position][d], then V; at the end f32 O [4][16][HD] */
    __shared__ float sm_ml[4][16][2];
    static_assert(2 * FK * P * 2 >= 4 * 16 * HD * 4, "the warps' O must fit where the tiles were");
    u16 *Ks = KVs, *Vs = KVs + FK * P;
    PDL_ENTER();
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int gid = lane >> 2, tig = lane & 3;
    const int G = a.n_head / a.n_head_kv;
    const int t = blockIdx.x / a.n_head_kv, g = blockIdx.x % a.n_head_kv;
    const int n_kv = a.pos[t] + 1;
    const int ns = attn_splits(a, n_kv);
    if ((int)blockIdx.y >= ns)
        return;
    const int chunk = (n_kv + ns - 1) / ns;
    const int p0 = blockIdx.y * chunk, p1 = min(n_kv, p0 + chunk);
    /* Q of the group → f16 rows 0..15 of Ks (zeros past G), then every warp's A fragments */
    for (int i = tid; i < 16 * HD / 4; i += 128) {
        const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < G)
            v = *(const float4 *)(a.q + (long long)t * a.q_stride + (long long)(g * G + r) * HD + d);
        u32 *dst = (u32 *)(Ks + r * P + d);
        dst[0] = h2pack(v.x, v.y);
        dst[1] = h2pack(v.z, v.w);
    }
    __syncthreads();
    u32 qf[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldsm4(qf[kk], Ks + (lane & 15) * P + kk * 16 + (lane >> 4) * 8);
    const float sl2 = a.scale * 1.4426950408889634f; /* exp(x·scale) = exp2(x·scale·log2 e) */
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float ma = -INF_F, mb = -INF_F, la = 0.0f, lb = 0.0f; /* rows gid and gid + 8: running max (log2), sums */
    const long long base = (long long)a.seq[t] * a.seq_stride + (long long)g * HD;
    const u16 *K = (const u16 *)a.k, *V = (const u16 *)a.v;
    for (int kv0 = p0; kv0 < p1; kv0 += FK) {
        __syncthreads(); /* the previous tile (or Q) is no longer read */
        kv_tile<HD>(Ks, Vs, K, V, base, a.kv_dim, kv0, p1, tid);
        __syncthreads();
        const int w0 = kv0 + 16 * warp; /* this warp's first position */
        if (w0 >= p1)
            continue;
        float s[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 b[4];
            ldsm4(b, Ks + (16 * warp + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
            mma16816h(s[0], qf[kk], b[0], b[1]);
            mma16816h(s[1], qf[kk], b[2], b[3]);
        }
        float xa = -INF_F, xb = -INF_F;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const bool in = w0 + j * 8 + 2 * tig + e < p1;
                s[j][e] = in ? s[j][e] * sl2 : -INF_F;
                s[j][2 + e] = in ? s[j][2 + e] * sl2 : -INF_F;
                xa = fmaxf(xa, s[j][e]);
                xb = fmaxf(xb, s[j][2 + e]);
            }
#pragma unroll
        for (int m = 1; m < 4; m <<= 1) {
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, m));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, m));
        }
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb); /* finite: the warp has a position */
        const float ca = exp2f(ma - na), cb = exp2f(mb - nb);
        ma = na, mb = nb;
        la *= ca, lb *= cb;
#pragma unroll
        for (int j = 0; j < HD / 8; j++)
            o[j][0] *= ca, o[j][1] *= ca, o[j][2] *= cb, o[j][3] *= cb;
        /* P rounded to f16 as the A operand of P·V; its sums use the same rounded values */
        u32 pf[4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const u32 top = h2pack(exp2f(s[j][0] - na), exp2f(s[j][1] - na));
            const u32 bot = h2pack(exp2f(s[j][2] - nb), exp2f(s[j][3] - nb));
            la += h2f((u16)(top & 0xFFFF)) + h2f((u16)(top >> 16));
            lb += h2f((u16)(bot & 0xFFFF)) + h2f((u16)(bot >> 16));
            pf[2 * j] = top;
            pf[2 * j + 1] = bot;
        }
#pragma unroll
        for (int dj = 0; dj < HD / 16; dj++) {
            u32 b[4];
            ldsm4t(b, Vs + (16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8) * P + dj * 16 + (lane >> 4) * 8);
            mma16816h(o[2 * dj], pf, b[0], b[1]);
            mma16816h(o[2 * dj + 1], pf, b[2], b[3]);
        }
    }
#pragma unroll
    for (int m = 1; m < 4; m <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, m);
        lb += __shfl_xor_sync(0xffffffffu, lb, m);
    }
    if (tig == 0) {
        sm_ml[warp][gid][0] = ma, sm_ml[warp][gid][1] = la;
        sm_ml[warp][gid + 8][0] = mb, sm_ml[warp][gid + 8][1] = lb;
    }
    __syncthreads(); /* the tiles are no longer read: O goes there */
    float *Os = (float *)KVs;
    float Ma = -INF_F, Mb = -INF_F;
#pragma unroll
    for (int w = 0; w < 4; w++)
        Ma = fmaxf(Ma, sm_ml[w][gid][0]), Mb = fmaxf(Mb, sm_ml[w][gid + 8][0]);
    const float fa = ma == -INF_F ? 0.0f : exp2f(ma - Ma), fb = mb == -INF_F ? 0.0f : exp2f(mb - Mb);
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int d = j * 8 + 2 * tig;
        *(float2 *)(Os + (warp * 16 + gid) * HD + d) = make_float2(o[j][0] * fa, o[j][1] * fa);
        *(float2 *)(Os + (warp * 16 + gid + 8) * HD + d) = make_float2(o[j][2] * fb, o[j][3] * fb);
    }
    __syncthreads();
    /* idx = r·HD + d over the group's heads in order: whole warps per 32 elements of one head */
    for (int idx = tid; idx < G * HD; idx += 128) {
        const int r = idx / HD, d = idx % HD, h = g * G + r;
        float M = -INF_F;
#pragma unroll
        for (int w = 0; w < 4; w++)
            M = fmaxf(M, sm_ml[w][r][0]);
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int w = 0; w < 4; w++) {
            const float mw = sm_ml[w][r][0];
            if (mw != -INF_F)
                L += sm_ml[w][r][1] * exp2f(mw - M);
            O += Os[(w * 16 + r) * HD + d];
        }
        if (ns == 1) {
            const float v = L > 0.0f ? O / L : 0.0f;
            a.o[(long long)t * a.o_stride + (long long)h * HD + d] = v;
            if (a.oq)
                q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2, h * HD + d);
        } else {
            float *pp = a.part + (((long long)t * a.n_head + h) * a.nsplit + blockIdx.y) * (HD + 2);
            pp[d] = O;
            if (d == 0)
                pp[HD] = M * 0.6931471805599453f, pp[HD + 1] = L; /* log2 → natural units */
        }
    }
}

extern "C" __global__ void __launch_bounds__(128) fattn_dec_128(const struct attn_args a) { fattn_dec_body<128>(a); }

extern "C" __global__ void __launch_bounds__(128) fattn_64(const struct attn_args a, const int n) { fattn_body<64>(a, n); }
extern "C" __global__ void __launch_bounds__(128) fattn_128(const struct attn_args a, const int n)
{
    fattn_body<128>(a, n);
}

#endif
