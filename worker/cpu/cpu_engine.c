/* cpu_engine.c — the CPU backend (`cpu_backend`, backend/backend.h): the
 * layer-kind operations of the shared layer loop (model/model_forward.h) and the
 * engine around it, for every architecture of arch.c.
 *
 * One engine_decode runs a batch that may mix sequences: every weight
 * product is one matmul over all batch tokens (so prefill chunks and decode
 * tokens share the weight reads), attention runs per token over its own
 * sequence's cache (threaded over blocks of consecutive tokens × KV head, so
 * a block's queries share each K/V row read), and only the rows that asked
 * for logits get the final norm and the output matmul. Weights with a packed
 * form are repacked once at engine_create for multi-token products. All
 * scratch is sized at engine_create; decode does no allocation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/clock.h"
#include "cpu_engine.h"
#include "../backend/backend.h"
#include "../model/model_forward.h"
#include "cpu_hc.h"
#include "cpu_hybrid.h"
#include "kv_cache.h"
#include "../num/matmul.h"
#include "../model/model.h"
#include "../num/ops.h"

struct cpu_engine {
    const struct model *m;
    struct engine_params p;   /* resolved: n_ctx, n_batch, n_threads filled in */
    struct tpool *tp;
    struct matmul_scratch ms;
    struct kv_cache kv;
    /* weights repacked for the row-interleaved kernels (matmul_pack), found by their data pointer */
    const void **pk_keys;     /* [pk_cap] open addressing, NULL = empty */
    struct matmul_packed **pk_vals; /* [pk_cap] */
    size_t pk_cap;
    struct matmul_arena pk_arena; /* the packed matrices' memory (huge pages where allowed) */
    float *f16tab;            /* [65536] f16 → f32, for the f16 cache */
    struct engine_load ld;    /* what create took and allocated (cpu_load_info) */

    /* per-batch scratch, B = n_batch rows */
    int xw;                   /* floats of one token's residual: n_embd, or hc·n_embd with hyper-connections */
    float *x;                 /* [B][xw] residual stream (qwen4exp: hc streams, stream-major) */
    float *xo;                /* [B][xw] the output rows' residuals gathered for the output HC mix */
    float *h;                 /* [B][n_embd] normed input of a block */
    float *q;                 /* [B][n_head_max·hd] */
    float *k;                 /* [B][n_head_kv_max·hd] */
    float *v;                 /* [B][n_head_kv_max·hd] */
    float *qkv;               /* [B][(n_head_max + 2·n_head_kv_max)·hd] fused projection output */
    float *o;                 /* [B][n_head_max·hd] attention output */
    float *a;                 /* [B][n_embd] block output before the residual add */
    float *fg;                /* [B][n_ff_max or n_ff_exp] gate */
    float *fu;                /* [B][n_ff_max or n_ff_exp] up */
    float *cs;                /* [B][n_rot] rope cos/sin per token */
    float *att;               /* [n_threads][att_per] attention scores */
    size_t att_per;           /* 8 · n_ctx: scores of up to 8 queries sharing a KV head */
    void *gact;               /* [4][gact_slot] quantized activations for mm_group (64-byte aligned) */
    size_t gact_slot;         /* bytes per slot: 2 bytes × the widest input row, rounded to 64 */
    int *blk0;                /* [B] first batch row of each attention block */
    int *blkn;                /* [B] rows in it (consecutive positions of one sequence) */
    /* MoE */
    float *rl;                /* [B][n_expert] router logits → probabilities */
    int *sel;                 /* [B][n_expert_used] selected experts */
    float *sw;                /* [B][n_expert_used] their weights */
    float *ey;                /* [B][n_expert_used][n_embd] expert outputs, in selection order */
    float *ex;                /* [B][n_embd] gathered inputs of one expert */
    int *etok;                /* [B] (token·n_expert_used + k) slots routed to one expert */
    /* batch bookkeeping */
    int *seq_next;            /* [n_seq] next position per sequence during validation */
    int *out_rows;            /* [B] batch rows that asked for logits */
    /* the step in progress (cpu_engine_decode → the layer ops) */
    const struct engine_tok *toks; /* [n] the batch */
    float *logits;            /* [n_out][n_vocab] the caller's rows */
    struct cpu_hybrid *hy;        /* GDN / gated-attention layers and their state (qwen35*), else NULL */
    struct cpu_hc *hc;        /* hyper-connection mixes (qwen4exp), else NULL */
};

static void cpu_engine_free(struct cpu_engine *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->pk_cap; i++)
        matmul_packed_free(c->pk_vals[i]);
    free(c->pk_keys);
    free(c->pk_vals);
    matmul_arena_release(&c->pk_arena);
    tpool_destroy(c->tp);
    matmul_scratch_free(&c->ms);
    kv_free(&c->kv);
    cpu_hybrid_free(c->hy);
    cpu_hc_free(c->hc);
    void *bufs[] = { c->f16tab, c->x, c->xo, c->h, c->q, c->k, c->v, c->qkv, c->o, c->a, c->fg, c->fu, c->cs, c->att,
                     c->rl, c->sel, c->sw, c->ey, c->ex, c->etok, c->seq_next, c->out_rows, c->blk0, c->blkn, c->gact };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c);
}

static size_t pk_slot(const struct cpu_engine *c, const void *key)
{
    size_t h = ((uintptr_t)key >> 5) * 0x9E3779B97F4A7C15ull;
    return h & (c->pk_cap - 1);
}

