/* model_forward.c — the shared layer loop (model_forward.h). */
#include "model_forward.h"

static const char *const mixer_names[LAYER_KINDS] = { "attention", "Gated DeltaNet", "gated attention",
                                                       "sparse (QSA) gated attention" };
static const char *const ffn_names[FFN_KINDS] = { "dense FFN", "MoE FFN" };

int model_forward_check(const struct model *m, const struct layer_ops *ops, const char *backend, struct err *e)
{
    if (!ops->embed || !ops->output)
        return err_set(e, ERR_UNSUPPORTED, "%s backend: no embedding or output operation", backend);
    if (m->arch->hc && !ops->hyper_connections)
        return err_set(e, ERR_UNSUPPORTED, "%s backend: %s has hyper-connections (%d residual streams), which this "
                       "backend does not run", backend, m->arch->name, m->hp.hc);
    if (m->hp.ple_layer >= 0 && m->hp.ple_layer < m->hp.n_layer && !ops->ple)
        return err_set(e, ERR_UNSUPPORTED, "%s backend: layer %d has PLE n-gram embeddings, which this backend does "
                       "not run", backend, m->hp.ple_layer);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct layer *ly = &m->layers[il];
        if ((unsigned)ly->kind >= LAYER_KINDS || !ops->mixer[ly->kind])
            return err_set(e, ERR_UNSUPPORTED, "%s backend: layer %d is %s, which this backend does not run", backend,
                           il, (unsigned)ly->kind < LAYER_KINDS ? mixer_names[ly->kind] : "of an unknown kind");
        if ((unsigned)ly->ffn >= FFN_KINDS || !ops->ffn[ly->ffn])
            return err_set(e, ERR_UNSUPPORTED, "%s backend: layer %d has a %s, which this backend does not run",
                           backend, il, (unsigned)ly->ffn < FFN_KINDS ? ffn_names[ly->ffn] : "FFN of an unknown kind");
    }
    return 0;
}

int model_forward(const struct model *m, const struct layer_ops *ops, void *b, int n, int n_out, struct err *e)
{
    int rc = ops->embed(b, n, e);
    const int L = m->hp.n_layer;
    for (int il = 0; !rc && il < L; il++) {
        const struct layer *ly = &m->layers[il];
        const bool last = il + 1 == L;
        const struct fwd_sub mix = { .il = il, .ly = ly, .next_norm = &ly->ffn_norm, .next_il = il };
        const struct fwd_sub ffn = { .il = il, .ly = ly,
                                     .next_norm = last ? &m->output_norm : &m->layers[il + 1].attn_norm,
                                     .next_il = last ? -1 : il + 1 };
        if (il == m->hp.ple_layer)
            rc = ops->ple(b, &mix, n, e);
        if (!rc)
            rc = ops->mixer[ly->kind](b, &mix, n, e);
        if (!rc)
            rc = ops->ffn[ly->ffn](b, &ffn, n, e);
    }
    if (!rc && n_out > 0)
        rc = ops->output(b, n, n_out, e);
    return rc;
}
