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
 * decode); larger ones the tiled GEMM. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/args.h"
#include "hip_engine.h"
#include "hip_hybrid.h"
#include "hip_engine_int.h"
#include "hip_fit.h"
#include "hip_rt.h"
#include "../model/forward.h"
#include "../model/model.h"
#include "../num/ops.h"

#define GEMV_MAX 16    /* batches up to this many rows use GEMV (decode-shaped steps: q8 copies, fused epilogues,
                          split attention, graph replay) */
#define TOKEN_GEMV_MAX 8 /* ... through the per-token GEMV when the multi-token GEMV (kernels/gemvb.cu) does not
                            take the product; larger batches then take the tiled GEMM */
#define GEMV_R 2       /* rows per warp (kernels/gemv.cu) */
#define AMAX_SLICES 128 /* blocks a row of the greedy argmax takes (argmax_split) */
#define DEC_SPLIT 32   /* attention splits of a GEMV-sized batch (few blocks otherwise) */
/* Batches up to this many tokens split attention. Splitting batched decode up to 64 tokens too was
 * measured on the H200 (qwen3-8b q4_k, 128 + 128): B = 16 1474.7 vs 1446.8 t/s, B = 64 3379.7 vs
 * 3631.5 — a loss where it matters more, so GEMV-sized batches only. */
#define SPLIT_TOKENS GEMV_MAX
#define N_GRAPHS 32 /* captured decode steps kept (shape × attention split bucket), least recent dropped */
#define MMA32_MAX 32   /* batches up to this many tokens use the 32-token tensor-core GEMM tile */
#define MMA128_MIN 256 /* batches from this many tokens on use the 128-token tile */

struct dlayer {
    struct dw wq, wk, wv, wqkv, wo, gate, up, down, gate_inp, gate_exps, up_exps, down_exps;
    uint64_t attn_norm, ffn_norm, q_norm, k_norm;                   /* f32 vectors or 0 */
    uint64_t bq, bk, bv, bqkv, bo, b_gate, b_up, b_down;            /* f32 biases or 0 */
    uint64_t kc, vc;       /* [n_seq][n_ctx][kv_dim] cache, 0 without a KV slab */
};

struct graph_slot {
    int n, n_out;          /* the shape it was captured for */
    int ns;                /* its attention grid's splits (dec_splits) */
    bool greedy;
    hip_graph g;
};

struct hip_engine {
    const struct model *m;
    struct hip_knobs k;       /* the settings it was created with (hip_knobs.h); the fields below copy them */
    struct engine_params p;
    struct hip_rt *rt;
    int warp;
    bool pinned;              /* host_alloc page-locks (LLM170_HIP_PINNED=0: plain memory, for A/B runs) */
    bool graphs;
    /* kernels */
    hip_fn gemv[QT_COUNT], gemm[QT_COUNT], gemvq[QT_COUNT];
    hip_fn gemvq_r[4][QT_COUNT]; /* q8 GEMV with 2 << i rows per block (i = 0, 1, 2; kernels/gemv.cu) */
    hip_fn gemv_dn[QT_COUNT], gemvq_dn[4][QT_COUNT]; /* the same on an input whose RMSNorm is deferred (*_dn) */
    hip_fn gemvb[2][QT_COUNT];   /* multi-token q8 GEMV, modes 0/1 (kernels/gemvb.cu): [0] 8 tokens, [1] 16 a block */
    hip_fn gemvbd[2][QT_COUNT];  /* the same for the dual modes 2/3 */
    int gemvb_t;           /* tokens a multi-token GEMV block takes over 8 (8: two passes, 16: one), 0: off;
                              LLM170_HIP_GEMVB=0|8|16 */
    hip_fn gemvbm[2][QT_COUNT]; /* the same on int8 tensor cores, [0] modes 0/1, [1] modes 2/3 (NVIDIA) */
    int gemvbm_min;        /* batches from this many tokens on take gemvbm (5: measured on the H200, qwen3-8b q4_K,
                              B = 4 813.7 t/s on dp4a vs 803.0, B = 8 1428.0 vs 1304.2); LLM170_HIP_GEMVBM_MIN
                              (17: never) */
    int gemv_r;            /* rows per block of the q8 GEMV: 0 = chosen per product, else LLM170_HIP_GEMV_R */
    int gemv_warps;        /* most warps a GEMV block takes: 0 = by the row (gemv_threads), else LLM170_HIP_GEMV_WARPS */
    int sms;               /* multiprocessors, for that choice */
    hip_fn mma[QT_COUNT], mma32[QT_COUNT], mma128[QT_COUNT]; /* tensor-core GEMM, 64 / 32 / 128 tokens a block */
    int mma_t;             /* tokens per tensor-core GEMM block: 32, 64, 128, or 0 (by batch size); LLM170_HIP_MMA_T */
    int mma_waves;         /* split K of a tensor-core GEMM whose last wave of blocks would leave the device
                              idle: percent of wave use under which to split (0 = never); LLM170_HIP_MMA_WAVES */
    hip_fn k_mma_zero;     /* zeroes a mode-0 destination before a split-K tensor-core product */
    hip_fn k_fattn64, k_fattn128; /* prompt attention on tensor cores (kernels/fattn.cu), head size 64 / 128 */
    bool use_fa;           /* fattn for batches over GEMV_MAX of one sequence on an f16 cache; LLM170_HIP_FA=0 off */
    bool one_seq;          /* every token of the current batch is of one sequence */
    int dec_ns;            /* attention splits of the current step's grid when it has ≤ SPLIT_TOKENS tokens */
    bool split_buckets;    /* dec_ns from the step's longest cache (dec_splits), else always DEC_SPLIT;
                              LLM170_HIP_SPLIT_BUCKETS=0 turns it off */
    bool use_mma;          /* tensor-core GEMM (kernels/mma.cu, f16 operands) for quantized and f16 weights in
                              batches over GEMV_MAX; LLM170_HIP_MMA=0 keeps the FMA GEMM */
    hip_fn k_quant;
    bool q8;               /* GEMV of quantized weights on q8 activations (dp4a), as llama.cpp's MMVQ */
    hip_fn k_embed, k_rms, k_rope, k_add, k_swiglu, k_route, k_combine, k_argmax, k_attn, k_attn_comb;
    hip_fn k_attn_gqa;     /* attention reading each K/V row once for its query-head group */
    bool gqa;              /* decode attention through k_attn_gqa where the group fits; LLM170_HIP_GQA=1 (measured
                              slower at depth than the per-head kernel, equal at short context: opt-in) */
    /* weights */
    struct dw tok_embd, output;
    uint64_t output_norm, output_bias;
    struct dlayer *L;      /* [n_layer] */
    uint64_t *allocs;      /* every device allocation, freed at the end */
    int n_allocs, cap_allocs;
    /* state */
    size_t kv_elt;
    int *len;              /* [n_seq] cached positions */
    int *seq_next;         /* [n_seq] */
    /* scratch (device), B = n_batch */
    uint64_t x;            /* [B][E] residual stream */
    uint64_t h;            /* [B][E] normed input (x∘w, unnormed, while h_def) */
    uint64_t qkv;          /* [B][W] W = nq + 2·nkv: Q | K | V */
    uint64_t o;            /* [B][nq] attention output */
    uint64_t fg, fu;       /* [B·K or B][F] */
    uint64_t logits;       /* [B][V] */
    uint64_t part;         /* [SPLIT_TOKENS][n_head][DEC_SPLIT][hd + 2] */
    uint64_t rl;           /* [B][X] router logits */
    uint64_t sel;          /* [B][K] int */
    uint64_t sw;           /* [B][K] */
    uint64_t ey;           /* [B·K][E] */
    uint64_t io;           /* ints [4][B]: tok, pos, seq, out_rows; then f32 cs [B][n_rot] */
    uint64_t amax;         /* [B] int argmax results */
    uint64_t amx;          /* argmax_split's slices: f32 [B][AMAX_SLICES] values, int [B][AMAX_SLICES] indices,
                              int [B] counters (zero between launches) */
    uint64_t xq, xqd;      /* q8 copy of the current GEMV input: int8 [rows][K], (d, d·Σq) [rows][K/32] */
    uint64_t fq, fqd;      /* q8 copy of the SwiGLU output made by the gate/up GEMV: [GEMV_MAX·Kq][F], [..][F/32][2] */
    uint64_t fcnt;         /* [GEMV_MAX·Kq][F/32] int counters of that GEMV (zero between launches) */
    void *io_h;            /* pinned mirror of io */
    int32_t *amax_h;       /* pinned [B] */
    uint64_t topk;         /* topk_cut's arrays: int k [B], int cnt [B], int ids [B][CAP], f32 vals [B][CAP],
                              CAP = ENGINE_CAND_CAP (TOPK_BYTES(B)) */
    int32_t *topk_h;       /* pinned mirror of topk */
    hip_fn k_topk;         /* topk_cut */
    int W, nq_max, nkv_max, F;
    int Kq;                /* rows of fq per token: n_expert_used for MoE (one per slot), else 1 */
    uint64_t hq, hqd;      /* the deferred RMSNorm's input rows x∘w (in h) as q8, written by the residual GEMV
                              before (norm_group_tail): int8 [GEMV_MAX][E], (d, d·Σq) [GEMV_MAX][E/32][2]. Not xq:
                              Wo, which writes it, reads o's q8 copy from there */
    uint64_t hsp;          /* Σ x² of those rows per 32-group [GEMV_MAX][E/32] */
    uint64_t ncnt;         /* int counters of that tail [GEMV_MAX][E/32] (and [0] the routing tail's), zero between
                              launches */
    uint64_t acnt;         /* [SPLIT_TOKENS][n_head] int split counters of the merge fused into attn (zero between
                              launches) */
    bool pf;               /* PDL on and not LLM170_HIP_PDL_PREFETCH=0: GEMV blocks pull their weight rows into L2
                              before the wait (gemv_args.pf) */
    bool join_qkv;         /* Q, K and V uploaded as one [Q | K | V] matrix where they can be (up_qkv);
                              LLM170_HIP_QKV=0 keeps three */
    bool fuse_attn;        /* the last split block of a head merges the splits instead of attn_combine;
                              LLM170_HIP_FUSE_ATTN=1 (no faster measured with PDL on, docs/benchmarks.md) */
    bool amax_split;       /* greedy argmax over AMAX_SLICES blocks a row (argmax_split) instead of one block
                              (argmax_rows); LLM170_HIP_ARGMAX_SPLIT=0 for the one-block kernel */
    hip_fn k_argmax1;      /* argmax_rows */
    bool defer_norm;       /* single-token steps: the RMSNorm of a sublayer's input deferred to its GEMVs (the
                              residual GEMV before writes x∘w as q8 and Σ x², each GEMV reading it scales its
                              outputs; kernels/gemv.cu norm_group_tail) instead of an rms_norm launch;
                              LLM170_HIP_DEFER_NORM=0 keeps rms_norm */
    bool fuse_route;       /* MoE routing in the router GEMV's last block; LLM170_HIP_FUSE_ROUTE=1 (measured no
                              faster than the moe_route kernel) */
    uint64_t next_norm;    /* the next sublayer's RMSNorm weight the coming residual GEMV defers, or 0 */
    bool h_def;            /* h / hq / hsp hold the coming sublayer's input with its norm deferred (not xq) */
    struct graph_slot gs[N_GRAPHS];
    int n_gs;
    struct hip_hybrid *hy; /* qwen35* layers and their recurrent state (hip_hybrid.c), else NULL */
    /* the step model_forward is running (enqueue sets them before the walk) */
    int step_n_out;        /* rows that asked for logits */
    bool step_greedy;      /* the output op ends in the device argmax */
    bool step_dn;          /* defer_ok(c, n): the sublayer norms after the first are deferred to their GEMVs */
};

