/* vk_engine.c — the `vulkan` backend (vk_engine.h): weights and the KV cache on the device, the layer
 * ops of model_forward recorded as dispatches of the shaders in shaders/, one submit per step (and one
 * more per MoE layer, whose router logits come back for the host to route).
 *
 * A step: the host checks the batch, writes the token table (token, position, sequence of each row)
 * and the RoPE cos/sin rows into host-visible buffers, records every layer's dispatches into one
 * command buffer (each waits for the one before: vk_rt's barriers) and submits it; the logits of the
 * rows that asked are written into a host-visible buffer in chunks of VK_LOGIT_ROWS rows. */
#include "vk_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../common/clock.h"
#include "../model/model_forward.h"
#include "vk_ops.h"
#include "vk_rt.h"

#define VK_LOGIT_ROWS 32   /* logit rows one output chunk writes (the host-visible logits buffer's rows) */

/* One layer's weights: matrices, and offsets of its f32 vectors in vk_engine.vecs (VK_NO_VEC: absent). */
struct vk_layer {
    struct vk_mat wq, wk, wv, wqkv, wo; /* wq/wk/wv or wqkv (model.h shapes) */
    struct vk_mat gate, up, down;       /* dense FFN */
    struct vk_mat router;               /* MoE: gate_inp [n_embd, n_expert] */
    struct vk_mat gexp, uexp, dexp;     /* MoE: the experts' stacks, expert x at rows [x·ne1, (x + 1)·ne1) */
    uint32_t attn_norm, q_norm, k_norm, bq, bk, bv, bqkv, bo; /* [n_embd], [hd], [hd], biases */
    uint32_t ffn_norm, b_gate, b_up, b_down;
};

struct vk_engine {
    const struct model *m;
    struct engine_params p;   /* resolved */
    struct vk_rt *rt;
    struct vk_ops ops;        /* the pipelines and the products' rounding scratch */
    struct engine_load ld;
    struct vk_mat embd;       /* token_embd [n_embd, n_vocab], read by embed_<type> */
    struct vk_mat out;        /* output [n_embd, n_vocab] (embd's buffer when tied) */
    struct vk_layer *ly;      /* [n_layer] */
    struct vk_buf vecs;       /* every norm weight and bias, f32, packed (offsets in the layers) */
    uint32_t out_norm, out_bias;
    struct vk_buf *kc, *vc;   /* [n_kv_layers] each [n_seq][n_ctx][kv_dim] f16 pairs (or f32) */
    int *kv_dim;              /* [n_kv_layers] n_head_kv · head_dim */
    /* step buffers, B = n_batch rows */
    struct vk_buf x;          /* [B][n_embd] residual stream */
    struct vk_buf h;          /* [B][n_embd] normed input of a sublayer; the output rows at the end */
    struct vk_buf qkv;        /* [B][q + k + v of the widest layer] projections (per layer stride W) */
    struct vk_buf o;          /* [B][n_head_max·hd] attention output */
    struct vk_buf fg, fu;     /* [B][n_ff_max] gate (then silu(gate)·up) and up; MoE: [B·K][n_ff_exp] */
    /* MoE, K = n_expert_used: routing on the host between two submits (router logits read back) */
    struct vk_buf rl;         /* host [B][n_expert] router logits, then probabilities */
    struct vk_buf midx;       /* host [B·K] int: the batch row of each expert-ordered row */
    struct vk_buf mslot;      /* host [B·K] int: (token t, pick k)'s expert-ordered row, at t·K + k */
    struct vk_buf mw;         /* host [B·K] the picks' weights, at t·K + k */
    struct vk_buf ex, ey;     /* [B·K][n_embd] the experts' input rows and output rows, in expert order */
    int *sel;                 /* [B·K] picked experts */
    int *cnt, *base;          /* [n_expert] rows routed to each expert, and where its rows start */
    struct vk_buf tok;        /* host [B][4] int32: token, pos, seq, 0 */
    struct vk_buf cs;         /* host [B][n_rot] RoPE cos/sin of each row's position */
    struct vk_buf logit;      /* host [VK_LOGIT_ROWS][n_vocab] */
    struct vk_buf orow;       /* host [B] int: the batch rows gathered for the output norm (logits, hidden states) */
    /* sequences */
    int *len;                 /* [n_seq] cached positions */
    int *seq_next;            /* [n_seq] lengths after the batch being checked */
    int *out_rows;            /* [B] rows that asked for logits */
    /* the step in progress */
    float *logits;            /* the caller's [n_out][n_vocab] */
    int pend0, pendn;         /* the output chunk recorded but not yet read back: first row, rows */
};

