/* arch_qwen35.c — hyperparameters and tensors of the Gated DeltaNet hybrids
 * `qwen35` (dense FFN) and `qwen35moe` (routed experts + sigmoid-gated shared
 * expert), shared spec arch-qwen35.md §2–§5. The trunk is n_layer =
 * block_count − nextn_predict_layers layers of kind LAYER_GDN or
 * LAYER_GATED_ATTN; a trailing MTP block is bound (shapes checked) but not
 * run. Keys the 80fb11a loaders ignore are ignored here too
 * (attention.scale, expert_weights_scale). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mload.h"
#include "../num/quant.h"

/* Which trunk/MTP blocks are recurrent: attention.recurrent_layers (array of
 * block_count bool/int, or one scalar) else the full_attention_interval rule. */
static int layer_pattern(struct loader *L, bool *rec, struct err *e)
{
    struct model *m = L->m;
    const struct hparams *hp = &m->hp;
    char k[160];
    snprintf(k, sizeof k, "%s.attention.recurrent_layers", L->A);
    const struct gguf_kv *kv = gguf_find_kv(L->g, k);
    if (kv) {
        if (kv->type == GGUF_ARRAY) {
            const struct gguf_kv *arr;
            int rc = gguf_get_arr(L->g, k, GGUF_INT64, &arr, e);
            if (rc)
                return err_prefix(e, "%s", L->path);
            if (arr->arr_n != (uint64_t)hp->n_layer_all)
                return err_set(e, ERR_FORMAT, "%s: '%s' has %llu entries, block_count is %d", L->path, k,
                               (unsigned long long)arr->arr_n, hp->n_layer_all);
            for (int i = 0; i < hp->n_layer_all; i++)
                rec[i] = gguf_arr_i64(arr, (uint64_t)i) != 0;
        } else {
            int64_t v;
            int rc = gguf_get_i64(L->g, k, &v, e);
            if (rc)
                return err_prefix(e, "%s", L->path);
            for (int i = 0; i < hp->n_layer_all; i++)
                rec[i] = v != 0;
        }
    } else {
        int interval;
        int rc = mload_int(L, "full_attention_interval", false, 4, 1, 1 << 20, &interval, e);
        if (rc)
            return rc;
        for (int i = 0; i < hp->n_layer_all; i++)
            rec[i] = (i + 1) % interval != 0;
    }
    for (int i = hp->n_layer; i < hp->n_layer_all; i++)
        rec[i] = false; /* MTP blocks are full attention */
    return 0;
}

