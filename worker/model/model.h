/* model.h — a loaded model: architecture traits, hyperparameters and the
 * per-layer weight table, all bound to tensors of the GGUF mapping.
 *
 * A model is data: `struct arch_desc` (arch.c) says what an architecture
 * has (RoPE mode, q/k norm, which optional tensors it may carry, MoE), and
 * one forward function per backend runs every architecture from the shared
 * ops. Layers carry a `kind` so hybrid stacks (recurrent / gated-attention
 * layers of qwen35, qwen4exp) can be added as new kinds without touching
 * the dense path. Shapes below are GGUF/ggml order [ne0, ne1, ne2]: ne0 is
 * the contiguous dimension, so a weight [n_in, n_out] is n_out rows of n_in. */
#ifndef LLM170_MODEL_H
#define LLM170_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../gguf/gguf.h"
#include "../num/ops.h"
#include "../num/quant.h"
#include "../tok/tok.h"

#define MODEL_MAX_LAYERS 512

struct model_info {
    const char *arch;     /* general.architecture */
    const char *name;     /* general.name or the file's base name */
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    uint64_t n_params;    /* elements over all tensors */
    uint64_t n_bytes;     /* bytes of tensor data */
    int32_t pooling_type; /* {arch}.pooling_type as llama.cpp numbers it (0 none, 1 mean, 2 cls, 3 last,
                           * 4 rank), -1 when the file does not say */
};

struct model;
struct loader;
/* Load and validate a model (GGUF + hyperparameters + every required tensor
 * with its expected shape). Errors name the file and the tensor or key. */
int model_load(struct model **out, const char *path, struct err *e);
void model_free(struct model *m);
const struct model_info *model_info(const struct model *m);
const struct tok_vocab *model_vocab(const struct model *m);
const struct gguf *model_gguf(const struct model *m);

enum rope_scaling {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LINEAR = 1, /* the default when the key is absent */
    ROPE_SCALING_YARN = 2,
    ROPE_SCALING_LONGROPE = 3, /* accepted; run like linear (these arches have no long/short factors) */
};

enum layer_kind {
    LAYER_ATTN = 0, /* softmax self-attention with a KV cache */
    LAYER_GDN = 1,        /* qwen35*: Gated DeltaNet, per-sequence conv + recurrent state (cpu_hybrid.c) */
    LAYER_GATED_ATTN = 2, /* qwen35*: attention with a sigmoid output gate, q/k norm and IMROPE (cpu_hybrid.c) */
    LAYER_SPARSE_ATTN = 3, /* qwen4exp: gated attention over the cells a lightning indexer selects (QSA) */
    LAYER_KINDS
};

enum ffn_kind {
    FFN_DENSE = 0, /* SwiGLU: down(silu(gate·h) ⊙ up·h) */
    FFN_MOE = 1,   /* softmax router → top-k → renormalised weighted sum of SwiGLU experts */
    FFN_KINDS
};

struct loader;

/* What an architecture has; one static row per arch in arch.c. */
struct arch_desc {
    const char *name;       /* general.architecture */
    enum rope_mode rope;    /* fixed per arch, not stored in the file */
    bool qk_norm;           /* per-head RMSNorm of q and k before RoPE (qwen3*) */
    bool moe;               /* FFN is MoE (qwen3moe); llama becomes MoE when expert_count > 0 */
    bool out_bias;          /* may carry output.bias (qwen2) */
    bool o_bias;            /* may carry attn_output.bias (llama) */
    bool ffn_bias;          /* may carry ffn_{gate,up,down}.bias (llama) */
    bool rope_freqs;        /* may carry rope_freqs.weight (llama 3.1+) */
    bool q_is_square;       /* requires head_dim·n_head == n_embd (qwen2 declares Wq/Wo square) */
    bool n_ff_exp_key;      /* n_ff_exp from {A}.expert_feed_forward_length (else n_ff) */
    bool hybrid;            /* qwen35*: GDN + gated-attention stack, loaded by arch_qwen35.c */
    bool hc;                /* qwen4exp: hyper-connections (a residual of hc streams), QSA, PLE */
    /* binds the file's hyperparameters and tensors and sets each layer's kinds (arch_*.c) */
    int (*load)(struct loader *L, struct err *e);
};

