/* gemvs.cu — the single-token q8 GEMV, streamed (NVIDIA sm_80+): y (op)= W · x for one activation row
 * x, modes 0–3 of struct gemv_args (plain, added into the residual, SwiGLU with its q8 copy, two outputs
 * of one input), with the deferred-RMSNorm input (*_dn) and the residual's norm tail.
 *
 * Why: gemv.cu's blocks each load their few rows once and then reduce, so a multiprocessor's loads come
 * in bursts and most of its time no weight bytes are in flight — qwen3-8b's products ran at 0.9–2.0 TB/s
 * of the H200's ~4, with ~1 eligible warp a scheduler whatever the instruction count (a version with
 * half the instructions a byte measured the same). Here the grid is one block a multiprocessor and each
 * warp streams its own contiguous run of rows through a ring of GEMVS_STAGES shared stages filled by
 * cp.async: GEMVS_STAGES − 1 rows are in flight while the warp computes one, whatever the arithmetic
 * costs, and a block of up to 16 warps keeps ~150–200 KB of weights in flight per multiprocessor. No block barrier: a
 * warp reduces its row with shuffles and lane 0 writes it. The rows of the first stages are requested
 * before the PDL wait (no kernel writes weights), overlapping the kernel before.
 * Stage: the row, then (dual modes) the second matrix's row; row_bytes % 16 == 0.
 * XU > 0: the lane's units of x (u = lane + 32·j, j < XU; k ≤ 1024·XU) are decoded once into registers
 * for all its rows; XU = 0 reloads them for each row (from L1). Dynamic shared memory: warps ·
 * GEMVS_STAGES (args.h) · stage bytes (the host sizes the block to it). */
/* llm170-parts: 6 (part.h) */
#include "part.h"
#include "gemv_out.h"
#include "group_tail.h"
#include "qtypes.h"
#include "tc.h"

#if !defined(LLM_HIP)


/* group_done for one warp's row: lane 0 counts the row into *cn (need rows a group); true in every lane
 * of the warp whose row completes the group, which resets the counter for the next launch (unused in the
 * parts of no q8 type, kernels/part.h) */
static __device__ __forceinline__ __attribute__((unused)) bool warp_group_done(int *cn, int need)
{
    __threadfence(); /* lane 0's row is visible before its count */
    __syncwarp();
    int last = 0;
    if ((threadIdx.x & 31) == 0) {
        last = atomicAdd(cn, 1) + 1 == need;
        if (last)
            *cn = 0;
    }
    last = __shfl_sync(0xffffffffu, last, 0);
    if (last)
        __threadfence(); /* the other rows, counted before, are read after this */
    return last;
}

