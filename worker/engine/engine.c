/* engine.c — engine.h's engine_* calls, dispatched on engine_params.backend
 * to the CPU engine (cpu_engine.c) or the device-resident `hip` engine
 * (hip_engine.c). The Vulkan backend is not built in yet. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cpu/cpu_engine.h"
#include "../hip/hip_engine.h"
#include "engine.h"
#include "../model/model.h"
#include "../../common/threadpool.h"

struct engine_ctx {
    enum backend_kind kind;
    struct cpu_engine *cpu;  /* exactly one of these is set */
    struct hip_engine *hip;
    /* a GPU engine's host threads for per-row work between steps (the
     * scheduler's sampling): without them a 64-row step sampled on one
     * thread took longer than the step's decode on the GPU. NULL = one. */
    struct tpool *host_tp;
    bool pin_logits;         /* engine_logits_alloc page-locks (a GPU engine, unless LLM170_HIP_PINNED=0) */
};

void engine_params_default(struct engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->backend = BACKEND_CPU;
    p->n_seq = 1;
}

int engine_params_resolve(const struct model *m, const struct engine_params *in, struct engine_params *out,
                          struct err *e)
{
    if (in)
        *out = *in;
    else
        engine_params_default(out);
    const struct hparams *hp = &m->hp;
    if (out->n_ctx <= 0)
        out->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (out->n_batch <= 0)
        out->n_batch = 512;
    if (out->n_seq <= 0)
        out->n_seq = 1;
    if (out->n_ctx > (1 << 24) || out->n_batch > (1 << 16) || out->n_seq > (1 << 16))
        return err_set(e, ERR_RANGE, "engine: n_ctx %d / n_batch %d / n_seq %d too large", out->n_ctx, out->n_batch,
                       out->n_seq);
    return 0;
}