/* ---- setup ---- */

static int track(struct hip_engine *c, uint64_t p, struct err *e)
{
    if (c->n_allocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 256;
        uint64_t *a = realloc(c->allocs, sizeof *a * (size_t)cap);
        if (!a) {
            hip_rt_free(c->rt, p);
            return err_set(e, ERR_NOMEM, "hip: out of memory");
        }
        c->allocs = a;
        c->cap_allocs = cap;
    }
    c->allocs[c->n_allocs++] = p;
    return 0;
}

static int dalloc(struct hip_engine *c, size_t n, uint64_t *out, struct err *e)
{
    int rc = hip_rt_malloc(c->rt, n, out, e);
    if (rc)
        return rc;
    return track(c, *out, e);
}

static int upload(struct hip_engine *c, struct stager *s, uint64_t dst, const void *src, size_t n, struct err *e)
{
    for (size_t off = 0; off < n; off += s->cap) {
        size_t k = n - off < s->cap ? n - off : s->cap;
        memcpy(s->buf, (const char *)src + off, k);
        int rc = hip_rt_h2d(c->rt, dst + off, s->buf, k, e);
        if (!rc)
            rc = hip_rt_sync(c->rt, e);
        if (rc)
            return rc;
    }
    return 0;
}

static bool type_ok(int t)
{
    return t == QT_F32 || t == QT_F16 || t == QT_Q8_0 || t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K ||
           t == QT_IQ4_XS;
}

static int up_wt(struct hip_engine *c, struct stager *s, const struct wt *w, struct dw *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    if (!w->data)
        return 0;
    if (!type_ok(w->type))
        return err_set(e, ERR_UNSUPPORTED, "hip: tensor %s has type %s, which the GPU kernels do not cover yet",
                       w->name, qtype_get(w->type)->name);
    if ((w->type == QT_F32 || w->type == QT_F16) && w->ne[0] % 4)
        return err_set(e, ERR_UNSUPPORTED, "hip: tensor %s: rows of %lld elements (the f32/f16 kernels need a multiple of 4)",
                       w->name, (long long)w->ne[0]);
    d->type = w->type;
    d->ne0 = w->ne[0];
    d->ne1 = w->ne[1];
    d->ne2 = w->ne[2] > 0 ? w->ne[2] : 1;
    d->row_bytes = w->row_bytes;
    size_t n = w->row_bytes * (size_t)d->ne1 * (size_t)d->ne2;
    int rc = dalloc(c, n, &d->d, e);
    if (!rc)
        rc = upload(c, s, d->d, w->data, n, e);
    return rc;
}

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
           q->row_bytes == v->row_bytes && type_ok(q->type) &&
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
    int rc = dalloc(c, d->row_bytes * (size_t)d->ne1, &d->d, e);
    uint64_t off = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        const size_t n = w[i]->row_bytes * (size_t)w[i]->ne[1];
        rc = upload(c, s, d->d + off, w[i]->data, n, e);
        off += n;
    }
    return rc;
}

static int up_vec(struct hip_engine *c, struct stager *s, const struct vec *v, uint64_t *d, struct err *e)
{
    *d = 0;
    if (!v->data)
        return 0;
    int rc = dalloc(c, sizeof(float) * (size_t)v->n, d, e);
    if (!rc)
        rc = upload(c, s, *d, v->data, sizeof(float) * (size_t)v->n, e);
    return rc;
}

void hip_engine_free(struct hip_engine *c)
{
    if (!c)
        return;
    if (c->rt) {
        hip_rt_bind(c->rt, NULL);
        hip_rt_sync(c->rt, NULL);
        hip_hybrid_free(c->hy);
        for (int i = 0; i < c->n_gs; i++)
            hip_rt_graph_free(c->rt, c->gs[i].g);
        for (int i = 0; i < c->n_allocs; i++)
            hip_rt_free(c->rt, c->allocs[i]);
        hip_rt_host_free(c->rt, c->io_h);
        hip_rt_host_free(c->rt, c->amax_h);
        hip_rt_host_free(c->rt, c->topk_h);
        hip_rt_close(c->rt);
    }
    free(c->allocs);
    free(c->L);
    free(c->len);
    free(c->seq_next);
    free(c);
}

static int hip_engine_n_ctx(const struct hip_engine *c) { return c->p.n_ctx; }
const char *hip_engine_device(const struct hip_engine *c) { return hip_rt_describe(c->rt); }
void hip_engine_set_graphs(struct hip_engine *c, bool on) { c->graphs = on; }

int hip_engine_profile(struct hip_engine *c, bool on, struct err *e)
{
    c->graphs = !on;
    return hip_rt_profile(c->rt, on, e);
}

