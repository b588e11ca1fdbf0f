/* gram_cache.h — token masks shared across requests: one scheduler's cache
 * of gram_mask answers keyed by (grammar fingerprint, parser set).
 *
 * Why: a mask is a walk of the vocabulary's trie (a 152k-token vocabulary:
 * milliseconds inside a JSON string), and a schema with bounds (maxLength,
 * minItems) meets a new parser set at nearly every token, so a state's own
 * memo (gram.c) rarely hits. Requests that share a schema — many agents on
 * one tool or response format — meet the same sets over and over: here each
 * set's mask is walked once for all of them. The key is gram_state_key (the
 * grammar's 64-bit digest and the stacks as positions), compared whole.
 *
 * Bounded by bytes; the oldest entries leave first. Thread-safe (a mutex
 * around the table; a miss walks outside it). */
#ifndef LLM170_GRAM_CACHE_H
#define LLM170_GRAM_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"

struct gram_state;
struct gram_vocab;
struct gram_cache;

/* A cache for masks over v (which must outlive it), holding at most max_bytes of masks and keys. */
struct gram_cache *gram_cache_new(const struct gram_vocab *v, size_t max_bytes, struct err *e);
void gram_cache_free(struct gram_cache *c);
/* gram_mask(st, v, allow) — from the cache when an equal set was met before (by any state of an equal
 * grammar), else walked and kept. Same answer, count and errors as gram_mask. */
int32_t gram_cache_mask(struct gram_cache *c, struct gram_state *st, uint32_t *allow, struct err *e);

struct gram_cache_stats {
    uint64_t hits, misses, evictions;
    size_t entries, bytes;
};
void gram_cache_stats(struct gram_cache *c, struct gram_cache_stats *out);

#endif
