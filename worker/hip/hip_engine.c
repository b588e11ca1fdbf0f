/* hip_engine.c — the `hip` backend's engine (hip_engine.h): every
 * architecture of arch.c with weights, KV cache and activations on the
 * device.
 *
 * One decode call: the batch's token ids, positions, sequences, output rows
 * and RoPE cos/sin (computed on the host by ops_rope_cache, so YaRN and
 * rope_freqs match the CPU exactly) go up in one pinned buffer; the layer
 * kernels run on the device reading positions from there, so a step's
 * launches depend only on (n tokens, n output rows) and are captured once as
 * a graph and replayed. Batches of up to GEMV_MAX tokens use the fused GEMV
 * kernels (weights read once, SwiGLU and residual adds fused: per token up to
 * TOKEN_GEMV_MAX, all tokens at once in the multi-token GEMV of batched
 * decode); larger ones the tiled GEMM (the launches: hip_ops.c).
 *
 * A step is model_forward (model/model_forward.h) over hip_layer_ops; the hybrids'
 * layers are hip_hybrid.c's. Files below this one: hip_hybrid, hip_fit,
 * hip_ops, hip_scratch, hip_knobs, hip_rt (none calls back up). */
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/args.h"
#include "../../common/clock.h"
#include "hip_engine.h"
#include "hip_hybrid.h"
#include "hip_knobs.h"
#include "hip_ops.h"
#include "hip_scratch.h"
#include "hip_fit.h"
#include "hip_rt.h"
#include "../model/model_forward.h"
#include "../model/model.h"
#include "../num/ops.h"

#define GEMV_MAX HIP_GEMV_MAX
#define AMAX_SLICES HIP_AMAX_SLICES
#define DEC_SPLIT HIP_DEC_SPLIT
#define SPLIT_TOKENS HIP_SPLIT_TOKENS
#define TOPK_BYTES HIP_TOPK_BYTES

static unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

#define N_GRAPHS 32 /* captured decode steps kept (shape × attention split bucket), least recent dropped */

struct graph_slot {
    int n, n_out;          /* the shape it was captured for */
    int ns;                /* its attention grid's splits (dec_splits) */
    bool greedy;
    bool rope_attn;        /* rope_store's work done by the decode attention (c->rope_attn) */
    hip_graph g;
};

struct hip_engine {
    struct hip_ops ops;    /* the launch core: model, params, knobs, runtime, product kernels, layer weights, the
                              step buffers the layers share (hip_ops.h) */
    bool pinned;           /* host_alloc page-locks (hip_knobs.pinned; off: plain memory, for A/B runs) */
    bool graphs;           /* decode steps replayed as graphs (hip_knobs.graphs; off while profiling) */
    /* kernels of the engine's own layers */
    bool one_seq;          /* every token of the current batch is of one sequence */
    bool rope_attn;        /* the current step's q/k norm, RoPE and K/V store done by fattn_dec_128 (attn_args.rope):
                              a GEMV-sized step whose tokens are each of another sequence, its longest cache over
                              256 positions, on a model fattn_dec_128 takes (hip_knobs.rope_attn) */
    bool rope_attn_ok;     /* ... the model and the settings allow it */
    int dec_ns;            /* attention splits of the current step's grid when it has ≤ SPLIT_TOKENS tokens */
    bool split_buckets;    /* dec_ns from the step's longest cache (dec_splits), else always DEC_SPLIT
                              (hip_knobs.split_buckets) */
    int split_tokens;      /* steps of up to this many tokens split their attention (hip_knobs.split_tokens) */
    hip_fn k_embed, k_rope, k_add, k_swiglu, k_route, k_combine, k_argmax, k_attn, k_attn_comb;
    hip_fn k_attn_gqa;     /* attention reading each K/V row once for its query-head group */
    hip_fn k_fattn_dec;    /* fattn_dec_128: decode attention on tensor cores, a warp per KV head and split */
    hip_fn k_fattn_dec4;   /* fattn_dec4_128: the same for short caches, a block of DEC4_W warps per KV head
                              merging its splits (NULL where absent or hip_knobs.dec4 is off) */
    bool use_dec4;         /* hip_knobs.dec4 */
    bool dec4;             /* the current step's attention on k_fattn_dec4 (its caches take ≤ 4 splits) */
    int dec_ns_tc;         /* its splits on caches over HIP_DEC_TC_LONG positions (dec_splits) */
    bool attn_tc;          /* every attention layer's decode through k_fattn_dec (hip_knobs.attn_tc, head size
                              128, f16 cache, query-head groups of at most 16) */
    bool gqa;              /* decode attention through k_attn_gqa where the group fits (hip_knobs.gqa: measured
                              slower at depth than the per-head kernel, equal at short context: opt-in) */
    /* weights */
    struct dw tok_embd, output;
    struct hip_dptr output_norm, output_bias; /* f32 [E], [V] or none */
    /* state */
    int *len;              /* [n_seq] cached positions */
    int *seq_next;         /* [n_seq] */
    /* scratch (device) the engine's layers alone use, B = n_batch (the shared ones are in ops) */
    struct hip_dptr fg, fu; /* [B·K or B][F] */
    struct hip_dptr logits; /* [B][V] */
    struct hip_dptr rl;    /* [B][X] router logits */
    struct hip_dptr sel;   /* [B][K] int */
    struct hip_dptr sw;    /* [B][K] */
    struct hip_dptr ey;    /* [B·K][E] */
    struct hip_dptr grp;   /* moe_group's output: int gmap [GRP_MAP(B·K, X)] (tile count, then (expert, start,
                              pairs) a tile), then int perm [B·K] (the pairs expert by expert) */
    hip_fn k_group;        /* moe_group */
    hip_fn mmag[3][QT_COUNT]; /* grouped tensor-core GEMM over the experts' pairs: 32 / 64 / 128 pairs a tile */
    hip_fn wgg[2][QT_COUNT];  /* the same on warpgroup MMA (sm_90a): 64 / 128 pairs a tile, or NULL */
    bool moe_gemm;         /* MoE prompts through moe_group + the grouped GEMM (hip_knobs.moe_gemm) */
    struct hip_dptr amax;  /* [B] int argmax results */
    struct hip_dptr amx;   /* argmax_split's slices: f32 [B][AMAX_SLICES] values, int [B][AMAX_SLICES] indices,
                              int [B] counters (zero between launches) */
    struct hip_dptr fcnt;  /* [GEMV_MAX·Kq][F/32] int counters of the gate/up GEMV (zero between launches) */
    void *io_h;            /* pinned mirror of io */
    int32_t *amax_h;       /* pinned [B] */
    struct hip_dptr topk;  /* topk_cut's arrays: int k [B], int cnt [B], int ids [B][CAP], f32 vals [B][CAP],
                              CAP = ENGINE_CAND_CAP, int masked [B], u32 allow [B][(V + 31) / 32]
                              (TOPK_BYTES(B, V)) */
    int32_t *topk_h;       /* pinned mirror of topk */
    hip_fn k_topk;         /* topk_cut */
    int nq_max, nkv_max, F;
    int Kq;                /* rows of fq per token: n_expert_used for MoE (one per slot), else 1 */
    struct hip_dptr acnt;  /* [SPLIT_TOKENS][n_head] int split counters of the merge fused into attn (zero between
                              launches) */
    bool join_qkv;         /* Q, K and V uploaded as one [Q | K | V] matrix where they can be (up_qkv;
                              hip_knobs.join_qkv) */
    bool fuse_attn;        /* the last split block of a head merges the splits instead of attn_combine
                              (hip_knobs.fuse_attn) */
    bool amax_split;       /* greedy argmax over AMAX_SLICES blocks a row (argmax_split) instead of one block
                              (argmax_rows; hip_knobs.amax_split) */
    hip_fn k_argmax1;      /* argmax_rows */
    bool defer_norm;       /* single-token steps: the RMSNorm of a sublayer's input deferred to its GEMVs (the
                              residual GEMV before writes x∘w as q8 and Σ x², each GEMV reading it scales its
                              outputs; kernels/gemv.cu norm_group_tail) instead of an rms_norm launch
                              (hip_knobs.defer_norm) */
    bool fuse_route;       /* MoE routing in the router GEMV's last block (hip_knobs.fuse_route) */
    struct graph_slot gs[N_GRAPHS];
    int n_gs;
    struct hip_hybrid *hy; /* qwen35* layers and their recurrent state (hip_hybrid.c), else NULL */
    /* the step model_forward is running (enqueue sets them before the walk) */
    int step_n_out;        /* rows that asked for logits */
    bool step_greedy;      /* the output op ends in the device argmax */
    bool step_dn;          /* defer_ok(c, n): the sublayer norms after the first are deferred to their GEMVs */
    struct engine_load ld; /* what create took and holds (hb_load_info): the fit plan's bytes, the phases' times */
};

/* ---- setup ---- */


/* Whether Q, K and V of a layer can be uploaded as one [Q | K | V] matrix (up_qkv): same type and
 * width, no biases, no fused tensor already. The decode step then runs one GEMV for the three
 * projections (one launch fewer a layer; each row's dot is the same kernel's, so the logits do not
 * change; measured +3.3 % tg128 on qwen3-8b, docs/benchmarks.md). */
static bool qkv_joinable(const struct layer *ly)
{
    const struct wt *q = &ly->wq, *k = &ly->wk, *v = &ly->wv;
    return q->data && k->data && v->data && !ly->wqkv.data && !ly->bq.data && !ly->bk.data && !ly->bv.data &&
           q->type == k->type && q->type == v->type && q->ne[0] == k->ne[0] && q->ne[0] == v->ne[0] &&
           q->ne[2] <= 1 && k->ne[2] <= 1 && v->ne[2] <= 1 && q->row_bytes == k->row_bytes &&
           q->row_bytes == v->row_bytes && hip_ops_type_ok(q->type) &&
           !((q->type == QT_F32 || q->type == QT_F16) && q->ne[0] % 4);
}

/* d = the rows of Q, then K, then V (rows nq + 2·nkv) in one allocation */
static int up_qkv(struct hip_engine *c, struct stager *s, const struct layer *ly, struct dw *d, struct err *e)
{
    const struct wt *w[3] = { &ly->wq, &ly->wk, &ly->wv };
    memset(d, 0, sizeof *d);
    d->type = w[0]->type;
    d->ne0 = w[0]->ne[0];
    d->ne1 = w[0]->ne[1] + w[1]->ne[1] + w[2]->ne[1];
    d->ne2 = 1;
    d->row_bytes = w[0]->row_bytes;
    int rc = hip_ops_dalloc(&c->ops, d->row_bytes * (size_t)d->ne1, &d->d, e);
    uint64_t off = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        const size_t n = w[i]->row_bytes * (size_t)w[i]->ne[1];
        rc = hip_ops_upload(&c->ops, s, hip_dptr_off(d->d, off), w[i]->data, n, e);
        off += n;
    }
    return rc;
}


