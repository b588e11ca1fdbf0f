/* hip_fit.h — how much device memory the `hip` engine needs for a model,
 * and the refusal when the device does not have it.
 *
 * The engine asks before it uploads anything (hip_engine_create), so a
 * model that does not fit fails at once with the numbers instead of after
 * minutes of uploads with a bare "out of memory". The arithmetic needs no
 * GPU and is tested on the CPU (tests/test_hip_fit.c). */
#ifndef LLM170_HIP_FIT_H
#define LLM170_HIP_FIT_H

#include <stdint.h>

#include "../../common/err.h"
#include "../backend/backend.h"
#include "../model/model.h"

/* Device bytes, by what holds them: the plan hip_engine_create allocates by (the step buffers from
 * hip_scratch_plan, the hybrids' buffers from hip_hybrid_plan), so the fit check, the refusal and the
 * memory breakdown `llm170 ps` shows are one set of numbers. */
struct hip_fit {
    uint64_t weights;  /* every tensor the engine uploads (an untied output counted once more) */
    uint64_t kv;       /* K and V caches: layers with a cache · 2 · n_seq · n_ctx · kv_dim · element size */
    uint64_t act;      /* step buffers ("scratch"): activations for n_batch tokens (hip_scratch.c) and the
                          hybrids' step scratch (hip_hybrid.c) */
    uint64_t state;    /* hybrids: the recurrent states of n_seq sequences */
    uint64_t snap;     /* hybrids: their snapshots, n_snap a sequence */
    uint64_t reserve;  /* headroom: kernel modules, graphs, allocation rounding (HIP_FIT_RESERVE) */
    uint64_t state_per_seq; /* one sequence's recurrent state (a snapshot is as large) */
    int n_snap;        /* snapshots a sequence keeps (resolved; 0 without recurrent state) */
};

#define HIP_FIT_RESERVE (256ull << 20)

/* The requirement of model m with params p, whose n_ctx / n_batch / n_seq are already resolved
 * (> 0; hip_engine_create resolves the defaults first). */
void hip_fit_need(const struct model *m, const struct engine_params *p, struct hip_fit *f);
uint64_t hip_fit_total(const struct hip_fit *f);
/* 0 when total <= free_bytes, else ERR_NOMEM with one line naming the total and each part (GiB, or MiB
 * under 1 GiB): "needs X: weights A, KV B (n_seq x n_ctx positions), states C, snapshots D (N per slot of
 * S), scratch E, reserve R; <device> has F free", and what to lower. */
int hip_fit_check(const struct hip_fit *f, uint64_t free_bytes, const char *device, const struct engine_params *p,
                  struct err *e);

#endif
