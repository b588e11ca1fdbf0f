/* cpu_engine.h — the CPU engine (cpu_engine.c) behind engine.c's dispatch:
 * the engine.h contract with a cpu_ prefix. */
#ifndef LLM170_BACKEND_CPU_H
#define LLM170_BACKEND_CPU_H

#include "../engine/engine.h"

struct cpu_engine;
struct tpool;

int cpu_engine_create(struct cpu_engine **out, const struct model *m, const struct engine_params *p, struct err *e);
void cpu_engine_free(struct cpu_engine *c);
int cpu_engine_n_ctx(const struct cpu_engine *c);
/* The engine's thread pool (its caller counts as one of the threads), for work beside the forward. */
struct tpool *cpu_engine_pool(struct cpu_engine *c);
int cpu_engine_decode(struct cpu_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e);
int cpu_engine_seq_truncate(struct cpu_engine *c, int seq, int pos);
int cpu_engine_seq_len(const struct cpu_engine *c, int seq);
int cpu_engine_seq_copy(struct cpu_engine *c, int src, int dst, int n, struct err *e);
int cpu_engine_seq_snapshot(struct cpu_engine *c, int seq, struct err *e);
int cpu_engine_seq_restore(struct cpu_engine *c, int seq, int pos, struct err *e);
int cpu_engine_seq_restorable(const struct cpu_engine *c, int seq, int pos);

#endif
