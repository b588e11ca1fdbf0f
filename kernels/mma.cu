/* mma.cu — tensor-core GEMM for prefill and batched decode (NVIDIA sm_80+):
 * Y[m][r] (op)= W[r] · X[m] with f16 operands and f32 accumulation
 * (mma.sync.aligned.m16n8k16), for quantized and f16 weights.
 *
 * A block of 256 threads (8 warps) computes 128 weight rows × 32, 64 or 128
 * tokens (mma32_, mma_, mma128_: small batches, mid-sized ones, prompts).
 * Each 64-wide k step, every thread dequantizes one 32-element piece of one
 * weight row in one go (a whole q4_K/q5_K/q6_K 64-element chunk shares its
 * scale bytes between the row's two threads; no per-element index
 * arithmetic) into shared memory as f16, and converts 8 or 16 activations of
 * one token to f16 beside it; the warps read their fragments with ldmatrix.
 * The next step's raw weight bytes and activations (and, in the 32-token
 * tile, the weights of the step after) are loaded into registers before the
 * current step's products run, so global latency overlaps the tensor-core
 * work; the 64-token tile with q4_K weights stages them through a cp.async
 * ring instead (mma_body). q4_K dequantizes in f16x2 arithmetic. The weight
 * pieces are in wpiece.h, shared with wgmma.cu, whose warpgroup tiles the
 * host takes instead on sm_90a devices (the 128-token and grouped tiles).
 *
 * Split K: gridDim.z slices of k (whole 64-element steps each) add their
 * partial sums with atomics, so a small batch (decode of 16..64 sequences)
 * still fills the device; for mode 0 mma_xprep zeroes y first (its y argument).
 * Modes 0 (y = W·x + bias) and 1 (y += W·x + bias) of gemv_args; k % 64 == 0,
 * x rows 16-byte aligned (x_stride % 4 == 0). Rows past n_rows read the last
 * row and are not written; tokens past nz are zeros and not written. */
/* llm170-parts: 6 (part.h) */
#include "part.h"
#include "qtypes.h"
#include "tc.h"
#include "gemm_src.h"
#include "wpiece.h"

#if !defined(LLM_HIP)

#define MR 128 /* weight rows per block */
#define MK 64  /* k per step */
#define MP 72  /* shared row pitch in halves: 144 bytes, so the 8 rows of an ldmatrix land on distinct banks */

/* 16 activations of one token from its f16 row (mma_xprep): two 16-byte loads (zeros past nz) */
struct xpiece {
    uint4 v[2];
    bool ok;
    __device__ __forceinline__ void load(const u16 *xr, bool in, int k)
    {
        ok = in;
        if (in) {
            v[0] = *(const uint4 *)(xr + k);
            v[1] = *(const uint4 *)(xr + k + 8);
        }
    }
    __device__ __forceinline__ void store(u16 *dst) const
    {
        const uint4 z = make_uint4(0u, 0u, 0u, 0u);
        ((uint4 *)dst)[0] = ok ? v[0] : z;
        ((uint4 *)dst)[1] = ok ? v[1] : z;
    }
};

/* 8 activations of one token (the 32-token tile): one 16-byte load (zeros past nz) */
struct xpiece8 {
    uint4 v;
    bool ok;
    __device__ __forceinline__ void load(const u16 *xr, bool in, int k)
    {
        ok = in;
        if (in)
            v = *(const uint4 *)(xr + k);
    }
    __device__ __forceinline__ void store(u16 *dst) const { *(uint4 *)dst = ok ? v : make_uint4(0u, 0u, 0u, 0u); }
};

/* The products of one 64-wide step: the warp's WM = 16·MI rows × 32 tokens from the shared tiles.
 * PIPE: the fragments of the next 16-wide slice are read (ldmatrix) before this slice's products are
 * issued, so with two warps a scheduler the products do not wait on shared-memory latency (the asm is
 * volatile: the compiler keeps the source order); the 32-token tile, short of registers, reads them in turn. */
