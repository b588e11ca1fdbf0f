/* model.c — load a GGUF into a `struct model`: the architecture's row of
 * arch.c binds hyperparameters and tensors (its loader file), then the
 * vocabulary, the name and the size figures. */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mload.h"

static void base_name(char *out, size_t cap, const char *path)
{
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    char *dot = strstr(out, ".gguf");
    if (dot)
        *dot = 0;
}

int model_load(struct model **out, const char *path, struct err *e)
{
    *out = NULL;
    struct model *m = calloc(1, sizeof *m);
    if (!m)
        return err_set(e, ERR_NOMEM, "%s: out of memory", path);
    m->hp.ple_layer = -1; /* no layer carries PLE unless the qwen4exp loader says so */
    int rc = gguf_open(&m->g, path, e);
    if (rc)
        goto fail;
    rc = gguf_get_cstr(m->g, "general.architecture", m->arch_name, sizeof m->arch_name, e);
    if (rc) {
        if (rc == ERR_NOTFOUND)
            err_set(e, ERR_NOTFOUND, "%s: missing key 'general.architecture'", path);
        else
            err_prefix(e, "%s", path);
        goto fail;
    }
    m->arch = arch_find(m->arch_name);
    if (!m->arch) {
        rc = err_set(e, ERR_UNSUPPORTED, "%s: architecture '%s' is not supported", path, m->arch_name);
        goto fail;
    }
    struct loader L = { .m = m, .g = m->g, .path = path, .A = m->arch_name };
    if ((rc = m->arch->load(&L, e)))
        goto fail;
    int pooling = -1; /* embeddings: how a sequence's hidden states pool (llama.cpp's enum; any arch) */
    if ((rc = mload_int(&L, "pooling_type", false, -1, -1, 4, &pooling, e)))
        goto fail;
    if ((rc = tok_load(&m->vocab, m->g, e))) {
        err_prefix(e, "%s", path);
        goto fail;
    }
    if (tok_n_vocab(m->vocab) != m->hp.n_vocab) {
        rc = err_set(e, ERR_FORMAT, "%s: tokenizer has %d tokens but tokenizer.ggml.tokens lists %d", path,
                     tok_n_vocab(m->vocab), m->hp.n_vocab);
        goto fail;
    }

    if (gguf_get_cstr(m->g, "general.name", m->name, sizeof m->name, NULL) || !m->name[0])
        base_name(m->name, sizeof m->name, path);
    struct model_info *mi = &m->info;
    mi->arch = m->arch_name;
    mi->name = m->name;
    mi->n_vocab = m->hp.n_vocab;
    mi->n_ctx_train = m->hp.n_ctx_train;
    mi->n_embd = m->hp.n_embd;
    mi->n_layer = m->hp.n_layer;
    mi->pooling_type = pooling;
    for (uint64_t i = 0; i < m->g->n_tensors; i++) {
        const struct gguf_tensor *t = &m->g->tensors[i];
        mi->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        mi->n_bytes += t->nbytes;
    }
    *out = m;
    return 0;
fail:
    model_free(m);
    return rc;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    if (m->vocab)
        tok_free(m->vocab);
    if (m->g)
        gguf_close(m->g);
    free(m);
}

const struct model_info *model_info(const struct model *m) { return &m->info; }
const struct tok_vocab *model_vocab(const struct model *m) { return m->vocab; }
const struct gguf *model_gguf(const struct model *m) { return m->g; }
