/* vk_ops.c — the shader calls of vk_ops.h: push constants laid out as each shader declares them,
 * grids within the limits every device has (65535 workgroups a dimension). */
#include "vk_ops.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define VK_W_TAIL 128 /* bytes past a weight's end the last group of a float row may read (mm.comp) */

int vk_ops_buf(struct vk_ops *o, struct vk_buf *b, size_t bytes, bool host, const char *what, struct err *e)
{
    if (bytes == 0)
        bytes = 4;
    if (bytes > vk_rt_max_range(o->rt))
        return err_set(e, ERR_UNSUPPORTED, "vulkan: %s needs a %.1f MiB buffer, past the device's largest (%.1f MiB)",
                       what, (double)bytes / (1 << 20), (double)vk_rt_max_range(o->rt) / (1 << 20));
    int rc = vk_rt_buf(o->rt, b, bytes, host, e);
    if (rc)
        err_prefix(e, "%s: ", what);
    return rc;
}

int vk_ops_init(struct vk_ops *o, struct vk_rt *rt, int n_batch, int widest, struct err *e)
{
    memset(o, 0, sizeof *o);
    o->rt = rt;
    const struct {
        int *pipe;
        const char *name;
    } ps[] = { { &o->p_norm, "rms_norm" }, { &o->p_rope, "rope" }, { &o->p_swiglu, "swiglu" },
               { &o->p_kv, "kv_store" },   { &o->p_attn, "attn" }, { &o->p_act, "act" },
               { &o->p_gather, "gather" }, { &o->p_combine, "moe_combine" },
               { &o->p_gdn_gates, "gdn_gates" }, { &o->p_gdn_conv, "gdn_conv" }, { &o->p_l2, "l2_norm" },
               { &o->p_gdn_rec, "gdn_rec" }, { &o->p_gate, "gate" }, { &o->p_copy_heads, "copy_heads" },
               { &o->p_shexp_add, "shexp_add" }, { &o->p_silu_scale, "silu_scale" }, { &o->p_hc_mean, "hc_mean" },
               { &o->p_hc_combine, "hc_combine" }, { &o->p_ple_gate, "ple_gate" }, { &o->p_ple_conv, "ple_conv" },
               { &o->p_add2, "add2" }, { &o->p_attn_sel, "attn_sel" } };
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++)
        if ((*ps[i].pipe = vk_rt_pipe(rt, ps[i].name, e)) < 0)
            return e->code ? e->code : ERR_INTERNAL;
    /* the rounded rows, then Q8_1's (d, s) pair of every 32-element block */
    const size_t w = (size_t)(widest > 0 ? widest : 1);
    return vk_ops_buf(o, &o->xr, (size_t)n_batch * (w + w / 16 + 2) * 4, false, "step buffers", e);
}

void vk_ops_free(struct vk_ops *o)
{
    if (o->rt)
        vk_rt_buf_free(o->rt, &o->xr);
}

/* act.comp's mode for a weight type: the rounding its vec_dot type puts on the activations (every type
 * with Q8_0 / Q8_1 activations has mm.comp's integer form, which mode 1 feeds) */
static uint32_t act_mode(enum qtype t)
{
    const struct qtype_info *qi = qtype_get(t);
    switch (qi ? qi->vec_dot : QT_F32) {
    case QT_Q8_0:
    case QT_Q8_1: return 1;
    case QT_Q8_K: return 2;
    case QT_F16: return 3;
    case QT_BF16: return 4;
    default: return 0;
    }
}

