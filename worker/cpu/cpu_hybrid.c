/* cpu_hybrid.c — Gated DeltaNet and gated-attention layers on the CPU,
 * the shared expert of qwen35moe, and the per-sequence recurrent state
 * (see cpu_hybrid.h; math in shared spec arch-qwen35.md §6).
 *
 * A batch may mix sequences. Weight products run once over all batch rows;
 * the conv and the delta rule then run per sequence over that sequence's
 * rows in batch order (threaded over sequence × channel block and sequence
 * × value head). A run of at least chunk_min tokens uses the chunked delta
 * rule, shorter runs (decode) the token-by-token one. All scratch is sized
 * at creation; decode does no allocation (snapshots allocate when taken). */
#include "cpu_hybrid.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../num/ops.h"
#include "../num/gdn.h"
#include "../num/ple.h"
#include "../num/qsa.h"
#include "../backend/snap.h"
#include "../../common/tpool.h"

#define CONV_BLOCK 256 /* channels per conv task */

struct cpu_hybrid {
    const struct model *m;
    struct tpool *tp;
    cpu_hybrid_mm_fn mm;          /* the engine's weight product */
    void *mm_ctx;
    int n_seq, n_batch, n_ctx, n_threads;
    int chunk_min;            /* runs this long use the chunked delta rule */
    int n_snap;               /* snapshot slots per sequence */
    int key_dim, value_dim, conv_dim;
    size_t conv_per;          /* floats of one layer's conv state: conv_dim·(d_conv−1) */
    size_t ssm_per;           /* floats of one layer's recurrent state: H_v·d_v·d_k */
    size_t per_seq;           /* floats of one sequence's state over all GDN layers */
    float *state;             /* [n_seq][n_gdn][conv_per + ssm_per] conv state, then recurrent state */
    struct snap_slot *slots;  /* [n_seq][n_snap] which position each snapshot holds (snap.h) */
    float **snap_state;       /* [n_seq][n_snap] → [per_seq] the snapshot's state, allocated on first use */
    uint64_t stamp;
    unsigned char *pe_pair;   /* [n_rot/2] 1 where IMROPE takes p_e (angle 0 for text) */

    /* scratch, B = n_batch rows */
    float *hn;                /* [B][n_embd] normed input */
    float *mix;               /* [B][max(conv_dim, 2·n_head_max·D)] GDN qkv projection / gated-attn q+gate */
    float *y;                 /* [B][conv_dim] conv output: q | k | v */
    float *z;                 /* [B][value_dim] GDN output gate */
    float *beta;              /* [B][H_v] */
    float *gd;                /* [B][H_v] log decay */
    float *o;                 /* [B][max(value_dim, n_head_max·D)] mixer output before the out projection */
    float *q;                 /* [B][n_head_max·D] normed, rotated queries */
    float *k;                 /* [B][n_head_kv_max·D] */
    float *v;                 /* [B][n_head_kv_max·D] */
    float *sg;                /* [B][n_ff_shexp] shared-expert gate */
    float *su;                /* [B][n_ff_shexp] shared-expert up */
    float *att;               /* [n_threads][att_per] attention scores */
    size_t att_per;
    double *cw;               /* [n_threads][gdn_chunk_work] chunked delta-rule work */
    size_t cw_per;
    int *rows;                /* [B] batch rows grouped by sequence */
    int *grp_seq;             /* [B] sequence of group i */
    int *grp_start;           /* [B] start of group i in rows */
    int *grp_len;             /* [B] rows of group i */
    int n_grp;
    uint64_t bytes;           /* what cpu_hybrid_create allocated (the state included; snapshots come later) */

    /* qwen4exp PLE (hp.ple_layer >= 0) */
    int wide;                 /* hc·n_embd */
    size_t ple_off;           /* floats into a sequence's state where the PLE conv history starts */
    int ple_hist;             /* rows of that history: (K_p − 1)·n_gram, oldest first */
    int *tok_hist;            /* [n_seq][n_ctx] the token at each position (the n-gram context) */
    float *pe;                /* [B][n_embd] the gathered PLE table rows */
    float *pkey;              /* [B][hc·n_embd] key, then normed */
    float *pval;              /* [B][n_embd] value */
    float *pg;                /* [B][hc·n_embd] gated value G */
    float *pn;                /* [B][hc·n_embd] normed G: the conv input */
    float *pc;                /* [B][hc·n_embd] silu(conv) */
    /* qwen4exp QSA (LAYER_SPARSE_ATTN layers) */
    int n_qsa;
    struct qsa_cache qc;      /* the indexer keys per cell and the pooled block keys (num/qsa.h) */
    float *qi;                /* [B][n_idx_head·d_idx] indexer queries */
    float *kraw;              /* [B][d_idx] raw indexer keys of the batch */
    int w_max;                /* most cells one query attends to: top_k + ratio − 1 */
    int *sel;                 /* [B][w_max] the cells each token attends to, ascending */
    int *nsel;                /* [B] how many; -1 = all earlier cells (dense) */
    float *qsc;               /* [n_threads][n_ctx] cell scores */
    int *qheap;               /* [n_threads][n_ctx] the selection heap */
    unsigned char *kvg;       /* [n_threads][kvg_per] gathered K and V rows of the selected cells */
    size_t kvg_per;
    int *present;             /* [n_seq] cells of each sequence once the batch is stored */
};

static void *alloc_z(size_t n, size_t sz, bool *ok)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p)
        *ok = false;
    return p;
}

/* alloc_z, counted in hy->bytes (cpu_hybrid_mem) */
static void *alloc_zc(struct cpu_hybrid *hy, size_t n, size_t sz, bool *ok)
{
    hy->bytes += (uint64_t)(n ? n : 1) * sz;
    return alloc_z(n, sz, ok);
}

