/* hip_hybrid.c — qwen35 / qwen35moe layers on the device (see
 * hip_hybrid.h; math in shared spec arch-qwen35.md §6, CPU mirror in
 * cpu_hybrid.c).
 *
 * Weight products go through hip_ops.c's launch helpers (hip_ops_mm: GEMV
 * for decode-sized batches, tiled GEMM otherwise); the conv, the delta rule,
 * the gated norm and the gates are kernels/gdn.cu. A step's launches depend
 * only on the batch size (the grouping of rows by sequence is data the host
 * writes before the step), so decode steps are captured and replayed as
 * graphs like the attention-only models.
 *
 * Recurrent state per sequence, device-resident, one slab per GDN layer:
 * conv state [d_conv−1][conv_dim], then the delta-rule state [H_v][d_k][d_v]
 * (column-major to the CPU's [d_v][d_k], so a warp's lanes read consecutive
 * value columns). A group whose first row is position 0 starts from zero
 * state inside the kernels: no clearing launch. Snapshots are device copies
 * of a sequence's whole state, allocated on first use. */
#include "hip_hybrid.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/gdn_args.h"
#include "../backend/snap.h"

struct hlayer {       /* a GDN layer's device weights (and any layer's shared expert) */
    struct dw qkv, z, beta, alpha, out; /* ssm_qkv [E→conv_dim], ssm_z [E→value_dim], β/α [E→H_v], [value_dim→E] */
    struct hip_dptr conv;   /* [conv_dim][d_conv] */
    struct hip_dptr dt, A;  /* [H_v] */
    struct hip_dptr norm;   /* [d_v] */
    struct dw sh_gate, sh_up, sh_down; /* [E→F_s], [E→F_s], [F_s→E] */
    struct hip_dptr sh_inp; /* [E] shared-expert gate */
};

struct hip_hybrid {
    struct hip_ops *o;     /* the engine's launch core (hip_ops.h) */
    const struct model *m;
    struct hlayer *L;        /* [n_layer] */
    int n_seq, n_batch, n_snap;
    int key_dim, value_dim, conv_dim;
    size_t conv_per;         /* floats of one layer's conv state */
    size_t ssm_per;          /* floats of one layer's delta-rule state */
    size_t per_seq;          /* floats of one sequence's state over all GDN layers */
    struct hip_dptr state;   /* [n_seq][per_seq] */
    struct snap_slot *slots; /* [n_seq][n_snap] which position each snapshot holds (snap.h) */
    struct hip_dptr *snap_state; /* [n_seq][n_snap] → [per_seq] floats on the device, in snaps */
    struct hip_dptr snaps;   /* [n_seq][n_snap][per_seq] every snapshot's state, allocated at create */
    uint64_t stamp;
    unsigned char *pe_pair;  /* [n_rot/2] 1 where IMROPE takes p_e (angle 0 for text) */
    hip_fn k_conv, k_rec, k_gnorm, k_split, k_gate, k_shexp, k_rope, k_attn, k_comb, k_swiglu;
    hip_fn k_conv_tok, k_conv_state, k_cprep, k_cscan; /* prefill: token-parallel conv, chunked delta rule */
    int chunk_min;           /* a step whose longest group has this many rows takes the chunked delta rule
                                (batches over GEMV size only); 0: never (hip_knobs.gdn_chunk) */
    int n_grp, n_chunk, max_len; /* of the step hip_hybrid_prepare grouped */
    /* scratch (device), B = n_batch */
    struct hip_dptr mix;     /* [B][max(conv_dim, 2·nq_max)] GDN projection / gated query+gate */
    struct hip_dptr y;       /* [B][conv_dim] conv output q | k | v */
    struct hip_dptr z;       /* [B][value_dim] output gate */
    struct hip_dptr b, a;    /* [B][H_v] raw β and α projections */
    struct hip_dptr og;      /* [B][max(value_dim, nq_max)] GDN output */
    struct hip_dptr gate;    /* [B][nq_max] gated attention's sigmoid gate input */
    struct hip_dptr sg, su;  /* [B][F_s] shared-expert gate / up */
    struct hip_dptr sy;      /* [B][E] shared-expert output */
    struct hip_dptr wu;      /* [B][H_v][d_k + d_v] chunked form's W | U (0 when n_batch ≤ GEMV size) */
    struct hip_dptr p;       /* [B][H_v][GDN_CK] chunked form's q̂·k̂ decay products */
    struct hip_dptr sc;      /* [B][H_v][4] chunked form's per-step scales */
    struct hip_dptr grp;     /* ints [GDN_GRP_INTS(B)]: struct gdn_groups's arrays */
    int32_t *grp_h;          /* pinned mirror of grp */
};

/* whether GEMVs over k inputs run on a q8 copy, and weight type t (t < 0: any) has such a kernel */
static bool want_q8_t(const struct hip_ops *o, int k, int t)
{
    return hip_ops_want_q8(o, k) && (t < 0 || o->gemvq[t]);
}