void hip_engine_free(struct hip_engine *c)
{
    if (!c)
        return;
    if (c->ops.rt) {
        hip_rt_bind(c->ops.rt, NULL);
        hip_rt_sync(c->ops.rt, NULL);
        hip_hybrid_free(c->hy);
        for (int i = 0; i < c->n_gs; i++)
            hip_rt_graph_free(c->ops.rt, c->gs[i].g);
        hip_ops_release(&c->ops);
        hip_rt_host_free(c->ops.rt, c->io_h);
        hip_rt_host_free(c->ops.rt, c->amax_h);
        hip_rt_host_free(c->ops.rt, c->topk_h);
        hip_rt_close(c->ops.rt);
    }
    free(c->ops.allocs);
    free(c->ops.L);
    free(c->len);
    free(c->seq_next);
    free(c);
}

static int hip_engine_n_ctx(const struct hip_engine *c) { return c->ops.p.n_ctx; }
const char *hip_engine_device(const struct hip_engine *c) { return hip_rt_describe(c->ops.rt); }
void hip_engine_set_graphs(struct hip_engine *c, bool on) { c->graphs = on; }

int hip_engine_profile(struct hip_engine *c, bool on, struct err *e)
{
    c->graphs = !on;
    return hip_rt_profile(c->ops.rt, on, e);
}

int hip_engine_profile_report(struct hip_engine *c, struct hip_prof_row *rows, int max, struct err *e)
{
    return hip_rt_profile_report(c->ops.rt, rows, max, e);
}

static int get_kernels(struct hip_engine *c, struct err *e)
{
    static const struct { int t; const char *s; } names[] = {
        { QT_F32, "f32" }, { QT_F16, "f16" }, { QT_Q8_0, "q8_0" }, { QT_Q4_K, "q4_K" },
        { QT_Q5_K, "q5_K" }, { QT_Q6_K, "q6_K" }, { QT_IQ4_XS, "iq4_xs" },
    };
    char nm[64];
    int rc;
    /* the GEMVs and the decode step's small kernels order themselves for programmatic dependent
     * launch (PDL_WAIT in every path, kernels/prelude.h): hip_rt_fn_pdl; the rest launch plainly */
    struct err ign0;
    if (!c->ops.use_xfrag || hip_rt_fn(c->ops.rt, "q8_frag", &c->ops.k_q8_frag, &ign0))
        c->ops.k_q8_frag = NULL; /* NVIDIA (kernels/gemvb.cu), XFRAG on */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(nm, sizeof nm, "gemv_%s", names[i].s);
        if ((rc = hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemv[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemv_%s_dn", names[i].s);
        if ((rc = hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemv_dn[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemm_%s", names[i].s);
        if ((rc = hip_rt_fn(c->ops.rt, nm, &c->ops.gemm[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemvq_%s", names[i].s);
        struct err ign;
        if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvq[names[i].t], &ign))
            c->ops.gemvq[names[i].t] = NULL; /* f32 activations only for this type */
        c->ops.gemvq_r[0][names[i].t] = c->ops.gemvq[names[i].t];
        snprintf(nm, sizeof nm, "gemvq_%s_dn", names[i].s);
        if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvq_dn[0][names[i].t], &ign))
            c->ops.gemvq_dn[0][names[i].t] = NULL;
        for (int wide = 0; wide < 2; wide++) {
            snprintf(nm, sizeof nm, "gemvb%s_%s", wide ? "16" : "", names[i].s);
            if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvb[wide][names[i].t], &ign))
                c->ops.gemvb[wide][names[i].t] = NULL; /* no multi-token kernel for this type */
            snprintf(nm, sizeof nm, "gemvbd%s_%s", wide ? "16" : "", names[i].s);
            if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvbd[wide][names[i].t], &ign))
                c->ops.gemvbd[wide][names[i].t] = NULL;
            snprintf(nm, sizeof nm, "gemvbm%s_%s", wide ? "d" : "", names[i].s);
            if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvbm[wide][names[i].t], &ign))
                c->ops.gemvbm[wide][names[i].t] = NULL; /* no tensor-core kernel: AMD, or this type */
            hip_fn *fp = &c->ops.gemvbp[wide][names[i].t];
            snprintf(nm, sizeof nm, "gemvbp%s_%s", wide ? "d" : "", names[i].s);
            if (!c->ops.use_gemvbp || !c->ops.smem_optin || GEMVBP_SMEM(names[i].t, wide) > c->ops.smem_optin ||
                hip_rt_fn_pdl(c->ops.rt, nm, fp, &ign) ||
                hip_rt_fn_smem(c->ops.rt, *fp, GEMVBP_SMEM(names[i].t, wide), &ign))
                *fp = NULL;
            hip_fn *ff = &c->ops.gemvbf[wide][names[i].t]; /* its twin on activations in fragment order */
            snprintf(nm, sizeof nm, "gemvbp%s_%s_f", wide ? "d" : "", names[i].s);
            if (!*fp || !c->ops.k_q8_frag || hip_rt_fn_pdl(c->ops.rt, nm, ff, &ign) ||
                hip_rt_fn_smem(c->ops.rt, *ff, GEMVBP_SMEM(names[i].t, wide), &ign))
                *ff = NULL;
        }
        for (int xu = 0; xu < 2; xu++) /* the streamed single-token GEMV (NVIDIA; q8 types) */
            for (int dn = 0; dn < 2; dn++) {
                hip_fn *f = &c->ops.gemvs[xu][dn][names[i].t];
                snprintf(nm, sizeof nm, "gemvs_%s%s%s", names[i].s, xu ? "_x4" : "", dn ? "_dn" : "");
                if (!c->ops.smem_optin || hip_rt_fn_pdl(c->ops.rt, nm, f, &ign) ||
                    hip_rt_fn_smem(c->ops.rt, *f, c->ops.smem_optin, &ign))
                    *f = NULL;
            }
        for (int r = 1; r < 3; r++) {
            snprintf(nm, sizeof nm, "gemvq%d_%s", 2 << r, names[i].s);
            if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvq_r[r][names[i].t], &ign))
                c->ops.gemvq_r[r][names[i].t] = NULL;
            snprintf(nm, sizeof nm, "gemvq%d_%s_dn", 2 << r, names[i].s);
            if (hip_rt_fn_pdl(c->ops.rt, nm, &c->ops.gemvq_dn[r][names[i].t], &ign))
                c->ops.gemvq_dn[r][names[i].t] = NULL;
        }
        /* the tensor-core GEMMs (NVIDIA; not f32 weights); the 64- and 128-token tiles take MMA_SMEM of
         * dynamic shared memory */
        snprintf(nm, sizeof nm, "mma_%s", names[i].s);
        if (hip_rt_fn(c->ops.rt, nm, &c->ops.mma[names[i].t], &ign) ||
            hip_rt_fn_smem(c->ops.rt, c->ops.mma[names[i].t], MMA_SMEM(64), &ign))
            c->ops.mma[names[i].t] = NULL;
        snprintf(nm, sizeof nm, "mma32_%s", names[i].s);
        if (hip_rt_fn(c->ops.rt, nm, &c->ops.mma32[names[i].t], &ign))
            c->ops.mma32[names[i].t] = NULL;
        snprintf(nm, sizeof nm, "mma128_%s", names[i].s);
        if (hip_rt_fn(c->ops.rt, nm, &c->ops.mma128[names[i].t], &ign) ||
            hip_rt_fn_smem(c->ops.rt, c->ops.mma128[names[i].t], MMA_SMEM(128), &ign))
            c->ops.mma128[names[i].t] = NULL;
        static const char *const gpre[3] = { "mmag32", "mmag", "mmag128" };
        for (int g = 0; g < 3; g++) {
            snprintf(nm, sizeof nm, "%s_%s", gpre[g], names[i].s);
            if (hip_rt_fn(c->ops.rt, nm, &c->mmag[g][names[i].t], &ign) ||
                (g && hip_rt_fn_smem(c->ops.rt, c->mmag[g][names[i].t], MMA_SMEM(32 << g), &ign)))
                c->mmag[g][names[i].t] = NULL;
        }
        /* the 64- and 128-token tiles on warpgroup MMA: only in modules compiled for sm_90a */
        static const char *const wpre[2][2] = { { "wgmma", "wgmma128" }, { "wgmmag", "wgmmag128" } };
        for (int g = 0; g < 2; g++)
            for (int v = 0; v < 2; v++) {
                hip_fn *f = g ? &c->wgg[v][names[i].t] : &c->ops.wg[v][names[i].t];
                snprintf(nm, sizeof nm, "%s_%s", wpre[g][v], names[i].s);
                if (hip_rt_fn(c->ops.rt, nm, f, &ign) || hip_rt_fn_smem(c->ops.rt, *f, WG_SMEM(64 << v), &ign))
                    *f = NULL;
            }
    }
    struct err ign;
    if (hip_rt_fn(c->ops.rt, "mma_xprep", &c->ops.k_mma_xprep, &ign))
        c->ops.k_mma_xprep = NULL;
    if (hip_rt_fn(c->ops.rt, "swiglu_rows", &c->ops.k_swiglu_rows, &ign))
        c->ops.k_swiglu_rows = NULL;
    if (hip_rt_fn(c->ops.rt, "moe_group", &c->k_group, &ign))
        c->k_group = NULL;
    hip_ops_fattn_load(&c->ops);
    if (hip_rt_fn_pdl(c->ops.rt, "fattn_dec_128", &c->k_fattn_dec, &ign))
        c->k_fattn_dec = NULL;
    if (!c->k_fattn_dec || !c->use_dec4 || !c->ops.smem_optin || FATTN_DEC4_SMEM(128) > c->ops.smem_optin ||
        hip_rt_fn_pdl(c->ops.rt, "fattn_dec4_128", &c->k_fattn_dec4, &ign) ||
        hip_rt_fn_smem(c->ops.rt, c->k_fattn_dec4, FATTN_DEC4_SMEM(128), &ign))
        c->k_fattn_dec4 = NULL;
    struct { hip_fn *f; const char *n; bool pdl; } ks[] = {
        { &c->k_embed, "embed_rows", false }, { &c->ops.k_rms, "rms_norm", true }, { &c->k_rope, "rope_store", true },
        { &c->k_add, "add_f32", false }, { &c->k_swiglu, "swiglu_f32", false }, { &c->k_route, "moe_route", true },
        { &c->k_combine, "moe_combine", false }, { &c->k_argmax, "argmax_split", true },
        { &c->k_argmax1, "argmax_rows", true }, { &c->k_attn, "attn", true },
        { &c->k_attn_comb, "attn_combine", true }, { &c->ops.k_quant, "quantize_q8", true },
        { &c->k_attn_gqa, "attn_gqa", true }, { &c->k_topk, "topk_cut", false },
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if ((rc = (ks[i].pdl ? hip_rt_fn_pdl : hip_rt_fn)(c->ops.rt, ks[i].n, ks[i].f, e)))
            return rc;
    return 0;
}