void cpu_hybrid_mem(const struct cpu_hybrid *hy, uint64_t *state, uint64_t *per_seq, int *n_snap, uint64_t *scratch)
{
    const uint64_t one = 4u * (uint64_t)hy->per_seq, all = one * (uint64_t)hy->n_seq;
    *state = hy->per_seq ? all : 0;
    *per_seq = one;
    *n_snap = hy->per_seq ? hy->n_snap : 0;
    /* a model without GDN layers still has the state's one-element placeholder: scratch */
    *scratch = hy->bytes - *state;
}

void cpu_hybrid_free(struct cpu_hybrid *hy)
{
    if (!hy)
        return;
    if (hy->snap_state)
        for (size_t i = 0; i < (size_t)hy->n_seq * (size_t)hy->n_snap; i++)
            free(hy->snap_state[i]);
    void *bufs[] = { hy->state, hy->slots, hy->snap_state, hy->pe_pair, hy->hn, hy->mix, hy->y, hy->z, hy->beta, hy->gd, hy->o,
                     hy->q, hy->k, hy->v, hy->sg, hy->su, hy->att, hy->cw, hy->rows, hy->grp_seq,
                     hy->grp_start, hy->grp_len, hy->tok_hist, hy->pe, hy->pkey, hy->pval, hy->pg, hy->pn, hy->pc,
                     hy->qi, hy->kraw, hy->sel, hy->nsel, hy->qsc, hy->qheap,
                     hy->kvg, hy->present };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    qsa_cache_free(&hy->qc);
    free(hy);
}

int cpu_hybrid_create(struct cpu_hybrid **out, const struct model *m, const struct engine_params *p, struct tpool *tp,
                  cpu_hybrid_mm_fn mm, void *mm_ctx, struct err *e)
{
    *out = NULL;
    const struct hparams *hp = &m->hp;
    struct cpu_hybrid *hy = calloc(1, sizeof *hy);
    if (!hy)
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    hy->m = m;
    hy->tp = tp;
    hy->mm = mm;
    hy->mm_ctx = mm_ctx;
    hy->n_seq = p->n_seq;
    hy->n_batch = p->n_batch;
    hy->n_ctx = p->n_ctx;
    hy->n_threads = tpool_size(tp);
    /* default: token by token for every run; on the CPU its AVX2 form measured ~2x faster than the
     * f32 chunked form (d_k = d_v = 128, 512 tokens: 4.6 vs 9.8 ms per head) */
    hy->chunk_min = p->gdn_chunk_min > 0 ? p->gdn_chunk_min : INT_MAX;
    hy->n_snap = p->n_snap > 0 ? p->n_snap : ENGINE_N_SNAP_DEFAULT;
    hy->key_dim = hp->n_k_heads * hp->d_state;
    hy->value_dim = hp->n_v_heads * hp->d_state;
    hy->conv_dim = 2 * hy->key_dim + hy->value_dim;
    hy->conv_per = (size_t)hy->conv_dim * (size_t)(hp->d_conv - 1);
    hy->ssm_per = (size_t)hp->n_v_heads * (size_t)hp->d_state * (size_t)hp->d_state;
    hy->per_seq = (size_t)m->n_gdn_layers * (hy->conv_per + hy->ssm_per);
    hy->wide = hp->hc * hp->n_embd;
    if (hp->ple_layer >= 0) { /* the PLE conv history is state like the GDN conv's: snapshots carry it */
        hy->ple_off = hy->per_seq;
        hy->ple_hist = (hp->ple_kernel - 1) * hp->ple_ngram;
        hy->per_seq += (size_t)hy->ple_hist * (size_t)hy->wide;
    }

    const size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, D = (size_t)hp->head_dim;
    const size_t nq = (size_t)hp->n_head_max * D, nkv = (size_t)hp->n_head_kv_max * D;
    const size_t cd = (size_t)hy->conv_dim, vd = (size_t)hy->value_dim, HV = (size_t)hp->n_v_heads;
    size_t wmix = cd > 2 * nq ? cd : 2 * nq, wo = vd > nq ? vd : nq;
    bool ok = true;
    hy->state = alloc_zc(hy, (size_t)p->n_seq * hy->per_seq, sizeof(float), &ok);
    hy->slots = alloc_zc(hy, (size_t)p->n_seq * (size_t)hy->n_snap, sizeof(struct snap_slot), &ok);
    hy->snap_state = alloc_zc(hy, (size_t)p->n_seq * (size_t)hy->n_snap, sizeof(float *), &ok);
    hy->pe_pair = alloc_zc(hy, (size_t)hp->n_rot / 2 + 1, 1, &ok);
    hy->hn = alloc_zc(hy, B * E, sizeof(float), &ok);
    hy->mix = alloc_zc(hy, B * wmix, sizeof(float), &ok);
    hy->y = alloc_zc(hy, B * cd, sizeof(float), &ok);
    hy->z = alloc_zc(hy, B * vd, sizeof(float), &ok);
    hy->beta = alloc_zc(hy, B * HV, sizeof(float), &ok);
    hy->gd = alloc_zc(hy, B * HV, sizeof(float), &ok);
    hy->o = alloc_zc(hy, B * wo, sizeof(float), &ok);
    hy->q = alloc_zc(hy, B * nq, sizeof(float), &ok);
    hy->k = alloc_zc(hy, B * nkv, sizeof(float), &ok);
    hy->v = alloc_zc(hy, B * nkv, sizeof(float), &ok);
    hy->sg = alloc_zc(hy, B * (size_t)hp->n_ff_shexp, sizeof(float), &ok);
    hy->su = alloc_zc(hy, B * (size_t)hp->n_ff_shexp, sizeof(float), &ok);
    int n_gqa_max = 1;
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kind != LAYER_GDN && m->layers[il].n_head / m->layers[il].n_head_kv > n_gqa_max)
            n_gqa_max = m->layers[il].n_head / m->layers[il].n_head_kv;
    /* ops_attn's AVX2 form scores queries in groups of 8 whatever n_q is: room for 8 at least */
    hy->att_per = (size_t)(n_gqa_max > 8 ? n_gqa_max : 8) * (size_t)p->n_ctx;
    hy->att = alloc_zc(hy, (size_t)hy->n_threads * hy->att_per, sizeof(float), &ok);
    hy->cw_per = gdn_chunk_work(hp->d_state, hp->d_state);
    hy->cw = alloc_zc(hy, (size_t)hy->n_threads * hy->cw_per, sizeof(double), &ok);
    hy->rows = alloc_zc(hy, B, sizeof(int), &ok);
    hy->grp_seq = alloc_zc(hy, B, sizeof(int), &ok);
    hy->grp_start = alloc_zc(hy, B, sizeof(int), &ok);
    hy->grp_len = alloc_zc(hy, B, sizeof(int), &ok);
    if (hp->ple_layer >= 0) {
        const size_t W = (size_t)hy->wide;
        hy->tok_hist = alloc_zc(hy, (size_t)p->n_seq * (size_t)p->n_ctx, sizeof(int), &ok);
        hy->pe = alloc_zc(hy, B * E, sizeof(float), &ok);
        hy->pkey = alloc_zc(hy, B * W, sizeof(float), &ok);
        hy->pval = alloc_zc(hy, B * E, sizeof(float), &ok);
        hy->pg = alloc_zc(hy, B * W, sizeof(float), &ok);
        hy->pn = alloc_zc(hy, B * W, sizeof(float), &ok);
        hy->pc = alloc_zc(hy, B * W, sizeof(float), &ok);
    }
    hy->n_qsa = m->n_qsa_layers;
    if (hy->n_qsa > 0) {
        int r_min = 64, r_max = 1;
        for (int il = 0; il < hp->n_layer; il++)
            if (m->layers[il].kind == LAYER_SPARSE_ATTN) {
                r_min = m->layers[il].qsa_ratio < r_min ? m->layers[il].qsa_ratio : r_min;
                r_max = m->layers[il].qsa_ratio > r_max ? m->layers[il].qsa_ratio : r_max;
            }
        const size_t di = (size_t)hp->d_idx;
        hy->w_max = hp->idx_top_k + r_max - 1 < p->n_ctx ? hp->idx_top_k + r_max - 1 : p->n_ctx;
        if (qsa_cache_init(&hy->qc, hy->n_qsa, p->n_seq, p->n_ctx, hp->d_idx, r_min, !p->kv_f32))
            ok = false;
        hy->bytes += qsa_cache_bytes(&hy->qc);
        hy->qi = alloc_zc(hy, B * (size_t)hp->n_idx_head * di, sizeof(float), &ok);
        hy->kraw = alloc_zc(hy, B * di, sizeof(float), &ok);
        hy->sel = alloc_zc(hy, B * (size_t)hy->w_max, sizeof(int), &ok);
        hy->nsel = alloc_zc(hy, B, sizeof(int), &ok);
        hy->qsc = alloc_zc(hy, (size_t)hy->n_threads * (size_t)p->n_ctx, sizeof(float), &ok);
        hy->qheap = alloc_zc(hy, (size_t)hy->n_threads * (size_t)p->n_ctx, sizeof(int), &ok);
        hy->kvg_per = 2 * (size_t)hy->w_max * D * sizeof(float);
        hy->kvg = alloc_zc(hy, (size_t)hy->n_threads * hy->kvg_per, 1, &ok);
        hy->present = alloc_zc(hy, (size_t)p->n_seq, sizeof(int), &ok);
    }
    if (!ok) {
        cpu_hybrid_free(hy);
        return err_set(e, ERR_NOMEM, "engine: out of memory for the recurrent state (%d sequences × %zu floats)",
                       p->n_seq, hy->per_seq);
    }
    snap_slots_clear(hy->slots, p->n_seq * hy->n_snap);
    ops_imrope_text_pairs(hp->rope_sections, hp->n_rot, hy->pe_pair);
    *out = hy;
    return 0;
}

