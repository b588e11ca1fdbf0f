/* qsa.c — QSA's block keys and per-query cell selection (qsa.h). */
#include "qsa.h"

#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "../../common/fp16.h"

void qsa_block_key(const float *k, int r, int d, const float *norm_w, float eps, int n_rot, const float *cs,
                   float *out)
{
    memcpy(out, k, sizeof(float) * (size_t)d);
    for (int m = 1; m < r; m++)
        for (int c = 0; c < d; c++)
            out[c] = out[c] + k[(size_t)m * d + c];
    const float inv = 1.0f / (float)r;
    for (int c = 0; c < d; c++)
        out[c] *= inv;
    ops_rms_norm(out, out, norm_w, d, eps);
    ops_rope_apply(out, n_rot, ROPE_NEOX, cs);
}

/* One step of libstdc++'s heap adjust (sift the hole down, push v up) under "better = higher score": the
 * heap-select of std::partial_sort. A partly taken block is a run of equal scores, and which of its cells
 * survive depends on exactly this order (spec §3.5 step 8). */
static void heap_adjust(int *idx, const float *sc, int hole, int len, int v)
{
    const int top = hole;
    int c = hole;
    while (c < (len - 1) / 2) {
        c = 2 * c + 2;
        if (sc[idx[c]] > sc[idx[c - 1]])
            c--;
        idx[hole] = idx[c];
        hole = c;
    }
    if ((len & 1) == 0 && c == (len - 2) / 2) {
        c = 2 * c + 2;
        idx[hole] = idx[c - 1];
        hole = c - 1;
    }
    int parent = (hole - 1) / 2;
    while (hole > top && sc[idx[parent]] > sc[v]) {
        idx[hole] = idx[parent];
        hole = parent;
        parent = (hole - 1) / 2;
    }
    idx[hole] = v;
}

static int cmp_int(const void *a, const void *b)
{
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int qsa_select(const float *q, int n_head, int d, const float *kb, int nb, int p, int r, int top_k, float *sc,
               int *heap, int *sel)
{
    const int W = top_k + r - 1, tail_start = (p + 1) / r * r;
    for (int b = 0; b * r <= p; b++) {
        float v = 1e9f; /* the incomplete trailing block: always kept */
        if (b < nb) {
            const float *kv = kb + (size_t)b * d;
            float s = 0.0f;
            for (int h = 0; h < n_head; h++) {
                double dot = 0.0;
                for (int c = 0; c < d; c++)
                    dot += (double)q[(size_t)h * d + c] * (double)kv[c];
                const float fd = (float)dot, rl = fd > 0.0f ? fd : 0.0f;
                s = h ? s + rl : rl;
            }
            v = s + (b * r >= tail_start ? 1e9f : 0.0f);
        }
        for (int c = b * r; c < b * r + r && c <= p; c++)
            sc[c] = v;
    }
    const int n_kv = p + 1; /* later cells score -inf and never enter the heap */
    for (int c = 0; c < n_kv; c++)
        heap[c] = c;
    if (W >= 2)
        for (int h = (W - 2) / 2;; h--) {
            heap_adjust(heap, sc, h, W, heap[h]);
            if (h == 0)
                break;
        }
    for (int i = W; i < n_kv; i++)
        if (sc[heap[i]] > sc[heap[0]]) {
            const int v = heap[i];
            heap[i] = heap[0];
            heap_adjust(heap, sc, 0, W, v);
        }
    memcpy(sel, heap, sizeof(int) * (size_t)W);
    qsort(sel, (size_t)W, sizeof(int), cmp_int); /* cell order: the softmax and V sums run as the dense ones */
    return W;
}

int qsa_cache_init(struct qsa_cache *c, int n_layers, int n_seq, int n_ctx, int d, int r_min, bool f16)
{
    memset(c, 0, sizeof *c);
    c->n_layers = n_layers;
    c->n_seq = n_seq;
    c->n_ctx = n_ctx;
    c->d = d;
    c->kb_blocks = n_ctx / (r_min > 0 ? r_min : 1) + 1;
    c->f16 = f16;
    const size_t ls = (size_t)n_layers * (size_t)n_seq;
    c->keys = calloc(ls * (size_t)n_ctx * (size_t)d + 1, sizeof(float));
    c->kb = calloc(ls * (size_t)c->kb_blocks * (size_t)d + 1, sizeof(float));
    c->kb_valid = calloc(ls + 1, sizeof(int));
    if (!c->keys || !c->kb || !c->kb_valid) {
        qsa_cache_free(c);
        return -1;
    }
    return 0;
}

void qsa_cache_free(struct qsa_cache *c)
{
    free(c->keys);
    free(c->kb);
    free(c->kb_valid);
    memset(c, 0, sizeof *c);
}

uint64_t qsa_cache_bytes(const struct qsa_cache *c)
{
    const uint64_t ls = (uint64_t)c->n_layers * (uint64_t)c->n_seq;
    return 4 * (ls * (uint64_t)c->n_ctx * (uint64_t)c->d + ls * (uint64_t)c->kb_blocks * (uint64_t)c->d + ls);
}

void qsa_cache_store(struct qsa_cache *c, int l, int seq, int pos, int r, const float *k)
{
    float *dst = qsa_cache_key(c, l, seq, pos);
    for (int i = 0; i < c->d; i++)
        dst[i] = c->f16 ? fp16_to_f32(fp16_from_f32(k[i])) : k[i];
    int *valid = qsa_cache_valid(c, l, seq);
    if (*valid > pos / r)
        *valid = pos / r;
}

void qsa_cache_copy(struct qsa_cache *c, int src, int dst, int n)
{
    if (src == dst || n <= 0)
        return;
    for (int l = 0; l < c->n_layers; l++) {
        memcpy(qsa_cache_key(c, l, dst, 0), qsa_cache_key(c, l, src, 0), sizeof(float) * (size_t)n * (size_t)c->d);
        *qsa_cache_valid(c, l, dst) = 0;
    }
}