static const struct layer_ops hip_layer_ops;

int hip_engine_create(struct hip_engine **out, const struct model *m, const struct engine_params *pin,
                      const struct hip_knobs *k, struct err *e)
{
    *out = NULL;
    struct engine_params p;
    int rc0 = backend_params_resolve(m, pin, &p, e);
    if (rc0)
        return rc0;
    const struct hparams *hp = &m->hp;
    /* moe_route (kernels/misc.cu): one warp, K picks written by lanes < K, 8 experts a lane (warp >= 32) */
    if (hp->head_dim > 256 || hp->n_rot > hp->head_dim || hp->n_expert_used > 32 || hp->n_expert > 256)
        return err_set(e, ERR_UNSUPPORTED, "hip: head_dim %d / n_rot %d / %d of %d experts are beyond the kernels",
                       hp->head_dim, hp->n_rot, hp->n_expert_used, hp->n_expert);
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kind != LAYER_ATTN && !m->arch->hybrid)
            return err_set(e, ERR_UNSUPPORTED, "hip: layer %d has a kind the GPU backend does not run yet", il);
    if ((rc0 = model_forward_check(m, &hip_layer_ops, "hip", e)))
        return rc0;

    struct hip_engine *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "hip: out of memory");
    c->ops.m = m;
    c->ops.p = p;
    struct hip_knobs kenv;
    if (!k) {
        hip_knobs_from_env(&kenv);
        k = &kenv;
    }
    c->ops.k = *k;
    c->pinned = k->pinned;
    c->graphs = k->graphs;
    c->ops.q8 = k->q8;
    c->defer_norm = k->defer_norm;
    c->fuse_route = k->fuse_route;
    c->moe_gemm = k->moe_gemm;
    c->join_qkv = k->join_qkv;
    c->fuse_attn = k->fuse_attn;
    c->amax_split = k->amax_split;
    c->ops.gemv_r = k->gemv_r;
    c->ops.gemv_warps = k->gemv_warps;
    c->ops.use_gemvs = k->gemvs;
    c->ops.use_mma = k->use_mma;
    c->ops.use_wg = k->use_wg;
    c->ops.streamk = k->streamk;
    c->ops.gemvb_t = k->gemvb_t;
    c->ops.gemvbm_min = k->gemvbm_min;
    c->ops.use_gemvbp = k->gemvbp;
    c->ops.use_xfrag = k->xfrag;
    c->use_dec4 = k->dec4;
    c->ops.mma_t = k->mma_t;
    c->dec_ns = DEC_SPLIT;
    c->split_buckets = k->split_buckets;
    c->split_tokens = k->split_tokens;
    c->ops.mma_waves = k->mma_waves;
    c->ops.mma_fill = k->mma_fill;
    c->gqa = k->gqa;
    /* the load's phases (engine_load): opening the device counts as allocation, its module loop as
     * compilation (hip_rt_compile_s) */
    uint64_t t0 = clock_now_ns();
    int rc = hip_rt_open_ex(&c->ops.rt, k->compile_threads, k->split_compile, p.has_device ? p.device : -1, e);
    if (!rc) {
        c->ops.pf = hip_rt_pdl(c->ops.rt) && k->pdl_prefetch;
        c->ops.smem_optin = hip_rt_smem_optin(c->ops.rt);
        rc = get_kernels(c, e);
    }
    c->ops.L = calloc((size_t)hp->n_layer, sizeof *c->ops.L);
    c->len = calloc((size_t)p.n_seq, sizeof(int));
    c->seq_next = calloc((size_t)p.n_seq, sizeof(int));
    if (!rc && (!c->ops.L || !c->len || !c->seq_next))
        rc = err_set(e, ERR_NOMEM, "hip: out of memory");
    if (rc) {
        hip_engine_free(c);
        return rc;
    }
    c->ops.warp = hip_rt_warp(c->ops.rt);
    c->ops.sms = hip_rt_sm_count(c->ops.rt);

    c->ld.t_compile = hip_rt_compile_s(c->ops.rt);
    uint64_t t1 = clock_now_ns();
    c->ld.t_alloc = (double)(t1 - t0) / 1e9 - c->ld.t_compile;
    t0 = t1;

    /* refuse a model that does not fit before uploading anything, with the numbers */
    struct hip_fit fit;
    hip_fit_need(m, &p, &fit);
    const size_t free_mem = hip_rt_free_mem(c->ops.rt); /* 0: the driver did not say; the allocations will */
    if (free_mem && (rc = hip_fit_check(&fit, free_mem, hip_rt_describe(c->ops.rt), &p, e))) {
        hip_engine_free(c);
        return rc;
    }
    /* the breakdown `llm170 ps` shows: the plan the allocations below follow buffer by buffer */
    c->ld.weights = fit.weights;
    c->ld.kv = fit.kv;
    c->ld.state = fit.state;
    c->ld.snap = fit.snap;
    c->ld.scratch = fit.act;
    c->ld.state_per_seq = fit.state_per_seq;
    c->ld.n_snap = fit.n_snap;

    /* weights, uploaded once through pinned staging buffers (two alternating: hip_knobs.upload_pipe) */
    struct stager s;
    if ((rc = hip_ops_stager_open(&c->ops, &s, 64u << 20, e))) {
        hip_engine_free(c);
        return rc;
    }
    rc = hip_ops_up_wt(&c->ops, &s, &m->tok_embd, &c->tok_embd, e);
    if (!rc)
        rc = hip_ops_up_wt(&c->ops, &s, &m->output, &c->output, e);
    if (!rc)
        rc = hip_ops_up_vec(&c->ops, &s, &m->output_norm, &c->output_norm, e);
    if (!rc)
        rc = hip_ops_up_vec(&c->ops, &s, &m->output_bias, &c->output_bias, e);
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        const struct layer *ly = &m->layers[il];
        struct hip_ops_layer *d = &c->ops.L[il];
        const struct wt *ws[] = { &ly->wq, &ly->wk, &ly->wv, &ly->wqkv, &ly->wo, &ly->ffn_gate, &ly->ffn_up,
                                  &ly->ffn_down, &ly->gate_inp, &ly->gate_exps, &ly->up_exps, &ly->down_exps };
        struct dw *dws[] = { &d->wq, &d->wk, &d->wv, &d->wqkv, &d->wo, &d->gate, &d->up,
                             &d->down, &d->gate_inp, &d->gate_exps, &d->up_exps, &d->down_exps };
        /* dense models: Q, K and V joined when they can be (LLM170_HIP_QKV=0 keeps them apart); the
         * hybrids' layers lend wq / wk / wv to hip_hybrid.c as they are */
        const bool join = c->join_qkv && !m->arch->hybrid && qkv_joinable(ly);
        if (join)
            rc = up_qkv(c, &s, ly, &d->wqkv, e);
        for (size_t i = join ? 4 : 0; i < sizeof ws / sizeof ws[0] && !rc; i++)
            rc = hip_ops_up_wt(&c->ops, &s, ws[i], dws[i], e);
        const struct vec *vs[] = { &ly->attn_norm, &ly->ffn_norm, &ly->q_norm, &ly->k_norm, &ly->bq, &ly->bk,
                                   &ly->bv, &ly->bqkv, &ly->bo, &ly->b_gate, &ly->b_up, &ly->b_down };
        struct hip_dptr *dvs[] = { &d->attn_norm, &d->ffn_norm, &d->q_norm, &d->k_norm, &d->bq, &d->bk,
                                   &d->bv, &d->bqkv, &d->bo, &d->b_gate, &d->b_up, &d->b_down };
        for (size_t i = 0; i < sizeof vs / sizeof vs[0] && !rc; i++)
            rc = hip_ops_up_vec(&c->ops, &s, vs[i], dvs[i], e);
    }
    if (!rc && m->arch->hybrid)
        rc = hip_hybrid_create(&c->hy, &c->ops, m, &p, &s, e);
    /* every copy has landed once the stager is closed (it synchronizes before freeing the buffers) */
    const int rc_s = hip_ops_stager_close(&c->ops, &s, rc ? NULL : e);
    if (!rc)
        rc = rc_s;
    if (rc) {
        hip_engine_free(c);
        return rc;
    }
    t1 = clock_now_ns();
    c->ld.t_upload = (double)(t1 - t0) / 1e9; /* the hybrids' states and step scratch (hip_hybrid_create) too */
    t0 = t1;

    /* KV cache */
    c->ops.kv_elt = p.kv_f32 ? 4 : 2;
    /* the tensor-core decode attention where every attention layer fits it (not the hybrids, whose gated
     * attention is hip_hybrid.c's) */
    c->attn_tc = k->attn_tc && c->k_fattn_dec && c->ops.warp == 32 && c->ops.kv_elt == 2 && hp->head_dim == 128 &&
                 !m->arch->hybrid;
    int max_kv_heads = 1;
    for (int il = 0; il < hp->n_layer && c->attn_tc; il++) {
        const struct layer *ly = &m->layers[il];
        if (ly->n_head_kv < 1 || ly->n_head % ly->n_head_kv || ly->n_head / ly->n_head_kv > 16)
            c->attn_tc = false;
        else if (ly->n_head_kv > max_kv_heads)
            max_kv_heads = ly->n_head_kv;
    }
    /* a long cache's splits: one token's blocks (KV heads × splits, one warp each) about one wave of
     * the device's resident blocks, HIP_DEC_TC_BLOCKS a multiprocessor (more waves end in a part-empty
     * one; fewer leave multiprocessors idle) */
    c->dec_ns_tc = c->ops.sms * HIP_DEC_TC_BLOCKS / max_kv_heads;
    c->dec_ns_tc = c->dec_ns_tc < DEC_SPLIT ? DEC_SPLIT : c->dec_ns_tc > HIP_DEC_SPLIT_TC ? HIP_DEC_SPLIT_TC : c->dec_ns_tc;
    /* rope_store's work inside fattn_dec_128: head size 128 (a warp holds a head), pairs of whole lanes */
    c->rope_attn_ok = c->attn_tc && k->rope_attn && hp->n_rot % 8 == 0 && hp->n_rot <= 128;
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        const struct layer *ly = &m->layers[il];
        if (ly->kv_index < 0)
            continue;
        size_t bytes = (size_t)p.n_seq * (size_t)p.n_ctx * (size_t)(ly->n_head_kv * hp->head_dim) * c->ops.kv_elt;
        rc = hip_ops_dalloc(&c->ops, bytes, &c->ops.L[il].kc, e);
        if (!rc)
            rc = hip_ops_dalloc(&c->ops, bytes, &c->ops.L[il].vc, e);
        if (!rc)
            rc = hip_rt_memset32(c->ops.rt, c->ops.L[il].kc, 0, bytes / 4, e);
        if (!rc)
            rc = hip_rt_memset32(c->ops.rt, c->ops.L[il].vc, 0, bytes / 4, e);
    }
    /* scratch: the plan (hip_scratch.c) that also sized the fit check, allocated in its order */
    struct hip_scratch sp;
    hip_scratch_plan(m, &p, &sp);
    c->nq_max = sp.nq_max;
    c->nkv_max = sp.nkv_max;
    c->ops.W = sp.W;
    c->F = sp.F;
    c->Kq = sp.Kq;
    struct hip_dptr *const dst[HIP_SCR_COUNT] = {
        [HIP_SCR_IO] = &c->ops.io, [HIP_SCR_X] = &c->ops.x, [HIP_SCR_H] = &c->ops.h, [HIP_SCR_QKV] = &c->ops.qkv,
        [HIP_SCR_O] = &c->ops.o, [HIP_SCR_FG] = &c->fg, [HIP_SCR_FU] = &c->fu, [HIP_SCR_LOGITS] = &c->logits,
        [HIP_SCR_PART] = &c->ops.part, [HIP_SCR_RL] = &c->rl, [HIP_SCR_SEL] = &c->sel, [HIP_SCR_SW] = &c->sw,
        [HIP_SCR_EY] = &c->ey, [HIP_SCR_AMAX] = &c->amax, [HIP_SCR_AMX] = &c->amx, [HIP_SCR_XQ] = &c->ops.xq,
        [HIP_SCR_XQD] = &c->ops.xqd, [HIP_SCR_FQ] = &c->ops.fq, [HIP_SCR_FQD] = &c->ops.fqd, [HIP_SCR_FCNT] = &c->fcnt,
        [HIP_SCR_XF] = &c->ops.xf, [HIP_SCR_XFD] = &c->ops.xfd, [HIP_SCR_HQ] = &c->ops.hq,
        [HIP_SCR_HQD] = &c->ops.hqd, [HIP_SCR_HSP] = &c->ops.hsp,
        [HIP_SCR_NCNT] = &c->ops.ncnt, [HIP_SCR_ACNT] = &c->acnt, [HIP_SCR_TOPK] = &c->topk,
        [HIP_SCR_GRP] = &c->grp, [HIP_SCR_XSC] = &c->ops.xsc, [HIP_SCR_XH] = &c->ops.xh,
    };
    const size_t F = (size_t)c->F, KS = GEMV_MAX * (size_t)c->Kq;
    const size_t io_bytes = sp.bytes[HIP_SCR_IO];
    for (int i = 0; i < HIP_SCR_COUNT && !rc; i++)
        rc = hip_ops_dalloc(&c->ops, sp.bytes[i], dst[i], e);
    c->ops.xh_cap = sp.bytes[HIP_SCR_XH] / 2;
    c->ops.xsc_cap = sp.bytes[HIP_SCR_XSC] / 4;
    if (!rc)
        rc = hip_rt_memset32(c->ops.rt, c->fcnt, 0, KS * (F / 32 + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->ops.rt, c->ops.ncnt, 0, GEMV_MAX * ((size_t)hp->n_embd / 32 + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->ops.rt, c->amx, 0, (size_t)p.n_batch * (2 * AMAX_SLICES + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->ops.rt, c->acnt, 0, (size_t)SPLIT_TOKENS * (size_t)m->hp.n_head_max, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->ops.rt, io_bytes, &c->io_h, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->ops.rt, (size_t)p.n_batch * 4, (void **)&c->amax_h, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->ops.rt, TOPK_BYTES((size_t)p.n_batch, (size_t)hp->n_vocab), (void **)&c->topk_h, e);
    if (!rc)
        rc = hip_rt_sync(c->ops.rt, e);
    if (rc) {
        hip_engine_free(c);
        return rc;
    }
    c->ld.t_alloc += (double)(clock_now_ns() - t0) / 1e9;
    size_t dfree = 0, dtotal = 0;
    if (!hip_rt_mem_info(c->ops.rt, &dfree, &dtotal) && dtotal >= dfree) {
        c->ld.dev_used = dtotal - dfree;
        c->ld.dev_total = dtotal;
    }
    *out = c;
    return 0;
}

/* ---- launches ---- */


#define TRY(x)                 \
    do {                       \
        if ((rc = (x)) != 0)   \
            return rc;         \
    } while (0)

/* next_norm: the RMSNorm weight of the sublayer after this one, deferred by the residual GEMV (defer_ok), or 0 */
static int attn_layer(struct hip_engine *c, const struct layer *ly, const struct hip_ops_layer *d, int n,
                      struct hip_dptr next_norm,
                      struct err *e)
{
    const struct model *m = c->ops.m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd, hd = hp->head_dim, W = c->ops.W, B = c->ops.p.n_batch;
    const int nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;
    const uint64_t tok = c->ops.io.a, pos = tok + 4u * (uint64_t)B, seq = pos + 4u * (uint64_t)B;
    const uint64_t cs = c->ops.io.a + 16u * (uint64_t)B;
    int rc;
    /* the input: normed in h (+ q8 in xq), or x∘w in hq with its norm deferred to these GEMVs */
    const int qh = c->ops.h_def ? 3 : hip_ops_want_q8(&c->ops, E);
    /* over GEMV_MAX tokens the norm also writes the f16 rows the tensor-core GEMMs read (no mma_xprep) */
    const bool f16 = !c->ops.h_def && n > GEMV_MAX && hip_ops_rms_f16_ok(&c->ops, n, E);
    if (!c->ops.h_def)
        TRY(hip_ops_rms(&c->ops, c->ops.h, c->ops.x, d->attn_norm, HIP_DNULL, n, E, E, E, qh, f16, e));
    c->ops.h_def = false;
    if (!hip_dptr_null(d->wqkv.d)) { /* rows of nq + 2·nkv, as rope_store and attn read them (qs below) */
        c->ops.x_ready = f16;
        TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
            .w = &d->wqkv, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = c->ops.qkv, .y_stride = nq + 2 * nkv,
            .bias = d->bqkv, .q = qh,
        }, e));
    } else {
        c->ops.x_ready = f16;
        TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
            .w = &d->wq, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = c->ops.qkv, .y_stride = W,
            .bias = d->bq, .q = qh,
        }, e));
        const struct hip_dptr yk = hip_dptr_off(c->ops.qkv, 4u * (uint64_t)nq);
        const struct hip_dptr yv = hip_dptr_off(c->ops.qkv, 4u * (uint64_t)(nq + nkv));
        if (n <= GEMV_MAX && d->wk.type == d->wv.type && d->wk.ne0 == d->wv.ne0 && d->wk.ne1 == d->wv.ne1) {
            TRY(hip_ops_mm_dual(&c->ops, &(struct hip_mm){
                .w = &d->wk, .w2 = &d->wv, .x = c->ops.h, .x_stride = E, .nz = n, .y = yk, .y2 = yv, .y_stride = W,
                .bias = d->bk, .bias2 = d->bv, .q = qh,
            }, e));
        } else {
            c->ops.x_ready = f16;
            TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
                .w = &d->wk, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = yk, .y_stride = W, .bias = d->bk,
                .q = qh,
            }, e));
            c->ops.x_ready = f16;
            TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
                .w = &d->wv, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = yv, .y_stride = W, .bias = d->bv,
                .q = qh,
            }, e));
        }
    }
    /* the fused projection lays out [Q | K | V] per row with its own width */
    const int qs = !hip_dptr_null(d->wqkv.d) ? nq + 2 * nkv : W;
    const uint64_t seq_stride = (uint64_t)c->ops.p.n_ctx * (uint64_t)nkv;
    struct rope_args ra = {
        .q = c->ops.qkv.a, .k = hip_dptr_off(c->ops.qkv, 4u * (uint64_t)nq).a,
        .v = hip_dptr_off(c->ops.qkv, 4u * (uint64_t)(nq + nkv)).a, .q_norm = d->q_norm.a, .k_norm = d->k_norm.a,
        .cs = cs, .kc = d->kc.a, .vc = d->vc.a, .pos = pos, .seq = seq,
        .seq_stride = (int64_t)seq_stride, .q_stride = qs, .kv_stride = qs, .hd = hd, .n_rot = hp->n_rot,
        .n_head = ly->n_head, .n_head_kv = ly->n_head_kv, .neox = m->arch->rope == ROPE_NEOX,
        .kv_f16 = c->ops.kv_elt == 2, .eps = hp->rms_eps,
    };
    (void)tok;
    void *rp[] = { &ra };
    unsigned rb = (unsigned)((hd + c->ops.warp - 1) / c->ops.warp * c->ops.warp);
    /* a prompt: 64 tokens of one head a block, the cache walked in f16 tiles on tensor cores */
    const bool prompt = n > GEMV_MAX && hip_ops_fattn(&c->ops, hd) && c->one_seq && c->ops.kv_elt == 2 &&
                        qs % 4 == 0 && ly->n_head % ly->n_head_kv == 0;
    /* every other step on fattn_dec_128 where it fits, batches of many sequences too: a warp reads each K/V
     * row once for its query-head group, where attn's block per (token, query head) re-read it per head and
     * walked it on one thread per row (qwen3-8b batched B = 64, 128 + 128: 3.6 ms of a 19.5 ms step).
     * One sequence's prompt stays on the prompt kernel (or attn, LLM170_HIP_FA=0) */
    const bool tc = c->attn_tc && qs % 4 == 0 && (n <= GEMV_MAX || !c->one_seq);
    /* splits: the step's bucket up to SPLIT_TOKENS tokens, one over (hip_scratch.h: batches of many
     * sequences measured no faster split, on fattn_dec_128 too) */
    const bool dec4 = tc && c->dec4; /* one block a (token, KV head) merging its warps' splits: no partials */
    const int nsplit = n <= c->split_tokens && !dec4 ? c->dec_ns : 1;
    if (!(tc && c->rope_attn))
        TRY(hip_rt_launch(c->ops.rt, c->k_rope, (unsigned)n, (unsigned)(ly->n_head + ly->n_head_kv), 1, rb, rp, e));
    struct attn_args aa = {
        .q = c->ops.qkv.a, .o = c->ops.o.a, .k = d->kc.a, .v = d->vc.a, .pos = pos, .seq = seq, .part = c->ops.part.a,
        .seq_stride = (int64_t)seq_stride, .kv_dim = nkv, .hd = hd, .n_head = ly->n_head,
        .n_head_kv = ly->n_head_kv, .q_stride = qs, .o_stride = nq, .nsplit = nsplit, .kv_f16 = c->ops.kv_elt == 2,
        .scale = hp->kq_scale, .rope = tc && c->rope_attn, .r = ra,
    };
    /* x += Wo·o + bo; the q8 copy of o for the GEMV comes out of attn (one split) or the split merge,
     * when heads are whole warps */
    const bool qo = n <= GEMV_MAX && hip_ops_want_q8(&c->ops, nq) && c->ops.gemvq[d->wo.type];
    /* one split: attn writes o and its q8 copy (whole warps per 32 elements); more: the merge does,
     * with one thread per element */
    const bool fuse = qo && hd % 32 == 0 && hd % c->ops.warp == 0 && (nsplit == 1 || (int)rb == hd);
    if (fuse)
        aa.oq = c->ops.xq.a, aa.oqd = c->ops.xqd.a;
    /* the head's last split block merges the splits (counted in acnt): one launch fewer a layer */
    if (nsplit > 1 && c->fuse_attn && !tc)
        aa.cnt = c->acnt.a;
    void *ap[] = { &aa };
    /* decode: one block per KV head for its whole query-head group when it fits kernels/attn.cu's limits
     * (GQA_MAX 8 heads, G·hd <= 1024, hd <= 8·warp) */
    const int G = ly->n_head / ly->n_head_kv;
    if (dec4) {
        TRY(hip_rt_launch_smem(c->ops.rt, c->k_fattn_dec4, (unsigned)(n * ly->n_head_kv), 1, 1, 32 * DEC4_W,
                               FATTN_DEC4_SMEM(128), ap, e));
    } else if (tc) {
        /* a warp per (token, KV head, split), the query-head group as one mma operand's rows */
        TRY(hip_rt_launch(c->ops.rt, c->k_fattn_dec, (unsigned)(n * ly->n_head_kv), (unsigned)nsplit, 1, 32, ap, e));
    } else if (prompt) {
        TRY(hip_ops_fattn_launch(&c->ops, hd, n, ly->n_head, &aa, e));
    } else if (c->gqa && n <= GEMV_MAX && ly->n_head % ly->n_head_kv == 0 && G > 1 && G <= 8 && G * hd <= 1024 &&
        hd <= 8 * c->ops.warp)
        TRY(hip_rt_launch(c->ops.rt, c->k_attn_gqa, (unsigned)(n * ly->n_head_kv), (unsigned)nsplit, 1, 256, ap, e));
    else
        TRY(hip_rt_launch(c->ops.rt, c->k_attn, (unsigned)(n * ly->n_head), (unsigned)nsplit, 1,
                          4u * (unsigned)c->ops.warp, ap, e));
    if (nsplit > 1 && !aa.cnt) { /* a no-op for tokens whose cache took one split (kernels/attn.cu); a thread per
                                    split at least, and four per head element when the splits are many */
        unsigned cb = rb > (unsigned)nsplit ? rb : (unsigned)nsplit;
        if (nsplit >= 32 && 4 * rb <= 1024)
            cb = 4 * rb;
        TRY(hip_rt_launch(c->ops.rt, c->k_attn_comb, (unsigned)(n * ly->n_head), 1, 1, cb, ap, e));
    }
    if (qo && !fuse)
        TRY(hip_ops_quant(&c->ops, c->ops.o, n, nq, nq, e));
    c->ops.next_norm = next_norm;
    return hip_ops_mm(&c->ops, &(struct hip_mm){
        .w = &d->wo, .x = c->ops.o, .x_stride = nq, .x_div = 1, .nz = n, .y = c->ops.x, .y_stride = E, .bias = d->bo,
        .mode = 1, .q = qo,
    }, e);
}