static void mm(struct cpu_hybrid *hy, const struct wt *w, const float *X, int n, float *Y)
{
    hy->mm(hy->mm_ctx, w, X, n, Y);
}

static float *seq_state(struct cpu_hybrid *hy, int seq, int gdn_index)
{
    return hy->state + (size_t)seq * hy->per_seq + (size_t)gdn_index * (hy->conv_per + hy->ssm_per);
}

/* Group the batch rows by sequence, keeping batch order inside a group. */
static void group_rows(struct cpu_hybrid *hy, const struct engine_tok *toks, int n)
{
    hy->n_grp = 0;
    int filled = 0;
    for (int t = 0; t < n; t++) {
        int g = 0;
        while (g < hy->n_grp && hy->grp_seq[g] != toks[t].seq)
            g++;
        if (g < hy->n_grp)
            continue;
        hy->grp_seq[g] = toks[t].seq;
        hy->grp_start[g] = filled;
        int cnt = 0;
        for (int u = t; u < n; u++)
            if (toks[u].seq == toks[t].seq)
                hy->rows[filled + cnt++] = u;
        hy->grp_len[g] = cnt;
        filled += cnt;
        hy->n_grp++;
    }
}

/* Per-token work: inline for a few tokens (decode), else over the pool. */
static void rows_run(struct cpu_hybrid *hy, tpool_fn fn, void *ctx, int n)
{
    if (n < 8) {
        for (int t = 0; t < n; t++)
            fn(ctx, t, 0);
    } else {
        tpool_run(hy->tp, fn, ctx, n);
    }
}

/* ---- Gated DeltaNet ---- */

struct gdn_job {
    struct cpu_hybrid *hy;
    const struct layer *ly;
    int n_blocks;   /* conv channel blocks */
};