/* the pipeline `kind`_<type> for w, or ERR_UNSUPPORTED naming the tensor */
static int mat_pipe(struct vk_ops *o, struct vk_mat *d, const struct wt *w, bool embed, struct err *e)
{
    const struct qtype_info *qi = qtype_get(w->type);
    char name[48];
    snprintf(name, sizeof name, "%s_%s", embed ? "embed" : "mm", qi ? qi->name : "?");
    struct err pe = { 0 };
    if ((d->pipe = vk_rt_pipe(o->rt, name, &pe)) < 0)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: tensor %s has type %s, which the shaders do not decode", w->name,
                       qi ? qi->name : "unknown");
    if (w->row_bytes > UINT32_MAX / 2 || w->ne[0] > INT32_MAX || w->ne[1] * w->ne[2] > INT32_MAX)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: tensor %s is too large for 32-bit offsets", w->name);
    d->row_bytes = (uint32_t)w->row_bytes;
    d->k = (int)w->ne[0];
    d->rows = (int)(w->ne[1] * w->ne[2]);
    d->act = act_mode(w->type);
    return 0;
}

int vk_mat_upload(struct vk_ops *o, struct vk_mat *d, const struct wt *w, bool embed, uint64_t *bytes,
                  struct err *e)
{
    memset(d, 0, sizeof *d);
    if (!w->data)
        return 0;
    int rc = mat_pipe(o, d, w, embed, e);
    if (rc)
        return rc;
    const size_t n = w->row_bytes * (size_t)d->rows;
    rc = vk_ops_buf(o, &d->b, n + VK_W_TAIL, false, w->name, e);
    if (!rc)
        rc = vk_rt_upload(o->rt, &d->b, 0, w->data, n, e);
    if (bytes)
        *bytes += n;
    return rc;
}

int vk_mat_alias(struct vk_ops *o, struct vk_mat *d, const struct vk_mat *src, const struct wt *w, struct err *e)
{
    memset(d, 0, sizeof *d);
    d->b = src->b;
    d->shared = true;
    return mat_pipe(o, d, w, false, e);
}

void vk_mat_free(struct vk_ops *o, struct vk_mat *d)
{
    if (!d->shared)
        vk_rt_buf_free(o->rt, &d->b);
    memset(d, 0, sizeof *d);
}

/* a grid of `rows` workgroups as x + 65535·y */
#define GRID_X(rows) ((rows) < 65535u ? (rows) : 65535u)
#define GRID_Y(rows) (((rows) + 65534u) / 65535u)

int vk_op_mm(struct vk_ops *o, const struct vk_mat *w, struct vk_view x, struct vk_view y, int n,
             const struct vk_buf *bias, uint32_t bias_off, bool add, struct err *e)
{
    return vk_op_mm_rows(o, w, 0, w->rows, x, y, n, bias, bias_off, add, e);
}

int vk_op_mm_rows(struct vk_ops *o, const struct vk_mat *w, int row0, int n_rows, struct vk_view x, struct vk_view y,
                  int n, const struct vk_buf *bias, uint32_t bias_off, bool add, struct err *e)
{
    if (row0 < 0 || n_rows < 0 || row0 > w->rows - n_rows)
        return err_set(e, ERR_INTERNAL, "vulkan: rows [%d, %d) of a %d-row matrix", row0, row0 + n_rows, w->rows);
    const uint32_t k = (uint32_t)w->k, s_off = (uint32_t)n * k; /* mode 1's block (d, s) pairs: after the rows */
    if (w->act) { /* the input rounded as the CPU rounds it for this type, into xr */
        if ((size_t)s_off + 2u * (s_off / 32u) > o->xr.size / 4)
            return err_set(e, ERR_INTERNAL, "vulkan: a product of %d rows of %u past the rounding scratch", n, k);
        const uint32_t pa[5] = { k, x.off, x.stride, w->act, s_off };
        const struct vk_buf *ba[2] = { x.b, &o->xr };
        int rc = vk_rt_dispatch(o->rt, o->p_act, ba, pa, sizeof pa, (k + 255u) / 256u, (uint32_t)n, 1, e);
        if (rc)
            return rc;
        x = (struct vk_view){ &o->xr, 0, k };
    }
    const uint32_t pc[12] = { (uint32_t)row0 * w->row_bytes, w->row_bytes, k, (uint32_t)n_rows, (uint32_t)n, x.off,
                              x.stride, y.off, y.stride, add ? 1u : 0u, bias_off, s_off };
    const struct vk_buf *bs[4] = { &w->b, x.b, y.b, bias ? bias : y.b };
    /* rows are x + 32768·z (mm.comp) */
    const uint32_t rows = (uint32_t)n_rows, gx = rows < 32768u ? rows : 32768u, gz = (rows + 32767u) / 32768u;
    return vk_rt_dispatch(o->rt, w->pipe, bs, pc, sizeof pc, gx, ((uint32_t)n + VK_MM_NT - 1) / VK_MM_NT, gz, e);
}