/* Whether a MoE prompt step of n tokens takes the grouped GEMMs: a tensor-core kernel of every tile for
 * the three expert matrices' types, and rows of whole 64-element steps. */
static bool moe_gemm_ok(const struct hip_engine *c, const struct hip_ops_layer *d, int n)
{
    if (!c->moe_gemm || n <= GEMV_MAX || !c->k_group || !c->ops.use_mma || c->ops.warp != 32)
        return false;
    const struct dw *w[3] = { &d->gate_exps, &d->up_exps, &d->down_exps };
    for (int i = 0; i < 3; i++)
        if (!c->mmag[0][w[i]->type] || !c->mmag[1][w[i]->type] || !c->mmag[2][w[i]->type] || w[i]->ne0 % 64)
            return false;
    return true;
}

/* y[z] = W_e · x[z / x_div] for every pair z < P, e = the pair's expert: one grouped tensor-core GEMM
 * (kernels/mma.cu mmag*) over the tiles moe_group wrote into grp, mt pairs a tile. */
static int moe_gemm(struct hip_engine *c, const struct dw *w, struct hip_dptr x, int x_stride, int x_div,
                    struct hip_dptr y, int y_stride, int P, int mt, bool x_ready, struct err *e)
{
    const struct hparams *hp = &c->ops.m->hp;
    const int X = hp->n_expert, gi = mt == 32 ? 0 : mt == 64 ? 1 : 2;
    const uint64_t map = HIP_GRP_MAP((uint64_t)c->ops.p.n_batch * (uint64_t)hp->n_expert_used, (uint64_t)X);
    struct gemv_args a = {
        .w = w->d.a, .x = x.a, .y = y.a, .gmap = c->grp.a, .gperm = c->grp.a + 4 * map,
        .row_bytes = (int64_t)w->row_bytes, .expert_bytes = (int64_t)(w->row_bytes * (size_t)w->ne1),
        .n_rows = (int)w->ne1, .k = (int)w->ne0, .x_stride = x_stride, .y_stride = y_stride, .x_div = x_div,
        .nz = P, .mode = 0,
    };
    /* x_ready: the product before this one (gate, for up) prepared the same x */
    a.xh = c->ops.xh.a, a.xsc = c->ops.xsc.a;
    int rc = x_ready ? 0 : hip_ops_xprep(&c->ops, x.a, (P + x_div - 1) / x_div, a.k, x_stride, &a, false, e);
    if (rc)
        return rc;
    void *params[] = { &a };
    /* the most tiles a routing can make: whole tiles of all pairs plus one partial tile per expert */
    const unsigned gy = (unsigned)((P + mt - 1) / mt + (X < P ? X : P));
    hip_fn f = c->mmag[gi][w->type];
    unsigned smem = MMA_SMEM(mt);
    if (gi && c->ops.use_wg && c->wgg[gi - 1][w->type]) /* warpgroup MMA (sm_90a): 64- and 128-pair tiles */
        f = c->wgg[gi - 1][w->type], smem = WG_SMEM(mt);
    return hip_rt_launch_smem(c->ops.rt, f, (unsigned)((w->ne1 + 127) / 128), gy, 1, 256, smem, params, e);
}