/* ---- creation ---- */

static void vk_engine_free(struct vk_engine *c)
{
    if (!c)
        return;
    if (c->rt) {
        struct vk_ops *o = &c->ops;
        vk_mat_free(o, &c->out);
        vk_mat_free(o, &c->embd);
        for (int il = 0; c->ly && il < c->m->hp.n_layer; il++) {
            struct vk_layer *d = &c->ly[il];
            struct vk_mat *ws[] = { &d->wq,   &d->wk,   &d->wv,     &d->wqkv, &d->wo,   &d->gate,
                                    &d->up,   &d->down, &d->router, &d->gexp, &d->uexp, &d->dexp };
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                vk_mat_free(o, ws[i]);
        }
        for (int l = 0; l < c->m->n_kv_layers; l++) {
            if (c->kc)
                vk_rt_buf_free(c->rt, &c->kc[l]);
            if (c->vc)
                vk_rt_buf_free(c->rt, &c->vc[l]);
        }
        struct vk_buf *bs[] = { &c->vecs, &c->x,  &c->h,    &c->qkv, &c->o,  &c->fg, &c->fu, &c->tok, &c->cs,
                                &c->logit, &c->orow, &c->rl, &c->midx, &c->mslot, &c->mw, &c->ex, &c->ey };
        for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
            vk_rt_buf_free(c->rt, bs[i]);
        vk_ops_free(o);
        vk_rt_close(c->rt);
    }
    free(c->ly);
    free(c->kc);
    free(c->vc);
    free(c->kv_dim);
    free(c->len);
    free(c->seq_next);
    free(c->out_rows);
    free(c->sel);
    free(c->cnt);
    free(c->base);
    free(c);
}

/* the packed vectors: pass 0 counts, pass 1 copies into host[] */
struct vec_pack {
    float *host;
    size_t n;
};

static uint32_t vec_add(struct vec_pack *vp, const struct vec *v)
{
    if (!v->data)
        return VK_NO_VEC;
    const size_t off = vp->n;
    if (vp->host)
        memcpy(vp->host + off, v->data, sizeof(float) * (size_t)v->n);
    vp->n += (size_t)v->n;
    return (uint32_t)off;
}

static void pack_vecs(struct vk_engine *c, struct vec_pack *vp)
{
    const struct model *m = c->m;
    c->out_norm = vec_add(vp, &m->output_norm);
    c->out_bias = vec_add(vp, &m->output_bias);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct layer *l = &m->layers[il];
        struct vk_layer *d = &c->ly[il];
        d->attn_norm = vec_add(vp, &l->attn_norm);
        d->q_norm = vec_add(vp, &l->q_norm);
        d->k_norm = vec_add(vp, &l->k_norm);
        d->bq = vec_add(vp, &l->bq);
        d->bk = vec_add(vp, &l->bk);
        d->bv = vec_add(vp, &l->bv);
        d->bqkv = vec_add(vp, &l->bqkv);
        d->bo = vec_add(vp, &l->bo);
        d->ffn_norm = vec_add(vp, &l->ffn_norm);
        d->b_gate = vec_add(vp, &l->b_gate);
        d->b_up = vec_add(vp, &l->b_up);
        d->b_down = vec_add(vp, &l->b_down);
    }
}

