/* part.h — a heavy module compiled as several programs at once. A module whose source says
 * "llm170-parts: N" is compiled by the host as N programs, each with -DLLM_PART=p, on as many threads
 * (worker/hip/hip_rt.c): its instantiation lists put each weight type's kernels under
 * #if IN_PART(type), so part p holds the types of one group and the module's compile time is the
 * slowest part's, not the sum (cold start). Compiled as one program (no LLM_PART) every type is in.
 * Groups: 0 f32 / f16 and the kernels of no type (IN_PART0), 1 q8_0, 2 q4_K, 3 q5_K, 4 q6_K, 5 iq4_xs. */
#ifndef LLM170_KERNELS_PART_H
#define LLM170_KERNELS_PART_H

#include "args.h"

#if defined(LLM_PART)
#define LLM_PART_OF(t)                                                                                      \
    ((t) == KT_F32 || (t) == KT_F16 ? 0 : (t) == KT_Q8_0 ? 1 : (t) == KT_Q4_K ? 2 : (t) == KT_Q5_K ? 3     \
                                                                      : (t) == KT_Q6_K ? 4 : 5)
#define IN_PART(t) (LLM_PART_OF(t) == LLM_PART)
#define IN_PART0 (LLM_PART == 0)
#else
#define IN_PART(t) 1
#define IN_PART0 1
#endif

#endif