template <int MI, bool PIPE>
static __device__ __forceinline__ void step_products(float (*acc)[4][4], const u16 *Ws, const u16 *Xs, int wm, int wn,
                                                     int lane)
{
    u32 af[PIPE ? 2 : 1][MI][4], bf[PIPE ? 2 : 1][2][4];
    auto frags = [&](int kk, int b) {
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
            ldsm4(af[b][mi], Ws + (wm + mi * 16 + (lane & 15)) * MP + kk + (lane >> 4) * 8);
#pragma unroll
        for (int nj = 0; nj < 2; nj++)
            ldsm4(bf[b][nj], Xs + (wn + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * MP + kk + ((lane >> 3) & 1) * 8);
    };
    if (PIPE)
        frags(0, 0);
#pragma unroll
    for (int kk = 0; kk < MK; kk += 16) {
        const int b = PIPE ? (kk / 16) & 1 : 0;
        if (!PIPE)
            frags(kk, 0);
        else if (kk + 16 < MK)
            frags(kk + 16, b ^ 1);
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
                mma16816h(acc[mi][ni], af[b][mi], bf[b][ni / 2][2 * (ni % 2)], bf[b][ni / 2][2 * (ni % 2) + 1]);
    }
}

/* MT tokens per block (32, 64 or 128): MT / 32 warps along tokens, the rest along rows, each warp
 * WM × 32 outputs (16 × 32, 32 × 32, 64 × 32).
 * 64 and 128: one weight step in flight; a thread stages MT / 64 pieces of 16 activations (tokens
 * lt + 64i); the 128-token tile halves the dequantization per product (long prompts) at one resident
 * block per multiprocessor. Two shared tiles (dynamic shared memory, MMA_SMEM): a warp dequantizes
 * and stores step s + 1 into one right after its products of step s read the other, so the warps'
 * stores and products overlap and a step takes one barrier (with one tile, every warp stored, met the
 * others, multiplied, met them again: the tensor cores idle while all dequantize).
 * 32 (small batches, whose steps have little product work to hide a load behind): two weight steps
 * in flight (the loop runs two steps a turn, so each register set keeps a fixed name), 8
 * activations a thread, few registers (three blocks per multiprocessor). */
template <int T, int MT, bool G>
static __device__ __forceinline__ void mma_body(const struct gemv_args &a)
{
    constexpr int NWT = MT / 32, WM = MR / (8 / NWT), MI = WM / 16, XP = MT / 64;
    /* the step's tiles, f16: weights [128 rows][72] (k 0..63 of the step), activations [MT tokens][72];
     * the 32-token tile one of each (static), the others two of each (dynamic: MMA_SMEM(MT) bytes) */
    extern __shared__ __align__(16) u16 dsm[];
    __shared__ __align__(16) u16 sW[MT == 32 ? MR * MP : 8], sX[MT == 32 ? MT * MP : 8];
    u16 *const Ws = MT == 32 ? sW : dsm, *const Xs = MT == 32 ? sX : dsm + 2 * MR * MP;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int r0 = blockIdx.x * MR;
    gsrc<G> g;
    if (!g.init(a, MT))
        return;
    const u8 *const w = g.w;
    const int nz = g.nz, m0 = g.m0;
    auto xrow = [&](int m) { return g.xrow(a, m); };
    auto xscale = [&](int m) { return g.xscale(a, m); };
    const int wm = (warp / NWT) * WM, wn = (warp % NWT) * 32; /* the warp's rows and tokens in the tile */
    const int gid = lane >> 2, tig = lane & 3;
    /* split K: this slice's whole steps */
    const int steps = a.k / MK, per = (steps + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kb = (int)blockIdx.z * per * MK, ke = min(a.k, kb + per * MK);
    if (kb >= ke)
        return;
    /* loaders: weight row lr (thread pair h = 0, 1); activations: tokens lt + 64i, four threads of 16
     * each (64, 128), or token lt, eight threads of 8 (32) */
    const int lr = tid >> 1, lh = tid & 1;
    const int lt = MT >= 64 ? tid >> 2 : tid / 8, lk = MT >= 64 ? (tid & 3) * 16 : (tid % 8) * 8;
    const u8 *wr = w + (long long)min(r0 + lr, a.n_rows - 1) * a.row_bytes;
    const bool xok = m0 + lt < nz;
    const u16 *xr = xrow(min(m0 + lt, nz - 1));
    /* warps whose 32 tokens are all past nz skip the products (small decode batches) */
    const bool busy = m0 + wn < nz;
    float acc[MI][4][4];
#pragma unroll
    for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                acc[i][j][k] = 0.0f;
    if constexpr (MT == 64 && wchunks<T>::n > 0) {
        /* cp.async pipeline: step s's raw weight chunks (each thread its own, read back only by it) and
         * activation rows (zeros past nz) go into stage s % MMA_STAGES, issued MMA_STAGES − 1 steps ahead
         * without registers; a thread dequantizes step s + 1 from its chunks into the other f16 weight
         * tile once its products of step s are done, and one barrier a step makes both visible (and frees
         * stage s for step s + MMA_STAGES). The activations go straight to the tile ldmatrix reads. */
        constexpr int NS = MMA_STAGES, NC = wchunks<T>::n;
        uint4 *const Rs = (uint4 *)(dsm + 2 * MR * MP); /* [NS][NC][256] chunks */
        u16 *const Xa = (u16 *)(Rs + NS * NC * 256);     /* [NS][MT][MP] */
        const int n = (ke - kb) / MK;
        auto issue = [&](int s) {
            if (s < n) {
                const int k0 = kb + s * MK, st = s % NS;
                uint4 *R = Rs + st * NC * 256 + tid;
#pragma unroll
                for (int i = 0; i < NC; i++)
                    cp_async16(smem_addr(R + 256 * i), wpiece<T>::chunk(wr, k0, lh, i), 16);
#pragma unroll
                for (int i = 0; i < XP; i++) {
                    const int m = m0 + lt + 64 * i, nb = m < nz ? 16 : 0;
                    const u16 *src = xrow(min(m, nz - 1)) + k0 + lk;
                    const u32 dst = smem_addr(Xa + (st * MT + lt + 64 * i) * MP + lk);
                    cp_async16(dst, src, nb);
                    cp_async16(dst + 16, src + 8, nb);
                }
            }
            cp_async_commit(); /* an empty group past the end keeps the count of groups per step */
        };
        auto dequant = [&](int s) {
            wpiece<T> wp;
            wp.load_chunks(Rs + (s % NS) * NC * 256 + tid, kb + s * MK);
            wp.store(row_put{ Ws + (s & 1) * MR * MP + lr * MP }, lh);
        };
        for (int s = 0; s < NS - 1; s++)
            issue(s);
        cp_async_wait<NS - 2>(); /* step 0's group is in */
        dequant(0);
        __syncthreads();
        issue(NS - 1);
        for (int s = 0; s < n; s++) {
            if (busy)
                step_products<MI, true>(acc, Ws + (s & 1) * MR * MP, Xa + (s % NS) * MT * MP, wm, wn, lane);
            if (s + 1 < n) {
                cp_async_wait<NS - 2>(); /* groups s + 2 .. s + NS − 1 may still be in flight */
                dequant(s + 1);
            }
            __syncthreads();
            issue(s + NS);
        }
        cp_async_wait<0>();
    } else if constexpr (MT >= 64) {
        wpiece<T> wp;
        xpiece xp[XP];
        auto load = [&](int k0) {
            wp.load(wr, k0, lh);
#pragma unroll
            for (int i = 0; i < XP; i++)
                xp[i].load(xrow(min(m0 + lt + 64 * i, nz - 1)), m0 + lt + 64 * i < nz, k0 + lk);
        };
        auto store = [&](int b) {
            wp.store(row_put{ Ws + b * MR * MP + lr * MP }, lh);
#pragma unroll
            for (int i = 0; i < XP; i++)
                xp[i].store(Xs + b * MT * MP + (lt + 64 * i) * MP + lk);
        };
        load(kb);
        store(0);
        if (kb + MK < ke)
            load(kb + MK);
        __syncthreads();
        /* step s reads tile b; s + 1 goes into the other, whose last readers (step s − 1) met the
         * barrier before this step began */
        int b = 0;
        for (int k0 = kb; k0 < ke; k0 += MK, b ^= 1) {
            if (busy)
                step_products<MI, true>(acc, Ws + b * MR * MP, Xs + b * MT * MP, wm, wn, lane);
            if (k0 + MK < ke) {
                store(b ^ 1);
                if (k0 + 2 * MK < ke)
                    load(k0 + 2 * MK);
            }
            __syncthreads();
        }
    } else {
        wpiece<T> wp[2];
        xpiece8 xp;
        wp[0].load(wr, kb, lh);
        if (kb + MK < ke)
            wp[1].load(wr, kb + MK, lh);
        xp.load(xr, xok, kb + lk);
        auto step = [&](const int k0, wpiece<T> &w) {
            w.store(row_put{ Ws + lr * MP }, lh);
            xp.store(Xs + lt * MP + lk);
            __syncthreads();
            if (k0 + 2 * MK < ke)
                w.load(wr, k0 + 2 * MK, lh);
            if (k0 + MK < ke)
                xp.load(xr, xok, k0 + MK + lk);
            if (busy)
                step_products<MI, false>(acc, Ws, Xs, wm, wn, lane);
            __syncthreads();
        };
        for (int k0 = kb; k0 < ke; k0 += 2 * MK) {
            step(k0, wp[0]);
            if (k0 + MK < ke)
                step(k0 + MK, wp[1]);
        }
    }
    if (!busy)
        return;
    const bool split = gridDim.z > 1, first = blockIdx.z == 0;
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = r0 + wm + mi * 16 + gid + 8 * h;
            if (row >= a.n_rows)
                continue;
            const float b = a.bias && first ? a.bias[row] : 0.0f;
#pragma unroll
            for (int ni = 0; ni < 4; ni++)
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int m = m0 + wn + ni * 8 + 2 * tig + j;
                    if (m >= nz)
                        continue;
                    float *y = a.y + (long long)g.yrow(m) * a.y_stride + row;
                    /* undo the row's scale (a power of two: exact) */
                    const float v = acc[mi][ni][2 * h + j] / xscale(m) + b;
                    if (split)
                        atomicAdd(y, v);
                    else if (a.mode == 1)
                        *y += v;
                    else
                        *y = v;
                }
        }
}