static const struct matmul_packed *pk_get(const struct cpu_engine *c, const void *key)
{
    if (!c->pk_cap)
        return NULL;
    for (size_t i = pk_slot(c, key);; i = (i + 1) & (c->pk_cap - 1)) {
        if (c->pk_keys[i] == key)
            return c->pk_vals[i];
        if (!c->pk_keys[i])
            return NULL;
    }
}

/* Repack one matrix (once per data pointer); types without a packed form keep the file layout.
 */
static void pk_add(struct cpu_engine *c, enum qtype t, const void *W, int64_t n_in, int64_t n_out)
{
    if (!W || pk_get(c, W))
        return;
    struct matmul_packed *p = matmul_pack(t, W, n_in, n_out, &c->pk_arena);
    if (!p)
        return;
    size_t i = pk_slot(c, W);
    while (c->pk_keys[i])
        i = (i + 1) & (c->pk_cap - 1);
    c->pk_keys[i] = W;
    c->pk_vals[i] = p;
}

/* Pack a weight's matrices, or with sizes != NULL only add up their packed bytes
 * (an upper bound: a tensor shared by two fields is counted twice). */
static void pk_add_wt(struct cpu_engine *c, const struct wt *w, size_t *sizes)
{
    if (!w->data)
        return;
    for (int64_t e = 0; e < w->ne[2]; e++) { /* 3-D expert tensors: one matrix per expert */
        if (sizes)
            *sizes += matmul_pack_size(w->type, w->ne[0], w->ne[1]);
        else
            pk_add(c, w->type, (const char *)w->data + (size_t)e * (size_t)w->ne[1] * w->row_bytes, w->ne[0],
                   w->ne[1]);
    }
}

#define LAYER_MATRICES 28

/* The matrices of a layer that products multiply through (absent ones have no data): dense and MoE
 * FFNs, attention, the hybrids' (cpu_hybrid.c multiplies through mm_wt) and qwen4exp's HC mixes,
 * indexer and PLE projections (cpu_hc.c, cpu_hybrid.c). */
static void layer_matrices(const struct layer *ly, const struct wt *ws[LAYER_MATRICES])
{
    const struct wt *all[LAYER_MATRICES] = { &ly->wq, &ly->wk, &ly->wv, &ly->wqkv, &ly->wo, &ly->ffn_gate,
                                             &ly->ffn_up, &ly->ffn_down, &ly->gate_exps, &ly->up_exps,
                                             &ly->down_exps, &ly->ssm_qkv, &ly->ssm_z, &ly->ssm_out,
                                             &ly->gate_shexp, &ly->up_shexp, &ly->down_shexp,
                                             &ly->ssm_beta, &ly->ssm_alpha, &ly->hc_attn.down, &ly->hc_attn.up,
                                             &ly->hc_attn.inject, &ly->hc_ffn.down, &ly->hc_ffn.up,
                                             &ly->hc_ffn.inject, &ly->idx_q, &ly->idx_k, &ly->ple_key };
    memcpy(ws, all, sizeof all);
}

/* Bytes of all layer matrices and the output (an upper bound of what packing copies). */
static uint64_t matrix_bytes(const struct model *m)
{
    uint64_t b = (uint64_t)m->output.row_bytes * (uint64_t)m->output.ne[1];
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct wt *ws[LAYER_MATRICES];
        layer_matrices(&m->layers[il], ws);
        for (int i = 0; i < LAYER_MATRICES; i++)
            if (ws[i]->data)
                b += (uint64_t)ws[i]->row_bytes * (uint64_t)ws[i]->ne[1] * (uint64_t)ws[i]->ne[2];
    }
    return b;
}

static int pack_weights(struct cpu_engine *c, struct err *e)
{
    const struct model *m = c->m;
    /* Single-token decode reads the file layout for types whose packed form is not the faster one there
     * (matmul_packed_one_token), so packed copies add to the resident set:
     * only pack when that stays a modest part of the machine's memory. */
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && matrix_bytes(m) > (uint64_t)pages * (uint64_t)psz / 4)
        return 0;
    size_t n = 1;
    for (int il = 0; il < m->hp.n_layer; il++)
        n += LAYER_MATRICES + 1 + 3 * (size_t)(m->hp.n_expert > 0 ? m->hp.n_expert : 0);
    c->pk_cap = 16;
    while (c->pk_cap < 2 * n)
        c->pk_cap *= 2;
    c->pk_keys = calloc(c->pk_cap, sizeof *c->pk_keys);
    c->pk_vals = calloc(c->pk_cap, sizeof *c->pk_vals);
    if (!c->pk_keys || !c->pk_vals)
        return err_set(e, ERR_NOMEM, "engine: out of memory for the packed-weight table");
    size_t bytes = 0;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then the matrices into one arena */
        if (pass == 1) {
            matmul_arena_reserve(&c->pk_arena, bytes);
            c->ld.weights += bytes; /* the repacked copies, besides the mapped file */
        }
        for (int il = 0; il < m->hp.n_layer; il++) {
            const struct wt *ws[LAYER_MATRICES];
            layer_matrices(&m->layers[il], ws);
            for (int i = 0; i < LAYER_MATRICES; i++)
                pk_add_wt(c, ws[i], pass == 0 ? &bytes : NULL);
        }
        pk_add_wt(c, &m->output, pass == 0 ? &bytes : NULL);
        pk_add_wt(c, &m->output_hc.down, pass == 0 ? &bytes : NULL);
        pk_add_wt(c, &m->output_hc.up, pass == 0 ? &bytes : NULL);
    }
    return 0;
}

