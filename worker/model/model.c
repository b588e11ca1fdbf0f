/* model.c — load a GGUF into a `struct model`: hyperparameters (shared spec
 * arch-dense.md §1, per-layer arrays, defaults, RoPE scaling resolved to the
 * context values llama.cpp uses), the vocabulary, and every tensor bound and
 * shape-checked (§2). Errors name the file and the key or tensor. */
#include "model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_loader.h"
#include "../num/ops.h"

static const char *key(char *buf, size_t cap, const char *A, const char *suffix)
{
    snprintf(buf, cap, "%s.%s", A, suffix);
    return buf;
}

/* Integer hparam {A}.suffix; *out keeps `def` when absent unless required. */
static int get_int(struct loader *L, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi,
                   int *out, struct err *e)
{
    char k[160];
    key(k, sizeof k, L->A, suffix);
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

static int get_layer_int(struct loader *L, const char *suffix, uint32_t il, bool required, int64_t def,
                         int64_t lo, int64_t hi, int *out, struct err *e)
{
    char k[160];
    key(k, sizeof k, L->A, suffix);
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

static int get_float(struct loader *L, const char *suffix, bool required, float def, float *out, struct err *e)
{
    char k[160];
    key(k, sizeof k, L->A, suffix);
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

static int bind_wt(struct loader *L, struct wt *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
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

static int bind_vec(struct loader *L, struct vec *v, const char *name, int64_t n, bool required, struct err *e)
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

static int load_hparams(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    struct hparams *hp = &m->hp;
    const struct arch_desc *ad = m->arch;
    int rc;
    char k[160];

    /* n_vocab: the token list is authoritative */
    const struct gguf_kv *toks = gguf_find_kv(L->g, "tokenizer.ggml.tokens");
    if (toks && toks->type == GGUF_ARRAY && toks->arr_n > 0 && toks->arr_n < (1u << 30))
        hp->n_vocab = (int)toks->arr_n;
    else if ((rc = get_int(L, "vocab_size", true, 0, 1, 1 << 30, &hp->n_vocab, e)))
        return err_prefix(e, "no tokenizer.ggml.tokens");

    if ((rc = get_int(L, "context_length", true, 0, 1, 1 << 30, &hp->n_ctx_train, e)) ||
        (rc = get_int(L, "embedding_length", true, 0, 1, 1 << 20, &hp->n_embd, e)) ||
        (rc = get_int(L, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &hp->n_layer, e)))
        return rc;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return err_set(e, ERR_NOMEM, "%s: out of memory", L->path);

    /* MoE */
    if ((rc = get_int(L, "expert_count", false, 0, 0, 1 << 16, &hp->n_expert, e)) ||
        (rc = get_int(L, "expert_used_count", false, 0, 0, 1 << 16, &hp->n_expert_used, e)) ||
        (rc = get_float(L, "expert_weights_scale", false, 0.0f, &hp->expert_weights_scale, e)))
        return rc;
    const bool moe = ad->moe || hp->n_expert > 0;
    if (moe && (hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert))
        return err_set(e, ERR_FORMAT, "%s: MoE model needs 1 <= %s.expert_used_count (%d) <= %s.expert_count (%d)",
                       L->path, L->A, hp->n_expert_used, L->A, hp->n_expert);

    for (int il = 0; il < hp->n_layer; il++) {
        struct layer *ly = &m->layers[il];
        ly->kind = LAYER_ATTN;
        ly->ffn = moe ? FFN_MOE : FFN_DENSE;
        if ((rc = get_layer_int(L, "attention.head_count", (uint32_t)il, true, 0, 1, 1 << 16, &ly->n_head, e)) ||
            (rc = get_layer_int(L, "attention.head_count_kv", (uint32_t)il, false, ly->n_head, 1, 1 << 16,
                                &ly->n_head_kv, e)) ||
            (rc = get_layer_int(L, "feed_forward_length", (uint32_t)il, !moe, 0, 0, 1 << 24, &ly->n_ff, e)))
            return rc;
        if (ly->n_head % ly->n_head_kv)
            return err_set(e, ERR_FORMAT, "%s: layer %d: head_count %d is not a multiple of head_count_kv %d",
                           L->path, il, ly->n_head, ly->n_head_kv);
        if (!moe && ly->n_ff < 1)
            return err_set(e, ERR_FORMAT, "%s: layer %d: feed_forward_length is 0", L->path, il);
        if (ly->n_head > hp->n_head_max)
            hp->n_head_max = ly->n_head;
        if (ly->n_head_kv > hp->n_head_kv_max)
            hp->n_head_kv_max = ly->n_head_kv;
        if (!moe && ly->n_ff > hp->n_ff_max)
            hp->n_ff_max = ly->n_ff;
    }
    if (moe) {
        int n_ff0 = m->layers[0].n_ff;
        int def = ad->n_ff_exp_key ? n_ff0 / hp->n_expert_used : n_ff0;
        if (ad->n_ff_exp_key)
            rc = get_int(L, "expert_feed_forward_length", false, def, 1, 1 << 24, &hp->n_ff_exp, e);
        else
            hp->n_ff_exp = def;
        if (rc)
            return rc;
        if (hp->n_ff_exp < 1)
            return err_set(e, ERR_FORMAT, "%s: MoE expert width is 0 (set %s.expert_feed_forward_length)", L->path,
                           L->A);
        for (int il = 0; il < hp->n_layer; il++)
            m->layers[il].n_ff = 0;
    }

    const int n_head0 = m->layers[0].n_head;
    const int hd_def = hp->n_embd / n_head0;
    int hd_v;
    if ((rc = get_int(L, "attention.key_length", false, hd_def, 1, 1 << 16, &hp->head_dim, e)) ||
        (rc = get_int(L, "attention.value_length", false, hd_def, 1, 1 << 16, &hd_v, e)) ||
        (rc = get_int(L, "rope.dimension_count", false, hp->head_dim, 0, 1 << 16, &hp->n_rot, e)))
        return rc;
    if (hd_v != hp->head_dim || hp->n_rot != hp->head_dim)
        return err_set(e, ERR_UNSUPPORTED,
                       "%s: key_length %d, value_length %d and rope.dimension_count %d must be equal for arch %s",
                       L->path, hp->head_dim, hd_v, hp->n_rot, L->A);
    if (hp->head_dim > 1024 || hp->n_rot % 2)
        return err_set(e, ERR_UNSUPPORTED, "%s: head dimension %d not supported (even, at most 1024)", L->path,
                       hp->head_dim);
    if (ad->q_is_square)
        for (int il = 0; il < hp->n_layer; il++)
            if (m->layers[il].n_head * hp->head_dim != hp->n_embd)
                return err_set(e, ERR_FORMAT, "%s: arch %s needs head_dim·head_count == embedding_length (%d·%d != %d)",
                               L->path, L->A, hp->head_dim, m->layers[il].n_head, hp->n_embd);

    if ((rc = get_float(L, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->rms_eps, e)) ||
        (rc = get_float(L, "rope.freq_base", false, 10000.0f, &hp->freq_base, e)))
        return rc;
    if (hp->rms_eps < 0.0f || hp->freq_base <= 0.0f)
        return err_set(e, ERR_RANGE, "%s: rms epsilon %g / rope.freq_base %g out of range", L->path,
                       (double)hp->rms_eps, (double)hp->freq_base);

    /* RoPE scaling (§1, §4.2), resolved like llama-context.cpp */
    char type[32] = "linear";
    rc = gguf_get_cstr(L->g, key(k, sizeof k, L->A, "rope.scaling.type"), type, sizeof type, e);
    if (rc && rc != ERR_NOTFOUND)
        return err_prefix(e, "%s", L->path);
    if (!strcmp(type, "none"))
        hp->scaling = ROPE_SCALING_NONE;
    else if (!strcmp(type, "linear"))
        hp->scaling = ROPE_SCALING_LINEAR;
    else if (!strcmp(type, "yarn"))
        hp->scaling = ROPE_SCALING_YARN;
    else if (!strcmp(type, "longrope"))
        hp->scaling = ROPE_SCALING_LONGROPE;
    else
        return err_set(e, ERR_UNSUPPORTED, "%s: unknown %s = '%s'", L->path, k, type);
    float s = 0.0f;
    if ((rc = get_float(L, "rope.scaling.factor", false, 0.0f, &s, e)))
        return rc;
    if (s == 0.0f && (rc = get_float(L, "rope.scale_linear", false, 0.0f, &s, e)))
        return rc;
    if (s < 0.0f)
        return err_set(e, ERR_RANGE, "%s: rope scaling factor %g is negative", L->path, (double)s);
    hp->freq_scale = (s == 0.0f || hp->scaling == ROPE_SCALING_NONE) ? 1.0f : 1.0f / s;
    float rope_attn_factor = 1.0f, log_mul = 0.0f;
    if ((rc = get_int(L, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1, 1 << 30,
                      &hp->n_ctx_orig, e)) ||
        (rc = get_float(L, "rope.scaling.attn_factor", false, 1.0f, &rope_attn_factor, e)) ||
        (rc = get_float(L, "rope.scaling.yarn_log_multiplier", false, 0.0f, &log_mul, e)) ||
        (rc = get_float(L, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->yarn_beta_fast, e)) ||
        (rc = get_float(L, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->yarn_beta_slow, e)))
        return rc;
    hp->ext_factor = hp->scaling == ROPE_SCALING_YARN ? 1.0f : 0.0f;
    hp->attn_factor = 1.0f;
    if (hp->ext_factor != 0.0f) {
        /* rope_yarn multiplies by 1 + 0.1·ln(1/freq_scale) itself; the context factor cancels it
         * (get_mscale(s)/(1 + 0.1·ln s) = 1) unless a log multiplier is given */
        const float factor = 1.0f / hp->freq_scale;
        const float ms1 = factor <= 1.0f ? 1.0f : 0.1f * logf(factor) + 1.0f;
        const float msa = factor <= 1.0f ? 1.0f : 0.1f * log_mul * logf(factor) + 1.0f;
        hp->attn_factor = log_mul != 0.0f ? ms1 / msa : ms1;
        hp->attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    hp->attn_factor *= rope_attn_factor;
    ops_rope_corr_dims(hp->n_rot, hp->n_ctx_orig, hp->freq_base, hp->yarn_beta_fast, hp->yarn_beta_slow,
                       hp->corr_dims);
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

static int load_tensors(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    const struct hparams *hp = &m->hp;
    const struct arch_desc *ad = m->arch;
    const int64_t E = hp->n_embd, V = hp->n_vocab, hd = hp->head_dim;
    int rc;
    char n[GGUF_MAX_NAME + 32];

    if ((rc = bind_wt(L, &m->tok_embd, "token_embd.weight", E, V, 1, true, e)) ||
        (rc = bind_vec(L, &m->output_norm, "output_norm.weight", E, true, e)) ||
        (rc = bind_wt(L, &m->output, "output.weight", E, V, 1, false, e)))
        return rc;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied = true;
    }
    if (ad->out_bias && (rc = bind_vec(L, &m->output_bias, "output.bias", V, false, e)))
        return rc;
    if (ad->rope_freqs && (rc = bind_vec(L, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, false, e)))
        return rc;

    for (int il = 0; il < hp->n_layer; il++) {
        struct layer *ly = &m->layers[il];
        const int64_t nq = hd * ly->n_head, nkv = hd * ly->n_head_kv;
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
        if ((rc = bind_vec(L, &ly->attn_norm, NM("attn_norm.weight"), E, true, e)) ||
            (rc = bind_wt(L, &ly->wqkv, NM("attn_qkv.weight"), E, nq + 2 * nkv, 1, false, e)))
            return rc;
        if (ly->wqkv.data) {
            if ((rc = bind_vec(L, &ly->bqkv, NM("attn_qkv.bias"), nq + 2 * nkv, false, e)))
                return rc;
        } else if ((rc = bind_wt(L, &ly->wq, NM("attn_q.weight"), E, nq, 1, true, e)) ||
                   (rc = bind_wt(L, &ly->wk, NM("attn_k.weight"), E, nkv, 1, true, e)) ||
                   (rc = bind_wt(L, &ly->wv, NM("attn_v.weight"), E, nkv, 1, true, e)) ||
                   (rc = bind_vec(L, &ly->bq, NM("attn_q.bias"), nq, false, e)) ||
                   (rc = bind_vec(L, &ly->bk, NM("attn_k.bias"), nkv, false, e)) ||
                   (rc = bind_vec(L, &ly->bv, NM("attn_v.bias"), nkv, false, e))) {
            return rc;
        }
        if ((rc = bind_wt(L, &ly->wo, NM("attn_output.weight"), nq, E, 1, true, e)))
            return rc;
        if (ad->o_bias && (rc = bind_vec(L, &ly->bo, NM("attn_output.bias"), E, false, e)))
            return rc;
        if (ad->qk_norm && ((rc = bind_vec(L, &ly->q_norm, NM("attn_q_norm.weight"), hd, true, e)) ||
                            (rc = bind_vec(L, &ly->k_norm, NM("attn_k_norm.weight"), hd, true, e))))
            return rc;
        if ((rc = bind_vec(L, &ly->ffn_norm, NM("ffn_norm.weight"), E, true, e)))
            return rc;
        if (ly->ffn == FFN_DENSE) {
            const int64_t F = ly->n_ff;
            if ((rc = bind_wt(L, &ly->ffn_gate, NM("ffn_gate.weight"), E, F, 1, true, e)) ||
                (rc = bind_wt(L, &ly->ffn_up, NM("ffn_up.weight"), E, F, 1, true, e)) ||
                (rc = bind_wt(L, &ly->ffn_down, NM("ffn_down.weight"), F, E, 1, true, e)))
                return rc;
            if (ad->ffn_bias && ((rc = bind_vec(L, &ly->b_gate, NM("ffn_gate.bias"), F, false, e)) ||
                                 (rc = bind_vec(L, &ly->b_up, NM("ffn_up.bias"), F, false, e)) ||
                                 (rc = bind_vec(L, &ly->b_down, NM("ffn_down.bias"), E, false, e))))
                return rc;
        } else {
            const int64_t F = hp->n_ff_exp, X = hp->n_expert;
            if ((rc = bind_wt(L, &ly->gate_inp, NM("ffn_gate_inp.weight"), E, X, 1, true, e)) ||
                (rc = bind_wt(L, &ly->gate_exps, NM("ffn_gate_exps.weight"), E, F, X, true, e)) ||
                (rc = bind_wt(L, &ly->up_exps, NM("ffn_up_exps.weight"), E, F, X, true, e)) ||
                (rc = bind_wt(L, &ly->down_exps, NM("ffn_down_exps.weight"), F, E, X, true, e)))
                return rc;
        }
#undef NM
        ly->kv_index = m->n_kv_layers++;
    }
    return 0;
}

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
    if (m->arch->hybrid)
        rc = model_hybrid_load(&L, e);
    else if (!(rc = load_hparams(&L, e)))
        rc = load_tensors(&L, e);
    if (rc)
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

/* ---- the helpers above, for the loaders in other files (model_loader.h) ---- */

int mload_int(struct loader *L, const char *suffix, bool required, int64_t def, int64_t lo, int64_t hi, int *out,
              struct err *e)
{
    return get_int(L, suffix, required, def, lo, hi, out, e);
}

int mload_layer_int(struct loader *L, const char *suffix, uint32_t il, bool required, int64_t def, int64_t lo,
                    int64_t hi, int *out, struct err *e)
{
    return get_layer_int(L, suffix, il, required, def, lo, hi, out, e);
}

int mload_float(struct loader *L, const char *suffix, bool required, float def, float *out, struct err *e)
{
    return get_float(L, suffix, required, def, out, e);
}

int mload_wt(struct loader *L, struct wt *w, const char *name, int64_t ne0, int64_t ne1, int64_t ne2, bool required,
             struct err *e)
{
    return bind_wt(L, w, name, ne0, ne1, ne2, required, e);
}

int mload_vec(struct loader *L, struct vec *v, const char *name, int64_t n, bool required, struct err *e)
{
    return bind_vec(L, v, name, n, required, e);
}

int mload_n_vocab(struct loader *L, struct err *e)
{
    struct hparams *hp = &L->m->hp;
    const struct gguf_kv *toks = gguf_find_kv(L->g, "tokenizer.ggml.tokens");
    if (toks && toks->type == GGUF_ARRAY && toks->arr_n > 0 && toks->arr_n < (1u << 30)) {
        hp->n_vocab = (int)toks->arr_n;
        return 0;
    }
    int rc = get_int(L, "vocab_size", true, 0, 1, 1 << 30, &hp->n_vocab, e);
    return rc ? err_prefix(e, "no tokenizer.ggml.tokens") : 0;
}