/* mma_<type>: 128 rows × 64 tokens, two blocks per multiprocessor; mma32_: × 32 tokens, three blocks
 * (≤ 80 registers; q6_K and f16 spill a few bytes); mma128_: × 128 tokens, one block. mmag*_: the same
 * tiles over the experts' groups of (token, slot) pairs (MoE prompts: one launch for all experts) */
#define MMA(type, T)                                                                                                   \
    extern "C" __global__ void __launch_bounds__(256, 2) mma_##type(const struct gemv_args a) { mma_body<T, 64, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 3) mma32_##type(const struct gemv_args a) { mma_body<T, 32, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 1) mma128_##type(const struct gemv_args a) { mma_body<T, 128, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 2) mmag_##type(const struct gemv_args a) { mma_body<T, 64, true>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 3) mmag32_##type(const struct gemv_args a) { mma_body<T, 32, true>(a); } \
    extern "C" __global__ void __launch_bounds__(256, 1) mmag128_##type(const struct gemv_args a) { mma_body<T, 128, true>(a); }

#if IN_PART(KT_F16)
MMA(f16, KT_F16)
#endif
#if IN_PART(KT_Q8_0)
MMA(q8_0, KT_Q8_0)
#endif
#if IN_PART(KT_Q4_K)
MMA(q4_K, KT_Q4_K)
#endif
#if IN_PART(KT_Q5_K)
MMA(q5_K, KT_Q5_K)
#endif
#if IN_PART(KT_Q6_K)
MMA(q6_K, KT_Q6_K)
#endif
#if IN_PART(KT_IQ4_XS)
MMA(iq4_xs, KT_IQ4_XS)
#endif

