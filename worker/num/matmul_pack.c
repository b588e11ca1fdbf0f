/* matmul_pack.c — weights repacked once for the row-interleaved kernels.
 *
 * A packed matrix holds groups of PQ4K_ROWS (16) output rows; within a group
 * each block is laid out as quant_internal.h describes (packed Q4_K, Q5_K,
 * Q6_K, Q8_0), so the kernel reads one 64-byte line per 4 elements of 16 rows and
 * one vpdpbusd serves all 16 rows. Rows past n_out are zero. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "matmul.h"
#include "quant_internal.h"

struct matmul_packed {
    enum qtype wt;
    enum qtype vd;      /* activation type: Q8_K (Q4_K) or Q8_0 (Q8_0) */
    int64_t n_in, n_out;
    int64_t n_groups;   /* ceil(n_out / PQ4K_ROWS) */
    size_t gbytes;      /* bytes per group: blocks per row × PQ4K_SB / PQ8_SB */
    qpacked_fn kernel;
    uint8_t *data;      /* [n_groups][gbytes] */
    bool in_arena;      /* data lies in a matmul_arena (not freed with the matrix) */
};

#define ARENA_ALIGN ((size_t)2 << 20) /* a transparent huge page */

void matmul_arena_reserve(struct matmul_arena *a, size_t bytes)
{
    *a = (struct matmul_arena){0};
    if (bytes == 0)
        return;
    size_t cap = (bytes + 4095) & ~(size_t)4095, len = cap + ARENA_ALIGN;
    uint8_t *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED)
        return;
    /* keep the 2 MiB-aligned part: huge pages need aligned 2 MiB extents */
    uint8_t *base = (uint8_t *)(((uintptr_t)m + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1));
    if (base > m)
        munmap(m, (size_t)(base - m));
    if (m + len > base + cap)
        munmap(base + cap, (size_t)(m + len - (base + cap)));
#ifdef MADV_HUGEPAGE
    madvise(base, cap, MADV_HUGEPAGE); /* advice only: without THP the pages are small */
#endif
    a->base = base;
    a->cap = cap;
}

void matmul_arena_release(struct matmul_arena *a)
{
    if (a->base)
        munmap(a->base, a->cap);
    *a = (struct matmul_arena){0};
}

static bool packable_shape(enum qtype wt, int64_t n_in, int64_t n_out)
{
    return (wt == QT_Q4_K || wt == QT_Q5_K || wt == QT_Q6_K || wt == QT_Q8_0) && n_in > 0 && n_out > 0 &&
           n_in % qtype_get(wt)->blck == 0;
}

/* The engine packs only where the dispatcher's level has a fast packed kernel. */
static bool packable(enum qtype wt, int64_t n_in, int64_t n_out)
{
    return packable_shape(wt, n_in, n_out) && quant_kernels_get()->packed[wt];
}

static size_t group_bytes(enum qtype wt, int64_t n_in)
{
    return wt == QT_Q4_K   ? (size_t)(n_in / QK_K) * PQ4K_SB
           : wt == QT_Q5_K ? (size_t)(n_in / QK_K) * PQ5K_SB
           : wt == QT_Q6_K ? (size_t)(n_in / QK_K) * PQ6K_SB
                           : (size_t)(n_in / QK) * PQ8_SB;
}

static size_t pack_size(enum qtype wt, int64_t n_in, int64_t n_out)
{
    size_t total = (size_t)((n_out + PQ4K_ROWS - 1) / PQ4K_ROWS) * group_bytes(wt, n_in);
    return (total + 63) & ~(size_t)63;
}

size_t matmul_pack_size(enum qtype wt, int64_t n_in, int64_t n_out)
{
    return packable(wt, n_in, n_out) ? pack_size(wt, n_in, n_out) : 0;
}