static int upload_weights(struct vk_engine *c, struct err *e)
{
    const struct model *m = c->m;
    struct vk_ops *o = &c->ops;
    int rc = vk_mat_upload(o, &c->embd, &m->tok_embd, true, &c->ld.weights, e);
    if (!rc && m->output.data == m->tok_embd.data) /* tied: the same bytes, read by a product */
        rc = vk_mat_alias(o, &c->out, &c->embd, &m->output, e);
    else if (!rc)
        rc = vk_mat_upload(o, &c->out, &m->output, false, &c->ld.weights, e);
    for (int il = 0; !rc && il < m->hp.n_layer; il++) {
        const struct layer *l = &m->layers[il];
        struct vk_layer *d = &c->ly[il];
        const struct {
            struct vk_mat *d;
            const struct wt *w;
        } ws[] = { { &d->wq, &l->wq }, { &d->wk, &l->wk }, { &d->wv, &l->wv }, { &d->wqkv, &l->wqkv },
                   { &d->wo, &l->wo }, { &d->gate, &l->ffn_gate }, { &d->up, &l->ffn_up },
                   { &d->down, &l->ffn_down }, { &d->router, &l->gate_inp }, { &d->gexp, &l->gate_exps },
                   { &d->uexp, &l->up_exps }, { &d->dexp, &l->down_exps } };
        for (size_t i = 0; !rc && i < sizeof ws / sizeof ws[0]; i++)
            rc = vk_mat_upload(o, ws[i].d, ws[i].w, false, &c->ld.weights, e);
    }
    if (rc)
        return rc;
    struct vec_pack vp = { 0 };
    pack_vecs(c, &vp);
    vp.host = malloc(sizeof(float) * (vp.n ? vp.n : 1));
    if (!vp.host)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    vp.n = 0;
    pack_vecs(c, &vp);
    rc = vk_ops_buf(&c->ops, &c->vecs, sizeof(float) * vp.n, false, "norm weights and biases", e);
    if (!rc && vp.n)
        rc = vk_rt_upload(c->rt, &c->vecs, 0, vp.host, sizeof(float) * vp.n, e);
    c->ld.weights += sizeof(float) * vp.n;
    free(vp.host);
    return rc;
}

static int alloc_state(struct vk_engine *c, struct err *e)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int nkvl = m->n_kv_layers;
    c->kc = calloc((size_t)nkvl + 1, sizeof *c->kc);
    c->vc = calloc((size_t)nkvl + 1, sizeof *c->vc);
    c->kv_dim = calloc((size_t)nkvl + 1, sizeof(int));
    c->len = calloc((size_t)c->p.n_seq, sizeof(int));
    c->seq_next = calloc((size_t)c->p.n_seq, sizeof(int));
    c->out_rows = calloc((size_t)c->p.n_batch, sizeof(int));
    if (!c->kc || !c->vc || !c->kv_dim || !c->len || !c->seq_next || !c->out_rows)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kv_index >= 0)
            c->kv_dim[m->layers[il].kv_index] = m->layers[il].n_head_kv * hp->head_dim;
    const size_t elt = c->p.kv_f32 ? 4 : 2;
    int rc = 0;
    for (int l = 0; !rc && l < nkvl; l++) {
        /* f16 cells go two to a word: an odd kv_dim would split a word between two cells */
        if (!c->p.kv_f32 && c->kv_dim[l] % 2)
            return err_set(e, ERR_UNSUPPORTED, "vulkan: an f16 KV cache needs an even KV width (%d); use kv_f32",
                           c->kv_dim[l]);
        const size_t bytes = (size_t)c->p.n_seq * (size_t)c->p.n_ctx * (size_t)c->kv_dim[l] * elt;
        rc = vk_ops_buf(&c->ops, &c->kc[l], bytes, false, "the KV cache", e);
        if (!rc)
            rc = vk_ops_buf(&c->ops, &c->vc[l], bytes, false, "the KV cache", e);
        c->ld.kv += 2 * bytes;
    }
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    size_t wqkv = 0, nq = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const size_t q = (size_t)m->layers[il].n_head * hd, kv = (size_t)m->layers[il].n_head_kv * hd;
        if (q + 2 * kv > wqkv)
            wqkv = q + 2 * kv;
        if (q > nq)
            nq = q;
    }
    const size_t X = (size_t)hp->n_expert, K = X ? (size_t)hp->n_expert_used : 0, BK = B * (K ? K : 1);
    /* fg / fu: B rows of the dense FFN's width, or B·K rows of an expert's */
    size_t ff = B * (size_t)(hp->n_ff_max > 0 ? hp->n_ff_max : 1);
    if (K && BK * (size_t)hp->n_ff_exp > ff)
        ff = BK * (size_t)hp->n_ff_exp;
    const struct {
        struct vk_buf *b;
        size_t bytes;
        bool host;
    } bs[] = {
        { &c->x, B * E * 4, false },  { &c->h, B * E * 4, false },   { &c->qkv, B * wqkv * 4, false },
        { &c->o, B * nq * 4, false }, { &c->fg, ff * 4, false },     { &c->fu, ff * 4, false },
        { &c->tok, B * 16, true },    { &c->cs, B * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * 4, true },
        { &c->logit, (size_t)VK_LOGIT_ROWS * (size_t)hp->n_vocab * 4, true }, { &c->orow, B * 4, true },
        { &c->rl, B * X * 4, true },  { &c->midx, BK * 4, true },    { &c->mslot, BK * 4, true },
        { &c->mw, BK * 4, true },     { &c->ex, K ? BK * E * 4 : 4, false }, { &c->ey, K ? BK * E * 4 : 4, false },
    };
    c->sel = calloc(BK, sizeof(int));
    c->cnt = calloc(X + 1, sizeof(int));
    c->base = calloc(X + 1, sizeof(int));
    if (!c->sel || !c->cnt || !c->base)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    for (size_t i = 0; !rc && i < sizeof bs / sizeof bs[0]; i++) {
        rc = vk_ops_buf(&c->ops, bs[i].b, bs[i].bytes, bs[i].host, "step buffers", e);
        c->ld.scratch += bs[i].bytes;
    }
    return rc;
}

