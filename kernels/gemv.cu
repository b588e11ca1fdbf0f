/* gemv.cu — fused dequant-GEMV: y[z] (op)= W · x[z] for a few activation
 * rows (decode, grouped MoE experts). Each warp owns R output rows and
 * sweeps the row units with its lanes, reading every weight byte once;
 * activations stay f32 and are fetched once per unit for all R rows (and
 * for both matrices of the fused SwiGLU mode). Blocks of consecutive index
 * share rows across z, so a row is re-read from L2, not DRAM. */
#include "qtypes.h"

template <int T, int R>
static __device__ __forceinline__ void gemv_body(const struct gemv_args &a)
{
    typedef unit<T> U;
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int z = blockIdx.x % a.nz;
    const int row0 = ((int)(blockIdx.x / a.nz) * nw + warp) * R;
    if (row0 >= a.n_rows)
        return;
    const u8 *W = a.w, *W2 = a.w2;
    if (a.sel) {
        const long long off = (long long)a.sel[z] * a.expert_bytes;
        W += off;
        if (W2)
            W2 += off;
    }
    const float *x = a.x + (long long)(z / a.x_div) * a.x_stride;
    const u8 *rows[R], *rows2[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = min(row0 + r, a.n_rows - 1);
        rows[r] = W + (long long)rr * a.row_bytes;
        rows2[r] = a.mode == 2 ? W2 + (long long)rr * a.row_bytes : rows[r];
    }
    float acc[R], acc2[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f, acc2[r] = 0.0f;
    const int nu = a.k / U::UE;
    if (a.mode == 2) {
        for (int u = lane; u < nu; u += WARP) {
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
        for (int u = lane; u < nu; u += WARP) {
            float xs[U::XS];
            U::load_x(x, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += U::dot(rows[r], u, xs);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        acc[r] = warp_sum(acc[r]);
        if (a.mode == 2)
            acc2[r] = warp_sum(acc2[r]);
    }
    if (lane < R) {
        float v = 0.0f, v2 = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r == lane)
                v = acc[r], v2 = acc2[r];
        const int row = row0 + lane;
        if (row < a.n_rows) {
            float *y = a.y + (long long)z * a.y_stride + row;
            if (a.bias)
                v += a.bias[row];
            if (a.mode == 2) {
                if (a.bias2)
                    v2 += a.bias2[row];
                *y = silu_f(v) * v2;
            } else if (a.mode == 1) {
                *y += v;
            } else {
                *y = v;
            }
        }
    }
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
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const int z = blockIdx.x % a.nz;
    const int row0 = ((int)(blockIdx.x / a.nz) * nw + warp) * R;
    if (row0 >= a.n_rows)
        return;
    const u8 *W = a.w, *W2 = a.w2;
    if (a.sel) {
        const long long off = (long long)a.sel[z] * a.expert_bytes;
        W += off;
        if (W2)
            W2 += off;
    }
    const long long xr = z / a.x_div;
    const i8 *x = (const i8 *)a.x + xr * a.x_stride;
    const float *xd = a.xd + xr * (a.x_stride / 32) * 2;
    const u8 *rows[R], *rows2[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = min(row0 + r, a.n_rows - 1);
        rows[r] = W + (long long)rr * a.row_bytes;
        rows2[r] = a.mode == 2 ? W2 + (long long)rr * a.row_bytes : rows[r];
    }
    float acc[R], acc2[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f, acc2[r] = 0.0f;
    const int nu = a.k / 32;
    if (a.mode == 2) {
        for (int u = lane; u < nu; u += WARP) {
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
        for (int u = lane; u < nu; u += WARP) {
            struct xq8 xs;
            U::load_x(x, xd, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += U::dot(rows[r], u, xs);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        acc[r] = warp_sum(acc[r]);
        if (a.mode == 2)
            acc2[r] = warp_sum(acc2[r]);
    }
    if (lane < R) {
        float v = 0.0f, v2 = 0.0f;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (r == lane)
                v = acc[r], v2 = acc2[r];
        const int row = row0 + lane;
        if (row < a.n_rows) {
            float *y = a.y + (long long)z * a.y_stride + row;
            if (a.bias)
                v += a.bias[row];
            if (a.mode == 2) {
                if (a.bias2)
                    v2 += a.bias2[row];
                *y = silu_f(v) * v2;
            } else if (a.mode == 1) {
                *y += v;
            } else {
                *y = v;
            }
        }
    }
}

#define GEMVQ(name, T, R) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemvq_body<T, R>(a); }

GEMVQ(gemvq_q8_0, KT_Q8_0, 2)
GEMVQ(gemvq_q4_K, KT_Q4_K, 2)
GEMVQ(gemvq_q5_K, KT_Q5_K, 2)
GEMVQ(gemvq_q6_K, KT_Q6_K, 2)
