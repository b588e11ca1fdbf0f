/* hip_engine.h — the device-resident `hip` engine (CUDA/HIP through
 * hip_rt). Same contract as engine.h's engine_* functions: weights are
 * uploaded once, the KV cache and every activation live on the device, a
 * decode step of a shape seen before is replayed as a captured graph, and
 * logits leave the device only for the rows that asked for them. */
#ifndef LLM170_HIP_ENGINE_H
#define LLM170_HIP_ENGINE_H

#include "../backend/backend.h"
#include "hip_knobs.h"

/* The backend's ops table, for the table of backends (engine/engine_backends.c): its public face.
 * The hip_engine_* calls below are what the GPU tests and tools (tests/test_hip_engine.c,
 * tests/tools/hip_bench.c) drive directly; the rest of the contract is reached through the table. */
extern const struct backend_ops hip_backend;

struct hip_engine;

/* ERR_UNSUPPORTED with a clear message when no GPU runtime is present or the model uses a weight
 * type the kernels do not cover. p->backend is not checked. k: the tuning settings (hip_knobs.h);
 * NULL reads them from the environment (hip_knobs_from_env). */
int hip_engine_create(struct hip_engine **out, const struct model *m, const struct engine_params *p,
                      const struct hip_knobs *k, struct err *e);
void hip_engine_free(struct hip_engine *c);
int hip_engine_decode(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e);
/* As hip_engine_decode, but only the argmax token id of each row that asked for logits leaves the
 * device (greedy sampling on the device). */
int hip_engine_decode_greedy(struct hip_engine *c, const struct engine_tok *toks, int n, int32_t *tokens,
                             struct err *e);
void hip_engine_seq_truncate(struct hip_engine *c, int seq, int pos);
int hip_engine_seq_len(const struct hip_engine *c, int seq);
int hip_engine_seq_copy(struct hip_engine *c, int src, int dst, int n, struct err *e);
/* "NVIDIA H200 (sm_90, …)" */
const char *hip_engine_device(const struct hip_engine *c);
/* Replay decode steps as graphs (default: hip_knobs.graphs). */
void hip_engine_set_graphs(struct hip_engine *c, bool on);
/* Time every kernel of the following decode calls (turns graphs off while on). */
struct hip_prof_row;
int hip_engine_profile(struct hip_engine *c, bool on, struct err *e);
/* Per-kernel-name totals since hip_engine_profile(on) or the last report; returns the row count. */
int hip_engine_profile_report(struct hip_engine *c, struct hip_prof_row *rows, int max, struct err *e);

#endif
