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
#include "../backend/snap.h"
#include "../model/model_forward.h"
#include "../num/ple.h"
#include "../num/qsa.h"
#include "vk_hc.h"
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
    /* Gated DeltaNet (model.h shapes); gated attention reuses wq ([n_embd, 2·n_head·hd]: query | gate per
     * head), wk, wv, wo, q_norm, k_norm */
    struct vk_mat ssm_qkv, ssm_z, ssm_beta, ssm_alpha, ssm_out;
    uint32_t ssm_conv, ssm_dt, ssm_a, ssm_norm; /* [d_conv·conv_dim], [H_v], [H_v], [d_state] */
    struct vk_mat gsh, ush, dsh;        /* the shared expert's gate, up, down */
    uint32_t gate_inp_shexp;            /* [n_embd] its sigmoid gate */
    /* qwen4exp: the mixers in place of attn_norm / ffn_norm, the indexer of a sparse layer, PLE */
    struct vk_hc_mix hc_attn, hc_ffn;
    struct vk_mat idx_q, idx_k;         /* [n_embd, n_idx_head·d_idx], [n_embd, d_idx] */
    struct vk_mat ple_key, ple_value;   /* [n_embd, hc·n_embd], [n_embd, n_embd] */
    uint32_t ple_nk, ple_nq, ple_nc;    /* [hc·n_embd] the key, query and conv-input norms */
    uint32_t ple_conv;                  /* [K_p·hc·n_embd] the conv taps */
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
    /* Gated DeltaNet state (hybrids): per sequence and GDN layer the conv state [conv_dim][d_conv − 1], then
     * the delta-rule state [H_v][d][d] (num/gdn.h's layout), as the CPU engine keeps them */
    size_t conv_per, ssm_per, per_seq; /* floats: one layer's conv state, its delta-rule state, a sequence's all */
    int n_snap;               /* snapshots kept per sequence */
    struct vk_buf st;         /* [n_seq][per_seq] */
    struct vk_buf snap;       /* [n_seq][n_snap][per_seq] the snapshots' states (allocated with the state) */
    struct vk_buf zero;       /* [per_seq] zeros: a sequence restarting at position 0 */
    struct snap_slot *slots;  /* [n_seq][n_snap] which position each snapshot holds */
    uint64_t stamp;
    unsigned char *pe_pair;   /* [n_rot/2] IMROPE pairs that take p_e: angle 0 in the host cos/sin rows */
    struct vk_buf grp;        /* host int32: the batch rows grouped by sequence [B], then per group {seq, start,
                               * len, 0} (vk_ops.h) */
    int n_grp;
    struct vk_buf mix;        /* [B][max(conv_dim, 2·n_head·hd)] GDN projection / gated attention's query | gate */
    struct vk_buf y;          /* [B][conv_dim] conv output: q | k | v */
    struct vk_buf z;          /* [B][value_dim] GDN output gate */
    struct vk_buf beta, gd;   /* [B][H_v] β and the log decay */
    struct vk_buf sh;         /* [B][n_embd] the shared expert's output */
    /* qwen4exp (hyper-connections, QSA, PLE; arch-qwen4exp.md) */
    int xw;                   /* floats of a token's residual: n_embd, or hc·n_embd (hc streams) */
    bool hc_on;               /* the model has hyper-connections */
    struct vk_hc hc;          /* the mixes' scratch */
    struct vk_hc_mix out_hc;  /* the output mixer (no inject) */
    uint32_t out_hc_norm;
    struct vk_buf a;          /* [B][n_embd] a sublayer's output before its write-back into the streams */
    struct vk_buf xo;         /* [B][xw] the output rows' residuals, gathered */
    struct qsa_cache qc;      /* host: indexer keys per cell, pooled block keys (num/qsa.h) */
    struct vk_buf qi, kr;     /* host [B][n_idx_head·d_idx], [B][d_idx]: the indexer's projections, read back */
    struct vk_buf qsel;       /* host int32: [B][w_max] the cells each token attends to, then [B] their counts */
    int w_max;
    float *qsc;               /* [n_ctx] selection scratch */
    int *qheap;               /* [n_ctx] */
    int *present;             /* [n_seq] cells of each sequence once the batch is stored */
    int *tok_hist;            /* [n_seq][n_ctx] the token at each position: PLE's n-gram context */
    size_t ple_off;           /* floats into a sequence's state where the PLE conv history starts */
    int ple_hist;             /* its rows: (K_p − 1)·n_gram */
    struct vk_buf pe;         /* host [B][n_embd] the gathered PLE table rows */
    struct vk_buf pkey, pq, pg, pn, pc; /* [B][xw] key, query, gated value G, its norm, silu(conv) */
    struct vk_buf pval;       /* [B][n_embd] value */
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
            struct vk_mat *ws[] = { &d->wq,      &d->wk,    &d->wv,       &d->wqkv,      &d->wo,
                                    &d->gate,    &d->up,    &d->down,     &d->router,    &d->gexp,
                                    &d->uexp,    &d->dexp,  &d->ssm_qkv,  &d->ssm_z,     &d->ssm_beta,
                                    &d->ssm_alpha, &d->ssm_out, &d->gsh,  &d->ush,       &d->dsh };
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
                vk_mat_free(o, ws[i]);
            struct vk_mat *qs[] = { &d->idx_q, &d->idx_k, &d->ple_key, &d->ple_value };
            for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++)
                vk_mat_free(o, qs[i]);
            vk_hc_mix_free(o, &d->hc_attn);
            vk_hc_mix_free(o, &d->hc_ffn);
        }
        vk_hc_mix_free(o, &c->out_hc);
        vk_hc_free(&c->hc, o);
        for (int l = 0; l < c->m->n_kv_layers; l++) {
            if (c->kc)
                vk_rt_buf_free(c->rt, &c->kc[l]);
            if (c->vc)
                vk_rt_buf_free(c->rt, &c->vc[l]);
        }
        struct vk_buf *bs[] = { &c->vecs, &c->x,  &c->h,    &c->qkv, &c->o,  &c->fg, &c->fu, &c->tok, &c->cs,
                                &c->logit, &c->orow, &c->rl, &c->midx, &c->mslot, &c->mw, &c->ex, &c->ey,
                                &c->st,   &c->snap, &c->zero, &c->grp, &c->mix, &c->y, &c->z, &c->beta, &c->gd,
                                &c->sh,   &c->a,    &c->xo,   &c->qi,  &c->kr,  &c->qsel, &c->pe, &c->pkey, &c->pq,
                                &c->pg,   &c->pn,   &c->pc,   &c->pval };
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
    free(c->slots);
    free(c->pe_pair);
    qsa_cache_free(&c->qc);
    free(c->qsc);
    free(c->qheap);
    free(c->present);
    free(c->tok_hist);
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
    c->out_hc.norm = vec_add(vp, &m->output_hc.norm);
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
        d->ssm_conv = vec_add(vp, &l->ssm_conv);
        d->ssm_dt = vec_add(vp, &l->ssm_dt);
        d->ssm_a = vec_add(vp, &l->ssm_a);
        d->ssm_norm = vec_add(vp, &l->ssm_norm);
        d->gate_inp_shexp = vec_add(vp, &l->gate_inp_shexp);
        d->hc_attn.norm = vec_add(vp, &l->hc_attn.norm);
        d->hc_ffn.norm = vec_add(vp, &l->hc_ffn.norm);
        d->ple_nk = vec_add(vp, &l->ple_norm_key);
        d->ple_nq = vec_add(vp, &l->ple_norm_query);
        d->ple_nc = vec_add(vp, &l->ple_norm_conv);
        d->ple_conv = vec_add(vp, &l->ple_conv);
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
                   { &d->uexp, &l->up_exps }, { &d->dexp, &l->down_exps }, { &d->ssm_qkv, &l->ssm_qkv },
                   { &d->ssm_z, &l->ssm_z }, { &d->ssm_beta, &l->ssm_beta }, { &d->ssm_alpha, &l->ssm_alpha },
                   { &d->ssm_out, &l->ssm_out }, { &d->gsh, &l->gate_shexp }, { &d->ush, &l->up_shexp },
                   { &d->dsh, &l->down_shexp }, { &d->idx_q, &l->idx_q }, { &d->idx_k, &l->idx_k },
                   { &d->ple_key, &l->ple_key }, { &d->ple_value, &l->ple_value } };
        for (size_t i = 0; !rc && i < sizeof ws / sizeof ws[0]; i++)
            rc = vk_mat_upload(o, ws[i].d, ws[i].w, false, &c->ld.weights, e);
        if (!rc && c->hc_on)
            rc = vk_hc_mix_upload(o, &d->hc_attn, &l->hc_attn, &c->ld.weights, e);
        if (!rc && c->hc_on)
            rc = vk_hc_mix_upload(o, &d->hc_ffn, &l->hc_ffn, &c->ld.weights, e);
    }
    if (!rc && c->hc_on)
        rc = vk_hc_mix_upload(o, &c->out_hc, &m->output_hc, &c->ld.weights, e);
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

