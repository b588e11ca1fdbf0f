/* quant_avx2.c — AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c;
 * only reached through quant.c after the CPU was checked. */
#include <immintrin.h>

#include "quant_internal.h"

void quant_avx2_kernels(struct quant_kernels *k)
{
    k->name = "avx2";
}
