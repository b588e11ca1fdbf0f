/* prelude.h — the portability layer every kernel source includes (CUDA via
 * NVRTC, HIP via hipRTC). It is handed to the run-time compiler as an
 * in-memory header, so no toolkit headers are needed: no cuda_fp16.h, no
 * stdint.h. Everything vendor-specific (warp width, shuffles, f16
 * conversions) lives here. */
#ifndef LLM170_KERNEL_PRELUDE_H
#define LLM170_KERNEL_PRELUDE_H

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef short i16;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

#if defined(__HIPCC_RTC__) || defined(__HIP_PLATFORM_AMD__)
#define WARP 64
#define LLM_HIP 1
static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor(v, m, WARP); }
static __device__ __forceinline__ int shfl_xor_i(int v, int m) { return __shfl_xor(v, m, WARP); }
static __device__ __forceinline__ float h2f(u16 h)
{
    _Float16 f;
    __builtin_memcpy(&f, &h, 2);
    return (float)f;
}
static __device__ __forceinline__ u16 f2h(float x)
{
    _Float16 f = (_Float16)x; /* round to nearest even */
    u16 h;
    __builtin_memcpy(&h, &f, 2);
    return h;
}
#else
#define WARP 32
static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m, WARP); }
static __device__ __forceinline__ int shfl_xor_i(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m, WARP); }
static __device__ __forceinline__ float h2f(u16 h)
{
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
static __device__ __forceinline__ u16 f2h(float x)
{
    u16 h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
    return h;
}
#endif

#define INF_F __int_as_float(0x7f800000)

/* Programmatic dependent launch (NVIDIA sm_90+; no-ops elsewhere). A kernel whose handle the host
 * marks (hip_rt_fn_pdl) may start while the kernel before it on the stream still runs, so it must run
 * PDL_WAIT() in every thread path before it exits, and before its first read of anything an earlier
 * kernel wrote and its first global write (an earlier kernel may still read or write that memory).
 * Only what no kernel writes (weights) may be touched before it. PDL_WAIT returns once the kernel
 * before has completed and its writes are visible; that kernel completed only after its own wait, so
 * the ordering stays transitive only if every marked kernel waits in every path (an early return
 * before the wait would let the kernel after it overtake the one before). PDL_LAUNCH() lets the next
 * marked kernel be scheduled once every block of this one has issued it (or exited). Issued after the
 * wait (the default), at most one kernel runs ahead of the one still draining; issued at entry
 * (llm_pdl_early, LLM170_HIP_PDL_EARLY=1) the next kernels' blocks become resident and pull their
 * weights as far ahead as free slots allow (the ordering is the waits' alone), which measured slower
 * (docs/benchmarks.md). */
#if !defined(LLM_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
/* 1: PDL_LAUNCH at entry, 0 (default): after the wait; written by the host after loading the module */
__constant__ int llm_pdl_early;
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define PDL_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_EARLY_LAUNCH()     \
    do {                       \
        if (llm_pdl_early)     \
            PDL_LAUNCH();      \
    } while (0)
#define PDL_LATE_LAUNCH()      \
    do {                       \
        if (!llm_pdl_early)    \
            PDL_LAUNCH();      \
    } while (0)
/* pull a weight line into L2 while the kernel before still runs (no register, no wait) */
#define PDL_PREFETCH(p) asm volatile("prefetch.global.L2 [%0];" ::"l"(p))
#else
#define PDL_WAIT() ((void)0)
#define PDL_LAUNCH() ((void)0)
#define PDL_EARLY_LAUNCH() ((void)0)
#define PDL_LATE_LAUNCH() ((void)0)
#define PDL_PREFETCH(p) ((void)(p))
#endif
/* at the top of a marked kernel that reads nothing before the wait */
#define PDL_ENTER()          \
    do {                     \
        PDL_EARLY_LAUNCH();  \
        PDL_WAIT();          \
        PDL_LATE_LAUNCH();   \
    } while (0)

/* A load that skips the (non-coherent) L1: reads what other blocks wrote before a __threadfence and
 * an atomic handshake. Unlike a volatile pointer it is an ordinary weak load, so several can be in
 * flight at once. */
static __device__ __forceinline__ float ld_cg(const float *p)
{
#if defined(LLM_HIP)
    return __builtin_nontemporal_load(p);
#else
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
#endif
}

/* c + Σ of the four signed byte products of a and b */
static __device__ __forceinline__ int dp4a(int a, int b, int c)
{
#if defined(LLM_HIP)
#if defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) || defined(__gfx950__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(signed char)(a >> (8 * i)) * (int)(signed char)(b >> (8 * i));
    return c;
#endif
#else
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#endif
}

static __device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int m = WARP / 2; m > 0; m >>= 1)
        v += shfl_xor(v, m);
    return v;
}
static __device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int m = WARP / 2; m > 0; m >>= 1)
        v = fmaxf(v, shfl_xor(v, m));
    return v;
}

/* Sum over a block of blockDim.x threads (a multiple of WARP, at most 1024); every thread gets it.
 * red: __shared__ float[32]. */
static __device__ __forceinline__ float block_sum(float v, float *red)
{
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.0f;
    return warp_sum(v);
}
static __device__ __forceinline__ float block_max(float v, float *red)
{
    const int lane = threadIdx.x % WARP, w = threadIdx.x / WARP, nw = blockDim.x / WARP;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0)
        red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : -INF_F;
    return warp_max(v);
}

static __device__ __forceinline__ float silu_f(float t) { return t / (1.0f + expf(-t)); }

/* The scale of an activation row the tensor-core GEMM reads as f16 (mma.cu mma_xprep; rms_norm and
 * swiglu_rows when they write that copy themselves): the largest power of two ≤ 1 that keeps mx, the
 * row's largest |x|, at most lim; 1 when lim is 0 or mx is within it, inf or NaN. */
static __device__ __forceinline__ float f16_row_scale(float mx, float lim)
{
    float s = 1.0f;
    if (lim > 0.0f && mx > lim && mx <= 3.0e38f) {
        int ex;
        frexpf(mx / lim, &ex); /* mx / lim < 2^ex */
        s = ldexpf(1.0f, -ex);
    }
    return s;
}

#endif