static void *alloc_f(size_t n, bool *ok)
{
    void *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *ok = false;
    return p;
}

/* alloc_f, counted as step scratch (cpu_load_info) */
static void *alloc_fc(struct cpu_engine *c, size_t n, bool *ok)
{
    c->ld.scratch += (uint64_t)(n ? n : 1) * sizeof(float);
    return alloc_f(n, ok);
}

static void mm_wt(void *c, const struct wt *w, const float *X, int n, float *Y);

static int cpu_engine_create(struct cpu_engine **out, const struct model *m, const struct engine_params *pin,
                  struct err *e)
{
    *out = NULL;
    struct engine_params p;
    int rc0 = backend_params_resolve(m, pin, &p, e);
    if (rc0)
        return rc0;
    const struct hparams *hp = &m->hp;
    if (p.n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = nc > 0 ? (int)nc : 1;
    }
    if (p.n_threads > 1024)
        return err_set(e, ERR_RANGE, "engine: n_threads %d too large", p.n_threads);

    struct cpu_engine *c = calloc(1, sizeof *c);
    if (!c)
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    c->m = m;
    c->p = p;
    c->tp = tpool_create(p.n_threads);
    if (!c->tp) {
        cpu_engine_free(c);
        return err_set(e, ERR_NOMEM, "engine: cannot start %d threads", p.n_threads);
    }
    c->p.n_threads = tpool_size(c->tp);
    uint64_t t0 = clock_now_ns();
    if (!p.no_pack) {
        int prc = pack_weights(c, e);
        if (prc) {
            cpu_engine_free(c);
            return prc;
        }
    }
    /* the weights stay in the mapping; repacking them is this backend's upload */
    const uint64_t t1 = clock_now_ns();
    c->ld.t_upload = (double)(t1 - t0) / 1e9;
    c->ld.weights += model_info(m)->n_bytes;
    t0 = t1;

    int nkvl = m->n_kv_layers;
    int *dk = calloc((size_t)nkvl + 1, sizeof(int));
    if (!dk) {
        cpu_engine_free(c);
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    }
    for (int il = 0; il < hp->n_layer; il++)
        if (m->layers[il].kv_index >= 0)
            dk[m->layers[il].kv_index] = m->layers[il].n_head_kv * hp->head_dim;
    int rc = kv_init(&c->kv, nkvl, dk, dk, p.n_seq, p.n_ctx, !p.kv_f32, e);
    free(dk);
    if (rc) {
        cpu_engine_free(c);
        return rc;
    }

    const size_t B = (size_t)p.n_batch, E = (size_t)hp->n_embd, hd = (size_t)hp->head_dim;
    const size_t nq = (size_t)hp->n_head_max * hd, nkv = (size_t)hp->n_head_kv_max * hd;
    size_t nff = (size_t)hp->n_ff_max;
    if ((size_t)hp->n_ff_exp > nff)
        nff = (size_t)hp->n_ff_exp;
    const size_t K = (size_t)hp->n_expert_used, X = (size_t)hp->n_expert;
    bool ok = true;
    if (!p.kv_f32) {
        c->f16tab = alloc_fc(c, 65536, &ok);
        if (ok)
            ops_f16_table_init(c->f16tab);
    }
    c->xw = hp->hc > 1 ? hp->hc * hp->n_embd : hp->n_embd;
    c->x = alloc_fc(c, B * (size_t)c->xw, &ok);
    if (hp->hc > 1)
        c->xo = alloc_fc(c, B * (size_t)c->xw, &ok);
    c->h = alloc_fc(c, B * E, &ok);
    c->q = alloc_fc(c, B * nq, &ok);
    c->k = alloc_fc(c, B * nkv, &ok);
    c->v = alloc_fc(c, B * nkv, &ok);
    c->qkv = alloc_fc(c, B * (nq + 2 * nkv), &ok);
    c->o = alloc_fc(c, B * nq, &ok);
    c->a = alloc_fc(c, B * E, &ok);
    c->fg = alloc_fc(c, B * nff, &ok);
    c->fu = alloc_fc(c, B * nff, &ok);
    c->cs = alloc_fc(c, B * (size_t)hp->n_rot, &ok);
    c->att_per = 8 * (size_t)p.n_ctx;
    c->att = alloc_fc(c, (size_t)c->p.n_threads * c->att_per, &ok);
    if (X) {
        c->rl = alloc_fc(c, B * X, &ok);
        c->sel = calloc(B * K, sizeof(int));
        c->sw = alloc_fc(c, B * K, &ok);
        c->ey = alloc_fc(c, B * K * E, &ok);
        c->ex = alloc_fc(c, B * E, &ok);
        c->etok = calloc(B * K, sizeof(int));
        if (!c->sel || !c->etok)
            ok = false;
    }
    c->seq_next = calloc((size_t)p.n_seq, sizeof(int));
    c->out_rows = calloc(B, sizeof(int));
    size_t widest = (size_t)c->xw > nq ? (size_t)c->xw : nq;
    if (nff > widest)
        widest = nff;
    c->gact_slot = (2 * widest + 1024 + 63) & ~(size_t)63; /* any vec_dot type is <= 2 bytes/element + block headers */
    c->gact = aligned_alloc(64, 4 * c->gact_slot);
    c->ld.scratch += 4 * c->gact_slot;
    /* matmul's activation scratch at its largest (B rows of the widest input, any activation type, plus the
     * packed kernels' per-block sums), so that it never grows during decode */
    c->ms.cap = (B * (c->gact_slot + widest / 4 + 64) + 127) & ~(size_t)63;
    c->ms.buf = aligned_alloc(64, c->ms.cap);
    c->ld.scratch += c->ms.cap;
    if (!c->gact || !c->ms.buf)
        ok = false;
    c->blk0 = calloc(B, sizeof(int));
    c->blkn = calloc(B, sizeof(int));
    if (!ok || !c->seq_next || !c->out_rows || !c->blk0 || !c->blkn) {
        cpu_engine_free(c);
        return err_set(e, ERR_NOMEM, "engine: out of memory for scratch (n_batch %d, n_ctx %d)", p.n_batch, p.n_ctx);
    }
    if (m->arch->hybrid && (rc = cpu_hybrid_create(&c->hy, m, &c->p, c->tp, mm_wt, c, e))) {
        cpu_engine_free(c);
        return rc;
    }
    if (hp->hc > 1) {
        if ((rc = cpu_hc_create(&c->hc, m, p.n_batch, c->tp, mm_wt, c, e))) {
            cpu_engine_free(c);
            return rc;
        }
        c->ld.scratch += cpu_hc_bytes(c->hc);
    }
    c->ld.kv = c->kv.bytes;
    if (c->hy) {
        uint64_t hs = 0;
        cpu_hybrid_mem(c->hy, &c->ld.state, &c->ld.state_per_seq, &c->ld.n_snap, &hs);
        c->ld.scratch += hs;
        /* the snapshots' budget: allocated as they are first taken (cpu_hybrid_seq_snapshot) */
        c->ld.snap = (uint64_t)p.n_seq * (uint64_t)c->ld.n_snap * c->ld.state_per_seq;
    }
    c->ld.t_alloc = (double)(clock_now_ns() - t0) / 1e9;
    *out = c;
    return 0;
}

