/* hip_ops.c — the `hip` backend's launch layer (hip_ops.h): uploads and the
 * product / norm / quantization launches every layer builds on. Moved here
 * from hip_engine.c unchanged, so the hybrid layers (hip_hybrid.c) and the
 * engine launch through one copy without calling each other. */
#include "hip_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GEMV_MAX HIP_GEMV_MAX
#define TOKEN_GEMV_MAX HIP_TOKEN_GEMV_MAX
#define GEMV_R 2       /* rows per warp (kernels/gemv.cu) */
#define MMA32_MAX 32   /* batches up to this many tokens use the 32-token tensor-core GEMM tile */
#define MMA128_MIN 256 /* batches from this many tokens on use the 128-token tile */

/* ---- setup ---- */

static int track(struct hip_ops *c, struct hip_dptr p, struct err *e)
{
    if (c->n_allocs == c->cap_allocs) {
        int cap = c->cap_allocs ? 2 * c->cap_allocs : 256;
        struct hip_dptr *a = realloc(c->allocs, sizeof *a * (size_t)cap);
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

int hip_ops_dalloc(struct hip_ops *c, size_t n, struct hip_dptr *out, struct err *e)
{
    int rc = hip_rt_malloc(c->rt, n, out, e);
    if (rc)
        return rc;
    return track(c, *out, e);
}

int hip_ops_stager_open(struct hip_ops *c, struct stager *s, size_t cap, struct err *e)
{
    memset(s, 0, sizeof *s);
    s->cap = cap;
    int rc = hip_rt_host_alloc(c->rt, cap, &s->buf[0], e);
    if (rc || !c->k.upload_pipe)
        return rc;
    /* the pipeline's second buffer and its events; without any of them the upload runs one chunk at a time */
    struct err ign;
    if (hip_rt_host_alloc(c->rt, cap, &s->buf[1], &ign) || hip_rt_event_create(c->rt, &s->ev[0], &ign) ||
        hip_rt_event_create(c->rt, &s->ev[1], &ign)) {
        hip_rt_host_free(c->rt, s->buf[1]);
        hip_rt_event_free(c->rt, s->ev[0]);
        hip_rt_event_free(c->rt, s->ev[1]);
        s->buf[1] = NULL;
        s->ev[0] = s->ev[1] = NULL;
    }
    return 0;
}

int hip_ops_stager_close(struct hip_ops *c, struct stager *s, struct err *e)
{
    /* no buffer is freed while a copy may still read it */
    int rc = hip_rt_sync(c->rt, e);
    for (int i = 0; i < 2; i++) {
        hip_rt_host_free(c->rt, s->buf[i]);
        hip_rt_event_free(c->rt, s->ev[i]);
    }
    memset(s, 0, sizeof *s);
    return rc;
}

int hip_ops_upload(struct hip_ops *c, struct stager *s, struct hip_dptr dst, const void *src, size_t n, struct err *e)
{
    const bool pipe = s->buf[1] != NULL;
    for (size_t off = 0; off < n; off += s->cap) {
        const size_t k = n - off < s->cap ? n - off : s->cap;
        const int i = s->cur;
        int rc = 0;
        if (s->busy[i]) { /* the copy that last read this buffer is done before it is written again */
            rc = s->ev[i] ? hip_rt_event_wait(c->rt, s->ev[i], e) : hip_rt_sync(c->rt, e);
            if (rc)
                return rc;
            s->busy[i] = false;
        }
        memcpy(s->buf[i], (const char *)src + off, k);
        s->busy[i] = true; /* from here a copy may read it, even when what follows fails */
        rc = hip_rt_h2d(c->rt, hip_dptr_off(dst, off), s->buf[i], k, e);
        if (!rc && pipe) {
            rc = hip_rt_event_record(c->rt, s->ev[i], e);
            s->cur = i ^ 1; /* the next chunk fills the other buffer while this one crosses */
        } else if (!rc) {
            rc = hip_rt_sync(c->rt, e);
            s->busy[i] = false;
        }
        if (rc)
            return rc;
    }
    return 0;
}

bool hip_ops_type_ok(int t)
{
    return t == QT_F32 || t == QT_F16 || t == QT_Q8_0 || t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K ||
           t == QT_IQ4_XS;
}

int hip_ops_up_wt(struct hip_ops *c, struct stager *s, const struct wt *w, struct dw *d, struct err *e)
{
    memset(d, 0, sizeof *d);
    if (!w->data)
        return 0;
    if (!hip_ops_type_ok(w->type))
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
    int rc = hip_ops_dalloc(c, n, &d->d, e);
    if (!rc)
        rc = hip_ops_upload(c, s, d->d, w->data, n, e);
    return rc;
}

int hip_ops_up_vec(struct hip_ops *c, struct stager *s, const struct vec *v, struct hip_dptr *d, struct err *e)
{
    *d = HIP_DNULL;
    if (!v->data)
        return 0;
    int rc = hip_ops_dalloc(c, sizeof(float) * (size_t)v->n, d, e);
    if (!rc)
        rc = hip_ops_upload(c, s, *d, v->data, sizeof(float) * (size_t)v->n, e);
    return rc;
}

static unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

static int fattn_slot(int hd) { return hd == 64 ? 0 : hd == 128 ? 1 : hd == 256 ? 2 : -1; }

void hip_ops_fattn_load(struct hip_ops *c)
{
    static const int hds[3] = { 64, 128, 256 };
    for (int i = 0; i < 3; i++) {
        char nm[32];
        struct err ign = { 0 };
        snprintf(nm, sizeof nm, "fattn_%d", hds[i]);
        if (hip_rt_fn(c->rt, nm, &c->k_fattn[i], &ign) ||
            hip_rt_fn_smem(c->rt, c->k_fattn[i], FATTN_SMEM(hds[i]), &ign))
            c->k_fattn[i] = NULL;
    }
}

hip_fn hip_ops_fattn(const struct hip_ops *c, int hd)
{
    const int i = fattn_slot(hd);
    return i >= 0 && c->k.use_fa && c->warp == 32 ? c->k_fattn[i] : NULL;
}

int hip_ops_fattn_launch(struct hip_ops *c, int hd, int n, int n_head, const struct attn_args *a, struct err *e)
{
    const hip_fn f = hip_ops_fattn(c, hd);
    if (!f)
        return err_set(e, ERR_INTERNAL, "hip: no tensor-core prompt attention for head size %d", hd);
    struct attn_args aa = *a;
    int nn = n;
    void *p[] = { &aa, &nn };
    return hip_rt_launch_smem(c->rt, f, cdiv((size_t)n, 64), (unsigned)n_head, 1, 128, FATTN_SMEM(hd), p, e);
}

bool hip_ops_want_q8(const struct hip_ops *c, int k) { return c->q8 && k % 32 == 0 && k % c->warp == 0; }

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
static size_t gemv_threads(const struct hip_ops *c, const struct gemv_args *a, bool *even)
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
static bool launch_gemvb(struct hip_ops *c, struct gemv_args *a, const struct dw *w, const struct dw *w2, int q,
                         int *rc, struct err *e)
{
    const bool dual = a->mode == 2 || a->mode == 3;
    if (!c->gemvb_t || a->nz < 2 || a->nz > GEMV_MAX || a->sel || a->rsel || a->mode > 3 || a->x_div != 1 || !q ||
        q == 3 || !c->q8 || c->warp != 32 || (w2 && w2->type != w->type))
        return false;
    const int wide = a->nz > 8 && c->gemvb_t == 16;
    hip_fn f = dual ? c->gemvbd[wide][w->type] : c->gemvb[wide][w->type];
    hip_fn fm = a->nz >= c->gemvbm_min && a->k % 256 == 0 ? c->gemvbm[dual][w->type] : NULL;
    /* the streamed one reads q4_K / q5_K / q8_0 chunks as whole 16-byte pieces: w (and w2) 16-aligned */
    hip_fn fp = fm && ((w->d.a | (w2 ? w2->d.a : 0)) % 16 == 0 || w->type == QT_Q6_K) ? c->gemvbp[dual][w->type]
                                                                                     : NULL;
    if (!f && !fm)
        return false;
    a->x = (q == 2 ? c->fq : c->xq).a;
    a->xd = (q == 2 ? c->fqd : c->xqd).a;
    a->x_stride = (int)w->ne0;
    a->pf = c->pf;
    void *params[] = { a };
    if (fp && c->gemvbf[dual][w->type] && a->k % 64 == 0) { /* the activations in fragment order first */
        struct gemv_args fa = *a;
        uint64_t xf = c->xf.a, xfd = c->xfd.a;
        void *fp2[] = { &fa, &xf, &xfd };
        if ((*rc = hip_rt_launch(c->rt, c->k_q8_frag, (unsigned)(a->k / 64), 2, 1, 32, fp2, e)))
            return true;
        a->x = c->xf.a, a->xd = c->xfd.a;
        fp = c->gemvbf[dual][w->type]; /* its twin reading that copy */
    }
    if (fp) { /* the same blocks as gemvbm, with the ring in dynamic shared memory */
        *rc = hip_rt_launch_smem(c->rt, fp, cdiv((size_t)a->n_rows, 16), 1, 1, 256,
                                 (unsigned)GEMVBP_SMEM(w->type, dual), params, e);
        return true;
    }
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

/* Most K slices of a product of steps k steps: each at least 4 steps. */
static unsigned k_slices_max(unsigned steps) { return steps / 4 ? steps / 4 : 1; }

/* A split of steps k steps into ks slices as a launch takes it: at most k_slices_max, and no empty one
 * (the kernels cut ⌈steps / ks⌉ steps a slice). */
static unsigned k_slices(unsigned ks, unsigned steps)
{
    const unsigned smax = k_slices_max(steps);
    ks = ks > smax ? smax : ks;
    return cdiv(steps, cdiv(steps, ks));
}

/* Split K of a grid of too few blocks to fill the device's slots by its modelled time: slices s ≤
 * k_slices_max of steps / s steps each run in ⌈blocks·s / slots⌉ waves, so the time goes as waves ×
 * ⌈steps / s⌉; the smallest s of the least time (fewer slices, fewer atomics). */
static unsigned mma_fill_split(unsigned blocks, unsigned slots, unsigned steps)
{
    const unsigned smax = k_slices_max(steps);
    unsigned best = 1;
    size_t best_t = (size_t)-1;
    for (unsigned s = 1; s <= smax; s++) {
        const size_t t = cdiv((size_t)blocks * s, slots) * cdiv(steps, s);
        if (t < best_t)
            best = s, best_t = t;
    }
    return best;
}

/* The streamed single-token GEMV (kernels/gemvs.cu): a ring of GEMVS_STAGES (kernels/args.h) stages a
 * warp, a stage one row of each matrix; a block a multiprocessor of as many warps as the shared memory
 * holds, at most 16 and at least 4 (rows too long for that keep gemv.cu). Only where every warp gets
 * GEMVS_ROWS rows or more: a warp's first rows wait a whole memory latency with nothing to overlap, and
 * its 4–16 warps a multiprocessor compute less in parallel than gemv.cu's 32 — measured on the H200
 * (qwen3-8b q4_K, docs/benchmarks.md): the output head (151936 rows, 72 a warp) 209 → 146 µs, but the
 * layers' products (3–8 rows a warp) 1.3–2.4× slower. Not for expert slices, the fused routing, or mode 4. */
#define GEMVS_ROWS 16
static unsigned gemvs_stage(const struct gemv_args *a)
{
    return (unsigned)a->row_bytes * (a->mode == 2 || a->mode == 3 ? 2u : 1u);
}

static bool gemvs_fit(const struct hip_ops *c, const struct gemv_args *a, int type, bool dn, hip_fn *f,
                      unsigned *warps)
{
    const int xu = a->k <= 32 * 32 * 4;
    if (!c->use_gemvs || a->sel || a->rsel || a->mode > 3 || a->x_div != 1 || a->row_bytes % 16 || a->k % 32 ||
        !(*f = c->gemvs[xu][dn][type]))
        return false;
    const unsigned ring = GEMVS_STAGES * gemvs_stage(a);
    unsigned nw = (unsigned)c->smem_optin / ring;
    if (nw > 16)
        nw = 16;
    *warps = nw;
    return nw >= 4 && (size_t)a->n_rows >= (size_t)GEMVS_ROWS * nw * (size_t)c->sms;
}

/* the row scales' bound of the f16 copies (mma_xprep, rms_norm, swiglu_rows): 2^15, f16's largest finite
 * being 65504; 0 (unscaled) with hip_knobs.mma_xscale off */
static float f16_lim(const struct hip_ops *c) { return c->k.mma_xscale ? 32768.0f : 0.0f; }

int hip_ops_launch_mm(struct hip_ops *c, struct gemv_args *a, const struct dw *w, const struct dw *w2, int q,
                     struct err *e)
{
    void *params[] = { a };
    const struct hip_dptr next_norm = c->next_norm;
    const bool x_ready = c->x_ready;
    c->next_norm = HIP_DNULL, c->x_ready = false; /* asked of this launch only */
    int brc;
    if (launch_gemvb(c, a, w, w2, q, &brc, e))
        return brc;
    if (a->nz <= TOKEN_GEMV_MAX || a->sel || a->mode >= 2) {
        hip_fn f = c->gemv[w->type], fdn = c->gemv_dn[w->type];
        int R = GEMV_R;
        bool q8 = false; /* q8 activations (gemvq*) */
        if (q && c->q8 && c->gemvq[w->type] && (!w2 || w2->type == w->type)) {
            q8 = true;
            f = c->gemvq[w->type], fdn = c->gemvq_dn[0][w->type];
            a->x = (q == 2 ? c->fq : q == 3 ? c->hq : c->xq).a;
            a->xd = (q == 2 ? c->fqd : q == 3 ? c->hqd : c->xqd).a;
            a->x_stride = (int)w->ne0;
            if (q == 3) /* every output scaled by its token's 1/sqrt(mean x² + eps) */
                a->rsp = c->hsp.a, a->eps = c->m->hp.rms_eps;
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
            a->rsp = c->hsp.a, a->eps = c->m->hp.rms_eps;
        }
        if (q == 3) /* the kernel that scales by the input's norm */
            f = fdn;
        if (!f)
            return err_set(e, ERR_INTERNAL, "hip: no GEMV kernel for a deferred RMSNorm's input");
        /* the next sublayer's RMSNorm deferred: this grid writes its input x∘w, its q8 copy and Σ x² per
         * 32-group (h, hq, hsp) */
        if (!hip_dptr_null(next_norm) && (a->mode == 1 || a->mode == 4) && a->nz <= GEMV_MAX &&
            a->n_rows == c->m->hp.n_embd && a->n_rows % 32 == 0) {
            a->nw = next_norm.a, a->ny = c->h.a, a->nq = c->hq.a, a->nqd = c->hqd.a, a->nsp = c->hsp.a,
            a->ncnt = c->ncnt.a;
            c->h_def = true;
        }
        a->pf = c->pf;
        if (q8 && a->nz == 1) { /* streamed (kernels/gemvs.cu) where it fits */
            hip_fn fs = NULL;
            unsigned warps = 0;
            if (gemvs_fit(c, a, w->type, q == 3, &fs, &warps))
                return hip_rt_launch_smem(c->rt, fs, (unsigned)c->sms, 1, 1, 32 * warps,
                                          warps * GEMVS_STAGES * gemvs_stage(a), params, e);
        }
        const size_t nt = gemv_threads(c, a, NULL);
        return hip_rt_launch(c->rt, f, (unsigned)a->nz * cdiv((size_t)a->n_rows, (size_t)R), 1, 1, (unsigned)nt,
                             params, e);
    }
    if (q == 3)
        return err_set(e, ERR_INTERNAL, "hip: a deferred RMSNorm's input reached a GEMM");
    if (c->use_mma && c->mma[w->type] && c->k_mma_xprep && c->warp == 32 && a->k % 64 == 0 && a->x_stride % 4 == 0 &&
        a->x % 16 == 0) {
        /* 128 rows × 64 tokens a block (two resident per multiprocessor), × 32 tokens with two weight steps
         * in flight for small batches (three resident), or × 128 tokens for long prompts (one resident,
         * half the dequantization per product); too few blocks to fill the device
         * (small decode batches, narrow K/V projections) split K over blockIdx.z, adding with atomics
         * into a zeroed y */
        const int t = c->mma_t ? c->mma_t : a->nz <= MMA32_MAX ? 32 : a->nz >= MMA128_MIN ? 128 : 64;
        hip_fn f = t == 32 ? c->mma32[w->type] : t == 128 ? c->mma128[w->type] : NULL;
        const unsigned mt = f ? (unsigned)t : 64;
        unsigned per_sm = !f ? 2 : t == 32 ? 3 : 1; /* resident blocks (mma.cu) */
        unsigned smem = MMA_SMEM(mt);
        f = f ? f : c->mma[w->type];
        /* warpgroup MMA (sm_90a; two blocks resident): the 128-token tile (pp4096 +18 % on the H100), the
         * 64-token one only when asked (slower for batched decode: docs/hip-backend.md) */
        const bool on_wg = (mt == 128 ? c->use_wg >= 1 : mt == 64 && c->use_wg == 2) && c->wg[mt == 128][w->type];
        if (on_wg)
            f = c->wg[mt == 128][w->type], per_sm = 2, smem = WG_SMEM(mt);
        const unsigned gx = cdiv((size_t)a->n_rows, 128), gy = cdiv((size_t)a->nz, mt);
        const unsigned steps = (unsigned)a->k / 64, want = per_sm * (unsigned)hip_rt_sm_count(c->rt);
        unsigned ks = 1;
        /* stream-K (wgmma.cu): one wave of blocks sharing every tile's k steps evenly, at least 8 a block;
         * tiles cut between blocks add with atomics, into a y zeroed first in mode 0. Only for grids of up to
         * two waves of tiles (qwen3-8b pp512: +20 %): each block's run starts 1/P of the way through all the
         * tiles, so the blocks in flight touch every token tile at once — a 16384-token prompt's 128 MB of
         * f16 activations against the tile grid's few token tiles a wave, L2-resident — and at 4096 tokens
         * (six waves) it measured only +0.6 % */
        const size_t sk_total = (size_t)gx * gy * steps, sk_p = sk_total / 8 < want ? sk_total / 8 : want;
        a->sk = c->streamk && on_wg && sk_p > 0 && (size_t)gx * gy <= 2 * (size_t)want;
        if (a->sk)
            ks = 1; /* the runs cut K themselves */
        else if (gx * gy < want * 3 / 4) {
            /* by modelled time for the 64-token tile (batched decode B = 64: 4873 → 5501 t/s on the H100); the
             * 128-token tile's prompts measured slower that way (pp512 10436 → 10211), a lone block on a
             * multiprocessor running faster than the model counts */
            const bool fill = c->mma_fill == 1 || (c->mma_fill < 0 && mt == 64);
            ks = k_slices(fill ? mma_fill_split(gx * gy, want, steps) : cdiv(want, (size_t)gx * gy), steps);
        } else {
            ks = mma_wave_split(gx * gy, want, steps, (unsigned)c->mma_waves);
        }
        /* the f16 rows: made here, or by the kernel that wrote x (x_ready); a split mode-0 product's slices
         * add into y, which the prep zeroes (a prep of only that when x is ready) */
        const bool zero = (ks > 1 || a->sk) && a->mode == 0;
        int rc;
        if (x_ready && !zero)
            a->xh = c->xh.a, a->xsc = c->xsc.a;
        else if ((rc = hip_ops_xprep(c, x_ready ? 0 : a->x, a->nz, a->k, a->x_stride, a, zero, e)))
            return rc;
        if (a->sk)
            return hip_rt_launch_smem(c->rt, f, (unsigned)sk_p, 1, 1, 256, smem, params, e);
        return hip_rt_launch_smem(c->rt, f, gx, gy, ks, 256, smem, params, e);
    }
    /* the FMA GEMM (f32 weights: a MoE router, 256 rows × 512 tokens = 32 tiles): split K over whole 32-wide
     * steps until the tiles make about two a multiprocessor, each slice at least 4 steps; the slices add with
     * atomics into y, zeroed first in mode 0 (only where y's rows are dense: nothing between them to lose) */
    const unsigned gx = cdiv((size_t)a->n_rows, 64), gy = cdiv((size_t)a->nz, 64), steps = cdiv((size_t)a->k, 32);
    const unsigned want = 2 * (unsigned)hip_rt_sm_count(c->rt);
    const bool addable = a->mode == 1 || (a->mode == 0 && a->y_stride == a->n_rows); /* slices may add into y */
    const unsigned ks = k_slices(gx * gy < want / 2 && addable ? cdiv(want, (size_t)gx * gy) : 1, steps);
    if (ks > 1 && a->mode == 0) {
        int rc = hip_rt_memset32(c->rt, (struct hip_dptr){ .a = a->y }, 0, (size_t)a->nz * (size_t)a->n_rows, e);
        if (rc)
            return rc;
    }
    return hip_rt_launch(c->rt, c->gemm[w->type], gx, gy, ks, 256, params, e);
}

int hip_ops_xprep(struct hip_ops *c, uint64_t x, int rows, int k, int x_stride, struct gemv_args *a, bool zero_y,
                  struct err *e)
{
    if ((size_t)rows * (size_t)k > c->xh_cap || (size_t)rows > c->xsc_cap)
        return err_set(e, ERR_INTERNAL, "hip: a tensor-core product on %d × %d activations is beyond its f16 buffer "
                       "(%zu elements)", rows, k, c->xh_cap);
    uint64_t sc = c->xsc.a, xh = c->xh.a;
    float lim = f16_lim(c);
    uint64_t y = zero_y ? a->y : 0;
    int ys = a->y_stride, nr = a->n_rows;
    void *p[] = { &x, &k, &x_stride, &lim, &sc, &xh, &y, &ys, &nr };
    a->xsc = sc;
    a->xh = xh;
    return hip_rt_launch(c->rt, c->k_mma_xprep, (unsigned)rows, 1, 1, 256, p, e);
}

/* y[z] (op)= W · x[z / x_div], z < nz; expert slices by sel when set. mode as gemv_args. */
int hip_ops_mm(struct hip_ops *c, const struct hip_mm *m, struct err *e)
{
    const struct dw *w = m->w, *w2 = m->w2;
    struct gemv_args a = {
        .w = w->d.a, .w2 = w2 ? w2->d.a : 0, .x = m->x.a, .y = m->y.a, .bias = m->bias.a, .bias2 = m->bias2.a,
        .sel = m->sel.a, .row_bytes = (int64_t)w->row_bytes, .expert_bytes = (int64_t)(w->row_bytes * (size_t)w->ne1),
        .n_rows = (int)w->ne1, .k = (int)w->ne0, .x_stride = m->x_stride, .y_stride = m->y_stride, .x_div = m->x_div,
        .nz = m->nz, .mode = m->mode,
    };
    return hip_ops_launch_mm(c, &a, w, w2, m->q, e);
}

int hip_ops_mm_dual(struct hip_ops *c, const struct hip_mm *m, struct err *e)
{
    const struct dw *w = m->w, *w2 = m->w2;
    struct gemv_args a = {
        .w = w->d.a, .w2 = w2->d.a, .x = m->x.a, .y = m->y.a, .y2 = m->y2.a, .bias = m->bias.a, .bias2 = m->bias2.a,
        .row_bytes = (int64_t)w->row_bytes, .n_rows = (int)w->ne1, .k = (int)w->ne0, .x_stride = m->x_stride,
        .y_stride = m->y_stride, .x_div = 1, .nz = m->nz, .mode = 3,
    };
    return hip_ops_launch_mm(c, &a, w, w2, m->q, e);
}

/* q8 copy of x [rows][k] into xq/xqd, for the GEMV that follows */
int hip_ops_quant(struct hip_ops *c, struct hip_dptr x, int rows, int k, int x_stride, struct err *e)
{
    uint64_t xa = x.a, q = c->xq.a, qd = c->xqd.a;
    void *p[] = { &xa, &k, &x_stride, &q, &qd };
    return hip_rt_launch(c->rt, c->k_quant, cdiv((size_t)k, 256), (unsigned)rows, 1, 256, p, e);
}

bool hip_ops_f16_ok(const struct hip_ops *c, int rows, int k)
{
    return c->use_mma && c->k_mma_xprep && c->warp == 32 && k % 2 == 0 && (size_t)rows * (size_t)k <= c->xh_cap &&
           (size_t)rows <= c->xsc_cap;
}

bool hip_ops_rms_f16_ok(const struct hip_ops *c, int rows, int n)
{
    return n <= HIP_RMS_F16_MAX && hip_ops_f16_ok(c, rows, n);
}

/* y[r] = rmsnorm(x[rows ? rows[r] : r]) · w; also its q8 copy into xq/xqd when q, its f16 copy into xh/xsc
 * when f16 */
int hip_ops_rms(struct hip_ops *c, struct hip_dptr y, struct hip_dptr x, struct hip_dptr w, struct hip_dptr rows,
                int nr, int n, int xs, int ys, bool q, bool f16, struct err *e)
{
    float eps = c->m->hp.rms_eps, lim = f16_lim(c);
    /* about 4 elements a thread, up to 1024 threads: the row stays in registers (kernels/misc.cu), which
     * the f16 copy needs (RMS_EPT = 8 elements a thread) */
    size_t nt = cdiv(cdiv((size_t)n, 4), (size_t)c->warp) * (size_t)c->warp;
    nt = nt > 1024 ? 1024 : nt;
    if (f16 && !hip_ops_rms_f16_ok(c, nr, n))
        return err_set(e, ERR_INTERNAL, "hip: rms_norm cannot write the f16 copy of %d rows of %d", nr, n);
    uint64_t ya = y.a, xa = x.a, wa = w.a, ra = rows.a, qq = q ? c->xq.a : 0, qd = q ? c->xqd.a : 0;
    uint64_t xh = f16 ? c->xh.a : 0, xsc = f16 ? c->xsc.a : 0;
    void *params[] = { &ya, &xa, &wa, &ra, &n, &eps, &xs, &ys, &qq, &qd, &xh, &xsc, &lim };
    return hip_rt_launch(c->rt, c->k_rms, (unsigned)nr, 1, 1, (unsigned)nt, params, e);
}

int hip_ops_swiglu_f16(struct hip_ops *c, struct hip_dptr g, struct hip_dptr u, int rows, int n, struct err *e)
{
    if (!c->k_swiglu_rows || !hip_ops_f16_ok(c, rows, n))
        return err_set(e, ERR_INTERNAL, "hip: swiglu_rows cannot write the f16 copy of %d rows of %d", rows, n);
    uint64_t ga = g.a, ua = u.a, xh = c->xh.a, xsc = c->xsc.a;
    float lim = f16_lim(c);
    void *params[] = { &ga, &ua, &n, &xh, &xsc, &lim };
    return hip_rt_launch(c->rt, c->k_swiglu_rows, (unsigned)rows, 1, 1, 1024, params, e);
}

int hip_ops_ew(struct hip_ops *c, hip_fn f, struct hip_dptr a, struct hip_dptr b, int n, struct err *e)
{
    uint64_t aa = a.a, ba = b.a;
    void *params[] = { &aa, &ba, &n };
    return hip_rt_launch(c->rt, f, cdiv((size_t)n, 256), 1, 1, 256, params, e);
}

void hip_ops_release(struct hip_ops *c)
{
    for (int i = 0; i < c->n_allocs; i++)
        hip_rt_free(c->rt, c->allocs[i]);
    free(c->allocs);
    c->allocs = NULL;
    c->n_allocs = c->cap_allocs = 0;
}
