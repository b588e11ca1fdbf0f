/* arch_dense.c — the transformer architectures of one template: llama,
 * qwen2, qwen3 and qwen3moe (shared spec arch-dense.md §1–§2). Their
 * differences are the traits of their rows in arch.c (RoPE mode, q/k norm,
 * optional biases, MoE); this file binds hyperparameters (per-layer arrays,
 * defaults, RoPE scaling resolved to the context values llama.cpp uses) and
 * every tensor with its shape. Every layer is LAYER_ATTN with a dense or MoE
 * FFN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mload.h"
#include "../num/ops.h"

static int dense_hparams(struct loader *L, struct err *e)
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
    else if ((rc = mload_int(L, "vocab_size", true, 0, 1, 1 << 30, &hp->n_vocab, e)))
        return err_prefix(e, "no tokenizer.ggml.tokens");

    if ((rc = mload_int(L, "context_length", true, 0, 1, 1 << 30, &hp->n_ctx_train, e)) ||
        (rc = mload_int(L, "embedding_length", true, 0, 1, 1 << 20, &hp->n_embd, e)) ||
        (rc = mload_int(L, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &hp->n_layer, e)))
        return rc;

    m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
    if (!m->layers)
        return err_set(e, ERR_NOMEM, "%s: out of memory", L->path);

    /* MoE */
    if ((rc = mload_int(L, "expert_count", false, 0, 0, 1 << 16, &hp->n_expert, e)) ||
        (rc = mload_int(L, "expert_used_count", false, 0, 0, 1 << 16, &hp->n_expert_used, e)) ||
        (rc = mload_float(L, "expert_weights_scale", false, 0.0f, &hp->expert_weights_scale, e)))
        return rc;
    const bool moe = ad->moe || hp->n_expert > 0;
    if (moe && (hp->n_expert < 1 || hp->n_expert_used < 1 || hp->n_expert_used > hp->n_expert))
        return err_set(e, ERR_FORMAT, "%s: MoE model needs 1 <= %s.expert_used_count (%d) <= %s.expert_count (%d)",
                       L->path, L->A, hp->n_expert_used, L->A, hp->n_expert);

    for (int il = 0; il < hp->n_layer; il++) {
        struct layer *ly = &m->layers[il];
        ly->kind = LAYER_ATTN;
        ly->ffn = moe ? FFN_MOE : FFN_DENSE;
        if ((rc = mload_layer_int(L, "attention.head_count", (uint32_t)il, true, 0, 1, 1 << 16, &ly->n_head, e)) ||
            (rc = mload_layer_int(L, "attention.head_count_kv", (uint32_t)il, false, ly->n_head, 1, 1 << 16,
                                &ly->n_head_kv, e)) ||
            (rc = mload_layer_int(L, "feed_forward_length", (uint32_t)il, !moe, 0, 0, 1 << 24, &ly->n_ff, e)))
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
            rc = mload_int(L, "expert_feed_forward_length", false, def, 1, 1 << 24, &hp->n_ff_exp, e);
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
    if ((rc = mload_int(L, "attention.key_length", false, hd_def, 1, 1 << 16, &hp->head_dim, e)) ||
        (rc = mload_int(L, "attention.value_length", false, hd_def, 1, 1 << 16, &hd_v, e)) ||
        (rc = mload_int(L, "rope.dimension_count", false, hp->head_dim, 0, 1 << 16, &hp->n_rot, e)))
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

    if ((rc = mload_float(L, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->rms_eps, e)) ||
        (rc = mload_float(L, "rope.freq_base", false, 10000.0f, &hp->freq_base, e)))
        return rc;
    if (hp->rms_eps < 0.0f || hp->freq_base <= 0.0f)
        return err_set(e, ERR_RANGE, "%s: rms epsilon %g / rope.freq_base %g out of range", L->path,
                       (double)hp->rms_eps, (double)hp->freq_base);

    /* RoPE scaling (§1, §4.2), resolved like llama-context.cpp */
    char type[32] = "linear";
    rc = gguf_get_cstr(L->g, mload_key(k, sizeof k, L->A, "rope.scaling.type"), type, sizeof type, e);
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
    if ((rc = mload_float(L, "rope.scaling.factor", false, 0.0f, &s, e)))
        return rc;
    if (s == 0.0f && (rc = mload_float(L, "rope.scale_linear", false, 0.0f, &s, e)))
        return rc;
    if (s < 0.0f)
        return err_set(e, ERR_RANGE, "%s: rope scaling factor %g is negative", L->path, (double)s);
    hp->freq_scale = (s == 0.0f || hp->scaling == ROPE_SCALING_NONE) ? 1.0f : 1.0f / s;
    float rope_attn_factor = 1.0f, log_mul = 0.0f;
    if ((rc = mload_int(L, "rope.scaling.original_context_length", false, hp->n_ctx_train, 1, 1 << 30,
                      &hp->n_ctx_orig, e)) ||
        (rc = mload_float(L, "rope.scaling.attn_factor", false, 1.0f, &rope_attn_factor, e)) ||
        (rc = mload_float(L, "rope.scaling.yarn_log_multiplier", false, 0.0f, &log_mul, e)) ||
        (rc = mload_float(L, "rope.scaling.yarn_beta_fast", false, 32.0f, &hp->yarn_beta_fast, e)) ||
        (rc = mload_float(L, "rope.scaling.yarn_beta_slow", false, 1.0f, &hp->yarn_beta_slow, e)))
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

static int dense_tensors(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    const struct hparams *hp = &m->hp;
    const struct arch_desc *ad = m->arch;
    const int64_t E = hp->n_embd, V = hp->n_vocab, hd = hp->head_dim;
    int rc;
    char n[GGUF_MAX_NAME + 32];

    if ((rc = mload_embd_output(L, e)))
        return rc;
    if (ad->out_bias && (rc = mload_vec(L, &m->output_bias, "output.bias", V, false, e)))
        return rc;
    if (ad->rope_freqs && (rc = mload_vec(L, &m->rope_freqs, "rope_freqs.weight", hp->n_rot / 2, false, e)))
        return rc;

    for (int il = 0; il < hp->n_layer; il++) {
        struct layer *ly = &m->layers[il];
        const int64_t nq = hd * ly->n_head, nkv = hd * ly->n_head_kv;
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
        if ((rc = mload_vec(L, &ly->attn_norm, NM("attn_norm.weight"), E, true, e)) ||
            (rc = mload_wt(L, &ly->wqkv, NM("attn_qkv.weight"), E, nq + 2 * nkv, 1, false, e)))
            return rc;
        if (ly->wqkv.data) {
            if ((rc = mload_vec(L, &ly->bqkv, NM("attn_qkv.bias"), nq + 2 * nkv, false, e)))
                return rc;
        } else if ((rc = mload_wt(L, &ly->wq, NM("attn_q.weight"), E, nq, 1, true, e)) ||
                   (rc = mload_wt(L, &ly->wk, NM("attn_k.weight"), E, nkv, 1, true, e)) ||
                   (rc = mload_wt(L, &ly->wv, NM("attn_v.weight"), E, nkv, 1, true, e)) ||
                   (rc = mload_vec(L, &ly->bq, NM("attn_q.bias"), nq, false, e)) ||
                   (rc = mload_vec(L, &ly->bk, NM("attn_k.bias"), nkv, false, e)) ||
                   (rc = mload_vec(L, &ly->bv, NM("attn_v.bias"), nkv, false, e))) {
            return rc;
        }
        if ((rc = mload_wt(L, &ly->wo, NM("attn_output.weight"), nq, E, 1, true, e)))
            return rc;
        if (ad->o_bias && (rc = mload_vec(L, &ly->bo, NM("attn_output.bias"), E, false, e)))
            return rc;
        if (ad->qk_norm && ((rc = mload_vec(L, &ly->q_norm, NM("attn_q_norm.weight"), hd, true, e)) ||
                            (rc = mload_vec(L, &ly->k_norm, NM("attn_k_norm.weight"), hd, true, e))))
            return rc;
        if ((rc = mload_vec(L, &ly->ffn_norm, NM("ffn_norm.weight"), E, true, e)))
            return rc;
        if (ly->ffn == FFN_DENSE) {
            if ((rc = mload_ffn_dense(L, il, ad->ffn_bias, e)))
                return rc;
        } else {
            const int64_t F = hp->n_ff_exp, X = hp->n_expert;
            if ((rc = mload_wt(L, &ly->gate_inp, NM("ffn_gate_inp.weight"), E, X, 1, true, e)) ||
                (rc = mload_wt(L, &ly->gate_exps, NM("ffn_gate_exps.weight"), E, F, X, true, e)) ||
                (rc = mload_wt(L, &ly->up_exps, NM("ffn_up_exps.weight"), E, F, X, true, e)) ||
                (rc = mload_wt(L, &ly->down_exps, NM("ffn_down_exps.weight"), F, E, X, true, e)))
                return rc;
        }
#undef NM
        ly->kv_index = m->n_kv_layers++;
    }
    return 0;
}

int arch_dense_load(struct loader *L, struct err *e)
{
    int rc = dense_hparams(L, e);
    return rc ? rc : dense_tensors(L, e);
}
