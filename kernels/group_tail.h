/* group_tail.h — the "finished 32-row group" tail of the GEMV epilogues (gemv.cu, gemvb.cu): the
 * next GEMV reads its input as q8 (int8 per 32 with a scale), and a group of 32 output rows is written
 * by several blocks, so the block that completes a group (found with a counter per group) quantizes
 * it, reading the other blocks' rows past L1. Used for the SwiGLU output's q8 copy (mode 2) and for
 * the deferred RMSNorm of the residual GEMVs (modes 1 and 4, gemv.cu norm_group_tail). */
#ifndef LLM170_GROUP_TAIL_H
#define LLM170_GROUP_TAIL_H

#include "qtypes.h"

/* Every thread of the block calls it after writing its rows. Counts the block into *cn (need blocks
 * write one group); true, in every thread, for the block that completes the group, which also resets
 * the counter for the next launch. */
static __device__ __forceinline__ bool group_done(int *cn, int need)
{
    __shared__ int last;
    __threadfence(); /* this block's rows are visible before its count */
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(cn, 1) + 1 == need;
        if (last)
            *cn = 0;
    }
    __syncthreads();
    if (last)
        __threadfence(); /* the other blocks' rows, counted before, are read after this */
    return last;
}

/* 32 consecutive threads, this one's element e (e % 32 = its place in the group) of the finished row
 * y: its q8 copy into q / qd (q8_group), of y[e]·w[e] when w is set. Returns y[e]. */
static __device__ __forceinline__ float group_q8(const float *y, const float *w, i8 *q, float *qd, int e)
{
    const float v = ld_cg(y + e); /* past L1: other blocks' rows */
    q8_group(w ? v * w[e] : v, q, qd, e);
    return v;
}

/* Σ over the 32 consecutive threads of an aligned group (WARP may be 64) */
static __device__ __forceinline__ float group_sum(float v)
{
#pragma unroll
    for (int m = 16; m > 0; m >>= 1)
        v += shfl_xor(v, m);
    return v;
}

#endif
