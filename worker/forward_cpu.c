/* forward_cpu.c — the CPU backend: engine_create / engine_decode /
 * engine_seq_* (engine.h, as cpu_engine_* behind the dispatch of engine.c)
 * for every architecture of arch.c.
 *
 * One engine_decode runs a batch that may mix sequences: every weight
 * product is one matmul over all batch tokens (so prefill chunks and decode
 * tokens share the weight reads), attention runs per token over its own
 * sequence's cache (threaded over token × KV head), and only the rows that
 * asked for logits get the final norm and the output matmul. All scratch is
 * sized at engine_create; decode does no allocation. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend_cpu.h"
#include "engine.h"
#include "kv_cache.h"
#include "matmul.h"
#include "model.h"
#include "ops.h"

struct cpu_engine {
    const struct model *m;
    struct engine_params p;   /* resolved: n_ctx, n_batch, n_threads filled in */
    struct tpool *tp;
    struct matmul_scratch ms;
    struct kv_cache kv;
    float *f16tab;            /* [65536] f16 → f32, for the f16 cache */

    /* per-batch scratch, B = n_batch rows */
    float *x;                 /* [B][n_embd] residual stream */
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
    float *att;               /* [n_threads][n_ctx] attention scores */
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
};

void engine_params_default(struct engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->backend = BACKEND_CPU;
    p->n_seq = 1;
}

void cpu_engine_free(struct cpu_engine *c)
{
    if (!c)
        return;
    tpool_destroy(c->tp);
    matmul_scratch_free(&c->ms);
    kv_free(&c->kv);
    void *bufs[] = { c->f16tab, c->x, c->h, c->q, c->k, c->v, c->qkv, c->o, c->a, c->fg, c->fu, c->cs, c->att,
                     c->rl, c->sel, c->sw, c->ey, c->ex, c->etok, c->seq_next, c->out_rows };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(c);
}

int cpu_engine_n_ctx(const struct cpu_engine *c) { return c->p.n_ctx; }

static void *alloc_f(size_t n, bool *ok)
{
    void *p = calloc(n ? n : 1, sizeof(float));
    if (!p)
        *ok = false;
    return p;
}

int cpu_engine_create(struct cpu_engine **out, const struct model *m, const struct engine_params *pin,
                  struct err *e)
{
    *out = NULL;
    struct engine_params p;
    if (pin)
        p = *pin;
    else
        engine_params_default(&p);
    if (p.backend != BACKEND_CPU)
        return err_set(e, ERR_UNSUPPORTED, "engine: backend %d is not built into this engine", (int)p.backend);
    const struct hparams *hp = &m->hp;
    if (p.n_ctx <= 0)
        p.n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p.n_batch <= 0)
        p.n_batch = 512;
    if (p.n_seq <= 0)
        p.n_seq = 1;
    if (p.n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        p.n_threads = nc > 0 ? (int)nc : 1;
    }
    if (p.n_ctx > (1 << 24) || p.n_batch > (1 << 16) || p.n_seq > (1 << 16) || p.n_threads > 1024)
        return err_set(e, ERR_RANGE, "engine: n_ctx %d / n_batch %d / n_seq %d / n_threads %d too large", p.n_ctx,
                       p.n_batch, p.n_seq, p.n_threads);

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
        c->f16tab = alloc_f(65536, &ok);
        if (ok)
            ops_f16_table_init(c->f16tab);
    }
    c->x = alloc_f(B * E, &ok);
    c->h = alloc_f(B * E, &ok);
    c->q = alloc_f(B * nq, &ok);
    c->k = alloc_f(B * nkv, &ok);
    c->v = alloc_f(B * nkv, &ok);
    c->qkv = alloc_f(B * (nq + 2 * nkv), &ok);
    c->o = alloc_f(B * nq, &ok);
    c->a = alloc_f(B * E, &ok);
    c->fg = alloc_f(B * nff, &ok);
    c->fu = alloc_f(B * nff, &ok);
    c->cs = alloc_f(B * (size_t)hp->n_rot, &ok);
    c->att = alloc_f((size_t)c->p.n_threads * (size_t)p.n_ctx, &ok);
    if (X) {
        c->rl = alloc_f(B * X, &ok);
        c->sel = calloc(B * K, sizeof(int));
        c->sw = alloc_f(B * K, &ok);
        c->ey = alloc_f(B * K * E, &ok);
        c->ex = alloc_f(B * E, &ok);
        c->etok = calloc(B * K, sizeof(int));
        if (!c->sel || !c->etok)
            ok = false;
    }
    c->seq_next = calloc((size_t)p.n_seq, sizeof(int));
    c->out_rows = calloc(B, sizeof(int));
    if (!ok || !c->seq_next || !c->out_rows) {
        cpu_engine_free(c);
        return err_set(e, ERR_NOMEM, "engine: out of memory for scratch (n_batch %d, n_ctx %d)", p.n_batch, p.n_ctx);
    }
    *out = c;
    return 0;
}

/* ---- blocks ---- */

