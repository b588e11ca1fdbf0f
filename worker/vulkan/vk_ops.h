/* vk_ops.h — the shaders of the `vulkan` backend as calls. Each records its dispatch (a product whose
 * input is rounded first: two) into the step being recorded (vk_rt_begin … vk_rt_submit); each waits
 * for the ones before. Offsets and strides count floats (32-bit words). Every op has a CPU reference
 * in worker/num that tests/test_vk_kernels.c holds it to:
 *   vk_op_mm       quant_act_row + vec_dot (the CPU's rounding of activations, its block sums)
 *   vk_op_embed    dequant_row               vk_op_norm    ops_rms_norm
 *   vk_op_rope     ops_rope_apply            vk_op_swiglu  ops_swiglu
 *   vk_op_kv_store kv_store (f16 cells RNE)  vk_op_attn    ops_attn_multi
 *   vk_op_gather, vk_op_moe_combine: the CPU engine's MoE gather and weighted sum (copies, and
 *   ((w0·y0) + w1·y1) + … without fused multiply-adds)
 * and for the Gated DeltaNet hybrids (cpu_hybrid.c, num/gdn.c):
 *   vk_op_gdn_gates  the β / decay loop of gdn_block   vk_op_gdn_conv  gdn_conv
 *   vk_op_l2         gdn_l2_norm                       vk_op_gdn_rec   gdn_recurrent_ref
 *   vk_op_gate       y ⊙ silu(z) / y ⊙ sigmoid(z)       vk_op_copy_heads  a strided copy
 *   vk_op_shexp_add  cpu_hybrid_shexp's gated add */
#ifndef LLM170_VK_OPS_H
#define LLM170_VK_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "../../common/err.h"
#include "../model/model.h"
#include "vk_rt.h"

#define VK_NO_VEC 0xffffffffu /* a vector offset meaning "none" (the shaders' ~0) */
#define VK_MM_NT 8            /* tokens one mm workgroup takes (mm.comp's NT) */
#define VK_MAX_HD 256         /* largest head size attn.comp holds (its MAX_HD) */

struct vk_ops {
    struct vk_rt *rt;
    int p_norm, p_rope, p_swiglu, p_kv, p_attn, p_act, p_gather, p_combine; /* pipelines */
    int p_gdn_gates, p_gdn_conv, p_l2, p_gdn_rec, p_gate, p_copy_heads, p_shexp_add; /* hybrids' pipelines */
    int p_silu_scale, p_hc_mean, p_hc_combine, p_ple_gate, p_ple_conv, p_add2, p_attn_sel; /* qwen4exp's */
    struct vk_buf xr;     /* [n_batch][widest input] + Q8_1 block pairs: a product's rounded input (act.comp) */
};

/* One weight matrix on the device. */
struct vk_mat {
    struct vk_buf b;    /* the tensor's bytes, then 128 zero bytes the last group of a float row may read */
    int pipe;           /* mm_<type>, or embed_<type> for an embedding table */
    uint32_t row_bytes; /* bytes of one row of k elements */
    int k, rows;        /* ne0 (input width), ne1·ne2 (output rows) */
    uint32_t act;       /* how act.comp rounds the input first (the type's vec_dot type); 0: not at all */
    bool shared;        /* the buffer belongs to another vk_mat (a tied output) */
};

/* Rows in a buffer: row t at off + t·stride. */
struct vk_view {
    const struct vk_buf *b;
    uint32_t off, stride;
};

/* The pipelines, and the scratch that products of up to n_batch rows of up to `widest` inputs need. */
int vk_ops_init(struct vk_ops *o, struct vk_rt *rt, int n_batch, int widest, struct err *e);
void vk_ops_free(struct vk_ops *o);

/* w onto the device, for products (embed = false) or lookups (embed = true). ERR_UNSUPPORTED naming
 * the tensor for a type the shaders do not decode or a tensor past the device's largest buffer. An
 * absent tensor (w->data NULL) leaves *d zeroed. *bytes (may be NULL) += the bytes uploaded. */