/* The hybrids' per-sequence state, its snapshots (all allocated now, so a snapshot never fails for memory
 * mid-serve) and the IMROPE pairs. */
static int alloc_recurrent(struct vk_engine *c, struct err *e)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const size_t d = (size_t)hp->d_state, conv_dim = (size_t)(2 * hp->n_k_heads + hp->n_v_heads) * d;
    c->conv_per = conv_dim * (size_t)(hp->d_conv - 1);
    c->ssm_per = (size_t)hp->n_v_heads * d * d;
    c->per_seq = (size_t)m->n_gdn_layers * (c->conv_per + c->ssm_per);
    if (hp->ple_layer >= 0) { /* PLE's conv history is state like the GDN conv's: snapshots carry it */
        c->ple_off = c->per_seq;
        c->ple_hist = (hp->ple_kernel - 1) * hp->ple_ngram;
        c->per_seq += (size_t)c->ple_hist * (size_t)c->xw;
    }
    c->n_snap = c->p.n_snap > 0 ? c->p.n_snap : ENGINE_N_SNAP_DEFAULT;
    c->slots = calloc((size_t)c->p.n_seq * (size_t)c->n_snap, sizeof *c->slots);
    c->pe_pair = calloc((size_t)hp->n_rot / 2 + 1, 1);
    if (!c->slots || !c->pe_pair)
        return err_set(e, ERR_NOMEM, "vulkan: out of memory");
    snap_slots_clear(c->slots, c->p.n_seq * c->n_snap);
    ops_imrope_text_pairs(hp->rope_sections, hp->n_rot, c->pe_pair);
    const size_t one = (c->per_seq ? c->per_seq : 1) * 4;
    int rc = vk_ops_buf(&c->ops, &c->st, (size_t)c->p.n_seq * one, false, "the recurrent state", e);
    if (!rc && c->per_seq)
        rc = vk_ops_buf(&c->ops, &c->snap, (size_t)c->p.n_seq * (size_t)c->n_snap * one, false,
                        "the recurrent state's snapshots", e);
    /* zeros for a restarting sequence's state, and for a sublayer's output that several ops add into */
    size_t zb = one;
    if (c->hc_on && (size_t)c->p.n_batch * (size_t)hp->n_embd * 4 > zb)
        zb = (size_t)c->p.n_batch * (size_t)hp->n_embd * 4;
    if (!rc)
        rc = vk_ops_buf(&c->ops, &c->zero, zb, false, "the recurrent state", e);
    if (c->per_seq) {
        c->ld.state = (uint64_t)c->p.n_seq * one;
        c->ld.state_per_seq = one;
        c->ld.n_snap = c->n_snap;
        c->ld.snap = (uint64_t)c->p.n_seq * (uint64_t)c->n_snap * one;
    }
    c->ld.scratch += zb;
    return rc;
}

/* qwen4exp's buffers: the HC scratch, the sublayer output and output rows, QSA's host side (indexer keys,
 * block keys, the projections read back, the selected cells) and PLE's (token history, gathered rows) */
