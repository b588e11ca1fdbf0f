/* gemm.cu — batched products for prefill: Y[m][r] (op)= W[r] · X[m] over a
 * 64-row × 64-token tile per block. Each K step dequantizes a 64 × 32 slab
 * of weights into shared memory as f32 (so each weight is read once per 64
 * tokens) and stages the matching activations; every thread then computes a
 * 4 × 4 patch. Plain FMA for now; tensor cores are the next step. */
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
    const int tx = tid % 16, ty = tid / 16; /* tx: rows n0 + tx + 16i, ty: tokens m0 + ty + 16j */
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < a.k; k0 += TK) {
        /* 64 × 32 weights: thread covers 8 elements of one row */
        {
            const int r = tid / 4, kk = (tid % 4) * 8;
            const int row = n0 + r;
            const u8 *wr = a.w + (long long)min(row, a.n_rows - 1) * a.row_bytes;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int k = k0 + kk + i;
                Ws[kk + i][r] = (row < a.n_rows && k < a.k) ? deq_elem<T>(wr, k) : 0.0f;
            }
        }
        {
            const int mm = tid / 4, kk = (tid % 4) * 8;
            const int m = m0 + mm;
            const float *xr = a.x + (long long)min(m, a.nz - 1) * a.x_stride;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int k = k0 + kk + i;
                Xs[kk + i][mm] = (m < a.nz && k < a.k) ? xr[k] : 0.0f;
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
        const float b = a.bias ? a.bias[row] : 0.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int m = m0 + ty + 16 * j;
            if (m >= a.nz)
                continue;
            float *y = a.y + (long long)m * a.y_stride + row;
            const float v = acc[i][j] + b;
            if (a.mode == 1)
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

/* Tensor-core variant (NVIDIA sm_80+, mma.sync m16n8k16, f16 operands, f32 accumulation): the same
 * 64 × 64 tile, 4 warps of 32 × 32; weights are dequantized to f16 into shared memory once per
 * 64 tokens, activations rounded to f16. ~1e-3 relative, like llama.cpp's own f16 paths; used for
 * quantized weights only (float weights keep the exact FMA kernel). */
#if !defined(LLM_HIP)
static __device__ __forceinline__ u32 pack_h2(float lo, float hi) { return (u32)f2h(lo) | ((u32)f2h(hi) << 16); }

static __device__ __forceinline__ void mma16816(float *c, const u32 *a, const u32 *b)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int T>
static __device__ __forceinline__ void gemm_mma_body(const struct gemv_args &a)
{
    __shared__ u32 Xs[64][20]; /* 64 tokens × 32 halves, rows padded to 20 words: conflict-free fragments */
    __shared__ u32 Ws[64][20]; /* 64 weight rows × 32 halves */
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32; /* 128 threads */
    const int n0 = blockIdx.x * 64, m0 = blockIdx.y * 64;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
    const int gid = lane >> 2, tig = lane & 3;
    float acc[2][4][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++)
                acc[i][j][k] = 0.0f;
    const int lr = tid >> 1, lk = (tid & 1) * 16; /* this thread's tile row and first k */
    const int wrow = n0 + lr, xrow = m0 + lr;
    const u8 *wr = a.w + (long long)min(wrow, a.n_rows - 1) * a.row_bytes;
    const float *xr = a.x + (long long)min(xrow, a.nz - 1) * a.x_stride;
    for (int k0 = 0; k0 < a.k; k0 += 32) {
#pragma unroll
        for (int i = 0; i < 16; i += 2) {
            const int k = k0 + lk + i;
            const bool okw = wrow < a.n_rows, okx = xrow < a.nz;
            const float w0 = okw && k < a.k ? deq_elem<T>(wr, k) : 0.0f;
            const float w1 = okw && k + 1 < a.k ? deq_elem<T>(wr, k + 1) : 0.0f;
            const float x0 = okx && k < a.k ? xr[k] : 0.0f;
            const float x1 = okx && k + 1 < a.k ? xr[k + 1] : 0.0f;
            Ws[lr][(lk + i) / 2] = pack_h2(w0, w1);
            Xs[lr][(lk + i) / 2] = pack_h2(x0, x1);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < 2; kk++) {
            u32 af[2][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                const int r = wm + mi * 16 + gid;
                af[mi][0] = Xs[r][kk * 8 + tig];
                af[mi][1] = Xs[r + 8][kk * 8 + tig];
                af[mi][2] = Xs[r][kk * 8 + tig + 4];
                af[mi][3] = Xs[r + 8][kk * 8 + tig + 4];
            }
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int n = wn + ni * 8 + gid;
                bf[ni][0] = Ws[n][kk * 8 + tig];
                bf[ni][1] = Ws[n][kk * 8 + tig + 4];
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++)
                    mma16816(acc[mi][ni], af[mi], bf[ni]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = m0 + wm + mi * 16 + gid + 8 * h;
                if (m >= a.nz)
                    continue;
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int row = n0 + wn + ni * 8 + tig * 2 + j;
                    if (row >= a.n_rows)
                        continue;
                    float *y = a.y + (long long)m * a.y_stride + row;
                    const float v = acc[mi][ni][2 * h + j] + (a.bias ? a.bias[row] : 0.0f);
                    if (a.mode == 1)
                        *y += v;
                    else
                        *y = v;
                }
            }
}

#define GEMM_MMA(name, T) \
    extern "C" __global__ void __launch_bounds__(128) name(const struct gemv_args a) { gemm_mma_body<T>(a); }

GEMM_MMA(gemm_mma_q8_0, KT_Q8_0)
GEMM_MMA(gemm_mma_q4_K, KT_Q4_K)
GEMM_MMA(gemm_mma_q5_K, KT_Q5_K)
GEMM_MMA(gemm_mma_q6_K, KT_Q6_K)
GEMM_MMA(gemm_mma_iq4_xs, KT_IQ4_XS)
#endif
