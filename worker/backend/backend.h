/* backend.h — the seam between the engine (engine/engine.c) and a backend
 * (cpu/, hip/, …): the batch and parameter types every backend takes, and
 * the ops table a backend fills in. engine.c calls a backend only through
 * its table; nothing outside a backend's folder names the backend's own
 * symbols except the table of backends (engine/engine_backends.c).
 *
 * Modelled on ggml's `struct ggml_backend_i` and nng's transport ops: the
 * table is data, optional entries are NULL and engine.c supplies the
 * fallback. Each backend's layer loop is shared (model/model_forward.h); the table
 * below is what a backend adds around it (memory, sequences, the step). */
#ifndef LLM170_BACKEND_H
#define LLM170_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../model/model.h"

enum backend_kind { BACKEND_CPU = 0, BACKEND_HIP = 1, BACKEND_VULKAN = 2, BACKEND_KINDS };

struct engine_params {
    enum backend_kind backend;
    int n_ctx;      /* positions per sequence; 0 = min(n_ctx_train, 4096) */
    int n_seq;      /* sequences that may be live at once (1 for a single stream) */
    int n_batch;    /* most tokens per engine_decode call; 0 = 512 */
    int n_threads;  /* CPU threads; 0 = all cores */
    bool kv_f32;    /* f32 KV cache instead of the default f16 */
    bool no_pack;   /* CPU: keep weights in the file layout instead of repacking them for the
                       faster multi-token kernels (saves a copy of the packable weights in memory;
                       packing is also skipped when the weights exceed a quarter of the RAM) */
    /* recurrent hybrids (qwen35*) */
    int n_snap;         /* state snapshots kept per sequence; 0 = ENGINE_N_SNAP_DEFAULT */
    int gdn_chunk_min;  /* a sequence's run of >= this many tokens in one call uses the chunked
                           Gated DeltaNet form, shorter runs the token-by-token one; 0 = the
                           backend's faster choice (CPU: token by token for every run) */
    /* GPU backends: open device `device` (the worker's --gpu N, one worker per device) when has_device;
     * else the backend's own choice (LLM170_HIP_DEVICE / LLM170_VK_DEVICE, else its first device).
     * A device the machine does not have is ERR_INVALID naming how many there are. */
    bool has_device;
    int device;
};
/* Recurrent-state snapshots a sequence keeps when engine_params.n_snap is 0 (the scheduler takes one at
 * each prefill chunk boundary for prefix reuse). Each is one sequence's whole state: on qwen35-27b
 * 149.6 MiB, so 32 slots keep 18.7 GiB of them (docs/hybrid-models.md has the arithmetic). */
#define ENGINE_N_SNAP_DEFAULT 4
/* Most snapshots per sequence a caller may ask for (the worker's --snapshots, llm170d's `snapshots`). */
#define ENGINE_N_SNAP_MAX 64

/* The defaults: the CPU backend, one sequence, every size 0 (resolved by backend_params_resolve). */
void backend_params_default(struct engine_params *p);
/* *out = *in (or the defaults when in is NULL) with n_ctx (min(train, 4096)), n_batch (512) and n_seq (1)
 * filled in where 0, every backend's common resolution; ERR_RANGE when one is beyond what the engines
 * index (n_ctx 2^24, n_batch and n_seq 2^16). Backend-specific fields are left to the backend. */
int backend_params_resolve(const struct model *m, const struct engine_params *in, struct engine_params *out,
                           struct err *e);

/* One token of a batch. */
struct engine_tok {
    int32_t token;  /* vocabulary id */
    int32_t pos;    /* position in its sequence (0-based, contiguous after the cached ones) */
    int32_t seq;    /* sequence id in [0, n_seq) */
    bool logits;    /* return logits for this token */
};

/* What creating an engine took and what it holds: the worker's ready line and `llm170 ps` show it
 * (engine_load_info). Times are seconds of the monotonic clock; bytes are what the backend allocated
 * (the hip backend's from the plan its allocations follow, hip_fit.c). A backend fills what applies
 * and leaves the rest 0 (the CPU compiles nothing). */
