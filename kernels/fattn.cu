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
#define FK 64 /* cache positions per tile (FATTN_SMEM in args.h counts on it) */

/* HD: head size (a multiple of 16); n: tokens in the batch. Grid (⌈n / 64⌉, n_head), 128 threads, FATTN_SMEM(HD)
 * bytes of dynamic shared memory (args.h): two stages of a K and a V tile, the next tile's cp.async copies in flight
 * while the warps compute on this one (the loads were synchronous: load, barrier, compute, barrier).
 * Blocks take the query tiles last first: a block's work grows with its tokens' positions, and the
 * longest ones starting first leave the short ones to fill the last wave.
 * QS (head size 256, the hybrids' gated attention): Q stays in shared memory after the stages and each
 * 16-wide slice is read (ldmatrix) as the product needs it — in registers beside O's 128 accumulators a
 * thread it would not fit. */
template <int HD>
static __device__ __forceinline__ void fattn_body(const struct attn_args &a, const int n)
{
    constexpr bool QS = HD > 128;
    constexpr int P = HD + 8; /* shared row pitch in halves: ldmatrix rows on distinct banks */
    constexpr int SB = 2 * FK * P; /* halves of a stage: K tile [position][d], then V tile */
    extern __shared__ __align__(16) u16 fa_st[];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int gid = lane >> 2, tig = lane & 3;
    const int t0 = (gridDim.x - 1 - blockIdx.x) * FQ, h = blockIdx.y;
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
    const long long base = (long long)a.seq[t0] * a.seq_stride + (long long)g * HD;
    const u16 *K = (const u16 *)a.k, *V = (const u16 *)a.v;
    const u32 st = smem_addr(fa_st);
    auto issue = [&](int i) { /* tile i (positions from 64·i) into stage i % 2, zeros from n_kv on */
        const u32 ks = st + 2u * (u32)((i % 2) * SB), vs = ks + 2u * (u32)(FK * P);
        for (int c = tid; c < FK * HD / 8; c += 128) {
            const int r = c / (HD / 8), d = (c % (HD / 8)) * 8, p = i * FK + r;
            const bool in = p < n_kv;
            const long long off = base + (long long)(in ? p : 0) * a.kv_dim + d;
            const u32 so = (u32)(r * P + d) * 2u;
            cp_async16(ks + so, K + off, in ? 16 : 0);
            cp_async16(vs + so, V + off, in ? 16 : 0);
        }
    };
    issue(0);
    cp_async_commit();
    /* Q → f16 into stage 1's K tile (64 tokens × HD; QS: its own region after the stages), then each warp's
     * 16 rows into A fragments */
    u16 *Qs = fa_st + (QS ? 2 : 1) * SB;
    for (int i = tid; i < FQ * HD / 4; i += 128) {
        const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
        const int t = t0 + r;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t < n)
            v = *(const float4 *)(a.q + (long long)t * a.q_stride + (long long)h * HD + d);
        u32 *dst = (u32 *)(Qs + r * P + d);
        dst[0] = h2pack(v.x, v.y);
        dst[1] = h2pack(v.z, v.w);
    }
    __syncthreads();
    u32 qf[QS ? 1 : HD / 16][4];
    if (!QS)
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++)
            ldsm4(qf[kk], Qs + (warp * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
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
    const int nt = (n_kv + FK - 1) / FK;
    for (int i = 0; i < nt; i++) {
        __syncthreads(); /* stage (i + 1) % 2 (tile i − 1, or Q) is no longer read */
        if (i + 1 < nt)
            issue(i + 1);
        cp_async_commit();
        cp_async_wait<1>(); /* this thread's part of tile i has landed */
        __syncthreads();    /* ... and every thread's */
        const int kv0 = i * FK;
        const u16 *Ks = fa_st + (i % 2) * SB, *Vs = Ks + FK * P;
        if (kv0 > wmax) /* every row of this warp is done */
            continue;
        /* S = Q·Kᵀ: 16 rows × 64 positions */
        float s[FK / 8][4];
#pragma unroll
        for (int j = 0; j < FK / 8; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 qs[4];
            if (QS) /* this lane's ldmatrix row of Q */
                ldsm4(qs, Qs + (warp * 16 + (lane & 15)) * P + kk * 16 + (lane >> 4) * 8);
            const u32 *qa = QS ? qs : qf[QS ? 0 : kk];
#pragma unroll
            for (int jj = 0; jj < FK / 16; jj++) {
                u32 b[4];
                ldsm4(b, Ks + (jj * 16 + (lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
                mma16816h(s[2 * jj], qa, b[0], b[1]);
                mma16816h(s[2 * jj + 1], qa, b[2], b[3]);
            }
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
    cp_async_wait<0>(); /* only empty groups are left; none in flight at the block's exit */
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

/* One decode token's attention for one KV head and one split of its cache, by one warp: the G query
 * heads sharing the KV head are the rows of one 16-row mma A operand (rows past G zero), so each K/V
 * row is read once for the whole group. The split's positions stream through a ring of DEC_ST shared
 * stages of DEC_T positions (K and V) filled by cp.async, DEC_ST − 1 tiles in flight while the warp
 * computes on one: the loads never wait for the arithmetic, and with no block-wide barrier and no
 * cross-warp merge a block is the warp alone (a block of 4 warps sharing one tile loaded it, waited,
 * then computed: at 16k positions it streamed the cache at ~1.3 TB/s). Out-of-range positions of the
 * last tile are zero-filled (a masked probability is 0, and 0 · garbage could be NaN). */
#define DEC_T 16 /* positions per stage: one mma row block */
#define DEC_ST 4 /* stages */

/* positions kv0 .. kv0 + DEC_T − 1 (those < end) of one KV head into stage buffers ks / vs (shared
 * addresses, row pitch P halves) */
template <int HD>
static __device__ __forceinline__ void dec_tile(u32 ks, u32 vs, const u16 *K, const u16 *V, long long base, int kv_dim,
                                                int kv0, int end, int lane)
{
    constexpr int P = HD + 8;
#pragma unroll
    for (int i = lane; i < DEC_T * HD / 8; i += 32) {
        const int r = i / (HD / 8), d = (i % (HD / 8)) * 8;
        const bool in = kv0 + r < end;
        const long long off = base + (long long)(in ? kv0 + r : kv0) * kv_dim + d;
        const u32 so = (u32)(r * P + d) * 2u;
        cp_async16(ks + so, K + off, in ? 16 : 0);
        cp_async16(vs + so, V + off, in ? 16 : 0);
    }
}

/* rope_store's work on the heads of token t a warp holds, 4 elements a lane (d = 4·lane, head size 128): the
 * lane's cos/sin come once (rope_cs), then each head's RMSNorm with weight nw (none: 0) and RoPE over its first
 * n_rot elements (n_rot % 8 == 0) run on registers. */
struct rope_lane {
    float c[4], s[4]; /* the rotation of the lane's elements (1, 0 past n_rot) */
    int src;          /* neox: the lane holding each element's partner (i ± n_rot / 2) */
};
static __device__ __forceinline__ struct rope_lane rope_cs(const struct rope_args &r, int t, int lane)
{
    struct rope_lane l;
    const int d = 4 * lane, half = r.n_rot / 2;
    const float *cs = r.cs + (long long)t * r.n_rot;
    l.src = lane;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        int p = -1; /* the cos/sin pair of element d + e */
        if (r.neox && d < r.n_rot)
            p = d < half ? d + e : d + e - half, l.src = d < half ? lane + half / 4 : lane - half / 4;
        else if (!r.neox && d < r.n_rot)
            p = (d + e) / 2;
        l.c[e] = p < 0 ? 1.0f : cs[2 * p];
        l.s[e] = p < 0 ? 0.0f : cs[2 * p + 1];
    }
    return l;
}

static __device__ __forceinline__ float4 head_norm_rope(const struct rope_args &r, const struct rope_lane &l, float4 x,
                                                        const float *nw, int lane)
{
    if (nw) {
        const float sc = 1.0f / sqrtf(warp_sum(x.x * x.x + x.y * x.y + x.z * x.z + x.w * x.w) / 128.0f + r.eps);
        const float4 w = *(const float4 *)(nw + 4 * lane);
        x = make_float4((x.x * sc) * w.x, (x.y * sc) * w.y, (x.z * sc) * w.z, (x.w * sc) * w.w);
    }
    float v[4] = { x.x, x.y, x.z, x.w };
    if (r.neox) { /* element i < half pairs with i + half: x_i c − x_{i+half} s, and x_i s + x_{i+half} c */
        const bool lo = 4 * lane < r.n_rot / 2;
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float y = __shfl_sync(0xffffffffu, v[e], l.src);
            v[e] = lo ? v[e] * l.c[e] - y * l.s[e] : y * l.s[e] + v[e] * l.c[e];
        }
    } else { /* pairs (2p, 2p + 1) within the lane */
#pragma unroll
        for (int e = 0; e < 4; e += 2) {
            const float x0 = v[e], x1 = v[e + 1];
            v[e] = x0 * l.c[e] - x1 * l.s[e];
            v[e + 1] = x0 * l.s[e] + x1 * l.c[e];
        }
    }
    return make_float4(v[0], v[1], v[2], v[3]);
}

/* W warps a block (fattn_dec4_128: W = DEC4_W) split the cache among themselves, whole tiles each, every warp
 * with its own ring of ST stages in st (ST · SB halves a warp) and the group's Q rows shared (Qs); at the end
 * the warps' unnormalized O, running max and sum meet in shared memory and the block writes o — one launch for
 * a short cache where W = 1 took a grid of splits and attn_combine after it. */
template <int HD, int W, int ST>
static __device__ __forceinline__ void fattn_dec_body(const struct attn_args &a, u16 *st, u16 *Qs)
{
    constexpr int P = HD + 8;
    constexpr int SB = 2 * DEC_T * P; /* halves of one stage: K rows, then V rows */
    static_assert(ST * SB * 2 >= 16 * HD * 4 + 16 * 8, "O (and the max and sum of each row) must fit in a ring");
    PDL_ENTER();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, gid = lane >> 2, tig = lane & 3;
    const int G = a.n_head / a.n_head_kv;
    const int t = blockIdx.x / a.n_head_kv, g = blockIdx.x % a.n_head_kv;
    const int n_kv = a.pos[t] + 1;
    const int ns = W > 1 ? W : attn_splits(a, n_kv);
    if (W == 1 && (int)blockIdx.y >= ns)
        return;
    /* W > 1: whole tiles a warp, so a short cache leaves the last warps idle rather than every warp a partial tile */
    const int chunk = W > 1 ? (n_kv + W * DEC_T - 1) / (W * DEC_T) * DEC_T : (n_kv + ns - 1) / ns;
    const int p0 = (W > 1 ? warp : (int)blockIdx.y) * chunk, p1 = min(n_kv, p0 + chunk);
    const int nt = p1 > p0 ? (p1 - p0 + DEC_T - 1) / DEC_T : 0;
    const long long base = (long long)a.seq[t] * a.seq_stride + (long long)g * HD;
    const u16 *K = (const u16 *)a.k, *V = (const u16 *)a.v;
    const u16 *const ring0 = st; /* warp 0's ring: the merge reads every warp's */
    st += warp * ST * SB;
    const u32 s0 = smem_addr(st);
    if (HD == 128 && a.rope && n_kv - 1 >= p0 && n_kv - 1 < p1) {
        /* rope_store's work for this token's K and V (a.rope: no other token of the step reads this cell, and
         * of this token's blocks only this one, the split holding its position): normed, rotated, stored —
         * before this block's copies read the cell */
        const long long src = (long long)t * a.r.kv_stride + (long long)g * HD + 4 * lane;
        const float4 k0 = *(const float4 *)(a.r.k + src), vx = *(const float4 *)(a.r.v + src);
        const float4 kx = head_norm_rope(a.r, rope_cs(a.r, t, lane), k0, a.r.k_norm, lane);
        const long long cell = base + (long long)(n_kv - 1) * a.kv_dim + 4 * lane;
        *(uint2 *)(a.r.kc + 2 * cell) = make_uint2(h2pack(kx.x, kx.y), h2pack(kx.z, kx.w));
        *(uint2 *)(a.r.vc + 2 * cell) = make_uint2(h2pack(vx.x, vx.y), h2pack(vx.z, vx.w));
        __threadfence_block();
        __syncwarp();
    }
    /* the first ST − 1 tiles in flight before anything else */
#pragma unroll
    for (int i = 0; i < ST - 1; i++) {
        if (i < nt)
            dec_tile<HD>(s0 + 2u * (u32)(i * SB), s0 + 2u * (u32)(i * SB + DEC_T * P), K, V, base, a.kv_dim,
                         p0 + i * DEC_T, p1, lane);
        cp_async_commit();
    }
    /* Q of the group → f16 rows 0..15 (zeros past G; row r by warp r % W), then the A fragments */
    if (HD == 128 && a.rope) { /* normed and rotated here: every head's row loaded first, then the arithmetic */
        float4 qv[16 / W];
#pragma unroll
        for (int j = 0; j < 16 / W; j++) {
            const int r = warp + W * j;
            qv[j] = r < G ? *(const float4 *)(a.q + (long long)t * a.q_stride + (long long)(g * G + r) * HD + 4 * lane)
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        const struct rope_lane rl = rope_cs(a.r, t, lane);
#pragma unroll
        for (int j = 0; j < 16 / W; j++) {
            const int r = warp + W * j;
            if (r < G)
                qv[j] = head_norm_rope(a.r, rl, qv[j], a.r.q_norm, lane);
            u32 *dst = (u32 *)(Qs + r * P + 4 * lane);
            dst[0] = h2pack(qv[j].x, qv[j].y);
            dst[1] = h2pack(qv[j].z, qv[j].w);
        }
    } else {
        for (int i = threadIdx.x; i < 16 * HD / 4; i += 32 * W) {
            const int r = i / (HD / 4), d = (i % (HD / 4)) * 4;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (r < G)
                v = *(const float4 *)(a.q + (long long)t * a.q_stride + (long long)(g * G + r) * HD + d);
            u32 *dst = (u32 *)(Qs + r * P + d);
            dst[0] = h2pack(v.x, v.y);
            dst[1] = h2pack(v.z, v.w);
        }
    }
    if (W > 1)
        __syncthreads(); /* Qs is every warp's */
    else
        __syncwarp();
    u32 qf[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldsm4(qf[kk], Qs + (lane & 15) * P + kk * 16 + (lane >> 4) * 8);
    const float sl2 = a.scale * 1.4426950408889634f; /* exp(x·scale) = exp2(x·scale·log2 e) */
    float o[HD / 8][4];
#pragma unroll
    for (int j = 0; j < HD / 8; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float ma = -INF_F, mb = -INF_F, la = 0.0f, lb = 0.0f; /* rows gid and gid + 8: running max (log2), sums */
    for (int i = 0; i < nt; i++) {
        { /* refill the stage tile i − 1 used (every lane is past its reads: the __syncwarp below) */
            const int f = i + ST - 1, sf = f % ST;
            if (f < nt)
                dec_tile<HD>(s0 + 2u * (u32)(sf * SB), s0 + 2u * (u32)(sf * SB + DEC_T * P), K, V, base, a.kv_dim,
                             p0 + f * DEC_T, p1, lane);
            cp_async_commit();
        }
        cp_async_wait<ST - 1>(); /* this lane's part of tile i has landed */
        __syncwarp();            /* ... and every lane's */
        const u16 *Ks = st + (i % ST) * SB, *Vs = Ks + DEC_T * P;
        const int w0 = p0 + i * DEC_T;
        float s[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++)
            s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            u32 b[4];
            ldsm4(b, Ks + ((lane & 7) + ((lane >> 4) << 3)) * P + kk * 16 + ((lane >> 3) & 1) * 8);
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
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb); /* finite: the tile has a position */
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
            ldsm4t(b, Vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * P + dj * 16 + (lane >> 4) * 8);
            mma16816h(o[2 * dj], pf, b[0], b[1]);
            mma16816h(o[2 * dj + 1], pf, b[2], b[3]);
        }
        __syncwarp(); /* the stage is free for the refill at the next iteration */
    }
    cp_async_wait<0>(); /* no copy may land in the stages O goes to (only empty groups remain) */
#pragma unroll
    for (int m = 1; m < 4; m <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, m);
        lb += __shfl_xor_sync(0xffffffffu, lb, m);
    }
    if (W > 1) { /* each warp's O, max (log2 units) and sum into its ring, then o merged over the warps */
        float *Ow = (float *)st;
        float2 *ml = (float2 *)(Ow + 16 * HD);
        __syncwarp();
#pragma unroll
        for (int j = 0; j < HD / 8; j++) {
            const int d = j * 8 + 2 * tig;
            *(float2 *)(Ow + gid * HD + d) = make_float2(o[j][0], o[j][1]);
            *(float2 *)(Ow + (gid + 8) * HD + d) = make_float2(o[j][2], o[j][3]);
        }
        if (tig == 0)
            ml[gid] = make_float2(ma, la), ml[gid + 8] = make_float2(mb, lb);
        __syncthreads();
        /* 32 lanes on 32 consecutive elements of one head (q8_group's layout); warp 0 holds position 0, so the
         * max is finite, and a warp with no positions weighs exp2(−inf) = 0 */
        for (int idx = threadIdx.x; idx < G * HD; idx += 32 * W) {
            const int r = idx / HD, d = idx % HD, h = g * G + r;
            float m = -INF_F;
#pragma unroll
            for (int w = 0; w < W; w++)
                m = fmaxf(m, ((const float2 *)((const float *)(ring0 + w * ST * SB) + 16 * HD))[r].x);
            float l = 0.0f, v = 0.0f;
#pragma unroll
            for (int w = 0; w < W; w++) {
                const float *Ox = (const float *)(ring0 + w * ST * SB);
                const float2 x = ((const float2 *)(Ox + 16 * HD))[r];
                const float c = exp2f(x.x - m);
                l += x.y * c;
                v += Ox[r * HD + d] * c;
            }
            v = l > 0.0f ? v / l : 0.0f;
            a.o[(long long)t * a.o_stride + (long long)h * HD + d] = v;
            if (a.oq)
                q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2, h * HD + d);
        }
        return;
    }
    if (ns > 1) { /* partial rows per query head for attn_combine: O, the max (natural-log units), the sum */
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int r = gid + 8 * hr;
            if (r >= G)
                continue;
            float *pp = a.part + (((long long)t * a.n_head + g * G + r) * a.nsplit + blockIdx.y) * (HD + 2);
#pragma unroll
            for (int j = 0; j < HD / 8; j++)
                *(float2 *)(pp + j * 8 + 2 * tig) = make_float2(o[j][2 * hr], o[j][2 * hr + 1]);
            if (tig == 0)
                pp[HD] = (hr ? mb : ma) * 0.6931471805599453f, pp[HD + 1] = hr ? lb : la;
        }
        return;
    }
    /* one split: o = O / L and its q8 copy, through shared memory so that 32 lanes hold 32 consecutive
     * elements of one head (q8_group's layout) */
    float *Os = (float *)st;
    const float ia = la > 0.0f ? 1.0f / la : 0.0f, ib = lb > 0.0f ? 1.0f / lb : 0.0f;
    __syncwarp();
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int d = j * 8 + 2 * tig;
        *(float2 *)(Os + gid * HD + d) = make_float2(o[j][0] * ia, o[j][1] * ia);
        *(float2 *)(Os + (gid + 8) * HD + d) = make_float2(o[j][2] * ib, o[j][3] * ib);
    }
    __syncwarp();
    for (int idx = lane; idx < G * HD; idx += 32) {
        const int r = idx / HD, d = idx % HD, h = g * G + r;
        const float v = Os[r * HD + d];
        a.o[(long long)t * a.o_stride + (long long)h * HD + d] = v;
        if (a.oq)
            q8_group(v, a.oq + (long long)t * a.o_stride, a.oqd + (long long)t * (a.o_stride / 32) * 2, h * HD + d);
    }
}

/* grid (tokens · n_head_kv, splits), one warp a block */
extern "C" __global__ void __launch_bounds__(32) fattn_dec_128(const struct attn_args a)
{
    __shared__ __align__(16) u16 st[DEC_ST * 2 * DEC_T * 136]; /* the ring; at the end f32 O [16][HD] */
    __shared__ __align__(16) u16 Qs[16 * 136];
    fattn_dec_body<128, 1, DEC_ST>(a, st, Qs);
}
/* grid tokens · n_head_kv, DEC4_W warps a block splitting the cache, FATTN_DEC4_SMEM(128) (Q, then the rings) */
extern "C" __global__ void __launch_bounds__(32 * DEC4_W) fattn_dec4_128(const struct attn_args a)
{
    extern __shared__ __align__(16) u16 fd_smem[];
    fattn_dec_body<128, DEC4_W, DEC4_ST>(a, fd_smem + 16 * 136, fd_smem);
}

extern "C" __global__ void __launch_bounds__(128) fattn_64(const struct attn_args a, const int n) { fattn_body<64>(a, n); }
extern "C" __global__ void __launch_bounds__(128) fattn_128(const struct attn_args a, const int n)
{
    fattn_body<128>(a, n);
}
extern "C" __global__ void __launch_bounds__(128) fattn_256(const struct attn_args a, const int n)
{
    fattn_body<256>(a, n);
}

#endif
