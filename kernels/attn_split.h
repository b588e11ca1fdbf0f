/* attn_split.h — how many splits a decode token's attention uses, shared by every decode attention
 * kernel (attn.cu, fattn.cu) and the merge (attn_combine), which must agree on it: a.nsplit (the
 * grid's y, the partials' stride) at most, one per ATTN_SPLIT_MIN cached positions. Decided on the
 * device, so one captured graph serves every length. */
#ifndef LLM170_KERNELS_ATTN_SPLIT_H
#define LLM170_KERNELS_ATTN_SPLIT_H

#include "args.h"

#define ATTN_SPLIT_MIN 64 /* cached positions per split at least: short caches take few splits */

static __device__ __forceinline__ int attn_splits(const struct attn_args &a, int n_kv)
{
    return a.nsplit == 1 ? 1 : min(a.nsplit, (n_kv + ATTN_SPLIT_MIN - 1) / ATTN_SPLIT_MIN);
}

#endif
