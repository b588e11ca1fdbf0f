/* engine.c — engine.h's engine_* calls, dispatched through the chosen
 * backend's ops table (backend/backend.h; the table of backends is
 * engine_backends.c). Where a backend leaves an optional entry NULL, the
 * fallback is here: whole logits rows for top-k, malloc for host memory,
 * host threads of our own for engine_parallel. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/tpool.h"
#include "engine.h"
#include "engine_backends.h"

struct engine_ctx {
    const struct backend_ops *ops;
    void *b;                 /* the backend's engine (ops->create) */
    /* host threads for per-row work between steps (the scheduler's sampling) when the backend has no
     * pool of its own: without them a 64-row step sampled on one thread took longer than the step's
     * decode on a GPU. NULL = one. */
    struct tpool *host_tp;
};

void engine_params_default(struct engine_params *p) { backend_params_default(p); }

int engine_create(struct engine_ctx **out, const struct model *m, const struct engine_params *p, struct err *e)
{
    *out = NULL;
    const enum backend_kind kind = p ? p->backend : BACKEND_CPU;
    const struct backend_ops *ops = engine_backend_ops(kind);
    if (!ops)
        return err_set(e, ERR_UNSUPPORTED, "engine: backend %s is not built into this engine",
                       engine_backend_name(kind) ? engine_backend_name(kind) : "(unknown)");
    struct engine_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    c->ops = ops;
    int rc = ops->create(&c->b, m, p, e);
    if (rc) {
        free(c);
        return rc;
    }
    if (!ops->pool) {
        /* n_threads, else up to 8: sampling a row takes microseconds, more
         * threads would mostly wait for each other */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        int nt = p && p->n_threads > 0 ? p->n_threads : nc > 8 ? 8 : nc > 0 ? (int)nc : 1;
        if (nt > 1 && !(c->host_tp = tpool_create(nt))) {
            engine_free(c);
            return err_set(e, ERR_NOMEM, "engine: cannot start %d host threads", nt);
        }
    }
    *out = c;
    return 0;
}

void engine_free(struct engine_ctx *c)
{
    if (!c)
        return;
    if (c->b)
        c->ops->free(c->b);
    if (c->host_tp)
        tpool_destroy(c->host_tp);
    free(c);
}

int engine_n_ctx(const struct engine_ctx *c) { return c->ops->n_ctx(c->b); }

const char *engine_device(const struct engine_ctx *c)
{
    return c->ops->describe ? c->ops->describe(c->b) : c->ops->name;
}

void engine_load_info(const struct engine_ctx *c, struct engine_load *out)
{
    memset(out, 0, sizeof *out);
    if (c && c->ops->load_info)
        c->ops->load_info(c->b, out);
}

void engine_parallel(struct engine_ctx *c, void (*fn)(void *ctx, int64_t i, int worker), void *ctx, int64_t n)
{
    struct tpool *tp = !c ? NULL : c->ops->pool ? c->ops->pool(c->b) : c->host_tp;
    if (tp) {
        tpool_run(tp, fn, ctx, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        fn(ctx, i, 0);
}

int engine_decode(struct engine_ctx *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return c->ops->decode(c->b, toks, n, logits, e);
}

int engine_decode_topk(struct engine_ctx *c, const struct engine_tok *toks, int n, const struct engine_select *sel,
                       int32_t *ids, float *vals, int32_t *n_cands, float *logits, struct err *e)
{
    if (c->ops->decode_topk)
        return c->ops->decode_topk(c->b, toks, n, sel, ids, vals, n_cands, logits, e);
    if (sel->prepare)
        sel->prepare(sel->ctx);
    int rc = c->ops->decode(c->b, toks, n, logits, e);
    for (int t = 0, r = 0; !rc && t < n; t++)
        if (toks[t].logits)
            n_cands[r++] = -1; /* the rows are in host memory already */
    return rc;
}

bool engine_has_topk(const struct engine_ctx *c) { return c && c->ops->decode_topk; }

int engine_decode_embd(struct engine_ctx *c, const struct engine_tok *toks, int n, const bool *want, float *logits,
                       float *embd, struct err *e)
{
    if (c->ops->decode_embd)
        return c->ops->decode_embd(c->b, toks, n, want, logits, embd, e);
    for (int t = 0; want && t < n; t++)
        if (want[t])
            return err_set(e, ERR_UNSUPPORTED, "embeddings on the %s backend: not yet", c->ops->name);
    return c->ops->decode(c->b, toks, n, logits, e);
}

bool engine_has_embd(const struct engine_ctx *c) { return c && c->ops->decode_embd; }

float *engine_logits_alloc(struct engine_ctx *c, size_t n)
{
    if (!c || !c->ops->host_alloc)
        return malloc(n * sizeof(float));
    void *p = NULL;
    struct err e;
    return c->ops->host_alloc(c->b, n * sizeof(float), &p, &e) == 0 ? p : NULL;
}

void engine_logits_free(struct engine_ctx *c, float *p)
{
    if (c && c->ops->host_alloc)
        c->ops->host_free(c->b, p);
    else
        free(p);
}

int engine_seq_truncate(struct engine_ctx *c, int seq, int pos) { return c->ops->seq_restore(c->b, seq, pos, NULL); }

int engine_seq_len(const struct engine_ctx *c, int seq) { return c->ops->seq_len(c->b, seq); }

int engine_seq_copy(struct engine_ctx *c, int src, int dst, int n, struct err *e)
{
    return c->ops->seq_copy(c->b, src, dst, n, e);
}

/* Snapshots exist for recurrent (hybrid) state; for attention-only models
 * every backend cuts the cache anywhere and a snapshot is a no-op. */
int engine_seq_snapshot(struct engine_ctx *c, int seq, struct err *e) { return c->ops->seq_snapshot(c->b, seq, e); }

int engine_seq_restore(struct engine_ctx *c, int seq, int pos, struct err *e)
{
    return c->ops->seq_restore(c->b, seq, pos, e);
}

int engine_seq_restorable(const struct engine_ctx *c, int seq, int pos)
{
    return c->ops->seq_restorable(c->b, seq, pos);
}
