/* backend.c — what every backend shares at the seam (backend.h): parameter
 * resolution and the batch check. */
#include "backend.h"

#include <string.h>

void backend_params_default(struct engine_params *p)
{
    memset(p, 0, sizeof *p);
    p->backend = BACKEND_CPU;
    p->n_seq = 1;
}

int backend_params_resolve(const struct model *m, const struct engine_params *in, struct engine_params *out,
                           struct err *e)
{
    if (in)
        *out = *in;
    else
        backend_params_default(out);
    const struct hparams *hp = &m->hp;
    if (out->n_ctx <= 0)
        out->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (out->n_batch <= 0)
        out->n_batch = 512;
    if (out->n_seq <= 0)
        out->n_seq = 1;
    if (out->n_ctx > (1 << 24) || out->n_batch > (1 << 16) || out->n_seq > (1 << 16))
        return err_set(e, ERR_RANGE, "engine: n_ctx %d / n_batch %d / n_seq %d too large", out->n_ctx, out->n_batch,
                       out->n_seq);
    return 0;
}

int backend_check_batch(const struct engine_tok *toks, int n, int n_batch, int n_seq, int n_ctx, int32_t n_vocab,
                        const int *len, int *seq_next, struct err *e)
{
    if (n < 1 || n > n_batch)
        return err_set(e, ERR_INVALID, "engine_decode: %d tokens (batch holds 1..%d)", n, n_batch);
    for (int s = 0; s < n_seq; s++)
        seq_next[s] = len[s];
    for (int i = 0; i < n; i++) {
        const struct engine_tok *t = &toks[i];
        if (t->token < 0 || t->token >= n_vocab)
            return err_set(e, ERR_INVALID, "engine_decode: token %d at batch row %d is outside the vocabulary (%d)",
                           t->token, i, n_vocab);
        if (t->seq < 0 || t->seq >= n_seq)
            return err_set(e, ERR_INVALID, "engine_decode: sequence %d at batch row %d is outside [0, %d)", t->seq, i,
                           n_seq);
        if (t->pos != seq_next[t->seq])
            return err_set(e, ERR_INVALID, "engine_decode: batch row %d: sequence %d expects position %d, got %d", i,
                           t->seq, seq_next[t->seq], t->pos);
        if (t->pos >= n_ctx)
            return err_set(e, ERR_FULL, "engine_decode: sequence %d is full (n_ctx %d)", t->seq, n_ctx);
        seq_next[t->seq]++;
    }
    return 0;
}

int backend_out_rows(const struct engine_tok *toks, int n, const bool *want, const float *logits,
                     const float *embd, int *out_rows, int *n_out, struct err *e)
{
    int k = 0;
    for (int t = 0; t < n; t++)
        if (toks[t].logits)
            out_rows[k++] = t;
    *n_out = k;
    if (k && !logits)
        return err_set(e, ERR_INVALID, "engine_decode: %d rows asked for logits but the buffer is NULL", k);
    for (int t = 0; want && t < n; t++)
        if (want[t] && !embd)
            return err_set(e, ERR_INVALID, "engine_decode: token %d asked for its hidden state but the buffer is NULL", t);
    return 0;
}
