/* ops.h — CPU reference ops of the transformer forward pass, with the
 * narrowing order of llama.cpp's CPU backend (shared spec arch-dense.md §3–§6)
 * so that results stay on the same side of downstream rounding boundaries. */
#ifndef LLM170_OPS_H
#define LLM170_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* y[i] = (x[i] * scale) * w[i], scale = 1/sqrtf((float)(Σ (double)(x·x) / n) + eps).
 * w may be NULL (no weight); y may alias x. */
void ops_rms_norm(float *y, const float *x, const float *w, int n, float eps);

/* How RoPE pairs the elements of a head (fixed per architecture, model/arch.c). */
enum rope_mode {
    ROPE_NORM = 0, /* adjacent pairs (x[2i], x[2i+1]) — llama */
    ROPE_NEOX = 2, /* pairs (x[i], x[i + n_rot/2]) — qwen* ("rotate_half") */
};

/* YaRN correction range [low, high] (ggml_rope_yarn_corr_dims). */
void ops_rope_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow,
                        float dims[2]);

/* cos/sin for one position: cs[2i] = cos θ_i · mscale, cs[2i+1] = sin θ_i · mscale for pair i in
 * [0, n_rot/2), θ built iteratively in f32 as ggml's rope cache does. freq_factors may be NULL. */
void ops_rope_cache(float *cs, int32_t pos, int n_rot, float freq_base, const float *freq_factors,
                    float freq_scale, float ext_factor, float attn_factor, const float corr_dims[2]);

/* Rotate one head vector x[head_dim] in place; dims >= n_rot are left unchanged. */
void ops_rope_apply(float *x, int n_rot, enum rope_mode mode, const float *cs);

/* In-place softmax, max-subtracted, sum in double, scaled by (float)(1/sum) (ggml_soft_max). */
void ops_softmax(float *x, int n);

static inline float ops_silu(float t) { return t / (1.0f + __builtin_expf(-t)); }

/* g[i] = silu(g[i]) * u[i] */
void ops_swiglu(float *g, const float *u, int n);

/* y[i] += x[i] */
void ops_add(float *y, const float *x, int n);

/* Indices of the k largest values of p[n], descending (k <= n). */
void ops_topk(const float *p, int n, int k, int *idx);

/* MoE routing of one token as llama.cpp's CPU does it: pr[n] (router logits) becomes its softmax, sel[k]
 * the k largest, w[k] their probabilities renormalised (sum in double, floored at 2^-14) and times scale
 * when scale is neither 0 nor 1. */
void ops_moe_route(float *pr, int n, int k, float scale, int *sel, float *w);

/* IMROPE's sector rule (arch-qwen35.md §6.3.1) for text tokens, whose 4th position component p_e is 0:
 * pe[i] = 1 for each rotary pair i < n_rot/2 that takes p_e (so does not rotate), else 0. */
void ops_imrope_text_pairs(const int sections[4], int n_rot, unsigned char *pe);

/* Table of the 65536 f16 values as f32 (for the f16 KV cache). */
void ops_f16_table_init(float *tab);

/* Causal attention of n_q query heads that share one KV head, over n_kv cached positions.
 * q: [n_q][hd]; K, V: position p's row at K + p·stride (elements, f16 or f32); out: [n_q][hd].
 * scratch: n_q·n_kv floats. With an f16 cache (f16tab != NULL) q is rounded to f16 for K·q and the
 * probabilities to f16 for V·p, as llama.cpp's CPU does without flash attention. */
void ops_attn(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
              float scale, const float *f16tab, float *out, float *scratch);
/* m query vectors that share one KV head (the GQA heads of one or more consecutive tokens of one
 * sequence): query j is qs[j] over the first n_kv[j] positions, result in outs[j] ([hd] each). The
 * SIMD version reads each K/V row once for up to 8 queries. scratch: min(m, 8)·max(n_kv) floats. */
void ops_attn_multi(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd, const void *K,
                    const void *V, size_t stride, float scale, const float *f16tab, float *scratch);
void ops_attn_multi_ref(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd,
                        const void *K, const void *V, size_t stride, float scale, const float *f16tab,
                        float *scratch);
void ops_attn_multi_avx2(int m, const float *const *qs, float *const *outs, const int *n_kv, int hd,
                         const void *K, const void *V, size_t stride, float scale, const float *f16tab,
                         float *scratch);
/* The reference and the AVX2/FMA/F16C variant ops_attn dispatches to. */
void ops_attn_ref(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                  float scale, const float *f16tab, float *out, float *scratch);
void ops_attn_avx2(const float *q, int n_q, int hd, const void *K, const void *V, size_t stride, int n_kv,
                   float scale, const float *f16tab, float *out, float *scratch);
void ops_softmax_ref(float *x, int n);
void ops_softmax_avx2(float *x, int n);
void ops_swiglu_ref(float *g, const float *u, int n);
void ops_swiglu_avx2(float *g, const float *u, int n);

#endif