static const struct layer_ops vk_layer_ops;

static int vk_engine_create(struct vk_engine **out, const struct model *m, const struct engine_params *pin,
                            struct err *e)
{
    *out = NULL;
    struct engine_params p;
    int rc = backend_params_resolve(m, pin, &p, e);
    if (rc || (rc = model_forward_check(m, &vk_layer_ops, "vulkan", e)))
        return rc;
    const struct hparams *hp = &m->hp;
    if (hp->head_dim > VK_MAX_HD)
        return err_set(e, ERR_UNSUPPORTED, "vulkan: head_dim %d is past the attention shader's %d", hp->head_dim,
                       VK_MAX_HD);
    struct vk_engine *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    c->m = m;
    c->p = p;
    uint64_t t0 = clock_now_ns();
    if ((rc = vk_rt_open(&c->rt, p.has_device ? p.device : -1, e))) {
        vk_engine_free(c);
        return rc;
    }
    /* the widest input a product takes: n_embd, the attention output, or the FFN width */
    int widest = hp->n_embd > hp->n_ff_max ? hp->n_embd : hp->n_ff_max;
    if (hp->n_head_max * hp->head_dim > widest)
        widest = hp->n_head_max * hp->head_dim;
    if (hp->n_ff_exp > widest)
        widest = hp->n_ff_exp;
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].down_shexp.data)
            return err_set(e, ERR_UNSUPPORTED, "vulkan backend: layer %d has a shared expert, which this backend "
                           "does not run", il);
    c->ly = calloc((size_t)hp->n_layer, sizeof *c->ly);
    if (!c->ly)
        rc = err_set(e, ERR_NOMEM, "vulkan: out of memory");
    if (!rc)
        rc = vk_ops_init(&c->ops, c->rt, p.n_batch * (hp->n_expert ? hp->n_expert_used : 1), widest, e);
    c->ld.scratch += c->ops.xr.size;
    uint64_t t1 = clock_now_ns();
    c->ld.t_compile = (double)(t1 - t0) / 1e9;
    if (!rc)
        rc = upload_weights(c, e);
    uint64_t t2 = clock_now_ns();
    c->ld.t_upload = (double)(t2 - t1) / 1e9;
    if (!rc)
        rc = alloc_state(c, e);
    c->ld.t_alloc = (double)(clock_now_ns() - t2) / 1e9;
    if (rc) {
        vk_engine_free(c);
        return rc;
    }
    c->ld.dev_total = vk_rt_device_bytes(c->rt);
    *out = c;
    return 0;
}

/* ---- the layer ops ---- */

/* whole rows of a step buffer */
static struct vk_view rows_of(const struct vk_buf *b, uint32_t stride) { return (struct vk_view){ b, 0, stride }; }

static int op_embed(void *b, int n, struct err *e)
{
    struct vk_engine *c = b;
    return vk_op_embed(&c->ops, &c->embd, &c->tok, &c->x, n, e);
}