int arch_qwen35_hparams(struct loader *L, bool *rec, struct err *e)
{
    struct model *m = L->m;
    struct hparams *hp = &m->hp;
    const bool moe = m->arch->moe;
    int rc;
    char k[160];

    if ((rc = mload_n_vocab(L, e)) ||
        (rc = mload_int(L, "context_length", true, 0, 1, 1 << 30, &hp->n_ctx_train, e)) ||
        (rc = mload_int(L, "embedding_length", true, 0, 1, 1 << 20, &hp->n_embd, e)) ||
        (rc = mload_int(L, "block_count", true, 0, 1, MODEL_MAX_LAYERS, &hp->n_layer_all, e)) ||
        (rc = mload_int(L, "nextn_predict_layers", false, 0, 0, 1, &hp->n_nextn, e)))
        return rc;
    hp->n_layer = hp->n_layer_all - hp->n_nextn;
    if (hp->n_layer < 1)
        return err_set(e, ERR_FORMAT, "%s: block_count %d leaves no trunk layer after %d MTP block(s)", L->path,
                       hp->n_layer_all, hp->n_nextn);
    m->layers = calloc((size_t)hp->n_layer_all, sizeof *m->layers);
    if (!m->layers)
        return err_set(e, ERR_NOMEM, "%s: out of memory", L->path);
    if ((rc = layer_pattern(L, rec, e)))
        return rc;

    /* GDN dimensions (§3) */
    int d_inner;
    if ((rc = mload_int(L, "ssm.conv_kernel", true, 0, 1, 64, &hp->d_conv, e)) ||
        (rc = mload_int(L, "ssm.state_size", true, 0, 1, 4096, &hp->d_state, e)) ||
        (rc = mload_int(L, "ssm.group_count", true, 0, 1, 1 << 12, &hp->n_k_heads, e)) ||
        (rc = mload_int(L, "ssm.time_step_rank", true, 0, 1, 1 << 12, &hp->n_v_heads, e)) ||
        (rc = mload_int(L, "ssm.inner_size", true, 0, 1, 1 << 24, &d_inner, e)))
        return rc;
    if (d_inner != hp->n_v_heads * hp->d_state)
        return err_set(e, ERR_UNSUPPORTED, "%s: ssm.inner_size %d != time_step_rank %d · state_size %d (d_v must equal d_k)",
                       L->path, d_inner, hp->n_v_heads, hp->d_state);
    if (hp->n_v_heads % hp->n_k_heads)
        return err_set(e, ERR_FORMAT, "%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", L->path,
                       hp->n_v_heads, hp->n_k_heads);

    /* MoE */
    if (moe) {
        if ((rc = mload_int(L, "expert_count", true, 0, 1, 1 << 16, &hp->n_expert, e)) ||
            (rc = mload_int(L, "expert_used_count", true, 0, 1, 1 << 16, &hp->n_expert_used, e)))
            return rc;
        if (hp->n_expert_used > hp->n_expert)
            return err_set(e, ERR_FORMAT, "%s: expert_used_count %d > expert_count %d", L->path, hp->n_expert_used,
                           hp->n_expert);
    }
    hp->expert_weights_scale = 0.0f; /* never read by the 80fb11a qwen35moe loader (spec §2) */

    int n_head0 = 0, n_ff0 = 0;
    for (int il = 0; il < hp->n_layer_all; il++) {
        struct layer *ly = &m->layers[il];
        ly->kind = rec[il] ? LAYER_GDN : LAYER_GATED_ATTN;
        ly->ffn = moe ? FFN_MOE : FFN_DENSE;
        ly->kv_index = -1;
        ly->gdn_index = -1;
        if ((rc = mload_layer_int(L, "feed_forward_length", (uint32_t)il, !moe, 0, 0, 1 << 24, &ly->n_ff, e)))
            return rc;
        if (!n_ff0)
            n_ff0 = ly->n_ff;
        if (!moe && ly->n_ff < 1)
            return err_set(e, ERR_FORMAT, "%s: layer %d: feed_forward_length is 0", L->path, il);
        if (ly->kind == LAYER_GATED_ATTN) {
            if ((rc = mload_layer_int(L, "attention.head_count", (uint32_t)il, true, 0, 1, 1 << 16, &ly->n_head, e)) ||
                (rc = mload_layer_int(L, "attention.head_count_kv", (uint32_t)il, false, ly->n_head, 1, 1 << 16,
                                      &ly->n_head_kv, e)))
                return rc;
            if (ly->n_head % ly->n_head_kv)
                return err_set(e, ERR_FORMAT, "%s: layer %d: head_count %d is not a multiple of head_count_kv %d",
                               L->path, il, ly->n_head, ly->n_head_kv);
            if (!n_head0)
                n_head0 = ly->n_head;
            if (ly->n_head > hp->n_head_max)
                hp->n_head_max = ly->n_head;
            if (ly->n_head_kv > hp->n_head_kv_max)
                hp->n_head_kv_max = ly->n_head_kv;
        }
        if (!moe && il < hp->n_layer && ly->n_ff > hp->n_ff_max)
            hp->n_ff_max = ly->n_ff;
    }
    /* GDN layers have no attention heads; give them the first attention layer's so that
     * per-layer head ratios stay defined where the shared code sizes scratch. */
    if (!n_head0) {
        if ((rc = mload_int(L, "attention.head_count", true, 0, 1, 1 << 16, &n_head0, e)))
            return rc;
        hp->n_head_max = n_head0;
        hp->n_head_kv_max = n_head0;
    }
    for (int il = 0; il < hp->n_layer_all; il++)
        if (m->layers[il].kind == LAYER_GDN) {
            m->layers[il].n_head = n_head0;
            m->layers[il].n_head_kv = n_head0;
        }
    if (moe) {
        if ((rc = mload_int(L, "expert_feed_forward_length", false, n_ff0 / hp->n_expert_used, 1, 1 << 24,
                            &hp->n_ff_exp, e)) ||
            (rc = mload_int(L, "expert_shared_feed_forward_length", false, n_ff0, 0, 1 << 24, &hp->n_ff_shexp, e)))
            return rc;
        if (hp->n_ff_exp < 1)
            return err_set(e, ERR_FORMAT, "%s: MoE expert width is 0 (set %s.expert_feed_forward_length)", L->path,
                           L->A);
        for (int il = 0; il < hp->n_layer_all; il++)
            m->layers[il].n_ff = 0;
    }

    const int hd_def = hp->n_embd / n_head0;
    int hd_v;
    if ((rc = mload_int(L, "attention.key_length", false, hd_def, 1, 1 << 16, &hp->head_dim, e)) ||
        (rc = mload_int(L, "attention.value_length", false, hd_def, 1, 1 << 16, &hd_v, e)) ||
        (rc = mload_int(L, "rope.dimension_count", false, hp->head_dim, 0, 1 << 16, &hp->n_rot, e)))
        return rc;
    if (hd_v != hp->head_dim)
        return err_set(e, ERR_UNSUPPORTED, "%s: key_length %d != value_length %d", L->path, hp->head_dim, hd_v);
    if (hp->head_dim > 1024 || hp->n_rot % 2 || hp->n_rot > hp->head_dim)
        return err_set(e, ERR_UNSUPPORTED, "%s: head dimension %d / rope.dimension_count %d not supported", L->path,
                       hp->head_dim, hp->n_rot);

    snprintf(k, sizeof k, "%s.rope.dimension_sections", L->A);
    const struct gguf_kv *sec;
    rc = gguf_get_arr(L->g, k, GGUF_INT64, &sec, e);
    if (rc == ERR_NOTFOUND)
        return err_set(e, ERR_NOTFOUND, "%s: missing required key '%s'", L->path, k);
    if (rc)
        return err_prefix(e, "%s", L->path);
    if (sec->arr_n < 3 || sec->arr_n > 4)
        return err_set(e, ERR_FORMAT, "%s: '%s' has %llu entries, expected 4", L->path, k,
                       (unsigned long long)sec->arr_n);
    int sum = 0;
    for (uint64_t i = 0; i < sec->arr_n; i++) {
        int64_t v = gguf_arr_i64(sec, i);
        if (v < 0 || v > 4096)
            return err_set(e, ERR_RANGE, "%s: '%s'[%llu] = %lld is outside [0, 4096]", L->path, k,
                           (unsigned long long)i, (long long)v);
        hp->rope_sections[i] = (int)v;
        sum += (int)v;
    }
    if (sum < 1)
        return err_set(e, ERR_FORMAT, "%s: '%s' sums to 0", L->path, k);

    if ((rc = mload_float(L, "attention.layer_norm_rms_epsilon", true, 0.0f, &hp->rms_eps, e)) ||
        (rc = mload_float(L, "rope.freq_base", false, 10000.0f, &hp->freq_base, e)))
        return rc;
    if (hp->rms_eps < 0.0f || hp->freq_base <= 0.0f)
        return err_set(e, ERR_RANGE, "%s: rms epsilon %g / rope.freq_base %g out of range", L->path,
                       (double)hp->rms_eps, (double)hp->freq_base);
    /* no RoPE scaling in these files: plain angles, mscale 1 */
    hp->scaling = ROPE_SCALING_NONE;
    hp->freq_scale = 1.0f;
    hp->ext_factor = 0.0f;
    hp->attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    hp->kq_scale = 1.0f / sqrtf((float)hp->head_dim);
    return 0;
}