static int ffn_layer(struct hip_engine *c, const struct layer *ly, const struct hip_ops_layer *d, int n,
                     struct hip_dptr next_norm,
                     struct err *e)
{
    const struct hparams *hp = &c->ops.m->hp;
    const int E = hp->n_embd;
    int rc;
    const int qh = c->ops.h_def ? 3 : hip_ops_want_q8(&c->ops, E);
    /* a dense FFN over GEMV_MAX tokens: the norm writes the f16 rows gate and up read (see attn_layer) */
    const bool f16 = ly->ffn != FFN_MOE && !c->ops.h_def && n > GEMV_MAX && hip_ops_rms_f16_ok(&c->ops, n, E);
    if (!c->ops.h_def)
        TRY(hip_ops_rms(&c->ops, c->ops.h, c->ops.x, d->ffn_norm, HIP_DNULL, n, E, E, E, qh, f16, e));
    c->ops.h_def = false;
    const struct hip_dptr nn = next_norm;
    if (ly->ffn == FFN_MOE) {
        const int X = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
        float scale = hp->expert_weights_scale;
        uint64_t rl = c->rl.a, sel = c->sel.a, sw = c->sw.a;
        int xx = X, kk = K;
        if (c->fuse_route && n <= GEMV_MAX) {
            /* the router GEMV's last block routes (expert ids and weights stay on the device) */
            struct gemv_args ra = {
                .w = d->gate_inp.d.a, .x = c->ops.h.a, .y = c->rl.a, .rsel = c->sel.a, .rw = c->sw.a,
                .ncnt = c->ops.ncnt.a,
                .row_bytes = (int64_t)d->gate_inp.row_bytes, .n_rows = X, .k = (int)d->gate_inp.ne0,
                .x_stride = E, .y_stride = X, .x_div = 1, .nz = n, .mode = 0, .nslot = K, .rscale = scale,
            };
            TRY(hip_ops_launch_mm(&c->ops, &ra, &d->gate_inp, NULL, qh, e));
        } else {
            TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
                .w = &d->gate_inp, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = c->rl, .y_stride = X,
                .q = qh,
            }, e));
            void *rp[] = { &rl, &xx, &kk, &sel, &sw, &scale };
            TRY(hip_rt_launch(c->ops.rt, c->k_route, (unsigned)n, 1, 1, (unsigned)c->ops.warp, rp, e));
        }
        if (moe_gemm_ok(c, d, n)) {
            /* a prompt: the pairs grouped by expert on the device, then gate, up and down each one grouped
             * GEMM for all experts (a tile takes 32, 64 or 128 pairs of one expert, by the mean pairs an
             * expert gets: hip_knobs.moe_t), the SwiGLU between, the weighted combine after */
            const int P = n * K, mean = P / X;
            const int mt = c->ops.k.moe_t ? c->ops.k.moe_t : mean < 8 ? 32 : mean <= 96 ? 64 : 128;
            const uint64_t map = HIP_GRP_MAP((uint64_t)c->ops.p.n_batch * (uint64_t)K, (uint64_t)X);
            uint64_t gm = c->grp.a, gp = c->grp.a + 4 * map;
            int pp = P, mtt = mt;
            void *gq[] = { &sel, &pp, &xx, &mtt, &gp, &gm };
            TRY(hip_rt_launch(c->ops.rt, c->k_group, 1, 1, 1, 1024, gq, e));
            TRY(moe_gemm(c, &d->gate_exps, c->ops.h, E, K, c->fg, F, P, mt, false, e));
            TRY(moe_gemm(c, &d->up_exps, c->ops.h, E, K, c->fu, F, P, mt, d->up_exps.ne0 == d->gate_exps.ne0, e));
            TRY(hip_ops_ew(&c->ops, c->k_swiglu, c->fg, c->fu, P * F, e));
            TRY(moe_gemm(c, &d->down_exps, c->fg, F, 1, c->ey, E, P, mt, false, e));
            uint64_t x = c->ops.x.a, ey = c->ey.a;
            int ee = E;
            void *cp[] = { &x, &ey, &sw, &ee, &kk };
            return hip_rt_launch(c->ops.rt, c->k_combine, (unsigned)n, 1, 1, 256, cp, e);
        }
        /* gate/up of the selected experts with SwiGLU, over the (token, slot) pairs; its epilogue writes
         * the q8 copy of the result for the down GEMV (fq rows z = token·K + slot) */
        const bool qf = n <= GEMV_MAX && hip_ops_want_q8(&c->ops, F) && c->ops.gemvq[d->down_exps.type] && qh &&
                        c->ops.gemvq[d->gate_exps.type] && d->gate_exps.type == d->up_exps.type;
        struct gemv_args ga = {
            .w = d->gate_exps.d.a, .w2 = d->up_exps.d.a, .x = c->ops.h.a, .y = c->fg.a, .sel = c->sel.a,
            .yq = qf ? c->ops.fq.a : 0, .yqd = qf ? c->ops.fqd.a : 0, .cnt = qf ? c->fcnt.a : 0,
            .row_bytes = (int64_t)d->gate_exps.row_bytes,
            .expert_bytes = (int64_t)(d->gate_exps.row_bytes * (size_t)d->gate_exps.ne1), .n_rows = F,
            .k = (int)d->gate_exps.ne0, .x_stride = E, .y_stride = F, .x_div = K, .nz = n * K, .mode = 2,
        };
        TRY(hip_ops_launch_mm(&c->ops, &ga, &d->gate_exps, &d->up_exps, qh, e));
        if (n <= GEMV_MAX) {
            /* down projection of every slot with the weighted combine, added into x (mode 4) */
            struct gemv_args da = {
                .w = d->down_exps.d.a, .x = c->fg.a, .y = c->ops.x.a, .sel = c->sel.a, .sw = c->sw.a,
                .row_bytes = (int64_t)d->down_exps.row_bytes,
                .expert_bytes = (int64_t)(d->down_exps.row_bytes * (size_t)d->down_exps.ne1), .n_rows = E,
                .k = (int)d->down_exps.ne0, .x_stride = F, .y_stride = E, .x_div = 1, .nz = n, .mode = 4,
                .nslot = K,
            };
            c->ops.next_norm = nn;
            return hip_ops_launch_mm(&c->ops, &da, &d->down_exps, NULL, qf ? 2 : 0, e);
        }
        const bool qd = hip_ops_want_q8(&c->ops, F) && c->ops.gemvq[d->down_exps.type];
        if (qd)
            TRY(hip_ops_quant(&c->ops, c->fg, n * K, F, F, e));
        TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
            .w = &d->down_exps, .x = c->fg, .x_stride = F, .x_div = 1, .nz = n * K, .y = c->ey, .y_stride = E,
            .sel = c->sel, .q = qd,
        }, e));
        uint64_t x = c->ops.x.a, ey = c->ey.a;
        int ee = E;
        void *cp[] = { &x, &ey, &sw, &ee, &kk };
        return hip_rt_launch(c->ops.rt, c->k_combine, (unsigned)n, 1, 1, 256, cp, e);
    }
    const int F = ly->n_ff;
    const bool qf = n <= GEMV_MAX && hip_ops_want_q8(&c->ops, F) && c->ops.gemvq[d->down.type];
    if (n <= GEMV_MAX && d->gate.type == d->up.type) {
        /* SwiGLU in the GEMV's epilogue, which also writes the q8 copy for the down GEMV (into fq: the
         * GEMV itself still reads xq) */
        struct gemv_args a = {
            .w = d->gate.d.a, .w2 = d->up.d.a, .x = c->ops.h.a, .y = c->fg.a, .bias = d->b_gate.a, .bias2 = d->b_up.a,
            .yq = qf ? c->ops.fq.a : 0, .yqd = qf ? c->ops.fqd.a : 0, .cnt = qf ? c->fcnt.a : 0,
            .row_bytes = (int64_t)d->gate.row_bytes, .n_rows = F, .k = (int)d->gate.ne0, .x_stride = E,
            .y_stride = F, .x_div = 1, .nz = n, .mode = 2,
        };
        TRY(hip_ops_launch_mm(&c->ops, &a, &d->gate, &d->up, qh, e));
        c->ops.next_norm = nn;
        return hip_ops_mm(&c->ops, &(struct hip_mm){
            .w = &d->down, .x = c->fg, .x_stride = F, .x_div = 1, .nz = n, .y = c->ops.x, .y_stride = E,
            .bias = d->b_down, .mode = 1, .q = qf ? 2 : 0,
        }, e);
    }
    /* gate and up read h's f16 rows from the norm (f16), or the first one's prep */
    c->ops.x_ready = f16;
    TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
        .w = &d->gate, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = c->fg, .y_stride = F, .bias = d->b_gate,
        .q = qh,
    }, e));
    c->ops.x_ready = f16 || (n > GEMV_MAX && d->gate.type == d->up.type);
    TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
        .w = &d->up, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n, .y = c->fu, .y_stride = F, .bias = d->b_up,
        .q = qh,
    }, e));
    /* the down GEMM's f16 rows from the SwiGLU itself where it can (no mma_xprep) */
    const bool f16d = n > GEMV_MAX && c->ops.k_swiglu_rows && hip_ops_f16_ok(&c->ops, n, F);
    if (f16d)
        TRY(hip_ops_swiglu_f16(&c->ops, c->fg, c->fu, n, F, e));
    else
        TRY(hip_ops_ew(&c->ops, c->k_swiglu, c->fg, c->fu, n * F, e));
    if (qf)
        TRY(hip_ops_quant(&c->ops, c->fg, n, F, F, e));
    c->ops.next_norm = nn;
    c->ops.x_ready = f16d;
    return hip_ops_mm(&c->ops, &(struct hip_mm){
        .w = &d->down, .x = c->fg, .x_stride = F, .x_div = 1, .nz = n, .y = c->ops.x, .y_stride = E, .bias = d->b_down,
        .mode = 1, .q = qf,
    }, e);
}