int vk_op_embed(struct vk_ops *o, const struct vk_mat *w, const struct vk_buf *tok, const struct vk_buf *x, int n,
                struct err *e)
{
    const uint32_t pc[3] = { 0, w->row_bytes, (uint32_t)w->k };
    const struct vk_buf *bs[3] = { &w->b, tok, x };
    return vk_rt_dispatch(o->rt, w->pipe, bs, pc, sizeof pc, (uint32_t)n, 1, 1, e);
}

int vk_op_norm(struct vk_ops *o, struct vk_view x, struct vk_view y, int width, int hpt, int n,
               const struct vk_buf *wt, uint32_t w_off, float eps, struct err *e)
{
    const uint32_t rows = (uint32_t)n * (uint32_t)hpt;
    const struct {
        uint32_t n, hpt, x_off, x_stride, y_off, y_stride, w_off;
        float eps;
        uint32_t rows;
    } pc = { (uint32_t)width, (uint32_t)hpt, x.off, x.stride, y.off, y.stride, w_off, eps, rows };
    const struct vk_buf *bs[3] = { x.b, wt ? wt : x.b, y.b };
    return vk_rt_dispatch(o->rt, o->p_norm, bs, &pc, sizeof pc, GRID_X(rows), GRID_Y(rows), 1, e);
}

int vk_op_rope(struct vk_ops *o, struct vk_view x, int hd, int n_rot, bool neox, int n_head, int n,
               const struct vk_buf *cs, struct err *e)
{
    const uint32_t pc[5] = { x.off, x.stride, (uint32_t)hd, (uint32_t)n_rot, neox ? 1u : 0u };
    const struct vk_buf *bs[2] = { x.b, cs };
    return vk_rt_dispatch(o->rt, o->p_rope, bs, pc, sizeof pc, (uint32_t)n, (uint32_t)n_head, 1, e);
}

int vk_op_swiglu(struct vk_ops *o, const struct vk_buf *g, const struct vk_buf *u, uint32_t total, struct err *e)
{
    const uint32_t groups = (total + 63u) / 64u; /* the shader's index is x + 65535·64·y */
    const struct vk_buf *bs[2] = { g, u };
    return vk_rt_dispatch(o->rt, o->p_swiglu, bs, &total, sizeof total, GRID_X(groups), GRID_Y(groups), 1, e);
}

int vk_op_kv_store(struct vk_ops *o, const struct vk_buf *src, uint32_t k_off, uint32_t v_off, uint32_t stride,
                   const struct vk_buf *kc, const struct vk_buf *vc, const struct vk_buf *tok, int kv_dim, int n_ctx,
                   bool f16, int n, struct err *e)
{
    const uint32_t pc[6] = { k_off, v_off, stride, (uint32_t)kv_dim, (uint32_t)n_ctx, f16 ? 1u : 0u };
    const struct vk_buf *bs[4] = { src, kc, vc, tok };
    return vk_rt_dispatch(o->rt, o->p_kv, bs, pc, sizeof pc, (uint32_t)n, 1, 1, e);
}

