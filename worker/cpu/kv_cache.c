/* kv_cache.c — see kv_cache.h. */
#include "kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../../common/fp16.h"

int kv_init(struct kv_cache *kv, int n_layer, const int *dim_k, const int *dim_v, int n_seq, int n_ctx,
            bool f16, struct err *e)
{
    memset(kv, 0, sizeof *kv);
    if (n_seq < 1 || n_ctx < 1 || n_layer < 0)
        return err_set(e, ERR_INVALID, "kv cache: n_seq %d / n_ctx %d must be positive", n_seq, n_ctx);
    kv->n_layer = n_layer;
    kv->n_seq = n_seq;
    kv->n_ctx = n_ctx;
    kv->f16 = f16;
    kv->elt = f16 ? 2 : 4;
    kv->dim_k = calloc((size_t)n_layer + 1, sizeof(int));
    kv->dim_v = calloc((size_t)n_layer + 1, sizeof(int));
    kv->k = calloc((size_t)n_layer + 1, sizeof(void *));
    kv->v = calloc((size_t)n_layer + 1, sizeof(void *));
    kv->len = calloc((size_t)n_seq, sizeof(int));
    if (!kv->dim_k || !kv->dim_v || !kv->k || !kv->v || !kv->len)
        goto nomem;
    for (int l = 0; l < n_layer; l++) {
        kv->dim_k[l] = dim_k[l];
        kv->dim_v[l] = dim_v[l];
        size_t cells = (size_t)n_seq * (size_t)n_ctx;
        kv->k[l] = calloc(cells, (size_t)dim_k[l] * kv->elt);
        kv->v[l] = calloc(cells, (size_t)dim_v[l] * kv->elt);
        if (!kv->k[l] || !kv->v[l])
            goto nomem;
        kv->bytes += (uint64_t)cells * (uint64_t)(dim_k[l] + dim_v[l]) * kv->elt;
    }
    return 0;
nomem:
    kv_free(kv);
    return err_set(e, ERR_NOMEM, "kv cache: out of memory for %d layers × %d sequences × %d cells", n_layer,
                   n_seq, n_ctx);
}

void kv_free(struct kv_cache *kv)
{
    if (kv->k)
        for (int l = 0; l < kv->n_layer; l++)
            free(kv->k[l]);
    if (kv->v)
        for (int l = 0; l < kv->n_layer; l++)
            free(kv->v[l]);
    free(kv->k);
    free(kv->v);
    free(kv->dim_k);
    free(kv->dim_v);
    free(kv->len);
    memset(kv, 0, sizeof *kv);
}

void *kv_k(const struct kv_cache *kv, int l, int seq, int pos)
{
    size_t cell = (size_t)seq * (size_t)kv->n_ctx + (size_t)pos;
    return (char *)kv->k[l] + cell * (size_t)kv->dim_k[l] * kv->elt;
}

void *kv_v(const struct kv_cache *kv, int l, int seq, int pos)
{
    size_t cell = (size_t)seq * (size_t)kv->n_ctx + (size_t)pos;
    return (char *)kv->v[l] + cell * (size_t)kv->dim_v[l] * kv->elt;
}

static void put_row(void *dst, const float *src, int n, bool f16)
{
    if (f16) {
        uint16_t *d = dst;
        for (int i = 0; i < n; i++)
            d[i] = fp16_from_f32(src[i]);
    } else {
        memcpy(dst, src, sizeof(float) * (size_t)n);
    }
}

void kv_store(struct kv_cache *kv, int l, int seq, int pos, const float *k, const float *v)
{
    put_row(kv_k(kv, l, seq, pos), k, kv->dim_k[l], kv->f16);
    put_row(kv_v(kv, l, seq, pos), v, kv->dim_v[l], kv->f16);
}

void kv_truncate(struct kv_cache *kv, int seq, int pos)
{
    if (seq < 0 || seq >= kv->n_seq)
        return;
    if (pos < 0)
        pos = 0;
    if (pos < kv->len[seq])
        kv->len[seq] = pos;
}

int kv_copy(struct kv_cache *kv, int src, int dst, int n, struct err *e)
{
    if (src < 0 || src >= kv->n_seq || dst < 0 || dst >= kv->n_seq)
        return err_set(e, ERR_INVALID, "kv cache: sequence %d or %d out of range [0, %d)", src, dst, kv->n_seq);
    if (n < 0 || n > kv->len[src])
        return err_set(e, ERR_RANGE, "kv cache: cannot copy %d positions of sequence %d (it has %d)", n, src,
                       kv->len[src]);
    if (src != dst) {
        for (int l = 0; l < kv->n_layer; l++) {
            memcpy(kv_k(kv, l, dst, 0), kv_k(kv, l, src, 0), (size_t)n * (size_t)kv->dim_k[l] * kv->elt);
            memcpy(kv_v(kv, l, dst, 0), kv_v(kv, l, src, 0), (size_t)n * (size_t)kv->dim_v[l] * kv->elt);
        }
    }
    kv->len[dst] = n;
    return 0;
}
