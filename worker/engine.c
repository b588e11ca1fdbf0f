/* engine.c — engine.h's engine_* calls, dispatched on engine_params.backend
 * to the CPU engine (forward_cpu.c) or the device-resident `hip` engine
 * (forward_hip.c). The Vulkan backend is not built in yet. */
#include <stdlib.h>

#include "backend_cpu.h"
#include "backend_hip.h"
#include "engine.h"

struct engine_ctx {
    enum backend_kind kind;
    struct cpu_engine *cpu;  /* exactly one of these is set */
    struct hip_engine *hip;
};

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
    free(c);
}

int engine_n_ctx(const struct engine_ctx *c)
{
    return c->hip ? hip_engine_n_ctx(c->hip) : cpu_engine_n_ctx(c->cpu);
}

int engine_decode(struct engine_ctx *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return c->hip ? hip_engine_decode(c->hip, toks, n, logits, e) : cpu_engine_decode(c->cpu, toks, n, logits, e);
}

int engine_seq_truncate(struct engine_ctx *c, int seq, int pos)
{
    if (c->hip) {
        hip_engine_seq_truncate(c->hip, seq, pos); /* attention-only: any position */
        return 0;
    }
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

/* Snapshots exist for recurrent (hybrid) state, which only the CPU backend
 * runs so far; the hip backend holds attention-only models, whose cache can
 * be cut anywhere, so a snapshot is a no-op there. */
int engine_seq_snapshot(struct engine_ctx *c, int seq, struct err *e)
{
    return c->hip ? 0 : cpu_engine_seq_snapshot(c->cpu, seq, e);
}

int engine_seq_restore(struct engine_ctx *c, int seq, int pos, struct err *e)
{
    if (c->hip) {
        hip_engine_seq_truncate(c->hip, seq, pos);
        return 0;
    }
    return cpu_engine_seq_restore(c->cpu, seq, pos, e);
}

int engine_seq_restorable(const struct engine_ctx *c, int seq, int pos)
{
    return c->hip ? pos : cpu_engine_seq_restorable(c->cpu, seq, pos);
}
