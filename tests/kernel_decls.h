/* kernel_decls.h — what NVRTC and hipRTC provide a kernel source without any header (the attribute
 * keywords, the built-in index variables, vector types and device functions), declared for clang's CUDA
 * and HIP front ends so that tests/kernels_clang.sh can parse every kernel source on a machine with no GPU
 * toolkit. Declarations only, and only of what the kernels use: nothing here is compiled into code. A
 * kernel that starts using another built-in fails that test with "undeclared identifier" until it is
 * declared here. */
#ifndef LLM170_TESTS_KERNEL_DECLS_H
#define LLM170_TESTS_KERNEL_DECLS_H

#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#if defined(__HIPCC_RTC__)
#define __launch_bounds__(...) __attribute__((amdgpu_flat_work_group_size(1, 1024)))
#else
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#endif

struct uint3 { unsigned x, y, z; };
extern __device__ const uint3 threadIdx, blockIdx, blockDim, gridDim;

struct int2 { int x, y; };
struct int4 { int x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
__device__ uint2 make_uint2(unsigned, unsigned);
__device__ uint4 make_uint4(unsigned, unsigned, unsigned, unsigned);
__device__ float2 make_float2(float, float);
__device__ float4 make_float4(float, float, float, float);

__device__ float __int_as_float(int);
__device__ float __uint_as_float(unsigned);
__device__ float fmaf(float, float, float);
__device__ float fmaxf(float, float);
__device__ float fminf(float, float);
__device__ float fabsf(float);
__device__ float expf(float);
__device__ float exp2f(float);
__device__ float logf(float);
__device__ float sqrtf(float);
__device__ float roundf(float);
__device__ float frexpf(float, int *);
__device__ float ldexpf(float, int);
__device__ int min(int, int);
__device__ int max(int, int);
__device__ unsigned min(unsigned, unsigned);
__device__ unsigned max(unsigned, unsigned);
__device__ long long min(long long, long long);
__device__ long long max(long long, long long);
__device__ float min(float, float);
__device__ float max(float, float);

__device__ void __syncthreads();
__device__ void __syncwarp(unsigned = 0xffffffffu);
__device__ void __threadfence();
__device__ void __threadfence_block();
__device__ int atomicAdd(int *, int);
__device__ unsigned atomicAdd(unsigned *, unsigned);
__device__ float atomicAdd(float *, float);

#if defined(__HIPCC_RTC__)
__device__ float __shfl_xor(float, int, int);
__device__ int __shfl_xor(int, int, int);
#else
__device__ float __shfl_xor_sync(unsigned, float, int, int = 32);
__device__ int __shfl_xor_sync(unsigned, int, int, int = 32);
__device__ unsigned __shfl_xor_sync(unsigned, unsigned, int, int = 32);
__device__ float __shfl_sync(unsigned, float, int, int = 32);
__device__ int __shfl_sync(unsigned, int, int, int = 32);
#endif

#endif