static int alloc_qwen4exp(struct vk_engine *c, struct err *e)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const size_t B = (size_t)c->p.n_batch, E = (size_t)hp->n_embd, W = (size_t)c->xw;
    int rc = vk_hc_init(&c->hc, &c->ops, c->p.n_batch, hp, &c->ld.scratch, e);
    int r_min = 64, r_max = 1;
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kind == LAYER_SPARSE_ATTN) {
            r_min = m->layers[il].qsa_ratio < r_min ? m->layers[il].qsa_ratio : r_min;
            r_max = m->layers[il].qsa_ratio > r_max ? m->layers[il].qsa_ratio : r_max;
        }
    c->w_max = hp->idx_top_k + r_max - 1 < c->p.n_ctx ? hp->idx_top_k + r_max - 1 : c->p.n_ctx;
    const bool qsa = m->n_qsa_layers > 0, ple = hp->ple_layer >= 0;
    if (!rc && qsa && qsa_cache_init(&c->qc, m->n_qsa_layers, c->p.n_seq, c->p.n_ctx, hp->d_idx, r_min, !c->p.kv_f32))
        rc = err_set(e, ERR_NOMEM, "vulkan: out of memory for the indexer keys");
    c->ld.kv += qsa ? qsa_cache_bytes(&c->qc) : 0;
    c->qsc = calloc((size_t)c->p.n_ctx + 1, sizeof(float));
    c->qheap = calloc((size_t)c->p.n_ctx + 1, sizeof(int));
    c->present = calloc((size_t)c->p.n_seq, sizeof(int));
    c->tok_hist = ple ? calloc((size_t)c->p.n_seq * (size_t)c->p.n_ctx, sizeof(int)) : NULL;
    if (!rc && (!c->qsc || !c->qheap || !c->present || (ple && !c->tok_hist)))
        rc = err_set(e, ERR_NOMEM, "vulkan: out of memory");
    const size_t NI = (size_t)hp->n_idx_head * (size_t)hp->d_idx;
    const struct {
        struct vk_buf *b;
        size_t bytes;
        bool host;
    } bs[] = {
        { &c->a, B * E * 4, false },    { &c->xo, B * W * 4, false },
        { &c->qi, qsa ? B * NI * 4 : 4, true },  { &c->kr, qsa ? B * (size_t)hp->d_idx * 4 : 4, true },
        { &c->qsel, qsa ? B * ((size_t)c->w_max + 1) * 4 : 4, true },
        { &c->pe, ple ? B * E * 4 : 4, true },    { &c->pkey, ple ? B * W * 4 : 4, false },
        { &c->pq, ple ? B * W * 4 : 4, false },   { &c->pg, ple ? B * W * 4 : 4, false },
        { &c->pn, ple ? B * W * 4 : 4, false },   { &c->pc, ple ? B * W * 4 : 4, false },
        { &c->pval, ple ? B * E * 4 : 4, false },
    };
    for (size_t i = 0; !rc && i < sizeof bs / sizeof bs[0]; i++) {
        rc = vk_ops_buf(&c->ops, bs[i].b, bs[i].bytes, bs[i].host, "step buffers", e);
        c->ld.scratch += bs[i].bytes;
    }
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
    size_t wqkv = 0, nq = 0; /* nq: widest attention output (o's rows) */
    for (int il = 0; il < hp->n_layer; il++) {
        const size_t q = (size_t)m->layers[il].n_head * hd, kv = (size_t)m->layers[il].n_head_kv * hd;
        if (q + 2 * kv > wqkv)
            wqkv = q + 2 * kv;
        if (q > nq)
            nq = q;
    }
    const size_t X = (size_t)hp->n_expert, K = X ? (size_t)hp->n_expert_used : 0, BK = B * (K ? K : 1);
    /* fg / fu: B rows of the dense FFN's width, or B·K rows of an expert's, or B of the shared expert's */
    size_t ff = B * (size_t)(hp->n_ff_max > 0 ? hp->n_ff_max : 1);
    if (K && BK * (size_t)hp->n_ff_exp > ff)
        ff = BK * (size_t)hp->n_ff_exp;
    if (B * (size_t)hp->n_ff_shexp > ff)
        ff = B * (size_t)hp->n_ff_shexp;
    /* the hybrids' step buffers (one float where the model has no such layers) */
    const size_t kd = (size_t)hp->n_k_heads * (size_t)hp->d_state, vd = (size_t)hp->n_v_heads * (size_t)hp->d_state;
    const size_t cd = m->n_gdn_layers ? 2 * kd + vd : 0, HV = m->n_gdn_layers ? (size_t)hp->n_v_heads : 0;
    const bool gated = m->arch->hybrid;
    size_t wmix = gated ? 2 * nq : 0;
    if (cd > wmix)
        wmix = cd;
    if (vd > nq && m->n_gdn_layers)
        nq = vd; /* o also holds the GDN output rows */
    const struct {
        struct vk_buf *b;
        size_t bytes;
        bool host;
    } bs[] = {
        { &c->x, B * (size_t)c->xw * 4, false }, { &c->h, B * E * 4, false },   { &c->qkv, B * wqkv * 4, false },
        { &c->o, B * nq * 4, false }, { &c->fg, ff * 4, false },     { &c->fu, ff * 4, false },
        { &c->tok, B * 16, true },    { &c->cs, B * (size_t)(hp->n_rot > 0 ? hp->n_rot : 1) * 4, true },
        { &c->logit, (size_t)VK_LOGIT_ROWS * (size_t)hp->n_vocab * 4, true }, { &c->orow, B * 4, true },
        { &c->rl, B * X * 4, true },  { &c->midx, BK * 4, true },    { &c->mslot, BK * 4, true },
        { &c->mw, BK * 4, true },     { &c->ex, K ? BK * E * 4 : 4, false }, { &c->ey, K ? BK * E * 4 : 4, false },
        { &c->grp, gated ? B * 5 * 4 : 4, true }, { &c->mix, B * wmix * 4, false }, { &c->y, B * cd * 4, false },
        { &c->z, m->n_gdn_layers ? B * vd * 4 : 4, false }, { &c->beta, B * HV * 4, false },
        { &c->gd, B * HV * 4, false }, { &c->sh, hp->n_ff_shexp ? B * E * 4 : 4, false },
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
    if (!rc && c->hc_on)
        rc = alloc_qwen4exp(c, e);
    if (!rc && gated)
        rc = alloc_recurrent(c, e);
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
    c->hc_on = m->arch->hc;
    c->xw = c->hc_on ? hp->hc * hp->n_embd : hp->n_embd;
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
    if (hp->n_ff_shexp > widest)
        widest = hp->n_ff_shexp;
    if (m->n_gdn_layers && hp->n_v_heads * hp->d_state > widest) /* ssm_out's input */
        widest = hp->n_v_heads * hp->d_state;
    if (c->hc_on && c->xw > widest) /* the HC down and inject products read a whole residual */
        widest = c->xw;
    if (c->hc_on && hp->hc_lr > widest)
        widest = hp->hc_lr;
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

/* A sublayer's input into h: rmsnorm(x) · norm, or with hyper-connections its HC mix (whose write-back
 * logits vk_hc_combine uses after the sublayer). */
static int sub_in(struct vk_engine *c, const struct vk_hc_mix *mix, uint32_t norm, int n, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    const float eps = c->m->hp.rms_eps;
    if (c->hc_on)
        return vk_hc_mix(&c->hc, &c->ops, mix, &c->vecs, rows_of(&c->x, (uint32_t)c->xw), rows_of(&c->h, E), n, eps,
                         e);
    return vk_op_norm(&c->ops, rows_of(&c->x, E), rows_of(&c->h, E), (int)E, 1, n, &c->vecs, norm, eps, e);
}

/* Where a sublayer adds its output: the residual x, or with hyper-connections `a` (zeroed here), which
 * sub_done writes back into every stream. */
static struct vk_view sub_out(struct vk_engine *c, int n)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    if (!c->hc_on)
        return rows_of(&c->x, E);
    vk_rt_copy(c->rt, &c->zero, 0, &c->a, 0, (size_t)n * E * 4);
    return rows_of(&c->a, E);
}

