/* mload.c — the GGUF binding helpers every architecture's loader uses
 * (mload.h): hyperparameter keys {arch}.suffix with range checks and
 * defaults, and tensors bound with their expected shape (shared spec
 * arch-dense.md §1–§2). Errors name the file and the key or tensor. */
#include "mload.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../num/quant.h"

const char *mload_key(char *buf, size_t cap, const char *A, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", A, suffix);
    return buf;
}

/* Integer hparam {A}.suffix; *out keeps `def` when absent unless required. */
int mload_int(struct loader *L, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi,
              int *out, struct err *e)
{
    char k[160];
    mload_key(k, sizeof k, L->A, suffix);
    int64_t v = def;
    int rc = gguf_get_i64(L->g, k, &v, e);
    if (rc == ERR_NOTFOUND) {
        if (required)
            return err_set(e, ERR_NOTFOUND, "%s: missing required key '%s'", L->path, k);
        v = def;
    } else if (rc) {
        return err_prefix(e, "%s", L->path);
    }
    if (v < lo || v > hi)
        return err_set(e, ERR_RANGE, "%s: key '%s' = %lld is outside [%lld, %lld]", L->path, k, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

int mload_layer_int(struct loader *L, const char *suffix, uint32_t il, bool required, int64_t def,
                    int64_t lo, int64_t hi, int *out, struct err *e)
{
    char k[160];
    mload_key(k, sizeof k, L->A, suffix);
    int64_t v = def;
    int rc = gguf_get_layer_i64(L->g, k, il, &v, e);
    if (rc == ERR_NOTFOUND) {
        if (required)
            return err_set(e, ERR_NOTFOUND, "%s: missing required key '%s'", L->path, k);
        v = def;
    } else if (rc) {
        return err_prefix(e, "%s: layer %u", L->path, il);
    }
    if (v < lo || v > hi)
        return err_set(e, ERR_RANGE, "%s: key '%s' (layer %u) = %lld is outside [%lld, %lld]", L->path, k, il,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int)v;
    return 0;
}

int mload_float(struct loader *L, const char *suffix, bool required, float def, float *out, struct err *e)
{
    char k[160];
    mload_key(k, sizeof k, L->A, suffix);
    float v = def;
    int rc = gguf_get_f32(L->g, k, &v, e);
    if (rc == ERR_NOTFOUND) {
        if (required)
            return err_set(e, ERR_NOTFOUND, "%s: missing required key '%s'", L->path, k);
        v = def;
    } else if (rc) {
        return err_prefix(e, "%s", L->path);
    }
    if (!isfinite(v))
        return err_set(e, ERR_RANGE, "%s: key '%s' is not finite", L->path, k);
    *out = v;
    return 0;
}

static void fmt_shape(char *buf, size_t cap, const int64_t *ne, int n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < cap)
        snprintf(buf + o, cap - o, "]");
}

/* Find `name` and check it has exactly the shape exp[0..n_exp) (trailing dims 1). */
static int find_checked(struct loader *L, const char *name, const int64_t *exp, int n_exp, bool required,
                        const struct gguf_tensor **out, struct err *e)
{
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(L->g, name);
    if (!t) {
        if (required)
            return err_set(e, ERR_NOTFOUND, "%s: missing tensor '%s' (arch %s)", L->path, name, L->A);
        return 0;
    }
    int64_t want[GGUF_MAX_DIMS] = { 1, 1, 1, 1 };
    for (int i = 0; i < n_exp; i++)
        want[i] = exp[i];
    bool ok = true;
    for (int i = 0; i < GGUF_MAX_DIMS; i++)
        if (t->ne[i] != want[i])
            ok = false;
    if (!ok) {
        char a[96], b[96];
        fmt_shape(a, sizeof a, t->ne, (int)t->n_dims);
        fmt_shape(b, sizeof b, want, n_exp);
        return err_set(e, ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", L->path, name, a, b);
    }
    const struct qtype_info *qi = qtype_get(t->type);
    if (!qi || !qi->compute)
        return err_set(e, ERR_UNSUPPORTED, "%s: tensor '%s' has type %s, which this engine cannot compute",
                       L->path, name, qi ? qi->name : "unknown");
    if (t->ne[0] % qi->blck)
        return err_set(e, ERR_FORMAT, "%s: tensor '%s' rows of %lld are not a multiple of the %s block (%d)",
                       L->path, name, (long long)t->ne[0], qi->name, qi->blck);
    L->n_bound++;
    *out = t;
    return 0;
}

int mload_wt(struct loader *L, struct wt *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
             bool required, struct err *e)
{
    memset(w, 0, sizeof *w);
    int64_t exp[3] = { ne0, ne1, ne2 };
    const struct gguf_tensor *t;
    int rc = find_checked(L, name, exp, ne2 > 1 ? 3 : 2, required, &t, e);
    if (rc || !t)
        return rc;
    w->data = t->data;
    w->type = (enum qtype)t->type;
    w->ne[0] = t->ne[0];
    w->ne[1] = t->ne[1];
    w->ne[2] = t->ne[2];
    w->row_bytes = qtype_row_size(w->type, t->ne[0]);
    w->name = t->name;
    return 0;
}

int mload_vec(struct loader *L, struct vec *v, const char *name, int64_t n, bool required, struct err *e)
{
    memset(v, 0, sizeof *v);
    const struct gguf_tensor *t;
    int rc = find_checked(L, name, &n, 1, required, &t, e);
    if (rc || !t)
        return rc;
    v->n = n;
    if (t->type == QT_F32) {
        v->data = t->data;
        return 0;
    }
    /* norms/biases are f32 in practice; anything else is converted once here */
    struct model *m = L->m;
    float **grown = realloc(m->owned, sizeof(float *) * (size_t)(m->n_owned + 1));
    if (!grown)
        return err_set(e, ERR_NOMEM, "%s: out of memory converting '%s'", L->path, name);
    m->owned = grown;
    float *buf = malloc(sizeof(float) * (size_t)n);
    if (!buf)
        return err_set(e, ERR_NOMEM, "%s: out of memory converting '%s'", L->path, name);
    dequant_row((enum qtype)t->type, t->data, buf, n);
    m->owned[m->n_owned++] = buf;
    v->data = buf;
    return 0;
}

int mload_n_vocab(struct loader *L, struct err *e)
{
    struct hparams *hp = &L->m->hp;
    const struct gguf_kv *toks = gguf_find_kv(L->g, "tokenizer.ggml.tokens");
    if (toks && toks->type == GGUF_ARRAY && toks->arr_n > 0 && toks->arr_n < (1u << 30)) {
        hp->n_vocab = (int)toks->arr_n;
        return 0;
    }
    int rc = mload_int(L, "vocab_size", true, 0, 1, 1 << 30, &hp->n_vocab, e);
    return rc ? err_prefix(e, "no tokenizer.ggml.tokens") : 0;
}

int mload_embd_output(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    int rc;
    if ((rc = mload_wt(L, &m->tok_embd, "token_embd.weight", E, V, 1, true, e)) ||
        (rc = mload_vec(L, &m->output_norm, "output_norm.weight", E, true, e)) ||
        (rc = mload_wt(L, &m->output, "output.weight", E, V, 1, false, e)))
        return rc;
    if (!m->output.data) { /* tied: the output projection is the embedding table */
        m->output = m->tok_embd;
        m->tied = true;
    }
    return 0;
}

int mload_ffn_dense(struct loader *L, int il, bool bias, struct err *e)
{
    struct layer *ly = &L->m->layers[il];
    const int64_t E = L->m->hp.n_embd, F = ly->n_ff;
    char n[GGUF_MAX_NAME + 32];
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    int rc;
    if ((rc = mload_wt(L, &ly->ffn_gate, NM("ffn_gate.weight"), E, F, 1, true, e)) ||
        (rc = mload_wt(L, &ly->ffn_up, NM("ffn_up.weight"), E, F, 1, true, e)) ||
        (rc = mload_wt(L, &ly->ffn_down, NM("ffn_down.weight"), F, E, 1, true, e)))
        return rc;
    if (bias && ((rc = mload_vec(L, &ly->b_gate, NM("ffn_gate.bias"), F, false, e)) ||
                 (rc = mload_vec(L, &ly->b_up, NM("ffn_up.bias"), F, false, e)) ||
                 (rc = mload_vec(L, &ly->b_down, NM("ffn_down.bias"), E, false, e))))
        return rc;
#undef NM
    return 0;
}

int mload_flat(struct loader *L, struct vec *v, const char *name, int64_t ne0, int64_t ne1, struct err *e)
{
    struct wt w;
    int rc = mload_wt(L, &w, name, ne0, ne1, 1, true, e);
    if (rc)
        return rc;
    v->n = ne0 * ne1;
    if (w.type == QT_F32) {
        v->data = w.data;
        return 0;
    }
    struct model *m = L->m;
    float **grown = realloc(m->owned, sizeof(float *) * (size_t)(m->n_owned + 1));
    float *buf = grown ? malloc(sizeof(float) * (size_t)v->n) : NULL;
    if (grown)
        m->owned = grown;
    if (!buf)
        return err_set(e, ERR_NOMEM, "%s: out of memory converting '%s'", L->path, name);
    for (int64_t r = 0; r < ne1; r++)
        dequant_row(w.type, (const char *)w.data + (size_t)r * w.row_bytes, buf + r * ne0, ne0);
    m->owned[m->n_owned++] = buf;
    v->data = buf;
    return 0;
}