/* ---- blocks ---- */

/* Y = W·X for the matrix at W (a weight or an expert slice): the packed form when there is one. */
static void mm_at(struct cpu_engine *c, enum qtype t, const void *W, int64_t n_in, int64_t n_out, const float *X,
                  int n, float *Y)
{
    /* one token: the file layout's single-row kernels unless the packed form is the faster there too */
    const struct matmul_packed *pk = pk_get(c, W);
    if (n == 1 && !matmul_packed_one_token(pk))
        pk = NULL;
    if (pk)
        matmul_packed_run(c->tp, &c->ms, pk, X, n, Y);
    else
        matmul(c->tp, &c->ms, t, W, n_in, n_out, X, n, Y);
}

static void mm(struct cpu_engine *c, const struct wt *w, const float *X, int n, float *Y)
{
    mm_at(c, w->type, w->data, w->ne[0], w->ne[1], X, n, Y);
}

/* mm for cpu_hybrid.c (packed weights included) */
static void mm_wt(void *c, const struct wt *w, const float *X, int n, float *Y) { mm(c, w, X, n, Y); }

/* Several weight products that could run at once (Q/K/V, gate/up). A single-token batch (decode)
 * runs them as one parallel loop over the rows of all of them, so the pool wakes once instead of once
 * per matrix; each row is the same vec_dot matmul() uses for one token, so results are identical.
 * Larger batches use matmul() per product (its multi-token kernels win there). */
struct mm_item {
    const struct wt *w;
    const void *W;       /* weight data (an expert slice, or w->data) */
    int64_t n_in, n_out;
    const float *X;      /* [n_in] */
    float *Y;            /* [n_out] */
};

struct mmg_job {
    const struct mm_item *it;
    const void *act[4];  /* activation row in each item's vec_dot type */
    int64_t chunk[4];    /* rows per task */
    int64_t first[5];    /* first task index of each item */
    int n;
};

static void mmg_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct mmg_job *j = ctx;
    int k = 0;
    while (i >= j->first[k + 1])
        k++;
    const struct mm_item *it = &j->it[k];
    int64_t r0 = (i - j->first[k]) * j->chunk[k], r1 = r0 + j->chunk[k];
    if (r1 > it->n_out)
        r1 = it->n_out;
    const size_t rb = it->w->row_bytes;
    for (int64_t r = r0; r < r1; r++)
        it->Y[r] = vec_dot(it->w->type, it->n_in, (const char *)it->W + (size_t)r * rb, j->act[k]);
}

static void mm_group(struct cpu_engine *c, int n_tok, const struct mm_item *it, int n)
{
    if (n_tok != 1 || n > 4) {
        for (int k = 0; k < n; k++)
            mm_at(c, it[k].w->type, it[k].W, it[k].n_in, it[k].n_out, it[k].X, n_tok, it[k].Y);
        return;
    }
    /* all packed forms that are the faster for one token: one dispatch through them */
    const struct matmul_packed *pk[4];
    int n_pk = 0;
    for (int k = 0; k < n; k++)
        if (matmul_packed_one_token(pk[k] = pk_get(c, it[k].W)))
            n_pk++;
    if (n_pk == n) {
        const float *xs[4];
        float *ys[4];
        for (int k = 0; k < n; k++) {
            xs[k] = it[k].X;
            ys[k] = it[k].Y;
        }
        matmul_packed_run_group(c->tp, &c->ms, pk, xs, ys, n);
        return;
    }
    struct mmg_job j = { .it = it, .n = n };
    const int nth = tpool_size(c->tp);
    j.first[0] = 0;
    for (int k = 0; k < n; k++) {
        const enum qtype vd = qtype_get((uint32_t)it[k].w->type)->vec_dot;
        j.act[k] = NULL;
        if (vd == QT_F32) {
            j.act[k] = it[k].X;
        } else {
            for (int p = 0; p < k; p++) /* same input, same activation type: quantize once */
                if (it[p].X == it[k].X && qtype_get((uint32_t)it[p].w->type)->vec_dot == vd)
                    j.act[k] = j.act[p];
            if (!j.act[k]) {
                void *dst = (char *)c->gact + (size_t)k * c->gact_slot;
                quant_act_row(it[k].w->type, it[k].X, dst, it[k].n_in);
                j.act[k] = dst;
            }
        }
        int64_t chunk = it[k].n_out / ((int64_t)nth * 16);
        j.chunk[k] = chunk < 16 ? 16 : chunk;
        j.first[k + 1] = j.first[k] + (it[k].n_out + j.chunk[k] - 1) / j.chunk[k];
    }
    tpool_run(c->tp, mmg_task, &j, j.first[n]);
}

