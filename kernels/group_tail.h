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

/* The deferred RMSNorm's part of a finished 32-row group g of a residual GEMV's output y[z] (gemv_args nw):
 * its y·nw (ny), that row's q8 copy (nq, nqd) and its Σ y² (nsp), written by 32 consecutive threads
 * (lane = the element's place in the group), reading the other blocks' rows past L1. */
static __device__ __forceinline__ void norm_group(const struct gemv_args &a, int z, int g, int lane)
{
    const int G = a.n_rows / 32, e = g * 32 + lane;
    const float v = group_q8(a.y + (long long)z * a.y_stride, a.nw, a.nq + (long long)z * a.n_rows,
                             a.nqd + (long long)z * G * 2, e);
    a.ny[(long long)z * a.n_rows + e] = v * a.nw[e];
    const float s = group_sum(v * v);
    if (lane == 0)
        a.nsp[(long long)z * G + g] = s;
}

#endif