/* Whether a step's sublayer norms may be deferred to their GEMVs (kernels/gemv.cu norm_group_tail): one
 * token (the per-token GEMV, on q8 or f32 activations; the multi-token GEMV and the GEMM take no input
 * scale), not a hybrid, and rows of whole 32-groups with q8 activations (the tail writes both copies). */
static bool defer_ok(const struct hip_engine *c, int n)
{
    return c->defer_norm && n == 1 && !c->hy && hip_ops_want_q8(&c->ops, c->ops.m->hp.n_embd);
}

/* ---- the layer operations model_forward walks (model/model_forward.h) ---- */

/* hip_knobs.trace: the residual x [n][E] after sublayer `what` of layer il (-1: none), summarised on stderr */
static int trace_x(struct hip_engine *c, const char *what, int il, int n, struct err *e)
{
    const size_t E = (size_t)c->ops.m->hp.n_embd, cnt = (size_t)n * E;
    float *x = malloc(cnt * sizeof *x);
    if (!x)
        return err_set(e, ERR_NOMEM, "hip: out of memory (trace)");
    int rc = hip_rt_sync(c->ops.rt, e);
    if (!rc)
        rc = hip_rt_d2h(c->ops.rt, x, c->ops.x, cnt * sizeof *x, e);
    if (!rc) {
        size_t bad = 0, at = 0;
        float mx = 0.0f;
        for (size_t i = 0; i < cnt; i++) {
            if (!isfinite(x[i])) {
                if (!bad++)
                    at = i;
            } else if (fabsf(x[i]) > mx) {
                mx = fabsf(x[i]);
            }
        }
        fprintf(stderr, "hip trace: n %d layer %d %s: max |x| %.4g, %zu not finite", n, il, what, (double)mx, bad);
        if (bad)
            fprintf(stderr, " (first: token %zu, element %zu)", at / E, at % E);
        fputc('\n', stderr);
    }
    free(x);
    return rc;
}

static int hop_embed(void *b, int n, struct err *e)
{
    struct hip_engine *c = b;
    int rc;
    {
        uint64_t tab = c->tok_embd.d.a, tok = c->ops.io.a, x = c->ops.x.a;
        int64_t rb = (int64_t)c->tok_embd.row_bytes;
        int type = c->tok_embd.type, ne = c->ops.m->hp.n_embd;
        void *p[] = { &tab, &rb, &type, &tok, &x, &ne };
        TRY(hip_rt_launch(c->ops.rt, c->k_embed, (unsigned)n, cdiv((size_t)c->ops.m->hp.n_embd, 256), 1, 256, p, e));
    }
    c->ops.h_def = false;
    return c->ops.k.trace ? trace_x(c, "embed", -1, n, e) : 0;
}

/* the next sublayer's norm (this layer's FFN) deferred by the residual GEMV; a norm without weight keeps
 * rms_norm */
static int hop_attn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    const struct hip_ops_layer *d = &c->ops.L[s->il];
    int rc = attn_layer(c, s->ly, d, n, c->step_dn ? d->ffn_norm : HIP_DNULL, e);
    return !rc && c->ops.k.trace ? trace_x(c, "attention", s->il, n, e) : rc;
}

static int hop_hybrid(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    int rc = hip_hybrid_layer(c->hy, s->ly, s->il, n, e);
    return !rc && c->ops.k.trace ? trace_x(c, s->ly->kind == LAYER_GDN ? "deltanet" : "gated attention", s->il, n, e)
                                 : rc;
}

/* the next sublayer's norm: the next layer's attention, or the output (rows = tokens only when every
 * token has logits). Hybrids add the shared expert after the FFN. */
static int hop_ffn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    const struct hip_ops_layer *d = &c->ops.L[s->il];
    const struct hip_dptr an = !c->step_dn          ? HIP_DNULL
                               : s->next_il >= 0    ? c->ops.L[s->next_il].attn_norm
                               : c->step_n_out == n ? c->output_norm
                                                    : HIP_DNULL;
    int rc;
    TRY(ffn_layer(c, s->ly, d, n, an, e));
    if (c->hy)
        TRY(hip_hybrid_shexp(c->hy, s->ly, s->il, n, e));
    return c->ops.k.trace ? trace_x(c, "ffn", s->il, n, e) : 0;
}

static int hop_output(void *b, int n, int n_out, struct err *e)
{
    struct hip_engine *c = b;
    const int E = c->ops.m->hp.n_embd, V = c->ops.m->hp.n_vocab, B = c->ops.p.n_batch;
    int rc;
    (void)n;
    const struct hip_dptr rows = hip_dptr_off(c->ops.io, 12u * (uint64_t)B);
    const int qh = c->ops.h_def ? 3 : hip_ops_want_q8(&c->ops, E); /* deferred: n_out == n, so rows[r] == r */
    if (!c->ops.h_def)
        TRY(hip_ops_rms(&c->ops, c->ops.h, c->ops.x, c->output_norm, rows, n_out, E, E, E, qh, false, e));
    TRY(hip_ops_mm(&c->ops, &(struct hip_mm){
        .w = &c->output, .x = c->ops.h, .x_stride = E, .x_div = 1, .nz = n_out, .y = c->logits, .y_stride = V,
        .bias = c->output_bias, .q = qh,
    }, e));
    if (c->step_greedy) {
        /* AMAX_SLICES blocks a row; the last one of a row picks among the slices */
        uint64_t lg = c->logits.a, am = c->amax.a, pv = c->amx.a, pi = pv + 4u * (uint64_t)B * AMAX_SLICES;
        uint64_t cn = pi + 4u * (uint64_t)B * AMAX_SLICES;
        int vv = V;
        void *p[] = { &lg, &vv, &vv, &am, &pv, &pi, &cn };
        if (c->amax_split)
            TRY(hip_rt_launch(c->ops.rt, c->k_argmax, AMAX_SLICES, (unsigned)n_out, 1, 256, p, e));
        else
            TRY(hip_rt_launch(c->ops.rt, c->k_argmax1, (unsigned)n_out, 1, 1, 1024, p, e));
    }
    return 0;
}

