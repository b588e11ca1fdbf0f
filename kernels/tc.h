/* tc.h — the NVIDIA tensor-core building blocks shared by mma.cu (GEMM) and fattn.cu (prompt
 * attention): f16 packing, shared-memory addresses, ldmatrix and mma.sync m16n8k16 (f16 in, f32
 * accumulate), as inline PTX. NVIDIA only: empty under LLM_HIP. */
#ifndef LLM170_KERNELS_TC_H
#define LLM170_KERNELS_TC_H

#include "prelude.h"

#if !defined(LLM_HIP)

/* two floats → f16x2 (lo in the low half), round to nearest even */
static __device__ __forceinline__ u32 h2pack(float lo, float hi)
{
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

static __device__ __forceinline__ u32 smem_addr(const void *p)
{
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

/* four 8×8 b16 tiles from shared memory, one row address per lane */
static __device__ __forceinline__ void ldsm4(u32 *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* the same, transposed (B operands stored row-major, e.g. V in attention) */
static __device__ __forceinline__ void ldsm4t(u32 *r, const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* c[4] += a (16×16 f16, 4 regs) · b (16×8 f16, 2 regs), f32 accumulation */
static __device__ __forceinline__ void mma16816h(float *c, const u32 *a, u32 b0, u32 b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* cp.async (sm_80+): 16 bytes global → shared without registers, n < 16 zero-fills the rest; the copies
 * of a thread since its last commit form a group, and wait<N> returns once at most N of its groups are
 * still in flight (the shared data is then visible to this thread; to others after a barrier) */
static __device__ __forceinline__ void cp_async16(u32 dst, const void *src, int n)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
static __device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> static __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

#endif /* !LLM_HIP */
#endif