static struct gdn_groups groups_of(const struct hip_hybrid *hy)
{
    const uint64_t B = (uint64_t)hy->n_batch, g = hy->grp.a;
    return (struct gdn_groups){ .n_grp = g, .rows = g + 4, .seq = g + 4 + 4 * B, .start = g + 4 + 8 * B,
                                .len = g + 4 + 12 * B, .fresh = g + 4 + 16 * B, .row_grp = g + 4 + 20 * B,
                                .row_step = g + 4 + 24 * B, .ck_grp = g + 4 + 28 * B, .ck_c0 = g + 4 + 32 * B };
}

void hip_hybrid_free(struct hip_hybrid *hy)
{
    if (!hy)
        return;
    if (hy->grp_h) {
        const struct hip_ops *l = hy->o;
        hip_rt_host_free(l->rt, hy->grp_h);
    }
    free(hy->L);
    free(hy->slots);
    free(hy->snap_state);
    free(hy->pe_pair);
    free(hy);
}

/* Floats of one sequence's recurrent state: the conv window and the delta-rule state of every GDN
 * layer (the layout hip_hybrid_create allocates). */
static size_t hb_state_floats(const struct model *m)
{
    const struct hparams *hp = &m->hp;
    const size_t conv_dim = 2 * (size_t)hp->n_k_heads * (size_t)hp->d_state + (size_t)hp->n_v_heads * (size_t)hp->d_state;
    const size_t conv_per = conv_dim * (size_t)(hp->d_conv > 0 ? hp->d_conv - 1 : 0);
    const size_t ssm_per = (size_t)hp->n_v_heads * (size_t)hp->d_state * (size_t)hp->d_state;
    return (size_t)m->n_gdn_layers * (conv_per + ssm_per);
}

/* snapshots kept per sequence: p->n_snap resolved; 0 without GDN layers (nothing to snapshot) */
static int hb_n_snap(const struct model *m, const struct engine_params *p)
{
    if (!m->n_gdn_layers)
        return 0;
    return p->n_snap > 0 ? p->n_snap : ENGINE_N_SNAP_DEFAULT;
}

enum { HB_STATE, HB_SNAP, HB_MIX, HB_Y, HB_Z, HB_B, HB_A, HB_OG, HB_GATE, HB_SG, HB_SU, HB_SY, HB_WU, HB_P, HB_SC, HB_GRP,
       HB_COUNT };


/* Bytes of each device buffer hip_hybrid_create allocates (state and step scratch for n_batch rows). */
static void hb_sizes(const struct model *m, const struct engine_params *p, size_t sz[HB_COUNT])
{
    const struct hparams *hp = &m->hp;
    const size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, HV = (size_t)(hp->n_v_heads ? hp->n_v_heads : 1);
    const size_t nq = (size_t)hp->n_head_max * (size_t)hp->head_dim;
    const size_t cd = 2 * (size_t)hp->n_k_heads * (size_t)hp->d_state + (size_t)hp->n_v_heads * (size_t)hp->d_state;
    const size_t vd = (size_t)hp->n_v_heads * (size_t)hp->d_state, Fs = (size_t)(hp->n_ff_shexp ? hp->n_ff_shexp : 1);
    const size_t wmix = cd > 2 * nq ? cd : 2 * nq, wo = vd > nq ? vd : nq;
    const size_t state_n = (size_t)p->n_seq * hb_state_floats(m);
    sz[HB_STATE] = (state_n ? state_n : 1) * 4;
    sz[HB_SNAP] = (state_n ? state_n * (size_t)hb_n_snap(m, p) : 1) * 4;
    sz[HB_MIX] = B * wmix * 4;
    sz[HB_Y] = B * (cd ? cd : 1) * 4;
    sz[HB_Z] = B * (vd ? vd : 1) * 4;
    sz[HB_B] = sz[HB_A] = B * HV * 4;
    sz[HB_OG] = B * wo * 4;
    sz[HB_GATE] = B * (nq ? nq : 1) * 4;
    sz[HB_SG] = sz[HB_SU] = B * Fs * 4;
    sz[HB_SY] = B * E * 4;
    /* the chunked delta rule's per-chunk products, for engines that take prompts */
    const bool ck = B > HIP_GEMV_MAX && m->n_gdn_layers; /* only batches over the GEMV size are prompts */
    sz[HB_WU] = ck ? B * HV * 2 * (size_t)hp->d_state * 4 : 4;
    sz[HB_P] = ck ? B * HV * GDN_CK * 4 : 4;
    sz[HB_SC] = ck ? B * HV * 4 * 4 : 4;
    sz[HB_GRP] = GDN_GRP_INTS(B) * 4;
}

void hip_hybrid_plan(const struct model *m, const struct engine_params *p, struct hip_hybrid_plan *out)
{
    memset(out, 0, sizeof *out);
    if (!m->arch || !m->arch->hybrid)
        return;
    size_t sz[HB_COUNT];
    hb_sizes(m, p, sz);
    /* every buffer create allocates: the states and snapshots by name (their one-float placeholders on a
     * model without GDN layers count as scratch), the rest scratch */
    out->per_seq = 4u * (uint64_t)hb_state_floats(m);
    out->n_snap = hb_n_snap(m, p);
    for (int i = 0; i < HB_COUNT; i++)
        if (i == HB_STATE && out->per_seq)
            out->state = sz[i];
        else if (i == HB_SNAP && out->per_seq)
            out->snap = sz[i];
        else
            out->scratch += sz[i];
}

