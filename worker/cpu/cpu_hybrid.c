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
                     hy->grp_start, hy->grp_len };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
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
        if (m->layers[il].kind == LAYER_GATED_ATTN && m->layers[il].n_head / m->layers[il].n_head_kv > n_gqa_max)
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
    if (!ok) {
        cpu_hybrid_free(hy);
        return err_set(e, ERR_NOMEM, "engine: out of memory for the recurrent state (%d sequences × %zu floats)",
                       p->n_seq, hy->per_seq);
    }
    snap_slots_clear(hy->slots, p->n_seq * hy->n_snap);
    /* IMROPE sector rule (spec §6.3.1): pairs that select p_e do not rotate for text tokens */
    const int *s = hp->rope_sections;
    const int S = s[0] + s[1] + s[2] + s[3];
    for (int i = 0; i < hp->n_rot / 2; i++) {
        const int sec = i % S;
        const bool h = sec % 3 == 1 && sec < 3 * s[1], w = sec % 3 == 2 && sec < 3 * s[2],
                   t = sec % 3 == 0 && sec < 3 * s[0];
        hy->pe_pair[i] = !(h || w || t);
    }
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

struct norm_job {
    struct cpu_hybrid *hy;
    const struct layer *ly;
    const float *x;
};

static void norm_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct norm_job *j = ctx;
    const struct hparams *hp = &j->hy->m->hp;
    const size_t E = (size_t)hp->n_embd;
    ops_rms_norm(j->hy->hn + (size_t)t * E, j->x + (size_t)t * E, j->ly->attn_norm.data, (int)E, hp->rms_eps);
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

/* gated output norm per head of one token: RMSNorm(o; ssm_norm) ⊙ silu(z) */
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
        for (int i = 0; i < dv; i++)
            o[i] = o[i] * ops_silu(z[i]);
    }
}

static void gdn_block(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n, float *out)
{
    const struct hparams *hp = &hy->m->hp;
    const int HV = hp->n_v_heads;

    mm(hy, &ly->ssm_qkv, hy->hn, n, hy->mix);
    mm(hy, &ly->ssm_z, hy->hn, n, hy->z);
    mm(hy, &ly->ssm_beta, hy->hn, n, hy->beta);
    mm(hy, &ly->ssm_alpha, hy->hn, n, hy->gd);
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

/* ---- gated full attention ---- */

struct attn_job {
    struct cpu_hybrid *hy;
    const struct engine_tok *toks;
    const struct kv_cache *kv;
    const float *f16tab;
    int il, n_head, n_head_kv;
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
    ops_attn(q, n_gqa, hd, K, V, (size_t)j->kv->dim_k[j->il], tk->pos + 1, hy->m->hp.kq_scale, j->f16tab, o,
             hy->att + (size_t)worker * hy->att_per);
}

static void gated_attn_block(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n,
                             const float *cs_all, struct kv_cache *kv, const float *f16tab, float *out)
{
    const struct hparams *hp = &hy->m->hp;
    const int D = hp->head_dim, nr = hp->n_rot;
    const int nq = ly->n_head * D, nkv = ly->n_head_kv * D;

    mm(hy, &ly->wq, hy->hn, n, hy->mix); /* per head: query D, then gate D */
    mm(hy, &ly->wk, hy->hn, n, hy->k);
    mm(hy, &ly->wv, hy->hn, n, hy->v);
    float cs[2048];
    for (int t = 0; t < n; t++) {
        memcpy(cs, cs_all + (size_t)t * nr, sizeof(float) * (size_t)nr);
        for (int i = 0; i < nr / 2; i++)
            if (hy->pe_pair[i]) {
                cs[2 * i] = 1.0f;
                cs[2 * i + 1] = 0.0f;
            }
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
    struct attn_job job = { .hy = hy, .toks = toks, .kv = kv, .f16tab = f16tab, .il = ly->kv_index,
                            .n_head = ly->n_head, .n_head_kv = ly->n_head_kv };
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

void cpu_hybrid_layer(struct cpu_hybrid *hy, const struct layer *ly, const struct engine_tok *toks, int n, const float *x,
                  float *a, const float *cs, struct kv_cache *kv, const float *f16tab)
{
    struct norm_job nj = { .hy = hy, .ly = ly, .x = x };
    rows_run(hy, norm_task, &nj, n);
    if (ly->kind == LAYER_GDN)
        gdn_block(hy, ly, toks, n, a);
    else
        gated_attn_block(hy, ly, toks, n, cs, kv, f16tab, a);
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

int cpu_hybrid_seq_copy(struct cpu_hybrid *hy, struct kv_cache *kv, int src, int dst, int n, struct err *e)
{
    if (!seq_ok(kv, src) || !seq_ok(kv, dst))
        return err_set(e, ERR_INVALID, "engine: sequence %d or %d out of range [0, %d)", src, dst, kv->n_seq);
    if (!stateful(hy))
        return kv_copy(kv, src, dst, n, e);
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