/* The activations of a tensor-core product as f16, once per row instead of in every block of output rows
 * that reads them: xh[m] = f16(x[m]·xsc[m]) (k elements, rows of x x_stride apart, of xh k apart), where
 * xsc[m] is the largest power of two ≤ 1 that keeps the row's largest |x| at most lim (2^15 in use), so its
 * f16 copy cannot overflow (65504). Ordinary activations keep 1 and the products stay as without; a row
 * grown past f16 (a badly conditioned model, or massive activations in an FFN's down input) loses only its
 * smallest values to f16's underflow instead of becoming inf and NaN. A row holding inf keeps 1, NaN stays
 * NaN: the product shows them. lim 0: no scaling (A/B runs, and the test that shows the overflow).
 * y, when set: the destination of a split-K mode-0 product on these rows (its slices add with atomics),
 * zeroed here, row m = block m, n_rows floats y_stride apart — a launch fewer than a kernel of its own
 * (qwen3-8b batched B = 64: 108 launches a step, 0.63 ms of 16 in the event profile on the H100).
 * x 0: only that zeroing (the f16 rows were written by the kernel that made x).
 * Grid (rows), 256 threads; k even, x_stride even. */
#if IN_PART0
extern "C" __global__ void __launch_bounds__(256) mma_xprep(const float *x, int k, int x_stride, float lim, float *xsc,
                                                            u16 *xh, float *y, int y_stride, int n_rows)
{
    if (y) {
        float *yr = y + (long long)blockIdx.x * y_stride;
        for (int i = threadIdx.x; i < n_rows; i += 256)
            yr[i] = 0.0f;
    }
    if (!x) /* the f16 rows are there already (rms_norm, swiglu_rows): only the zeroing */
        return;
    __shared__ float part[8];
    const float *xr = x + (long long)blockIdx.x * x_stride;
    float mx = 0.0f;
    for (int i = threadIdx.x; i < k; i += 256)
        mx = fmaxf(mx, fabsf(xr[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = part[0];
#pragma unroll
    for (int w = 1; w < 8; w++)
        mx = fmaxf(mx, part[w]);
    const float s = f16_row_scale(mx, lim);
    if (threadIdx.x == 0)
        xsc[blockIdx.x] = s;
    u32 *o = (u32 *)(xh + (long long)blockIdx.x * k);
    for (int i = threadIdx.x; 2 * i < k; i += 256) {
        const float2 v = *(const float2 *)(xr + 2 * i);
        o[i] = h2pack(v.x * s, v.y * s);
    }
}
#endif

#endif
