/* hip_hybrid.h — the qwen35 / qwen35moe layers on the `hip`
 * backend: Gated DeltaNet and gated-attention mixers, the shared expert,
 * and the per-sequence recurrent state on the device with the CPU engine's
 * snapshot / restore / copy rules (cpu_hybrid.c). Built on hip_ops.h alone;
 * hip_engine.c runs these for layers whose kind is not LAYER_ATTN. */
#ifndef LLM170_FORWARD_HIP_HYBRID_H
#define LLM170_FORWARD_HIP_HYBRID_H

#include "../backend/backend.h"
#include "hip_ops.h"

struct hip_hybrid;

/* Uploads the GDN and shared-expert weights through s and allocates the state (zero) and scratch. */
int hip_hybrid_create(struct hip_hybrid **out, struct hip_ops *o, const struct model *m,
                      const struct engine_params *p, struct stager *s, struct err *e);
/* The device bytes hip_hybrid_create allocates for m with p, by what holds them: the recurrent states of
 * n_seq sequences, their snapshots (n_snap a sequence, allocated with the states so a snapshot never
 * runs out of memory mid-serve), the step scratch; and one sequence's state (a snapshot is as large).
 * The fit check and the engine's memory breakdown read this; create allocates exactly these buffers.
 * All 0 for a model that is not a hybrid. */
struct hip_hybrid_plan {
    uint64_t state, snap, scratch;
    uint64_t per_seq;
    int n_snap;         /* resolved (ENGINE_N_SNAP_DEFAULT for 0); 0 without GDN layers */
};
void hip_hybrid_plan(const struct model *m, const struct engine_params *p, struct hip_hybrid_plan *out);
/* Host memory and the pinned buffer; device buffers belong to the engine's allocation list. */
void hip_hybrid_free(struct hip_hybrid *hy);
/* Before a step's kernels: groups the batch rows by sequence and sends them up (on the engine's
 * stream), and zeroes the rotation of IMROPE's p_e pairs in the host cos/sin rows cs [n][n_rot]. */
int hip_hybrid_prepare(struct hip_hybrid *hy, const struct engine_tok *toks, int n, float *cs, struct err *e);
/* x += mixer(rmsnorm(x)) of layer il (LAYER_GDN or LAYER_GATED_ATTN), n batch rows. */
int hip_hybrid_layer(struct hip_hybrid *hy, const struct layer *ly, int il, int n, struct err *e);
/* After the FFN of layer il: x += σ(w·h) · shared_expert(h), h the FFN's normed input; no-op without one. */
int hip_hybrid_shexp(struct hip_hybrid *hy, const struct layer *ly, int il, int n, struct err *e);

/* Sequence state, as hybrid_seq_* in cpu_hybrid.h; len [n_seq] is the engine's cached lengths. */
int hip_hybrid_restorable(const struct hip_hybrid *hy, const int *len, int seq, int pos);
/* Cut seq back to pos (0, its length or a snapshot position), setting len[seq]. */
int hip_hybrid_truncate(struct hip_hybrid *hy, int *len, int seq, int pos, struct err *e);
int hip_hybrid_snapshot(struct hip_hybrid *hy, const int *len, int seq, struct err *e);
/* dst's recurrent state (and snapshots inside the prefix) from the first n positions of src
 * (n = 0, len[src] or a snapshot position; src != dst); the caller copies the KV cells. */
int hip_hybrid_copy(struct hip_hybrid *hy, const int *len, int src, int dst, int n, struct err *e);

#endif