int vk_op_attn(struct vk_ops *o, struct vk_view q, struct vk_view out, const struct vk_buf *kc, const struct vk_buf *vc,
               const struct vk_buf *tok, int n_head, int n_head_kv, int hd, int n_ctx, bool f16, float scale, int n,
               struct err *e)
{
    if (hd > VK_MAX_HD)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: head size %d past the attention shader's %d", hd, VK_MAX_HD);
    const struct {
        uint32_t q_off, q_stride, o_off, o_stride, n_head, n_head_kv, hd, kv_dim, n_ctx, f16;
        float scale;
    } pc = { q.off, q.stride, out.off, out.stride, (uint32_t)n_head, (uint32_t)n_head_kv, (uint32_t)hd,
             (uint32_t)(n_head_kv * hd), (uint32_t)n_ctx, f16 ? 1u : 0u, scale };
    const struct vk_buf *bs[5] = { q.b, kc, vc, tok, out.b };
    return vk_rt_dispatch(o->rt, o->p_attn, bs, &pc, sizeof pc, (uint32_t)n, (uint32_t)n_head, 1, e);
}

int vk_op_gather(struct vk_ops *o, struct vk_view src, struct vk_view dst, const struct vk_buf *idx, uint32_t idx_off,
                 int width, int rows, struct err *e)
{
    const uint32_t r = (uint32_t)rows, pc[7] = { (uint32_t)width, src.off, src.stride, dst.off, dst.stride, idx_off, r };
    const struct vk_buf *bs[3] = { src.b, idx, dst.b };
    return vk_rt_dispatch(o->rt, o->p_gather, bs, pc, sizeof pc, GRID_X(r), GRID_Y(r), 1, e);
}

int vk_op_moe_combine(struct vk_ops *o, const struct vk_buf *ey, const struct vk_buf *slot, const struct vk_buf *w,
                      const struct vk_buf *x, int width, int k_used, int n, struct err *e)
{
    const uint32_t pc[2] = { (uint32_t)width, (uint32_t)k_used };
    const struct vk_buf *bs[4] = { ey, slot, w, x };
    return vk_rt_dispatch(o->rt, o->p_combine, bs, pc, sizeof pc, (uint32_t)n, 1, 1, e);
}

/* ---- the Gated DeltaNet hybrids ---- */

#define VK_GDN_MAX_D 128 /* the largest head gdn_rec.comp stages (its shared q and k) */

/* a grid of `total` elements, 64 an invocation group, as x + 65535·y groups */
static int dispatch_elems(struct vk_ops *o, int pipe, const struct vk_buf *const *bs, const void *pc, size_t pcn,
                          uint64_t total, struct err *e)
{
    if (total > UINT32_MAX)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: %llu elements past one dispatch's 32-bit index",
                       (unsigned long long)total);
    const uint32_t groups = (uint32_t)((total + 63u) / 64u);
    return vk_rt_dispatch(o->rt, pipe, bs, pc, pcn, GRID_X(groups), GRID_Y(groups), 1, e);
}

int vk_op_gdn_gates(struct vk_ops *o, struct vk_view beta, struct vk_view g, const struct vk_buf *vec, uint32_t dt_off,
                    uint32_t a_off, int n_head, int n, struct err *e)
{
    const uint64_t total = (uint64_t)n * (uint64_t)n_head;
    const uint32_t pc[8] = { beta.off, beta.stride, g.off, g.stride, dt_off, a_off, (uint32_t)n_head, (uint32_t)total };
    const struct vk_buf *bs[3] = { beta.b, g.b, vec };
    return dispatch_elems(o, o->p_gdn_gates, bs, pc, sizeof pc, total, e);
}