static int sub_done(struct vk_engine *c, int n, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    return c->hc_on ? vk_hc_combine(&c->hc, &c->ops, rows_of(&c->x, (uint32_t)c->xw), rows_of(&c->a, E), n, e) : 0;
}

static int op_embed(void *b, int n, struct err *e)
{
    struct vk_engine *c = b;
    if (!c->hc_on)
        return vk_op_embed(&c->ops, &c->embd, &c->tok, &c->x, n, e);
    /* every stream starts as the embedding */
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    int rc = vk_op_embed(&c->ops, &c->embd, &c->tok, &c->a, n, e);
    if (!rc)
        rc = vk_op_copy_heads(&c->ops, rows_of(&c->a, E), 0, rows_of(&c->x, (uint32_t)c->xw), E, (int)E, c->m->hp.hc,
                              n, e);
    return rc;
}

/* With q, k and v of n tokens side by side in qkv's rows (q | k | v): the q/k norms, RoPE, the K/V store and
 * causal attention into o's rows. Every token's K/V is stored first, so a token sees its sequence's
 * earlier batch tokens. */
static int attend(struct vk_engine *c, const struct layer *ly, const struct vk_layer *d, int n, bool sparse,
                  struct err *e)
{
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const int hd = hp->head_dim;
    const uint32_t nq = (uint32_t)(ly->n_head * hd), nkv = (uint32_t)(ly->n_head_kv * hd), W = nq + 2 * nkv;
    const struct vk_view Q = rows_of(&c->qkv, W), K = { &c->qkv, nq, W };
    const bool neox = c->m->arch->rope == ROPE_NEOX, f16 = !c->p.kv_f32;
    const int l = ly->kv_index;
    int rc = 0;
    if (d->q_norm != VK_NO_VEC)
        rc = vk_op_norm(o, Q, Q, hd, ly->n_head, n, &c->vecs, d->q_norm, hp->rms_eps, e);
    if (!rc && d->k_norm != VK_NO_VEC)
        rc = vk_op_norm(o, K, K, hd, ly->n_head_kv, n, &c->vecs, d->k_norm, hp->rms_eps, e);
    if (!rc)
        rc = vk_op_rope(o, Q, hd, hp->n_rot, neox, ly->n_head, n, &c->cs, e);
    if (!rc)
        rc = vk_op_rope(o, K, hd, hp->n_rot, neox, ly->n_head_kv, n, &c->cs, e);
    if (!rc)
        rc = vk_op_kv_store(o, &c->qkv, nq, nq + nkv, W, &c->kc[l], &c->vc[l], &c->tok, (int)nkv, c->p.n_ctx, f16, n,
                            e);
    if (!rc && sparse) /* the cells qsa_pick chose */
        rc = vk_op_attn_sel(o, Q, rows_of(&c->o, nq), &c->kc[l], &c->vc[l], &c->tok, &c->qsel, 0, (uint32_t)c->w_max,
                            (uint32_t)c->p.n_batch * (uint32_t)c->w_max, ly->n_head, ly->n_head_kv, hd, c->p.n_ctx,
                            f16, hp->kq_scale, n, e);
    else if (!rc)
        rc = vk_op_attn(o, Q, rows_of(&c->o, nq), &c->kc[l], &c->vc[l], &c->tok, ly->n_head, ly->n_head_kv, hd,
                        c->p.n_ctx, f16, hp->kq_scale, n, e);
    return rc;
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
    if (!rc)
        rc = attend(c, ly, d, n, false, e);
    if (!rc) /* x += wo·o + bo */
        rc = vk_op_mm(o, &d->wo, rows_of(&c->o, nq), X, n, &c->vecs, d->bo, true, e);
    return rc;
}

/* where GDN layer ly's conv state and delta-rule state start in a sequence's state */
static uint32_t conv_off(const struct vk_engine *c, const struct layer *ly)
{
    return (uint32_t)((size_t)ly->gdn_index * (c->conv_per + c->ssm_per));
}

/* x += ssm_out · (RMSNorm(o; ssm_norm) ⊙ silu(z)), o the delta rule over the conv'd, L2-normed projection
 * (arch-qwen35.md §6.4; cpu_hybrid.c gdn_block) */