/* One expert's slice (ne2 = e) of a 3-D expert tensor. */
static const void *expert_slice(const struct wt *w, int e)
{
    return (const char *)w->data + (size_t)e * (size_t)w->ne[1] * w->row_bytes;
}

static void add_bias(float *y, const struct vec *b, int n_rows, int64_t stride)
{
    if (!b->data)
        return;
    for (int t = 0; t < n_rows; t++)
        ops_add(y + (size_t)t * (size_t)stride, b->data, (int)b->n);
}

/* Row-wise work (norms, q/k norm + RoPE + cache store, residual adds, SwiGLU) split over the pool
 * in chunks of rows; a single chunk (decode) runs inline without waking the pool. */
enum row_op {
    ROW_ATTN_NORM, /* h = rms_norm(x) · attn_norm */
    ROW_QK_STORE,  /* q/k head norms, RoPE, store K and V in the cache */
    ROW_ADD_NORM,  /* x += a; h = rms_norm(x) · ffn_norm */
    ROW_ADD,       /* x += a */
    ROW_SWIGLU,    /* fg = silu(fg) ⊙ fu over rows of `width` */
};

struct row_job {
    struct cpu_engine *c;
    const struct layer *ly;
    const struct engine_tok *toks;
    int n;
    enum row_op op;
    int width;
};

#define ROW_CHUNK 8

static void qk_store_row(struct cpu_engine *c, const struct layer *ly, const struct engine_tok *tk, int t)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int hd = hp->head_dim, nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;
    float *q = c->q + (size_t)t * nq, *k = c->k + (size_t)t * nkv;
    const float *cs = c->cs + (size_t)t * hp->n_rot;
    for (int h = 0; h < ly->n_head; h++) {
        if (ly->q_norm.data)
            ops_rms_norm(q + h * hd, q + h * hd, ly->q_norm.data, hd, hp->rms_eps);
        ops_rope_apply(q + h * hd, hp->n_rot, m->arch->rope, cs);
    }
    for (int h = 0; h < ly->n_head_kv; h++) {
        if (ly->k_norm.data)
            ops_rms_norm(k + h * hd, k + h * hd, ly->k_norm.data, hd, hp->rms_eps);
        ops_rope_apply(k + h * hd, hp->n_rot, m->arch->rope, cs);
    }
    kv_store(&c->kv, ly->kv_index, tk->seq, tk->pos, k, c->v + (size_t)t * nkv);
}

static void row_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct row_job *j = ctx;
    struct cpu_engine *c = j->c;
    const int E = c->m->hp.n_embd;
    const float eps = c->m->hp.rms_eps;
    const int t1 = (int)((i + 1) * ROW_CHUNK < j->n ? (i + 1) * ROW_CHUNK : j->n);
    for (int t = (int)(i * ROW_CHUNK); t < t1; t++) {
        float *x = c->x + (size_t)t * c->xw, *h = c->h + (size_t)t * E, *a = c->a + (size_t)t * E;
        switch (j->op) {
        case ROW_ATTN_NORM:
            ops_rms_norm(h, x, j->ly->attn_norm.data, E, eps);
            break;
        case ROW_QK_STORE:
            qk_store_row(c, j->ly, &j->toks[t], t);
            break;
        case ROW_ADD_NORM:
            ops_add(x, a, E);
            ops_rms_norm(h, x, j->ly->ffn_norm.data, E, eps);
            break;
        case ROW_ADD:
            ops_add(x, a, E);
            break;
        case ROW_SWIGLU:
            ops_swiglu(c->fg + (size_t)t * j->width, c->fu + (size_t)t * j->width, j->width);
            break;
        }
    }
}

static void par_rows(struct cpu_engine *c, const struct layer *ly, const struct engine_tok *toks, int n,
                     enum row_op op, int width)
{
    struct row_job j = { .c = c, .ly = ly, .toks = toks, .n = n, .op = op, .width = width };
    const int64_t chunks = (n + ROW_CHUNK - 1) / ROW_CHUNK;
    if (chunks == 1)
        row_task(&j, 0, 0);
    else
        tpool_run(c->tp, row_task, &j, chunks);
}

struct attn_job {
    struct cpu_engine *c;
    const struct engine_tok *toks;
    int il;       /* kv layer index */
    int n_head, n_head_kv;
};

#define ATTN_MAXQ 64 /* query vectors per ops_attn_multi call */

