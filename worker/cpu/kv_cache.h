/* kv_cache.h — per-sequence K/V storage for attention layers.
 *
 * Each sequence owns a contiguous run of n_ctx cells per layer, so a
 * sequence's positions are a plain array (attention streams it in order),
 * truncation is setting a length, and copying a prefix is one memcpy per
 * layer. Large allocations come from calloc (anonymous mappings), so pages
 * of cells never written are never committed. Cells are f16 (RNE) by
 * default, or f32. */
#ifndef LLM170_KV_CACHE_H
#define LLM170_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

struct kv_cache {
    int n_layer;       /* layers with a cache */
    int n_seq;
    int n_ctx;         /* cells per sequence */
    bool f16;          /* element type: f16 (uint16_t) or f32 */
    size_t elt;        /* bytes per element */
    int *dim_k;        /* [n_layer] elements per K row (n_head_kv·head_dim) */
    int *dim_v;        /* [n_layer] elements per V row */
    void **k;          /* [n_layer] → [n_seq][n_ctx][dim_k] */
    void **v;          /* [n_layer] → [n_seq][n_ctx][dim_v] */
    int *len;          /* [n_seq] cached positions */
    uint64_t bytes;    /* of the K and V cells kv_init allocated */
};

int kv_init(struct kv_cache *kv, int n_layer, const int *dim_k, const int *dim_v, int n_seq, int n_ctx,
            bool f16, struct err *e);
void kv_free(struct kv_cache *kv);

/* Row of cell (seq, pos) in layer l; rows of one sequence are dim elements apart. */
void *kv_k(const struct kv_cache *kv, int l, int seq, int pos);
void *kv_v(const struct kv_cache *kv, int l, int seq, int pos);

/* Write one position's K and V (f32 in; rounded to f16 RNE for an f16 cache). */
void kv_store(struct kv_cache *kv, int l, int seq, int pos, const float *k, const float *v);

void kv_truncate(struct kv_cache *kv, int seq, int pos);
/* dst's state becomes src's first n positions. */
int kv_copy(struct kv_cache *kv, int src, int dst, int n, struct err *e);

#endif