int engine_create(struct engine_ctx **out, const struct model *m, const struct engine_params *p, struct err *e)
{
    *out = NULL;
    const enum backend_kind kind = p ? p->backend : BACKEND_CPU;
    if (kind != BACKEND_CPU && kind != BACKEND_HIP)
        return err_set(e, ERR_UNSUPPORTED, "engine: backend %d is not built into this engine", (int)kind);
    struct engine_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    c->kind = kind;
    int rc = kind == BACKEND_HIP ? hip_engine_create(&c->hip, m, p, e) : cpu_engine_create(&c->cpu, m, p, e);
    if (rc) {
        free(c);
        return rc;
    }
    if (kind == BACKEND_HIP) {
        const char *pin = getenv("LLM170_HIP_PINNED");
        c->pin_logits = !(pin && !strcmp(pin, "0"));
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
    if (c->hip)
        hip_engine_free(c->hip);
    if (c->cpu)
        cpu_engine_free(c->cpu);
    if (c->host_tp)
        tpool_destroy(c->host_tp);
    free(c);
}

int engine_n_ctx(const struct engine_ctx *c)
{
    return c->hip ? hip_engine_n_ctx(c->hip) : cpu_engine_n_ctx(c->cpu);
}

void engine_parallel(struct engine_ctx *c, void (*fn)(void *ctx, int64_t i, int worker), void *ctx, int64_t n)
{
    struct tpool *tp = !c ? NULL : c->cpu ? cpu_engine_pool(c->cpu) : c->host_tp;
    if (tp) {
        tpool_run(tp, fn, ctx, n);
        return;
    }
    for (int64_t i = 0; i < n; i++)
        fn(ctx, i, 0);
}

int engine_decode(struct engine_ctx *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return c->hip ? hip_engine_decode(c->hip, toks, n, logits, e) : cpu_engine_decode(c->cpu, toks, n, logits, e);
}

int engine_decode_topk(struct engine_ctx *c, const struct engine_tok *toks, int n, const int32_t *k, int32_t *ids,
                       float *vals, int32_t *n_cands, float *logits, struct err *e)
{
    if (c->hip)
        return hip_engine_decode_topk(c->hip, toks, n, k, ids, vals, n_cands, logits, e);
    int rc = cpu_engine_decode(c->cpu, toks, n, logits, e);
    for (int t = 0, r = 0; !rc && t < n; t++)
        if (toks[t].logits)
            n_cands[r++] = -1; /* the rows are in host memory already */
    return rc;
}

bool engine_has_topk(const struct engine_ctx *c) { return c && c->hip; }

float *engine_logits_alloc(struct engine_ctx *c, size_t n)
{
    void *p = NULL;
    struct err e;
    if (c && c->pin_logits && hip_engine_host_alloc(c->hip, n * sizeof(float), &p, &e) == 0)
        return p;
    return c && c->pin_logits ? NULL : malloc(n * sizeof(float));
}

void engine_logits_free(struct engine_ctx *c, float *p)
{
    if (c && c->pin_logits)
        hip_engine_host_free(c->hip, p);
    else
        free(p);
}

int engine_seq_truncate(struct engine_ctx *c, int seq, int pos)
{
    if (c->hip)
        return hip_engine_seq_restore(c->hip, seq, pos, NULL);
    return cpu_engine_seq_truncate(c->cpu, seq, pos);
}

int engine_seq_len(const struct engine_ctx *c, int seq)
{
    return c->hip ? hip_engine_seq_len(c->hip, seq) : cpu_engine_seq_len(c->cpu, seq);
}

int engine_seq_copy(struct engine_ctx *c, int src, int dst, int n, struct err *e)
{
    return c->hip ? hip_engine_seq_copy(c->hip, src, dst, n, e) : cpu_engine_seq_copy(c->cpu, src, dst, n, e);
}

/* Snapshots exist for recurrent (hybrid) state; for attention-only models
 * both backends cut the cache anywhere and a snapshot is a no-op. */
int engine_seq_snapshot(struct engine_ctx *c, int seq, struct err *e)
{
    return c->hip ? hip_engine_seq_snapshot(c->hip, seq, e) : cpu_engine_seq_snapshot(c->cpu, seq, e);
}

int engine_seq_restore(struct engine_ctx *c, int seq, int pos, struct err *e)
{
    return c->hip ? hip_engine_seq_restore(c->hip, seq, pos, e) : cpu_engine_seq_restore(c->cpu, seq, pos, e);
}

int engine_seq_restorable(const struct engine_ctx *c, int seq, int pos)
{
    return c->hip ? hip_engine_seq_restorable(c->hip, seq, pos) : cpu_engine_seq_restorable(c->cpu, seq, pos);
}

int engine_check_batch(const struct engine_tok *toks, int n, int n_batch, int n_seq, int n_ctx, int32_t n_vocab,
                       const int *len, int *seq_next, struct err *e)
{
    if (n < 1 || n > n_batch)
        return err_set(e, ERR_INVALID, "engine_decode: %d tokens (batch holds 1..%d)", n, n_batch);
    for (int s = 0; s < n_seq; s++)
        seq_next[s] = len[s];
    for (int i = 0; i < n; i++) {
        const struct engine_tok *t = &toks[i];
        if (t->token < 0 || t->token >= n_vocab)
            return err_set(e, ERR_INVALID, "engine_decode: token %d at batch row %d is outside the vocabulary (%d)",
                           t->token, i, n_vocab);
        if (t->seq < 0 || t->seq >= n_seq)
            return err_set(e, ERR_INVALID, "engine_decode: sequence %d at batch row %d is outside [0, %d)", t->seq, i,
                           n_seq);
        if (t->pos != seq_next[t->seq])
            return err_set(e, ERR_INVALID, "engine_decode: batch row %d: sequence %d expects position %d, got %d", i,
                           t->seq, seq_next[t->seq], t->pos);
        if (t->pos >= n_ctx)
            return err_set(e, ERR_FULL, "engine_decode: sequence %d is full (n_ctx %d)", t->seq, n_ctx);
        seq_next[t->seq]++;
    }
    return 0;
}