static void conv_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct gdn_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const int g = (int)(i / j->n_blocks), blk = (int)(i % j->n_blocks);
    const int c0 = blk * CONV_BLOCK, c1 = c0 + CONV_BLOCK < hy->conv_dim ? c0 + CONV_BLOCK : hy->conv_dim;
    float *st = seq_state(hy, hy->grp_seq[g], j->ly->gdn_index);
    gdn_conv(hy->mix, (size_t)hy->conv_dim, hy->y, (size_t)hy->conv_dim, hy->rows + hy->grp_start[g], hy->grp_len[g],
             j->ly->ssm_conv.data, st, hy->m->hp.d_conv, c0, c1);
}

static void l2_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct gdn_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    float *r = hy->y + (size_t)t * (size_t)hy->conv_dim;
    for (int h = 0; h < 2 * hp->n_k_heads; h++) /* q heads then k heads */
        gdn_l2_norm(r + (size_t)h * (size_t)hp->d_state, hp->d_state, hp->rms_eps);
}

static void delta_task(void *ctx, int64_t i, int worker)
{
    const struct gdn_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int HV = hp->n_v_heads, dk = hp->d_state;
    const int g = (int)(i / HV), vh = (int)(i % HV), kh = vh % hp->n_k_heads; /* tiled head map (§6.4 step 6) */
    float *S = seq_state(hy, hy->grp_seq[g], j->ly->gdn_index) + hy->conv_per + (size_t)vh * (size_t)dk * (size_t)dk;
    const size_t cd = (size_t)hy->conv_dim;
    const struct gdn_head h = {
        .Q = hy->y + (size_t)kh * dk,
        .K = hy->y + (size_t)hy->key_dim + (size_t)kh * dk,
        .V = hy->y + 2 * (size_t)hy->key_dim + (size_t)vh * dk,
        .qk_stride = cd,
        .v_stride = cd,
        .beta = hy->beta + vh,
        .gdecay = hy->gd + vh,
        .gate_stride = (size_t)HV,
        .O = hy->o + (size_t)vh * dk,
        .o_stride = (size_t)hy->value_dim,
        .d_k = dk,
        .d_v = dk,
        .scale = 1.0f / sqrtf((float)dk),
    };
    const int *rows = hy->rows + hy->grp_start[g];
    const int T = hy->grp_len[g];
    if (T >= hy->chunk_min)
        gdn_chunked(&h, rows, T, S, hy->cw + (size_t)worker * hy->cw_per);
    else
        gdn_recurrent(&h, rows, T, S);
}

/* gated output norm per head of one token: RMSNorm(o; ssm_norm) ⊙ silu(z) (qwen4exp: ⊙ sigmoid(z)) */
static void gnorm_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct gdn_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int dv = hp->d_state;
    for (int h = 0; h < hp->n_v_heads; h++) {
        float *o = hy->o + (size_t)t * hy->value_dim + (size_t)h * dv;
        const float *z = hy->z + (size_t)t * hy->value_dim + (size_t)h * dv;
        ops_rms_norm(o, o, j->ly->ssm_norm.data, dv, hp->rms_eps);
        if (hp->gdn_sigmoid_gate)
            for (int i = 0; i < dv; i++)
                o[i] = o[i] * gdn_sigmoid(z[i]);
        else
            for (int i = 0; i < dv; i++)
                o[i] = o[i] * ops_silu(z[i]);
    }
}

static void gdn_block(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n,
                      const float *in, float *out)
{
    const struct hparams *hp = &hy->m->hp;
    const int HV = hp->n_v_heads;

    mm(hy, &ly->ssm_qkv, in, n, hy->mix);
    mm(hy, &ly->ssm_z, in, n, hy->z);
    mm(hy, &ly->ssm_beta, in, n, hy->beta);
    mm(hy, &ly->ssm_alpha, in, n, hy->gd);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < HV; h++) {
            float *b = hy->beta + (size_t)t * HV + h, *g = hy->gd + (size_t)t * HV + h;
            *b = gdn_sigmoid(*b);
            *g = gdn_softplus(*g + ly->ssm_dt.data[h]) * ly->ssm_a.data[h];
        }

    group_rows(hy, toks, n);
    for (int g = 0; g < hy->n_grp; g++)
        if (toks[hy->rows[hy->grp_start[g]]].pos == 0) /* a sequence (re)starting: zero state */
            memset(seq_state(hy, hy->grp_seq[g], ly->gdn_index), 0,
                   sizeof(float) * (hy->conv_per + hy->ssm_per));

    struct gdn_job job = { .hy = hy, .ly = ly, .n_blocks = (hy->conv_dim + CONV_BLOCK - 1) / CONV_BLOCK };
    tpool_run(hy->tp, conv_task, &job, (int64_t)hy->n_grp * job.n_blocks);
    rows_run(hy, l2_task, &job, n);
    tpool_run(hy->tp, delta_task, &job, (int64_t)hy->n_grp * HV);

    rows_run(hy, gnorm_task, &job, n);
    mm(hy, &ly->ssm_out, hy->o, n, out);
}

/* ---- gated full attention, dense or over the cells a lightning indexer selects (QSA) ---- */

/* cs for a text token: the IMROPE pairs that take the 4th (p_e) component do not rotate (p_e = 0) */
static void text_rope(const struct cpu_hybrid *hy, const float *cs_pos, float *cs)
{
    const int nr = hy->m->hp.n_rot;
    memcpy(cs, cs_pos, sizeof(float) * (size_t)nr);
    for (int i = 0; i < nr / 2; i++)
        if (hy->pe_pair[i]) {
            cs[2 * i] = 1.0f;
            cs[2 * i + 1] = 0.0f;
        }
}

struct qsa_job {
    struct cpu_hybrid *hy;
    const struct layer *ly;
    const struct engine_tok *toks;
    const float *cs_all;   /* [n][n_rot] */
    int seq, b0;           /* block keys: sequence and first block of the run */
};

/* Block key b (arch-qwen4exp.md §3.5 step 3): the mean of its r raw keys, RMSNorm(idx_k_norm), then RoPE at
 * position b·r in every component (the 4th included, unlike a text query). */
