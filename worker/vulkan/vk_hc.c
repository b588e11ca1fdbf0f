/* vk_hc.c — hyper-connection mix and write-back on the device (vk_hc.h), in cpu_hc.c's order: per-stream
 * RMSNorm ⊙ w, silu(down·xn · (1/hc)), sigmoid(up·…) as the gate, the stream mean times 1/hc, the inject
 * logits; the write-back weight 2·sigmoid(j · (1/hc)). */
#include "vk_hc.h"

#include <string.h>

static struct vk_view rows(const struct vk_buf *b, uint32_t stride) { return (struct vk_view){ b, 0, stride }; }

int vk_hc_init(struct vk_hc *h, struct vk_ops *o, int n_batch, const struct hparams *hp, uint64_t *bytes,
               struct err *e)
{
    memset(h, 0, sizeof *h);
    h->hc = hp->hc;
    h->E = hp->n_embd;
    h->lr = hp->hc_lr;
    const size_t B = (size_t)n_batch, W = (size_t)hp->hc * (size_t)hp->n_embd;
    const struct {
        struct vk_buf *b;
        size_t bytes;
    } bs[] = { { &h->xn, B * W * 4 }, { &h->lo, B * (size_t)hp->hc_lr * 4 }, { &h->g, B * W * 4 },
               { &h->j, B * (size_t)hp->hc * 4 } };
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof bs / sizeof bs[0]; i++) {
        rc = vk_ops_buf(o, bs[i].b, bs[i].bytes, false, "hyper-connection scratch", e);
        *bytes += bs[i].bytes;
    }
    return rc;
}

void vk_hc_free(struct vk_hc *h, struct vk_ops *o)
{
    struct vk_buf *bs[] = { &h->xn, &h->lo, &h->g, &h->j };
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++)
        vk_rt_buf_free(o->rt, bs[i]);
}

int vk_hc_mix_upload(struct vk_ops *o, struct vk_hc_mix *d, const struct hc_mix *m, uint64_t *bytes, struct err *e)
{
    int rc = vk_mat_upload(o, &d->down, &m->down, false, bytes, e);
    if (!rc)
        rc = vk_mat_upload(o, &d->up, &m->up, false, bytes, e);
    if (!rc)
        rc = vk_mat_upload(o, &d->inject, &m->inject, false, bytes, e);
    return rc;
}

void vk_hc_mix_free(struct vk_ops *o, struct vk_hc_mix *d)
{
    vk_mat_free(o, &d->down);
    vk_mat_free(o, &d->up);
    vk_mat_free(o, &d->inject);
}

int vk_hc_mix(struct vk_hc *h, struct vk_ops *o, const struct vk_hc_mix *m, const struct vk_buf *vecs,
              struct vk_view x, struct vk_view out, int n, float eps, struct err *e)
{
    const uint32_t E = (uint32_t)h->E, W = (uint32_t)h->hc * E;
    const struct vk_view XN = rows(&h->xn, W), LO = rows(&h->lo, (uint32_t)h->lr), G = rows(&h->g, W);
    int rc = 0;
    for (int s = 0; !rc && s < h->hc; s++) { /* each stream normed on its own, times its slice of the weight */
        const uint32_t so = (uint32_t)s * E;
        rc = vk_op_norm(o, (struct vk_view){ x.b, x.off + so, x.stride }, (struct vk_view){ &h->xn, so, W }, (int)E,
                        1, n, vecs, m->norm + so, eps, e);
    }
    if (!rc)
        rc = vk_op_mm(o, &m->down, XN, LO, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_silu_scale(o, LO, h->lr, n, 1.0f / (float)h->hc, e);
    if (!rc)
        rc = vk_op_mm(o, &m->up, LO, G, n, NULL, VK_NO_VEC, false, e);
    if (!rc)
        rc = vk_op_hc_mean(o, XN, G, out, (int)E, h->hc, n, e);
    if (!rc && m->inject.rows)
        rc = vk_op_mm(o, &m->inject, XN, rows(&h->j, (uint32_t)h->hc), n, NULL, VK_NO_VEC, false, e);
    return rc;
}

int vk_hc_combine(struct vk_hc *h, struct vk_ops *o, struct vk_view x, struct vk_view a, int n, struct err *e)
{
    return vk_op_hc_combine(o, x, a, rows(&h->j, (uint32_t)h->hc), h->E, h->hc, n, e);
}
