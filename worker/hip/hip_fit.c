/* hip_fit.c — the device memory a model needs on the `hip` engine, and the
 * refusal with the numbers when the device has less free (hip_fit.h). */
#include "hip_fit.h"

#include <stdio.h>

#include "hip_scratch.h"
#include "hip_hybrid.h"

static uint64_t wt_bytes(const struct wt *w)
{
    if (!w->data)
        return 0;
    const uint64_t ne1 = w->ne[1] > 0 ? (uint64_t)w->ne[1] : 1, ne2 = w->ne[2] > 0 ? (uint64_t)w->ne[2] : 1;
    return (uint64_t)w->row_bytes * ne1 * ne2;
}

static uint64_t vec_bytes(const struct vec *v) { return v->data ? 4u * (uint64_t)v->n : 0; }

void hip_fit_need(const struct model *m, const struct engine_params *p, struct hip_fit *f)
{
    const struct hparams *hp = &m->hp;
    /* the tensors hip_engine_create uploads: the output is uploaded on its own even when tied */
    uint64_t w = wt_bytes(&m->tok_embd) + wt_bytes(&m->output) + vec_bytes(&m->output_norm) +
                 vec_bytes(&m->output_bias);
    uint64_t kv = 0;
    const uint64_t elt = p->kv_f32 ? 4 : 2;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct layer *ly = &m->layers[il];
        /* the hybrids' GDN and shared-expert tensors are uploaded by hip_hybrid.c */
        const struct wt *ws[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wqkv, &ly->wo, &ly->ffn_gate, &ly->ffn_up,
                                  &ly->ffn_down, &ly->gate_inp, &ly->gate_exps, &ly->up_exps, &ly->down_exps,
                                  &ly->ssm_qkv, &ly->ssm_z, &ly->ssm_beta, &ly->ssm_alpha, &ly->ssm_out,
                                  &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp };
        const struct vec *vs[] = { &ly->attn_norm, &ly->ffn_norm, &ly->q_norm, &ly->k_norm, &ly->bq, &ly->bk,
                                   &ly->bv, &ly->bqkv, &ly->bo, &ly->b_gate, &ly->b_up, &ly->b_down,
                                   &ly->ssm_conv, &ly->ssm_dt, &ly->ssm_a, &ly->ssm_norm, &ly->gate_inp_shexp };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
            w += wt_bytes(ws[i]);
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
            w += vec_bytes(vs[i]);
        if (ly->kv_index >= 0)
            kv += 2 * (uint64_t)p->n_seq * (uint64_t)p->n_ctx * (uint64_t)ly->n_head_kv * (uint64_t)hp->head_dim * elt;
    }
    f->weights = w;
    f->kv = kv;
    struct hip_hybrid_plan hy;
    hip_hybrid_plan(m, p, &hy);
    f->act = hip_scratch_bytes(m, p) + hy.scratch;
    f->state = hy.state;
    f->snap = hy.snap;
    f->state_per_seq = hy.per_seq;
    f->n_snap = hy.n_snap;
    f->reserve = HIP_FIT_RESERVE;
}

uint64_t hip_fit_total(const struct hip_fit *f)
{
    return f->weights + f->kv + f->act + f->state + f->snap + f->reserve;
}

/* "14.40 GiB", "384.0 MiB" */
static const char *human(uint64_t b, char *out, size_t cap)
{
    if (b >= (1ull << 30))
        snprintf(out, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
    else
        snprintf(out, cap, "%.1f MiB", (double)b / (double)(1ull << 20));
    return out;
}

int hip_fit_check(const struct hip_fit *f, uint64_t free_bytes, const char *device, const struct engine_params *p,
                  struct err *e)
{
    const uint64_t need = hip_fit_total(f);
    if (need <= free_bytes)
        return 0;
    char t[32], w[32], kv[32], st[32], sn[32], per[32], sc[32], rs[32], fr[32];
    /* the recurrent parts only where there is recurrent state (hybrids) */
    char rec[160] = "", lower[64] = "";
    if (f->state_per_seq) {
        snprintf(rec, sizeof rec, ", states %s, snapshots %s (%d per slot of %s)", human(f->state, st, sizeof st),
                 human(f->snap, sn, sizeof sn), f->n_snap, human(f->state_per_seq, per, sizeof per));
        snprintf(lower, sizeof lower, ", the snapshots (n_snap %d)", f->n_snap);
    }
    return err_set(e, ERR_NOMEM,
                   "hip: model does not fit: needs %s: weights %s, KV %s (%d x %d positions)%s, scratch %s, "
                   "reserve %s; %s has %s free; lower the context (n_ctx %d), the slots (n_seq %d)%s, or use a "
                   "smaller quantization",
                   human(need, t, sizeof t), human(f->weights, w, sizeof w), human(f->kv, kv, sizeof kv), p->n_seq,
                   p->n_ctx, rec, human(f->act, sc, sizeof sc), human(f->reserve, rs, sizeof rs),
                   device ? device : "the device", human(free_bytes, fr, sizeof fr), p->n_ctx, p->n_seq, lower);
}