static void kb_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct qsa_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int r = j->ly->qsa_ratio, b = j->b0 + (int)i;
    float cs[2048];
    ops_rope_cache(cs, b * r, hp->n_rot, hp->freq_base, NULL, hp->freq_scale, hp->ext_factor, hp->attn_factor,
                   hp->corr_dims);
    qsa_block_key(qsa_cache_key(&hy->qc, j->ly->qsa_index, j->seq, b * r), r, hp->d_idx, j->ly->idx_k_norm.data,
                  hp->rms_eps, hp->n_rot, cs, qsa_cache_kb(&hy->qc, j->ly->qsa_index, j->seq, b));
}

/* The cells token t attends to (spec §3.5 steps 4–8), ascending in hy->sel; nsel = -1 when that is every
 * earlier cell (no more than top_k + r − 1 of them). */
static void sel_task(void *ctx, int64_t ti, int worker)
{
    const struct qsa_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int t = (int)ti, r = j->ly->qsa_ratio, d = hp->d_idx, NI = hp->n_idx_head;
    const int p = j->toks[t].pos, seq = j->toks[t].seq;
    if (qsa_dense(p, r, hp->idx_top_k)) {
        hy->nsel[t] = -1;
        return;
    }
    float cs[2048];
    text_rope(hy, j->cs_all + (size_t)t * hp->n_rot, cs);
    float *q = hy->qi + (size_t)t * (size_t)NI * (size_t)d;
    for (int h = 0; h < NI; h++) {
        ops_rms_norm(q + (size_t)h * d, q + (size_t)h * d, j->ly->idx_q_norm.data, d, hp->rms_eps);
        ops_rope_apply(q + (size_t)h * d, hp->n_rot, ROPE_NEOX, cs);
    }
    hy->nsel[t] = qsa_select(q, NI, d, qsa_cache_kb(&hy->qc, j->ly->qsa_index, seq, 0), hy->present[seq] / r, p, r,
                             hp->idx_top_k, hy->qsc + (size_t)worker * (size_t)hy->n_ctx,
                             hy->qheap + (size_t)worker * (size_t)hy->n_ctx, hy->sel + (size_t)t * (size_t)hy->w_max);
}

/* Indexer keys of the batch into the cache, the block keys that became complete, then every token's cells. */
static void sparse_select(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n,
                       const float *in, const float *cs_all, const struct kv_cache *kv)
{
    const struct hparams *hp = &hy->m->hp;
    const int r = ly->qsa_ratio, d = hp->d_idx, qi = ly->qsa_index;
    mm(hy, &ly->idx_q, in, n, hy->qi);
    mm(hy, &ly->idx_k, in, n, hy->kraw);
    for (int t = 0; t < n; t++)
        qsa_cache_store(&hy->qc, qi, toks[t].seq, toks[t].pos, r, hy->kraw + (size_t)t * d);
    group_rows(hy, toks, n);
    for (int g = 0; g < hy->n_grp; g++) {
        const int seq = hy->grp_seq[g];
        int pres = kv->len[seq];
        for (int i = 0; i < hy->grp_len[g]; i++) {
            const int p1 = toks[hy->rows[hy->grp_start[g] + i]].pos + 1;
            pres = p1 > pres ? p1 : pres;
        }
        hy->present[seq] = pres;
        int *valid = qsa_cache_valid(&hy->qc, qi, seq);
        const int nb = pres / r;
        if (nb > *valid) {
            struct qsa_job kj = { .hy = hy, .ly = ly, .toks = toks, .seq = seq, .b0 = *valid };
            rows_run(hy, kb_task, &kj, nb - *valid);
            *valid = nb;
        }
    }
    struct qsa_job sj = { .hy = hy, .ly = ly, .toks = toks, .cs_all = cs_all };
    rows_run(hy, sel_task, &sj, n);
}

struct attn_job {
    struct cpu_hybrid *hy;
    const struct engine_tok *toks;
    const struct kv_cache *kv;
    const float *f16tab;
    int il, n_head, n_head_kv;
    bool sparse;  /* hy->sel / nsel name each token's cells */
};

static void attn_task(void *ctx, int64_t i, int worker)
{
    const struct attn_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const int hd = hy->m->hp.head_dim;
    const int t = (int)(i / j->n_head_kv), g = (int)(i % j->n_head_kv);
    const int n_gqa = j->n_head / j->n_head_kv;
    const struct engine_tok *tk = &j->toks[t];
    const size_t nq = (size_t)j->n_head * (size_t)hd;
    const size_t off = (size_t)g * (size_t)hd * j->kv->elt;
    const char *K = (const char *)kv_k(j->kv, j->il, tk->seq, 0) + off;
    const char *V = (const char *)kv_v(j->kv, j->il, tk->seq, 0) + off;
    const float *q = hy->q + (size_t)t * nq + (size_t)g * (size_t)n_gqa * (size_t)hd;
    float *o = hy->o + (size_t)t * nq + (size_t)g * (size_t)n_gqa * (size_t)hd;
    size_t stride = (size_t)j->kv->dim_k[j->il];
    int n_kv = tk->pos + 1;
    if (j->sparse && hy->nsel[t] >= 0) { /* the selected rows, gathered in cell order */
        const size_t row = (size_t)hd * j->kv->elt, full = stride * j->kv->elt;
        unsigned char *Kg = hy->kvg + (size_t)worker * hy->kvg_per, *Vg = Kg + (size_t)hy->w_max * row;
        const int *sl = hy->sel + (size_t)t * (size_t)hy->w_max;
        n_kv = hy->nsel[t];
        for (int c = 0; c < n_kv; c++) {
            memcpy(Kg + (size_t)c * row, K + (size_t)sl[c] * full, row);
            memcpy(Vg + (size_t)c * row, V + (size_t)sl[c] * full, row);
        }
        K = (const char *)Kg;
        V = (const char *)Vg;
        stride = (size_t)hd;
    }
    ops_attn(q, n_gqa, hd, K, V, stride, n_kv, hy->m->hp.kq_scale, j->f16tab, o,
             hy->att + (size_t)worker * hy->att_per);
}