/* Copy a fused [n_in, 2F, X] gate/up expert stack into a gate stack and an up stack [n_in, F, X]. */
static int split_gate_up(struct loader *L, const struct wt *gu, int64_t F, int64_t X, struct wt *g, struct wt *u,
                         struct err *e)
{
    struct model *m = L->m;
    const size_t half = (size_t)F * gu->row_bytes;
    float **grown = realloc(m->owned, sizeof(float *) * (size_t)(m->n_owned + 2));
    if (grown)
        m->owned = grown;
    char *gb = grown ? malloc(half * (size_t)X) : NULL, *ub = gb ? malloc(half * (size_t)X) : NULL;
    if (!ub) {
        free(gb);
        return err_set(e, ERR_NOMEM, "%s: out of memory splitting '%s'", L->path, gu->name);
    }
    for (int64_t x = 0; x < X; x++) {
        const char *src = (const char *)gu->data + (size_t)x * 2 * half;
        memcpy(gb + (size_t)x * half, src, half);
        memcpy(ub + (size_t)x * half, src + half, half);
    }
    m->owned[m->n_owned++] = (float *)(void *)gb;
    m->owned[m->n_owned++] = (float *)(void *)ub;
    *g = *gu;
    g->ne[1] = F;
    g->data = gb;
    *u = *g;
    u->data = ub;
    return 0;
}

