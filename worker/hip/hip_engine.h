/* hip_engine.h — the device-resident `hip` engine (CUDA/HIP through
 * hip_rt). Same contract as engine.h's engine_* functions: weights are
 * uploaded once, the KV cache and every activation live on the device, a
 * decode step of a shape seen before is replayed as a captured graph, and
 * logits leave the device only for the rows that asked for them. */
#ifndef LLM170_HIP_ENGINE_H
#define LLM170_HIP_ENGINE_H

#include "../backend/backend.h"

/* The backend's ops table, for the table of backends (engine/engine_backends.c). */
extern const struct backend_ops hip_backend;

struct hip_engine;

/* ERR_UNSUPPORTED with a clear message when no GPU runtime is present or the model uses a weight
 * type the kernels do not cover. p->backend is not checked. */
int hip_engine_create(struct hip_engine **out, const struct model *m, const struct engine_params *p, struct err *e);
void hip_engine_free(struct hip_engine *c);
/* Device bytes of the engine's activations and step buffers for m with resolved params p (n_ctx,
 * n_batch, n_seq > 0); needs no GPU (the fit check, hip_fit.h). */
uint64_t hip_engine_scratch_bytes(const struct model *m, const struct engine_params *p);
int hip_engine_n_ctx(const struct hip_engine *c);
int hip_engine_decode(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e);
/* As hip_engine_decode, but only the argmax token id of each row that asked for logits leaves the
 * device (greedy sampling on the device). */
int hip_engine_decode_greedy(struct hip_engine *c, const struct engine_tok *toks, int n, int32_t *tokens,
                             struct err *e);
/* As engine_decode_topk (kernels/misc.cu topk_cut). */
int hip_engine_decode_topk(struct hip_engine *c, const struct engine_tok *toks, int n, const int32_t *k, int32_t *ids,
                           float *vals, int32_t *n_cands, float *logits, struct err *e);
/* Page-locked host memory of n bytes for the engine's copies to the host (engine_logits_alloc). */
int hip_engine_host_alloc(struct hip_engine *c, size_t n, void **out, struct err *e);
void hip_engine_host_free(struct hip_engine *c, void *p);
void hip_engine_seq_truncate(struct hip_engine *c, int seq, int pos);
int hip_engine_seq_len(const struct hip_engine *c, int seq);
int hip_engine_seq_copy(struct hip_engine *c, int src, int dst, int n, struct err *e);
/* Recurrent (hybrid) state: as engine_seq_snapshot / engine_seq_restore / engine_seq_restorable. For
 * attention-only models a snapshot is a no-op and the cache cuts anywhere. */
int hip_engine_seq_snapshot(struct hip_engine *c, int seq, struct err *e);
int hip_engine_seq_restore(struct hip_engine *c, int seq, int pos, struct err *e);
int hip_engine_seq_restorable(const struct hip_engine *c, int seq, int pos);
/* "NVIDIA H200 (sm_90, …)" */
const char *hip_engine_device(const struct hip_engine *c);
/* Replay decode steps as graphs (default on; LLM170_HIP_GRAPH=0 turns it off). */
void hip_engine_set_graphs(struct hip_engine *c, bool on);
/* GEMV of quantized weights on activations quantized to q8 per 32 (dp4a; llama.cpp CUDA's MMVQ
 * scheme, ~1e-3 from the CPU's q8_K) instead of f32 activations. Default on; LLM170_HIP_Q8=0 turns
 * it off. Decide before the first decode (graphs keep the choice they were captured with). */
void hip_engine_set_q8(struct hip_engine *c, bool on);
/* Time every kernel of the following decode calls (turns graphs off while on). */
struct hip_prof_row;
int hip_engine_profile(struct hip_engine *c, bool on, struct err *e);
/* Per-kernel-name totals since hip_engine_profile(on) or the last report; returns the row count. */
int hip_engine_profile_report(struct hip_engine *c, struct hip_prof_row *rows, int max, struct err *e);

#endif