static int op_attention(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const struct layer *ly = s->ly;
    const struct vk_layer *d = &c->ly[s->il];
    const int hd = hp->head_dim;
    const uint32_t E = (uint32_t)hp->n_embd;
    const uint32_t nq = (uint32_t)(ly->n_head * hd), nkv = (uint32_t)(ly->n_head_kv * hd), W = nq + 2 * nkv;
    /* q, k and v of a token side by side in one qkv row of W */
    const struct vk_view X = rows_of(&c->x, E), H = rows_of(&c->h, E), Q = rows_of(&c->qkv, W);
    const struct vk_view K = { &c->qkv, nq, W }, V = { &c->qkv, nq + nkv, W };
    int rc = vk_op_norm(o, X, H, (int)E, 1, n, &c->vecs, d->attn_norm, hp->rms_eps, e);
    if (!rc && d->wqkv.rows) {
        rc = vk_op_mm(o, &d->wqkv, H, Q, n, &c->vecs, d->bqkv, false, e);
    } else if (!rc) {
        rc = vk_op_mm(o, &d->wq, H, Q, n, &c->vecs, d->bq, false, e);
        if (!rc)
            rc = vk_op_mm(o, &d->wk, H, K, n, &c->vecs, d->bk, false, e);
        if (!rc)
            rc = vk_op_mm(o, &d->wv, H, V, n, &c->vecs, d->bv, false, e);
    }
    if (!rc && d->q_norm != VK_NO_VEC)
        rc = vk_op_norm(o, Q, Q, hd, ly->n_head, n, &c->vecs, d->q_norm, hp->rms_eps, e);
    if (!rc && d->k_norm != VK_NO_VEC)
        rc = vk_op_norm(o, K, K, hd, ly->n_head_kv, n, &c->vecs, d->k_norm, hp->rms_eps, e);
    const bool neox = c->m->arch->rope == ROPE_NEOX, f16 = !c->p.kv_f32;
    if (!rc)
        rc = vk_op_rope(o, Q, hd, hp->n_rot, neox, ly->n_head, n, &c->cs, e);
    if (!rc)
        rc = vk_op_rope(o, K, hd, hp->n_rot, neox, ly->n_head_kv, n, &c->cs, e);
    /* every token's K/V is stored before attention, so a token sees its sequence's earlier batch tokens */
    const int l = ly->kv_index;
    if (!rc)
        rc = vk_op_kv_store(o, &c->qkv, nq, nq + nkv, W, &c->kc[l], &c->vc[l], &c->tok, (int)nkv, c->p.n_ctx, f16, n,
                            e);
    if (!rc)
        rc = vk_op_attn(o, Q, rows_of(&c->o, nq), &c->kc[l], &c->vc[l], &c->tok, ly->n_head, ly->n_head_kv, hd,
                        c->p.n_ctx, f16, hp->kq_scale, n, e);
    if (!rc) /* x += wo·o + bo */
        rc = vk_op_mm(o, &d->wo, rows_of(&c->o, nq), X, n, &c->vecs, d->bo, true, e);
    return rc;
}

static int op_ffn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct vk_layer *d = &c->ly[s->il];
    const uint32_t E = (uint32_t)c->m->hp.n_embd, F = (uint32_t)s->ly->n_ff;
    const struct vk_view X = rows_of(&c->x, E), H = rows_of(&c->h, E);
    int rc = vk_op_norm(o, X, H, (int)E, 1, n, &c->vecs, d->ffn_norm, c->m->hp.rms_eps, e);
    if (!rc)
        rc = vk_op_mm(o, &d->gate, H, rows_of(&c->fg, F), n, &c->vecs, d->b_gate, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->up, H, rows_of(&c->fu, F), n, &c->vecs, d->b_up, false, e);
    if (!rc)
        rc = vk_op_swiglu(o, &c->fg, &c->fu, (uint32_t)n * F, e);
    if (!rc) /* x += down·g + b_down */
        rc = vk_op_mm(o, &d->down, rows_of(&c->fg, F), X, n, &c->vecs, d->b_down, true, e);
    return rc;
}

/* the routing of n tokens (router logits in rl) on the host, as the CPU routes: each expert's rows in
 * token order, their batch rows (midx), where each pick's row is (mslot) and its weight (mw) */