const struct arch_desc *arch_find(const char *name);

/* One weight tensor as the kernels see it (points into the mapping). */
struct wt {
    const void *data;     /* NULL when absent (optional tensors) */
    enum qtype type;
    int64_t ne[3];        /* ggml shape; unused dims 1 */
    size_t row_bytes;     /* bytes of one ne0 row */
    const char *name;     /* the GGUF tensor name (owned by the gguf) */
};

/* A 1-D f32 vector (norm weight or bias); converted to f32 at load if stored otherwise. */
struct vec {
    const float *data;    /* NULL when absent */
    int64_t n;
};

/* One hyper-connection mixer (arch-qwen4exp.md §3.2): reads the hc streams R [hc][n_embd] of a token
 * and gives the sublayer input m [n_embd] and, with inject, the write-back logits j [hc]. */
struct hc_mix {
    struct vec norm;         /* [hc·n_embd] per-stream RMSNorm weight (stored 1 + w) */
    struct wt down;          /* [hc·n_embd, hc_lr] */
    struct wt up;            /* [hc_lr, hc·n_embd] */
    struct wt inject;        /* [hc·n_embd, hc] absent for the output mixer */
};

struct layer {
    enum layer_kind kind;
    enum ffn_kind ffn;
    int n_head;           /* query heads of this layer */
    int n_head_kv;        /* KV heads (n_head % n_head_kv == 0) */
    int n_ff;             /* dense FFN width (0 for MoE layers) */
    int kv_index;         /* index of this layer's KV slab in the cache, -1 if it has none */

    struct vec attn_norm;    /* [n_embd] */
    struct wt wq;            /* [n_embd, head_dim·n_head]      (absent when wqkv is used) */
    struct wt wk;            /* [n_embd, head_dim·n_head_kv] */
    struct wt wv;            /* [n_embd, head_dim·n_head_kv] */
    struct wt wqkv;          /* [n_embd, q+k+v] fused alternative, output split as [Q | K | V] */
    struct vec bq;           /* [head_dim·n_head]    optional */
    struct vec bk;           /* [head_dim·n_head_kv] optional */
    struct vec bv;           /* [head_dim·n_head_kv] optional */
    struct vec bqkv;         /* [q+k+v]              optional, with wqkv */
    struct vec q_norm;       /* [head_dim] qwen3* */
    struct vec k_norm;       /* [head_dim] qwen3* */
    struct wt wo;            /* [head_dim·n_head, n_embd] */
    struct vec bo;           /* [n_embd] optional (llama) */

    struct vec ffn_norm;     /* [n_embd] */
    /* dense */
    struct wt ffn_gate;      /* [n_embd, n_ff] */
    struct wt ffn_up;        /* [n_embd, n_ff] */
    struct wt ffn_down;      /* [n_ff, n_embd] */
    struct vec b_gate;       /* [n_ff]   optional (llama) */
    struct vec b_up;         /* [n_ff]   optional (llama) */
    struct vec b_down;       /* [n_embd] optional (llama) */
    /* MoE */
    struct wt gate_inp;      /* [n_embd, n_expert] router */
    struct wt gate_exps;     /* [n_embd, n_ff_exp, n_expert] expert e = slice ne2 = e */
    struct wt up_exps;       /* [n_embd, n_ff_exp, n_expert] */
    struct wt down_exps;     /* [n_ff_exp, n_embd, n_expert] */