int hip_hybrid_create(struct hip_hybrid **out, struct hip_ops *c, const struct model *m,
                      const struct engine_params *p, struct stager *s, struct err *e)
{
    *out = NULL;
    const struct hparams *hp = &m->hp;
    if (m->n_gdn_layers && hp->d_state != 16 && hp->d_state != 32 && hp->d_state != 64 && hp->d_state != 128)
        return err_set(e, ERR_UNSUPPORTED, "hip: GDN state size %d (the kernels take 16, 32, 64 or 128)",
                       hp->d_state);
    if (m->n_gdn_layers && (hp->d_conv < 1 || hp->d_conv > 8))
        return err_set(e, ERR_UNSUPPORTED, "hip: GDN conv kernel of %d taps (the kernel takes 1..8)", hp->d_conv);
    struct hip_hybrid *hy = calloc(1, sizeof *hy);
    if (!hy)
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    hy->o = c;
    hy->m = m;
    hy->n_seq = p->n_seq;
    hy->n_batch = p->n_batch;
    hy->n_snap = p->n_snap > 0 ? p->n_snap : ENGINE_N_SNAP_DEFAULT;
    hy->key_dim = hp->n_k_heads * hp->d_state;
    hy->value_dim = hp->n_v_heads * hp->d_state;
    hy->conv_dim = 2 * hy->key_dim + hy->value_dim;
    hy->conv_per = (size_t)hy->conv_dim * (size_t)(hp->d_conv > 0 ? hp->d_conv - 1 : 0);
    hy->ssm_per = (size_t)hp->n_v_heads * (size_t)hp->d_state * (size_t)hp->d_state;
    hy->per_seq = hb_state_floats(m);
    hy->L = calloc((size_t)hp->n_layer, sizeof *hy->L);
    hy->slots = calloc((size_t)p->n_seq * (size_t)hy->n_snap, sizeof *hy->slots);
    hy->snap_state = calloc((size_t)p->n_seq * (size_t)hy->n_snap, sizeof *hy->snap_state);
    hy->pe_pair = calloc((size_t)hp->n_rot / 2 + 1, 1);
    if (!hy->L || !hy->slots || !hy->snap_state || !hy->pe_pair) {
        hip_hybrid_free(hy);
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    }
    snap_slots_clear(hy->slots, p->n_seq * hy->n_snap);
    ops_imrope_text_pairs(hp->rope_sections, hp->n_rot, hy->pe_pair);

    const struct hip_ops *l = c;
    char nm[32], nprep[32], nscan[32];
    snprintf(nm, sizeof nm, "gdn_rec_%d", hp->d_state);
    snprintf(nprep, sizeof nprep, "gdn_chunk_prep_%d", hp->d_state);
    snprintf(nscan, sizeof nscan, "gdn_chunk_scan_%d", hp->d_state);
    struct { hip_fn *f; const char *n; } ks[] = {
        { &hy->k_conv, "gdn_conv" }, { &hy->k_gnorm, "gdn_gnorm" },
        { &hy->k_split, "gattn_split" }, { &hy->k_gate, "gattn_gate" }, { &hy->k_shexp, "shexp_add" },
        { &hy->k_rope, "rope_store" }, { &hy->k_attn, "attn" }, { &hy->k_comb, "attn_combine" },
        { &hy->k_swiglu, "swiglu_f32" }, { &hy->k_conv_tok, "gdn_conv_tok" }, { &hy->k_conv_state, "gdn_conv_state" },
        { &hy->k_rec, nm }, { &hy->k_cprep, nprep }, { &hy->k_cscan, nscan }, /* d_state-sized: GDN models only */
    };
    const size_t n_fixed = sizeof ks / sizeof ks[0] - 3;
    int rc = 0;
    for (size_t i = 0; i < sizeof ks / sizeof ks[0] && !rc; i++)
        if (i < n_fixed || m->n_gdn_layers)
            rc = hip_rt_fn(l->rt, ks[i].n, ks[i].f, e);
    /* chunked delta rule for a step whose longest sequence run has at least this many rows */
    hy->chunk_min = l->k.gdn_chunk;
    if (p->n_batch <= HIP_GEMV_MAX || hy->chunk_min < 0)
        hy->chunk_min = 0;

    for (int il = 0; il < hp->n_layer && !rc; il++) {
        const struct layer *ly = &m->layers[il];
        struct hlayer *d = &hy->L[il];
        const struct wt *ws[] = { &ly->ssm_qkv, &ly->ssm_z, &ly->ssm_beta, &ly->ssm_alpha, &ly->ssm_out,
                                  &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp };
        struct dw *dws[] = { &d->qkv, &d->z, &d->beta, &d->alpha, &d->out, &d->sh_gate, &d->sh_up, &d->sh_down };
        for (size_t i = 0; i < sizeof ws / sizeof ws[0] && !rc; i++)
            rc = hip_ops_up_wt(c, s, ws[i], dws[i], e);
        const struct vec *vs[] = { &ly->ssm_conv, &ly->ssm_dt, &ly->ssm_a, &ly->ssm_norm, &ly->gate_inp_shexp };
        struct hip_dptr *dvs[] = { &d->conv, &d->dt, &d->A, &d->norm, &d->sh_inp };
        for (size_t i = 0; i < sizeof vs / sizeof vs[0] && !rc; i++)
            rc = hip_ops_up_vec(c, s, vs[i], dvs[i], e);
        if (!rc && ly->kind == LAYER_GDN && (hip_dptr_null(d->qkv.d) || hip_dptr_null(d->z.d) ||
                                            hip_dptr_null(d->beta.d) || hip_dptr_null(d->alpha.d) ||
                                            hip_dptr_null(d->out.d) || hip_dptr_null(d->conv) ||
                                            hip_dptr_null(d->dt) || hip_dptr_null(d->A) || hip_dptr_null(d->norm)))
            rc = err_set(e, ERR_FORMAT, "hip: GDN layer %d lacks a tensor", il);
    }

    size_t sz[HB_COUNT];
    hb_sizes(m, p, sz);
    const size_t state_n = (size_t)p->n_seq * hy->per_seq;
    struct { struct hip_dptr *d; size_t n; } sc[] = {
        { &hy->state, sz[HB_STATE] }, { &hy->snaps, sz[HB_SNAP] }, { &hy->mix, sz[HB_MIX] }, { &hy->y, sz[HB_Y] }, { &hy->z, sz[HB_Z] },
        { &hy->b, sz[HB_B] }, { &hy->a, sz[HB_A] }, { &hy->og, sz[HB_OG] }, { &hy->gate, sz[HB_GATE] },
        { &hy->sg, sz[HB_SG] }, { &hy->su, sz[HB_SU] }, { &hy->sy, sz[HB_SY] }, { &hy->wu, sz[HB_WU] },
        { &hy->p, sz[HB_P] }, { &hy->sc, sz[HB_SC] }, { &hy->grp, sz[HB_GRP] },
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0] && !rc; i++)
        rc = hip_ops_dalloc(c, sc[i].n, sc[i].d, e);
    if (!rc && state_n)
        rc = hip_rt_memset32(l->rt, hy->state, 0, state_n, e);
    /* each snapshot slot's state in the slab: taking one is then a copy, never an allocation */
    for (size_t i = 0; !rc && state_n && i < (size_t)p->n_seq * (size_t)hy->n_snap; i++)
        hy->snap_state[i] = hip_dptr_off(hy->snaps, 4u * (uint64_t)i * (uint64_t)hy->per_seq);
    if (!rc)
        rc = hip_rt_host_alloc(l->rt, sz[HB_GRP], (void **)&hy->grp_h, e);
    if (rc) {
        hip_hybrid_free(hy);
        return rc;
    }
    *out = hy;
    return 0;
}

