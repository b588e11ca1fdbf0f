/* arch_qwen4exp.c — hyperparameters and tensors of `qwen4exp` (shared spec
 * arch-qwen4exp.md §1–§2): the qwen35moe trunk (arch_qwen35.c binds its GDN,
 * attention and MoE tensors) plus hyper-connection mixers in place of every
 * RMSNorm, the QSA lightning indexer on the full-attention layers, and PLE
 * n-gram embeddings on one GDN layer. llama.cpp 80fb11a builds no MTP for
 * this arch, so only the trunk layers are bound. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mload.h"

/* {A}.suffix as an unsigned 64-bit array of at least n entries into out[0..n) (the hash constants:
 * ~45-bit values that must stay exact). */
static int load_u64_arr(struct loader *L, const char *suffix, int n, uint64_t *out, struct err *e)
{
    char k[160];
    mload_key(k, sizeof k, L->A, suffix);
    const struct gguf_kv *arr;
    int rc = gguf_get_arr(L->g, k, GGUF_UINT64, &arr, e);
    if (rc == ERR_NOTFOUND)
        return err_set(e, ERR_NOTFOUND, "%s: missing required key '%s'", L->path, k);
    if (rc)
        return err_prefix(e, "%s", L->path);
    if (arr->arr_type != GGUF_UINT64) /* as llama.cpp: a signed array could not hold the full range */
        return err_set(e, ERR_FORMAT, "%s: '%s' is an array of %s, expected uint64", L->path, k,
                       gguf_vtype_name(arr->arr_type));
    if (arr->arr_n < (uint64_t)n)
        return err_set(e, ERR_FORMAT, "%s: '%s' has %llu entries, at least %d needed", L->path, k,
                       (unsigned long long)arr->arr_n, n);
    for (int i = 0; i < n; i++)
        out[i] = (uint64_t)gguf_arr_i64(arr, (uint64_t)i);
    return 0;
}

/* attention.compress_ratios: one scalar for every layer or exactly block_count entries; absent = 0 (dense). */
static int load_ratios(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    char k[160];
    mload_key(k, sizeof k, L->A, "attention.compress_ratios");
    const struct gguf_kv *kv = gguf_find_kv(L->g, k);
    if (kv && kv->type == GGUF_ARRAY && kv->arr_n != (uint64_t)m->hp.n_layer_all)
        return err_set(e, ERR_FORMAT, "%s: '%s' has %llu entries, block_count is %d", L->path, k,
                       (unsigned long long)kv->arr_n, m->hp.n_layer_all);
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct layer *ly = &m->layers[il];
        int r = 0;
        int rc = mload_layer_int(L, "attention.compress_ratios", (uint32_t)il, false, 0, 0, 64, &r, e);
        if (rc)
            return rc;
        ly->qsa_index = -1;
        if (ly->kind == LAYER_GDN)
            continue;
        ly->qsa_ratio = r;
        if (r > 0) {
            ly->kind = LAYER_SPARSE_ATTN;
            ly->qsa_index = m->n_qsa_layers++;
        }
    }
    return 0;
}