    /* hybrids (qwen35*). Gated attention reuses wq (then [n_embd, 2·head_dim·n_head], per head h
     * rows [h·2D, h·2D+D) query and [h·2D+D, (h+1)·2D) gate), wk, wv, wo, q_norm, k_norm;
     * attn_norm/ffn_norm hold attn_norm / post_attention_norm. */
    int gdn_index;           /* index of this layer's recurrent state, -1 if it has none */
    struct wt ssm_qkv;       /* [n_embd, conv_dim] GDN input projection, output [q | k | v] (attn_qkv) */
    struct wt ssm_z;         /* [n_embd, value_dim] output gate z (attn_gate) */
    struct vec ssm_conv;     /* [d_conv·conv_dim] depthwise conv taps, channel c at [c·d_conv, (c+1)·d_conv) */
    struct vec ssm_dt;       /* [H_v] dt bias, added before softplus */
    struct vec ssm_a;        /* [H_v] −exp(A_log), negative */
    struct wt ssm_beta;      /* [n_embd, H_v] */
    struct wt ssm_alpha;     /* [n_embd, H_v] */
    struct vec ssm_norm;     /* [d_v] gated RMSNorm weight shared by the V heads (not +1-shifted) */
    struct wt ssm_out;       /* [value_dim, n_embd] */
    /* MoE shared expert (qwen35moe) */
    struct vec gate_inp_shexp; /* [n_embd] sigmoid gate: one scalar per token */
    struct wt gate_shexp;    /* [n_embd, n_ff_shexp] */
    struct wt up_shexp;      /* [n_embd, n_ff_shexp] */
    struct wt down_shexp;    /* [n_ff_shexp, n_embd] */

    /* qwen4exp (m->arch->hc): the mixers that replace attn_norm and ffn_norm */
    struct hc_mix hc_attn;
    struct hc_mix hc_ffn;
    /* QSA indexer, on every full-attention layer (run only when qsa_ratio > 0: LAYER_SPARSE_ATTN) */
    int qsa_ratio;           /* block size r of the indexer (1..64); 0 = dense attention */
    int qsa_index;           /* index of this layer's indexer-key cache, -1 if it has none */
    struct wt idx_q;         /* [n_embd, n_idx_head·d_idx] indexer queries */
    struct wt idx_k;         /* [n_embd, d_idx] indexer key (one head) */
    struct vec idx_q_norm;   /* [d_idx] */
    struct vec idx_k_norm;   /* [d_idx] */
    /* PLE n-gram embeddings, on the one layer hp.ple_layer (before its attention mixer) */
    struct wt ple_key;       /* [n_embd, hc·n_embd] */
    struct wt ple_value;     /* [n_embd, n_embd] */
    struct vec ple_norm_key;   /* [hc·n_embd] */
    struct vec ple_norm_query; /* [hc·n_embd] */
    struct vec ple_norm_conv;  /* [hc·n_embd] */
    struct vec ple_conv;     /* [K_p·hc·n_embd] dilated depthwise conv, channel c at [c·K_p, (c+1)·K_p) */
};

/* The multi-token-prediction block of a hybrid (loaded, not run by the forward pass). Its
 * attention + FFN tensors are in layers[n_layer]. */
struct mtp_head {
    struct wt eh_proj;       /* [2·n_embd, n_embd] input concat(enorm(e), hnorm(h)) */
    struct vec enorm;        /* [n_embd] */
    struct vec hnorm;        /* [n_embd] */
    struct wt embed_tokens;  /* [n_embd, n_vocab] optional (else token_embd) */
    struct vec head_norm;    /* [n_embd] optional (else output_norm) */
    struct wt head;          /* [n_embd, n_vocab] optional (else output) */
};