/* ---- one step ---- */

int hip_hybrid_prepare(struct hip_hybrid *hy, const struct engine_tok *toks, int n, float *cs, struct err *e)
{
    const struct hparams *hp = &hy->m->hp;
    for (int t = 0; t < n; t++)
        for (int i = 0; i < hp->n_rot / 2; i++)
            if (hy->pe_pair[i]) {
                cs[(size_t)t * hp->n_rot + 2 * i] = 1.0f;
                cs[(size_t)t * hp->n_rot + 2 * i + 1] = 0.0f;
            }
    /* rows grouped by sequence, batch order kept inside a group (cpu_hybrid.c's group_rows) */
    const int B = hy->n_batch;
    int32_t *h = hy->grp_h, *rows = h + 1, *gseq = rows + B, *gstart = gseq + B, *glen = gstart + B,
            *gfresh = glen + B, *rgrp = gfresh + B, *rstep = rgrp + B, *ckg = rstep + B, *ckc = ckg + B;
    int n_grp = 0, filled = 0, n_chunk = 0, max_len = 0;
    for (int t = 0; t < n; t++) {
        int g = 0;
        while (g < n_grp && gseq[g] != toks[t].seq)
            g++;
        if (g < n_grp)
            continue;
        gseq[g] = toks[t].seq;
        gstart[g] = filled;
        gfresh[g] = toks[t].pos == 0;
        int cnt = 0;
        for (int u = t; u < n; u++)
            if (toks[u].seq == toks[t].seq) {
                rgrp[u] = g;
                rstep[u] = cnt;
                rows[filled + cnt++] = u;
            }
        for (int c0 = 0; c0 < cnt; c0 += GDN_CK, n_chunk++) {
            ckg[n_chunk] = g;
            ckc[n_chunk] = c0;
        }
        glen[g] = cnt;
        max_len = cnt > max_len ? cnt : max_len;
        filled += cnt;
        n_grp++;
    }
    h[0] = n_grp;
    hy->n_grp = n_grp;
    hy->n_chunk = n_chunk;
    hy->max_len = max_len;
    const struct hip_ops *l = hy->o;
    return hip_rt_h2d(l->rt, hy->grp, h, GDN_GRP_INTS((size_t)B) * 4, e);
}