int vk_op_gdn_conv(struct vk_ops *o, struct vk_view in, struct vk_view out, const struct vk_buf *vec, uint32_t w_off,
                   const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                   uint32_t rows_off, uint32_t grp_off, int n_grp, int conv_dim, int d_conv, struct err *e)
{
    if (d_conv < 1)
        return err_set(e, ERR_INTERNAL, "vulkan: a conv of %d taps", d_conv);
    const uint32_t pc[11] = { in.off, in.stride, out.off, out.stride, w_off, state_off, state_stride, rows_off,
                              grp_off, (uint32_t)conv_dim, (uint32_t)d_conv };
    const struct vk_buf *bs[5] = { in.b, out.b, vec, state, grp };
    const uint32_t gx = ((uint32_t)conv_dim + 63u) / 64u; /* 64 channels a workgroup, a group a row of the grid */
    return vk_rt_dispatch(o->rt, o->p_gdn_conv, bs, pc, sizeof pc, gx, (uint32_t)n_grp, 1, e);
}

int vk_op_l2(struct vk_ops *o, struct vk_view x, int width, int hpt, int n, float eps, struct err *e)
{
    const uint32_t rows = (uint32_t)n * (uint32_t)hpt;
    const struct {
        uint32_t n, hpt, x_off, x_stride;
        float eps;
        uint32_t rows;
    } pc = { (uint32_t)width, (uint32_t)hpt, x.off, x.stride, eps, rows };
    const struct vk_buf *bs[1] = { x.b };
    return vk_rt_dispatch(o->rt, o->p_l2, bs, &pc, sizeof pc, GRID_X(rows), GRID_Y(rows), 1, e);
}

int vk_op_gdn_rec(struct vk_ops *o, struct vk_view y, struct vk_view beta, struct vk_view g, struct vk_view out,
                  const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                  uint32_t rows_off, uint32_t grp_off, int n_grp, int n_k_heads, int n_v_heads, int d,
                  struct err *e)
{
    if (d < 1 || d > VK_GDN_MAX_D)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: a Gated DeltaNet head of %d, past the delta rule shader's %d", d,
                       VK_GDN_MAX_D);
    if (n_k_heads < 1)
        return err_set(e, ERR_INTERNAL, "vulkan: a delta rule of %d key heads", n_k_heads);
    const struct {
        uint32_t y_off, y_stride, b_off, b_stride, g_off, g_stride, o_off, o_stride;
        uint32_t state_off, state_stride, rows_off, grp_off, n_k_heads, d;
        float scale;
    } pc = { y.off, y.stride, beta.off, beta.stride, g.off, g.stride, out.off, out.stride, state_off, state_stride,
             rows_off, grp_off, (uint32_t)n_k_heads, (uint32_t)d,
             1.0f / sqrtf((float)d) }; /* the CPU's scale (delta_task), bit for bit */
    const struct vk_buf *bs[6] = { y.b, beta.b, g.b, out.b, state, grp };
    return vk_rt_dispatch(o->rt, o->p_gdn_rec, bs, &pc, sizeof pc, (uint32_t)n_v_heads, (uint32_t)n_grp, 1, e);
}

int vk_op_gate(struct vk_ops *o, struct vk_view y, uint32_t y_hs, struct vk_view z, uint32_t z_hs, int width, int hpt,
               int n, bool sigmoid, struct err *e)
{
    const uint64_t total = (uint64_t)n * (uint64_t)hpt * (uint64_t)width;
    const uint32_t pc[10] = { y.off, y.stride, y_hs, z.off, z.stride, z_hs, (uint32_t)width, (uint32_t)hpt,
                              (uint32_t)total, sigmoid ? 1u : 0u };
    const struct vk_buf *bs[2] = { y.b, z.b };
    return dispatch_elems(o, o->p_gate, bs, pc, sizeof pc, total, e);
}

