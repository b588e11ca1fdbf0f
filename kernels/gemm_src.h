/* gemm_src.h — where a tensor-core GEMM block's weights and activation rows come from (mma.cu's tiles,
 * wgmma.cu's): dense, the whole matrix and tokens m0 = blockIdx.y · MT on; grouped (G, MoE), blockIdx.y a
 * tile of one expert's (token, slot) pairs (gmap, moe_group in misc.cu): the expert's weight slice, the
 * tile's tokens pairs z = perm[i], read from x row z / x_div and written to y row z. NVIDIA only. */
#ifndef LLM170_KERNELS_GEMM_SRC_H
#define LLM170_KERNELS_GEMM_SRC_H

#include "args.h"
#include "prelude.h"

#if !defined(LLM_HIP)

template <bool G> struct gsrc {
    const u8 *w;      /* the weights the block's rows index */
    const int *perm;  /* grouped: the tile's pairs */
    int nz, m0;       /* tokens (pairs) of the product or tile, and the block's first */
    /* false: a grouped grid's spare tile (grids are sized for the most tiles a routing can make) */
    __device__ __forceinline__ bool init(const struct gemv_args &a, int mt)
    {
        w = a.w, perm = nullptr, nz = a.nz, m0 = (int)blockIdx.y * mt;
        if constexpr (G) {
            if ((int)blockIdx.y >= a.gmap[0])
                return false;
            const int *tl = a.gmap + 1 + 3 * blockIdx.y;
            w += (long long)tl[0] * a.expert_bytes;
            perm = a.gperm + tl[1];
            nz = tl[2];
            m0 = 0;
        }
        return true;
    }
    /* the f16 activation row of token m (< nz; mma_xprep's rows), its scale, and its output row */
    __device__ __forceinline__ const u16 *xrow(const struct gemv_args &a, int m) const
    {
        if constexpr (G)
            return a.xh + (long long)(perm[m] / a.x_div) * a.k;
        else
            return a.xh + (long long)m * a.k;
    }
    __device__ __forceinline__ float xscale(const struct gemv_args &a, int m) const
    {
        if constexpr (G)
            return a.xsc[perm[m] / a.x_div];
        else
            return a.xsc[m];
    }
    __device__ __forceinline__ int yrow(int m) const
    {
        if constexpr (G)
            return perm[m];
        else
            return m;
    }
};

#endif /* !LLM_HIP */
#endif
