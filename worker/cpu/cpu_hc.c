/* cpu_hc.c — hyper-connection mix and write-back on the CPU (cpu_hc.h).
 * The operation order and scalings are llama.cpp 80fb11a's graph
 * (qwen4exp.cpp build_hc_mix / build_hc_combine): 1/hc multiplies before
 * the SiLU and after the stream sum, the weight is 2·sigmoid(j·(1/hc)). */
#include "cpu_hc.h"

#include <stdlib.h>
#include <string.h>

#include "../num/gdn.h"
#include "../num/ops.h"

struct cpu_hc {
    const struct model *m;
    struct tpool *tp;
    cpu_hc_mm_fn mm;
    void *mm_ctx;
    int hc, E;
    float *xn;    /* [B][hc·n_embd] per-stream normed input ⊙ norm weight */
    float *lo;    /* [B][hc_lr] silu(down·xn / hc) */
    float *gate;  /* [B][hc·n_embd] up·lo, then sigmoid */
    float *j;     /* [B][hc] write-back logits of the last mix with an inject */
    uint64_t bytes;
};

int cpu_hc_create(struct cpu_hc **out, const struct model *m, int n_batch, struct tpool *tp, cpu_hc_mm_fn mm,
                  void *mm_ctx, struct err *e)
{
    *out = NULL;
    const struct hparams *hp = &m->hp;
    struct cpu_hc *hc = calloc(1, sizeof *hc);
    if (!hc)
        return err_set(e, ERR_NOMEM, "engine: out of memory");
    hc->m = m;
    hc->tp = tp;
    hc->mm = mm;
    hc->mm_ctx = mm_ctx;
    hc->hc = hp->hc;
    hc->E = hp->n_embd;
    const size_t B = (size_t)n_batch, W = (size_t)hp->hc * (size_t)hp->n_embd;
    hc->xn = calloc(B * W, sizeof(float));
    hc->lo = calloc(B * (size_t)hp->hc_lr, sizeof(float));
    hc->gate = calloc(B * W, sizeof(float));
    hc->j = calloc(B * (size_t)hp->hc, sizeof(float));
    hc->bytes = sizeof(float) * B * (2 * W + (size_t)hp->hc_lr + (size_t)hp->hc);
    if (!hc->xn || !hc->lo || !hc->gate || !hc->j) {
        cpu_hc_free(hc);
        return err_set(e, ERR_NOMEM, "engine: out of memory for the hyper-connection scratch (n_batch %d)", n_batch);
    }
    *out = hc;
    return 0;
}

void cpu_hc_free(struct cpu_hc *hc)
{
    if (!hc)
        return;
    free(hc->xn);
    free(hc->lo);
    free(hc->gate);
    free(hc->j);
    free(hc);
}

uint64_t cpu_hc_bytes(const struct cpu_hc *hc) { return hc ? hc->bytes : 0; }

struct hc_job {
    struct cpu_hc *hc;
    const struct hc_mix *mix;
    const float *X;
    float *h;
    float *x;
    const float *a;
};

static void run_rows(struct cpu_hc *hc, tpool_fn fn, void *ctx, int n)
{
    if (n < 8) {
        for (int t = 0; t < n; t++)
            fn(ctx, t, 0);
    } else {
        tpool_run(hc->tp, fn, ctx, n);
    }
}

static void norm_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct hc_job *j = ctx;
    const struct cpu_hc *hc = j->hc;
    const size_t W = (size_t)hc->hc * (size_t)hc->E;
    for (int s = 0; s < hc->hc; s++)
        ops_rms_norm(hc->xn + (size_t)t * W + (size_t)s * hc->E, j->X + (size_t)t * W + (size_t)s * hc->E,
                     j->mix->norm.data + (size_t)s * hc->E, hc->E, hc->m->hp.rms_eps);
}

static void mean_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct hc_job *j = ctx;
    const struct cpu_hc *hc = j->hc;
    const int E = hc->E;
    const size_t W = (size_t)hc->hc * (size_t)E;
    const float *xn = hc->xn + (size_t)t * W, *g = hc->gate + (size_t)t * W;
    float *h = j->h + (size_t)t * E;
    const float inv = 1.0f / (float)hc->hc;
    for (int i = 0; i < E; i++) {
        float acc = xn[i] * gdn_sigmoid(g[i]);
        for (int s = 1; s < hc->hc; s++)
            acc = acc + xn[(size_t)s * E + i] * gdn_sigmoid(g[(size_t)s * E + i]);
        h[i] = acc * inv;
    }
}

void cpu_hc_mix(struct cpu_hc *hc, const struct hc_mix *mix, const float *X, int n, float *h)
{
    const int lr = hc->m->hp.hc_lr;
    struct hc_job j = { .hc = hc, .mix = mix, .X = X, .h = h };
    run_rows(hc, norm_task, &j, n);
    hc->mm(hc->mm_ctx, &mix->down, hc->xn, n, hc->lo);
    const float inv = 1.0f / (float)hc->hc;
    for (size_t i = 0; i < (size_t)n * (size_t)lr; i++)
        hc->lo[i] = ops_silu(hc->lo[i] * inv);
    hc->mm(hc->mm_ctx, &mix->up, hc->lo, n, hc->gate);
    run_rows(hc, mean_task, &j, n);
    if (mix->inject.data)
        hc->mm(hc->mm_ctx, &mix->inject, hc->xn, n, hc->j);
}

static void combine_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    const struct hc_job *j = ctx;
    const struct cpu_hc *hc = j->hc;
    const int E = hc->E;
    float *x = j->x + (size_t)t * (size_t)hc->hc * (size_t)E;
    const float *a = j->a + (size_t)t * E;
    const float inv = 1.0f / (float)hc->hc;
    for (int s = 0; s < hc->hc; s++) {
        const float w = 2.0f * gdn_sigmoid(hc->j[(size_t)t * hc->hc + s] * inv);
        float *xs = x + (size_t)s * E;
        for (int i = 0; i < E; i++)
            xs[i] = xs[i] + a[i] * w;
    }
}

void cpu_hc_combine(struct cpu_hc *hc, float *x, const float *a, int n)
{
    struct hc_job j = { .hc = hc, .x = x, .a = a };
    run_rows(hc, combine_task, &j, n);
}
