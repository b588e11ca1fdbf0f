/* engine.h — the inference API every front end uses (CLI, worker scheduler).
 *
 * A `struct model` is the loaded GGUF: hyperparameters, the vocabulary and
 * the weight tensors (still in the mapping for the CPU backend). A
 * `struct engine_ctx` holds what one backend needs to run it: KV cache /
 * recurrent state for n_seq sequences of up to n_ctx positions, scratch, the
 * thread pool. One call to engine_decode runs a batch of tokens that may mix
 * sequences (prefill chunks and single decode tokens together) and returns
 * logits for the tokens that asked for them. */
#ifndef LLM170_ENGINE_H
#define LLM170_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../backend/backend.h"
#include "../gguf/gguf.h"
#include "../model/model.h"
#include "../tok/tok.h"

struct engine_ctx;

/* The name of a backend (its --backend value), and the backend of a name ("cuda" is hip's other name);
 * false for a name no backend has. ENGINE_BACKEND_NAMES lists them for usage and error messages. */
const char *engine_backend_name(enum backend_kind k);
bool engine_backend_parse(const char *name, enum backend_kind *out);
#define ENGINE_BACKEND_NAMES "cpu, hip, vulkan"

/* engine_params with the defaults: the CPU backend, one sequence, every size left to the backend. */
void engine_params_default(struct engine_params *p);

int engine_create(struct engine_ctx **out, const struct model *m, const struct engine_params *p,
                  struct err *e);
void engine_free(struct engine_ctx *c);
int engine_n_ctx(const struct engine_ctx *c);
/* The device in words ("NVIDIA H200 (sm_90, …)"), or the backend's name when it says no more ("cpu"). */
const char *engine_device(const struct engine_ctx *c);
/* What engine_create took (per phase) and what the engine holds (per part): struct engine_load in
 * backend/backend.h. t_read is the caller's (model_load happens before the engine): 0 here. */
void engine_load_info(const struct engine_ctx *c, struct engine_load *out);
/* fn(ctx, i, worker) for i in [0, n) on the CPU engine's threads (the caller's included), or on a GPU
 * engine's host threads (n_threads of them, else up to 8); for independent per-sequence host work
 * between steps (sampling), which otherwise leaves those threads idle or, on a GPU, takes longer than
 * the decode. Not reentrant with engine_decode. */
void engine_parallel(struct engine_ctx *c, void (*fn)(void *ctx, int64_t i, int worker), void *ctx, int64_t n);

/* Run n tokens (n <= n_batch). Logits rows are written to `logits` in batch
 * order, one n_vocab row per token that asked. Tokens of a sequence must come
 * in position order; a sequence's first new position must equal its cached
 * length. */
int engine_decode(struct engine_ctx *c, const struct engine_tok *toks, int n, float *logits,
                  struct err *e);

/* Host memory for n floats of logits rows (NULL when out of memory): page-locked on a GPU engine, so
 * the device copies rows straight into it (pageable memory goes through a staging copy, and a
 * 152k-token row is 600 KB); LLM170_HIP_PINNED=0 at engine_create gives plain memory (A/B runs).
 * Free it with engine_logits_free, before engine_free. */
float *engine_logits_alloc(struct engine_ctx *c, size_t n);
void engine_logits_free(struct engine_ctx *c, float *p);

/* engine_decode, with each logits row's top-k pre-selection made where the logits are when the engine
 * can (a GPU's: then only the candidates cross to the host, not 152k floats a row); k, allow and the
 * optional prepare callback are sel's (struct engine_select, backend.h). For the r-th row
 * that asked for logits, with k[r] > 0: n_cands[r] ≥ k[r] candidates in ids/vals[r·ENGINE_CAND_CAP …],
 * in no particular order, every logit of the row left out below every one given (ties go in together;
 * NaN and −inf never given): what smp_sample_cands takes. Otherwise (k[r] ≤ 0, a row the cut does not
 * serve, or an engine without it) n_cands[r] = −1 and the whole row is in logits[r·n_vocab].
 * allow (NULL: none) masks rows before the selection: with allow[r] non-NULL (bit t of
 * allow[r][t / 32] = token t may be drawn: a grammar's mask), the candidates are the k largest of the
 * allowed tokens only — every allowed logit left out below every one given, none disallowed given — and
 * fewer than k (n_cands[r] ≥ 1) when fewer are allowed: then they are all of them. A whole row comes back
 * unmasked; the host masks it. */
int engine_decode_topk(struct engine_ctx *c, const struct engine_tok *toks, int n, const struct engine_select *sel,
                       int32_t *ids, float *vals, int32_t *n_cands, float *logits, struct err *e);
/* Whether engine_decode_topk pre-selects on this engine (else it is engine_decode). */
bool engine_has_topk(const struct engine_ctx *c);

/* engine_decode that also writes, for each token t with want[t], its final hidden state after the output
 * norm (what the LM head would multiply; n_embd floats per such token, in batch order) to embd: what an
 * embedding pools. ERR_UNSUPPORTED naming the backend when it has none (engine_has_embd) and a token asks. */
int engine_decode_embd(struct engine_ctx *c, const struct engine_tok *toks, int n, const bool *want, float *logits,
                       float *embd, struct err *e);
bool engine_has_embd(const struct engine_ctx *c);

/* Sequence state: forget all positions >= pos (pos 0 clears it). Returns 0, or ERR_UNSUPPORTED
 * when the model has recurrent layers (qwen35*) and pos is neither 0, the current length, nor a
 * snapshot position of the sequence: a recurrent state folds in every position and cannot be
 * rolled back to an arbitrary one (see engine_seq_snapshot). */
int engine_seq_truncate(struct engine_ctx *c, int seq, int pos);
/* Cached length of a sequence. */
int engine_seq_len(const struct engine_ctx *c, int seq);
/* Copy the first n positions of src's state into dst (prefix reuse / n > 1). With recurrent layers
 * n must be 0, src's length or one of src's snapshot positions (else ERR_UNSUPPORTED); dst also
 * inherits src's snapshots at positions <= n. */
int engine_seq_copy(struct engine_ctx *c, int src, int dst, int n, struct err *e);

/* Prefix reuse for recurrent hybrids (a no-op for plain transformers, whose cells are their state).
 * engine_seq_snapshot keeps the sequence's recurrent state at its current length (the scheduler
 * takes one at each prefill chunk boundary); up to engine_params.n_snap per sequence are kept, the
 * oldest replaced first, and a snapshot dies when the sequence is cut back below it.
 * engine_seq_restore cuts the sequence back to `pos` (0, its length or a snapshot position; else
 * ERR_UNSUPPORTED). engine_seq_restorable says the largest position <= pos the sequence can be cut
 * back to (any position for plain transformers). */
int engine_seq_snapshot(struct engine_ctx *c, int seq, struct err *e);
int engine_seq_restore(struct engine_ctx *c, int seq, int pos, struct err *e);
int engine_seq_restorable(const struct engine_ctx *c, int seq, int pos);

#endif
