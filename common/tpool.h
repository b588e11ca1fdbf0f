/* tpool.h — a fixed set of worker threads for data-parallel loops.
 *
 * tpool_run(tp, fn, ctx, n) calls fn(ctx, i, worker) for i in [0, n) spread
 * over the pool and the caller's own thread, and returns when all are done.
 * `worker` is in [0, tpool_size(tp)) and lets tasks use per-thread scratch. */
#ifndef LLM170_TPOOL_H
#define LLM170_TPOOL_H

#include <stdint.h>

struct tpool;

typedef void (*tpool_fn)(void *ctx, int64_t i, int worker);

/* n_threads counts the caller: 1 = no extra threads. NULL on failure. */
struct tpool *tpool_create(int n_threads);
void tpool_destroy(struct tpool *tp);
int tpool_size(const struct tpool *tp);
/* Run fn over [0, n). Not reentrant: call from one thread at a time. */
void tpool_run(struct tpool *tp, tpool_fn fn, void *ctx, int64_t n);

#endif