static int op_gdn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const struct layer *ly = s->ly;
    const struct vk_layer *d = &c->ly[s->il];
    const int D = hp->d_state, HV = hp->n_v_heads, HK = hp->n_k_heads;
    const uint32_t E = (uint32_t)hp->n_embd, VD = (uint32_t)(HV * D), CD = (uint32_t)(2 * HK * D) + VD;
    const struct vk_view H = rows_of(&c->h, E), MIX = rows_of(&c->mix, CD);
    const struct vk_view Y = rows_of(&c->y, CD), Z = rows_of(&c->z, VD), O = rows_of(&c->o, VD);
    const struct vk_view BT = rows_of(&c->beta, (uint32_t)HV), G = rows_of(&c->gd, (uint32_t)HV);
    const uint32_t st0 = conv_off(c, ly), stride = (uint32_t)c->per_seq, rows_off = 0;
    const uint32_t grp_off = (uint32_t)c->p.n_batch;
    int rc = sub_in(c, &d->hc_attn, d->attn_norm, n, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ssm_qkv, H, MIX, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ssm_z, H, Z, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ssm_beta, H, BT, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ssm_alpha, H, G, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_gdn_gates(o, BT, G, &c->vecs, d->ssm_dt, d->ssm_a, HV, n, e);
    if (!rc)
        rc = vk_op_gdn_conv(o, MIX, Y, &c->vecs, d->ssm_conv, &c->st, st0, stride, &c->grp, rows_off, grp_off,
                            c->n_grp, (int)CD, hp->d_conv, e);
    if (!rc) /* q and k heads, side by side at the start of each row */
        rc = vk_op_l2(o, Y, D, 2 * HK, n, hp->rms_eps, e);
    if (!rc)
        rc = vk_op_gdn_rec(o, Y, BT, G, O, &c->st, st0 + (uint32_t)c->conv_per, stride, &c->grp, rows_off, grp_off,
                           c->n_grp, HK, HV, D, e);
    if (!rc)
        rc = vk_op_norm(o, O, O, D, HV, n, &c->vecs, d->ssm_norm, hp->rms_eps, e);
    if (!rc)
        rc = vk_op_gate(o, O, (uint32_t)D, Z, (uint32_t)D, D, HV, n, hp->gdn_sigmoid_gate, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ssm_out, O, sub_out(c, n), n, NULL, VK_NO_VEC, true, e);
    if (!rc)
        rc = sub_done(c, n, e);
    return rc;
}

/* x += wo · (attention(q, k, v) ⊙ sigmoid(gate)): q/k RMSNorm, IMROPE (p_e pairs still in the host rows),
 * the query and its gate interleaved per head in wq's output (arch-qwen35.md §6.3) */
/* QSA (arch-qwen4exp.md §3.5): the indexer's projections of h come back (one submit); the host stores the
 * raw keys, pools the blocks that completed and picks each token's cells with num/qsa.c, as the CPU engine
 * does (the discrete choice is one piece of code), into the host-visible sel buffer that attn_sel reads. */
