/* model_forward.h — the layer loop every backend runs, described once.
 *
 * A model is data (model.h): per layer a mixer kind (attention, gated
 * attention, Gated DeltaNet) and an FFN kind (dense, MoE), with the tensors
 * each needs. model_forward walks the layers in order and calls the
 * backend's operation for each sublayer's kind; the backend decides how
 * (its kernels, where the residual stream lives, what it fuses). A sublayer
 * knows the norm that follows it (`struct fwd_sub`), so a backend may fold
 * that norm into its residual add (the hip backend's deferred RMSNorm) or
 * capture the whole walk as one graph: the order of calls is the contract.
 * Modelled on llama.cpp's one-file-per-architecture graphs, with the layer
 * kinds as the boundary backends optimise behind. */
#ifndef LLM170_MODEL_FORWARD_H
#define LLM170_MODEL_FORWARD_H

#include "../../common/err.h"
#include "model.h"

/* Where a sublayer sits, and what comes after it. */
struct fwd_sub {
    int il;                    /* layer index in [0, n_layer) */
    const struct layer *ly;    /* m->layers[il] */
    /* the norm weight of the sublayer that follows (a mixer: its layer's ffn_norm; an FFN: the next
     * layer's attn_norm, or the output norm after the last layer) */
    const struct vec *next_norm;
    int next_il;               /* the layer that norm belongs to; -1 for the output norm */
};

/* One step's operations. x is the backend's residual stream [n][n_embd]; every op may assume the ops
 * before it in model_forward's order have run (their results may still be pending on a device). */
struct layer_ops {
    /* x[t] = the embedding row of token t (and whatever per-step tables the backend keeps) */
    int (*embed)(void *b, int n, struct err *e);
    /* x += mixer(rmsnorm(x) · attn_norm), one entry per enum layer_kind (NULL: not implemented) */
    int (*mixer[LAYER_KINDS])(void *b, const struct fwd_sub *s, int n, struct err *e);
    /* x += ffn(rmsnorm(x) · ffn_norm), one per enum ffn_kind; a layer with a shared expert
     * (down_shexp present) adds σ(gate_inp_shexp·h) · shared_expert(h) in the same op */
    int (*ffn[FFN_KINDS])(void *b, const struct fwd_sub *s, int n, struct err *e);
    /* logits of the n_out rows that asked: output · rmsnorm(x[row]) · output_norm (+ output_bias) */
    int (*output)(void *b, int n, int n_out, struct err *e);
    /* x += PLE(x) (qwen4exp n-gram embeddings), before the mixer of the layer that carries them */
    int (*ple)(void *b, const struct fwd_sub *s, int n, struct err *e);
    /* the backend runs hyper-connections (m->arch->hc): x is hc streams per token, every "rmsnorm · norm"
     * above is that sublayer's HC mix and every "x +=" its HC write-back (arch-qwen4exp.md §3) */
    bool hyper_connections;
};

/* ERR_UNSUPPORTED naming the layer and kind when m has a layer kind `ops` lacks (backend: its name,
 * for the message). Backends call it at create time, so a model fails before any upload. */
int model_forward_check(const struct model *m, const struct layer_ops *ops, const char *backend, struct err *e);

/* embed, then per layer its mixer and its FFN, then output (when n_out > 0); stops at the first error. */
int model_forward(const struct model *m, const struct layer_ops *ops, void *b, int n, int n_out, struct err *e);

#endif