template <int T, bool DN, int XU>
static __device__ __forceinline__ void gemvs_body(const struct gemv_args &a)
{
    typedef qunit<T> U;
    extern __shared__ __align__(16) unsigned char gs_ring[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const bool dual = a.mode == 2 || a.mode == 3;
    const int rb = (int)a.row_bytes, sb = dual ? 2 * rb : rb;
    unsigned char *ring = gs_ring + (long long)warp * GEMVS_STAGES * sb;
    const u32 ring_s = smem_addr(ring);
    /* this warp's rows: a contiguous run, the device's warps splitting the rows evenly */
    const long long tw = (long long)gridDim.x * nw, gw = (long long)blockIdx.x * nw + warp;
    const int r0 = (int)(gw * a.n_rows / tw), nr = (int)((gw + 1) * a.n_rows / tw) - r0;
    const int chunks = rb / 16;
    auto issue = [&](int i) { /* row r0 + i into stage i % GEMVS_STAGES */
        const u32 dst = ring_s + (u32)((i % GEMVS_STAGES) * sb);
        const unsigned char *src = a.w + (long long)(r0 + i) * rb;
        for (int c = lane; c < chunks; c += 32)
            cp_async16(dst + 16u * (u32)c, src + 16 * c, 16);
        if (dual) {
            const unsigned char *src2 = a.w2 + (long long)(r0 + i) * rb;
            for (int c = lane; c < chunks; c += 32)
                cp_async16(dst + (u32)rb + 16u * (u32)c, src2 + 16 * c, 16);
        }
    };
#pragma unroll
    for (int i = 0; i < GEMVS_STAGES - 1; i++) {
        if (i < nr)
            issue(i);
        cp_async_commit();
    }
    PDL_ENTER(); /* x, its norm partials and y (mode 1) come from the kernels before */
    const i8 *x = (const i8 *)a.x;
    const float *xd = a.xd;
    const int nu = a.k / 32;
    float rn = 1.0f; /* the input's deferred RMSNorm: 1/sqrt(mean x² + eps), its partials added in order */
    if (DN) {
        float s = 0.0f;
        for (int i = lane; i < nu; i += 32)
            s += a.rsp[i];
        rn = 1.0f / sqrtf(warp_sum(s) / (float)a.k + a.eps);
    }
    struct xq8 xc[XU > 0 ? XU : 1];
#pragma unroll
    for (int j = 0; j < XU; j++)
        if (lane + 32 * j < nu)
            U::load_x(x, xd, lane + 32 * j, xc[j]);
    for (int i = 0; i < nr; i++) {
        if (i + GEMVS_STAGES - 1 < nr)
            issue(i + GEMVS_STAGES - 1); /* into the stage row i − 1 left (the __syncwarp after it) */
        cp_async_commit();
        cp_async_wait<GEMVS_STAGES - 1>(); /* this lane's part of row i has landed */
        __syncwarp();               /* ... and every lane's */
        const u8 *row = ring + (i % GEMVS_STAGES) * sb, *row2 = row + rb;
        float acc = 0.0f, acc2 = 0.0f;
        if (XU > 0) {
#pragma unroll
            for (int j = 0; j < (XU > 0 ? XU : 1); j++)
                if (lane + 32 * j < nu) {
                    acc += U::dot(row, lane + 32 * j, xc[j]);
                    if (dual)
                        acc2 += U::dot(row2, lane + 32 * j, xc[j]);
                }
        } else {
            for (int u = lane; u < nu; u += 32) {
                struct xq8 xs;
                U::load_x(x, xd, u, xs);
                acc += U::dot(row, u, xs);
                if (dual)
                    acc2 += U::dot(row2, u, xs);
            }
        }
        acc = warp_sum(acc);
        if (dual)
            acc2 = warp_sum(acc2);
        const int r = r0 + i;
        if (lane == 0)
            gemv_out(a, r, r, acc * rn, acc2 * rn, dual);
        __syncwarp(); /* the stage is free for the refill at the next row */
        /* the 32-row group tails: the next sublayer's deferred norm (mode 1), the SwiGLU output's q8 copy */
        if (a.mode == 1 && a.nw && !DN) {
            if (warp_group_done(a.ncnt + r / 32, 32))
                norm_group(a, 0, r / 32, lane);
        } else if (a.mode == 2 && a.yq) {
            if (warp_group_done(a.cnt + r / 32, 32))
                group_q8(a.y, 0, a.yq, a.yqd, r / 32 * 32 + lane);
        }
    }
    cp_async_wait<0>(); /* no copy in flight into the block's shared memory at its exit */
}

/* name, name_dn (on a deferred norm's input), and _x4 of each (x kept in registers, k ≤ 4096) */
#define GEMVS(name, T)                                                                                             \
    extern "C" __global__ void __launch_bounds__(512) name(const struct gemv_args a) { gemvs_body<T, false, 0>(a); } \
    extern "C" __global__ void __launch_bounds__(512) name##_dn(const struct gemv_args a)                            \
    {                                                                                                              \
        gemvs_body<T, true, 0>(a);                                                                                 \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) name##_x4(const struct gemv_args a)                            \
    {                                                                                                              \
        gemvs_body<T, false, 4>(a);                                                                                \
    }                                                                                                              \
    extern "C" __global__ void __launch_bounds__(512) name##_x4_dn(const struct gemv_args a)                         \
    {                                                                                                              \
        gemvs_body<T, true, 4>(a);                                                                                 \
    }

#if IN_PART(KT_Q8_0)
GEMVS(gemvs_q8_0, KT_Q8_0)
#endif
#if IN_PART(KT_Q4_K)
GEMVS(gemvs_q4_K, KT_Q4_K)
#endif
#if IN_PART(KT_Q5_K)
GEMVS(gemvs_q5_K, KT_Q5_K)
#endif
#if IN_PART(KT_Q6_K)
GEMVS(gemvs_q6_K, KT_Q6_K)
#endif

#endif /* !LLM_HIP */