/* Q4_K, and Q5_K (q5 != 0: same fields plus qh, PQ5K_SB per super-block). */
static void pack_k4_group(const uint8_t *W, size_t wrow, int64_t r0, int64_t n_out, int64_t nsb, uint8_t *dst, int q5)
{
    const size_t sb = q5 ? PQ5K_SB : PQ4K_SB;
    memset(dst, 0, (size_t)nsb * sb);
    for (int r = 0; r < PQ4K_ROWS && r0 + r < n_out; r++) {
        for (int64_t i = 0; i < nsb; i++) {
            /* Q5_K shares Q4_K's d, dmin, scales and qs; only their offsets differ */
            const uint8_t *B = W + (size_t)(r0 + r) * wrow + (size_t)i * (q5 ? 176 : 144);
            struct blk_q4_k bk;
            memcpy(&bk, B, 16);
            memcpy(bk.qs, B + (q5 ? 48 : 16), 128);
            const struct blk_q4_k *b = &bk;
            uint8_t *g = dst + (size_t)i * sb;
            if (q5)
                for (int k = 0; k < 8; k++)
                    memcpy(g + PQ5K_OFF_QH + (k * PQ4K_ROWS + r) * 4, B + 16 + 4 * k, 4);
            for (int c = 0; c < 4; c++)
                for (int k = 0; k < 8; k++)
                    memcpy(g + ((c * 8 + k) * PQ4K_ROWS + r) * 4, b->qs + 32 * c + 4 * k, 4);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, m;
                k4_scale_min(j, b->scales, &sc, &m);
                g[PQ4K_OFF_SC + j * PQ4K_ROWS + r] = sc;
                int16_t m16 = m;
                memcpy(g + PQ4K_OFF_MN + (((j / 2) * PQ4K_ROWS + r) * 2 + j % 2) * 2, &m16, 2);
            }
            memcpy(g + PQ4K_OFF_D + 2 * r, &b->d, 2);
            memcpy(g + PQ4K_OFF_DMIN + 2 * r, &b->dmin, 2);
        }
    }
}

static void pack_q8_0_group(const uint8_t *W, size_t wrow, int64_t r0, int64_t n_out, int64_t nb, uint8_t *dst)
{
    memset(dst, 0, (size_t)nb * PQ8_SB);
    for (int r = 0; r < PQ4K_ROWS; r++) {
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *g = dst + (size_t)i * PQ8_SB;
            if (r0 + r >= n_out) { /* zero weights: stored bias 0x80, scale 0 */
                for (int k = 0; k < 8; k++)
                    memset(g + (k * PQ4K_ROWS + r) * 4, 0x80, 4);
                continue;
            }
            const struct blk_q8_0 *b = (const struct blk_q8_0 *)(W + (size_t)(r0 + r) * wrow) + i;
            for (int k = 0; k < 8; k++)
                for (int c = 0; c < 4; c++)
                    g[(k * PQ4K_ROWS + r) * 4 + c] = (uint8_t)(b->qs[4 * k + c] ^ 0x80);
            memcpy(g + PQ8_OFF_D + 2 * r, &b->d, 2);
        }
    }
}

static void pack_q6_k_group(const uint8_t *W, size_t wrow, int64_t r0, int64_t n_out, int64_t nsb, uint8_t *dst)
{
    memset(dst, 0, (size_t)nsb * PQ6K_SB);
    for (int r = 0; r < PQ4K_ROWS && r0 + r < n_out; r++) {
        const struct blk_q6_k *b = (const struct blk_q6_k *)(W + (size_t)(r0 + r) * wrow);
        for (int64_t i = 0; i < nsb; i++) {
            uint8_t *g = dst + (size_t)i * PQ6K_SB;
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 8; k++) {
                    for (int c = 0; c < 2; c++)
                        memcpy(g + (((h * 2 + c) * 8 + k) * PQ4K_ROWS + r) * 4, b[i].ql + 64 * h + 32 * c + 4 * k, 4);
                    memcpy(g + PQ6K_OFF_QH + ((h * 8 + k) * PQ4K_ROWS + r) * 4, b[i].qh + 32 * h + 4 * k, 4);
                }
            for (int gi = 0; gi < 16; gi++)
                g[PQ6K_OFF_SC + gi * PQ4K_ROWS + r] = (uint8_t)b[i].scales[gi];
            memcpy(g + PQ6K_OFF_D + 2 * r, &b[i].d, 2);
        }
    }
}