static int qsa_pick(struct vk_engine *c, const struct layer *ly, const struct vk_layer *d, int n, struct err *e)
{
    const struct hparams *hp = &c->m->hp;
    const int di = hp->d_idx, NI = hp->n_idx_head, r = ly->qsa_ratio, l = ly->qsa_index;
    const struct vk_view H = rows_of(&c->h, (uint32_t)hp->n_embd);
    int rc = vk_op_mm(&c->ops, &d->idx_q, H, rows_of(&c->qi, (uint32_t)(NI * di)), n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(&c->ops, &d->idx_k, H, rows_of(&c->kr, (uint32_t)di), n, NULL, VK_NO_VEC, false, e);
    if (rc || (rc = vk_rt_submit(c->rt, e)))
        return rc;
    const int32_t *tt = c->tok.map, *g = c->grp.map;
    float *qi = c->qi.map, *cs_rows = c->cs.map;
    const float *kr = c->kr.map;
    for (int t = 0; t < n; t++)
        qsa_cache_store(&c->qc, l, tt[4 * t + 2], tt[4 * t + 1], r, kr + (size_t)t * di);
    for (int i = 0; i < c->n_grp; i++) { /* each sequence's blocks completed by the batch */
        const int seq = g[c->p.n_batch + 4 * i], start = g[c->p.n_batch + 4 * i + 1], len = g[c->p.n_batch + 4 * i + 2];
        int pres = c->len[seq];
        for (int k = 0; k < len; k++)
            pres = tt[4 * g[start + k] + 1] + 1 > pres ? tt[4 * g[start + k] + 1] + 1 : pres;
        c->present[seq] = pres;
        int *valid = qsa_cache_valid(&c->qc, l, seq);
        for (int b = *valid; b < pres / r; b++) {
            float cs[2048];
            ops_rope_cache(cs, b * r, hp->n_rot, hp->freq_base, NULL, hp->freq_scale, hp->ext_factor,
                           hp->attn_factor, hp->corr_dims);
            qsa_block_key(qsa_cache_key(&c->qc, l, seq, b * r), r, di, ly->idx_k_norm.data, hp->rms_eps, hp->n_rot, cs,
                          qsa_cache_kb(&c->qc, l, seq, b));
        }
        if (pres / r > *valid)
            *valid = pres / r;
    }
    int32_t *sel = c->qsel.map, *nsel = sel + (size_t)c->p.n_batch * (size_t)c->w_max;
    for (int t = 0; t < n; t++) {
        const int p = tt[4 * t + 1], seq = tt[4 * t + 2];
        if (qsa_dense(p, r, hp->idx_top_k)) {
            nsel[t] = -1;
            continue;
        }
        float *q = qi + (size_t)t * (size_t)NI * (size_t)di;
        for (int h = 0; h < NI; h++) { /* the host's cos/sin rows are a text token's already (p_e pairs still) */
            ops_rms_norm(q + (size_t)h * di, q + (size_t)h * di, ly->idx_q_norm.data, di, hp->rms_eps);
            ops_rope_apply(q + (size_t)h * di, hp->n_rot, ROPE_NEOX, cs_rows + (size_t)t * hp->n_rot);
        }
        nsel[t] = qsa_select(q, NI, di, qsa_cache_kb(&c->qc, l, seq, 0), c->present[seq] / r, p, r, hp->idx_top_k,
                             c->qsc, c->qheap, sel + (size_t)t * (size_t)c->w_max);
    }
    return vk_rt_begin(c->rt, e);
}

static int op_gated_attn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const struct layer *ly = s->ly;
    const struct vk_layer *d = &c->ly[s->il];
    const int hd = hp->head_dim;
    const uint32_t E = (uint32_t)hp->n_embd;
    const uint32_t nq = (uint32_t)(ly->n_head * hd), nkv = (uint32_t)(ly->n_head_kv * hd), W = nq + 2 * nkv;
    const struct vk_view H = rows_of(&c->h, E), Q = rows_of(&c->qkv, W);
    const struct vk_view K = { &c->qkv, nq, W }, V = { &c->qkv, nq + nkv, W };
    const struct vk_view MIX = rows_of(&c->mix, 2 * nq), GATE = { &c->mix, (uint32_t)hd, 2 * nq };
    const struct vk_view OUT = rows_of(&c->o, nq);
    const bool sparse = ly->kind == LAYER_SPARSE_ATTN;
    int rc = sub_in(c, &d->hc_attn, d->attn_norm, n, e);
    if (!rc && sparse)
        rc = qsa_pick(c, ly, d, n, e);
    if (!rc)
        rc = vk_op_mm(o, &d->wq, H, MIX, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_copy_heads(o, MIX, 2 * (uint32_t)hd, Q, (uint32_t)hd, hd, ly->n_head, n, e);
    if (!rc)
        rc = vk_op_mm(o, &d->wk, H, K, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->wv, H, V, n, NULL, VK_NO_VEC, false, e);
    if (!rc) /* q/k norms, IMROPE (NEOX rotation: the arch rows say so), store, attention */
        rc = attend(c, ly, d, n, sparse, e);
    if (!rc)
        rc = vk_op_gate(o, OUT, (uint32_t)hd, GATE, 2 * (uint32_t)hd, hd, ly->n_head, n, true, e);
    if (!rc)
        rc = vk_op_mm(o, &d->wo, OUT, sub_out(c, n), n, NULL, VK_NO_VEC, true, e);
    if (!rc)
        rc = sub_done(c, n, e);
    return rc;
}

/* out += sigmoid(gate_inp_shexp · h) · down(silu(gate·h) ⊙ up·h): the shared expert of a MoE layer, on the
 * FFN's normed input h */
static int shared_expert(struct vk_engine *c, const struct vk_layer *d, struct vk_view out, int n, struct err *e)
{
    struct vk_ops *o = &c->ops;
    const struct hparams *hp = &c->m->hp;
    const uint32_t E = (uint32_t)hp->n_embd, F = (uint32_t)hp->n_ff_shexp;
    const struct vk_view H = rows_of(&c->h, E), SH = rows_of(&c->sh, E);
    int rc = vk_op_mm(o, &d->gsh, H, rows_of(&c->fg, F), n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ush, H, rows_of(&c->fu, F), n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_swiglu(o, &c->fg, &c->fu, (uint32_t)n * F, e);
    if (!rc)
        rc = vk_op_mm(o, &d->dsh, rows_of(&c->fg, F), SH, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_shexp_add(o, out, H, SH, &c->vecs, d->gate_inp_shexp, (int)E, n, e);
    return rc;
}

static int op_ffn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct vk_layer *d = &c->ly[s->il];
    const uint32_t E = (uint32_t)c->m->hp.n_embd, F = (uint32_t)s->ly->n_ff;
    const struct vk_view H = rows_of(&c->h, E);
    int rc = sub_in(c, &d->hc_ffn, d->ffn_norm, n, e);
    if (!rc)
        rc = vk_op_mm(o, &d->gate, H, rows_of(&c->fg, F), n, &c->vecs, d->b_gate, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->up, H, rows_of(&c->fu, F), n, &c->vecs, d->b_up, false, e);
    if (!rc)
        rc = vk_op_swiglu(o, &c->fg, &c->fu, (uint32_t)n * F, e);
    if (!rc) /* x += down·g + b_down */
        rc = vk_op_mm(o, &d->down, rows_of(&c->fg, F), sub_out(c, n), n, &c->vecs, d->b_down, true, e);
    if (!rc)
        rc = sub_done(c, n, e);
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
    int rc = sub_in(c, &d->hc_ffn, d->ffn_norm, n, e);
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
    const struct vk_view out = sub_out(c, n);
    if (!rc)
        rc = vk_op_moe_combine(o, &c->ey, &c->mslot, &c->mw, out.b, (int)E, K, n, e);
    if (!rc && d->dsh.rows)
        rc = shared_expert(c, d, out, n, e);
    if (!rc)
        rc = sub_done(c, n, e);
    return rc;
}

/* h[r] = rmsnorm(x[rows[r]]) · output_norm for r < nr: the rows the output (or the hidden states) reads,
 * gathered in order and normed on their own */
static int gather_normed(struct vk_engine *c, const int *rows, int nr, struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd;
    memcpy(c->orow.map, rows, sizeof(int) * (size_t)nr);
    const struct vk_view H = rows_of(&c->h, E);
    if (c->hc_on) { /* the whole residuals, then the output mixer */
        const uint32_t W = (uint32_t)c->xw;
        int rc = vk_op_gather(&c->ops, rows_of(&c->x, W), rows_of(&c->xo, W), &c->orow, 0, (int)W, nr, e);
        if (!rc)
            rc = vk_hc_mix(&c->hc, &c->ops, &c->out_hc, &c->vecs, rows_of(&c->xo, W), H, nr, c->m->hp.rms_eps, e);
        return rc;
    }
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

/* RMSNorm of each stream of n rows (src, dst: rows of the residual's width) times its slice of w */
static int norm_streams(struct vk_engine *c, const struct vk_buf *src, const struct vk_buf *dst, uint32_t w, int n,
                        struct err *e)
{
    const uint32_t E = (uint32_t)c->m->hp.n_embd, W = (uint32_t)c->xw;
    int rc = 0;
    for (int s = 0; !rc && s < c->m->hp.hc; s++) {
        const uint32_t so = (uint32_t)s * E;
        rc = vk_op_norm(&c->ops, (struct vk_view){ src, so, W }, (struct vk_view){ dst, so, W }, (int)E, 1, n,
                        &c->vecs, w + so, c->m->hp.rms_eps, e);
    }
    return rc;
}

/* x += G + silu(conv(norm(G))) (arch-qwen4exp.md §3.6): the n-gram rows gathered on the host with num/ple.c
 * (the table stays in the mapped file; the real one is 26.8 GiB), the rest on the device; the conv's
 * history is part of each sequence's state. */
static int op_ple(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct vk_engine *c = b;
    struct vk_ops *o = &c->ops;
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const struct vk_layer *d = &c->ly[s->il];
    const uint32_t E = (uint32_t)hp->n_embd, W = (uint32_t)c->xw;
    const int32_t *tt = c->tok.map;
    for (int t = 0; t < n; t++) /* first every token of the batch: later ones read earlier ones as context */
        c->tok_hist[(size_t)tt[4 * t + 2] * (size_t)c->p.n_ctx + (size_t)tt[4 * t + 1]] = tt[4 * t];
    const struct ple_hash h = { .ngram = hp->ple_ngram, .heads_per_ngram = hp->ple_heads_per_ngram,
                                .eos = hp->ple_eos, .mult = hp->ple_mult, .off = hp->ple_off, .vocab = hp->ple_vocab,
                                .d_ple = hp->d_ple, .type = m->ple_embd.type, .table = m->ple_embd.data,
                                .row_bytes = m->ple_embd.row_bytes };
    float *pe = c->pe.map;
    for (int t = 0; t < n; t++)
        ple_gather(&h, c->tok_hist + (size_t)tt[4 * t + 2] * (size_t)c->p.n_ctx, tt[4 * t + 1], tt[4 * t],
                   pe + (size_t)t * E);
    const struct vk_view PE = rows_of(&c->pe, E), PKEY = rows_of(&c->pkey, W), PVAL = rows_of(&c->pval, E);
    int rc = vk_op_mm(o, &d->ple_key, PE, PKEY, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_mm(o, &d->ple_value, PE, PVAL, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = norm_streams(c, &c->pkey, &c->pkey, d->ple_nk, n, e);
    if (!rc) /* the query: the residual itself, normed per stream */
        rc = norm_streams(c, &c->x, &c->pq, d->ple_nq, n, e);
    if (!rc)
        rc = vk_op_ple_gate(o, PKEY, rows_of(&c->pq, W), PVAL, rows_of(&c->pg, W), (int)E, hp->hc, n, e);
    if (!rc)
        rc = norm_streams(c, &c->pg, &c->pn, d->ple_nc, n, e);
    if (!rc)
        rc = vk_op_ple_conv(o, rows_of(&c->pn, W), rows_of(&c->pc, W), &c->vecs, d->ple_conv, &c->st,
                            (uint32_t)c->ple_off, (uint32_t)c->per_seq, &c->grp, 0, (uint32_t)c->p.n_batch, c->n_grp,
                            (int)W, hp->ple_kernel, hp->ple_ngram, e);
    if (!rc)
        rc = vk_op_add2(o, rows_of(&c->x, W), rows_of(&c->pg, W), rows_of(&c->pc, W), (int)W, n, e);
    return rc;
}

static const struct layer_ops vk_layer_ops = {
    .embed = op_embed,
    .mixer = { [LAYER_ATTN] = op_attention, [LAYER_GDN] = op_gdn, [LAYER_GATED_ATTN] = op_gated_attn,
               [LAYER_SPARSE_ATTN] = op_gated_attn },
    .ffn = { [FFN_DENSE] = op_ffn, [FFN_MOE] = op_ffn_moe },
    .output = op_output,
    .ple = op_ple,
    .hyper_connections = true,
};

/* ---- the step ---- */

/* The batch rows by sequence, in batch order inside a sequence, into the host-visible grp buffer: the row
 * list, then per group {seq, start, len, 0} after n_batch ints (vk_ops.h) */
static void group_rows(struct vk_engine *c, const struct engine_tok *toks, int n)
{
    int32_t *rows = c->grp.map, *grp = rows + c->p.n_batch;
    int filled = 0;
    c->n_grp = 0;
    for (int t = 0; t < n; t++) {
        bool seen = false;
        for (int i = 0; i < c->n_grp && !seen; i++)
            seen = grp[4 * i] == toks[t].seq;
        if (seen)
            continue;
        int32_t *gi = grp + 4 * c->n_grp++;
        gi[0] = toks[t].seq;
        gi[1] = filled;
        for (int u = t; u < n; u++)
            if (toks[u].seq == toks[t].seq)
                rows[filled++] = u;
        gi[2] = filled - gi[1];
        gi[3] = 0;
    }
}

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
        for (int i = 0; c->pe_pair && i < hp->n_rot / 2; i++)
            if (c->pe_pair[i]) { /* a text token's p_e is 0: that pair does not rotate */
                cs[(size_t)t * hp->n_rot + 2 * i] = 1.0f;
                cs[(size_t)t * hp->n_rot + 2 * i + 1] = 0.0f;
            }
    }
    if (m->arch->hybrid)
        group_rows(c, toks, n);
    c->logits = logits;
    c->pendn = 0;
    if ((rc = vk_rt_begin(c->rt, e)))
        return rc;
    const int32_t *g = c->grp.map;
    for (int i = 0; c->per_seq && i < c->n_grp; i++) /* a sequence starting again: zero state */
        if (toks[g[g[c->p.n_batch + 4 * i + 1]]].pos == 0)
            vk_rt_copy(c->rt, &c->zero, 0, &c->st, (size_t)g[c->p.n_batch + 4 * i] * c->per_seq * 4, c->per_seq * 4);
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

/* ---- sequences: the KV cells, and the hybrids' recurrent state with its snapshots ----
 * The rules are the CPU engine's (cpu_hybrid.h): a recurrent state folds in every position, so a sequence
 * of a model with GDN layers is cut back only to 0, its length, or a snapshot position. */

static bool seq_ok(const struct vk_engine *c, int seq) { return seq >= 0 && seq < c->p.n_seq; }

static struct snap_slot *slots_of(const struct vk_engine *c, int seq) { return c->slots + (size_t)seq * c->n_snap; }

/* byte offsets of sequence seq's state and of its snapshot i */
static size_t st_at(const struct vk_engine *c, int seq) { return (size_t)seq * c->per_seq * 4; }
static size_t snap_at(const struct vk_engine *c, int seq, int i)
{
    return ((size_t)seq * (size_t)c->n_snap + (size_t)i) * c->per_seq * 4;
}

static int vk_seq_len(const void *b, int seq)
{
    const struct vk_engine *c = b;
    return seq_ok(c, seq) ? c->len[seq] : 0;
}

/* one device copy as a step of its own */
static int copy_now(struct vk_engine *c, const struct vk_buf *src, size_t soff, const struct vk_buf *dst, size_t doff,
                    size_t n, struct err *e)
{
    int rc = vk_rt_begin(c->rt, e);
    if (rc)
        return rc;
    vk_rt_copy(c->rt, src, soff, dst, doff, n);
    return vk_rt_submit(c->rt, e);
}

static int vk_seq_restore(void *b, int seq, int pos, struct err *e)
{
    struct vk_engine *c = b;
    if (!seq_ok(c, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, c->p.n_seq);
    if (pos < 0)
        pos = 0;
    if (pos >= c->len[seq])
        return 0;
    if (c->per_seq && pos > 0) {
        const int i = snap_find(slots_of(c, seq), c->n_snap, pos);
        if (i < 0)
            return err_set(e, ERR_UNSUPPORTED,
                           "engine: sequence %d cannot be cut back from %d to %d: a recurrent (Gated DeltaNet) "
                           "state only rolls back to 0 or to a snapshot position (engine_seq_snapshot)",
                           seq, c->len[seq], pos);
        int rc = copy_now(c, &c->snap, snap_at(c, seq, i), &c->st, st_at(c, seq), c->per_seq * 4, e);
        if (rc)
            return rc;
    }
    if (c->per_seq) /* snapshots past the new length no longer describe its cells */
        snap_drop_after(slots_of(c, seq), c->n_snap, pos);
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
    int from = -2; /* the state dst gets: -1 src's own, i ≥ 0 src's snapshot i, -2 none (empty) */
    if (c->per_seq && n > 0 && n == c->len[src]) {
        from = -1;
    } else if (c->per_seq && n > 0 && (from = snap_find(slots_of(c, src), c->n_snap, n)) < 0) {
        return err_set(e, ERR_UNSUPPORTED,
                       "engine: cannot copy the first %d of %d positions of sequence %d: a recurrent state "
                       "exists only at its length, 0 and snapshot positions", n, c->len[src], src);
    }
    if (src == dst) /* a copy onto itself is a cut back */
        return vk_seq_restore(c, src, n, e);
    int rc = vk_rt_begin(c->rt, e);
    if (rc)
        return rc;
    const size_t elt = c->p.kv_f32 ? 4 : 2;
    for (int l = 0; n > 0 && l < c->m->n_kv_layers; l++) {
        const size_t row = (size_t)c->kv_dim[l] * elt, seq_bytes = (size_t)c->p.n_ctx * row;
        vk_rt_copy(c->rt, &c->kc[l], (size_t)src * seq_bytes, &c->kc[l], (size_t)dst * seq_bytes, (size_t)n * row);
        vk_rt_copy(c->rt, &c->vc[l], (size_t)src * seq_bytes, &c->vc[l], (size_t)dst * seq_bytes, (size_t)n * row);
    }
    if (c->per_seq) {
        const size_t bytes = c->per_seq * 4;
        if (from == -1)
            vk_rt_copy(c->rt, &c->st, st_at(c, src), &c->st, st_at(c, dst), bytes);
        else if (from >= 0)
            vk_rt_copy(c->rt, &c->snap, snap_at(c, src, from), &c->st, st_at(c, dst), bytes);
        else
            vk_rt_copy(c->rt, &c->zero, 0, &c->st, st_at(c, dst), bytes);
        /* dst inherits src's snapshots inside the copied prefix */
        struct snap_slot *ds = slots_of(c, dst), *ss = slots_of(c, src);
        for (int i = 0; i < c->n_snap; i++) {
            ds[i].pos = -1;
            if (ss[i].pos < 0 || ss[i].pos > n)
                continue;
            vk_rt_copy(c->rt, &c->snap, snap_at(c, src, i), &c->snap, snap_at(c, dst, i), bytes);
            ds[i] = ss[i];
        }
    }
    if ((rc = vk_rt_submit(c->rt, e)))
        return rc;
    if (c->tok_hist && n > 0) /* qwen4exp's per-cell host state moves with the cells */
        memcpy(c->tok_hist + (size_t)dst * (size_t)c->p.n_ctx, c->tok_hist + (size_t)src * (size_t)c->p.n_ctx,
               sizeof(int) * (size_t)n);
    if (c->m->n_qsa_layers)
        qsa_cache_copy(&c->qc, src, dst, n);
    c->len[dst] = n;
    return 0;
}

static int vk_seq_snapshot(void *b, int seq, struct err *e)
{
    struct vk_engine *c = b;
    if (!seq_ok(c, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, c->p.n_seq);
    const int pos = c->len[seq];
    if (!c->per_seq || pos == 0)
        return 0; /* attention state is the cells themselves; position 0 is the empty state */
    const int i = snap_slot_for(slots_of(c, seq), c->n_snap, pos);
    int rc = copy_now(c, &c->st, st_at(c, seq), &c->snap, snap_at(c, seq, i), c->per_seq * 4, e);
    if (!rc)
        snap_take(&slots_of(c, seq)[i], pos, &c->stamp);
    return rc;
}

static int vk_seq_restorable(const void *b, int seq, int pos)
{
    const struct vk_engine *c = b;
    if (!seq_ok(c, seq) || pos <= 0)
        return 0;
    if (pos >= c->len[seq])
        return c->len[seq];
    if (!c->per_seq)
        return pos;
    return snap_restorable(slots_of(c, seq), c->n_snap, pos);
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