/* The hip backend's sublayers: attention in attn_layer, the qwen35 mixers in hip_hybrid.c, both FFN kinds
 * in ffn_layer (the hybrids' shared expert after it). */
static const struct layer_ops hip_layer_ops = {
    .embed = hop_embed,
    .mixer = { [LAYER_ATTN] = hop_attn, [LAYER_GDN] = hop_hybrid, [LAYER_GATED_ATTN] = hop_hybrid },
    .ffn = { [FFN_DENSE] = hop_ffn, [FFN_MOE] = hop_ffn },
    .output = hop_output,
};

/* Every kernel of one step, enqueued (or captured) on the stream: model_forward over hip_layer_ops. The
 * first sublayer's norm stays an rms_norm launch; each later one is deferred to its GEMVs by the residual
 * GEMV before it where defer_ok allows. Hybrids norm inside their own layers: nothing deferred there. */
static int enqueue(struct hip_engine *c, int n, int n_out, bool greedy, struct err *e)
{
    c->step_n_out = n_out;
    c->step_greedy = greedy;
    c->step_dn = defer_ok(c, n);
    return model_forward(c->ops.m, &hip_layer_ops, c, n, n_out, e);
}

static int validate(struct hip_engine *c, const struct engine_tok *toks, int n, struct err *e)
{
    return backend_check_batch(toks, n, c->ops.p.n_batch, c->ops.p.n_seq, c->ops.p.n_ctx, c->ops.m->hp.n_vocab, c->len,
                              c->seq_next, e);
}

/* Attention splits of a decode step's grid from its longest cache (kernels/attn.cu takes one split per
 * 64 cached positions, at most the grid's): 1 up to 64 positions — no partials, no merge launch —, 4 up
 * to 256, else DEC_SPLIT. A grid of DEC_SPLIT splits for short caches launched blocks that only
 * returned, and a merge that did nothing; three buckets keep the captured graphs few. */
static int dec_splits(int max_kv, int ns_tc)
{
    return max_kv <= 64 ? 1 : max_kv <= 256 ? 4 : ns_tc && max_kv > HIP_DEC_TC_LONG ? ns_tc : DEC_SPLIT;
}

/* engine_decode_topk's request and answer (run). */
struct topk_io {
    const struct engine_select *sel; /* k, allow: [n_out]; prepare */
    int32_t *ids;     /* [n_out][ENGINE_CAND_CAP] */
    float *vals;      /* [n_out][ENGINE_CAND_CAP] */
    int32_t *n_cands; /* [n_out] */
};

/* After the step's logits: topk_cut on the rows asking for it, their candidates to the host, then the
 * copies of the whole rows of the others (and of any the cut did not serve), which run()'s sync ends. */
static int topk_finish(struct hip_engine *c, int n_out, const struct topk_io *tk, float *logits, struct err *e)
{
    int rc;
    const int B = c->ops.p.n_batch, V = c->ops.m->hp.n_vocab, cap = ENGINE_CAND_CAP;
    int32_t *kh = c->topk_h, *cnt = kh + B, *ids = kh + 2 * B;
    float *vals = (float *)(kh + 2 * B + (size_t)B * cap);
    int32_t *mk = kh + 2 * B + 2 * (size_t)B * cap;
    uint32_t *al = (uint32_t *)(mk + B);
    const size_t W = ((size_t)V + 31) / 32;
    const struct hip_dptr dk = c->topk, dcnt = hip_dptr_off(dk, 4u * (uint64_t)B);
    const struct hip_dptr dids = hip_dptr_off(dk, 8u * (uint64_t)B);
    const struct hip_dptr dvals = hip_dptr_off(dids, 4u * (uint64_t)B * (uint64_t)cap);
    const struct hip_dptr dmk = hip_dptr_off(dvals, 4u * (uint64_t)B * (uint64_t)cap);
    const struct hip_dptr dal = hip_dptr_off(dmk, 4u * (uint64_t)B);
    const int32_t *kk = tk->sel->k;
    const uint32_t *const *allow = tk->sel->allow;
    memcpy(kh, kk, (size_t)n_out * 4);
    TRY(hip_rt_h2d(c->ops.rt, dk, kh, (size_t)n_out * 4, e));
    /* the masks: rows up to the last masked one, packed (a grammar row's 19 KB of a 152k vocabulary) */
    int n_mask = 0;
    for (int r = 0; r < n_out; r++) {
        mk[r] = allow && allow[r] && kk[r] > 0;
        if (mk[r]) {
            memcpy(al + (size_t)r * W, allow[r], W * 4);
            n_mask = r + 1;
        }
    }
    TRY(hip_rt_h2d(c->ops.rt, dmk, mk, (size_t)n_out * 4, e));
    if (n_mask)
        TRY(hip_rt_h2d(c->ops.rt, dal, al, (size_t)n_mask * W * 4, e));
    uint64_t lg = c->logits.a, ka = dk.a, cna = dcnt.a, ida = dids.a, va = dvals.a, ma = dmk.a, aa = dal.a;
    int vv = V, cp = cap;
    void *p[] = { &lg, &vv, &vv, &ka, &cp, &ma, &aa, &cna, &ida, &va };
    TRY(hip_rt_launch(c->ops.rt, c->k_topk, (unsigned)n_out, 1, 1, 1024, p, e));
    TRY(hip_rt_d2h(c->ops.rt, cnt, dcnt, (size_t)n_out * 4, e));
    TRY(hip_rt_d2h(c->ops.rt, ids, dids, (size_t)n_out * (size_t)cap * 4, e));
    TRY(hip_rt_d2h(c->ops.rt, vals, dvals, (size_t)n_out * (size_t)cap * 4, e));
    TRY(hip_rt_sync(c->ops.rt, e));
    for (int r = 0; r < n_out; r++) {
        const size_t o = (size_t)r * (size_t)cap;
        /* a masked row may have fewer than k allowed tokens: then they are all there */
        tk->n_cands[r] = kk[r] > 0 && cnt[r] >= (mk[r] ? 1 : kk[r]) && cnt[r] <= cap ? cnt[r] : -1;
        if (tk->n_cands[r] >= 0) {
            memcpy(tk->ids + o, ids + o, (size_t)cnt[r] * 4);
            memcpy(tk->vals + o, vals + o, (size_t)cnt[r] * 4);
            continue;
        }
        TRY(hip_rt_d2h(c->ops.rt, logits + (size_t)r * (size_t)V,
                       hip_dptr_off(c->logits, 4u * (uint64_t)r * (uint64_t)V), (size_t)V * 4, e));
    }
    return 0;
}

/* Each wanted token's final hidden state after the output norm into embd (rows in batch order): one
 * rms_norm of the step's final residual (ops.x, every token) into ops.h, outside any captured graph and
 * after the step in stream order, then one copy to the host. A row's own norm, as the CPU engine's: the
 * result does not depend on what else is in the batch. */
static int embd_rows(struct hip_engine *c, int n, const bool *want, float *embd, struct err *e)
{
    const int E = c->ops.m->hp.n_embd;
    int rc;
    TRY(hip_ops_rms(&c->ops, c->ops.h, c->ops.x, c->output_norm, HIP_DNULL, n, E, E, E, false, false, e));
    float *all = malloc((size_t)n * (size_t)E * sizeof *all);
    if (!all)
        return err_set(e, ERR_NOMEM, "hip: out of host memory for %d hidden-state rows", n);
    rc = hip_rt_d2h(c->ops.rt, all, c->ops.h, (size_t)n * (size_t)E * 4, e);
    if (!rc)
        rc = hip_rt_sync(c->ops.rt, e);
    for (int t = 0, r = 0; !rc && t < n; t++)
        if (want[t])
            memcpy(embd + (size_t)r++ * E, all + (size_t)t * E, (size_t)E * sizeof *all);
    free(all);
    return rc;
}

