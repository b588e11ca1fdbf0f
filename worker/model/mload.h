/* mload.h — the GGUF binding helpers (mload.c) the loader of each
 * architecture (arch_*.c) is written with, and those loaders, which the
 * rows of arch.c name. Internal to model/; front ends use engine.h. */
#ifndef LLM170_MLOAD_H
#define LLM170_MLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

struct loader {
    struct model *m;
    const struct gguf *g;
    const char *path;
    const char *A; /* arch prefix */
    int n_bound;   /* tensors bound (for the unused-tensor check) */
};

/* Integer / per-layer integer / float hparam {A}.suffix, range-checked; `def` when absent and not required. */
int mload_int(struct loader *L, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi, int *out,
              struct err *e);
int mload_layer_int(struct loader *L, const char *suffix, uint32_t il, bool required, int64_t def, int64_t lo,
                    int64_t hi, int *out, struct err *e);
int mload_float(struct loader *L, const char *suffix, bool required, float def, float *out, struct err *e);
/* Bind a weight (shape [ne0, ne1(, ne2 when > 1)]) or an f32 vector [n], checked; absent optional → zeroed. */
int mload_wt(struct loader *L, struct wt *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool required,
             struct err *e);
int mload_vec(struct loader *L, struct vec *v, const char *name, int64_t n, bool required, struct err *e);
/* Bind a required 2-D tensor [ne0, ne1] as an f32 vector of ne0·ne1 (converted when stored otherwise). */
int mload_flat(struct loader *L, struct vec *v, const char *name, int64_t ne0, int64_t ne1, struct err *e);
/* token_embd [n_embd, n_vocab], output_norm [n_embd] and output [n_embd, n_vocab] (the embedding table
 * when absent: tied), which every architecture has; n_embd and n_vocab must be set. */
int mload_embd_output(struct loader *L, struct err *e);
/* Layer il's SwiGLU FFN: blk.il.ffn_{gate,up} [n_embd, n_ff], ffn_down [n_ff, n_embd] (layers[il].n_ff set),
 * and with bias the optional ffn_{gate,up,down}.bias. */
int mload_ffn_dense(struct loader *L, int il, bool bias, struct err *e);
/* The vocabulary size as every loader resolves it (token list, else {A}.vocab_size). */
int mload_n_vocab(struct loader *L, struct err *e);

/* the key "{A}.suffix" written into buf */
const char *mload_key(char *buf, size_t cap, const char *A, const char *suffix);

/* The loaders of the architectures: hparams and tensors of m's file, layer kinds set. */
int arch_dense_load(struct loader *L, struct err *e);  /* arch_dense.c: llama, qwen2, qwen3, qwen3moe */
int arch_qwen35_load(struct loader *L, struct err *e); /* arch_qwen35.c: qwen35, qwen35moe */
int arch_qwen4exp_load(struct loader *L, struct err *e); /* arch_qwen4exp.c: qwen4exp */
/* The qwen35 pieces arch_qwen4exp.c builds on: the hparams (rec[il]: layer il is recurrent) and one
 * layer's GDN or attention tensors and FFN (without attn_norm / post_attention_norm when arch->hc). */
int arch_qwen35_hparams(struct loader *L, bool *rec, struct err *e);
int arch_qwen35_layer(struct loader *L, int il, struct err *e);

#endif
