/* wgmma.cu — the tensor-core GEMM of mma.cu on Hopper's warpgroup MMA (sm_90a: wgmma.mma_async):
 * Y[m][r] (op)= W[r] · X[m], f16 operands, f32 accumulation, the same arguments, modes, split K and
 * grouped (MoE) tiles as mma_ / mma128_ / mmag_ / mmag128_.
 *
 * Why: the mma.sync tiles spend their time feeding the tensor cores — every 16-wide slice of a step is
 * read from shared memory into registers (ldmatrix) by every warp before its products can issue, and
 * one resident block of 168 registers leaves two warps a scheduler to hide that (docs/hip-backend.md).
 * wgmma reads both operands from shared memory itself and runs asynchronously: a warpgroup issues a
 * step's four products and dequantizes the next step's weights while they run.
 *
 * A block of 256 threads (two warpgroups) computes 128 weight rows × MT tokens (64 or 128); warpgroup g
 * takes rows 64g..64g+63, all MT tokens (m64nMTk16, MT / 2 accumulators a thread). A 64-wide k step:
 * the weights, dequantized by every thread (wpiece.h: one row's half a thread, loaded into registers a
 * step ahead), go into one of two f16 tiles; the activations (f16 rows from mma_xprep) come by cp.async
 * into a ring of WG_STAGES tiles, issued two steps ahead. Tiles are in wgmma's no-swizzle layout: 8×8
 * core matrices of 128 bytes (a row's 8 halves 16 bytes apart), the 8 core matrices along k of a row
 * group adjacent (leading offset 128 bytes), row groups 1024 bytes apart (stride offset). The stores
 * land 128 contiguous bytes a quarter warp (loader rows 8 apart in a warp: no bank conflicts).
 *
 * Ordering per step s: the products of s are issued (wgmma.fence, four wgmma, commit); meanwhile the
 * threads store step s + 1's weights into the other tile (its readers, step s − 1's products, were
 * waited for) and issue step s + WG_STAGES − 1's activations into the stage step s − 1 used; then each
 * thread waits for its copies of step s + 1 and for the products, fences its generic-proxy writes
 * for the async proxy (fence.proxy.async), and one barrier publishes them.
 * Compiled only for sm_90a (the host compiles every module for it on a compute-capability 9.0 device);
 * elsewhere this module is empty and the host keeps the mma.sync tiles. */
/* llm170-parts: 6 (part.h) */
#include "part.h"
#include "qtypes.h"
#include "tc.h"
#include "gemm_src.h"
#include "wpiece.h"

#if !defined(LLM_HIP) && defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* byte offset of row r's halves 8g..8g+7 (k within the step) in a no-swizzle tile of 64-wide k */
static __device__ __forceinline__ int cm_off(int r, int g) { return ((r >> 3) * 8 + g) * 128 + (r & 7) * 16; }

/* a weight piece's writer for the wgmma tiles: 16 halves at k offset ko of row r (two core-matrix rows) */
struct wg_put {
    u8 *t; /* the tile */
    int r;
    __device__ __forceinline__ void operator()(int ko, const u32 *w) const
    {
        *(uint4 *)(t + cm_off(r, ko >> 3)) = make_uint4(w[0], w[1], w[2], w[3]);
        *(uint4 *)(t + cm_off(r, (ko >> 3) + 1)) = make_uint4(w[4], w[5], w[6], w[7]);
    }
};

/* the shared-memory matrix descriptor of a no-swizzle K-major operand at shared address a: start, leading
 * byte offset 128 (the next 8 k), stride byte offset 1024 (the next 8 rows), each in 16-byte units */
static __device__ __forceinline__ unsigned long long wg_desc(u32 a)
{
    return (unsigned long long)((a & 0x3FFFF) >> 4) | (128ull >> 4) << 16 | (1024ull >> 4) << 32;
}

static __device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
/* generic-proxy shared-memory writes (stores, cp.async) made visible to the async proxy wgmma reads through */
static __device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#define WG_F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define WG_F16(i) WG_F4(i), WG_F4(i + 4), WG_F4(i + 8), WG_F4(i + 12)

/* d (64 rows × N tokens of the warpgroup, N / 2 a thread) += A (64 × 16 at da) · B (N × 16 at db)ᵀ;
 * d[4j + 2h + c] is row 16·warp + lane / 4 + 8h, token 8j + 2·(lane % 4) + c */
