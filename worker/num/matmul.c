/* matmul.c — Y = W·X for any weight type, threaded over output rows.
 *
 * 1. Every activation row is quantized once into wt's vec_dot type (in the
 *    caller's scratch; F32 weights use X directly).
 * 2. Output rows are split into chunks handed to the thread pool. Inside a
 *    chunk, tokens are processed in tiles: for each tile, every weight row of
 *    the chunk is dotted with all tokens of the tile. The chunk's weights are
 *    read from memory once and then stay in cache for all tiles, and the
 *    kernels' multi-token entry (when a SIMD level has one) unpacks each
 *    weight block once per tile instead of once per token.
 * 3. For batches, two activation side layouts save per-token work in the
 *    multi-token kernels: Q8_0 rows as q+128 bytes plus f32 scales (VNNI
 *    level), and F16 rows widened to f32 (AVX-512). Every path gives the same
 *    bits as vec_dot on the ordinary rows, whatever the token count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "quant_internal.h"

#define TOK_TILE 8 /* tokens per tile; also the most one dot_multi call takes */

struct mm_job {
    const struct quant_kernels *k;
    enum qtype wt;
    const uint8_t *W;   /* [n_out][wrow bytes] */
    size_t wrow;        /* bytes per weight row */
    const uint8_t *A;   /* [n_tok][arow bytes] quantized activations */
    size_t arow;        /* bytes per activation row */
    const float *X;     /* [n_tok][n_in] f32 input (for the quantize step) */
    int64_t n_in, n_out, n_tok;
    int64_t chunk;      /* output rows per task */
    qdot_prep_fn prep;  /* set when the prepared Q8_0 layout is used */
    uint8_t *PQ;        /* [n_tok][n_in] prepared quants (q + 128) */
    float *PD;          /* [n_tok][n_in/32] prepared block scales */
    qdot_multi_fn f32a; /* set when F16 activations are widened once to f32 */
    float *PF;          /* [n_tok][n_in] the f16-rounded activations as f32 */
    float *Y;           /* [n_tok][n_out] */
};

static void mm_quant_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    struct mm_job *j = ctx;
    void *row = (void *)(j->A + (size_t)t * j->arow);
    j->k->act[qtype_get(j->wt)->vec_dot](j->X + t * j->n_in, row, j->n_in);
    if (j->prep)
        quant_prep_q8_0(row, j->n_in, j->PQ + t * j->n_in, j->PD + t * (j->n_in / QK));
    if (j->f32a)
        j->k->deq[QT_F16](row, j->PF + t * j->n_in, j->n_in);
}

static void mm_rows_task(void *ctx, int64_t c, int worker)
{
    (void)worker;
    const struct mm_job *j = ctx;
    int64_t r0 = c * j->chunk, r1 = r0 + j->chunk;
    if (r1 > j->n_out)
        r1 = j->n_out;
    qdot_fn dot = j->k->dot[j->wt];
    qdot_multi_fn multi = j->k->dot_multi[j->wt];
    if (j->n_tok == 1) {
        for (int64_t r = r0; r < r1; r++)
            j->Y[r] = dot(j->n_in, j->W + (size_t)r * j->wrow, j->A);
        return;
    }
    float tmp[TOK_TILE];
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += TOK_TILE) {
        /* the chunk's weights (≤ 64 KiB) stay cached across tiles; one tile's activations across rows */
        int nt = (int)(j->n_tok - t0 < TOK_TILE ? j->n_tok - t0 : TOK_TILE);
        const uint8_t *a = j->A + (size_t)t0 * j->arow;
        for (int64_t r = r0; r < r1; r++) {
            const uint8_t *w = j->W + (size_t)r * j->wrow;
            if (j->prep && nt > 1) {
                j->prep(j->n_in, w, j->PQ + t0 * j->n_in, (size_t)j->n_in, j->PD + t0 * (j->n_in / QK),
                        (size_t)(j->n_in / QK), nt, tmp);
            } else if (j->f32a && nt > 1) {
                j->f32a(j->n_in, w, j->PF + t0 * j->n_in, (size_t)j->n_in * sizeof(float), nt, tmp);
            } else if (multi && nt > 1) {
                multi(j->n_in, w, a, j->arow, nt, tmp);
            } else {
                for (int t = 0; t < nt; t++)
                    tmp[t] = dot(j->n_in, w, a + (size_t)t * j->arow);
            }
            for (int t = 0; t < nt; t++)
                j->Y[(t0 + t) * j->n_out + r] = tmp[t];
        }
    }
}