static void gated_attn_block(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n,
                             const float *in, const float *cs_all, struct kv_cache *kv, const float *f16tab,
                             float *out)
{
    const struct hparams *hp = &hy->m->hp;
    const int D = hp->head_dim, nr = hp->n_rot;
    const int nq = ly->n_head * D, nkv = ly->n_head_kv * D;

    mm(hy, &ly->wq, in, n, hy->mix); /* per head: query D, then gate D */
    mm(hy, &ly->wk, in, n, hy->k);
    mm(hy, &ly->wv, in, n, hy->v);
    float cs[2048];
    for (int t = 0; t < n; t++) {
        text_rope(hy, cs_all + (size_t)t * nr, cs);
        const float *qf = hy->mix + (size_t)t * 2 * nq;
        float *q = hy->q + (size_t)t * nq, *k = hy->k + (size_t)t * nkv;
        for (int h = 0; h < ly->n_head; h++) {
            ops_rms_norm(q + h * D, qf + (size_t)h * 2 * D, ly->q_norm.data, D, hp->rms_eps);
            ops_rope_apply(q + h * D, nr, ROPE_NEOX, cs);
        }
        for (int h = 0; h < ly->n_head_kv; h++) {
            ops_rms_norm(k + h * D, k + h * D, ly->k_norm.data, D, hp->rms_eps);
            ops_rope_apply(k + h * D, nr, ROPE_NEOX, cs);
        }
        kv_store(kv, ly->kv_index, toks[t].seq, toks[t].pos, k, hy->v + (size_t)t * nkv);
    }
    const bool sparse = ly->kind == LAYER_SPARSE_ATTN;
    if (sparse)
        sparse_select(hy, ly, toks, n, in, cs_all, kv);
    struct attn_job job = { .hy = hy, .toks = toks, .kv = kv, .f16tab = f16tab, .il = ly->kv_index,
                            .n_head = ly->n_head, .n_head_kv = ly->n_head_kv, .sparse = sparse };
    tpool_run(hy->tp, attn_task, &job, (int64_t)n * ly->n_head_kv);
    for (int t = 0; t < n; t++) {
        const float *qf = hy->mix + (size_t)t * 2 * nq;
        float *o = hy->o + (size_t)t * nq;
        for (int h = 0; h < ly->n_head; h++)
            for (int i = 0; i < D; i++)
                o[h * D + i] *= gdn_sigmoid(qf[(size_t)h * 2 * D + D + i]);
    }
    mm(hy, &ly->wo, hy->o, n, out);
}

void cpu_hybrid_layer(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n,
                      const float *h, float *a, const float *cs, struct kv_cache *kv, const float *f16tab)
{
    if (ly->kind == LAYER_GDN)
        gdn_block(hy, ly, toks, n, h, a);
    else
        gated_attn_block(hy, ly, toks, n, h, cs, kv, f16tab, a);
}

/* ---- PLE n-gram embeddings (qwen4exp) ---- */

/* Token t's PLE input: the table rows its n-gram hashes pick, head 0 first (spec §3.6 steps 1–2). */
static void ple_gather_task(void *ctx, int64_t ti, int worker)
{
    (void)worker;
    const struct qsa_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct model *m = hy->m;
    const struct hparams *hp = &m->hp;
    const int t = (int)ti;
    const struct ple_hash h = { .ngram = hp->ple_ngram, .heads_per_ngram = hp->ple_heads_per_ngram,
                                .eos = hp->ple_eos, .mult = hp->ple_mult, .off = hp->ple_off,
                                .vocab = hp->ple_vocab, .d_ple = hp->d_ple, .type = m->ple_embd.type,
                                .table = m->ple_embd.data, .row_bytes = m->ple_embd.row_bytes };
    ple_gather(&h, hy->tok_hist + (size_t)j->toks[t].seq * (size_t)hy->n_ctx, j->toks[t].pos, j->toks[t].token,
               hy->pe + (size_t)t * (size_t)hp->n_embd);
}

/* Per-stream RMSNorm without weight, then ⊙ w over the hc·n_embd layout. */
static void grouped_norm(float *out, const float *x, const float *w, int hc, int E, float eps)
{
    for (int s = 0; s < hc; s++)
        ops_rms_norm(out + (size_t)s * E, x + (size_t)s * E, w + (size_t)s * E, E, eps);
}

struct ple_job {
    struct cpu_hybrid *hy;
    const struct layer *ly;
    const struct engine_tok *toks;
    const float *x;
    int n_blocks;  /* conv channel blocks */
};

/* Steps 3–6 for token t: key/query per-stream score, the gate, G = gate ⊙ value, its norm (the conv input). */
static void ple_gate_task(void *ctx, int64_t ti, int worker)
{
    (void)worker;
    const struct ple_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int E = hp->n_embd, hc = hp->hc;
    const size_t t = (size_t)ti, W = (size_t)hy->wide;
    float *key = hy->pkey + t * W, *g = hy->pg + t * W;
    float *query = hy->pn + t * W; /* pn holds the query until the gated value's norm replaces it */
    grouped_norm(key, key, j->ly->ple_norm_key.data, hc, E, hp->rms_eps);
    grouped_norm(query, j->x + t * W, j->ly->ple_norm_query.data, hc, E, hp->rms_eps);
    const float *v = hy->pval + t * (size_t)E;
    const float inv = 1.0f / sqrtf((float)E);
    for (int s = 0; s < hc; s++) {
        double dot = 0.0;
        for (int i = 0; i < E; i++)
            dot += (double)(key[(size_t)s * E + i] * query[(size_t)s * E + i]);
        const float sig = (float)dot * inv;
        const float mag = sqrtf(fabsf(sig) > 1e-6f ? fabsf(sig) : 1e-6f);
        const float gate = gdn_sigmoid(sig > 0.0f ? mag : sig < 0.0f ? -mag : 0.0f);
        for (int i = 0; i < E; i++)
            g[(size_t)s * E + i] = v[i] * gate;
    }
    grouped_norm(query, g, j->ly->ple_norm_conv.data, hc, E, hp->rms_eps);
}