int vk_mat_upload(struct vk_ops *o, struct vk_mat *d, const struct wt *w, bool embed, uint64_t *bytes,
                  struct err *e);
/* d reads src's bytes as w (the output tied to the embedding table) */
int vk_mat_alias(struct vk_ops *o, struct vk_mat *d, const struct vk_mat *src, const struct wt *w, struct err *e);
void vk_mat_free(struct vk_ops *o, struct vk_mat *d);
/* a buffer of `bytes` a shader may bind whole; ERR_UNSUPPORTED past the device's largest, naming `what` */
int vk_ops_buf(struct vk_ops *o, struct vk_buf *b, size_t bytes, bool host, const char *what, struct err *e);

/* y[t][r] = w[r]·x[t] + bias[bias_off + r] (add: y += that) for n tokens; bias_off VK_NO_VEC: none */
int vk_op_mm(struct vk_ops *o, const struct vk_mat *w, struct vk_view x, struct vk_view y, int n,
             const struct vk_buf *bias, uint32_t bias_off, bool add, struct err *e);
/* as vk_op_mm over rows [row0, row0 + rows) of w only (one expert of a stacked [k, rows, n_expert] tensor) */
int vk_op_mm_rows(struct vk_ops *o, const struct vk_mat *w, int row0, int rows, struct vk_view x, struct vk_view y,
                  int n, const struct vk_buf *bias, uint32_t bias_off, bool add, struct err *e);
/* dst row i = src row idx[idx_off + i], rows of `width` floats, for `rows` rows */
int vk_op_gather(struct vk_ops *o, struct vk_view src, struct vk_view dst, const struct vk_buf *idx, uint32_t idx_off,
                 int width, int rows, struct err *e);
/* x[t] += Σ_k w[t·k_used + k] · ey row slot[t·k_used + k] (rows of `width`) for n tokens */
int vk_op_moe_combine(struct vk_ops *o, const struct vk_buf *ey, const struct vk_buf *slot, const struct vk_buf *w,
                      const struct vk_buf *x, int width, int k_used, int n, struct err *e);
/* x[t] = row tok[t].token of w (dequantized); tok: [n][4] int32 token, pos, seq, 0 */
int vk_op_embed(struct vk_ops *o, const struct vk_mat *w, const struct vk_buf *tok, const struct vk_buf *x, int n,
                struct err *e);
/* n tokens of hpt rows of `width` (row h of token t at off + t·stride + h·width) RMS-normed from x into y,
 * times wt[w_off …] (VK_NO_VEC: no weight) */
int vk_op_norm(struct vk_ops *o, struct vk_view x, struct vk_view y, int width, int hpt, int n,
               const struct vk_buf *wt, uint32_t w_off, float eps, struct err *e);
/* n_head heads of hd (row t's at off + t·stride) rotated in place by cs[t][n_rot] (ops_rope_cache's rows) */
int vk_op_rope(struct vk_ops *o, struct vk_view x, int hd, int n_rot, bool neox, int n_head, int n,
               const struct vk_buf *cs, struct err *e);
/* g = silu(g)·u over `total` elements */
int vk_op_swiglu(struct vk_ops *o, const struct vk_buf *g, const struct vk_buf *u, uint32_t total, struct err *e);
/* row t's K (src at k_off + t·stride) and V (v_off + t·stride), kv_dim each, into the caches
 * [n_seq][n_ctx][kv_dim] at the (seq, pos) of tok[t]; f16: cells are f16 pairs, else f32 */
int vk_op_kv_store(struct vk_ops *o, const struct vk_buf *src, uint32_t k_off, uint32_t v_off, uint32_t stride,
                   const struct vk_buf *kc, const struct vk_buf *vc, const struct vk_buf *tok, int kv_dim, int n_ctx,
                   bool f16, int n, struct err *e);