void matmul(struct tpool *tp, struct matmul_scratch *s, enum qtype wt, const void *W,
            int64_t n_in, int64_t n_out, const float *X, int64_t n_tok, float *Y)
{
    const struct qtype_info *qi = qtype_get((uint32_t)wt);
    if (n_tok <= 0 || n_out <= 0)
        return;
    if (!qi || !qi->compute || n_in <= 0 || n_in % qi->blck) {
        /* programming error upstream; make it visible instead of returning garbage */
        for (int64_t i = 0; i < n_tok * n_out; i++)
            Y[i] = NAN;
        return;
    }
    struct mm_job j = {
        .k = quant_kernels_get(), .wt = wt, .W = W, .wrow = qtype_row_size(wt, n_in),
        .X = X, .n_in = n_in, .n_out = n_out, .n_tok = n_tok, .Y = Y,
    };
    enum qtype vd = qi->vec_dot;
    j.arow = qtype_row_size(vd, n_in);
    if (vd == QT_F32) {
        j.A = (const uint8_t *)X;
    } else {
        j.prep = n_tok > 1 && vd == QT_Q8_0 ? j.k->dot_prep[wt] : NULL;
        size_t need = (size_t)n_tok * j.arow;
        size_t pq_off = (need + 63) & ~(size_t)63, pd_off = pq_off + (((size_t)(n_tok * n_in) + 63) & ~(size_t)63);
        if (j.prep)
            need = pd_off + (size_t)n_tok * (size_t)(n_in / QK) * sizeof(float);
        j.f32a = n_tok > 1 && vd == QT_F16 ? j.k->dot_f32a[wt] : NULL;
        size_t pf_off = pq_off;
        if (j.f32a)
            need = pf_off + (size_t)n_tok * (size_t)n_in * sizeof(float);
        if (s->cap < need) {
            size_t cap = (need + 63) & ~(size_t)63;
            void *p = aligned_alloc(64, cap);
            if (!p) {
                for (int64_t i = 0; i < n_tok * n_out; i++)
                    Y[i] = NAN;
                return;
            }
            free(s->buf);
            s->buf = p;
            s->cap = cap;
        }
        j.A = s->buf;
        if (j.prep) {
            j.PQ = (uint8_t *)s->buf + pq_off;
            j.PD = (float *)((uint8_t *)s->buf + pd_off);
        }
        if (j.f32a)
            j.PF = (float *)((uint8_t *)s->buf + pf_off);
        tpool_run(tp, mm_quant_task, &j, n_tok);
    }
    int nth = tpool_size(tp);
    /* Enough chunks to balance the threads, each big enough that the per-task
     * overhead vanishes; for several tokens keep a chunk's weights cache-sized. */
    int64_t chunk = n_out / ((int64_t)nth * 16);
    if (chunk < 16)
        chunk = 16;
    if (n_tok > 1 && chunk * (int64_t)j.wrow > 64 * 1024) {
        chunk = (64 * 1024) / (int64_t)j.wrow;
        if (chunk < 4)
            chunk = 4;
    }
    j.chunk = chunk;
    tpool_run(tp, mm_rows_task, &j, (n_out + chunk - 1) / chunk);
}

void matmul_scratch_free(struct matmul_scratch *s)
{
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}
