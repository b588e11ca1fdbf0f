/* gemv.cu — fused dequant-GEMV: y[z] (op)= W · x[z] for a few activation
 * rows (decode, grouped MoE experts). A block of 4 warps owns R output rows
 * (of one z) and its threads stride over the row's units, so for the usual
 * widths every thread issues all its weight loads at once (one or a few
 * units) and every weight byte is read once; the activations of a unit are
 * fetched once for all R rows (and both matrices of the dual modes). Partial
 * sums meet through shared memory. Blocks of consecutive index share rows
 * across z, so a row is re-read from L2, not DRAM.
 * gemv_*: f32 activations. gemvq_*: q8 activations (int8 per 32 with a
 * scale, llama.cpp's MMVQ scheme) and dp4a. */
#include "qtypes.h"

#define MAXW 8 /* warps per block at most */

/* Reduce acc/acc2 over the block and write rows row0 .. row0+R-1 of z. */
template <int R>
static __device__ __forceinline__ void gemv_epilogue(const struct gemv_args &a, int z, int row0, float *acc,
                                                     float *acc2)
{
    __shared__ float red[2 * R][MAXW];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const bool dual = a.mode >= 2;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = warp_sum(acc[r]);
        const float v2 = dual ? warp_sum(acc2[r]) : 0.0f;
        if (lane == 0)
            red[r][warp] = v, red[R + r][warp] = v2;
    }
    __syncthreads();
    if (threadIdx.x >= R)
        return;
    const int r = threadIdx.x, row = row0 + r;
    if (row >= a.n_rows)
        return;
    float v = 0.0f, v2 = 0.0f;
    for (int w = 0; w < nw; w++)
        v += red[r][w], v2 += red[R + r][w];
    const long long yi = (long long)z * a.y_stride + row;
    if (a.bias)
        v += a.bias[row];
    if (dual && a.bias2)
        v2 += a.bias2[row];
    switch (a.mode) {
    case 0: a.y[yi] = v; break;
    case 1: a.y[yi] += v; break;
    case 2: a.y[yi] = silu_f(v) * v2; break;
    default: a.y[yi] = v, a.y2[yi] = v2; break;
    }
}

/* rows of this block, clamped (the epilogue skips the extra ones) */
template <int R>
static __device__ __forceinline__ int block_rows(const struct gemv_args &a, const u8 **rows, const u8 **rows2)
{
    const int z = blockIdx.x % a.nz;
    const int row0 = (int)(blockIdx.x / a.nz) * R;
    const u8 *W = a.w, *W2 = a.w2;
    if (a.sel) {
        const long long off = (long long)a.sel[z] * a.expert_bytes;
        W += off;
        if (W2)
            W2 += off;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = min(row0 + r, a.n_rows - 1);
        rows[r] = W + (long long)rr * a.row_bytes;
        rows2[r] = a.mode >= 2 ? W2 + (long long)rr * a.row_bytes : rows[r];
    }
    return row0;
}

template <int T, int R>
static __device__ __forceinline__ void gemv_body(const struct gemv_args &a)
{
    typedef unit<T> U;
    const u8 *rows[R], *rows2[R];
    const int z = blockIdx.x % a.nz;
    const int row0 = block_rows<R>(a, rows, rows2);
    const float *x = a.x + (long long)(z / a.x_div) * a.x_stride;
    float acc[R], acc2[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f, acc2[r] = 0.0f;
    const int nu = a.k / U::UE;
    if (a.mode >= 2) {
        for (int u = threadIdx.x; u < nu; u += blockDim.x) {
            float xs[U::XS];
            U::load_x(x, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[r] += U::dot(rows[r], u, xs);
                acc2[r] += U::dot(rows2[r], u, xs);
            }
        }
    } else {
#pragma unroll 2
        for (int u = threadIdx.x; u < nu; u += blockDim.x) {
            float xs[U::XS];
            U::load_x(x, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += U::dot(rows[r], u, xs);
        }
    }
    gemv_epilogue<R>(a, z, row0, acc, acc2);
}

#define GEMV(name, T, R) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemv_body<T, R>(a); }

GEMV(gemv_f32, KT_F32, 2)
GEMV(gemv_f16, KT_F16, 2)
GEMV(gemv_q8_0, KT_Q8_0, 2)
GEMV(gemv_q4_K, KT_Q4_K, 2)
GEMV(gemv_q5_K, KT_Q5_K, 2)
GEMV(gemv_q6_K, KT_Q6_K, 2)
GEMV(gemv_iq4_xs, KT_IQ4_XS, 2)

/* The same on q8 activations: x is int8 [..][x_stride], xd the (d, d·Σq) of each 32 of them. */
template <int T, int R>
static __device__ __forceinline__ void gemvq_body(const struct gemv_args &a)
{
    typedef qunit<T> U;
    const u8 *rows[R], *rows2[R];
    const int z = blockIdx.x % a.nz;
    const int row0 = block_rows<R>(a, rows, rows2);
    const long long xr = z / a.x_div;
    const i8 *x = (const i8 *)a.x + xr * a.x_stride;
    const float *xd = a.xd + xr * (a.x_stride / 32) * 2;
    float acc[R], acc2[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f, acc2[r] = 0.0f;
    const int nu = a.k / 32;
    if (a.mode >= 2) {
#pragma unroll 2
        for (int u = threadIdx.x; u < nu; u += blockDim.x) {
            struct xq8 xs;
            U::load_x(x, xd, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[r] += U::dot(rows[r], u, xs);
                acc2[r] += U::dot(rows2[r], u, xs);
            }
        }
    } else {
#pragma unroll 2
        for (int u = threadIdx.x; u < nu; u += blockDim.x) {
            struct xq8 xs;
            U::load_x(x, xd, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += U::dot(rows[r], u, xs);
        }
    }
    gemv_epilogue<R>(a, z, row0, acc, acc2);
}

#define GEMVQ(name, T, R) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemvq_body<T, R>(a); }

GEMVQ(gemvq_q8_0, KT_Q8_0, 2)
GEMVQ(gemvq_q4_K, KT_Q4_K, 2)
GEMVQ(gemvq_q5_K, KT_Q5_K, 2)
GEMVQ(gemvq_q6_K, KT_Q6_K, 2)