/* Step 7 for one sequence group and a block of channels: the dilated causal conv over the history and the
 * group's rows, silu, and the history moved on to the group's last inputs. */
static void ple_conv_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct ple_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const struct hparams *hp = &hy->m->hp;
    const int grp = (int)(i / j->n_blocks), blk = (int)(i % j->n_blocks);
    const int c0 = blk * CONV_BLOCK, c1 = c0 + CONV_BLOCK < hy->wide ? c0 + CONV_BLOCK : hy->wide;
    const int K = hp->ple_kernel, dil = hp->ple_ngram, H = hy->ple_hist, T = hy->grp_len[grp];
    const int *rows = hy->rows + hy->grp_start[grp];
    const size_t W = (size_t)hy->wide;
    float *hist = hy->state + (size_t)hy->grp_seq[grp] * hy->per_seq + hy->ple_off; /* [H][W] oldest first */
    const float *w = j->ly->ple_conv.data;
    for (int tt = 0; tt < T; tt++)
        for (int c = c0; c < c1; c++) {
            float acc = 0.0f;
            for (int k = 0; k < K; k++) {
                const int q = tt - (K - 1 - k) * dil; /* < 0: from the history */
                const float x = q < 0 ? hist[(size_t)(H + q) * W + (size_t)c] : hy->pn[(size_t)rows[q] * W + (size_t)c];
                const float term = w[(size_t)c * K + k] * x;
                acc = k ? acc + term : term;
            }
            hy->pc[(size_t)rows[tt] * W + (size_t)c] = ops_silu(acc);
        }
    for (int mrow = 0; mrow < H; mrow++) /* the last H of [history | rows] */
        for (int c = c0; c < c1; c++) {
            const int q = T + mrow; /* index into [history | rows] */
            hist[(size_t)mrow * W + (size_t)c] = q < H ? hist[(size_t)q * W + (size_t)c]
                                                       : hy->pn[(size_t)rows[q - H] * W + (size_t)c];
        }
}

static void ple_add_task(void *ctx, int64_t ti, int worker)
{
    (void)worker;
    const struct ple_job *j = ctx;
    struct cpu_hybrid *hy = j->hy;
    const size_t W = (size_t)hy->wide, t = (size_t)ti;
    float *x = (float *)j->x + t * W;
    const float *g = hy->pg + t * W, *c = hy->pc + t * W;
    for (size_t i = 0; i < W; i++)
        x[i] = x[i] + (g[i] + c[i]);
}

void cpu_hybrid_ple(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n, float *x)
{
    for (int t = 0; t < n; t++) /* first every token of the batch: later ones read earlier ones as context */
        hy->tok_hist[(size_t)toks[t].seq * (size_t)hy->n_ctx + (size_t)toks[t].pos] = toks[t].token;
    struct qsa_job gj = { .hy = hy, .ly = ly, .toks = toks };
    rows_run(hy, ple_gather_task, &gj, n);
    mm(hy, &ly->ple_key, hy->pe, n, hy->pkey);
    mm(hy, &ly->ple_value, hy->pe, n, hy->pval);
    struct ple_job pj = { .hy = hy, .ly = ly, .toks = toks, .x = x,
                          .n_blocks = (hy->wide + CONV_BLOCK - 1) / CONV_BLOCK };
    rows_run(hy, ple_gate_task, &pj, n);
    group_rows(hy, toks, n);
    for (int g = 0; g < hy->n_grp; g++)
        if (toks[hy->rows[hy->grp_start[g]]].pos == 0) /* a sequence (re)starting: no history */
            memset(hy->state + (size_t)hy->grp_seq[g] * hy->per_seq + hy->ple_off, 0,
                   sizeof(float) * (size_t)hy->ple_hist * (size_t)hy->wide);
    tpool_run(hy->tp, ple_conv_task, &pj, (int64_t)hy->n_grp * pj.n_blocks);
    rows_run(hy, ple_add_task, &pj, n);
}

void cpu_hybrid_shexp(struct cpu_hybrid *hy, const struct layer *ly, const float *h, float *a, int n)
{
    const int E = hy->m->hp.n_embd, F = hy->m->hp.n_ff_shexp;
    mm(hy, &ly->gate_shexp, h, n, hy->sg);
    mm(hy, &ly->up_shexp, h, n, hy->su);
    ops_swiglu(hy->sg, hy->su, n * F);
    mm(hy, &ly->down_shexp, hy->sg, n, hy->hn); /* hn is free during the FFN */
    for (int t = 0; t < n; t++) {
        const float *ht = h + (size_t)t * E;
        double d = 0.0;
        for (int i = 0; i < E; i++)
            d += (double)(ly->gate_inp_shexp.data[i] * ht[i]);
        const float gam = gdn_sigmoid((float)d);
        float *at = a + (size_t)t * E;
        const float *s = hy->hn + (size_t)t * E;
        for (int i = 0; i < E; i++)
            at[i] = at[i] + s[i] * gam;
    }
}

/* ---- sequence state ---- */

/* Sequence seq's snapshot slots, and the state of its slot i. */
static struct snap_slot *slots_of(const struct cpu_hybrid *hy, int seq) { return hy->slots + (size_t)seq * hy->n_snap; }
static float **snap_state_of(const struct cpu_hybrid *hy, int seq, int i)
{
    return &hy->snap_state[(size_t)seq * hy->n_snap + (size_t)i];
}

static bool seq_ok(const struct kv_cache *kv, int seq) { return seq >= 0 && seq < kv->n_seq; }

/* A hybrid whose trunk has no GDN layer keeps no recurrent state: cut anywhere like a transformer. */
static const struct cpu_hybrid *stateful(const struct cpu_hybrid *hy) { return hy && hy->per_seq ? hy : NULL; }