#define TRY(x)               \
    do {                     \
        if ((rc = (x)) != 0) \
            return rc;       \
    } while (0)

static unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

static bool same_shape(const struct dw *a, const struct dw *b)
{
    return a->type == b->type && a->ne0 == b->ne0 && a->ne1 == b->ne1;
}

static int gdn_layer(struct hip_hybrid *hy, const struct layer *ly, int il, int n, const struct hip_ops *l,
                     struct err *e)
{
    const struct hparams *hp = &hy->m->hp;
    const struct hlayer *d = &hy->L[il];
    const struct hip_ops_layer *at = &hy->o->L[il];
    const int E = hp->n_embd, cd = hy->conv_dim, vd = hy->value_dim, HV = hp->n_v_heads, dv = hp->d_state;
    int rc;
    const int qh = want_q8_t(hy->o, E, -1);
    TRY(hip_ops_rms(hy->o, l->h, l->x, at->attn_norm, HIP_DNULL, n, E, E, E, qh, false, e));
    TRY(hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &d->qkv, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->mix, .y_stride = cd, .q = qh,
    }, e));
    TRY(hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &d->z, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->z, .y_stride = vd, .q = qh,
    }, e));
    if (n <= HIP_GEMV_MAX && same_shape(&d->beta, &d->alpha)) {
        TRY(hip_ops_mm_dual(hy->o, &(struct hip_mm){
            .w = &d->beta, .w2 = &d->alpha, .x = l->h, .x_stride = E, .nz = n, .y = hy->b, .y2 = hy->a, .y_stride = HV,
            .q = qh,
        }, e));
    } else {
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &d->beta, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->b, .y_stride = HV, .q = qh,
        }, e));
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &d->alpha, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->a, .y_stride = HV, .q = qh,
        }, e));
    }
    const int64_t seq_stride = (int64_t)hy->per_seq;
    const struct hip_dptr st =
        hip_dptr_off(hy->state, 4u * (uint64_t)ly->gdn_index * (uint64_t)(hy->conv_per + hy->ssm_per));
    struct gdn_conv_args ca = {
        .g = groups_of(hy), .in = hy->mix.a, .out = hy->y.a, .w = d->conv.a, .state = st.a, .seq_stride = seq_stride,
        .conv_dim = cd, .d_conv = hp->d_conv,
    };
    void *cp[] = { &ca };
    /* a prompt: conv outputs token-parallel, then the state rolled forward; decode: one thread per
     * channel walking its group (fewer launches, and the step's graph stays as it was) */
    const bool prompt = n > HIP_GEMV_MAX && hy->chunk_min > 0;
    if (prompt) {
        TRY(hip_rt_launch(l->rt, hy->k_conv_tok, (unsigned)n, cdiv((size_t)cd, 128), 1, 128, cp, e));
        TRY(hip_rt_launch(l->rt, hy->k_conv_state, (unsigned)hy->n_grp, cdiv((size_t)cd, 128), 1, 128, cp, e));
    } else {
        TRY(hip_rt_launch(l->rt, hy->k_conv, (unsigned)n, cdiv((size_t)cd, 128), 1, 128, cp, e));
    }
    struct gdn_rec_args ra = {
        .g = groups_of(hy), .qkv = hy->y.a, .b = hy->b.a, .a = hy->a.a, .dt = d->dt.a, .A = d->A.a, .o = hy->og.a,
        .state = hip_dptr_off(st, 4u * (uint64_t)hy->conv_per).a, .seq_stride = seq_stride, .conv_dim = cd,
        .n_k_heads = hp->n_k_heads, .n_v_heads = HV, .d_v = dv, .scale = 1.0f / sqrtf((float)hp->d_state),
        .eps = hp->rms_eps, .wu = hy->wu.a, .p = hy->p.a, .sc = hy->sc.a,
    };
    void *rp[] = { &ra };
    if (prompt && hy->max_len >= hy->chunk_min) {
        /* chunked: every chunk's W, U, P at once, then each group's chunks in order (kernels/gdn.cu) */
        TRY(hip_rt_launch(l->rt, hy->k_cprep, (unsigned)hy->n_chunk, (unsigned)HV, 1, 256, rp, e));
        TRY(hip_rt_launch(l->rt, hy->k_cscan, (unsigned)hy->n_grp, (unsigned)HV, cdiv((size_t)dv, 32), 256, rp, e));
    } else {
        const int nw = hp->d_state / 32 > 1 ? hp->d_state / 32 : 1; /* warps per block: kernels/gdn.cu */
        TRY(hip_rt_launch(l->rt, hy->k_rec, (unsigned)n, (unsigned)HV, cdiv((size_t)dv, (size_t)l->warp),
                          (unsigned)(nw * l->warp), rp, e));
    }
    /* the gated norm also writes the q8 copy of its output for the out-projection GEMV */
    const int qo = n <= HIP_GEMV_MAX && dv % l->warp == 0 && want_q8_t(hy->o, vd, d->out.type);
    {
        uint64_t o = hy->og.a, z = hy->z.a, w = d->norm.a, q = qo ? l->xq.a : 0, qd = qo ? l->xqd.a : 0;
        int vdd = vd, dvv = dv;
        float eps = hp->rms_eps;
        void *gp[] = { &o, &z, &w, &vdd, &dvv, &eps, &q, &qd };
        TRY(hip_rt_launch(l->rt, hy->k_gnorm, (unsigned)n, (unsigned)HV, 1,
                          cdiv((size_t)dv, (size_t)l->warp) * (unsigned)l->warp, gp, e));
    }
    return hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &d->out, .x = hy->og, .x_stride = vd, .x_div = 1, .nz = n, .y = l->x, .y_stride = E, .mode = 1, .q = qo,
    }, e);
}