template <int N> struct wg_mma;
template <> struct wg_mma<64> {
    static __device__ __forceinline__ void run(float *d, unsigned long long da, unsigned long long db)
    {
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                     "%32, %33, p, 1, 1, 0, 0; }"
                     : WG_F16(0), WG_F16(16)
                     : "l"(da), "l"(db), "r"(1));
    }
};
template <> struct wg_mma<128> {
    static __device__ __forceinline__ void run(float *d, unsigned long long da, unsigned long long db)
    {
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                     "%64, %65, p, 1, 1, 0, 0; }"
                     : WG_F16(0), WG_F16(16), WG_F16(32), WG_F16(48)
                     : "l"(da), "l"(db), "r"(1));
    }
};

/* One tile's products over k steps [kb, ke) of 64: rows r0.., tokens g.m0..; split: the tile's other k
 * steps are another block's (or another segment's), so the outputs add with atomics (into a y zeroed
 * first in mode 0), and only the slice from k = 0 adds the bias. Ends with a barrier after its last
 * products: the next segment's prologue may refill the tiles at once. */
template <int T, int MT, bool G>
static __device__ __forceinline__ void wg_tile(const struct gemv_args &a, const gsrc<G> &g, int r0, int kb, int ke,
                                               bool split)
{
    constexpr int NS = WG_STAGES, TW = 128 * 64 * 2, TX = MT * 64 * 2, NA = MT * 8 / 256;
    /* [2] weight tiles of 128 rows × 64 k, then [NS] activation tiles of MT tokens × 64 k (WG_SMEM) */
    extern __shared__ __align__(128) u8 wsm[];
    u8 *const Wt = wsm, *const Xt = wsm + 2 * TW;
    const int tid = threadIdx.x, lane = tid & 31, wi = (tid >> 5) & 3, wg = tid >> 7;
    const u8 *const w = g.w;
    const int nz = g.nz, m0 = g.m0, n = (ke - kb) / 64;
    auto xrow = [&](int m) { return g.xrow(a, m); };
    auto xscale = [&](int m) { return g.xscale(a, m); };
    /* weight loader: row lr, half lh; a warp's rows are 8 consecutive ones per half */
    const int lr = (tid & 7) | ((tid >> 4) << 3), lh = (tid >> 3) & 1;
    const u8 *wr = w + (long long)min(r0 + lr, a.n_rows - 1) * a.row_bytes;
    /* activations: NA 16-byte chunks a thread, chunk c = tid + 256i is token (c & 7) | (c >> 6) << 3,
     * halves 8·((c >> 3) & 7) of the step (a quarter warp fills one core matrix); zeros past nz */
    auto issue = [&](int s) {
        if (s < n) {
            const int k0 = kb + s * 64;
            u8 *X = Xt + (s % NS) * TX;
#pragma unroll
            for (int i = 0; i < NA; i++) {
                const int c = tid + 256 * i, t = (c & 7) | ((c >> 6) << 3), g = (c >> 3) & 7, m = m0 + t;
                cp_async16(smem_addr(X + cm_off(t, g)), xrow(min(m, nz - 1)) + k0 + 8 * g, m < nz ? 16 : 0);
            }
        }
        cp_async_commit(); /* an empty group past the end keeps one group a step */
    };
    float acc[MT / 2];
#pragma unroll
    for (int i = 0; i < MT / 2; i++)
        acc[i] = 0.0f;
    wpiece<T> wp;
    for (int s = 0; s < NS - 1; s++)
        issue(s);
    wp.load(wr, kb, lh);
    wp.store(wg_put{ Wt, lr }, lh);
    if (n > 1)
        wp.load(wr, kb + 64, lh);
    cp_async_wait<NS - 2>();
    fence_async_smem();
    __syncthreads();
    for (int s = 0; s < n; s++) {
        const u32 wa = smem_addr(Wt + (s & 1) * TW) + wg * 8 * 1024, xa = smem_addr(Xt + (s % NS) * TX);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
            wg_mma<MT>::run(acc, wg_desc(wa + 256 * kk), wg_desc(xa + 256 * kk));
        wg_commit();
        issue(s + NS - 1);
        if (s + 1 < n) {
            wp.store(wg_put{ Wt + ((s + 1) & 1) * TW, lr }, lh);
            if (s + 2 < n)
                wp.load(wr, kb + (s + 2) * 64, lh);
        }
        cp_async_wait<NS - 2>();
        wg_wait0();
#pragma unroll
        for (int i = 0; i < MT / 2; i++) /* the accumulators are final only now: keep their uses after the wait */
            asm volatile("" : "+f"(acc[i])::"memory");
        fence_async_smem();
        __syncthreads();
    }
    cp_async_wait<0>();
    const bool first = kb == 0;
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = r0 + 64 * wg + 16 * wi + gid + 8 * h;
        if (row >= a.n_rows)
            continue;
        const float b = a.bias && first ? a.bias[row] : 0.0f;
#pragma unroll
        for (int j = 0; j < MT / 8; j++)
#pragma unroll
            for (int c = 0; c < 2; c++) {
                const int m = m0 + 8 * j + 2 * tig + c;
                if (m >= nz)
                    continue;
                float *y = a.y + (long long)g.yrow(m) * a.y_stride + row;
                const float v = acc[4 * j + 2 * h + c] / xscale(m) + b; /* the row's scale: a power of two */
                if (split)
                    atomicAdd(y, v);
                else if (a.mode == 1)
                    *y += v;
                else
                    *y = v;
            }
    }
}