int cpu_hybrid_seq_restorable(const struct cpu_hybrid *hy, const struct kv_cache *kv, int seq, int pos)
{
    if (!seq_ok(kv, seq) || pos <= 0)
        return 0;
    const int len = kv->len[seq];
    if (pos >= len)
        return len;
    if (!stateful(hy))
        return pos;
    return snap_restorable(slots_of(hy, seq), hy->n_snap, pos);
}

int cpu_hybrid_seq_truncate(struct cpu_hybrid *hy, struct kv_cache *kv, int seq, int pos, struct err *e)
{
    if (!seq_ok(kv, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, kv->n_seq);
    if (pos < 0)
        pos = 0;
    if (pos >= kv->len[seq])
        return 0;
    if (!stateful(hy))
        hy = NULL;
    if (hy && pos > 0) {
        const int i = snap_find(slots_of(hy, seq), hy->n_snap, pos);
        if (i < 0)
            return err_set(e, ERR_UNSUPPORTED,
                           "engine: sequence %d cannot be cut back from %d to %d: a recurrent (Gated DeltaNet) "
                           "state only rolls back to 0 or to a snapshot position (engine_seq_snapshot)",
                           seq, kv->len[seq], pos);
        memcpy(hy->state + (size_t)seq * hy->per_seq, *snap_state_of(hy, seq, i), sizeof(float) * hy->per_seq);
    }
    if (hy) /* snapshots beyond the new length no longer describe its cells */
        snap_drop_after(slots_of(hy, seq), hy->n_snap, pos);
    kv_truncate(kv, seq, pos);
    return 0;
}

int cpu_hybrid_seq_snapshot(struct cpu_hybrid *hy, struct kv_cache *kv, int seq, struct err *e)
{
    if (!seq_ok(kv, seq))
        return err_set(e, ERR_INVALID, "engine: sequence %d out of range [0, %d)", seq, kv->n_seq);
    const int pos = kv->len[seq];
    if (!stateful(hy) || pos == 0)
        return 0; /* attention state is the cells themselves; position 0 is the empty state */
    const int i = snap_slot_for(slots_of(hy, seq), hy->n_snap, pos);
    float **st = snap_state_of(hy, seq, i);
    if (!*st && !(*st = malloc(sizeof(float) * (hy->per_seq ? hy->per_seq : 1))))
        return err_set(e, ERR_NOMEM, "engine: out of memory for a state snapshot of sequence %d (%zu floats)", seq,
                       hy->per_seq);
    memcpy(*st, hy->state + (size_t)seq * hy->per_seq, sizeof(float) * hy->per_seq);
    snap_take(&slots_of(hy, seq)[i], pos, &hy->stamp);
    return 0;
}

/* What lives per cell beside the KV cache (qwen4exp): the tokens (PLE context) and the indexer keys. dst's
 * block keys are pooled again from the copied keys when next needed. */
static void copy_cells(struct cpu_hybrid *hy, int src, int dst, int n)
{
    if (!hy || src == dst || n <= 0)
        return;
    if (hy->tok_hist)
        memcpy(hy->tok_hist + (size_t)dst * (size_t)hy->n_ctx, hy->tok_hist + (size_t)src * (size_t)hy->n_ctx,
               sizeof(int) * (size_t)n);
    if (hy->n_qsa)
        qsa_cache_copy(&hy->qc, src, dst, n);
}

int cpu_hybrid_seq_copy(struct cpu_hybrid *hy, struct kv_cache *kv, int src, int dst, int n, struct err *e)
{
    if (!seq_ok(kv, src) || !seq_ok(kv, dst))
        return err_set(e, ERR_INVALID, "engine: sequence %d or %d out of range [0, %d)", src, dst, kv->n_seq);
    if (!stateful(hy)) {
        int rc = kv_copy(kv, src, dst, n, e);
        if (!rc)
            copy_cells(hy, src, dst, n);
        return rc;
    }
    if (n < 0 || n > kv->len[src])
        return err_set(e, ERR_RANGE, "engine: cannot copy %d positions of sequence %d (it has %d)", n, src,
                       kv->len[src]);
    const float *from = NULL;
    if (n == kv->len[src]) {
        from = hy->state + (size_t)src * hy->per_seq;
    } else if (n > 0) {
        const int i = snap_find(slots_of(hy, src), hy->n_snap, n);
        if (i < 0)
            return err_set(e, ERR_UNSUPPORTED,
                           "engine: cannot copy the first %d of %d positions of sequence %d: a recurrent state "
                           "exists only at its length, 0 and snapshot positions", n, kv->len[src], src);
        from = *snap_state_of(hy, src, i);
    }
    if (src == dst) /* a copy onto itself is a cut back */
        return cpu_hybrid_seq_truncate(hy, kv, src, n, e);
    int rc = kv_copy(kv, src, dst, n, e);
    if (rc)
        return rc;
    copy_cells(hy, src, dst, n);
    float *to = hy->state + (size_t)dst * hy->per_seq;
    if (from)
        memcpy(to, from, sizeof(float) * hy->per_seq);
    else
        memset(to, 0, sizeof(float) * hy->per_seq);
    /* dst inherits src's snapshots inside the copied prefix */
    struct snap_slot *ds = slots_of(hy, dst), *ss = slots_of(hy, src);
    for (int i = 0; i < hy->n_snap; i++) {
        ds[i].pos = -1;
        if (ss[i].pos < 0 || ss[i].pos > n)
            continue;
        float **to_i = snap_state_of(hy, dst, i);
        if (!*to_i && !(*to_i = malloc(sizeof(float) * (hy->per_seq ? hy->per_seq : 1))))
            continue; /* out of memory: dst just has fewer snapshots */
        memcpy(*to_i, *snap_state_of(hy, src, i), sizeof(float) * hy->per_seq);
        ds[i] = ss[i];
    }
    return 0;
}
