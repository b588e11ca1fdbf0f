/* gemv.cu — fused dequant-GEMV: y[z] (op)= W · x[z] for a few activation
 * rows (decode, grouped MoE experts). A block of 4 warps owns R output rows
 * (of one z) and its threads stride over the row's units, so for the usual
 * widths every thread issues all its weight loads at once (one or a few
 * units) and every weight byte is read once; the activations of a unit are
 * fetched once for all R rows (and both matrices of the dual modes). Partial
 * sums meet through shared memory. Blocks of consecutive index share rows
 * across z, so a row is re-read from L2, not DRAM.
 * gemv_*: f32 activations. gemvq_*: q8 activations (int8 per 32 with a
 * scale, llama.cpp's MMVQ scheme) and dp4a; gemvq4_* / gemvq8_* the same
 * with 4 / 8 rows per block: more weight loads in flight per thread and
 * fewer, longer blocks (the host picks R and sizes the block to the row, so
 * short rows such as a MoE expert's 768 do not leave lanes idle).
 * Mode 4 (MoE down projection + weighted combine): a block's threads stride
 * over the (slot, unit) pairs of its token's selected experts, so the K
 * experts' rows meet in the same block reduction, in a fixed order. */
/* llm170-parts: 6 (part.h) */
#include "part.h"
#include "gemv_out.h"
#include "gemv_pdl.h"
#include "group_tail.h"
#include "qtypes.h"
#include "route.h"

#define MAXW 8 /* warps per block at most */

/* The next sublayer's RMSNorm, deferred (modes 1 and 4 with a.nw; n_rows % 32 == 0, so every group
 * of 32 rows is whole and 32 / R blocks write it): RMSNorm(y)·w = r · (y∘w), r = 1/sqrt(mean(y²) + eps)
 * one scalar per row, and a GEMV's output is linear in its input (a q8 GEMV's in its input's scale), so
 * the GEMVs reading the normed row take y∘w (or its q8 copy) and multiply their outputs by r (in_norm).
 * Quantizing y∘w gives the same int8 values as quantizing r·(y∘w), up to float rounding. The block
 * completing a group writes the group's y∘w, its q8 copy and its Σ y²; the GEMVs reading the row sum
 * those partials themselves, in a fixed order (no second handshake at the end of this grid, and no
 * atomics adding in arrival order, which would make a graph replay differ from direct launches in the
 * last bits). Replaces an rms_norm launch between two GEMVs. */
template <int R>
static __device__ __forceinline__ void norm_group_tail(const struct gemv_args &a, int z, int row0)
{
    const int G = a.n_rows / 32, g = row0 / 32;
    if (!group_done(a.ncnt + (long long)z * G + g, 32 / R) || threadIdx.x >= 32)
        return;
    norm_group(a, z, g, (int)threadIdx.x);
}

/* The deferred RMSNorm of this block's input row (a.rsp): warp 0 loads the row's Σ x² partials (up to
 * IN_NORM_EARLY a lane) as the epilogue starts, so they arrive during the block's reduction, then adds
 * them (and any beyond) in a fixed order and takes the scale (registers are free by then). */
#define IN_NORM_EARLY 4
struct in_norm {
    float p[IN_NORM_EARLY];
};

static __device__ __forceinline__ struct in_norm in_norm_load(const struct gemv_args &a, int z)
{
    struct in_norm n;
    const int G = a.k / 32;
    const float *rp = a.rsp && threadIdx.x < 32 ? a.rsp + (long long)(z / a.x_div) * G : 0;
#pragma unroll
    for (int j = 0; j < IN_NORM_EARLY; j++) {
        const int i = (int)threadIdx.x + 32 * j;
        n.p[j] = rp && i < G ? rp[i] : 0.0f;
    }
    return n;
}

/* warp 0 (the threads that write the rows): 1/sqrt(mean x² + eps) of the input row; 1 without */
static __device__ __forceinline__ float in_norm_scale(const struct gemv_args &a, int z, const struct in_norm &n)
{
    if (!a.rsp || threadIdx.x >= 32)
        return 1.0f;
    const int G = a.k / 32;
    const float *rp = a.rsp + (long long)(z / a.x_div) * G;
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < IN_NORM_EARLY; j++)
        s += n.p[j];
    for (int i = (int)threadIdx.x + 32 * IN_NORM_EARLY; i < G; i += 32)
        s += rp[i];
    s = group_sum(s);
    return 1.0f / sqrtf(s / (float)a.k + a.eps);
}

/* The MoE routing fused into the router GEMV (mode 0 with a.rsel): the grid's last block routes each
 * token from its logits row (warp 0, route.h), saving the moe_route launch of every MoE layer
 * (measured no faster than the separate kernel: opt-in, LLM170_HIP_FUSE_ROUTE=1). */