static int gated_attn_layer(struct hip_hybrid *hy, const struct layer *ly, int il, int n, const struct hip_ops *l,
                            struct err *e)
{
    const struct hparams *hp = &hy->m->hp;
    const struct hip_ops_layer *at = &hy->o->L[il];
    const int E = hp->n_embd, hd = hp->head_dim, W = l->W, B = l->p.n_batch;
    const int nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;
    const uint64_t pos = l->io.a + 4u * (uint64_t)B, seq = pos + 4u * (uint64_t)B, cs = l->io.a + 16u * (uint64_t)B;
    int rc;
    const int qh = want_q8_t(hy->o, E, -1);
    TRY(hip_ops_rms(hy->o, l->h, l->x, at->attn_norm, HIP_DNULL, n, E, E, E, qh, false, e));
    TRY(hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &at->wq, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->mix, .y_stride = 2 * nq, .q = qh,
    }, e));
    const struct hip_dptr yk = hip_dptr_off(l->qkv, 4u * (uint64_t)nq);
    const struct hip_dptr yv = hip_dptr_off(l->qkv, 4u * (uint64_t)(nq + nkv));
    if (n <= HIP_GEMV_MAX && same_shape(&at->wk, &at->wv)) {
        TRY(hip_ops_mm_dual(hy->o, &(struct hip_mm){
            .w = &at->wk, .w2 = &at->wv, .x = l->h, .x_stride = E, .nz = n, .y = yk, .y2 = yv, .y_stride = W, .q = qh,
        }, e));
    } else {
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &at->wk, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = yk, .y_stride = W, .q = qh,
        }, e));
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &at->wv, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = yv, .y_stride = W, .q = qh,
        }, e));
    }
    {
        uint64_t mix = hy->mix.a, q = l->qkv.a, g = hy->gate.a;
        int qs = W, nh = ly->n_head, hdd = hd;
        void *sp[] = { &mix, &q, &qs, &g, &nh, &hdd };
        TRY(hip_rt_launch(l->rt, hy->k_split, (unsigned)n, cdiv((size_t)(ly->n_head * hd), 256), 1, 256, sp, e));
    }
    const uint64_t seq_stride = (uint64_t)l->p.n_ctx * (uint64_t)nkv;
    struct rope_args ra = {
        .q = l->qkv.a, .k = yk.a, .v = yv.a, .q_norm = at->q_norm.a, .k_norm = at->k_norm.a, .cs = cs,
        .kc = at->kc.a, .vc = at->vc.a, .pos = pos, .seq = seq, .seq_stride = (int64_t)seq_stride, .q_stride = W,
        .kv_stride = W,
        .hd = hd, .n_rot = hp->n_rot, .n_head = ly->n_head, .n_head_kv = ly->n_head_kv, .neox = 1,
        .kv_f16 = l->kv_elt == 2, .eps = hp->rms_eps,
    };
    void *rp[] = { &ra };
    const unsigned rb = (unsigned)((hd + l->warp - 1) / l->warp * l->warp);
    TRY(hip_rt_launch(l->rt, hy->k_rope, (unsigned)n, (unsigned)(ly->n_head + ly->n_head_kv), 1, rb, rp, e));
    const int nsplit = n <= HIP_SPLIT_TOKENS ? HIP_DEC_SPLIT : 1;
    struct attn_args aa = {
        .q = l->qkv.a, .o = l->o.a, .k = at->kc.a, .v = at->vc.a, .pos = pos, .seq = seq, .part = l->part.a,
        .seq_stride = (int64_t)seq_stride, .kv_dim = nkv, .hd = hd, .n_head = ly->n_head,
        .n_head_kv = ly->n_head_kv, .q_stride = W, .o_stride = nq, .nsplit = nsplit, .kv_f16 = l->kv_elt == 2,
        .scale = hp->kq_scale,
    };
    void *ap[] = { &aa };
    /* one sequence's prompt on an f16 cache: 64 tokens of one head a block on tensor cores (fattn_256);
     * attn's block per (token, head) took 505 µs a layer at 512 tokens (qwen35-35b-a3b on the H100) */
    if (n > HIP_GEMV_MAX && hd == 256 && hip_ops_fattn(l, hd) && hy->n_grp == 1 && l->kv_elt == 2 && W % 4 == 0 &&
        ly->n_head % ly->n_head_kv == 0)
        TRY(hip_ops_fattn_launch(hy->o, hd, n, ly->n_head, &aa, e));
    else
        TRY(hip_rt_launch(l->rt, hy->k_attn, (unsigned)(n * ly->n_head), (unsigned)nsplit, 1,
                          4u * (unsigned)l->warp, ap, e));
    if (nsplit > 1)
        TRY(hip_rt_launch(l->rt, hy->k_comb, (unsigned)(n * ly->n_head), 1, 1, rb, ap, e));
    /* the gate also writes the q8 copy of o for the output-projection GEMV */
    const int qo = n <= HIP_GEMV_MAX && want_q8_t(hy->o, nq, at->wo.type);
    {
        uint64_t o = l->o.a, g = hy->gate.a, q = qo ? l->xq.a : 0, qd = qo ? l->xqd.a : 0;
        int cnt = n * nq, nqq = nq;
        void *gp[] = { &o, &g, &cnt, &nqq, &q, &qd };
        TRY(hip_rt_launch(l->rt, hy->k_gate, cdiv((size_t)cnt, 256), 1, 1, 256, gp, e));
    }
    return hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &at->wo, .x = l->o, .x_stride = nq, .x_div = 1, .nz = n, .y = l->x, .y_stride = E, .mode = 1, .q = qo,
    }, e);
}