/* Item = (block, KV head): the block's tokens are consecutive positions of one sequence, so all their
 * GQA heads of this KV head read the same K/V rows; one ops_attn_multi call does them together. */
static void attn_task(void *ctx, int64_t i, int worker)
{
    const struct attn_job *j = ctx;
    struct cpu_engine *c = j->c;
    const int hd = c->m->hp.head_dim;
    const int b = (int)(i / j->n_head_kv), g = (int)(i % j->n_head_kv);
    const int n_gqa = j->n_head / j->n_head_kv;
    const int t0 = c->blk0[b], nt = c->blkn[b];
    const int seq = j->toks[t0].seq;
    const size_t nq = (size_t)j->n_head * (size_t)hd;
    const size_t off = (size_t)g * (size_t)hd * c->kv.elt;
    const char *K = (const char *)kv_k(&c->kv, j->il, seq, 0) + off;
    const char *V = (const char *)kv_v(&c->kv, j->il, seq, 0) + off;
    const float *qs[ATTN_MAXQ];
    float *outs[ATTN_MAXQ];
    int nk[ATTN_MAXQ];
    int m = 0;
    for (int t = t0; t < t0 + nt; t++)
        for (int h = g * n_gqa; h < (g + 1) * n_gqa; h++) {
            qs[m] = c->q + (size_t)t * nq + (size_t)h * hd;
            outs[m] = c->o + (size_t)t * nq + (size_t)h * hd;
            nk[m] = j->toks[t].pos + 1;
            if (++m == ATTN_MAXQ) {
                ops_attn_multi(m, qs, outs, nk, hd, K, V, (size_t)c->kv.dim_k[j->il], c->m->hp.kq_scale, c->f16tab,
                               c->att + (size_t)worker * c->att_per);
                m = 0;
            }
        }
    if (m)
        ops_attn_multi(m, qs, outs, nk, hd, K, V, (size_t)c->kv.dim_k[j->il], c->m->hp.kq_scale, c->f16tab,
                       c->att + (size_t)worker * c->att_per);
}

static void attn_block(struct cpu_engine *c, const struct layer *ly, const struct engine_tok *toks, int n)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd, hd = hp->head_dim;
    const int nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;

    par_rows(c, ly, toks, n, ROW_ATTN_NORM, 0);

    if (ly->wqkv.data) {
        const int w = nq + 2 * nkv;
        mm(c, &ly->wqkv, c->h, n, c->qkv);
        add_bias(c->qkv, &ly->bqkv, n, w);
        for (int t = 0; t < n; t++) {
            const float *r = c->qkv + (size_t)t * w;
            memcpy(c->q + (size_t)t * nq, r, sizeof(float) * (size_t)nq);
            memcpy(c->k + (size_t)t * nkv, r + nq, sizeof(float) * (size_t)nkv);
            memcpy(c->v + (size_t)t * nkv, r + nq + nkv, sizeof(float) * (size_t)nkv);
        }
    } else {
        const struct mm_item it[3] = {
            { &ly->wq, ly->wq.data, E, nq, c->h, c->q },
            { &ly->wk, ly->wk.data, E, nkv, c->h, c->k },
            { &ly->wv, ly->wv.data, E, nkv, c->h, c->v },
        };
        mm_group(c, n, it, 3);
        add_bias(c->q, &ly->bq, n, nq);
        add_bias(c->k, &ly->bk, n, nkv);
        add_bias(c->v, &ly->bv, n, nkv);
    }

    par_rows(c, ly, toks, n, ROW_QK_STORE, 0);

    /* every token's K/V is stored before attention, so a token sees its sequence's earlier batch tokens */
    /* blocks of consecutive positions of one sequence, sized so a block has ~8 queries per KV head */
    const int n_gqa = ly->n_head / ly->n_head_kv;
    const int bt = n_gqa >= 8 ? 1 : 8 / n_gqa;
    int nb = 0;
    for (int t = 0; t < n; t++) {
        if (nb && c->blkn[nb - 1] < bt && toks[t].seq == toks[t - 1].seq && toks[t].pos == toks[t - 1].pos + 1) {
            c->blkn[nb - 1]++;
        } else {
            c->blk0[nb] = t;
            c->blkn[nb++] = 1;
        }
    }
    struct attn_job job = { .c = c, .toks = toks, .il = ly->kv_index, .n_head = ly->n_head,
                            .n_head_kv = ly->n_head_kv };
    tpool_run(c->tp, attn_task, &job, (int64_t)nb * ly->n_head_kv);

    mm(c, &ly->wo, c->o, n, c->a);
    add_bias(c->a, &ly->bo, n, E);
    /* the residual add is fused with the FFN's input norm (ffn_block) */
}

static void ffn_dense(struct cpu_engine *c, const struct layer *ly, int n)
{
    const int E = c->m->hp.n_embd, F = ly->n_ff;
    const struct mm_item it[2] = {
        { &ly->ffn_gate, ly->ffn_gate.data, E, F, c->h, c->fg },
        { &ly->ffn_up, ly->ffn_up.data, E, F, c->h, c->fu },
    };
    mm_group(c, n, it, 2);
    add_bias(c->fg, &ly->b_gate, n, F);
    add_bias(c->fu, &ly->b_up, n, F);
    par_rows(c, ly, NULL, n, ROW_SWIGLU, F);
    mm(c, &ly->ffn_down, c->fg, n, c->a);
    add_bias(c->a, &ly->b_down, n, E);
}