static void mm(struct cpu_engine *c, const struct wt *w, const float *X, int n, float *Y)
{
    matmul(c->tp, &c->ms, w->type, w->data, w->ne[0], w->ne[1], X, n, Y);
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

struct attn_job {
    struct cpu_engine *c;
    const struct engine_tok *toks;
    int il;       /* kv layer index */
    int n_head, n_head_kv;
};

static void attn_task(void *ctx, int64_t i, int worker)
{
    const struct attn_job *j = ctx;
    struct cpu_engine *c = j->c;
    const int hd = c->m->hp.head_dim;
    const int t = (int)(i / j->n_head_kv), g = (int)(i % j->n_head_kv);
    const int n_gqa = j->n_head / j->n_head_kv;
    const struct engine_tok *tk = &j->toks[t];
    const size_t nq = (size_t)j->n_head * (size_t)hd;
    const size_t off = (size_t)g * (size_t)hd * c->kv.elt;
    const char *K = (const char *)kv_k(&c->kv, j->il, tk->seq, 0) + off;
    const char *V = (const char *)kv_v(&c->kv, j->il, tk->seq, 0) + off;
    const float *q = c->q + (size_t)t * nq + (size_t)g * (size_t)n_gqa * (size_t)hd;
    float *o = c->o + (size_t)t * nq + (size_t)g * (size_t)n_gqa * (size_t)hd;
    ops_attn(q, n_gqa, hd, K, V, (size_t)c->kv.dim_k[j->il], tk->pos + 1, c->m->hp.kq_scale, c->f16tab, o,
             c->att + (size_t)worker * (size_t)c->p.n_ctx);
}

static void attn_block(struct cpu_engine *c, const struct layer *ly, const struct engine_tok *toks, int n)
{
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd, hd = hp->head_dim;
    const int nq = ly->n_head * hd, nkv = ly->n_head_kv * hd;

    for (int t = 0; t < n; t++)
        ops_rms_norm(c->h + (size_t)t * E, c->x + (size_t)t * E, ly->attn_norm.data, E, hp->rms_eps);

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
        mm(c, &ly->wq, c->h, n, c->q);
        mm(c, &ly->wk, c->h, n, c->k);
        mm(c, &ly->wv, c->h, n, c->v);
        add_bias(c->q, &ly->bq, n, nq);
        add_bias(c->k, &ly->bk, n, nkv);
        add_bias(c->v, &ly->bv, n, nkv);
    }

    for (int t = 0; t < n; t++) {
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
        kv_store(&c->kv, ly->kv_index, toks[t].seq, toks[t].pos, k, c->v + (size_t)t * nkv);
    }

    /* every token's K/V is stored before attention, so a token sees its sequence's earlier batch tokens */
    struct attn_job job = { .c = c, .toks = toks, .il = ly->kv_index, .n_head = ly->n_head,
                            .n_head_kv = ly->n_head_kv };
    tpool_run(c->tp, attn_task, &job, (int64_t)n * ly->n_head_kv);

    mm(c, &ly->wo, c->o, n, c->a);
    add_bias(c->a, &ly->bo, n, E);
    for (int t = 0; t < n; t++)
        ops_add(c->x + (size_t)t * E, c->a + (size_t)t * E, E);
}

static void ffn_dense(struct cpu_engine *c, const struct layer *ly, int n)
{
    const int E = c->m->hp.n_embd, F = ly->n_ff;
    mm(c, &ly->ffn_gate, c->h, n, c->fg);
    mm(c, &ly->ffn_up, c->h, n, c->fu);
    add_bias(c->fg, &ly->b_gate, n, F);
    add_bias(c->fu, &ly->b_up, n, F);
    ops_swiglu(c->fg, c->fu, n * F);
    mm(c, &ly->ffn_down, c->fg, n, c->a);
    add_bias(c->a, &ly->b_down, n, E);
}