static int load_ple_hparams(struct loader *L, const bool *rec, struct err *e)
{
    struct model *m = L->m;
    struct hparams *hp = &m->hp;
    char k[160];
    mload_key(k, sizeof k, L->A, "ple.layers");
    const struct gguf_kv *arr;
    int rc = gguf_get_arr(L->g, k, GGUF_INT64, &arr, e);
    if (rc == ERR_NOTFOUND || (!rc && arr->arr_n == 0))
        return 0; /* no PLE */
    if (rc)
        return err_prefix(e, "%s", L->path);
    if (arr->arr_n != 1)
        return err_set(e, ERR_UNSUPPORTED, "%s: '%s' lists %llu layers; exactly one is supported", L->path, k,
                       (unsigned long long)arr->arr_n);
    const int64_t pl = gguf_arr_i64(arr, 0);
    if (pl < 0 || pl >= hp->n_layer)
        return err_set(e, ERR_RANGE, "%s: PLE layer %lld is outside the trunk [0, %d)", L->path, (long long)pl,
                       hp->n_layer);
    if (!rec[pl])
        return err_set(e, ERR_FORMAT, "%s: PLE layer %lld is not a linear attention layer", L->path, (long long)pl);
    hp->ple_layer = (int)pl;
    if ((rc = mload_int(L, "ple.ngram_size", true, 0, 2, 8, &hp->ple_ngram, e)) ||
        (rc = mload_int(L, "ple.heads_per_ngram", true, 0, 1, 64, &hp->ple_heads_per_ngram, e)) ||
        (rc = mload_int(L, "ple.conv_kernel", true, 0, 1, 64, &hp->ple_kernel, e)) ||
        (rc = mload_int(L, "ple.eos_token_id", true, 0, 0, hp->n_vocab - 1, &hp->ple_eos, e)) ||
        (rc = mload_int(L, "embedding_length_per_layer_input", true, 0, 1, 1 << 20, &hp->d_ple, e)))
        return rc;
    hp->n_ple_heads = (hp->ple_ngram - 1) * hp->ple_heads_per_ngram;
    if (hp->n_ple_heads > 64)
        return err_set(e, ERR_UNSUPPORTED, "%s: %d PLE heads (n-gram %d × %d heads), at most 64", L->path,
                       hp->n_ple_heads, hp->ple_ngram, hp->ple_heads_per_ngram);
    if (hp->n_ple_heads * hp->d_ple != hp->n_embd)
        return err_set(e, ERR_FORMAT, "%s: %d PLE heads × width %d != embedding_length %d", L->path, hp->n_ple_heads,
                       hp->d_ple, hp->n_embd);
    if ((rc = load_u64_arr(L, "ple.layer_multipliers", hp->ple_ngram, hp->ple_mult, e)) ||
        (rc = load_u64_arr(L, "ple.head_offsets", hp->n_ple_heads, hp->ple_off, e)) ||
        (rc = load_u64_arr(L, "ple.head_vocab_sizes", hp->n_ple_heads, hp->ple_vocab, e)))
        return rc;
    for (int h = 0; h < hp->n_ple_heads; h++)
        if (hp->ple_vocab[h] == 0 || hp->ple_vocab[h] > INT32_MAX || hp->ple_off[h] > INT32_MAX ||
            hp->ple_off[h] + hp->ple_vocab[h] > INT32_MAX)
            return err_set(e, ERR_RANGE, "%s: PLE head %d: offset %llu, size %llu out of range", L->path, h,
                           (unsigned long long)hp->ple_off[h], (unsigned long long)hp->ple_vocab[h]);
    return 0;
}

/* One hyper-connection mixer blk.N.hc_<which>_{norm,down,up,inject} (prefix "" for the output one). */
static int load_hc(struct loader *L, struct hc_mix *h, const char *prefix, bool inject, struct err *e)
{
    const struct hparams *hp = &L->m->hp;
    const int64_t HD = (int64_t)hp->hc * hp->n_embd, LR = hp->hc_lr;
    char n[GGUF_MAX_NAME + 32];
    int rc;
#define NM(s) (snprintf(n, sizeof n, "%s%s", prefix, s), n)
    if ((rc = mload_vec(L, &h->norm, NM("_norm.weight"), HD, true, e)) ||
        (rc = mload_wt(L, &h->down, NM("_down.weight"), HD, LR, 1, true, e)) ||
        (rc = mload_wt(L, &h->up, NM("_up.weight"), LR, HD, 1, true, e)) ||
        (inject && (rc = mload_wt(L, &h->inject, NM("_inject.weight"), HD, hp->hc, 1, true, e))))
        return rc;
#undef NM
    return 0;
}