int vk_op_copy_heads(struct vk_ops *o, struct vk_view src, uint32_t src_hs, struct vk_view dst, uint32_t dst_hs,
                     int width, int hpt, int n, struct err *e)
{
    const uint64_t total = (uint64_t)n * (uint64_t)hpt * (uint64_t)width;
    const uint32_t pc[9] = { src.off, src.stride, src_hs, dst.off, dst.stride, dst_hs, (uint32_t)width, (uint32_t)hpt,
                             (uint32_t)total };
    const struct vk_buf *bs[2] = { src.b, dst.b };
    return dispatch_elems(o, o->p_copy_heads, bs, pc, sizeof pc, total, e);
}

int vk_op_shexp_add(struct vk_ops *o, struct vk_view a, struct vk_view h, struct vk_view s, const struct vk_buf *vec,
                    uint32_t w_off, int width, int n, struct err *e)
{
    const uint32_t rows = (uint32_t)n;
    const uint32_t pc[9] = { a.off, a.stride, h.off, h.stride, s.off, s.stride, w_off, (uint32_t)width, rows };
    const struct vk_buf *bs[4] = { a.b, h.b, s.b, vec };
    return vk_rt_dispatch(o->rt, o->p_shexp_add, bs, pc, sizeof pc, GRID_X(rows), GRID_Y(rows), 1, e);
}

/* ---- qwen4exp ---- */

int vk_op_silu_scale(struct vk_ops *o, struct vk_view x, int width, int n, float scale, struct err *e)
{
    const uint64_t total = (uint64_t)n * (uint64_t)width;
    const struct {
        uint32_t x_off, x_stride, width, total;
        float scale;
    } pc = { x.off, x.stride, (uint32_t)width, (uint32_t)total, scale };
    const struct vk_buf *bs[1] = { x.b };
    return dispatch_elems(o, o->p_silu_scale, bs, &pc, sizeof pc, total, e);
}

int vk_op_hc_mean(struct vk_ops *o, struct vk_view xn, struct vk_view g, struct vk_view h, int width, int hc, int n,
                  struct err *e)
{
    if (hc < 1)
        return err_set(e, ERR_INTERNAL, "vulkan: a hyper-connection mix of %d streams", hc);
    const uint64_t total = (uint64_t)n * (uint64_t)width;
    const struct {
        uint32_t xn_off, xn_stride, g_off, g_stride, h_off, h_stride, width, hc, total;
        float inv;
    } pc = { xn.off, xn.stride, g.off, g.stride, h.off, h.stride, (uint32_t)width, (uint32_t)hc, (uint32_t)total,
             1.0f / (float)hc }; /* the CPU's factor (mean_task), bit for bit */
    const struct vk_buf *bs[3] = { xn.b, g.b, h.b };
    return dispatch_elems(o, o->p_hc_mean, bs, &pc, sizeof pc, total, e);
}

int vk_op_hc_combine(struct vk_ops *o, struct vk_view x, struct vk_view a, struct vk_view j, int width, int hc, int n,
                     struct err *e)
{
    if (hc < 1)
        return err_set(e, ERR_INTERNAL, "vulkan: a hyper-connection write-back of %d streams", hc);
    const uint64_t total = (uint64_t)n * (uint64_t)hc * (uint64_t)width;
    const struct {
        uint32_t x_off, x_stride, a_off, a_stride, j_off, j_stride, width, hc, total;
        float inv;
    } pc = { x.off, x.stride, a.off, a.stride, j.off, j.stride, (uint32_t)width, (uint32_t)hc, (uint32_t)total,
             1.0f / (float)hc }; /* combine_task's factor */
    const struct vk_buf *bs[3] = { x.b, a.b, j.b };
    return dispatch_elems(o, o->p_hc_combine, bs, &pc, sizeof pc, total, e);
}

