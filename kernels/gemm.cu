/* gemm.cu — batched products for prefill: Y[m][r] (op)= W[r] · X[m] over a
 * 64-row × 64-token tile per block. Each K step dequantizes a 64 × 32 slab
 * of weights into shared memory as f32 (so each weight is read once per 64
 * tokens) and stages the matching activations; every thread then computes a
 * 4 × 4 patch. Plain FMA in f32: the exact path for f32 weights, and the
 * fallback where the tensor-core GEMM (mma.cu) does not apply. With gridDim.z > 1 each z takes a slice
 * of whole K steps and the slices add into y with atomics (the host zeroes a mode-0 y first): a MoE
 * router's 256 rows × 512 tokens are 32 tiles, a quarter of the device's multiprocessors. */
#include "qtypes.h"

#define TM 64 /* tokens per tile */
#define TN 64 /* weight rows per tile */
#define TK 32

template <int T>
static __device__ __forceinline__ void gemm_body(const struct gemv_args &a)
{
    __shared__ float Ws[TK][TN + 1];
    __shared__ float Xs[TK][TM + 1];
    const int tid = threadIdx.x; /* 256 threads */
    const int n0 = blockIdx.x * TN, m0 = blockIdx.y * TM;
    const int per = (a.k + TK * (int)gridDim.z - 1) / (TK * (int)gridDim.z) * TK; /* K of a slice */
    const int kb = (int)blockIdx.z * per, ke = min(a.k, kb + per);
    const int tx = tid % 16, ty = tid / 16; /* tx: rows n0 + tx + 16i, ty: tokens m0 + ty + 16j */
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = kb; k0 < ke; k0 += TK) {
        /* 64 × 32 weights: thread covers 8 elements of one row */
        {
            const int r = tid / 4, kk = (tid % 4) * 8;
            const int row = n0 + r;
            const u8 *wr = a.w + (long long)min(row, a.n_rows - 1) * a.row_bytes;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int k = k0 + kk + i;
                Ws[kk + i][r] = (row < a.n_rows && k < ke) ? deq_elem<T>(wr, k) : 0.0f;
            }
        }
        {
            const int mm = tid / 4, kk = (tid % 4) * 8;
            const int m = m0 + mm;
            const float *xr = a.x + (long long)min(m, a.nz - 1) * a.x_stride;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int k = k0 + kk + i;
                Xs[kk + i][mm] = (m < a.nz && k < ke) ? xr[k] : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < TK; k++) {
            float wv[4], xv[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                wv[i] = Ws[k][tx + 16 * i], xv[i] = Xs[k][ty + 16 * i];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += wv[i] * xv[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int row = n0 + tx + 16 * i;
        if (row >= a.n_rows)
            continue;
        const float b = a.bias && blockIdx.z == 0 ? a.bias[row] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = m0 + ty + 16 * j;
            if (m >= a.nz)
                continue;
            float *y = a.y + (long long)m * a.y_stride + row;
            const float v = acc[i][j] + b;
            if (gridDim.z > 1)
                atomicAdd(y, v);
            else if (a.mode == 1)
                *y += v;
            else
                *y = v;
        }
    }
}

#define GEMM(name, T) \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemm_body<T>(a); }

GEMM(gemm_f32, KT_F32)
GEMM(gemm_f16, KT_F16)
GEMM(gemm_q8_0, KT_Q8_0)
GEMM(gemm_q4_K, KT_Q4_K)
GEMM(gemm_q5_K, KT_Q5_K)
GEMM(gemm_q6_K, KT_Q6_K)
GEMM(gemm_iq4_xs, KT_IQ4_XS)
