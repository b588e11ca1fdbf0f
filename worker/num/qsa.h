/* qsa.h — the lightning indexer of QSA sparse attention (shared spec arch-qwen4exp.md §3.5): a block's
 * pooled key and the cells one query keeps. Both engines run this host-side math (the CPU engine for every
 * step, the vulkan backend between two submits), so the discrete selection — whose tie rule decides
 * logits by O(1) — is one piece of code. */
#ifndef LLM170_QSA_H
#define LLM170_QSA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when a query at position p sees no more cells than a selection keeps (top_k + r − 1): it attends
 * to all of them, as dense attention. */
static inline bool qsa_dense(int p, int r, int top_k) { return p + 1 <= top_k + r - 1; }

/* Block key (step 3): out[d] = RoPE(RMSNorm(mean of the r raw keys k[0..r)[d]; norm_w, eps)), rotated by cs
 * (ops_rope_cache's row for position b·r; every pair turns, the 4th IMROPE component included). The mean
 * sums the keys in order, then multiplies by 1/r, as llama.cpp 80fb11a. */
void qsa_block_key(const float *k, int r, int d, const float *norm_w, float eps, int n_rot, const float *cs,
                   float *out);

/* Steps 5–8 for one query at position p, not qsa_dense: q holds n_head heads of d (normed and rotated),
 * kb the block keys [nb][d] of the nb complete blocks of its sequence (those past p are not read).
 * Scores Σ_h relu(q_h·kb_b) (each dot in double, rounded to f32, summed over heads in f32), +1e9 on the
 * block holding p unless p ends it (the tail), then the top_k + r − 1 best cells by libstdc++'s
 * heap-select (std::partial_sort, ggml_top_k) and its tie order. sc, heap: p + 1 scratch each.
 * sel: the chosen cells, ascending. Returns their count. */
int qsa_select(const float *q, int n_head, int d, const float *kb, int nb, int p, int r, int top_k, float *sc,
               int *heap, int *sel);

/* The per-cell state QSA keeps beside the KV cache, host-side: every full-attention layer with a ratio
 * keeps each cell's raw indexer key (the K cache's type: rounded to f16 with an f16 cache, as llama.cpp's
 * indexer cache) and, per sequence, the pooled keys of its complete blocks, valid up to kb_valid. A cell
 * written again (a sequence cut back and redone, or restarted) makes its block pooled again. */
struct qsa_cache {
    int n_layers, n_seq, n_ctx, d;
    int kb_blocks;  /* blocks a sequence can have at the smallest ratio, + 1 */
    bool f16;
    float *keys;    /* [n_layers][n_seq][n_ctx][d] */
    float *kb;      /* [n_layers][n_seq][kb_blocks][d] */
    int *kb_valid;  /* [n_layers][n_seq] */
};

/* 0, or -1 when out of memory (c then holds nothing). r_min: the smallest ratio of the layers. */
int qsa_cache_init(struct qsa_cache *c, int n_layers, int n_seq, int n_ctx, int d, int r_min, bool f16);
void qsa_cache_free(struct qsa_cache *c);
uint64_t qsa_cache_bytes(const struct qsa_cache *c);
static inline float *qsa_cache_key(const struct qsa_cache *c, int l, int seq, int pos)
{
    return c->keys + (((size_t)l * (size_t)c->n_seq + (size_t)seq) * (size_t)c->n_ctx + (size_t)pos) * (size_t)c->d;
}
static inline float *qsa_cache_kb(const struct qsa_cache *c, int l, int seq, int b)
{
    return c->kb + (((size_t)l * (size_t)c->n_seq + (size_t)seq) * (size_t)c->kb_blocks + (size_t)b) * (size_t)c->d;
}
static inline int *qsa_cache_valid(const struct qsa_cache *c, int l, int seq)
{
    return &c->kb_valid[(size_t)l * (size_t)c->n_seq + (size_t)seq];
}
/* cell (seq, pos) of layer l gets raw key k[d]; its block (ratio r) is pooled again when next needed */
void qsa_cache_store(struct qsa_cache *c, int l, int seq, int pos, int r, const float *k);
/* the first n cells of src, onto dst (whose blocks are pooled again) */
void qsa_cache_copy(struct qsa_cache *c, int src, int dst, int n);

#endif