static __device__ __forceinline__ void route_tail(const struct gemv_args &a)
{
    if (!group_done(a.ncnt, (int)gridDim.x) || threadIdx.x >= WARP) /* one group: the whole grid */
        return;
    for (int z = 0; z < a.nz; z++)
        route_token(a.y + (long long)z * a.y_stride, a.n_rows, a.nslot, a.rsel + (long long)z * a.nslot,
                    a.rw + (long long)z * a.nslot, a.rscale);
}

/* Reduce acc/acc2 over the block and write rows row0 .. row0+R-1 of z. DN: the input's RMSNorm is
 * deferred (a.rsp; the *_dn kernels, which are never the residual GEMV). A kernel of its own: with both
 * the input's scale and the residual's norm tail in one kernel, ptxas gave the main loop more registers
 * (gemvq4_q4_K 64 → 71: one block a multiprocessor fewer) and the hybrids' decode, which defers
 * nothing, measured 6 % slower (qwen35-27b tg128 109.5 vs 116.5). */
template <int R, bool DN>
static __device__ __forceinline__ void gemv_epilogue(const struct gemv_args &a, int z, int row0, float *acc,
                                                     float *acc2)
{
    struct in_norm in = {};
    if (DN)
        in = in_norm_load(a, z);
    __shared__ float red[2 * R][MAXW];
    const int lane = threadIdx.x % WARP, warp = threadIdx.x / WARP, nw = blockDim.x / WARP;
    const bool dual = a.mode == 2 || a.mode == 3;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float v = warp_sum(acc[r]);
        const float v2 = dual ? warp_sum(acc2[r]) : 0.0f;
        if (lane == 0)
            red[r][warp] = v, red[R + r][warp] = v2;
    }
    __syncthreads();
    const float rn = DN ? in_norm_scale(a, z, in) : 1.0f; /* the input's deferred RMSNorm */
    const int r = threadIdx.x, row = row0 + r;
    if (r < R && row < a.n_rows) {
        float v = 0.0f, v2 = 0.0f;
        for (int w = 0; w < nw; w++)
            v += red[r][w], v2 += red[R + r][w];
        gemv_out(a, (long long)z * a.y_stride + row, row, v * rn, v2 * rn, dual);
    }
    if (!DN && a.nw) {
        norm_group_tail<R>(a, z, row0);
        return;
    }
    if (a.rsel) {
        route_tail(a);
        return;
    }
    if (a.mode != 2 || !a.yq)
        return;
    /* The SwiGLU output's q8 copy for the next GEMV: the block that completes a group of 32 rows
     * (32 / R blocks write one) quantizes it. */
    if (!group_done(a.cnt + (long long)z * (a.n_rows / 32) + row0 / 32, 32 / R) || threadIdx.x >= 32)
        return;
    group_q8(a.y + (long long)z * a.y_stride, 0, a.yq + (long long)z * a.n_rows,
             a.yqd + (long long)z * (a.n_rows / 32) * 2, row0 / 32 * 32 + (int)threadIdx.x);
}

/* Programmatic dependent launch (kernels/gemv_pdl.h): an expert slice (sel) is picked by ids an earlier
 * kernel wrote, so those blocks only wait. */
template <int R>
static __device__ __forceinline__ void gemv_enter(const struct gemv_args &a)
{
    gemv_pdl_enter(a, !a.sel, (int)(blockIdx.x / a.nz) * R, R, a.mode == 2 || a.mode == 3);
}

/* rows of this block, clamped (the epilogue skips the extra ones) */
template <int R>
static __device__ __forceinline__ int block_rows(const struct gemv_args &a, const u8 **rows, const u8 **rows2)
{
    const int z = blockIdx.x % a.nz;
    const int row0 = (int)(blockIdx.x / a.nz) * R;
    const u8 *W = a.w, *W2 = a.w2;
    if (a.sel && a.mode != 4) { /* mode 4 picks the expert per slot */
        const long long off = (long long)a.sel[z] * a.expert_bytes;
        W += off;
        if (W2)
            W2 += off;
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int rr = min(row0 + r, a.n_rows - 1);
        rows[r] = W + (long long)rr * a.row_bytes;
        rows2[r] = a.mode == 2 || a.mode == 3 ? W2 + (long long)rr * a.row_bytes : rows[r];
    }
    return row0;
}