int hip_hybrid_layer(struct hip_hybrid *hy, const struct layer *ly, int il, int n, struct err *e)
{
    const struct hip_ops *l = hy->o;
    if (ly->kind == LAYER_GDN)
        return gdn_layer(hy, ly, il, n, l, e);
    if (ly->kind == LAYER_GATED_ATTN)
        return gated_attn_layer(hy, ly, il, n, l, e);
    return err_set(e, ERR_INTERNAL, "hip: layer %d is no hybrid layer", il);
}

int hip_hybrid_shexp(struct hip_hybrid *hy, const struct layer *ly, int il, int n, struct err *e)
{
    const struct hlayer *d = &hy->L[il];
    if (hip_dptr_null(d->sh_down.d))
        return 0;
    (void)ly;
    const struct hip_ops *l = hy->o;
    const int E = hy->m->hp.n_embd, F = hy->m->hp.n_ff_shexp;
    int rc = 0;
    /* f32 activations: the routed experts' launches overwrote the q8 copy of h, and at the shared
     * expert's width (qwen35moe: 512) a second quantization launch costs more than it saves */
    const int qh = 0;
    if (n <= HIP_GEMV_MAX && same_shape(&d->sh_gate, &d->sh_up)) {
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &d->sh_gate, .w2 = &d->sh_up, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->sg,
            .y_stride = F, .mode = 2, .q = qh,
        }, e));
    } else {
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &d->sh_gate, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->sg, .y_stride = F, .q = qh,
        }, e));
        TRY(hip_ops_mm(hy->o, &(struct hip_mm){
            .w = &d->sh_up, .x = l->h, .x_stride = E, .x_div = 1, .nz = n, .y = hy->su, .y_stride = F, .q = qh,
        }, e));
        uint64_t g = hy->sg.a, u = hy->su.a;
        int cnt = n * F;
        void *sp[] = { &g, &u, &cnt };
        TRY(hip_rt_launch(l->rt, hy->k_swiglu, cdiv((size_t)cnt, 256), 1, 1, 256, sp, e));
    }
    const int qf = 0;
    TRY(hip_ops_mm(hy->o, &(struct hip_mm){
        .w = &d->sh_down, .x = hy->sg, .x_stride = F, .x_div = 1, .nz = n, .y = hy->sy, .y_stride = E, .q = qf,
    }, e));
    uint64_t x = l->x.a, y = hy->sy.a, h = l->h.a, w = d->sh_inp.a;
    int ee = E;
    void *p[] = { &x, &y, &h, &w, &ee };
    return hip_rt_launch(l->rt, hy->k_shexp, (unsigned)n, cdiv((size_t)E, 256), 1, 256, p, e);
}

/* ---- sequence state (cpu_hybrid.c's rules, device copies) ---- */

/* Sequence seq's snapshot slots, and the device state of its slot i. */
static struct snap_slot *slots_of(const struct hip_hybrid *hy, int seq)
{
    return hy->slots + (size_t)seq * hy->n_snap;
}
static struct hip_dptr *snap_state_of(const struct hip_hybrid *hy, int seq, int i)
{
    return &hy->snap_state[(size_t)seq * hy->n_snap + (size_t)i];
}

static bool seq_ok(const struct hip_hybrid *hy, int seq) { return seq >= 0 && seq < hy->n_seq; }
static struct hip_dptr seq_state(const struct hip_hybrid *hy, int seq)
{
    return hip_dptr_off(hy->state, 4u * (uint64_t)seq * (uint64_t)hy->per_seq);
}