struct hparams {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;
    int head_dim;         /* key_length == value_length (asserted) */
    int n_rot;            /* rope.dimension_count (== head_dim for these arches) */
    int n_head_max;       /* largest per-layer n_head (sizes scratch) */
    int n_head_kv_max;    /* largest per-layer n_head_kv */
    int n_ff_max;         /* largest dense n_ff */
    float rms_eps;
    /* RoPE, already resolved to the context-level values of llama-context.cpp */
    float freq_base;
    float freq_scale;     /* 1/s, or 1 */
    enum rope_scaling scaling;
    float ext_factor;     /* 1 for YaRN, else 0 */
    float attn_factor;    /* mscale passed to rope_yarn */
    float yarn_beta_fast, yarn_beta_slow;
    int n_ctx_orig;
    float corr_dims[2];   /* YaRN ramp [low, high] */
    float kq_scale;       /* 1/sqrt(head_dim) */
    /* MoE */
    int n_expert;
    int n_expert_used;
    int n_ff_exp;
    float expert_weights_scale; /* 0 = none */
    /* hybrids (qwen35*) */
    int n_layer_all;      /* block_count: trunk + MTP blocks (n_layer is the trunk) */
    int n_nextn;          /* MTP blocks after the trunk (0 or 1) */
    int rope_sections[4]; /* IMROPE sections t, h, w, e (pairs), text positions use p_e = 0 */
    int d_conv;           /* ssm.conv_kernel */
    int d_state;          /* ssm.state_size = d_k = d_v */
    int n_k_heads;        /* ssm.group_count H_k */
    int n_v_heads;        /* ssm.time_step_rank H_v */
    int n_ff_shexp;       /* shared-expert width (0 = none) */
    bool gdn_sigmoid_gate; /* qwen4exp: GDN output gate sigmoid(z) instead of silu(z) */
    /* qwen4exp hyper-connections, QSA indexer and PLE (arch-qwen4exp.md §1) */
    int hc;               /* residual streams (0: none; else > 1) */
    int hc_lr;            /* rank of the HC gate MLP */
    int n_idx_head;       /* indexer query heads */
    int d_idx;            /* indexer head dimension */
    int idx_top_k;        /* token budget of the selection */
    int ple_layer;        /* the layer carrying PLE, -1 for none */
    int ple_ngram;        /* n-gram order n (2..8); the conv dilation */
    int ple_heads_per_ngram;
    int n_ple_heads;      /* (n − 1) · heads per n-gram (≤ 64) */
    int d_ple;            /* width of one PLE table row; n_ple_heads · d_ple == n_embd */
    int ple_kernel;       /* conv taps K_p */
    int ple_eos;          /* the token that cuts the n-gram window */
    uint64_t ple_mult[8];   /* hash multipliers m[0..n−1] */
    uint64_t ple_off[64];   /* row offset of each head in the table */
    uint64_t ple_vocab[64]; /* rows (modulus) of each head */
};

struct model {
    struct gguf *g;
    struct tok_vocab *vocab;
    const struct arch_desc *arch;
    struct hparams hp;
    struct model_info info;
    char arch_name[64];
    char name[256];

    struct wt tok_embd;      /* [n_embd, n_vocab] */
    struct vec output_norm;  /* [n_embd] */
    struct wt output;        /* [n_embd, n_vocab]; = tok_embd when tied */
    bool tied;               /* output.weight absent */
    struct vec output_bias;  /* [n_vocab] optional (qwen2) */
    struct vec rope_freqs;   /* [n_rot/2] optional (llama) */

    int n_kv_layers;         /* layers with a KV cache */
    struct layer *layers;    /* [n_layer] (hybrids: [n_layer_all], MTP blocks after the trunk) */
    int n_gdn_layers;        /* layers with a recurrent state (hybrids) */
    struct mtp_head mtp;     /* hybrids with n_nextn = 1 */
    struct hc_mix output_hc; /* qwen4exp: the output mixer (no inject) in place of output_norm */
    struct wt ple_embd;      /* [d_ple, n_rows] qwen4exp PLE table (per_layer_token_embd), absent without PLE */
    int n_qsa_layers;        /* layers with an indexer-key cache (LAYER_SPARSE_ATTN) */

    float **owned;           /* f32 copies of non-f32 1-D tensors, freed with the model */
    int n_owned;
};

#endif