static int load_layer_extras(struct loader *L, int il, struct err *e)
{
    struct model *m = L->m;
    const struct hparams *hp = &m->hp;
    struct layer *ly = &m->layers[il];
    const int64_t E = hp->n_embd, HD = (int64_t)hp->hc * E;
    char n[GGUF_MAX_NAME + 32];
    int rc;
#define NM(s) (snprintf(n, sizeof n, "blk.%d.%s", il, s), n)
    char pre[64];
    snprintf(pre, sizeof pre, "blk.%d.hc_attn", il);
    if ((rc = load_hc(L, &ly->hc_attn, pre, true, e)))
        return rc;
    snprintf(pre, sizeof pre, "blk.%d.hc_ffn", il);
    if ((rc = load_hc(L, &ly->hc_ffn, pre, true, e)))
        return rc;
    if (ly->kind != LAYER_GDN && /* the indexer is required on ratio-0 layers too, though not run there */
        ((rc = mload_wt(L, &ly->idx_q, NM("indexer.q_proj.weight"), E, (int64_t)hp->n_idx_head * hp->d_idx, 1, true,
                        e)) ||
         (rc = mload_wt(L, &ly->idx_k, NM("indexer.k_proj.weight"), E, hp->d_idx, 1, true, e)) ||
         (rc = mload_vec(L, &ly->idx_q_norm, NM("indexer.q_norm.weight"), hp->d_idx, true, e)) ||
         (rc = mload_vec(L, &ly->idx_k_norm, NM("indexer.k_norm.weight"), hp->d_idx, true, e))))
        return rc;
    if (il == hp->ple_layer &&
        ((rc = mload_wt(L, &ly->ple_key, NM("ple_key.weight"), E, HD, 1, true, e)) ||
         (rc = mload_wt(L, &ly->ple_value, NM("ple_value.weight"), E, E, 1, true, e)) ||
         (rc = mload_vec(L, &ly->ple_norm_key, NM("ple_norm_key.weight"), HD, true, e)) ||
         (rc = mload_vec(L, &ly->ple_norm_query, NM("ple_norm_query.weight"), HD, true, e)) ||
         (rc = mload_vec(L, &ly->ple_norm_conv, NM("ple_norm_conv.weight"), HD, true, e)) ||
         (rc = mload_flat(L, &ly->ple_conv, NM("ple_conv1d.weight"), hp->ple_kernel, HD, e))))
        return rc;
#undef NM
    return 0;
}

int arch_qwen4exp_load(struct loader *L, struct err *e)
{
    struct model *m = L->m;
    struct hparams *hp = &m->hp;
    bool *rec = calloc(MODEL_MAX_LAYERS, sizeof(bool));
    if (!rec)
        return err_set(e, ERR_NOMEM, "%s: out of memory", L->path);
    int rc = arch_qwen35_hparams(L, rec, e);
    if (!rc)
        rc = load_ple_hparams(L, rec, e);
    free(rec);
    if (rc)
        return rc;
    hp->gdn_sigmoid_gate = true;
    if ((rc = mload_int(L, "hyper_connection.count", true, 0, 2, 64, &hp->hc, e)) ||
        (rc = mload_int(L, "hyper_connection.low_rank", true, 0, 1, 1 << 16, &hp->hc_lr, e)) ||
        (rc = mload_int(L, "attention.indexer.head_count", true, 0, 1, 1 << 10, &hp->n_idx_head, e)) ||
        (rc = mload_int(L, "attention.indexer.key_length", true, 0, 2, 1 << 12, &hp->d_idx, e)) ||
        (rc = mload_int(L, "attention.indexer.top_k", true, 0, 1, 1 << 24, &hp->idx_top_k, e)))
        return rc;
    if (hp->n_rot > hp->d_idx)
        return err_set(e, ERR_UNSUPPORTED, "%s: rope.dimension_count %d > indexer key_length %d", L->path, hp->n_rot,
                       hp->d_idx);
    if ((rc = load_ratios(L, e)))
        return rc;

    const int64_t E = hp->n_embd, V = hp->n_vocab;
    if ((rc = mload_wt(L, &m->tok_embd, "token_embd.weight", E, V, 1, true, e)) ||
        (rc = mload_wt(L, &m->output, "output.weight", E, V, 1, false, e)) ||
        (rc = load_hc(L, &m->output_hc, "output_hc", false, e)))
        return rc;
    if (!m->output.data) { /* tied */
        m->output = m->tok_embd;
        m->tied = true;
    }
    if (hp->ple_layer >= 0) {
        const struct gguf_tensor *t = gguf_find_tensor(L->g, "per_layer_token_embd.weight");
        uint64_t need = 0;
        for (int h = 0; h < hp->n_ple_heads; h++)
            if (hp->ple_off[h] + hp->ple_vocab[h] > need)
                need = hp->ple_off[h] + hp->ple_vocab[h];
        if (t && (uint64_t)t->ne[1] < need)
            return err_set(e, ERR_FORMAT, "%s: per_layer_token_embd.weight has %lld rows, the PLE heads need %llu",
                           L->path, (long long)t->ne[1], (unsigned long long)need);
        if ((rc = mload_wt(L, &m->ple_embd, "per_layer_token_embd.weight", hp->d_ple, t ? t->ne[1] : (int64_t)need,
                           1, true, e)))
            return rc;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = arch_qwen35_layer(L, il, e)) || (rc = load_layer_extras(L, il, e)))
            return rc;
    return 0;
}