static int d2d(struct hip_hybrid *hy, struct hip_dptr dst, struct hip_dptr src, struct err *e)
{
    const struct hip_ops *l = hy->o;
    int rc = hip_rt_bind(l->rt, e);
    if (!rc)
        rc = hip_rt_d2d(l->rt, dst, src, hy->per_seq * 4, e);
    if (!rc)
        rc = hip_rt_sync(l->rt, e);
    return rc;
}

/* Every snapshot slot already points into the slab create allocated; this allocates only where the
 * slab has no room, on a hybrid without GDN layers (per_seq 0: nothing to keep). */
static int snap_alloc(struct hip_hybrid *hy, struct hip_dptr *state, struct err *e)
{
    if (!hip_dptr_null(*state))
        return 0;
    return hip_ops_dalloc(hy->o, hy->per_seq * 4, state, e);
}

int hip_hybrid_restorable(const struct hip_hybrid *hy, const int *len, int seq, int pos)
{
    if (!seq_ok(hy, seq) || pos <= 0)
        return 0;
    if (pos >= len[seq])
        return len[seq];
    if (!hy->per_seq)
        return pos;
    return snap_restorable(slots_of(hy, seq), hy->n_snap, pos);
}

int hip_hybrid_truncate(struct hip_hybrid *hy, int *len, int seq, int pos, struct err *e)
{
    if (!seq_ok(hy, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, hy->n_seq);
    if (pos < 0)
        pos = 0;
    if (pos >= len[seq])
        return 0;
    if (hy->per_seq) {
        if (pos > 0) {
            const int i = snap_find(slots_of(hy, seq), hy->n_snap, pos);
            if (i < 0)
                return err_set(e, ERR_UNSUPPORTED,
                               "engine: sequence %d cannot be cut back from %d to %d: a recurrent (Gated DeltaNet) "
                               "state only rolls back to 0 or to a snapshot position (engine_seq_snapshot)",
                               seq, len[seq], pos);
            int rc = d2d(hy, seq_state(hy, seq), *snap_state_of(hy, seq, i), e);
            if (rc)
                return rc;
        }
        /* position 0: the next step starts the sequence from zero state (grp_fresh) */
        snap_drop_after(slots_of(hy, seq), hy->n_snap, pos);
    }
    len[seq] = pos;
    return 0;
}

int hip_hybrid_snapshot(struct hip_hybrid *hy, const int *len, int seq, struct err *e)
{
    if (!seq_ok(hy, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, hy->n_seq);
    const int pos = len[seq];
    if (!hy->per_seq || pos == 0)
        return 0;
    const int i = snap_slot_for(slots_of(hy, seq), hy->n_snap, pos);
    struct hip_dptr *st = snap_state_of(hy, seq, i);
    int rc = snap_alloc(hy, st, e);
    if (!rc)
        rc = d2d(hy, *st, seq_state(hy, seq), e);
    if (rc)
        return rc;
    snap_take(&slots_of(hy, seq)[i], pos, &hy->stamp);
    return 0;
}

int hip_hybrid_copy(struct hip_hybrid *hy, const int *len, int src, int dst, int n, struct err *e)
{
    if (!seq_ok(hy, src) || !seq_ok(hy, dst))
        return err_set(e, ERR_INVALID, "engine: sequence %d or %d out of range [0, %d)", src, dst, hy->n_seq);
    if (!hy->per_seq)
        return 0;
    struct hip_dptr from = HIP_DNULL;
    if (n == len[src]) {
        from = seq_state(hy, src);
    } else if (n > 0) {
        const int i = snap_find(slots_of(hy, src), hy->n_snap, n);
        if (i < 0)
            return err_set(e, ERR_UNSUPPORTED,
                           "engine: cannot copy the first %d of %d positions of sequence %d: a recurrent state "
                           "exists only at its length, 0 and snapshot positions", n, len[src], src);
        from = *snap_state_of(hy, src, i);
    }
    int rc = 0;
    if (!hip_dptr_null(from)) {
        rc = d2d(hy, seq_state(hy, dst), from, e);
    } else {
        const struct hip_ops *l = hy->o;
        rc = hip_rt_bind(l->rt, e);
        if (!rc)
            rc = hip_rt_memset32(l->rt, seq_state(hy, dst), 0, hy->per_seq, e);
        if (!rc)
            rc = hip_rt_sync(l->rt, e);
    }
    if (rc)
        return rc;
    /* dst inherits src's snapshots inside the copied prefix */
    struct snap_slot *ds = slots_of(hy, dst), *ss = slots_of(hy, src);
    for (int i = 0; i < hy->n_snap; i++) {
        ds[i].pos = -1;
        if (ss[i].pos < 0 || ss[i].pos > n)
            continue;
        struct hip_dptr *to_i = snap_state_of(hy, dst, i);
        if (snap_alloc(hy, to_i, e) || d2d(hy, *to_i, *snap_state_of(hy, src, i), e))
            continue; /* out of device memory: dst just has fewer snapshots */
        ds[i] = ss[i];
    }
    return 0;
}
