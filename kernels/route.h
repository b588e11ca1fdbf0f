/* route.h — MoE routing of one token by one warp, shared by the moe_route kernel (misc.cu) and the
 * router GEMV's fused tail (gemv.cu): softmax over the router logits, the K largest in descending
 * order (earlier index wins a tie, as ops_topk), weights renormalised to sum 1 and scaled. Each lane
 * holds the probabilities of experts lane, lane + WARP, ...; the K picks are K rounds of a warp-wide
 * arg-max (no thread walks all X experts, no host sync). Logits are read with ld_cg: in the fused
 * tail other blocks wrote them. X <= ROUTE_PER_LANE · WARP, K <= WARP. */
#ifndef LLM170_KERNEL_ROUTE_H
#define LLM170_KERNEL_ROUTE_H

#include "prelude.h"

#define ROUTE_PER_LANE 8

/* Called by all lanes of one warp (threadIdx.x < WARP). l: [X] logits; s, ww: [K] outputs. */
static __device__ __forceinline__ void route_token(const float *l, int X, int K, int *s, float *ww, float scale)
{
    const int lane = threadIdx.x % WARP;
    float p[ROUTE_PER_LANE];
    float m = -INF_F;
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int i = j * WARP + lane;
        p[j] = i < X ? ld_cg(l + i) : -INF_F;
        m = fmaxf(m, p[j]);
    }
    m = warp_max(m);
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < ROUTE_PER_LANE; j++) {
        const int i = j * WARP + lane;
        p[j] = i < X ? expf(p[j] - m) : 0.0f;
        sum += p[j];
    }
    const float inv = 1.0f / warp_sum(sum);
    unsigned taken = 0; /* bit j: this lane's expert j · WARP + lane is picked */
    float tot = 0.0f, pk = 0.0f;
    for (int k = 0; k < K; k++) {
        float bv = -1.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < ROUTE_PER_LANE; j++) {
            const int i = j * WARP + lane;
            const float v = p[j] * inv;
            if (i < X && !(taken >> j & 1) && v > bv)
                bv = v, bi = i;
        }
        for (int o = WARP / 2; o > 0; o >>= 1) {
            const float ov = shfl_xor(bv, o);
            const int oi = shfl_xor_i(bi, o);
            if (ov > bv || (ov == bv && oi < bi))
                bv = ov, bi = oi;
        }
        if (bi % WARP == lane)
            taken |= 1u << (bi / WARP);
        tot += bv;
        if (lane == k)
            pk = bv, s[k] = bi;
    }
    float ts = tot;
    if (ts < 6.103515625e-5f)
        ts = 6.103515625e-5f;
    if (lane < K) {
        float v = pk / ts;
        if (scale != 0.0f && scale != 1.0f)
            v *= scale;
        ww[lane] = v;
    }
}

#endif