static void ffn_moe(struct cpu_engine *c, const struct layer *ly, int n)
{
    const struct hparams *hp = &c->m->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert, K = hp->n_expert_used;

    mm(c, &ly->gate_inp, c->h, n, c->rl);
    for (int t = 0; t < n; t++)
        ops_moe_route(c->rl + (size_t)t * X, X, K, hp->expert_weights_scale, c->sel + (size_t)t * K,
                      c->sw + (size_t)t * K);
    /* run each expert once over the tokens routed to it */
    for (int ex = 0; ex < X; ex++) {
        int cnt = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < K; k++)
                if (c->sel[(size_t)t * K + k] == ex) {
                    c->etok[cnt] = t * K + k;
                    memcpy(c->ex + (size_t)cnt * E, c->h + (size_t)t * E, sizeof(float) * (size_t)E);
                    cnt++;
                }
        if (!cnt)
            continue;
        const struct mm_item it[2] = {
            { &ly->gate_exps, expert_slice(&ly->gate_exps, ex), E, F, c->ex, c->fg },
            { &ly->up_exps, expert_slice(&ly->up_exps, ex), E, F, c->ex, c->fu },
        };
        mm_group(c, cnt, it, 2);
        ops_swiglu(c->fg, c->fu, cnt * F);
        mm_at(c, ly->down_exps.type, expert_slice(&ly->down_exps, ex), F, E, c->fg, cnt, c->a);
        for (int r = 0; r < cnt; r++)
            memcpy(c->ey + (size_t)c->etok[r] * E, c->a + (size_t)r * E, sizeof(float) * (size_t)E);
    }
    /* weighted sum in selection order: ((w0·y0) + w1·y1) + … as ggml's mul + add chain */
    for (int t = 0; t < n; t++) {
        float *dst = c->a + (size_t)t * E;
        const float *w = c->sw + (size_t)t * K;
        const float *y = c->ey + (size_t)t * K * E;
        for (int i = 0; i < E; i++)
            dst[i] = w[0] * y[i];
        for (int k = 1; k < K; k++)
            for (int i = 0; i < E; i++) {
                float p = w[k] * y[(size_t)k * E + i];
                dst[i] = dst[i] + p;
            }
    }
}

/* x += a (the attention output), then the FFN on rms_norm(x), then x += its output (with hyper-connections:
 * the mixer's HC write-back, the FFN's HC mix, and its write-back) */
static void ffn_block(struct cpu_engine *c, const struct layer *ly, int n)
{
    if (c->hc) {
        cpu_hc_combine(c->hc, c->x, c->a, n);
        cpu_hc_mix(c->hc, &ly->hc_ffn, c->x, n, c->h);
    } else {
        par_rows(c, ly, NULL, n, ROW_ADD_NORM, 0);
    }
    if (ly->ffn == FFN_MOE)
        ffn_moe(c, ly, n);
    else
        ffn_dense(c, ly, n);
    if (ly->down_shexp.data)
        cpu_hybrid_shexp(c->hy, ly, c->h, c->a, n);
    if (c->hc)
        cpu_hc_combine(c->hc, c->x, c->a, n);
    else
        par_rows(c, ly, NULL, n, ROW_ADD, 0);
}

static int validate(struct cpu_engine *c, const struct engine_tok *toks, int n, struct err *e)
{
    return backend_check_batch(toks, n, c->p.n_batch, c->p.n_seq, c->p.n_ctx, c->m->hp.n_vocab, c->kv.len,
                              c->seq_next, e);
}

/* ---- the layer-kind operations of the shared loop (model/model_forward.h) ---- */

static int op_embed(void *b, int n, struct err *e)
{
    (void)e;
    struct cpu_engine *c = b;
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd;
    for (int t = 0; t < n; t++) {
        const void *row = (const char *)m->tok_embd.data + (size_t)c->toks[t].token * m->tok_embd.row_bytes;
        float *x = c->x + (size_t)t * c->xw;
        dequant_row(m->tok_embd.type, row, x, E);
        for (int s = E; s < c->xw; s += E) /* hyper-connections: every stream starts as the embedding */
            memcpy(x + s, x, sizeof(float) * (size_t)E);
        ops_rope_cache(c->cs + (size_t)t * hp->n_rot, c->toks[t].pos, hp->n_rot, hp->freq_base, m->rope_freqs.data,
                       hp->freq_scale, hp->ext_factor, hp->attn_factor, hp->corr_dims);
    }
    return 0;
}

/* the mixers leave their output in a; the FFN op adds it into x (fused with its input norm) */
static int op_attention(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    (void)e;
    struct cpu_engine *c = b;
    attn_block(c, s->ly, c->toks, n);
    return 0;
}

static int op_hybrid_mixer(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    (void)e;
    struct cpu_engine *c = b;
    if (c->hc)
        cpu_hc_mix(c->hc, &s->ly->hc_attn, c->x, n, c->h);
    else
        par_rows(c, s->ly, c->toks, n, ROW_ATTN_NORM, 0);
    cpu_hybrid_layer(c->hy, s->ly, c->toks, n, c->h, c->a, c->cs, &c->kv, c->f16tab);
    return 0;
}

static int op_ple(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    (void)e;
    struct cpu_engine *c = b;
    cpu_hybrid_ple(c->hy, s->ly, c->toks, n, c->x);
    return 0;
}