static struct matmul_packed *pack_with(enum qtype wt, const void *W, int64_t n_in, int64_t n_out,
                                       struct matmul_arena *a, qpacked_fn kernel)
{
    struct matmul_packed *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->wt = wt;
    p->vd = qtype_get(wt)->vec_dot;
    p->n_in = n_in;
    p->n_out = n_out;
    p->n_groups = (n_out + PQ4K_ROWS - 1) / PQ4K_ROWS;
    p->gbytes = group_bytes(wt, n_in);
    p->kernel = kernel;
    size_t size = pack_size(wt, n_in, n_out);
    if (a && a->base && a->cap - a->used >= size) {
        p->data = a->base + a->used;
        p->in_arena = true;
        a->used += size;
    } else {
        p->data = aligned_alloc(64, size);
    }
    if (!p->data) {
        free(p);
        return NULL;
    }
    size_t wrow = qtype_row_size(wt, n_in);
    for (int64_t g = 0; g < p->n_groups; g++) {
        uint8_t *dst = p->data + (size_t)g * p->gbytes;
        if (wt == QT_Q4_K || wt == QT_Q5_K)
            pack_k4_group(W, wrow, g * PQ4K_ROWS, n_out, n_in / QK_K, dst, wt == QT_Q5_K);
        else if (wt == QT_Q6_K)
            pack_q6_k_group(W, wrow, g * PQ4K_ROWS, n_out, n_in / QK_K, dst);
        else
            pack_q8_0_group(W, wrow, g * PQ4K_ROWS, n_out, n_in / QK, dst);
    }
    return p;
}

struct matmul_packed *matmul_pack(enum qtype wt, const void *W, int64_t n_in, int64_t n_out, struct matmul_arena *a)
{
    if (!packable(wt, n_in, n_out))
        return NULL;
    return pack_with(wt, W, n_in, n_out, a, quant_kernels_get()->packed[wt]);
}

struct matmul_packed *matmul_pack_level(enum qtype wt, const void *W, int64_t n_in, int64_t n_out,
                                        struct matmul_arena *a, int level)
{
    const struct quant_kernels *k = quant_kernels_level(level);
    if (!k || !packable_shape(wt, n_in, n_out))
        return NULL;
    return pack_with(wt, W, n_in, n_out, a, k->packed[wt] ? k->packed[wt] : quant_packed_ref(wt));
}

bool matmul_packed_simd(const struct matmul_packed *p) { return p && p->kernel != quant_packed_ref(p->wt); }

void matmul_packed_free(struct matmul_packed *p)
{
    if (!p)
        return;
    if (!p->in_arena)
        free(p->data);
    free(p);
}

size_t matmul_packed_bytes(const struct matmul_packed *p) { return p ? (size_t)p->n_groups * p->gbytes : 0; }

struct pk_job {
    const struct matmul_packed *p;
    const struct quant_kernels *k;
    const float *X;    /* [n_tok][n_in] */
    uint8_t *A;        /* [n_tok][arow] activations (Q8_K or Q8_0) */
    size_t arow;
    uint8_t *AUX;      /* [n_tok][auxrow] Q8_0 side data: f32 scales, int32 −128·Σq */
    size_t auxrow;
    int64_t n_tok;
    int64_t chunk;     /* groups per task */
    float *Y;          /* [n_tok][n_out] */
};

/* One f32 row → the packed kernel's activation row (row) and, for Q8_0, its side data (aux). */
static void pk_quant_row(const struct matmul_packed *p, const struct quant_kernels *k, const float *x, uint8_t *row,
                         uint8_t *aux)
{
    const int64_t n = p->n_in;
    k->act[p->vd](x, row, n);
    if (p->vd == QT_Q8_0) {
        const struct blk_q8_0 *b = (const struct blk_q8_0 *)row;
        float *ad = (float *)aux;
        int32_t *corr = (int32_t *)(ad + n / QK);
        for (int64_t i = 0; i < n / QK; i++) {
            int sum = 0;
            for (int c = 0; c < QK; c++)
                sum += b[i].qs[c];
            ad[i] = fp16_to_f32(b[i].d);
            corr[i] = -128 * sum;
        }
    }
}

static void pk_quant_task(void *ctx, int64_t t, int worker)
{
    (void)worker;
    struct pk_job *j = ctx;
    pk_quant_row(j->p, j->k, j->X + t * j->p->n_in, j->A + (size_t)t * j->arow, j->AUX + (size_t)t * j->auxrow);
}

/* Tokens per block: a block's activations (≈ 64 × 1.1 KiB for n_in = 1024)
 * stay in L2 while the task's weight groups (≤ 256 KiB) are walked once per
 * block, so neither side is streamed from memory once per group/token. */