static void route(struct vk_engine *c, int n)
{
    const struct hparams *hp = &c->m->hp;
    const int X = hp->n_expert, K = hp->n_expert_used;
    float *rl = c->rl.map, *w = c->mw.map;
    int32_t *idx = c->midx.map, *slot = c->mslot.map;
    memset(c->cnt, 0, sizeof(int) * (size_t)X);
    for (int t = 0; t < n; t++) {
        ops_moe_route(rl + (size_t)t * X, X, K, hp->expert_weights_scale, c->sel + (size_t)t * K, w + (size_t)t * K);
        for (int k = 0; k < K; k++)
            c->cnt[c->sel[t * K + k]]++;
    }
    for (int x = 0, at = 0; x < X; x++) {
        c->base[x] = at;
        at += c->cnt[x];
        c->cnt[x] = 0; /* refilled below */
    }
    for (int t = 0; t < n; t++)
        for (int k = 0; k < K; k++) {
            const int x = c->sel[t * K + k], r = c->base[x] + c->cnt[x]++;
            idx[r] = t;
            slot[t * K + k] = r;
        }
}

/* x += Σ_k w_k · expert_k(rmsnorm(x) · ffn_norm): the router's logits come back (one submit), the host
 * routes, then each used expert runs over its rows and the picks are summed into x */
static int op_ffn_moe(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const struct vk_layer *d = &c->ly[s->il];
    const int X = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
    const uint32_t E = (uint32_t)hp->n_embd;
    const struct vk_view H = rows_of(&c->h, E);
    int rc = vk_op_norm(o, rows_of(&c->x, E), H, (int)E, 1, n, &c->vecs, d->ffn_norm, hp->rms_eps, e);
    if (!rc)
        rc = vk_op_mm(o, &d->router, H, rows_of(&c->rl, (uint32_t)X), n, NULL, VK_NO_VEC, false, e);
    if (!rc && !(rc = vk_rt_submit(c->rt, e))) {
        route(c, n);
        rc = vk_rt_begin(c->rt, e);
    }
    if (!rc)
        rc = vk_op_gather(o, H, rows_of(&c->ex, E), &c->midx, 0, (int)E, n * K, e);
    for (int x = 0; !rc && x < X; x++) {
        if (!c->cnt[x])
            continue;
        const uint32_t r0 = (uint32_t)c->base[x];
        const struct vk_view in = { &c->ex, r0 * E, E };
        rc = vk_op_mm_rows(o, &d->gexp, x * F, F, in, (struct vk_view){ &c->fg, r0 * (uint32_t)F, (uint32_t)F },
                           c->cnt[x], NULL, VK_NO_VEC, false, e);
        if (!rc)
            rc = vk_op_mm_rows(o, &d->uexp, x * F, F, in, (struct vk_view){ &c->fu, r0 * (uint32_t)F, (uint32_t)F },
                               c->cnt[x], NULL, VK_NO_VEC, false, e);
    }
    if (!rc)
        rc = vk_op_swiglu(o, &c->fg, &c->fu, (uint32_t)(n * K * F), e);
    for (int x = 0; !rc && x < X; x++) {
        if (!c->cnt[x])
            continue;
        const uint32_t r0 = (uint32_t)c->base[x];
        rc = vk_op_mm_rows(o, &d->dexp, x * (int)E, (int)E, (struct vk_view){ &c->fg, r0 * (uint32_t)F, (uint32_t)F },
                           (struct vk_view){ &c->ey, r0 * E, E }, c->cnt[x], NULL, VK_NO_VEC, false, e);
    }
    if (!rc)
        rc = vk_op_moe_combine(o, &c->ey, &c->mslot, &c->mw, &c->x, (int)E, K, n, e);
    return rc;
}

/* h[r] = rmsnorm(x[rows[r]]) · output_norm for r < nr: the rows the output (or the hidden states) reads,
 * gathered in order and normed on their own */
static int gather_normed(struct vk_engine *c, const int *rows, int nr, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    memcpy(c->orow.map, rows, sizeof(int) * (size_t)nr);
    const struct vk_view H = rows_of(&c->h, E);
    int rc = vk_op_gather(&c->ops, rows_of(&c->x, E), H, &c->orow, 0, (int)E, nr, e);
    if (!rc)
        rc = vk_op_norm(&c->ops, H, H, (int)E, 1, nr, &c->vecs, c->out_norm, c->m->hp.rms_eps, e);
    return rc;
}