/* causal attention of n tokens' n_head query heads (q) over their sequence's first pos + 1 cells, into out */
int vk_op_attn(struct vk_ops *o, struct vk_view q, struct vk_view out, const struct vk_buf *kc, const struct vk_buf *vc,
               const struct vk_buf *tok, int n_head, int n_head_kv, int hd, int n_ctx, bool f16, float scale, int n,
               struct err *e);

/* ---- the Gated DeltaNet hybrids (qwen35, qwen35moe; shared spec arch-qwen35.md §6) ----
 * Sequence groups: the batch rows of one sequence, in batch order. `grp` is an int32 buffer holding
 * the row list at rows_off (rows[start … start + len) of group i) and per group the four ints
 * {seq, start, len, 0} at grp_off + 4·i. A sequence's state lives at state_off + seq·state_stride. */

/* In place for n tokens of n_head heads: beta[t][h] = sigmoid(beta[t][h]);
 * g[t][h] = softplus(g[t][h] + vec[dt_off + h]) · vec[a_off + h] (softplus(x) = x past 20, as gdn_softplus) */
int vk_op_gdn_gates(struct vk_ops *o, struct vk_view beta, struct vk_view g, const struct vk_buf *vec, uint32_t dt_off,
                    uint32_t a_off, int n_head, int n, struct err *e);
/* Causal depthwise conv + SiLU (gdn_conv) of every group's rows, channels [0, conv_dim): input row r at
 * in.off + r·in.stride, output at out.off + r·out.stride; taps vec[w_off + c·d_conv + k] oldest first;
 * each sequence's conv state [conv_dim][d_conv − 1] (oldest first) read and rolled forward. */
int vk_op_gdn_conv(struct vk_ops *o, struct vk_view in, struct vk_view out, const struct vk_buf *vec, uint32_t w_off,
                   const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                   uint32_t rows_off, uint32_t grp_off, int n_grp, int conv_dim, int d_conv, struct err *e);
/* x ← x / max(‖x‖₂, eps) for hpt heads of `width` per token (head h of token t at off + t·stride +
 * h·width), n tokens (gdn_l2_norm) */
int vk_op_l2(struct vk_ops *o, struct vk_view x, int width, int hpt, int n, float eps, struct err *e);
/* The delta rule token by token (gdn_recurrent_ref) for every (group, value head vh): row r of y holds
 * [q: H_k·d][k: H_k·d][v: H_v·d] at y.off + r·y.stride, value head vh reads key head vh % H_k; β and the
 * log decay at beta/g row r, column vh; output head vh at out.off + r·out.stride + vh·d; the head's
 * state [d][d] (value b's row at b·d) at state_off + seq·state_stride + vh·d·d; scale 1/sqrt(d). */
int vk_op_gdn_rec(struct vk_ops *o, struct vk_view y, struct vk_view beta, struct vk_view g, struct vk_view out,
                  const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                  uint32_t rows_off, uint32_t grp_off, int n_grp, int n_k_heads, int n_v_heads, int d,
                  struct err *e);
/* y ← y ⊙ act(z) for hpt heads of `width` per token: y head h at y.off + t·y.stride + h·y_hs, z head h at
 * z.off + t·z.stride + h·z_hs; act = sigmoid when `sigmoid`, else silu (x / (1 + e^−x)) */
int vk_op_gate(struct vk_ops *o, struct vk_view y, uint32_t y_hs, struct vk_view z, uint32_t z_hs, int width, int hpt,
               int n, bool sigmoid, struct err *e);
/* dst head h of token t (dst.off + t·dst.stride + h·dst_hs) = src head h (src.off + t·src.stride + h·src_hs),
 * `width` floats, hpt heads, n tokens */
int vk_op_copy_heads(struct vk_ops *o, struct vk_view src, uint32_t src_hs, struct vk_view dst, uint32_t dst_hs,
                     int width, int hpt, int n, struct err *e);