#define PK_TOK_BLOCK 64

static void pk_rows_task(void *ctx, int64_t c, int worker)
{
    (void)worker;
    const struct pk_job *j = ctx;
    const struct matmul_packed *p = j->p;
    float tmp[PQ_MAXT * PQ4K_ROWS];
    int64_t g0 = c * j->chunk, g1 = g0 + j->chunk < p->n_groups ? g0 + j->chunk : p->n_groups;
    for (int64_t tb = 0; tb < j->n_tok; tb += PK_TOK_BLOCK) {
        int64_t te = tb + PK_TOK_BLOCK < j->n_tok ? tb + PK_TOK_BLOCK : j->n_tok;
        for (int64_t g = g0; g < g1; g++) {
            const uint8_t *grp = p->data + (size_t)g * p->gbytes;
            int64_t r0 = g * PQ4K_ROWS, nr = p->n_out - r0 < PQ4K_ROWS ? p->n_out - r0 : PQ4K_ROWS;
            for (int64_t t0 = tb; t0 < te; t0 += PQ_MAXT) {
                int nt = (int)(te - t0 < PQ_MAXT ? te - t0 : PQ_MAXT);
                p->kernel(p->n_in, grp, j->A + (size_t)t0 * j->arow, j->arow, j->AUX + (size_t)t0 * j->auxrow,
                          j->auxrow, nt, tmp);
                for (int t = 0; t < nt; t++)
                    memcpy(j->Y + (t0 + t) * p->n_out + r0, tmp + PQ4K_ROWS * t, (size_t)nr * sizeof(float));
            }
        }
    }
}

void matmul_packed_run(struct tpool *tp, struct matmul_scratch *s, const struct matmul_packed *p, const float *X,
                       int64_t n_tok, float *Y)
{
    if (!p || n_tok <= 0)
        return;
    struct pk_job j = {.p = p, .k = quant_kernels_get(), .X = X, .n_tok = n_tok, .Y = Y};
    j.arow = qtype_row_size(p->vd, p->n_in);
    j.auxrow = p->vd == QT_Q8_0 ? (size_t)(p->n_in / QK) * 8 : 0;
    size_t aoff = ((size_t)n_tok * j.arow + 63) & ~(size_t)63;
    size_t need = aoff + (size_t)n_tok * j.auxrow;
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
    j.AUX = (uint8_t *)s->buf + aoff;
    tpool_run(tp, pk_quant_task, &j, n_tok);
    int64_t chunk = p->n_groups / ((int64_t)tpool_size(tp) * 8);
    if (n_tok > 1 && chunk * (int64_t)p->gbytes > 256 * 1024)
        chunk = (256 * 1024) / (int64_t)p->gbytes;
    j.chunk = chunk < 1 ? 1 : chunk;
    tpool_run(tp, pk_rows_task, &j, (p->n_groups + j.chunk - 1) / j.chunk);
}

bool matmul_packed_one_token(const struct matmul_packed *p)
{
    /* Measured per call, 1 token, matrices larger than the caches: packed Q8_0 reads its 544-byte
     * 16-row blocks at the memory's speed, the file layout's 34-byte blocks only at ~60% of it;
     * for the K-quants the file-layout kernels are as fast or faster. */
    return p && p->wt == QT_Q8_0;
}

/* One token through up to MATMUL_GROUP_MAX packed matrices, in one pool dispatch. */
struct pk1_job {
    const struct matmul_packed *p[MATMUL_GROUP_MAX];
    const uint8_t *A[MATMUL_GROUP_MAX];   /* activation row of item k (its vec_dot type) */
    const uint8_t *AUX[MATMUL_GROUP_MAX]; /* its Q8_0 side data (scales, corrections) */
    float *Y[MATMUL_GROUP_MAX];           /* [n_out of item k] */
    int64_t chunk[MATMUL_GROUP_MAX];      /* groups per task */
    int64_t first[MATMUL_GROUP_MAX + 1];  /* first task of each item */
};