/* logits of output rows [r0, r0 + nr) into the host-visible buffer (read back by read_chunk) */
static int record_chunk(struct vk_engine *c, int r0, int nr, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd, V = (uint32_t)c->m->hp.n_vocab;
    c->pend0 = r0;
    c->pendn = nr;
    const struct vk_view h = { &c->h, (uint32_t)r0 * E, E };
    return vk_op_mm(&c->ops, &c->out, h, rows_of(&c->logit, V), nr, &c->vecs, c->out_bias, false, e);
}

static void read_chunk(struct vk_engine *c)
{
    const size_t V = (size_t)c->m->hp.n_vocab;
    if (c->pendn)
        memcpy(c->logits + (size_t)c->pend0 * V, c->logit.map, sizeof(float) * V * (size_t)c->pendn);
    c->pendn = 0;
}

static int op_output(void *b, int n, int n_out, struct err *e)
{
    (void)n;
    struct vk_engine *c = b;
    int rc = gather_normed(c, c->out_rows, n_out, e);
    /* every chunk but the last is run and read here; the last is read after the step's submit */
    for (int r0 = 0; !rc && r0 < n_out; r0 += VK_LOGIT_ROWS) {
        const int nr = n_out - r0 < VK_LOGIT_ROWS ? n_out - r0 : VK_LOGIT_ROWS;
        rc = record_chunk(c, r0, nr, e);
        if (!rc && r0 + nr < n_out && !(rc = vk_rt_submit(c->rt, e))) {
            read_chunk(c);
            rc = vk_rt_begin(c->rt, e);
        }
    }
    return rc;
}

static const struct layer_ops vk_layer_ops = {
    .embed = op_embed,
    .mixer = { [LAYER_ATTN] = op_attention },
    .ffn = { [FFN_DENSE] = op_ffn, [FFN_MOE] = op_ffn_moe },
    .output = op_output,
};

/* ---- the step ---- */

/* the final hidden state of the rows in want, after the output norm, into embd (n_embd floats each, in
 * batch order): x is the last step's residual stream (the output op only reads it), each row normed on
 * its own so the result does not depend on the rest of the batch */
static int read_embd(struct vk_engine *c, int n, const bool *want, float *embd, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    int nw = 0, rc = vk_rt_begin(c->rt, e);
    if (rc)
        return rc;
    for (int t = 0; t < n; t++) /* out_rows is free again: the step's output is done */
        if (want[t])
            c->out_rows[nw++] = t;
    if ((rc = gather_normed(c, c->out_rows, nw, e))) {
        vk_rt_abandon(c->rt);
        return rc;
    }
    if ((rc = vk_rt_submit(c->rt, e)))
        return rc;
    return vk_rt_download(c->rt, &c->h, 0, embd, (size_t)nw * E * 4, e);
}

static int vk_decode_embd(void *b, const struct engine_tok *toks, int n, const bool *want, float *logits,
                          float *embd, struct err *e)
{
    struct vk_engine *c = b;
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    int rc = backend_check_batch(toks, n, c->p.n_batch, c->p.n_seq, c->p.n_ctx, hp->n_vocab, c->len, c->seq_next, e);
    if (rc)
        return rc;
    int n_out = 0;
    if ((rc = backend_out_rows(toks, n, want, logits, embd, c->out_rows, &n_out, e)))
        return rc;
    int32_t *tt = c->tok.map;
    float *cs = c->cs.map;
    for (int t = 0; t < n; t++) {
        tt[4 * t] = toks[t].token, tt[4 * t + 1] = toks[t].pos, tt[4 * t + 2] = toks[t].seq, tt[4 * t + 3] = 0;
        ops_rope_cache(cs + (size_t)t * hp->n_rot, toks[t].pos, hp->n_rot, hp->freq_base, m->rope_freqs.data,
                       hp->freq_scale, hp->ext_factor, hp->attn_factor, hp->corr_dims);
    }
    c->logits = logits;
    c->pendn = 0;
    if ((rc = vk_rt_begin(c->rt, e)))
        return rc;
    rc = model_forward(m, &vk_layer_ops, c, n, n_out, e);
    if (!rc)
        rc = vk_rt_submit(c->rt, e);
    else
        vk_rt_abandon(c->rt);
    if (!rc)
        read_chunk(c);
    c->logits = NULL;
    if (!rc && want)
        rc = read_embd(c, n, want, embd, e);
    if (rc)
        return rc;
    for (int s = 0; s < c->p.n_seq; s++)
        c->len[s] = c->seq_next[s];
    return 0;
}