/* A block's work: its tile (blockIdx.x rows, blockIdx.y tokens or grouped tile) over its K slice
 * (blockIdx.z of gridDim.z); or with a.sk (dense only) its even share of all tiles' k steps — the
 * iterations (row tile, token tile, step), steps fastest, cut into gridDim.x equal runs — so that a
 * grid of one wave of resident blocks has no tail (stream-K); a tile a run covers only in part adds
 * with atomics. Consecutive runs share a row tile's weights (token tiles next to each other). */
template <int T, int MT, bool G>
static __device__ __forceinline__ void wg_body(const struct gemv_args &a)
{
    gsrc<G> g;
    if (!g.init(a, MT))
        return;
    const int steps = a.k / 64;
    if (!G && a.sk) {
        const int gy = (a.nz + MT - 1) / MT;
        const long long total = (long long)((a.n_rows + 127) / 128) * gy * steps;
        long long it = total * blockIdx.x / gridDim.x;
        const long long end = total * (blockIdx.x + 1) / gridDim.x;
        while (it < end) {
            const long long tile = it / steps;
            const int s0 = (int)(it - tile * steps), s1 = (int)min((long long)steps, s0 + (end - it));
            g.m0 = (int)(tile % gy) * MT;
            wg_tile<T, MT, G>(a, g, (int)(tile / gy) * 128, s0 * 64, s1 * 64, s1 - s0 < steps);
            it += s1 - s0;
        }
        return;
    }
    const int per = (steps + (int)gridDim.z - 1) / (int)gridDim.z;
    const int kb = (int)blockIdx.z * per * 64, ke = min(a.k, kb + per * 64);
    if (ke > kb)
        wg_tile<T, MT, G>(a, g, (int)blockIdx.x * 128, kb, ke, gridDim.z > 1);
}

/* wgmma_<type>: 128 rows × 64 tokens, wgmma128_: × 128 tokens; wgmmag_ / wgmmag128_: over the experts'
 * groups of (token, slot) pairs. Two blocks a multiprocessor (WG_SMEM(128) · 2 fits its shared memory) */
#define WGMMA(type, T)                                                                                                 \
    extern "C" __global__ void __launch_bounds__(256, 2) wgmma_##type(const struct gemv_args a)                     \
    {                                                                                                                  \
        wg_body<T, 64, false>(a);                                                                                      \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) wgmma128_##type(const struct gemv_args a)                  \
    {                                                                                                                  \
        wg_body<T, 128, false>(a);                                                                                     \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) wgmmag_##type(const struct gemv_args a)                    \
    {                                                                                                                  \
        wg_body<T, 64, true>(a);                                                                                       \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 2) wgmmag128_##type(const struct gemv_args a)                 \
    {                                                                                                                  \
        wg_body<T, 128, true>(a);                                                                                      \
    }

#if IN_PART(KT_F16)
WGMMA(f16, KT_F16)
#endif
#if IN_PART(KT_Q8_0)
WGMMA(q8_0, KT_Q8_0)
#endif
#if IN_PART(KT_Q4_K)
WGMMA(q4_K, KT_Q4_K)
#endif
#if IN_PART(KT_Q5_K)
WGMMA(q5_K, KT_Q5_K)
#endif
#if IN_PART(KT_Q6_K)
WGMMA(q6_K, KT_Q6_K)
#endif
#if IN_PART(KT_IQ4_XS)
WGMMA(iq4_xs, KT_IQ4_XS)
#endif

#endif /* !LLM_HIP && sm_90a */