static void ffn_moe(struct cpu_engine *c, const struct layer *ly, int n)
{
    const struct hparams *hp = &c->m->hp;
    const int E = hp->n_embd, F = hp->n_ff_exp, X = hp->n_expert, K = hp->n_expert_used;

    mm(c, &ly->gate_inp, c->h, n, c->rl);
    for (int t = 0; t < n; t++) {
        float *pr = c->rl + (size_t)t * X;
        int *sel = c->sel + (size_t)t * K;
        float *w = c->sw + (size_t)t * K;
        ops_softmax(pr, X);
        ops_topk(pr, X, K, sel);
        double sum = 0.0; /* ggml sum_rows accumulates in double */
        for (int k = 0; k < K; k++) {
            w[k] = pr[sel[k]];
            sum += (double)w[k];
        }
        float s = (float)sum;
        if (s < 6.103515625e-5f)
            s = 6.103515625e-5f;
        for (int k = 0; k < K; k++)
            w[k] = w[k] / s;
        if (hp->expert_weights_scale != 0.0f && hp->expert_weights_scale != 1.0f)
            for (int k = 0; k < K; k++)
                w[k] *= hp->expert_weights_scale;
    }
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
        matmul(c->tp, &c->ms, ly->gate_exps.type, expert_slice(&ly->gate_exps, ex), E, F, c->ex, cnt, c->fg);
        matmul(c->tp, &c->ms, ly->up_exps.type, expert_slice(&ly->up_exps, ex), E, F, c->ex, cnt, c->fu);
        ops_swiglu(c->fg, c->fu, cnt * F);
        matmul(c->tp, &c->ms, ly->down_exps.type, expert_slice(&ly->down_exps, ex), F, E, c->fg, cnt, c->a);
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

static void ffn_block(struct cpu_engine *c, const struct layer *ly, int n)
{
    const struct hparams *hp = &c->m->hp;
    const int E = hp->n_embd;
    for (int t = 0; t < n; t++)
        ops_rms_norm(c->h + (size_t)t * E, c->x + (size_t)t * E, ly->ffn_norm.data, E, hp->rms_eps);
    if (ly->ffn == FFN_MOE)
        ffn_moe(c, ly, n);
    else
        ffn_dense(c, ly, n);
    for (int t = 0; t < n; t++)
        ops_add(c->x + (size_t)t * E, c->a + (size_t)t * E, E);
}

static int validate(struct cpu_engine *c, const struct engine_tok *toks, int n, struct err *e)
{
    if (n < 1 || n > c->p.n_batch)
        return err_set(e, ERR_INVALID, "engine_decode: %d tokens (batch holds 1..%d)", n, c->p.n_batch);
    for (int s = 0; s < c->p.n_seq; s++)
        c->seq_next[s] = c->kv.len[s];
    for (int i = 0; i < n; i++) {
        const struct engine_tok *t = &toks[i];
        if (t->token < 0 || t->token >= c->m->hp.n_vocab)
            return err_set(e, ERR_INVALID, "engine_decode: token %d at batch row %d is outside the vocabulary (%d)",
                           t->token, i, c->m->hp.n_vocab);
        if (t->seq < 0 || t->seq >= c->p.n_seq)
            return err_set(e, ERR_INVALID, "engine_decode: sequence %d at batch row %d is outside [0, %d)", t->seq,
                           i, c->p.n_seq);
        if (t->pos != c->seq_next[t->seq])
            return err_set(e, ERR_INVALID, "engine_decode: batch row %d: sequence %d expects position %d, got %d", i,
                           t->seq, c->seq_next[t->seq], t->pos);
        if (t->pos >= c->p.n_ctx)
            return err_set(e, ERR_FULL, "engine_decode: sequence %d is full (n_ctx %d)", t->seq, c->p.n_ctx);
        c->seq_next[t->seq]++;
    }
    return 0;
}

int cpu_engine_decode(struct cpu_engine *c, const struct engine_tok *toks, int n, float *logits, struct err *e)
{
    int rc = validate(c, toks, n, e);
    if (rc)
        return rc;
    const struct model *m = c->m;
    const struct hparams *hp = &m->hp;
    const int E = hp->n_embd;
    int n_out = 0;
    for (int t = 0; t < n; t++)
        if (toks[t].logits)
            c->out_rows[n_out++] = t;
    if (n_out && !logits)
        return err_set(e, ERR_INVALID, "engine_decode: %d rows asked for logits but the buffer is NULL", n_out);

    for (int t = 0; t < n; t++) {
        const void *row = (const char *)m->tok_embd.data + (size_t)toks[t].token * m->tok_embd.row_bytes;
        dequant_row(m->tok_embd.type, row, c->x + (size_t)t * E, E);
        ops_rope_cache(c->cs + (size_t)t * hp->n_rot, toks[t].pos, hp->n_rot, hp->freq_base, m->rope_freqs.data,
                       hp->freq_scale, hp->ext_factor, hp->attn_factor, hp->corr_dims);
    }
    for (int il = 0; il < hp->n_layer; il++) {
        const struct layer *ly = &m->layers[il];
        switch (ly->kind) {
        case LAYER_ATTN:
            attn_block(c, ly, toks, n);
            break;
        }
        ffn_block(c, ly, n);
    }
    for (int s = 0; s < c->p.n_seq; s++)
        c->kv.len[s] = c->seq_next[s];

    if (n_out) {
        for (int r = 0; r < n_out; r++)
            ops_rms_norm(c->h + (size_t)r * E, c->x + (size_t)c->out_rows[r] * E, m->output_norm.data, E,
                         hp->rms_eps);
        mm(c, &m->output, c->h, n_out, logits);
        add_bias(logits, &m->output_bias, n_out, hp->n_vocab);
    }
    return 0;
}

void cpu_engine_seq_truncate(struct cpu_engine *c, int seq, int pos) { kv_truncate(&c->kv, seq, pos); }

int cpu_engine_seq_len(const struct cpu_engine *c, int seq)
{
    if (seq < 0 || seq >= c->kv.n_seq)
        return 0;
    return c->kv.len[seq];
}

int cpu_engine_seq_copy(struct cpu_engine *c, int src, int dst, int n, struct err *e)
{
    return kv_copy(&c->kv, src, dst, n, e);
}