int hip_engine_profile_report(struct hip_engine *c, struct hip_prof_row *rows, int max, struct err *e)
{
    return hip_rt_profile_report(c->rt, rows, max, e);
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
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(nm, sizeof nm, "gemv_%s", names[i].s);
        if ((rc = hip_rt_fn_pdl(c->rt, nm, &c->gemv[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemv_%s_dn", names[i].s);
        if ((rc = hip_rt_fn_pdl(c->rt, nm, &c->gemv_dn[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemm_%s", names[i].s);
        if ((rc = hip_rt_fn(c->rt, nm, &c->gemm[names[i].t], e)))
            return rc;
        snprintf(nm, sizeof nm, "gemvq_%s", names[i].s);
        struct err ign;
        if (hip_rt_fn_pdl(c->rt, nm, &c->gemvq[names[i].t], &ign))
            c->gemvq[names[i].t] = NULL; /* f32 activations only for this type */
        c->gemvq_r[0][names[i].t] = c->gemvq[names[i].t];
        snprintf(nm, sizeof nm, "gemvq_%s_dn", names[i].s);
        if (hip_rt_fn_pdl(c->rt, nm, &c->gemvq_dn[0][names[i].t], &ign))
            c->gemvq_dn[0][names[i].t] = NULL;
        for (int wide = 0; wide < 2; wide++) {
            snprintf(nm, sizeof nm, "gemvb%s_%s", wide ? "16" : "", names[i].s);
            if (hip_rt_fn_pdl(c->rt, nm, &c->gemvb[wide][names[i].t], &ign))
                c->gemvb[wide][names[i].t] = NULL; /* no multi-token kernel for this type */
            snprintf(nm, sizeof nm, "gemvbd%s_%s", wide ? "16" : "", names[i].s);
            if (hip_rt_fn_pdl(c->rt, nm, &c->gemvbd[wide][names[i].t], &ign))
                c->gemvbd[wide][names[i].t] = NULL;
            snprintf(nm, sizeof nm, "gemvbm%s_%s", wide ? "d" : "", names[i].s);
            if (hip_rt_fn_pdl(c->rt, nm, &c->gemvbm[wide][names[i].t], &ign))
                c->gemvbm[wide][names[i].t] = NULL; /* no tensor-core kernel: AMD, or this type */
        }
        for (int r = 1; r < 3; r++) {
            snprintf(nm, sizeof nm, "gemvq%d_%s", 2 << r, names[i].s);
            if (hip_rt_fn_pdl(c->rt, nm, &c->gemvq_r[r][names[i].t], &ign))
                c->gemvq_r[r][names[i].t] = NULL;
            snprintf(nm, sizeof nm, "gemvq%d_%s_dn", 2 << r, names[i].s);
            if (hip_rt_fn_pdl(c->rt, nm, &c->gemvq_dn[r][names[i].t], &ign))
                c->gemvq_dn[r][names[i].t] = NULL;
        }
        snprintf(nm, sizeof nm, "mma_%s", names[i].s);
        if (hip_rt_fn(c->rt, nm, &c->mma[names[i].t], &ign))
            c->mma[names[i].t] = NULL; /* f32 weights, or no tensor-core kernel on this vendor */
        snprintf(nm, sizeof nm, "mma32_%s", names[i].s);
        if (hip_rt_fn(c->rt, nm, &c->mma32[names[i].t], &ign))
            c->mma32[names[i].t] = NULL;
        snprintf(nm, sizeof nm, "mma128_%s", names[i].s);
        if (hip_rt_fn(c->rt, nm, &c->mma128[names[i].t], &ign))
            c->mma128[names[i].t] = NULL;
    }
    struct err ign;
    if (hip_rt_fn(c->rt, "mma_zero", &c->k_mma_zero, &ign))
        c->k_mma_zero = NULL;
    if (hip_rt_fn(c->rt, "fattn_64", &c->k_fattn64, &ign))
        c->k_fattn64 = NULL;
    if (hip_rt_fn(c->rt, "fattn_128", &c->k_fattn128, &ign))
        c->k_fattn128 = NULL;
    struct { hip_fn *f; const char *n; bool pdl; } ks[] = {
        { &c->k_embed, "embed_rows", false }, { &c->k_rms, "rms_norm", true }, { &c->k_rope, "rope_store", true },
        { &c->k_add, "add_f32", false }, { &c->k_swiglu, "swiglu_f32", false }, { &c->k_route, "moe_route", true },
        { &c->k_combine, "moe_combine", false }, { &c->k_argmax, "argmax_split", true },
        { &c->k_argmax1, "argmax_rows", true }, { &c->k_attn, "attn", true },
        { &c->k_attn_comb, "attn_combine", true }, { &c->k_quant, "quantize_q8", true },
        { &c->k_attn_gqa, "attn_gqa", true }, { &c->k_topk, "topk_cut", false },
    };
    for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++)
        if ((rc = (ks[i].pdl ? hip_rt_fn_pdl : hip_rt_fn)(c->rt, ks[i].n, ks[i].f, e)))
            return rc;
    return 0;
}

/* The scratch buffers of an engine for m with resolved params p (n_batch B tokens): where each
 * one's device pointer goes and its bytes. Sets c->nq_max, nkv_max, W, F, Kq. The io buffer is
 * first. Also sizes the fit check (hip_engine_scratch_bytes), so the two cannot drift apart. */
struct scratch {
    uint64_t *d;
    size_t n;
};
#define N_SCRATCH 27
/* bytes of topk_cut's arrays (hip_engine.topk) for a batch of B rows */
#define TOPK_BYTES(B) ((B) * (2 + 2 * (size_t)ENGINE_CAND_CAP) * 4)

static int scratch_table(struct hip_engine *c, const struct model *m, const struct engine_params *p,
                         struct scratch *sc)
{
    const struct hparams *hp = &m->hp;
    int nqm = 0, nkvm = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const int nq = m->layers[il].n_head * hp->head_dim, nkv = m->layers[il].n_head_kv * hp->head_dim;
        nqm = nq > nqm ? nq : nqm;
        nkvm = nkv > nkvm ? nkv : nkvm;
    }
    const size_t B = (size_t)p->n_batch, E = (size_t)hp->n_embd, V = (size_t)hp->n_vocab;
    const size_t X = (size_t)hp->n_expert, K = (size_t)(hp->n_expert_used > 0 ? hp->n_expert_used : 1);
    c->nq_max = nqm;
    c->nkv_max = nkvm;
    c->W = nqm + 2 * nkvm;
    c->F = hp->n_ff_max > hp->n_ff_exp ? hp->n_ff_max : hp->n_ff_exp;
    c->Kq = X ? (int)K : 1;
    const size_t F = (size_t)c->F, FK = X ? F * K : F, KS = GEMV_MAX * (size_t)c->Kq;
    size_t qmax = E > F ? E : F;
    if ((size_t)nqm > qmax)
        qmax = (size_t)nqm;
    const size_t io_bytes = 4 * B * sizeof(int32_t) + B * (size_t)hp->n_rot * sizeof(float);
    const struct scratch t[] = {
        { &c->io, io_bytes }, { &c->x, B * E * 4 }, { &c->h, B * E * 4 }, { &c->qkv, B * (size_t)c->W * 4 },
        { &c->o, B * (size_t)nqm * 4 }, { &c->fg, B * FK * 4 }, { &c->fu, B * FK * 4 }, { &c->logits, B * V * 4 },
        { &c->part, (size_t)SPLIT_TOKENS * (size_t)hp->n_head_max * DEC_SPLIT * ((size_t)hp->head_dim + 2) * 4 },
        { &c->rl, B * (X ? X : 1) * 4 }, { &c->sel, B * K * 4 }, { &c->sw, B * K * 4 },
        { &c->ey, X ? B * K * E * 4 : 4 }, { &c->amax, B * 4 }, { &c->amx, B * (2 * AMAX_SLICES + 1) * 4 },
        { &c->xq, B * K * qmax }, { &c->xqd, B * K * (qmax / 32 + 1) * 8 },
        { &c->fq, KS * F }, { &c->fqd, KS * (F / 32 + 1) * 8 }, { &c->fcnt, KS * (F / 32 + 1) * 4 },
        { &c->hq, GEMV_MAX * E }, { &c->hqd, GEMV_MAX * (E / 32) * 8 }, { &c->hsp, GEMV_MAX * (E / 32) * 4 },
        { &c->ncnt, GEMV_MAX * (E / 32 + 1) * 4 },
        { &c->acnt, (size_t)SPLIT_TOKENS * (size_t)hp->n_head_max * 4 },
        { &c->topk, TOPK_BYTES(B) },
    };
    const int n = (int)(sizeof t / sizeof t[0]);
    for (int i = 0; i < n; i++)
        sc[i] = t[i];
    return n;
}

uint64_t hip_engine_scratch_bytes(const struct model *m, const struct engine_params *p)
{
    struct hip_engine c;
    struct scratch sc[N_SCRATCH];
    memset(&c, 0, sizeof c);
    const int n = scratch_table(&c, m, p, sc);
    uint64_t s = 0;
    for (int i = 0; i < n; i++)
        s += sc[i].n;
    return s;
}

static const struct layer_ops hip_layer_ops;

int hip_engine_create(struct hip_engine **out, const struct model *m, const struct engine_params *pin,
                      const struct hip_knobs *k, struct err *e)
{
    *out = NULL;
    struct engine_params p;
    int rc0 = engine_params_resolve(m, pin, &p, e);
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
    c->m = m;
    c->p = p;
    struct hip_knobs kenv;
    if (!k) {
        hip_knobs_from_env(&kenv);
        k = &kenv;
    }
    c->k = *k;
    c->pinned = k->pinned;
    c->graphs = k->graphs;
    c->q8 = k->q8;
    c->defer_norm = k->defer_norm;
    c->fuse_route = k->fuse_route;
    c->join_qkv = k->join_qkv;
    c->fuse_attn = k->fuse_attn;
    c->amax_split = k->amax_split;
    c->gemv_r = k->gemv_r;
    c->gemv_warps = k->gemv_warps;
    c->use_mma = k->use_mma;
    c->gemvb_t = k->gemvb_t;
    c->gemvbm_min = k->gemvbm_min;
    c->mma_t = k->mma_t;
    c->dec_ns = DEC_SPLIT;
    c->split_buckets = k->split_buckets;
    c->mma_waves = k->mma_waves;
    c->use_fa = k->use_fa;
    c->gqa = k->gqa;
    int rc = hip_rt_open(&c->rt, e);
    if (!rc)
        c->pf = hip_rt_pdl(c->rt) && k->pdl_prefetch;
    if (!rc)
        rc = get_kernels(c, e);
    c->L = calloc((size_t)hp->n_layer, sizeof *c->L);
    c->len = calloc((size_t)p.n_seq, sizeof(int));
    c->seq_next = calloc((size_t)p.n_seq, sizeof(int));
    if (!rc && (!c->L || !c->len || !c->seq_next))
        rc = err_set(e, ERR_NOMEM, "hip: out of memory");
    if (rc) {
        hip_engine_free(c);
        return rc;
    }
    c->warp = hip_rt_warp(c->rt);
    c->sms = hip_rt_sm_count(c->rt);

    /* refuse a model that does not fit before uploading anything, with the numbers */
    struct hip_fit fit;
    hip_fit_need(m, &p, &fit);
    const size_t free_mem = hip_rt_free_mem(c->rt); /* 0: the driver did not say; the allocations will */
    if (free_mem && (rc = hip_fit_check(&fit, free_mem, hip_rt_describe(c->rt), &p, e))) {
        hip_engine_free(c);
        return rc;
    }

    /* weights, uploaded once through a pinned staging buffer */
    struct stager s = { .cap = 64u << 20 };
    if ((rc = hip_rt_host_alloc(c->rt, s.cap, &s.buf, e))) {
        hip_engine_free(c);
        return rc;
    }
    rc = up_wt(c, &s, &m->tok_embd, &c->tok_embd, e);
    if (!rc)
        rc = up_wt(c, &s, &m->output, &c->output, e);
    if (!rc)
        rc = up_vec(c, &s, &m->output_norm, &c->output_norm, e);
    if (!rc)
        rc = up_vec(c, &s, &m->output_bias, &c->output_bias, e);
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        const struct layer *ly = &m->layers[il];
        struct dlayer *d = &c->L[il];
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
            rc = up_wt(c, &s, ws[i], dws[i], e);
        const struct vec *vs[] = { &ly->attn_norm, &ly->ffn_norm, &ly->q_norm, &ly->k_norm, &ly->bq, &ly->bk,
                                   &ly->bv, &ly->bqkv, &ly->bo, &ly->b_gate, &ly->b_up, &ly->b_down };
        uint64_t *dvs[] = { &d->attn_norm, &d->ffn_norm, &d->q_norm, &d->k_norm, &d->bq, &d->bk,
                            &d->bv, &d->bqkv, &d->bo, &d->b_gate, &d->b_up, &d->b_down };
        for (size_t i = 0; i < sizeof vs / sizeof vs[0] && !rc; i++)
            rc = up_vec(c, &s, vs[i], dvs[i], e);
    }
    if (!rc && m->arch->hybrid)
        rc = hip_hybrid_create(&c->hy, c, m, &p, &s, e);
    hip_rt_host_free(c->rt, s.buf);
    if (rc) {
        hip_engine_free(c);
        return rc;
    }

    /* KV cache */
    c->kv_elt = p.kv_f32 ? 4 : 2;
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        const struct layer *ly = &m->layers[il];
        if (ly->kv_index < 0)
            continue;
        size_t bytes = (size_t)p.n_seq * (size_t)p.n_ctx * (size_t)(ly->n_head_kv * hp->head_dim) * c->kv_elt;
        rc = dalloc(c, bytes, &c->L[il].kc, e);
        if (!rc)
            rc = dalloc(c, bytes, &c->L[il].vc, e);
        if (!rc)
            rc = hip_rt_memset32(c->rt, c->L[il].kc, 0, bytes / 4, e);
        if (!rc)
            rc = hip_rt_memset32(c->rt, c->L[il].vc, 0, bytes / 4, e);
    }
    /* scratch */
    struct scratch sc[N_SCRATCH];
    const int nsc = scratch_table(c, m, &p, sc);
    const size_t F = (size_t)c->F, KS = GEMV_MAX * (size_t)c->Kq;
    const size_t io_bytes = sc[0].n;
    for (int i = 0; i < nsc && !rc; i++)
        rc = dalloc(c, sc[i].n, sc[i].d, e);
    if (!rc)
        rc = hip_rt_memset32(c->rt, c->fcnt, 0, KS * (F / 32 + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->rt, c->ncnt, 0, GEMV_MAX * ((size_t)hp->n_embd / 32 + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->rt, c->amx, 0, (size_t)p.n_batch * (2 * AMAX_SLICES + 1), e);
    if (!rc)
        rc = hip_rt_memset32(c->rt, c->acnt, 0, (size_t)SPLIT_TOKENS * (size_t)m->hp.n_head_max, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->rt, io_bytes, &c->io_h, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->rt, (size_t)p.n_batch * 4, (void **)&c->amax_h, e);
    if (!rc)
        rc = hip_rt_host_alloc(c->rt, TOPK_BYTES((size_t)p.n_batch), (void **)&c->topk_h, e);
    if (!rc)
        rc = hip_rt_sync(c->rt, e);
    if (rc) {
        hip_engine_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

/* ---- launches ---- */

static unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

static bool want_q8(const struct hip_engine *c, int k) { return c->q8 && k % 32 == 0 && k % c->warp == 0; }

/* Launch a product: GEMV (small batches, expert slices, the dual modes) or the tiled GEMM.
 * q: 1 when c->xq/xqd, 2 when c->fq/fqd hold the input quantized to q8 (rows of w->ne0), so GEMV may use
 * the dp4a kernels; 0 when no q8 copy exists; 3 when the input (c->h, as q8 c->hq/hqd) is x∘w with its RMSNorm
 * deferred (c->hsp), which only the per-token GEMV takes. */
/* Threads of a GEMV block: one per 32-element unit of its row (all slots' in mode 4), in whole warps.
 * Measured on the H200 (docs/benchmarks.md, 2026-12-01): a row of up to 8 warps' units in one pass
 * (qwen35-27b's 5120 and 6144: 109.6 t/s against 103.0 capped at 4 warps); longer rows in 4 warps when
 * the passes come out even (qwen3-8b's 12288: 313.7 against 302.3 with 8 warps and 2 rows), else in 8
 * with 2 rows a block (qwen35-27b's 17408); the experts' down product over all slots (mode 4) at most
 * 4 warps, as measured on qwen3-30b-a3b. *even: the units spread evenly, so 4 rows a block pay off.
 * LLM170_HIP_GEMV_WARPS=W caps every block at W warps instead (even: units fill whole passes). */
static size_t gemv_threads(const struct hip_engine *c, const struct gemv_args *a, bool *even)
{
    const size_t W = (size_t)c->warp, units = (size_t)(a->mode == 4 ? a->nslot : 1) * (size_t)(a->k / 32);
    const size_t one_pass = (units < W ? W : cdiv(units, W) * W);
    size_t nt;
    bool ev = true;
    if (c->gemv_warps) {
        nt = one_pass > (size_t)c->gemv_warps * W ? (size_t)c->gemv_warps * W : one_pass;
        ev = units <= nt || units % nt == 0;
    } else if (a->mode == 4) {
        nt = one_pass > 4 * W ? 4 * W : one_pass;
    } else if (one_pass <= 8 * W) {
        nt = one_pass;
    } else if (units % (4 * W) == 0) {
        nt = 4 * W;
    } else {
        nt = 8 * W;
        ev = false;
    }
    if (even)
        *even = ev;
    return nt;
}

/* Batched decode: a product of 2..GEMV_MAX tokens on their q8 copy, without expert slices, in the
 * multi-token GEMV (kernels/gemvb.cu), which reads each weight row once for all the tokens instead of
 * once per token (gemv.cu) or dequantizing it to f16 for a 32-token tile (mma.cu): from 5 tokens on int8
 * tensor cores (gemvbm: 16 rows × all tokens a block) where the device has them and k is whole
 * 256-element chunks, else on dp4a in blocks of R rows × 8 tokens (R = 4, dual modes 2; batches over 8 in two passes), or
 * × 16 tokens in one pass (R = 2, dual 1) with LLM170_HIP_GEMVB=16. The fused norm and routing tails
 * stay on gemv.cu. Returns false when the product is not one for it. */
static bool launch_gemvb(struct hip_engine *c, struct gemv_args *a, const struct dw *w, const struct dw *w2, int q,
                         int *rc, struct err *e)
{
    const bool dual = a->mode == 2 || a->mode == 3;
    if (!c->gemvb_t || a->nz < 2 || a->nz > GEMV_MAX || a->sel || a->rsel || a->mode > 3 || a->x_div != 1 || !q ||
        q == 3 || !c->q8 || c->warp != 32 || (w2 && w2->type != w->type))
        return false;
    const int wide = a->nz > 8 && c->gemvb_t == 16;
    hip_fn f = dual ? c->gemvbd[wide][w->type] : c->gemvb[wide][w->type];
    hip_fn fm = a->nz >= c->gemvbm_min && a->k % 256 == 0 ? c->gemvbm[dual][w->type] : NULL;
    if (!f && !fm)
        return false;
    a->x = q == 2 ? c->fq : c->xq;
    a->xd = q == 2 ? c->fqd : c->xqd;
    a->x_stride = (int)w->ne0;
    a->pf = c->pf;
    void *params[] = { a };
    if (fm) { /* 16 rows and every token a block of 8 warps (kernels/gemvb.cu) */
        *rc = hip_rt_launch(c->rt, fm, cdiv((size_t)a->n_rows, 16), 1, 1, 256, params, e);
        return true;
    }
    const int nt = wide ? 16 : 8, R = 32 / nt / (dual ? 2 : 1);
    *rc = hip_rt_launch(c->rt, f, cdiv((size_t)a->n_rows, (size_t)R) * cdiv((size_t)a->nz, (size_t)nt), 1, 1,
                        (unsigned)gemv_threads(c, a, NULL), params, e);
    return true;
}

/* Split K of a tensor-core GEMM over whole waves. A grid a little larger than the device's resident
 * slots runs a last wave that leaves most multiprocessors idle: qwen35-27b's 5120-row products are
 * 40 × 4 blocks of the 128-token tile on 132 one-block multiprocessors, 61 % of two waves. When the
 * waves' use falls under min_pct percent, take the smallest split of at most 4 slices (each at least
 * 16 k steps) whose waves are at least 90 % used, else the best of them; the slices add with atomics
 * (more output traffic, hence the bound). */
static unsigned mma_wave_split(unsigned blocks, unsigned slots, unsigned steps, unsigned min_pct)
{
    if (!min_pct || !slots || !blocks)
        return 1;
    unsigned best = 1, best_pct = 0;
    for (unsigned s = 1; s <= 4 && (s == 1 || steps / s >= 16); s++) {
        const unsigned b = blocks * s, pct = (unsigned)(100ull * b / (cdiv(b, slots) * slots));
        if (s == 1 && pct >= min_pct)
            return 1;
        if (s > 1 && pct >= 90)
            return s;
        if (pct > best_pct)
            best = s, best_pct = pct;
    }
    return best;
}

static int launch_mm(struct hip_engine *c, struct gemv_args *a, const struct dw *w, const struct dw *w2, int q,
                     struct err *e)
{
    void *params[] = { a };
    const uint64_t next_norm = c->next_norm;
    c->next_norm = 0; /* asked of this launch only */
    int brc;
    if (launch_gemvb(c, a, w, w2, q, &brc, e))
        return brc;
    if (a->nz <= TOKEN_GEMV_MAX || a->sel || a->mode >= 2) {
        hip_fn f = c->gemv[w->type], fdn = c->gemv_dn[w->type];
        int R = GEMV_R;
        if (q && c->q8 && c->gemvq[w->type] && (!w2 || w2->type == w->type)) {
            f = c->gemvq[w->type], fdn = c->gemvq_dn[0][w->type];
            a->x = q == 2 ? c->fq : q == 3 ? c->hq : c->xq;
            a->xd = q == 2 ? c->fqd : q == 3 ? c->hqd : c->xqd;
            a->x_stride = (int)w->ne0;
            if (q == 3) /* every output scaled by its token's 1/sqrt(mean x² + eps) */
                a->rsp = c->hsp, a->eps = c->m->hp.rms_eps;
            /* more rows per block keep more weight loads in flight per thread and make fewer, longer
             * blocks: 4 when that still leaves two blocks per multiprocessor (measured faster than 2 and
             * 8 on qwen3-8b q4_K, docs/benchmarks.md), else 2 */
            /* ... and 2 when the row's units do not spread evenly over the block's threads (gemv_threads) */
            bool even;
            gemv_threads(c, a, &even);
            int r = c->gemv_r;
            if (!r)
                r = even && (size_t)a->nz * (size_t)a->n_rows / 4 >= 2 * (size_t)c->sms ? 4 : 2;
            const int ri = r == 8 ? 2 : r == 4 ? 1 : 0;
            if (c->gemvq_r[ri][w->type])
                f = c->gemvq_r[ri][w->type], fdn = c->gemvq_dn[ri][w->type], R = r;
        } else if (q == 3) { /* f32 activations: x is c->h, which holds x∘w then */
            a->rsp = c->hsp, a->eps = c->m->hp.rms_eps;
        }
        if (q == 3) /* the kernel that scales by the input's norm */
            f = fdn;
        if (!f)
            return err_set(e, ERR_INTERNAL, "hip: no GEMV kernel for a deferred RMSNorm's input");
        /* the next sublayer's RMSNorm deferred: this grid writes its input x∘w, its q8 copy and Σ x² per
         * 32-group (h, hq, hsp) */
        if (next_norm && (a->mode == 1 || a->mode == 4) && a->nz <= GEMV_MAX && a->n_rows == c->m->hp.n_embd &&
            a->n_rows % 32 == 0) {
            a->nw = next_norm, a->ny = c->h, a->nq = c->hq, a->nqd = c->hqd, a->nsp = c->hsp, a->ncnt = c->ncnt;
            c->h_def = true;
        }
        const size_t nt = gemv_threads(c, a, NULL);
        a->pf = c->pf;
        return hip_rt_launch(c->rt, f, (unsigned)a->nz * cdiv((size_t)a->n_rows, (size_t)R), 1, 1, (unsigned)nt,
                             params, e);
    }
    if (q == 3)
        return err_set(e, ERR_INTERNAL, "hip: a deferred RMSNorm's input reached a GEMM");
    if (c->use_mma && c->mma[w->type] && c->k_mma_zero && c->warp == 32 && a->k % 64 == 0 && a->x_stride % 4 == 0 &&
        a->x % 16 == 0) {
        /* 128 rows × 64 tokens a block (two resident per multiprocessor), × 32 tokens with two weight steps
         * in flight for small batches (three resident), or × 128 tokens for long prompts (one resident,
         * half the dequantization per product); too few blocks to fill the device
         * (small decode batches, narrow K/V projections) split K over blockIdx.z, adding with atomics
         * into a zeroed y */
        const int t = c->mma_t ? c->mma_t : a->nz <= MMA32_MAX ? 32 : a->nz >= MMA128_MIN ? 128 : 64;
        hip_fn f = t == 32 ? c->mma32[w->type] : t == 128 ? c->mma128[w->type] : NULL;
        const unsigned mt = f ? (unsigned)t : 64, per_sm = !f ? 2 : t == 32 ? 3 : 1; /* resident blocks (mma.cu) */
        f = f ? f : c->mma[w->type];
        const unsigned gx = cdiv((size_t)a->n_rows, 128), gy = cdiv((size_t)a->nz, mt);
        const unsigned steps = (unsigned)a->k / 64, want = per_sm * (unsigned)hip_rt_sm_count(c->rt);
        unsigned ks = 1;
        if (gx * gy < want * 3 / 4) {
            ks = cdiv(want, (size_t)gx * gy);
            ks = ks > steps / 4 ? (steps / 4 ? steps / 4 : 1) : ks;
            ks = cdiv(steps, cdiv(steps, ks)); /* no empty slice */
        } else {
            ks = mma_wave_split(gx * gy, want, steps, (unsigned)c->mma_waves);
        }
        int rc;
        if (ks > 1 && a->mode == 0 &&
            (rc = hip_rt_launch(c->rt, c->k_mma_zero, cdiv((size_t)a->n_rows, 256), (unsigned)a->nz, 1, 256, params, e)))
            return rc;
        return hip_rt_launch(c->rt, f, gx, gy, ks, 256, params, e);
    }
    return hip_rt_launch(c->rt, c->gemm[w->type], cdiv((size_t)a->n_rows, 64), cdiv((size_t)a->nz, 64), 1, 256,
                         params, e);
}

/* y[z] (op)= W · x[z / x_div], z < nz; expert slices by sel when set. mode as gemv_args. */
static int mm(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int x_div,
              int nz, uint64_t y, int y_stride, uint64_t bias, uint64_t bias2, uint64_t sel, int mode, int q,
              struct err *e)
{
    struct gemv_args a = {
        .w = w->d, .w2 = w2 ? w2->d : 0, .x = x, .y = y, .bias = bias, .bias2 = bias2, .sel = sel,
        .row_bytes = (int64_t)w->row_bytes, .expert_bytes = (int64_t)(w->row_bytes * (size_t)w->ne1),
        .n_rows = (int)w->ne1, .k = (int)w->ne0, .x_stride = x_stride, .y_stride = y_stride, .x_div = x_div,
        .nz = nz, .mode = mode,
    };
    return launch_mm(c, &a, w, w2, q, e);
}

/* y = W·x + b and y2 = W2·x + b2 in one pass over x (K and V projections of a decode step) */
static int mm_dual(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int nz,
                   uint64_t y, uint64_t y2, int y_stride, uint64_t bias, uint64_t bias2, int q, struct err *e)
{
    struct gemv_args a = {
        .w = w->d, .w2 = w2->d, .x = x, .y = y, .y2 = y2, .bias = bias, .bias2 = bias2,
        .row_bytes = (int64_t)w->row_bytes, .n_rows = (int)w->ne1, .k = (int)w->ne0, .x_stride = x_stride,
        .y_stride = y_stride, .x_div = 1, .nz = nz, .mode = 3,
    };
    return launch_mm(c, &a, w, w2, q, e);
}

/* q8 copy of x [rows][k] into xq/xqd, for the GEMV that follows */
static int quant(struct hip_engine *c, uint64_t x, int rows, int k, int x_stride, struct err *e)
{
    uint64_t q = c->xq, qd = c->xqd;
    void *p[] = { &x, &k, &x_stride, &q, &qd };
    return hip_rt_launch(c->rt, c->k_quant, cdiv((size_t)k, 256), (unsigned)rows, 1, 256, p, e);
}

/* y[r] = rmsnorm(x[rows ? rows[r] : r]) · w; also its q8 copy into xq/xqd when q */
static int rms(struct hip_engine *c, uint64_t y, uint64_t x, uint64_t w, uint64_t rows, int nr, int n, int xs, int ys,
               bool q, struct err *e)
{
    float eps = c->m->hp.rms_eps;
    uint64_t qq = q ? c->xq : 0, qd = q ? c->xqd : 0;
    void *params[] = { &y, &x, &w, &rows, &n, &eps, &xs, &ys, &qq, &qd };
    /* about 4 elements a thread, up to 1024 threads: the row stays in registers (kernels/misc.cu) */
    size_t nt = cdiv(cdiv((size_t)n, 4), (size_t)c->warp) * (size_t)c->warp;
    nt = nt > 1024 ? 1024 : nt;
    return hip_rt_launch(c->rt, c->k_rms, (unsigned)nr, 1, 1, (unsigned)nt, params, e);
}

static int ew(struct hip_engine *c, hip_fn f, uint64_t a, uint64_t b, int n, struct err *e)
{
    void *params[] = { &a, &b, &n };
    return hip_rt_launch(c->rt, f, cdiv((size_t)n, 256), 1, 1, 256, params, e);
}

#define TRY(x)                 \
    do {                       \
        if ((rc = (x)) != 0)   \
            return rc;         \
    } while (0)

/* next_norm: the RMSNorm weight of the sublayer after this one, deferred by the residual GEMV (defer_ok), or 0 */
static int attn_layer(struct hip_engine *c, const struct layer *ly, const struct dlayer *d, int n, uint64_t next_norm,
                      struct err *e)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd, hd = hp->head_dim, W = c->W, B = c->p.n_batch;
    const int nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;
    const uint64_t tok = c->io, pos = tok + 4u * (uint64_t)B, seq = pos + 4u * (uint64_t)B;
    const uint64_t cs = c->io + 16u * (uint64_t)B;
    int rc;
    /* the input: normed in h (+ q8 in xq), or x∘w in hq with its norm deferred to these GEMVs */
    const int qh = c->h_def ? 3 : want_q8(c, E);
    if (!c->h_def)
        TRY(rms(c, c->h, c->x, d->attn_norm, 0, n, E, E, E, qh, e));
    c->h_def = false;
    if (d->wqkv.d) { /* rows of nq + 2·nkv, as rope_store and attn read them (qs below) */
        TRY(mm(c, &d->wqkv, NULL, c->h, E, 1, n, c->qkv, nq + 2 * nkv, d->bqkv, 0, 0, 0, qh, e));
    } else {
        TRY(mm(c, &d->wq, NULL, c->h, E, 1, n, c->qkv, W, d->bq, 0, 0, 0, qh, e));
        const uint64_t yk = c->qkv + 4u * (uint64_t)nq, yv = c->qkv + 4u * (uint64_t)(nq + nkv);
        if (n <= GEMV_MAX && d->wk.type == d->wv.type && d->wk.ne0 == d->wv.ne0 && d->wk.ne1 == d->wv.ne1) {
            TRY(mm_dual(c, &d->wk, &d->wv, c->h, E, n, yk, yv, W, d->bk, d->bv, qh, e));
        } else {
            TRY(mm(c, &d->wk, NULL, c->h, E, 1, n, yk, W, d->bk, 0, 0, 0, qh, e));
            TRY(mm(c, &d->wv, NULL, c->h, E, 1, n, yv, W, d->bv, 0, 0, 0, qh, e));
        }
    }
    /* the fused projection lays out [Q | K | V] per row with its own width */
    const int qs = d->wqkv.d ? nq + 2 * nkv : W;
    const uint64_t seq_stride = (uint64_t)c->p.n_ctx * (uint64_t)nkv;
    struct rope_args ra = {
        .q = c->qkv, .k = c->qkv + 4u * (uint64_t)nq, .v = c->qkv + 4u * (uint64_t)(nq + nkv), .q_norm = d->q_norm,
        .k_norm = d->k_norm, .cs = cs, .kc = d->kc, .vc = d->vc, .pos = pos, .seq = seq,
        .seq_stride = (int64_t)seq_stride, .q_stride = qs, .kv_stride = qs, .hd = hd, .n_rot = hp->n_rot,
        .n_head = ly->n_head, .n_head_kv = ly->n_head_kv, .neox = m->arch->rope == ROPE_NEOX,
        .kv_f16 = c->kv_elt == 2, .eps = hp->rms_eps,
    };
    (void)tok;
    void *rp[] = { &ra };
    unsigned rb = (unsigned)((hd + c->warp - 1) / c->warp * c->warp);
    TRY(hip_rt_launch(c->rt, c->k_rope, (unsigned)n, (unsigned)(ly->n_head + ly->n_head_kv), 1, rb, rp, e));
    const int nsplit = n <= SPLIT_TOKENS ? c->dec_ns : 1;
    struct attn_args aa = {
        .q = c->qkv, .o = c->o, .k = d->kc, .v = d->vc, .pos = pos, .seq = seq, .part = c->part,
        .seq_stride = (int64_t)seq_stride, .kv_dim = nkv, .hd = hd, .n_head = ly->n_head,
        .n_head_kv = ly->n_head_kv, .q_stride = qs, .o_stride = nq, .nsplit = nsplit, .kv_f16 = c->kv_elt == 2,
        .scale = hp->kq_scale,
    };
    /* x += Wo·o + bo; the q8 copy of o for the GEMV comes out of attn (one split) or the split merge,
     * when heads are whole warps */
    const bool qo = n <= GEMV_MAX && want_q8(c, nq) && c->gemvq[d->wo.type];
    /* one split: attn writes o and its q8 copy (whole warps per 32 elements); more: the merge does,
     * with one thread per element */
    const bool fuse = qo && hd % 32 == 0 && hd % c->warp == 0 && (nsplit == 1 || (int)rb == hd);
    if (fuse)
        aa.oq = c->xq, aa.oqd = c->xqd;
    /* the head's last split block merges the splits (counted in acnt): one launch fewer a layer */
    if (nsplit > 1 && c->fuse_attn)
        aa.cnt = c->acnt;
    void *ap[] = { &aa };
    /* decode: one block per KV head for its whole query-head group when it fits kernels/attn.cu's limits
     * (GQA_MAX 8 heads, G·hd <= 1024, hd <= 8·warp) */
    const int G = ly->n_head / ly->n_head_kv;
    hip_fn fa = hd == 128 ? c->k_fattn128 : hd == 64 ? c->k_fattn64 : NULL;
    if (n > GEMV_MAX && c->use_fa && fa && c->one_seq && c->kv_elt == 2 && c->warp == 32 && qs % 4 == 0 &&
        ly->n_head % ly->n_head_kv == 0) {
        /* a prompt: 64 tokens of one head a block, the cache walked in f16 tiles on tensor cores */
        int nn = n;
        void *fp[] = { &aa, &nn };
        TRY(hip_rt_launch(c->rt, fa, cdiv((size_t)n, 64), (unsigned)ly->n_head, 1, 128, fp, e));
    } else if (c->gqa && n <= GEMV_MAX && ly->n_head % ly->n_head_kv == 0 && G > 1 && G <= 8 && G * hd <= 1024 &&
        hd <= 8 * c->warp)
        TRY(hip_rt_launch(c->rt, c->k_attn_gqa, (unsigned)(n * ly->n_head_kv), (unsigned)nsplit, 1, 256, ap, e));
    else
        TRY(hip_rt_launch(c->rt, c->k_attn, (unsigned)(n * ly->n_head), (unsigned)nsplit, 1,
                          4u * (unsigned)c->warp, ap, e));
    if (nsplit > 1 && !aa.cnt) /* a no-op for tokens whose cache took one split (kernels/attn.cu) */
        TRY(hip_rt_launch(c->rt, c->k_attn_comb, (unsigned)(n * ly->n_head), 1, 1, rb, ap, e));
    if (qo && !fuse)
        TRY(quant(c, c->o, n, nq, nq, e));
    c->next_norm = next_norm;
    return mm(c, &d->wo, NULL, c->o, nq, 1, n, c->x, E, d->bo, 0, 0, 1, qo, e);
}

static int ffn_layer(struct hip_engine *c, const struct layer *ly, const struct dlayer *d, int n, uint64_t next_norm,
                     struct err *e)
{
    const struct hparams *hp = &c->m->hp;
    const int E = hp->n_embd;
    int rc;
    const int qh = c->h_def ? 3 : want_q8(c, E);
    if (!c->h_def)
        TRY(rms(c, c->h, c->x, d->ffn_norm, 0, n, E, E, E, qh, e));
    c->h_def = false;
    const uint64_t nn = next_norm;
    if (ly->ffn == FFN_MOE) {
        const int X = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
        float scale = hp->expert_weights_scale;
        uint64_t rl = c->rl, sel = c->sel, sw = c->sw;
        int xx = X, kk = K;
        if (c->fuse_route && n <= GEMV_MAX) {
            /* the router GEMV's last block routes (expert ids and weights stay on the device) */
            struct gemv_args ra = {
                .w = d->gate_inp.d, .x = c->h, .y = c->rl, .rsel = c->sel, .rw = c->sw, .ncnt = c->ncnt,
                .row_bytes = (int64_t)d->gate_inp.row_bytes, .n_rows = X, .k = (int)d->gate_inp.ne0,
                .x_stride = E, .y_stride = X, .x_div = 1, .nz = n, .mode = 0, .nslot = K, .rscale = scale,
            };
            TRY(launch_mm(c, &ra, &d->gate_inp, NULL, qh, e));
        } else {
            TRY(mm(c, &d->gate_inp, NULL, c->h, E, 1, n, c->rl, X, 0, 0, 0, 0, qh, e));
            void *rp[] = { &rl, &xx, &kk, &sel, &sw, &scale };
            TRY(hip_rt_launch(c->rt, c->k_route, (unsigned)n, 1, 1, (unsigned)c->warp, rp, e));
        }
        /* gate/up of the selected experts with SwiGLU, over the (token, slot) pairs; its epilogue writes
         * the q8 copy of the result for the down GEMV (fq rows z = token·K + slot) */
        const bool qf = n <= GEMV_MAX && want_q8(c, F) && c->gemvq[d->down_exps.type] && qh &&
                        c->gemvq[d->gate_exps.type] && d->gate_exps.type == d->up_exps.type;
        struct gemv_args ga = {
            .w = d->gate_exps.d, .w2 = d->up_exps.d, .x = c->h, .y = c->fg, .sel = c->sel,
            .yq = qf ? c->fq : 0, .yqd = qf ? c->fqd : 0, .cnt = qf ? c->fcnt : 0,
            .row_bytes = (int64_t)d->gate_exps.row_bytes,
            .expert_bytes = (int64_t)(d->gate_exps.row_bytes * (size_t)d->gate_exps.ne1), .n_rows = F,
            .k = (int)d->gate_exps.ne0, .x_stride = E, .y_stride = F, .x_div = K, .nz = n * K, .mode = 2,
        };
        TRY(launch_mm(c, &ga, &d->gate_exps, &d->up_exps, qh, e));
        if (n <= GEMV_MAX) {
            /* down projection of every slot with the weighted combine, added into x (mode 4) */
            struct gemv_args da = {
                .w = d->down_exps.d, .x = c->fg, .y = c->x, .sel = c->sel, .sw = c->sw,
                .row_bytes = (int64_t)d->down_exps.row_bytes,
                .expert_bytes = (int64_t)(d->down_exps.row_bytes * (size_t)d->down_exps.ne1), .n_rows = E,
                .k = (int)d->down_exps.ne0, .x_stride = F, .y_stride = E, .x_div = 1, .nz = n, .mode = 4,
                .nslot = K,
            };
            c->next_norm = nn;
            return launch_mm(c, &da, &d->down_exps, NULL, qf ? 2 : 0, e);
        }
        const bool qd = want_q8(c, F) && c->gemvq[d->down_exps.type];
        if (qd)
            TRY(quant(c, c->fg, n * K, F, F, e));
        TRY(mm(c, &d->down_exps, NULL, c->fg, F, 1, n * K, c->ey, E, 0, 0, c->sel, 0, qd, e));
        uint64_t x = c->x, ey = c->ey;
        int ee = E;
        void *cp[] = { &x, &ey, &sw, &ee, &kk };
        return hip_rt_launch(c->rt, c->k_combine, (unsigned)n, 1, 1, 256, cp, e);
    }
    const int F = ly->n_ff;
    const bool qf = n <= GEMV_MAX && want_q8(c, F) && c->gemvq[d->down.type];
    if (n <= GEMV_MAX && d->gate.type == d->up.type) {
        /* SwiGLU in the GEMV's epilogue, which also writes the q8 copy for the down GEMV (into fq: the
         * GEMV itself still reads xq) */
        struct gemv_args a = {
            .w = d->gate.d, .w2 = d->up.d, .x = c->h, .y = c->fg, .bias = d->b_gate, .bias2 = d->b_up,
            .yq = qf ? c->fq : 0, .yqd = qf ? c->fqd : 0, .cnt = qf ? c->fcnt : 0,
            .row_bytes = (int64_t)d->gate.row_bytes, .n_rows = F, .k = (int)d->gate.ne0, .x_stride = E,
            .y_stride = F, .x_div = 1, .nz = n, .mode = 2,
        };
        TRY(launch_mm(c, &a, &d->gate, &d->up, qh, e));
        c->next_norm = nn;
        return mm(c, &d->down, NULL, c->fg, F, 1, n, c->x, E, d->b_down, 0, 0, 1, qf ? 2 : 0, e);
    }
    TRY(mm(c, &d->gate, NULL, c->h, E, 1, n, c->fg, F, d->b_gate, 0, 0, 0, qh, e));
    TRY(mm(c, &d->up, NULL, c->h, E, 1, n, c->fu, F, d->b_up, 0, 0, 0, qh, e));
    TRY(ew(c, c->k_swiglu, c->fg, c->fu, n * F, e));
    if (qf)
        TRY(quant(c, c->fg, n, F, F, e));
    c->next_norm = nn;
    return mm(c, &d->down, NULL, c->fg, F, 1, n, c->x, E, d->b_down, 0, 0, 1, qf, e);
}

/* Whether a step's sublayer norms may be deferred to their GEMVs (kernels/gemv.cu norm_group_tail): one
 * token (the per-token GEMV, on q8 or f32 activations; the multi-token GEMV and the GEMM take no input
 * scale), not a hybrid, and rows of whole 32-groups with q8 activations (the tail writes both copies). */
static bool defer_ok(const struct hip_engine *c, int n)
{
    return c->defer_norm && n == 1 && !c->hy && want_q8(c, c->m->hp.n_embd);
}

/* ---- the layer operations model_forward walks (model/forward.h) ---- */

static int hop_embed(void *b, int n, struct err *e)
{
    struct hip_engine *c = b;
    int rc;
    {
        uint64_t tab = c->tok_embd.d, tok = c->io, x = c->x;
        int64_t rb = (int64_t)c->tok_embd.row_bytes;
        int type = c->tok_embd.type, ne = c->m->hp.n_embd;
        void *p[] = { &tab, &rb, &type, &tok, &x, &ne };
        TRY(hip_rt_launch(c->rt, c->k_embed, (unsigned)n, cdiv((size_t)c->m->hp.n_embd, 256), 1, 256, p, e));
    }
    c->h_def = false;
    return 0;
}

/* the next sublayer's norm (this layer's FFN) deferred by the residual GEMV; a norm without weight keeps
 * rms_norm */
static int hop_attn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    const struct dlayer *d = &c->L[s->il];
    return attn_layer(c, s->ly, d, n, c->step_dn ? d->ffn_norm : 0, e);
}

static int hop_hybrid(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    return hip_hybrid_layer(c->hy, s->ly, s->il, n, e);
}

/* the next sublayer's norm: the next layer's attention, or the output (rows = tokens only when every
 * token has logits). Hybrids add the shared expert after the FFN. */
static int hop_ffn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    struct hip_engine *c = b;
    const struct dlayer *d = &c->L[s->il];
    const uint64_t an = !c->step_dn         ? 0
                        : s->next_il >= 0   ? c->L[s->next_il].attn_norm
                        : c->step_n_out == n ? c->output_norm
                                             : 0;
    int rc;
    TRY(ffn_layer(c, s->ly, d, n, an, e));
    if (c->hy)
        TRY(hip_hybrid_shexp(c->hy, s->ly, s->il, n, e));
    return 0;
}

static int hop_output(void *b, int n, int n_out, struct err *e)
{
    struct hip_engine *c = b;
    const int E = c->m->hp.n_embd, V = c->m->hp.n_vocab, B = c->p.n_batch;
    int rc;
    (void)n;
    const uint64_t rows = c->io + 12u * (uint64_t)B;
    const int qh = c->h_def ? 3 : want_q8(c, E); /* deferred: n_out == n, so rows[r] == r */
    if (!c->h_def)
        TRY(rms(c, c->h, c->x, c->output_norm, rows, n_out, E, E, E, qh, e));
    TRY(mm(c, &c->output, NULL, c->h, E, 1, n_out, c->logits, V, c->output_bias, 0, 0, 0, qh, e));
    if (c->step_greedy) {
        /* AMAX_SLICES blocks a row; the last one of a row picks among the slices */
        uint64_t lg = c->logits, am = c->amax, pv = c->amx, pi = pv + 4u * (uint64_t)B * AMAX_SLICES;
        uint64_t cn = pi + 4u * (uint64_t)B * AMAX_SLICES;
        int vv = V;
        void *p[] = { &lg, &vv, &vv, &am, &pv, &pi, &cn };
        if (c->amax_split)
            TRY(hip_rt_launch(c->rt, c->k_argmax, AMAX_SLICES, (unsigned)n_out, 1, 256, p, e));
        else
            TRY(hip_rt_launch(c->rt, c->k_argmax1, (unsigned)n_out, 1, 1, 1024, p, e));
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
    return model_forward(c->m, &hip_layer_ops, c, n, n_out, e);
}

static int validate(struct hip_engine *c, const struct engine_tok *toks, int n, struct err *e)
{
    return backend_check_batch(toks, n, c->p.n_batch, c->p.n_seq, c->p.n_ctx, c->m->hp.n_vocab, c->len,
                              c->seq_next, e);
}

/* Attention splits of a decode step's grid from its longest cache (kernels/attn.cu takes one split per
 * 64 cached positions, at most the grid's): 1 up to 64 positions — no partials, no merge launch —, 4 up
 * to 256, else DEC_SPLIT. A grid of DEC_SPLIT splits for short caches launched blocks that only
 * returned, and a merge that did nothing; three buckets keep the captured graphs few. */
static int dec_splits(int max_kv)
{
    return max_kv <= 64 ? 1 : max_kv <= 256 ? 4 : DEC_SPLIT;
}

/* engine_decode_topk's request and answer (run). */
struct topk_io {
    const int32_t *k; /* [n_out] */
    int32_t *ids;     /* [n_out][ENGINE_CAND_CAP] */
    float *vals;      /* [n_out][ENGINE_CAND_CAP] */
    int32_t *n_cands; /* [n_out] */
};

/* After the step's logits: topk_cut on the rows asking for it, their candidates to the host, then the
 * copies of the whole rows of the others (and of any the cut did not serve), which run()'s sync ends. */
static int topk_finish(struct hip_engine *c, int n_out, const struct topk_io *tk, float *logits, struct err *e)
{
    int rc;
    const int B = c->p.n_batch, V = c->m->hp.n_vocab, cap = ENGINE_CAND_CAP;
    int32_t *kh = c->topk_h, *cnt = kh + B, *ids = kh + 2 * B;
    float *vals = (float *)(kh + 2 * B + (size_t)B * cap);
    const uint64_t dk = c->topk, dcnt = dk + 4u * (uint64_t)B, dids = dk + 8u * (uint64_t)B;
    const uint64_t dvals = dids + 4u * (uint64_t)B * (uint64_t)cap;
    memcpy(kh, tk->k, (size_t)n_out * 4);
    TRY(hip_rt_h2d(c->rt, dk, kh, (size_t)n_out * 4, e));
    uint64_t lg = c->logits;
    int vv = V, cp = cap;
    void *p[] = { &lg, &vv, &vv, (void *)&dk, &cp, (void *)&dcnt, (void *)&dids, (void *)&dvals };
    TRY(hip_rt_launch(c->rt, c->k_topk, (unsigned)n_out, 1, 1, 1024, p, e));
    TRY(hip_rt_d2h(c->rt, cnt, dcnt, (size_t)n_out * 4, e));
    TRY(hip_rt_d2h(c->rt, ids, dids, (size_t)n_out * (size_t)cap * 4, e));
    TRY(hip_rt_d2h(c->rt, vals, dvals, (size_t)n_out * (size_t)cap * 4, e));
    TRY(hip_rt_sync(c->rt, e));
    for (int r = 0; r < n_out; r++) {
        const size_t o = (size_t)r * (size_t)cap;
        tk->n_cands[r] = tk->k[r] > 0 && cnt[r] >= tk->k[r] && cnt[r] <= cap ? cnt[r] : -1;
        if (tk->n_cands[r] >= 0) {
            memcpy(tk->ids + o, ids + o, (size_t)cnt[r] * 4);
            memcpy(tk->vals + o, vals + o, (size_t)cnt[r] * 4);
            continue;
        }
        TRY(hip_rt_d2h(c->rt, logits + (size_t)r * (size_t)V, c->logits + 4u * (uint64_t)r * (uint64_t)V,
                       (size_t)V * 4, e));
    }
    return 0;
}

static int run(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, int32_t *greedy_out,
               const struct topk_io *tk, struct err *e)
{
    int rc = validate(c, toks, n, e);
    if (!rc)
        rc = hip_rt_bind(c->rt, e);
    if (rc)
        return rc;
    const struct hparams *hp = &c->m->hp;
    const int B = c->p.n_batch;
    int32_t *ih = c->io_h;
    float *csh = (float *)(ih + 4 * B);
    int n_out = 0;
    c->one_seq = true;
    for (int t = 0; t < n; t++) {
        c->one_seq = c->one_seq && toks[t].seq == toks[0].seq;
        ih[t] = toks[t].token;
        ih[B + t] = toks[t].pos;
        ih[2 * B + t] = toks[t].seq;
        if (toks[t].logits)
            ih[3 * B + n_out++] = t;
        ops_rope_cache(csh + (size_t)t * hp->n_rot, toks[t].pos, hp->n_rot, hp->freq_base, c->m->rope_freqs.data,
                       hp->freq_scale, hp->ext_factor, hp->attn_factor, hp->corr_dims);
    }
    if (n_out && (!logits || (tk && (!tk->k || !tk->ids || !tk->vals || !tk->n_cands))) && !greedy_out)
        return err_set(e, ERR_INVALID, "engine_decode: %d rows asked for logits but the buffer is NULL", n_out);
    if (c->hy)
        TRY(hip_hybrid_prepare(c->hy, toks, n, csh, e));
    TRY(hip_rt_h2d(c->rt, c->io, ih, 4 * (size_t)B * 4, e));
    TRY(hip_rt_h2d(c->rt, c->io + 16u * (uint64_t)B, csh, (size_t)n * (size_t)hp->n_rot * 4, e));
    const bool greedy = greedy_out != NULL;
    int max_kv = 0;
    for (int t = 0; t < n; t++)
        max_kv = toks[t].pos + 1 > max_kv ? toks[t].pos + 1 : max_kv;
    c->dec_ns = c->split_buckets ? dec_splits(max_kv) : DEC_SPLIT;
    /* small batches (decode) are replayed from graphs; prefill shapes vary too much to keep */
    if (c->graphs && n <= GEMV_MAX) {
        hip_graph g = NULL;
        for (int i = 0; i < c->n_gs; i++)
            if (c->gs[i].n == n && c->gs[i].n_out == n_out && c->gs[i].greedy == greedy && c->gs[i].ns == c->dec_ns)
                g = c->gs[i].g;
        if (!g) {
            TRY(hip_rt_capture_begin(c->rt, e));
            rc = enqueue(c, n, n_out, greedy, e);
            hip_graph ng = NULL;
            struct err e2;
            int rc2 = hip_rt_capture_end(c->rt, &ng, rc ? &e2 : e);
            if (rc)
                return rc;
            if (rc2)
                return rc2;
            if (c->n_gs == N_GRAPHS) {
                hip_rt_graph_free(c->rt, c->gs[0].g);
                memmove(&c->gs[0], &c->gs[1], sizeof c->gs[0] * (N_GRAPHS - 1));
                c->n_gs--;
            }
            c->gs[c->n_gs++] = (struct graph_slot){ .n = n, .n_out = n_out, .greedy = greedy, .ns = c->dec_ns, .g = ng };
            g = ng;
        }
        TRY(hip_rt_graph_launch(c->rt, g, e));
    } else {
        TRY(enqueue(c, n, n_out, greedy, e));
    }
    if (n_out && greedy)
        TRY(hip_rt_d2h(c->rt, c->amax_h, c->amax, (size_t)n_out * 4, e));
    else if (n_out && tk)
        TRY(topk_finish(c, n_out, tk, logits, e));
    else if (n_out)
        TRY(hip_rt_d2h(c->rt, logits, c->logits, (size_t)n_out * (size_t)hp->n_vocab * 4, e));
    TRY(hip_rt_sync(c->rt, e));
    if (n_out && greedy)
        memcpy(greedy_out, c->amax_h, (size_t)n_out * 4);
    for (int s = 0; s < c->p.n_seq; s++)
        c->len[s] = c->seq_next[s];
    return 0;
}

int hip_engine_decode(struct hip_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return run(c, toks, n, logits, NULL, NULL, e);
}

static int hip_engine_decode_topk(struct hip_engine *c, const struct engine_tok *toks, int n, const int32_t *k, int32_t *ids,
                           float *vals, int32_t *n_cands, float *logits, struct err *e)
{
    const struct topk_io tk = { k, ids, vals, n_cands };
    return run(c, toks, n, logits, NULL, &tk, e);
}

int hip_engine_decode_greedy(struct hip_engine *c, const struct engine_tok *toks, int n, int32_t *tokens,
                             struct err *e)
{
    return run(c, toks, n, NULL, tokens, NULL, e);
}

static int hip_engine_host_alloc(struct hip_engine *c, size_t n, void **out, struct err *e)
{
    int rc = hip_rt_bind(c->rt, e);
    return rc ? rc : hip_rt_host_alloc(c->rt, n, out, e);
}

static void hip_engine_host_free(struct hip_engine *c, void *p)
{
    if (p && !hip_rt_bind(c->rt, NULL))
        hip_rt_host_free(c->rt, p);
}

void hip_engine_seq_truncate(struct hip_engine *c, int seq, int pos)
{
    if (c->hy) {
        hip_hybrid_truncate(c->hy, c->len, seq, pos, NULL);
        return;
    }
    if (seq < 0 || seq >= c->p.n_seq || pos < 0)
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
    if (seq < 0 || seq >= c->p.n_seq)
        return 0;
    return c->len[seq];
}

int hip_engine_seq_copy(struct hip_engine *c, int src, int dst, int n, struct err *e)
{
    if (src < 0 || src >= c->p.n_seq || dst < 0 || dst >= c->p.n_seq)
        return err_set(e, ERR_INVALID, "engine_seq_copy: sequence %d or %d outside [0, %d)", src, dst, c->p.n_seq);
    if (n < 0 || n > c->len[src])
        return err_set(e, ERR_RANGE, "engine_seq_copy: %d positions but sequence %d holds %d", n, src, c->len[src]);
    int brc = hip_rt_bind(c->rt, e);
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
    for (int il = 0; il < c->m->hp.n_layer; il++) {
        const struct dlayer *d = &c->L[il];
        if (!d->kc)
            continue;
        const size_t row = (size_t)c->m->layers[il].n_head_kv * (size_t)c->m->hp.head_dim * c->kv_elt;
        const size_t seqb = (size_t)c->p.n_ctx * row;
        if (n) {
            TRY(hip_rt_d2d(c->rt, d->kc + dst * seqb, d->kc + src * seqb, (size_t)n * row, e));
            TRY(hip_rt_d2d(c->rt, d->vc + dst * seqb, d->vc + src * seqb, (size_t)n * row, e));
        }
    }
    TRY(hip_rt_sync(c->rt, e));
    c->len[dst] = n;
    return 0;
}

/* ---- what the hybrid layers borrow (hip_engine_int.h) ---- */

void hipe_lend(const struct hip_engine *c, struct hip_lend *out)
{
    *out = (struct hip_lend){
        .rt = c->rt, .warp = c->warp, .n_ctx = c->p.n_ctx, .n_batch = c->p.n_batch, .n_seq = c->p.n_seq,
        .knobs = &c->k, .W = c->W, .gemv_max = GEMV_MAX, .split_tokens = SPLIT_TOKENS, .dec_split = DEC_SPLIT, .kv_elt = c->kv_elt, .x = c->x, .h = c->h,
        .qkv = c->qkv, .o = c->o, .part = c->part, .io = c->io, .xq = c->xq, .xqd = c->xqd,
    };
}

void hipe_layer_of(const struct hip_engine *c, int il, struct hipe_layer *out)
{
    const struct dlayer *d = &c->L[il];
    *out = (struct hipe_layer){ .wq = &d->wq, .wk = &d->wk, .wv = &d->wv, .wo = &d->wo, .attn_norm = d->attn_norm,
                                .q_norm = d->q_norm, .k_norm = d->k_norm, .kc = d->kc, .vc = d->vc };
}

int hipe_dalloc(struct hip_engine *c, size_t n, uint64_t *out, struct err *e) { return dalloc(c, n, out, e); }

int hipe_up_wt(struct hip_engine *c, struct stager *s, const struct wt *w, struct dw *d, struct err *e)
{
    return up_wt(c, s, w, d, e);
}

int hipe_up_vec(struct hip_engine *c, struct stager *s, const struct vec *v, uint64_t *d, struct err *e)
{
    return up_vec(c, s, v, d, e);
}

int hipe_mm(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int x_div,
            int nz, uint64_t y, int y_stride, uint64_t bias, uint64_t bias2, uint64_t sel, int mode, int q,
            struct err *e)
{
    return mm(c, w, w2, x, x_stride, x_div, nz, y, y_stride, bias, bias2, sel, mode, q, e);
}

int hipe_mm_dual(struct hip_engine *c, const struct dw *w, const struct dw *w2, uint64_t x, int x_stride, int nz,
                 uint64_t y, uint64_t y2, int y_stride, int q, struct err *e)
{
    return mm_dual(c, w, w2, x, x_stride, nz, y, y2, y_stride, 0, 0, q, e);
}

int hipe_rms(struct hip_engine *c, uint64_t y, uint64_t x, uint64_t w, int nr, int n, bool q, struct err *e)
{
    return rms(c, y, x, w, 0, nr, n, n, n, q, e);
}

int hipe_quant(struct hip_engine *c, uint64_t x, int rows, int k, int x_stride, struct err *e)
{
    return quant(c, x, rows, k, x_stride, e);
}

bool hipe_want_q8(const struct hip_engine *c, int k, int t)
{
    return want_q8(c, k) && (t < 0 || c->gemvq[t]);
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
static int hb_decode_topk(void *b, const struct engine_tok *toks, int n, const int32_t *k, int32_t *ids,
                          float *vals, int32_t *n_cands, float *logits, struct err *e)
{
    return hip_engine_decode_topk(b, toks, n, k, ids, vals, n_cands, logits, e);
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

const struct backend_ops hip_backend = {
    .name = "hip",
    .create = hb_create,
    .free = hb_free,
    .n_ctx = hb_n_ctx,
    .decode = hb_decode,
    .decode_topk = hb_decode_topk,
    .host_alloc = hb_host_alloc,
    .host_free = hb_host_free,
    .seq_len = hb_seq_len,
    .seq_restore = hb_seq_restore,
    .seq_copy = hb_seq_copy,
    .seq_snapshot = hb_seq_snapshot,
    .seq_restorable = hb_seq_restorable,
    .describe = hb_describe,
};
