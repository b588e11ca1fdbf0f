/* cpu_hybrid.h — the CPU layers of the Gated DeltaNet hybrids (qwen35,
 * qwen35moe, qwen4exp; shared spec arch-qwen35.md §6, arch-qwen4exp.md §3)
 * and the per-sequence state they own. cpu_engine.c calls in here for
 * LAYER_GDN, LAYER_GATED_ATTN and LAYER_SPARSE_ATTN layers, for the shared
 * expert of a MoE FFN, for qwen4exp's PLE block, and for the sequence
 * operations (truncate / copy / snapshot / restore).
 *
 * State rule. A GDN layer keeps, per sequence, a conv state (the last
 * d_conv−1 inputs) and a recurrent state (H_v matrices d_v × d_k) that fold
 * in every position so far; they cannot be rolled back to an arbitrary
 * earlier position. A sequence can therefore only be cut back to 0, to its
 * own length (no-op), or to a position where a snapshot was taken
 * (engine_seq_snapshot); anything else is ERR_UNSUPPORTED. A snapshot at
 * position p stays valid until the sequence is cut back below p. The
 * recurrent state of a sequence is zeroed whenever it decodes position 0. */
#ifndef LLM170_CPU_HYBRID_H
#define LLM170_CPU_HYBRID_H

#include "../backend/backend.h"
#include "kv_cache.h"
#include "../num/matmul.h"
#include "../model/model.h"

struct cpu_hybrid;

/* p->gdn_chunk_min: a sequence's run of at least this many tokens in one call uses the chunked
 * delta rule (<= 0: never — token by token is the faster form on the CPU); p->n_snap: snapshots
 * kept per sequence (<= 0: 4). */
typedef void (*cpu_hybrid_mm_fn)(void *ctx, const struct wt *w, const float *X, int n, float *Y);
/* mm(mm_ctx, w, X, n, Y): the engine's Y[n][ne1] = X[n][ne0]·wᵀ (its packed weights included). */
int cpu_hybrid_create(struct cpu_hybrid **out, const struct model *m, const struct engine_params *p, struct tpool *tp,
                  cpu_hybrid_mm_fn mm, void *mm_ctx, struct err *e);
void cpu_hybrid_free(struct cpu_hybrid *hy);
/* Bytes hy holds: the recurrent states of every sequence, one sequence's state (a snapshot's size),
 * the snapshots kept per sequence, and the step scratch cpu_hybrid_create allocated besides the states. */
void cpu_hybrid_mem(const struct cpu_hybrid *hy, uint64_t *state, uint64_t *per_seq, int *n_snap, uint64_t *scratch);

/* The mixer of one trunk layer (LAYER_GDN, LAYER_GATED_ATTN or LAYER_SPARSE_ATTN) over n batch tokens:
 * a[n][n_embd] = mixer(h), h[n][n_embd] its input (attn_norm(x), or qwen4exp's HC mix); the caller adds a
 * to the residual. cs: [n][n_rot] the tokens' plain RoPE cos/sin (ops_rope_cache); f16tab for an f16 KV
 * cache. A sparse layer keeps its indexer keys beside the KV cache (f16-rounded when the cache is f16). */
void cpu_hybrid_layer(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n, const float *h,
                  float *a, const float *cs, struct kv_cache *kv, const float *f16tab);

/* qwen4exp's PLE block on the wide residual x[n][hc·n_embd] (arch-qwen4exp.md §3.6): x += G + conv(G). The
 * n-gram context reads earlier tokens of each sequence (kept per position), the dilated conv carries the
 * last (K_p − 1)·n_gram inputs in the sequence's state. */
void cpu_hybrid_ple(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n, float *x);

/* a[n][n_embd] += sigmoid(gate_inp_shexp·h) · shared_expert(h) (qwen35moe). */
void cpu_hybrid_shexp(struct cpu_hybrid *hy, const struct layer *ly, const float *h, float *a, int n);

/* Sequence operations; hy may be NULL (plain transformer: any position is reachable). */
int cpu_hybrid_seq_truncate(struct cpu_hybrid *hy, struct kv_cache *kv, int seq, int pos, struct err *e);
int cpu_hybrid_seq_copy(struct cpu_hybrid *hy, struct kv_cache *kv, int src, int dst, int n, struct err *e);
int cpu_hybrid_seq_snapshot(struct cpu_hybrid *hy, struct kv_cache *kv, int seq, struct err *e);
int cpu_hybrid_seq_restorable(const struct cpu_hybrid *hy, const struct kv_cache *kv, int seq, int pos);

#endif
