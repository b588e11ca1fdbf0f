/* quant.c — public quant API and the run-time choice of SIMD kernels.
 *
 * Three kernel tables (scalar, AVX2, AVX-512) are built once under
 * pthread_once, then only read. The AVX2/AVX-512 tables start as copies of the
 * scalar one and the SIMD files overwrite the entries they implement, so an
 * entry is never NULL. The best level the CPU supports is used unless the
 * environment variable LLM170_SIMD (scalar|avx2|avx512) caps it — handy for
 * benchmarks and for comparing paths. */
#include <cpuid.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "quant_internal.h"

enum { LVL_SCALAR, LVL_AVX2, LVL_AVX512, LVL_COUNT };

struct dispatch {
    struct quant_kernels lvl[LVL_COUNT];
    bool have[LVL_COUNT];
    int best;
};

static struct dispatch g_dispatch; /* written once in dispatch_init, read-only afterwards */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void dispatch_init(void)
{
    struct dispatch *d = &g_dispatch;
    quant_ref_kernels(&d->lvl[LVL_SCALAR]);
    d->have[LVL_SCALAR] = true;
    __builtin_cpu_init();
    /* F16C: CPUID.1:ECX bit 29 (not every compiler's __builtin_cpu_supports knows "f16c") */
    unsigned eax, ebx, ecx = 0, edx;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1);
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (avx2) {
        d->lvl[LVL_AVX2] = d->lvl[LVL_SCALAR];
        quant_avx2_kernels(&d->lvl[LVL_AVX2]);
        d->have[LVL_AVX2] = true;
    }
    if (avx512) {
        d->lvl[LVL_AVX512] = d->lvl[LVL_AVX2];
        quant_avx512_kernels(&d->lvl[LVL_AVX512], __builtin_cpu_supports("avx512vnni"));
        d->have[LVL_AVX512] = true;
    }
    int best = avx512 ? LVL_AVX512 : avx2 ? LVL_AVX2 : LVL_SCALAR;
    const char *cap = getenv("LLM170_SIMD");
    if (cap) {
        int c = !strcmp(cap, "scalar") ? LVL_SCALAR : !strcmp(cap, "avx2") ? LVL_AVX2 : LVL_AVX512;
        if (c < best)
            best = c;
    }
    d->best = best;
}

static const struct dispatch *dispatch(void)
{
    pthread_once(&g_once, dispatch_init);
    return &g_dispatch;
}

const struct quant_kernels *quant_kernels_get(void)
{
    const struct dispatch *d = dispatch();
    return &d->lvl[d->best];
}

/* Tests: the table of one level (0 scalar, 1 AVX2, 2 AVX-512), or NULL when the CPU lacks it. */
const struct quant_kernels *quant_kernels_level(int level)
{
    const struct dispatch *d = dispatch();
    if (level < 0 || level >= LVL_COUNT || !d->have[level])
        return NULL;
    return &d->lvl[level];
}

const char *quant_simd_name(void) { return quant_kernels_get()->name; }

void dequant_row(enum qtype t, const void *src, float *dst, int64_t n)
{
    const struct qtype_info *q = qtype_get((uint32_t)t);
    const struct quant_kernels *k = quant_kernels_get();
    if (!q || !k->deq[t])
        return;
    k->deq[t](src, dst, n);
}

void quant_act_row(enum qtype wt, const float *x, void *dst, int64_t n)
{
    const struct qtype_info *q = qtype_get((uint32_t)wt);
    const struct quant_kernels *k = quant_kernels_get();
    if (!q || !k->act[q->vec_dot])
        return;
    k->act[q->vec_dot](x, dst, n);
}

float vec_dot(enum qtype wt, int64_t n, const void *w, const void *act)
{
    const struct quant_kernels *k = quant_kernels_get();
    if ((unsigned)wt >= QT_COUNT || !k->dot[wt])
        return 0.0f;
    return k->dot[wt](n, w, act);
}

float vec_dot_ref(enum qtype wt, int64_t n, const void *w, const void *act)
{
    const struct quant_kernels *k = &dispatch()->lvl[LVL_SCALAR];
    if ((unsigned)wt >= QT_COUNT || !k->dot[wt])
        return 0.0f;
    return k->dot[wt](n, w, act);
}