int arch_qwen35_layer(struct loader *L, int il, struct err *e)
{
    struct model *m = L->m;
    const struct hparams *hp = &m->hp;
    struct layer *ly = &m->layers[il];
    const int64_t E = hp->n_embd, D = hp->head_dim;
    const int64_t key_dim = (int64_t)hp->n_k_heads * hp->d_state, value_dim = (int64_t)hp->n_v_heads * hp->d_state;
    const int64_t conv_dim = 2 * key_dim + value_dim, HV = hp->n_v_heads;
    char n[GGUF_MAX_NAME + 32];
    int rc;
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    /* qwen4exp's hyper-connection mixers take the place of these norms (arch_qwen4exp.c) */
    if (!m->arch->hc && ((rc = mload_vec(L, &ly->attn_norm, NM("attn_norm.weight"), E, true, e)) ||
                         (rc = mload_vec(L, &ly->ffn_norm, NM("post_attention_norm.weight"), E, true, e))))
        return rc;
    if (ly->kind == LAYER_GDN) {
        if ((rc = mload_wt(L, &ly->ssm_qkv, NM("attn_qkv.weight"), E, conv_dim, 1, true, e)) ||
            (rc = mload_wt(L, &ly->ssm_z, NM("attn_gate.weight"), E, value_dim, 1, true, e)) ||
            (rc = mload_flat(L, &ly->ssm_conv, NM("ssm_conv1d.weight"), hp->d_conv, conv_dim, e)) ||
            (rc = mload_vec(L, &ly->ssm_dt, NM("ssm_dt.bias"), HV, true, e)) ||
            (rc = mload_vec(L, &ly->ssm_a, NM("ssm_a"), HV, true, e)) ||
            (rc = mload_wt(L, &ly->ssm_beta, NM("ssm_beta.weight"), E, HV, 1, true, e)) ||
            (rc = mload_wt(L, &ly->ssm_alpha, NM("ssm_alpha.weight"), E, HV, 1, true, e)) ||
            (rc = mload_vec(L, &ly->ssm_norm, NM("ssm_norm.weight"), hp->d_state, true, e)) ||
            (rc = mload_wt(L, &ly->ssm_out, NM("ssm_out.weight"), value_dim, E, 1, true, e)))
            return rc;
    } else {
        const int64_t nq = D * ly->n_head, nkv = D * ly->n_head_kv;
        if (gguf_find_tensor(L->g, NM("attn_qkv.weight")))
            return err_set(e, ERR_UNSUPPORTED,
                           "%s: fused '%s' on a full-attention layer is not run by llama.cpp 80fb11a; "
                           "write attn_q/attn_k/attn_v", L->path, n);
        if ((rc = mload_wt(L, &ly->wq, NM("attn_q.weight"), E, 2 * nq, 1, true, e)) ||
            (rc = mload_wt(L, &ly->wk, NM("attn_k.weight"), E, nkv, 1, true, e)) ||
            (rc = mload_wt(L, &ly->wv, NM("attn_v.weight"), E, nkv, 1, true, e)) ||
            (rc = mload_wt(L, &ly->wo, NM("attn_output.weight"), nq, E, 1, true, e)) ||
            (rc = mload_vec(L, &ly->q_norm, NM("attn_q_norm.weight"), D, true, e)) ||
            (rc = mload_vec(L, &ly->k_norm, NM("attn_k_norm.weight"), D, true, e)))
            return rc;
    }
    if (ly->ffn == FFN_DENSE) {
        if ((rc = mload_ffn_dense(L, il, false, e)))
            return rc;
    } else {
        const int64_t F = hp->n_ff_exp, X = hp->n_expert, FS = hp->n_ff_shexp;
        if ((rc = mload_wt(L, &ly->gate_inp, NM("ffn_gate_inp.weight"), E, X, 1, true, e)))
            return rc;
        struct wt gu;
        if ((rc = mload_wt(L, &gu, NM("ffn_gate_up_exps.weight"), E, 2 * F, X, false, e)))
            return rc;
        if (gu.data) {
            /* fused: per expert rows [0, F) are gate, [F, 2F) up. Split into two owned stacks so
             * that every expert tensor has the plain [n_in, F, n_expert] layout the kernels and the
             * weight repacking expect (costs one copy of the tensor) */
            if ((rc = split_gate_up(L, &gu, F, X, &ly->gate_exps, &ly->up_exps, e)))
                return rc;
        } else if ((rc = mload_wt(L, &ly->gate_exps, NM("ffn_gate_exps.weight"), E, F, X, true, e)) ||
                   (rc = mload_wt(L, &ly->up_exps, NM("ffn_up_exps.weight"), E, F, X, true, e))) {
            return rc;
        }
        if ((rc = mload_wt(L, &ly->down_exps, NM("ffn_down_exps.weight"), F, E, X, true, e)))
            return rc;
        if (FS > 0) {
            if ((rc = mload_wt(L, &ly->down_shexp, NM("ffn_down_shexp.weight"), FS, E, 1, false, e)))
                return rc;
            if (ly->down_shexp.data &&
                ((rc = mload_vec(L, &ly->gate_inp_shexp, NM("ffn_gate_inp_shexp.weight"), E, true, e)) ||
                 (rc = mload_wt(L, &ly->gate_shexp, NM("ffn_gate_shexp.weight"), E, FS, 1, true, e)) ||
                 (rc = mload_wt(L, &ly->up_shexp, NM("ffn_up_shexp.weight"), E, FS, 1, true, e))))
                return rc;
        }
    }
    if (il >= hp->n_layer) { /* MTP block */
        struct mtp_head *t = &m->mtp;
        if ((rc = mload_wt(L, &t->eh_proj, NM("nextn.eh_proj.weight"), 2 * E, E, 1, true, e)) ||
            (rc = mload_vec(L, &t->enorm, NM("nextn.enorm.weight"), E, true, e)) ||
            (rc = mload_vec(L, &t->hnorm, NM("nextn.hnorm.weight"), E, true, e)) ||
            (rc = mload_wt(L, &t->embed_tokens, NM("nextn.embed_tokens.weight"), E, hp->n_vocab, 1, false, e)) ||
            (rc = mload_vec(L, &t->head_norm, NM("nextn.shared_head_norm.weight"), E, false, e)) ||
            (rc = mload_wt(L, &t->head, NM("nextn.shared_head_head.weight"), E, hp->n_vocab, 1, false, e)))
            return rc;
    } else if (ly->kind == LAYER_GDN) {
        ly->gdn_index = m->n_gdn_layers++;
    } else {
        ly->kv_index = m->n_kv_layers++;
    }
#undef NM
    return 0;
}

int arch_qwen35_load(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    bool *rec = calloc(MODEL_MAX_LAYERS, sizeof(bool));
    if (!rec)
        return err_set(e, ERR_NOMEM, "%s: out of memory", L->path);
    int rc = arch_qwen35_hparams(L, rec, e);
    free(rec);
    if (rc)
        return rc;
    if ((rc = mload_embd_output(L, e)))
        return rc;
    /* a trunk of one kind only is accepted (llama.cpp 80fb11a aborts on it, spec §4) */
    for (int il = 0; il < m->hp.n_layer_all; il++)
        if ((rc = arch_qwen35_layer(L, il, e)))
            return rc;
    return 0;
}
