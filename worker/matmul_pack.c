/* matmul_pack.c — weights repacked once for the row-interleaved kernels.
 *
 * A packed matrix holds groups of PQ4K_ROWS output rows; within a group each
 * super-block is laid out as quant_internal.h describes, so the kernel reads
 * one 64-byte line per 4 elements of 16 rows. Rows past n_out are zero. */
#include <stdlib.h>
#include <string.h>

#include "matmul.h"
#include "quant_internal.h"

struct matmul_packed {
    enum qtype wt;
    int64_t n_in, n_out;
    int64_t n_groups;   /* ceil(n_out / PQ4K_ROWS) */
    size_t gbytes;      /* bytes per group: n_in/256 super-blocks × PQ4K_SB */
    qpacked_fn kernel;
    uint8_t *data;      /* [n_groups][gbytes] */
};

static void pack_q4_k_group(const uint8_t *W, size_t wrow, int64_t r0, int64_t n_out, int64_t nsb, uint8_t *dst)
{
    memset(dst, 0, (size_t)nsb * PQ4K_SB);
    for (int r = 0; r < PQ4K_ROWS && r0 + r < n_out; r++) {
        const struct blk_q4_k *b = (const struct blk_q4_k *)(W + (size_t)(r0 + r) * wrow);
        for (int64_t i = 0; i < nsb; i++) {
            uint8_t *g = dst + (size_t)i * PQ4K_SB;
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 8; k++)
                    memcpy(g + ((c * 8 + k) * PQ4K_ROWS + r) * 4, b[i].qs + 32 * c + 4 * k, 4);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                k4_scale_min(j, b[i].scales, &sc, &m);
                g[PQ4K_OFF_SC + j * PQ4K_ROWS + r] = sc;
                int16_t m16 = m;
                memcpy(g + PQ4K_OFF_MN + (((j / 2) * PQ4K_ROWS + r) * 2 + j % 2) * 2, &m16, 2);
            }
            memcpy(g + PQ4K_OFF_D + 2 * r, &b[i].d, 2);
            memcpy(g + PQ4K_OFF_DMIN + 2 * r, &b[i].dmin, 2);
        }
    }
}

struct matmul_packed *matmul_pack(enum qtype wt, const void *W, int64_t n_in, int64_t n_out)
{
    const struct quant_kernels *k = quant_kernels_get();
    if (wt != QT_Q4_K || !k->packed[wt] || n_in <= 0 || n_in % QK_K || n_out <= 0)
        return NULL;
    struct matmul_packed *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->wt = wt;
    p->n_in = n_in;
    p->n_out = n_out;
    p->n_groups = (n_out + PQ4K_ROWS - 1) / PQ4K_ROWS;
    p->gbytes = (size_t)(n_in / QK_K) * PQ4K_SB;
    p->kernel = k->packed[wt];
    size_t total = (size_t)p->n_groups * p->gbytes;
    p->data = aligned_alloc(64, (total + 63) & ~(size_t)63);
    if (!p->data) {
        free(p);
        return NULL;
    }
    size_t wrow = qtype_row_size(wt, n_in);
    for (int64_t g = 0; g < p->n_groups; g++)
        pack_q4_k_group(W, wrow, g * PQ4K_ROWS, n_out, n_in / QK_K, p->data + (size_t)g * p->gbytes);
    return p;
}

void matmul_packed_free(struct matmul_packed *p)
{
    if (!p)
        return;
    free(p->data);
    free(p);
}

size_t matmul_packed_bytes(const struct matmul_packed *p) { return p ? (size_t)p->n_groups * p->gbytes : 0; }

struct pk_job {
    const struct matmul_packed *p;
    const struct quant_kernels *k;
    const float *X;    /* [n_tok][n_in] */
    uint8_t *A;        /* [n_tok][arow] Q8_K activations */
    size_t arow;
    int64_t n_tok;
    int64_t chunk;     /* groups per task */
    float *Y;          /* [n_tok][n_out] */
};

static void pk_quant_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    struct pk_job *j = ctx;
    j->k->act[QT_Q8_K](j->X + t * j->p->n_in, j->A + (size_t)t * j->arow, j->p->n_in);
}

static void pk_rows_task(void *ctx, int64_t c, int worker)
{
    (void)worker;
    const struct pk_job *j = ctx;
    const struct matmul_packed *p = j->p;
    float tmp[PQ_MAXT * PQ4K_ROWS];
    int64_t g1 = (c + 1) * j->chunk < p->n_groups ? (c + 1) * j->chunk : p->n_groups;
    for (int64_t g = c * j->chunk; g < g1; g++) {
        const uint8_t *grp = p->data + (size_t)g * p->gbytes;
        int64_t r0 = g * PQ4K_ROWS, nr = p->n_out - r0 < PQ4K_ROWS ? p->n_out - r0 : PQ4K_ROWS;
        for (int64_t t0 = 0; t0 < j->n_tok; t0 += PQ_MAXT) {
            int nt = (int)(j->n_tok - t0 < PQ_MAXT ? j->n_tok - t0 : PQ_MAXT);
            p->kernel(p->n_in, grp, j->A + (size_t)t0 * j->arow, j->arow, nt, tmp);
            for (int t = 0; t < nt; t++)
                memcpy(j->Y + (t0 + t) * p->n_out + r0, tmp + PQ4K_ROWS * t, (size_t)nr * sizeof(float));
        }
    }
}

void matmul_packed_run(struct tpool *tp, struct matmul_scratch *s, const struct matmul_packed *p, const float *X,
                       int64_t n_tok, float *Y)
{
    if (!p || n_tok <= 0)
        return;
    struct pk_job j = {.p = p, .k = quant_kernels_get(), .X = X, .n_tok = n_tok, .Y = Y};
    j.arow = qtype_row_size(QT_Q8_K, p->n_in);
    size_t need = (size_t)n_tok * j.arow;
    if (s->cap < need) {
        size_t cap = (need + 63) & ~(size_t)63;
        void *buf = aligned_alloc(64, cap);
        if (!buf) {
            for (int64_t i = 0; i < n_tok * p->n_out; i++)
                Y[i] = __builtin_nanf("");
            return;
        }
        free(s->buf);
        s->buf = buf;
        s->cap = cap;
    }
    j.A = s->buf;
    tpool_run(tp, pk_quant_task, &j, n_tok);
    int64_t chunk = p->n_groups / ((int64_t)tpool_size(tp) * 8);
    j.chunk = chunk < 1 ? 1 : chunk;
    tpool_run(tp, pk_rows_task, &j, (p->n_groups + j.chunk - 1) / j.chunk);
}