static int vk_decode(void *b, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return vk_decode_embd(b, toks, n, NULL, logits, NULL, e);
}

/* ---- sequences: attention state is the cells themselves ---- */

static bool seq_ok(const struct vk_engine *c, int seq) { return seq >= 0 && seq < c->p.n_seq; }

static int vk_seq_len(const void *b, int seq)
{
    const struct vk_engine *c = b;
    return seq_ok(c, seq) ? c->len[seq] : 0;
}

static int vk_seq_restore(void *b, int seq, int pos, struct err *e)
{
    struct vk_engine *c = b;
    if (!seq_ok(c, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, c->p.n_seq);
    if (pos < 0)
        pos = 0;
    if (pos < c->len[seq])
        c->len[seq] = pos;
    return 0;
}

static int vk_seq_copy(void *b, int src, int dst, int n, struct err *e)
{
    struct vk_engine *c = b;
    if (!seq_ok(c, src) || !seq_ok(c, dst))
        return err_set(e, ERR_INVALID, "engine: sequence %d or %d out of range [0, %d)", src, dst, c->p.n_seq);
    if (n < 0 || n > c->len[src])
        return err_set(e, ERR_RANGE, "engine: cannot copy %d positions of sequence %d (it has %d)", n, src,
                       c->len[src]);
    if (src != dst && n > 0) {
        int rc = vk_rt_begin(c->rt, e);
        if (rc)
            return rc;
        const size_t elt = c->p.kv_f32 ? 4 : 2;
        for (int l = 0; l < c->m->n_kv_layers; l++) {
            const size_t row = (size_t)c->kv_dim[l] * elt, seq_bytes = (size_t)c->p.n_ctx * row;
            vk_rt_copy(c->rt, &c->kc[l], (size_t)src * seq_bytes, &c->kc[l], (size_t)dst * seq_bytes, (size_t)n * row);
            vk_rt_copy(c->rt, &c->vc[l], (size_t)src * seq_bytes, &c->vc[l], (size_t)dst * seq_bytes, (size_t)n * row);
        }
        if ((rc = vk_rt_submit(c->rt, e)))
            return rc;
    }
    c->len[dst] = n;
    return 0;
}

static int vk_seq_snapshot(void *b, int seq, struct err *e)
{
    struct vk_engine *c = b;
    if (!seq_ok(c, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, c->p.n_seq);
    return 0; /* no recurrent state: every cached position can be cut back to */
}

static int vk_seq_restorable(const void *b, int seq, int pos)
{
    const struct vk_engine *c = b;
    if (!seq_ok(c, seq) || pos <= 0)
        return 0;
    return pos < c->len[seq] ? pos : c->len[seq];
}

/* ---- the table ---- */

static int vk_create(void **out, const struct model *m, const struct engine_params *p, struct err *e)
{
    struct vk_engine *c = NULL;
    int rc = vk_engine_create(&c, m, p, e);
    *out = c;
    return rc;
}

static void vk_free(void *b) { vk_engine_free(b); }
static int vk_n_ctx(const void *b) { return ((const struct vk_engine *)b)->p.n_ctx; }
static const char *vk_describe(const void *b) { return vk_rt_describe(((const struct vk_engine *)b)->rt); }
static void vk_load_info(const void *b, struct engine_load *out) { *out = ((const struct vk_engine *)b)->ld; }

const struct backend_ops vk_backend = {
    .name = "vulkan",
    .create = vk_create,
    .free = vk_free,
    .n_ctx = vk_n_ctx,
    .decode = vk_decode,
    .decode_embd = vk_decode_embd,
    .seq_len = vk_seq_len,
    .seq_restore = vk_seq_restore,
    .seq_copy = vk_seq_copy,
    .seq_snapshot = vk_seq_snapshot,
    .seq_restorable = vk_seq_restorable,
    .describe = vk_describe,
    .load_info = vk_load_info,
};
