/* gemv_out.h — one output row of a GEMV in each mode of struct gemv_args (gemv.cu, gemvs.cu, gemvb.cu):
 * the biases added, then y = v (0), y += v (1: the residual; 4: the experts' weighted sum), y = silu(v)·v2
 * (2: SwiGLU of the two matrices' rows), or y = v and y2 = v2 (3). yi: the element of y (and y2); dual:
 * modes 2 and 3, which have v2. */
#ifndef LLM170_GEMV_OUT_H
#define LLM170_GEMV_OUT_H

#include "args.h"
#include "prelude.h"

static __device__ __forceinline__ void gemv_out(const struct gemv_args &a, long long yi, int row, float v, float v2,
                                                bool dual)
{
    if (a.bias)
        v += a.bias[row];
    if (dual && a.bias2)
        v2 += a.bias2[row];
    switch (a.mode) {
    case 0: a.y[yi] = v; break;
    case 1:
    case 4: a.y[yi] += v; break;
    case 2: a.y[yi] = silu_f(v) * v2; break;
    default: a.y[yi] = v, a.y2[yi] = v2; break;
    }
}

#endif
