/* gemv_pdl.h — the programmatic-dependent-launch prologue of the GEMV kernels (gemv.cu, gemvb.cu).
 * With a.pf the block's weight rows [row0, row0 + nr) (of w, and of w2 in the dual modes) head for L2
 * while the kernel before still drains — no kernel writes weights —, then the wait (kernels/prelude.h),
 * first in every thread's path and before anything else is read or written. */
#ifndef LLM170_GEMV_PDL_H
#define LLM170_GEMV_PDL_H

#include "args.h"
#include "prelude.h"

static __device__ __forceinline__ void gemv_pdl_enter(const struct gemv_args &a, bool prefetch, int row0, int nr,
                                                      bool dual)
{
    PDL_EARLY_LAUNCH();
    if (prefetch && a.pf) {
        nr = min(nr, a.n_rows - row0);
        const long long b0 = (long long)row0 * a.row_bytes, b1 = b0 + (long long)nr * a.row_bytes;
        for (long long o = (b0 & ~127ll) + 128ll * threadIdx.x; o < b1; o += 128ll * blockDim.x) {
            PDL_PREFETCH(a.w + o);
            if (dual)
                PDL_PREFETCH(a.w2 + o);
        }
    }
    PDL_WAIT();
    PDL_LATE_LAUNCH();
}

#endif