int vk_op_ple_gate(struct vk_ops *o, struct vk_view key, struct vk_view query, struct vk_view v, struct vk_view g,
                   int width, int hc, int n, struct err *e)
{
    const uint64_t rows = (uint64_t)n * (uint64_t)hc;
    if (rows > 65535u * 65535u)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: %llu PLE gate rows past one dispatch", (unsigned long long)rows);
    const uint32_t r = (uint32_t)rows;
    const struct {
        uint32_t k_off, k_stride, q_off, q_stride, v_off, v_stride, g_off, g_stride, width, hc, rows;
        float inv;
    } pc = { key.off, key.stride, query.off, query.stride, v.off, v.stride, g.off, g.stride, (uint32_t)width,
             (uint32_t)hc, r, 1.0f / sqrtf((float)width) }; /* ple_gate_task's factor, bit for bit */
    const struct vk_buf *bs[4] = { key.b, query.b, v.b, g.b };
    return vk_rt_dispatch(o->rt, o->p_ple_gate, bs, &pc, sizeof pc, GRID_X(r), GRID_Y(r), 1, e);
}

int vk_op_ple_conv(struct vk_ops *o, struct vk_view in, struct vk_view out, const struct vk_buf *vec, uint32_t w_off,
                   const struct vk_buf *state, uint32_t state_off, uint32_t state_stride, const struct vk_buf *grp,
                   uint32_t rows_off, uint32_t grp_off, int n_grp, int channels, int taps, int dil, struct err *e)
{
    if (taps < 1 || dil < 1)
        return err_set(e, ERR_INTERNAL, "vulkan: a PLE conv of %d taps, dilation %d", taps, dil);
    const uint32_t pc[12] = { in.off, in.stride, out.off, out.stride, w_off, state_off, state_stride, rows_off,
                              grp_off, (uint32_t)channels, (uint32_t)taps, (uint32_t)dil };
    const struct vk_buf *bs[5] = { in.b, out.b, vec, state, grp };
    const uint32_t gx = ((uint32_t)channels + 63u) / 64u; /* 64 channels a workgroup, a group a row of the grid */
    return vk_rt_dispatch(o->rt, o->p_ple_conv, bs, pc, sizeof pc, gx, (uint32_t)n_grp, 1, e);
}

int vk_op_add2(struct vk_ops *o, struct vk_view x, struct vk_view g, struct vk_view c, int width, int n,
               struct err *e)
{
    const uint64_t total = (uint64_t)n * (uint64_t)width;
    const uint32_t pc[8] = { x.off, x.stride, g.off, g.stride, c.off, c.stride, (uint32_t)width, (uint32_t)total };
    const struct vk_buf *bs[3] = { x.b, g.b, c.b };
    return dispatch_elems(o, o->p_add2, bs, pc, sizeof pc, total, e);
}

int vk_op_attn_sel(struct vk_ops *o, struct vk_view q, struct vk_view out, const struct vk_buf *kc,
                   const struct vk_buf *vc, const struct vk_buf *tok, const struct vk_buf *sel, uint32_t sel_off,
                   uint32_t sel_stride, uint32_t nsel_off, int n_head, int n_head_kv, int hd, int n_ctx, bool f16,
                   float scale, int n, struct err *e)
{
    if (hd > VK_MAX_HD)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: head size %d past the attention shader's %d", hd, VK_MAX_HD);
    const struct { /* vk_op_attn's, then the selection's */
        uint32_t q_off, q_stride, o_off, o_stride, n_head, n_head_kv, hd, kv_dim, n_ctx, f16;
        float scale;
        uint32_t sel_off, sel_stride, nsel_off;
    } pc = { q.off, q.stride, out.off, out.stride, (uint32_t)n_head, (uint32_t)n_head_kv, (uint32_t)hd,
             (uint32_t)(n_head_kv * hd), (uint32_t)n_ctx, f16 ? 1u : 0u, scale, sel_off, sel_stride, nsel_off };
    const struct vk_buf *bs[6] = { q.b, kc, vc, tok, out.b, sel };
    return vk_rt_dispatch(o->rt, o->p_attn_sel, bs, &pc, sizeof pc, (uint32_t)n, (uint32_t)n_head, 1, e);
}