/* a[t] += s[t] · sigmoid(Σ_i vec[w_off + i]·h[t][i]) over rows of `width` for n tokens: the shared
 * expert's gated add (the dot's products summed in more than f32 precision, as the CPU's double) */
int vk_op_shexp_add(struct vk_ops *o, struct vk_view a, struct vk_view h, struct vk_view s, const struct vk_buf *vec,
                    uint32_t w_off, int width, int n, struct err *e);

/* ---- qwen4exp (shared spec arch-qwen4exp.md §3; CPU references worker/cpu/cpu_hc.c, cpu_hybrid.c) ----
 * A token's wide residual is hc streams of `width` floats, stream s at + s·width of its row. */

/* x ← silu(x · scale) over n rows of `width` (the HC gate MLP's hidden layer: cpu_hc_mix) */
int vk_op_silu_scale(struct vk_ops *o, struct vk_view x, int width, int n, float scale, struct err *e);
/* h[t][i] = (Σ_s xn[t][s·width + i] · sigmoid(g[t][s·width + i])) · (1/hc), the products rounded each and
 * summed in stream order (cpu_hc.c mean_task) */
int vk_op_hc_mean(struct vk_ops *o, struct vk_view xn, struct vk_view g, struct vk_view h, int width, int hc, int n,
                  struct err *e);
/* x[t][s·width + i] += a[t][i] · (2·sigmoid(j[t][s] · (1/hc))) (cpu_hc_combine) */
int vk_op_hc_combine(struct vk_ops *o, struct vk_view x, struct vk_view a, struct vk_view j, int width, int hc, int n,
                     struct err *e);
/* PLE gate (cpu_hybrid.c ple_gate_task, after both grouped norms): per stream s of token t,
 * σ = (Σ_i key[s·width + i]·query[s·width + i]) · (1/sqrt(width)) (the products summed in more than f32
 * precision, as the CPU's double), gate = sigmoid(sgn(σ)·sqrt(max(|σ|, 1e-6))) (sgn(0) = 0), and
 * g[t][s·width + i] = v[t][i] · gate */
int vk_op_ple_gate(struct vk_ops *o, struct vk_view key, struct vk_view query, struct vk_view v, struct vk_view g,
                   int width, int hc, int n, struct err *e);
/* PLE's dilated causal depthwise conv + SiLU (cpu_hybrid.c ple_conv_task) over every group's rows (groups as
 * for vk_op_gdn_conv), channels [0, channels): out_t[c] = silu(Σ_k w[c·taps + k] · in_{t − (taps−1−k)·dil}[c])
 * summed k = 0 first, the taps vec[w_off + c·taps + k]; inputs before the group's first row come from the
 * sequence's history [(taps−1)·dil][channels] (oldest first) at state_off + seq·state_stride, which is then
 * moved on to the last (taps−1)·dil inputs */
int vk_op_ple_conv(struct vk_ops *o, struct vk_view in, struct vk_view out, const struct vk_buf *vec, uint32_t w_off,
                   const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                   uint32_t rows_off, uint32_t grp_off, int n_grp, int channels, int taps, int dil, struct err *e);
/* x ← x + (g + c) over n rows of `width` */
int vk_op_add2(struct vk_ops *o, struct vk_view x, struct vk_view g, struct vk_view c, int width, int n,
               struct err *e);
/* vk_op_attn over the cells a list names: token t attends to cells sel[sel_off + t·sel_stride + i],
 * i < nsel[nsel_off + t] (ascending), or, when nsel is negative, to its first pos + 1 cells as vk_op_attn */
int vk_op_attn_sel(struct vk_ops *o, struct vk_view q, struct vk_view out, const struct vk_buf *kc,
                   const struct vk_buf *vc, const struct vk_buf *tok, const struct vk_buf *sel, uint32_t sel_off,
                   uint32_t sel_stride, uint32_t nsel_off, int n_head, int n_head_kv, int hd, int n_ctx, bool f16,
                   float scale, int n, struct err *e);

#endif