struct engine_load {
    double t_read;     /* the GGUF mapped and its tensors bound (model_load: the caller times it) */
    double t_compile;  /* kernel modules compiled, or read from the disk cache */
    double t_upload;   /* weights into the backend's memory (hip: host → device copies; cpu: repacking) */
    double t_alloc;    /* KV cache, recurrent states, snapshots and step buffers allocated and cleared */
    uint64_t weights;  /* bytes of weights the backend holds (cpu: the mapped tensors + repacked copies) */
    uint64_t kv;       /* KV cache */
    uint64_t state;    /* recurrent states of every sequence (hybrids) */
    uint64_t snap;     /* their snapshots: n_seq · n_snap · state_per_seq (hip: allocated at create; cpu: the
                          budget, allocated as snapshots are first taken) */
    uint64_t scratch;  /* step buffers (activations, the hybrids' step scratch) */
    uint64_t state_per_seq; /* one sequence's recurrent state; a snapshot is as large */
    int n_snap;        /* snapshots kept per sequence (hybrids; 0 for a model without recurrent state) */
    uint64_t dev_used, dev_total; /* the device's own count after create (total − free, total); 0: no device */
};

/* Most candidates one row's top-k pre-selection hands back (engine_decode_topk). */
#define ENGINE_CAND_CAP 256

/* engine_decode_topk's selection, for the rows that asked for logits (in batch order). */
struct engine_select {
    const int32_t *k;             /* [rows] each row's k; ≤ 0: the whole row */
    const uint32_t *const *allow; /* [rows] each row's mask ((n_vocab + 31) / 32 words), NULL none; or NULL */
    /* optional: host work that fills k and allow, run once on the calling thread after the step's device
     * work is queued and before either is read — a grammar's masks made while a GPU computes the step
     * (an engine without a device selection runs it before the step) */
    void (*prepare)(void *ctx);
    void *ctx;
};

struct tpool;

/* A backend. `b` is the backend's own engine object (create's *out). Entries marked optional may be
 * NULL; every other one is required. The contracts are engine.h's engine_* calls of the same name. */
struct backend_ops {
    const char *name;   /* the --backend value: "cpu", "hip", … */
    /* p is resolved by the backend itself (backend_params_resolve) and not checked for p->backend */
    int (*create)(void **out, const struct model *m, const struct engine_params *p, struct err *e);
    void (*free)(void *b);
    int (*n_ctx)(const void *b);
    /* optional: the backend's own thread pool, for host work between steps (engine_parallel);
     * NULL: engine.c starts host threads of its own */
    struct tpool *(*pool)(void *b);
    int (*decode)(void *b, const struct engine_tok *toks, int n, float *logits, struct err *e);
    /* optional: top-k pre-selection where the logits are, masked rows selecting among their allowed tokens
     * only (engine_decode_topk); NULL: whole rows */
    int (*decode_topk)(void *b, const struct engine_tok *toks, int n, const struct engine_select *sel, int32_t *ids,
                       float *vals, int32_t *n_cands, float *logits, struct err *e);
    /* optional: decode, and for each token t with want[t] its final hidden state after the output norm
     * (n_embd floats, in batch order) into embd (engine_decode_embd); NULL: the backend has no embeddings */
    int (*decode_embd)(void *b, const struct engine_tok *toks, int n, const bool *want, float *logits, float *embd,
                       struct err *e);
    /* optional: host memory the backend copies rows into fastest (page-locked); NULL: malloc */
    int (*host_alloc)(void *b, size_t n, void **out, struct err *e);
    void (*host_free)(void *b, void *p);
    /* sequences: cached length, cut back (0, the length or a restorable position), copy a prefix,
     * snapshot the recurrent state, and the largest position <= pos a cut can reach */
    int (*seq_len)(const void *b, int seq);
    int (*seq_restore)(void *b, int seq, int pos, struct err *e);
    int (*seq_copy)(void *b, int src, int dst, int n, struct err *e);
    int (*seq_snapshot)(void *b, int seq, struct err *e);
    int (*seq_restorable)(const void *b, int seq, int pos);
    /* optional: the device in words ("NVIDIA H200 (sm_90, …)"); NULL: the backend's name */
    const char *(*describe)(const void *b);
    /* optional: what create took and what the engine holds (*out is zeroed by the caller); NULL: all 0 */
    void (*load_info)(const void *b, struct engine_load *out);
};

/* For backends: check a batch against the engine_decode contract (sizes, ids, contiguous positions per
 * sequence, context room). len[n_seq] are the cached lengths; seq_next[n_seq] receives each sequence's
 * length after the batch. */
int backend_check_batch(const struct engine_tok *toks, int n, int n_batch, int n_seq, int n_ctx, int32_t n_vocab,
                        const int *len, int *seq_next, struct err *e);

/* For backends: the rows of the batch that asked for logits, in order, into out_rows[n] and their count;
 * ERR_INVALID when some ask but logits is NULL, or a row is in want (may be NULL) and embd is NULL. */
int backend_out_rows(const struct engine_tok *toks, int n, const bool *want, const float *logits,
                     const float *embd, int *out_rows, int *n_out, struct err *e);

#endif