template <int T, int R, bool DN>
static __device__ __forceinline__ void gemv_body(const struct gemv_args &a)
{
    typedef unit<T> U;
    gemv_enter<R>(a);
    const u8 *rows[R], *rows2[R];
    const int z = blockIdx.x % a.nz;
    const int row0 = block_rows<R>(a, rows, rows2);
    const float *x = a.x + (long long)(z / a.x_div) * a.x_stride;
    float acc[R], acc2[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        acc[r] = 0.0f, acc2[r] = 0.0f;
    const int nu = a.k / U::UE;
    if (a.mode == 4) {
        for (int v = threadIdx.x; v < a.nslot * nu; v += blockDim.x) {
            const int s = v / nu, u = v - s * nu;
            const long long zs = (long long)z * a.nslot + s;
            const long long off = (long long)a.sel[zs] * a.expert_bytes;
            const float ws = a.sw[zs];
            float xs[U::XS];
            U::load_x(a.x + zs * a.x_stride, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += ws * U::dot(rows[r] + off, u, xs);
        }
    } else if (a.mode == 2 || a.mode == 3) {
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
    gemv_epilogue<R, DN>(a, z, row0, acc, acc2);
}

/* each also as name_dn: on an input whose RMSNorm is deferred (gemv_epilogue) */
#define GEMV(name, T, R)                                                                                         \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemv_body<T, R, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256) name##_dn(const struct gemv_args a) { gemv_body<T, R, true>(a); }

#if IN_PART(KT_F32)
GEMV(gemv_f32, KT_F32, 2)
#endif
#if IN_PART(KT_F16)
GEMV(gemv_f16, KT_F16, 2)
#endif
#if IN_PART(KT_Q8_0)
GEMV(gemv_q8_0, KT_Q8_0, 2)
#endif
#if IN_PART(KT_Q4_K)
GEMV(gemv_q4_K, KT_Q4_K, 2)
#endif
#if IN_PART(KT_Q5_K)
GEMV(gemv_q5_K, KT_Q5_K, 2)
#endif
#if IN_PART(KT_Q6_K)
GEMV(gemv_q6_K, KT_Q6_K, 2)
#endif
#if IN_PART(KT_IQ4_XS)
GEMV(gemv_iq4_xs, KT_IQ4_XS, 2)
#endif

/* The same on q8 activations: x is int8 [..][x_stride], xd the (d, d·Σq) of each 32 of them. */
template <int T, int R, bool DN>
static __device__ __forceinline__ void gemvq_body(const struct gemv_args &a)
{
    typedef qunit<T> U;
    gemv_enter<R>(a);
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
    if (a.mode == 4) {
        for (int v = threadIdx.x; v < a.nslot * nu; v += blockDim.x) {
            const int s = v / nu, u = v - s * nu;
            const long long zs = (long long)z * a.nslot + s;
            const long long off = (long long)a.sel[zs] * a.expert_bytes;
            const float ws = a.sw[zs];
            struct xq8 xs;
            U::load_x((const i8 *)a.x + zs * a.x_stride, a.xd + zs * (a.x_stride / 32) * 2, u, xs);
#pragma unroll
            for (int r = 0; r < R; r++)
                acc[r] += ws * U::dot(rows[r] + off, u, xs);
        }
    } else if (a.mode == 2 || a.mode == 3) {
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
    gemv_epilogue<R, DN>(a, z, row0, acc, acc2);
}

#define GEMVQ(name, T, R)                                                                                          \
    extern "C" __global__ void __launch_bounds__(256) name(const struct gemv_args a) { gemvq_body<T, R, false>(a); } \
    extern "C" __global__ void __launch_bounds__(256) name##_dn(const struct gemv_args a) { gemvq_body<T, R, true>(a); }

#if IN_PART(KT_Q8_0)
GEMVQ(gemvq_q8_0, KT_Q8_0, 2)
#endif
#if IN_PART(KT_Q4_K)
GEMVQ(gemvq_q4_K, KT_Q4_K, 2)
#endif
#if IN_PART(KT_Q5_K)
GEMVQ(gemvq_q5_K, KT_Q5_K, 2)
#endif
#if IN_PART(KT_Q6_K)
GEMVQ(gemvq_q6_K, KT_Q6_K, 2)
#endif
#if IN_PART(KT_Q8_0)
GEMVQ(gemvq4_q8_0, KT_Q8_0, 4)
#endif
#if IN_PART(KT_Q4_K)
GEMVQ(gemvq4_q4_K, KT_Q4_K, 4)
#endif
#if IN_PART(KT_Q5_K)
GEMVQ(gemvq4_q5_K, KT_Q5_K, 4)
#endif
#if IN_PART(KT_Q6_K)
GEMVQ(gemvq4_q6_K, KT_Q6_K, 4)
#endif
#if IN_PART(KT_Q8_0)
GEMVQ(gemvq8_q8_0, KT_Q8_0, 8)
#endif
#if IN_PART(KT_Q4_K)
GEMVQ(gemvq8_q4_K, KT_Q4_K, 8)
#endif
#if IN_PART(KT_Q5_K)
GEMVQ(gemvq8_q5_K, KT_Q5_K, 8)
#endif
#if IN_PART(KT_Q6_K)
GEMVQ(gemvq8_q6_K, KT_Q6_K, 8)
#endif
