/* ops.c — the ops of ops.h that have SIMD kernels: the reference (ops_ref.c)
 * or the AVX2 one (ops_avx2.c), chosen once at first use; and MoE routing,
 * built on the dispatched softmax. */
#include "ops.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* SIMD dispatch: chosen once (read-only afterwards); LLM170_SIMD=scalar forces the reference. */
typedef void (*attn_fn)(const float *, int, int, const void *, const void *, size_t, int, float, const float *,
                        float *, float *);
static attn_fn g_attn = ops_attn_ref;
typedef void (*attn_multi_fn)(int, const float *const *, float *const *, const int *, int, const void *,
                              const void *, size_t, float, const float *, float *);
static attn_multi_fn g_attn_multi = ops_attn_multi_ref;
static void (*g_softmax)(float *, int) = ops_softmax_ref;
static void (*g_swiglu)(float *, const float *, int) = ops_swiglu_ref;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void ops_dispatch_init(void)
{
    __builtin_cpu_init();
    const char *cap = getenv("LLM170_SIMD");
    /* F16C: CPUID.1:ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c") */
    unsigned eax, ebx, ecx, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c &&
        !(cap && !strcmp(cap, "scalar"))) {
        g_attn = ops_attn_avx2;
        g_attn_multi = ops_attn_multi_avx2;
        g_softmax = ops_softmax_avx2;
        g_swiglu = ops_swiglu_avx2;
    }
}

void ops_softmax(float *x, int n)
{
    pthread_once(&g_once, ops_dispatch_init);
    g_softmax(x, n);
}

void ops_swiglu(float *g, const float *u, int n)
{
    pthread_once(&g_once, ops_dispatch_init);
    g_swiglu(g, u, n);
}

void ops_attn(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
              float scale, const float *f16tab, float *out, float *scratch)
{
    pthread_once(&g_once, ops_dispatch_init);
    g_attn(q, n_q, hd, K, V, stride, n_kv, scale, f16tab, out, scratch);
}

void ops_attn_multi(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd, const void *K,
                    const void *V, size_t stride, float scale, const float *f16tab, float *scratch)
{
    pthread_once(&g_once, ops_dispatch_init);
    g_attn_multi(m, qs, outs, n_kv, hd, K, V, stride, scale, f16tab, scratch);
}

void ops_moe_route(float *pr, int n, int k, float scale, int *sel, float *w)
{
    ops_softmax(pr, n);
    ops_topk(pr, n, k, sel);
    double sum = 0.0; /* ggml sum_rows accumulates in double */
    for (int j = 0; j < k; j++) {
        w[j] = pr[sel[j]];
        sum += (double)w[j];
    }
    float s = (float)sum;
    if (s < 6.103515625e-5f)
        s = 6.103515625e-5f;
    for (int j = 0; j < k; j++)
        w[j] = w[j] / s;
    if (scale != 0.0f && scale != 1.0f)
        for (int j = 0; j < k; j++)
            w[j] *= scale;
}

void ops_imrope_text_pairs(const int sections[4], int n_rot, unsigned char *pe)
{
    const int *s = sections;
    const int S = s[0] + s[1] + s[2] + s[3];
    for (int i = 0; i < n_rot / 2; i++) {
        const int k = S > 0 ? i % S : 0;
        const bool h = k % 3 == 1 && k < 3 * s[1], w = k % 3 == 2 && k < 3 * s[2], t = k % 3 == 0 && k < 3 * s[0];
        pe[i] = !(h || w || t);
    }
}