/* out[r] = the final hidden state of batch row rows[r]: rms_norm(x) · output_norm, or the output HC mix */
static void final_hidden(struct cpu_engine *c, const int *rows, int nr, float *out)
{
    const struct model *m = c->m;
    const int E = m->hp.n_embd;
    if (!c->hc) {
        for (int r = 0; r < nr; r++)
            ops_rms_norm(out + (size_t)r * E, c->x + (size_t)rows[r] * c->xw, m->output_norm.data, E, m->hp.rms_eps);
        return;
    }
    for (int r = 0; r < nr; r++)
        memcpy(c->xo + (size_t)r * c->xw, c->x + (size_t)rows[r] * c->xw, sizeof(float) * (size_t)c->xw);
    cpu_hc_mix(c->hc, &m->output_hc, c->xo, nr, out);
}

static int op_ffn(void *b, const struct fwd_sub *s, int n, struct err *e)
{
    (void)e;
    ffn_block(b, s->ly, n);
    return 0;
}

static int op_output(void *b, int n, int n_out, struct err *e)
{
    (void)n;
    (void)e;
    struct cpu_engine *c = b;
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    final_hidden(c, c->out_rows, n_out, c->h);
    mm(c, &m->output, c->h, n_out, c->logits);
    add_bias(c->logits, &m->output_bias, n_out, hp->n_vocab);
    return 0;
}

static const struct layer_ops cpu_layer_ops = {
    .embed = op_embed,
    .mixer = { [LAYER_ATTN] = op_attention, [LAYER_GDN] = op_hybrid_mixer, [LAYER_GATED_ATTN] = op_hybrid_mixer,
               [LAYER_SPARSE_ATTN] = op_hybrid_mixer },
    .ffn = { [FFN_DENSE] = op_ffn, [FFN_MOE] = op_ffn },
    .output = op_output,
    .ple = op_ple,
    .hyper_connections = true,
};

static int cpu_engine_decode_embd(void *b, const struct engine_tok *toks, int n, const bool *want, float *logits,
                                  float *embd, struct err *e)
{
    struct cpu_engine *c = b;
    int rc = validate(c, toks, n, e);
    if (rc)
        return rc;
    int n_out = 0;
    if ((rc = backend_out_rows(toks, n, want, logits, embd, c->out_rows, &n_out, e)))
        return rc;
    c->toks = toks;
    c->logits = logits;
    rc = model_forward(c->m, &cpu_layer_ops, c, n, n_out, e);
    c->toks = NULL;
    c->logits = NULL;
    if (rc)
        return rc;
    /* embeddings: x is the final residual stream (the output op only reads it); a row's own norm, so the
     * result does not depend on what else is in the batch */
    int nr = 0;
    for (int t = 0; want && t < n; t++)
        if (want[t])
            c->blk0[nr++] = t; /* blk0 is free after the step */
    if (nr)
        final_hidden(c, c->blk0, nr, embd);
    for (int s = 0; s < c->p.n_seq; s++)
        c->kv.len[s] = c->seq_next[s];
    return 0;
}

static int cpu_engine_decode(void *b, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    return cpu_engine_decode_embd(b, toks, n, NULL, logits, NULL, e);
}

static int cpu_engine_seq_len(const void *b, int seq)
{
    const struct cpu_engine *c = b;
    if (seq < 0 || seq >= c->kv.n_seq)
        return 0;
    return c->kv.len[seq];
}

static int cpu_engine_seq_copy(void *b, int src, int dst, int n, struct err *e)
{
    struct cpu_engine *c = b;
    return cpu_hybrid_seq_copy(c->hy, &c->kv, src, dst, n, e);
}

static int cpu_engine_seq_snapshot(void *b, int seq, struct err *e)
{
    struct cpu_engine *c = b;
    return cpu_hybrid_seq_snapshot(c->hy, &c->kv, seq, e);
}

static int cpu_engine_seq_restore(void *b, int seq, int pos, struct err *e)
{
    struct cpu_engine *c = b;
    return cpu_hybrid_seq_truncate(c->hy, &c->kv, seq, pos, e);
}

static int cpu_engine_seq_restorable(const void *b, int seq, int pos)
{
    const struct cpu_engine *c = b;
    return cpu_hybrid_seq_restorable(c->hy, &c->kv, seq, pos);
}

static int cpu_create(void **out, const struct model *m, const struct engine_params *p, struct err *e)
{
    struct cpu_engine *c = NULL;
    int rc = model_forward_check(m, &cpu_layer_ops, "cpu", e);
    if (!rc)
        rc = cpu_engine_create(&c, m, p, e);
    *out = c;
    return rc;
}

static void cpu_free(void *b) { cpu_engine_free(b); }
static int cpu_n_ctx(const void *b) { return ((const struct cpu_engine *)b)->p.n_ctx; }
static struct tpool *cpu_pool(void *b) { return ((struct cpu_engine *)b)->tp; }
static void cpu_load_info(const void *b, struct engine_load *out) { *out = ((const struct cpu_engine *)b)->ld; }

const struct backend_ops cpu_backend = {
    .name = "cpu",
    .create = cpu_create,
    .free = cpu_free,
    .n_ctx = cpu_n_ctx,
    .pool = cpu_pool,
    .decode = cpu_engine_decode,
    .decode_embd = cpu_engine_decode_embd,
    .seq_len = cpu_engine_seq_len,
    .seq_restore = cpu_engine_seq_restore,
    .seq_copy = cpu_engine_seq_copy,
    .seq_snapshot = cpu_engine_seq_snapshot,
    .seq_restorable = cpu_engine_seq_restorable,
    .load_info = cpu_load_info,
};