static void pk1_task(void *ctx, int64_t i, int worker)
{
    (void)worker;
    const struct pk1_job *j = ctx;
    int k = 0;
    while (i >= j->first[k + 1])
        k++;
    const struct matmul_packed *p = j->p[k];
    float tmp[PQ4K_ROWS];
    int64_t g0 = (i - j->first[k]) * j->chunk[k], g1 = g0 + j->chunk[k] < p->n_groups ? g0 + j->chunk[k] : p->n_groups;
    for (int64_t g = g0; g < g1; g++) {
        int64_t r0 = g * PQ4K_ROWS, nr = p->n_out - r0 < PQ4K_ROWS ? p->n_out - r0 : PQ4K_ROWS;
        if (nr == PQ4K_ROWS) {
            p->kernel(p->n_in, p->data + (size_t)g * p->gbytes, j->A[k], 0, j->AUX[k], 0, 1, j->Y[k] + r0);
        } else {
            p->kernel(p->n_in, p->data + (size_t)g * p->gbytes, j->A[k], 0, j->AUX[k], 0, 1, tmp);
            memcpy(j->Y[k] + r0, tmp, (size_t)nr * sizeof(float));
        }
    }
}

void matmul_packed_run_group(struct tpool *tp, struct matmul_scratch *s, const struct matmul_packed *const *p,
                             const float *const *X, float *const *Y, int n)
{
    if (n <= 0 || n > MATMUL_GROUP_MAX)
        return;
    struct pk1_job j;
    memset(&j, 0, sizeof j);
    const struct quant_kernels *k = quant_kernels_get();
    size_t off[MATMUL_GROUP_MAX], need = 0;
    for (int i = 0; i < n; i++) {
        off[i] = need;
        need += ((qtype_row_size(p[i]->vd, p[i]->n_in) + 63) & ~(size_t)63) + (size_t)(p[i]->n_in / QK) * 8 + 64;
    }
    if (s->cap < need) {
        size_t cap = (need + 63) & ~(size_t)63;
        void *buf = aligned_alloc(64, cap);
        if (!buf) {
            for (int i = 0; i < n; i++)
                for (int64_t r = 0; r < p[i]->n_out; r++)
                    Y[i][r] = __builtin_nanf("");
            return;
        }
        free(s->buf);
        s->buf = buf;
        s->cap = cap;
    }
    const int nth = tpool_size(tp);
    for (int i = 0; i < n; i++) {
        j.p[i] = p[i];
        j.Y[i] = Y[i];
        for (int q = 0; q < i && !j.A[i]; q++) /* same input, same activation type: quantize once */
            if (X[q] == X[i] && p[q]->vd == p[i]->vd && p[q]->n_in == p[i]->n_in) {
                j.A[i] = j.A[q];
                j.AUX[i] = j.AUX[q];
            }
        if (!j.A[i]) {
            uint8_t *row = (uint8_t *)s->buf + off[i];
            uint8_t *aux = row + ((qtype_row_size(p[i]->vd, p[i]->n_in) + 63) & ~(size_t)63);
            pk_quant_row(p[i], k, X[i], row, aux);
            j.A[i] = row;
            j.AUX[i] = aux;
        }
        /* small tasks: a worker preempted on this shared machine holds up little of the dispatch */
        int64_t chunk = p[i]->n_groups / ((int64_t)nth * 16);
        j.chunk[i] = chunk < 1 ? 1 : chunk;
        j.first[i + 1] = j.first[i] + (p[i]->n_groups + j.chunk[i] - 1) / j.chunk[i];
    }
    tpool_run(tp, pk1_task, &j, j.first[n]);
}

void matmul_weight_init(struct matmul_weight *mw, enum qtype wt, const void *W, int64_t n_in, int64_t n_out, bool pack)
{
    mw->wt = wt;
    mw->W = W;
    mw->n_in = n_in;
    mw->n_out = n_out;
    mw->packed = pack ? matmul_pack(wt, W, n_in, n_out, NULL) : NULL;
}

void matmul_weight_run(struct tpool *tp, struct matmul_scratch *s, const struct matmul_weight *mw, const float *X,
                       int64_t n_tok, float *Y)
{
    if (mw->packed)
        matmul_packed_run(tp, s, mw->packed, X, n_tok, Y);
    else
        matmul(tp, s, mw->wt, mw->W, mw->n_in, mw->n_out, X, n_tok, Y);
}

void matmul_weight_free(struct matmul_weight *mw)
{
    matmul_packed_free(mw->packed);
    mw->packed = NULL;
}