static int run(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, int32_t *greedy_out,
               const struct topk_io *tk, const bool *want, float *embd, struct err *e)
{
    int rc = validate(c, toks, n, e);
    if (!rc)
        rc = hip_rt_bind(c->ops.rt, e);
    if (rc)
        return rc;
    const struct hparams *hp = &c->ops.m->hp;
    const int B = c->ops.p.n_batch;
    int32_t *ih = c->io_h;
    float *csh = (float *)(ih + 4 * B);
    int n_out = 0;
    c->one_seq = true;
    c->rope_attn = c->rope_attn_ok && n <= GEMV_MAX;
    for (int t = 0; t < n; t++) {
        c->one_seq = c->one_seq && toks[t].seq == toks[0].seq;
        for (int u = 0; u < t && c->rope_attn; u++)
            c->rope_attn = toks[u].seq != toks[t].seq;
        ih[t] = toks[t].token;
        ih[B + t] = toks[t].pos;
        ih[2 * B + t] = toks[t].seq;
        if (toks[t].logits)
            ih[3 * B + n_out++] = t;
        ops_rope_cache(csh + (size_t)t * hp->n_rot, toks[t].pos, hp->n_rot, hp->freq_base, c->ops.m->rope_freqs.data,
                       hp->freq_scale, hp->ext_factor, hp->attn_factor, hp->corr_dims);
    }
    if (n_out && (!logits || (tk && (!tk->sel || !tk->sel->k || !tk->ids || !tk->vals || !tk->n_cands))) && !greedy_out)
        return err_set(e, ERR_INVALID, "engine_decode: %d rows asked for logits but the buffer is NULL", n_out);
    bool any_want = false;
    for (int t = 0; want && t < n; t++)
        any_want = any_want || want[t];
    if (any_want && !embd)
        return err_set(e, ERR_INVALID, "engine_decode: tokens asked for their hidden state but the buffer is NULL");
    if (c->hy)
        TRY(hip_hybrid_prepare(c->hy, toks, n, csh, e));
    TRY(hip_rt_h2d(c->ops.rt, c->ops.io, ih, 4 * (size_t)B * 4, e));
    TRY(hip_rt_h2d(c->ops.rt, hip_dptr_off(c->ops.io, 16u * (uint64_t)B), csh, (size_t)n * (size_t)hp->n_rot * 4, e));
    const bool greedy = greedy_out != NULL;
    int max_kv = 0;
    for (int t = 0; t < n; t++)
        max_kv = toks[t].pos + 1 > max_kv ? toks[t].pos + 1 : max_kv;
    c->dec_ns = c->split_buckets ? dec_splits(max_kv, c->attn_tc ? c->dec_ns_tc : 0) : DEC_SPLIT;
    /* rope_store's work in the attention on caches over 256 positions, and on shorter ones where fattn_dec4_128
     * takes them (its warps share the heads' norm and rotation): fattn_dec_128's one-split grid of a short
     * cache (a warp per KV head) did them in series and ran slower than rope_store beside it (qwen3-8b tg128
     * 369.2 vs 373.7 t/s), while at 4096 positions, where the work sits in the last of many splits, it
     * measured 357.3 vs 353.4 */
    c->dec4 = c->k_fattn_dec4 && c->attn_tc && c->dec_ns <= 4 && n <= c->split_tokens;
    c->rope_attn = c->rope_attn && (c->dec_ns > 4 || c->dec4);
    /* small batches (decode) are replayed from graphs; prefill shapes vary too much to keep */
    if (c->graphs && n <= GEMV_MAX) {
        hip_graph g = NULL;
        for (int i = 0; i < c->n_gs; i++)
            if (c->gs[i].n == n && c->gs[i].n_out == n_out && c->gs[i].greedy == greedy && c->gs[i].ns == c->dec_ns &&
                c->gs[i].rope_attn == c->rope_attn)
                g = c->gs[i].g;
        if (!g) {
            TRY(hip_rt_capture_begin(c->ops.rt, e));
            rc = enqueue(c, n, n_out, greedy, e);
            hip_graph ng = NULL;
            struct err e2;
            int rc2 = hip_rt_capture_end(c->ops.rt, &ng, rc ? &e2 : e);
            if (rc)
                return rc;
            if (rc2)
                return rc2;
            if (c->n_gs == N_GRAPHS) {
                hip_rt_graph_free(c->ops.rt, c->gs[0].g);
                memmove(&c->gs[0], &c->gs[1], sizeof c->gs[0] * (N_GRAPHS - 1));
                c->n_gs--;
            }
            c->gs[c->n_gs++] = (struct graph_slot){ .n = n, .n_out = n_out, .greedy = greedy, .ns = c->dec_ns,
                                                    .rope_attn = c->rope_attn, .g = ng };
            g = ng;
        }
        TRY(hip_rt_graph_launch(c->ops.rt, g, e));
    } else {
        TRY(enqueue(c, n, n_out, greedy, e));
    }
    /* the step is queued: the caller's host work for the selection (a grammar's masks) runs while the
     * device computes, and topk_finish reads k and allow after it */
    if (n_out && tk && tk->sel->prepare)
        tk->sel->prepare(tk->sel->ctx);
    if (n_out && greedy)
        TRY(hip_rt_d2h(c->ops.rt, c->amax_h, c->amax, (size_t)n_out * 4, e));
    else if (n_out && tk)
        TRY(topk_finish(c, n_out, tk, logits, e));
    else if (n_out)
        TRY(hip_rt_d2h(c->ops.rt, logits, c->logits, (size_t)n_out * (size_t)hp->n_vocab * 4, e));
    if (any_want)
        TRY(embd_rows(c, n, want, embd, e)); /* ends with a sync */
    TRY(hip_rt_sync(c->ops.rt, e));
    if (n_out && greedy)
        memcpy(greedy_out, c->amax_h, (size_t)n_out * 4);
    for (int s = 0; s < c->ops.p.n_seq; s++)
        c->len[s] = c->seq_next[s];
    return 0;
}

int hip_engine_decode(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return run(c, toks, n, logits, NULL, NULL, NULL, NULL, e);
}

int hip_engine_decode_greedy(struct hip_engine *c, const struct engine_tok *toks, int n, int32_t *tokens,
                             struct err *e)
{
    return run(c, toks, n, NULL, tokens, NULL, NULL, NULL, e);
}

static int hip_engine_host_alloc(struct hip_engine *c, size_t n, void **out, struct err *e)
{
    int rc = hip_rt_bind(c->ops.rt, e);
    return rc ? rc : hip_rt_host_alloc(c->ops.rt, n, out, e);
}

static void hip_engine_host_free(struct hip_engine *c, void *p)
{
    if (p && !hip_rt_bind(c->ops.rt, NULL))
        hip_rt_host_free(c->ops.rt, p);
}

void hip_engine_seq_truncate(struct hip_engine *c, int seq, int pos)
{
    if (c->hy) {
        hip_hybrid_truncate(c->hy, c->len, seq, pos, NULL);
        return;
    }
    if (seq < 0 || seq >= c->ops.p.n_seq || pos < 0)
        return;
    if (pos < c->len[seq])
        c->len[seq] = pos;
}

static int hip_engine_seq_restore(struct hip_engine *c, int seq, int pos, struct err *e)
{
    if (c->hy)
        return hip_hybrid_truncate(c->hy, c->len, seq, pos, e);
    hip_engine_seq_truncate(c, seq, pos);
    return 0;
}

static int hip_engine_seq_snapshot(struct hip_engine *c, int seq, struct err *e)
{
    return c->hy ? hip_hybrid_snapshot(c->hy, c->len, seq, e) : 0;
}

static int hip_engine_seq_restorable(const struct hip_engine *c, int seq, int pos)
{
    return c->hy ? hip_hybrid_restorable(c->hy, c->len, seq, pos) : pos;
}

int hip_engine_seq_len(const struct hip_engine *c, int seq)
{
    if (seq < 0 || seq >= c->ops.p.n_seq)
        return 0;
    return c->len[seq];
}

int hip_engine_seq_copy(struct hip_engine *c, int src, int dst, int n, struct err *e)
{
    if (src < 0 || src >= c->ops.p.n_seq || dst < 0 || dst >= c->ops.p.n_seq)
        return err_set(e, ERR_INVALID, "engine_seq_copy: sequence %d or %d outside [0, %d)", src, dst, c->ops.p.n_seq);
    if (n < 0 || n > c->len[src])
        return err_set(e, ERR_RANGE, "engine_seq_copy: %d positions but sequence %d holds %d", n, src, c->len[src]);
    int brc = hip_rt_bind(c->ops.rt, e);
    if (brc)
        return brc;
    if (src == dst) { /* a copy onto itself is a cut back */
        if (c->hy)
            return hip_hybrid_truncate(c->hy, c->len, dst, n, e);
        c->len[dst] = n;
        return 0;
    }
    int rc;
    if (c->hy)
        TRY(hip_hybrid_copy(c->hy, c->len, src, dst, n, e));
    for (int il = 0; il < c->ops.m->hp.n_layer; il++) {
        const struct hip_ops_layer *d = &c->ops.L[il];
        if (hip_dptr_null(d->kc))
            continue;
        const size_t row = (size_t)c->ops.m->layers[il].n_head_kv * (size_t)c->ops.m->hp.head_dim * c->ops.kv_elt;
        const size_t seqb = (size_t)c->ops.p.n_ctx * row;
        if (n) {
            TRY(hip_rt_d2d(c->ops.rt, hip_dptr_off(d->kc, dst * seqb), hip_dptr_off(d->kc, src * seqb),
                           (size_t)n * row, e));
            TRY(hip_rt_d2d(c->ops.rt, hip_dptr_off(d->vc, dst * seqb), hip_dptr_off(d->vc, src * seqb),
                           (size_t)n * row, e));
        }
    }
    TRY(hip_rt_sync(c->ops.rt, e));
    c->len[dst] = n;
    return 0;
}

/* ---- the backend's ops table (backend/backend.h) ---- */

static int hb_create(void **out, const struct model *m, const struct engine_params *p, struct err *e)
{
    struct hip_engine *c = NULL;
    struct hip_knobs k;
    hip_knobs_from_env(&k); /* the environment read once, here */
    int rc = hip_engine_create(&c, m, p, &k, e);
    *out = c;
    return rc;
}

static void hb_free(void *b) { hip_engine_free(b); }
static int hb_n_ctx(const void *b) { return hip_engine_n_ctx(b); }
static int hb_decode(void *b, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return hip_engine_decode(b, toks, n, logits, e);
}
static int hb_decode_embd(void *b, const struct engine_tok *toks, int n, const bool *want, float *logits, float *embd,
                          struct err *e)
{
    return run(b, toks, n, logits, NULL, NULL, want, embd, e);
}
static int hb_decode_topk(void *b, const struct engine_tok *toks, int n, const struct engine_select *sel,
                          int32_t *ids, float *vals, int32_t *n_cands, float *logits, struct err *e)
{
    const struct topk_io tk = { sel, ids, vals, n_cands };
    return run(b, toks, n, logits, NULL, &tk, NULL, NULL, e);
}
static int hb_host_alloc(void *b, size_t n, void **out, struct err *e)
{
    struct hip_engine *c = b;
    if (!c->pinned) {
        *out = malloc(n);
        return *out ? 0 : err_set(e, ERR_NOMEM, "hip: out of host memory");
    }
    return hip_engine_host_alloc(c, n, out, e);
}
static void hb_host_free(void *b, void *p)
{
    struct hip_engine *c = b;
    if (!c->pinned)
        free(p);
    else
        hip_engine_host_free(c, p);
}
static int hb_seq_len(const void *b, int seq) { return hip_engine_seq_len(b, seq); }
static int hb_seq_restore(void *b, int seq, int pos, struct err *e) { return hip_engine_seq_restore(b, seq, pos, e); }
static int hb_seq_copy(void *b, int src, int dst, int n, struct err *e) { return hip_engine_seq_copy(b, src, dst, n, e); }
static int hb_seq_snapshot(void *b, int seq, struct err *e) { return hip_engine_seq_snapshot(b, seq, e); }
static int hb_seq_restorable(const void *b, int seq, int pos) { return hip_engine_seq_restorable(b, seq, pos); }
static const char *hb_describe(const void *b) { return hip_engine_device(b); }
static void hb_load_info(const void *b, struct engine_load *out) { *out = ((const struct hip_engine *)b)->ld; }

const struct backend_ops hip_backend = {
    .name = "hip",
    .create = hb_create,
    .free = hb_free,
    .n_ctx = hb_n_ctx,
    .decode = hb_decode,
    .decode_topk = hb_decode_topk,
    .decode_embd = hb_decode_embd,
    .host_alloc = hb_host_alloc,
    .host_free = hb_host_free,
    .seq_len = hb_seq_len,
    .seq_restore = hb_seq_restore,
    .seq_copy = hb_seq_copy,
    .seq_snapshot = hb_seq_snapshot,
    .seq_restorable = hb_seq_restorable,
    .describe = hb_describe,
    .load_info = hb_load_info,
};
