/* tok_vocab.c — build the vocabulary the way llama.cpp's llama_vocab::load
 * does: defaults per tokenizer model, pre-tokenizer selection, token table,
 * BPE merge ranks, special ids, attribute fix-ups by token text, the EOG set,
 * the special-token cache and the name-based LSTRIP/RSTRIP quirks. */
#include "tok_internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static uint64_t hash_pair(int32_t l, int32_t r)
{
    uint64_t k = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n * 2)
        c <<= 1;
    return c;
}

int32_t tok_map_find(const struct tok_vocab *v, const char *s, size_t len)
{
    if (!v->map.cap)
        return TOK_NULL;
    uint32_t mask = v->map.cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
        int32_t id = v->map.slot[i];
        if (id < 0)
            return TOK_NULL;
        if (v->len[id] == len && !memcmp(v->text[id], s, len))
            return id;
    }
}

/* Insert id; returns the id already holding the same text, or -1. */
static int32_t map_insert(struct tok_vocab *v, int32_t id)
{
    uint32_t mask = v->map.cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(v->text[id], v->len[id]) & mask;; i = (i + 1) & mask) {
        int32_t o = v->map.slot[i];
        if (o < 0) {
            v->map.slot[i] = id;
            return -1;
        }
        if (v->len[o] == v->len[id] && !memcmp(v->text[o], v->text[id], v->len[id]))
            return o;
    }
}

int32_t tok_merge_rank(const struct tok_vocab *v, int32_t lid, int32_t rid, const char *l, size_t ll,
                       const char *r, size_t rl)
{
    if (lid >= 0 && rid >= 0 && v->merges.cap) {
        uint64_t key = (((uint64_t)(uint32_t)lid << 32) | (uint32_t)rid) + 1;
        uint32_t mask = v->merges.cap - 1;
        for (uint32_t i = (uint32_t)hash_pair(lid, rid) & mask;; i = (i + 1) & mask) {
            if (!v->merges.key[i])
                break;
            if (v->merges.key[i] == key)
                return v->merges.rank[i];
        }
    }
    /* merges whose halves are not tokens (absent from real vocabularies) */
    for (int32_t k = 0; k < v->n_str_merges; k++)
        if (strlen(v->str_merge_l[k]) == ll && strlen(v->str_merge_r[k]) == rl &&
            !memcmp(v->str_merge_l[k], l, ll) && !memcmp(v->str_merge_r[k], r, rl))
            return v->str_merge_rank[k];
    return -1;
}

void tok_desc_init(struct tok_desc *d)
{
    memset(d, 0, sizeof *d);
    d->bos = d->eos = d->eot = d->eom = d->unk = d->sep = d->pad = d->mask = -2;
    d->add_bos = d->add_eos = d->add_space_prefix = -1;
}

void tok_free(struct tok_vocab *v)
{
    if (!v)
        return;
    if (v->piece)
        for (int32_t i = 0; i < v->n_tokens; i++)
            free(v->piece[i]);
    free(v->piece);
    free(v->piece_len);
    free(v->text);
    free(v->len);
    free(v->score);
    free(v->attr);
    free(v->arena);
    free(v->map.slot);
    free(v->merges.key);
    free(v->merges.rank);
    for (int32_t k = 0; k < v->n_str_merges; k++) {
        free(v->str_merge_l[k]);
        free(v->str_merge_r[k]);
    }
    free(v->str_merge_l);
    free(v->str_merge_r);
    free(v->str_merge_rank);
    free(v->special);
    free(v->eog);
    free(v->suppress);
    tok_pretok_free(v->pretok);
    free(v);
}

struct pre_name {
    const char *name;
    enum tok_pre pre;
    int flags; /* PF_* */
};
enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NO_CLEAN = 4, PF_NO_BOS_ID = 8 };

/* tokenizer.ggml.pre values whose patterns we implement (llama-vocab.cpp's table). */
static const struct pre_name k_pre_names[] = {
    {"default", TOK_PRE_DEFAULT, 0},
    {"llama3", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-v3", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"llama-bpe", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon3", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"falcon-h1", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"pixtral", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"midm-2.0", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"lfm2", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"jina-v5-nano", TOK_PRE_LLAMA3, PF_IGNORE_MERGES | PF_ADD_BOS},
    {"dbrx", TOK_PRE_LLAMA3, 0},
    {"smaug-bpe", TOK_PRE_LLAMA3, 0},
    {"glm4", TOK_PRE_CHATGLM4, PF_NO_BOS_ID},
    {"chatglm-bpe", TOK_PRE_CHATGLM4, PF_NO_BOS_ID},
    {"deepseek-llm", TOK_PRE_DEEPSEEK_LLM, PF_NO_CLEAN},
    {"deepseek-coder", TOK_PRE_DEEPSEEK_CODER, PF_NO_CLEAN},
    {"falcon", TOK_PRE_FALCON, 0},
    {"mpt", TOK_PRE_GPT2, 0},
    {"olmo", TOK_PRE_GPT2, 0},
    {"jais", TOK_PRE_GPT2, 0},
    {"trillion", TOK_PRE_GPT2, PF_NO_CLEAN},
    {"granite-docling", TOK_PRE_GPT2, PF_NO_CLEAN},
    {"exaone4", TOK_PRE_GPT2, 0},
    {"gpt-2", TOK_PRE_GPT2, 0},
    {"phi-2", TOK_PRE_GPT2, 0},
    {"jina-es", TOK_PRE_GPT2, 0},
    {"jina-de", TOK_PRE_GPT2, 0},
    {"gigachat", TOK_PRE_GPT2, 0},
    {"jina-v2-es", TOK_PRE_GPT2, 0},
    {"jina-v2-de", TOK_PRE_GPT2, 0},
    {"a.x-4.0", TOK_PRE_GPT2, 0},
    {"mellum", TOK_PRE_GPT2, 0},
    {"modern-bert", TOK_PRE_GPT2, 0},
    {"starcoder", TOK_PRE_STARCODER, 0},
    {"refact", TOK_PRE_STARCODER, 0},
    {"command-r", TOK_PRE_STARCODER, PF_NO_CLEAN},
    {"smollm", TOK_PRE_STARCODER, PF_NO_CLEAN},
    {"codeshell", TOK_PRE_STARCODER, 0},
    {"exaone", TOK_PRE_STARCODER, 0},
    {"minerva-7b", TOK_PRE_STARCODER, 0},
    {"mellum2", TOK_PRE_STARCODER, 0},
    {"qwen2", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"deepseek-r1-qwen", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"kormo", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"f2llmv2", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"megrez", TOK_PRE_QWEN2, 0},
    {"stablelm2", TOK_PRE_QWEN2, 0},
    {"hunyuan", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"solar-open", TOK_PRE_QWEN2, PF_NO_CLEAN},
    {"qwen35", TOK_PRE_QWEN35, PF_NO_CLEAN},
};

static bool text_is(const struct tok_vocab *v, int32_t id, const char *s)
{
    size_t n = strlen(s);
    return v->len[id] == n && !memcmp(v->text[id], s, n);
}

static const char *const k_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
    "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>",
    "<|prefix|>", NULL};
static const char *const k_fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>",
    "<|suffix|>", NULL};
static const char *const k_fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>",
    "<|middle|>", NULL};
static const char *const k_fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const k_fim_sep[] = {"<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "[e~[", NULL};

/* EOG set as a small sorted id list. */
static int eog_add(struct tok_vocab *v, int32_t id)
{
    if (id < 0)
        return 0;
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id)
            return 0;
    int32_t *e = realloc(v->eog, (size_t)(v->n_eog + 1) * sizeof *e);
    if (!e)
        return ERR_NOMEM;
    v->eog = e;
    int32_t i = v->n_eog++;
    while (i > 0 && v->eog[i - 1] > id) {
        v->eog[i] = v->eog[i - 1];
        i--;
    }
    v->eog[i] = id;
    return 0;
}

static void eog_remove(struct tok_vocab *v, int32_t id)
{
    for (int32_t i = 0; i < v->n_eog; i++)
        if (v->eog[i] == id) {
            memmove(&v->eog[i], &v->eog[i + 1], (size_t)(v->n_eog - i - 1) * sizeof *v->eog);
            v->n_eog--;
            return;
        }
}

/* Find the token (lowest id) whose text is in `list` when *slot is unset;
 * the found token is forced CONTROL (llama.cpp's auto-detection). Looked up
 * by text, so a 150k vocabulary costs a few hash probes, not a scan. */
static void detect(struct tok_vocab *v, int32_t *slot, const char *const *list)
{
    if (*slot != TOK_NULL)
        return;
    int32_t best = TOK_NULL;
    for (; *list; list++) {
        int32_t id = tok_map_find(v, *list, strlen(*list));
        if (id >= 0 && (best < 0 || id < best))
            best = id;
    }
    if (best >= 0) {
        *slot = best;
        v->attr[best] |= TA_CONTROL;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct tok_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (v->len[x] != v->len[y])
        return v->len[x] > v->len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static void lower_ascii(char *s)
{
    for (; *s; s++)
        *s = (char)tolower((unsigned char)*s);
}

static void set_attr_by_text(struct tok_vocab *v, const char *text, uint32_t bit, bool on)
{
    int32_t id = tok_map_find(v, text, strlen(text));
    if (id < 0)
        return;
    if (on)
        v->attr[id] |= bit;
    else
        v->attr[id] &= ~bit;
}

int tok_build(struct tok_vocab **out, const struct tok_desc *d, struct err *e)
{
    *out = NULL;
    if (!d->model)
        return err_set(e, ERR_NOTFOUND, "tokenizer: key tokenizer.ggml.model is missing");
    struct tok_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return err_set(e, ERR_NOMEM, "tokenizer: out of memory");
    int rc = 0;
    v->eot = v->eom = v->sep = v->pad = v->mask = TOK_NULL;
    int32_t fim_pre = TOK_NULL, fim_suf = TOK_NULL, fim_mid = TOK_NULL, fim_pad = TOK_NULL, fim_rep = TOK_NULL,
            fim_sep = TOK_NULL;
    int pflags = 0;
    if (!strcmp(d->model, "llama")) {
        v->type = TOK_TYPE_SPM;
        v->bos = 1;
        v->eos = 2;
        v->unk = 0;
        v->pre = TOK_PRE_DEFAULT;
        v->add_space_prefix = true;
        v->clean_spaces = false;
        v->add_bos = true;
        v->add_eos = false;
    } else if (!strcmp(d->model, "gpt2")) {
        v->type = TOK_TYPE_BPE;
        v->bos = v->eos = 11;
        v->unk = TOK_NULL;
        v->add_space_prefix = false;
        v->clean_spaces = true;
        if (!d->pre) {
            v->pre = TOK_PRE_DEFAULT; /* llama.cpp warns loudly and uses 'default' */
        } else {
            size_t k, nk = sizeof k_pre_names / sizeof k_pre_names[0];
            for (k = 0; k < nk; k++)
                if (!strcmp(d->pre, k_pre_names[k].name))
                    break;
            if (k == nk) {
                rc = err_set(e, ERR_UNSUPPORTED, "tokenizer: unknown pre-tokenizer type '%s' (tokenizer.ggml.pre)", d->pre);
                goto fail;
            }
            v->pre = k_pre_names[k].pre;
            pflags = k_pre_names[k].flags;
        }
        v->ignore_merges = pflags & PF_IGNORE_MERGES;
        v->add_bos = pflags & PF_ADD_BOS;
        if (pflags & PF_NO_CLEAN)
            v->clean_spaces = false;
        if (pflags & PF_NO_BOS_ID)
            v->bos = TOK_NULL;
    } else {
        rc = err_set(e, ERR_UNSUPPORTED, "tokenizer: tokenizer.ggml.model '%s' is not supported (only gpt2 and llama)", d->model);
        goto fail;
    }
    if (d->add_space_prefix >= 0)
        v->add_space_prefix = d->add_space_prefix;

    /* token table */
    if (d->n_tokens <= 0 || !d->tokens) {
        rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens is missing or empty");
        goto fail;
    }
    int32_t n = v->n_tokens = d->n_tokens;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = d->token_len ? d->token_len[i] : strlen(d->tokens[i]);
        total += (l ? l : 32) + 1;
    }
    v->text = calloc((size_t)n, sizeof *v->text);
    v->len = calloc((size_t)n, sizeof *v->len);
    v->score = calloc((size_t)n, sizeof *v->score);
    v->attr = calloc((size_t)n, sizeof *v->attr);
    v->arena = malloc(total);
    v->map.cap = pow2_at_least((uint64_t)n);
    v->map.slot = malloc((size_t)v->map.cap * sizeof *v->map.slot);
    if (!v->text || !v->len || !v->score || !v->attr || !v->arena || !v->map.slot) {
        rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory for %d tokens", n);
        goto fail;
    }
    memset(v->map.slot, 0xff, (size_t)v->map.cap * sizeof *v->map.slot);
    char *at = v->arena;
    for (int32_t i = 0; i < n; i++) {
        size_t l = d->token_len ? d->token_len[i] : strlen(d->tokens[i]);
        v->text[i] = at;
        if (l == 0) /* llama.cpp names empty tokens so they stay unique */
            l = (size_t)snprintf(at, 32, "[EMPTY_%d]", (int)i);
        else
            memcpy(at, d->tokens[i], l);
        at[l] = 0;
        v->len[i] = (uint32_t)l;
        at += l + 1;
        int32_t dup = map_insert(v, i);
        if (dup >= 0) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: duplicate token in vocabulary: '%.64s' has ids %d and %d",
                         v->text[i], (int)dup, (int)i);
            goto fail;
        }
        v->score[i] = d->scores ? d->scores[i] : 0.0f;
        uint32_t a = TA_NORMAL;
        if (d->types) {
            switch (d->types[i]) {
            case TOK_UNKNOWN: a = TA_UNKNOWN; break;
            case TOK_UNUSED: a = TA_UNUSED; break;
            case TOK_NORMAL: a = TA_NORMAL; break;
            case TOK_CONTROL: a = TA_CONTROL; break;
            case TOK_USER_DEFINED: a = TA_USER_DEFINED; break;
            case TOK_BYTE: a = TA_BYTE; break;
            default: a = TA_UNDEFINED; break;
            }
        }
        v->attr[i] = a;
    }

    /* BPE merges: "left right" split at the first space at index >= 1; rank = index, first wins */
    if (v->type == TOK_TYPE_BPE) {
        if (!d->merges) {
            rc = err_set(e, ERR_NOTFOUND, "tokenizer: cannot find tokenizer.ggml.merges (required for gpt2)");
            goto fail;
        }
        v->merges.cap = pow2_at_least((uint64_t)(d->n_merges > 0 ? d->n_merges : 1));
        v->merges.key = calloc(v->merges.cap, sizeof *v->merges.key);
        v->merges.rank = calloc(v->merges.cap, sizeof *v->merges.rank);
        if (!v->merges.key || !v->merges.rank) {
            rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory for %d merges", (int)d->n_merges);
            goto fail;
        }
        for (int32_t i = 0; i < d->n_merges; i++) {
            const char *m = d->merges[i];
            size_t ml = d->merge_len ? d->merge_len[i] : strlen(m);
            size_t sp = 1;
            while (sp < ml && m[sp] != ' ')
                sp++;
            const char *l = m, *r;
            size_t ll, rl;
            if (ml >= 2 && sp < ml) {
                ll = sp;
                r = m + sp + 1;
                rl = ml - sp - 1;
            } else {
                ll = rl = 0;
                r = m;
            }
            int32_t lid = ll ? tok_map_find(v, l, ll) : TOK_NULL;
            int32_t rid = rl ? tok_map_find(v, r, rl) : TOK_NULL;
            if (lid >= 0 && rid >= 0) {
                uint64_t key = (((uint64_t)(uint32_t)lid << 32) | (uint32_t)rid) + 1;
                uint32_t mask = v->merges.cap - 1;
                for (uint32_t s = (uint32_t)hash_pair(lid, rid) & mask;; s = (s + 1) & mask) {
                    if (!v->merges.key[s]) {
                        v->merges.key[s] = key;
                        v->merges.rank[s] = i;
                        break;
                    }
                    if (v->merges.key[s] == key)
                        break; /* first occurrence keeps its rank */
                }
            } else {
                if (tok_merge_rank(v, TOK_NULL, TOK_NULL, l, ll, r, rl) >= 0)
                    continue;
                int32_t k = v->n_str_merges;
                char **nl = realloc(v->str_merge_l, (size_t)(k + 1) * sizeof *nl);
                if (nl) v->str_merge_l = nl;
                char **nr = realloc(v->str_merge_r, (size_t)(k + 1) * sizeof *nr);
                if (nr) v->str_merge_r = nr;
                int32_t *rk = realloc(v->str_merge_rank, (size_t)(k + 1) * sizeof *rk);
                if (rk) v->str_merge_rank = rk;
                char *cl = malloc(ll + 1), *cr = malloc(rl + 1);
                if (!nl || !nr || !rk || !cl || !cr) {
                    free(cl);
                    free(cr);
                    rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory for merges");
                    goto fail;
                }
                memcpy(cl, l, ll);
                cl[ll] = 0;
                memcpy(cr, r, rl);
                cr[rl] = 0;
                v->str_merge_l[k] = cl;
                v->str_merge_r[k] = cr;
                v->str_merge_rank[k] = i;
                v->n_str_merges = k + 1;
            }
        }
        if ((rc = tok_pretok_new(&v->pretok, v->pre)) != 0) {
            rc = err_set(e, rc, "tokenizer: cannot build the pre-tokenizer for '%s'", d->pre ? d->pre : "default");
            goto fail;
        }
    }

    /* special ids: defaults out of range are disabled; file values out of range are ignored */
    {
        int32_t *slots[] = {&v->bos, &v->eos, &v->eot, &v->eom, &v->unk, &v->sep, &v->pad, &v->mask};
        const int64_t vals[] = {d->bos, d->eos, d->eot, d->eom, d->unk, d->sep, d->pad, d->mask};
        for (int k = 0; k < 8; k++) {
            if (*slots[k] >= n)
                *slots[k] = TOK_NULL;
            if (vals[k] >= 0 && vals[k] < n)
                *slots[k] = (int32_t)vals[k];
        }
    }
    if (d->add_bos >= 0)
        v->add_bos = d->add_bos;
    if (d->add_eos >= 0)
        v->add_eos = d->add_eos;
    if (v->add_bos && v->bos == TOK_NULL) {
        rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
        goto fail;
    }
    if (v->add_eos && v->eos == TOK_NULL) {
        rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");
        goto fail;
    }

    /* ids the sampler always suppresses; out-of-range ones are dropped */
    if (d->n_suppress > 0) {
        if (!(v->suppress = malloc((size_t)d->n_suppress * sizeof *v->suppress)))
            goto oom;
        for (int32_t i = 0; i < d->n_suppress; i++)
            if (d->suppress[i] >= 0 && d->suppress[i] < n)
                v->suppress[v->n_suppress++] = d->suppress[i];
    }

    /* auto-detect special tokens by text (forced CONTROL) */
    detect(v, &v->eot, k_eot_texts);
    detect(v, &v->eom, k_eom_texts);
    detect(v, &fim_pre, k_fim_pre);
    detect(v, &fim_suf, k_fim_suf);
    detect(v, &fim_mid, k_fim_mid);
    detect(v, &fim_pad, k_fim_pad);
    detect(v, &fim_rep, k_fim_rep);
    detect(v, &fim_sep, k_fim_sep);
    for (int32_t id = 0; id < n; id++) /* control tokens named "unused" are unused */
        if ((v->attr[id] & TA_CONTROL) && strstr(v->text[id], "unused"))
            v->attr[id] |= TA_UNUSED;

    /* EOG set */
    if ((rc = eog_add(v, fim_pad)) || (rc = eog_add(v, fim_rep)) || (rc = eog_add(v, fim_sep)))
        goto oom;
    for (const char *const *t = k_eog_texts; *t; t++) {
        int32_t id = tok_map_find(v, *t, strlen(*t));
        if (id >= 0) {
            if ((rc = eog_add(v, id)))
                goto oom;
            v->attr[id] |= TA_CONTROL;
        }
    }
    static const char *const k_render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *t = k_render; *t; t++) { /* gpt-oss: always rendered */
        int32_t id = tok_map_find(v, *t, strlen(*t));
        if (id >= 0)
            v->attr[id] = TA_USER_DEFINED;
    }
    if ((rc = eog_add(v, v->eos)) || (rc = eog_add(v, v->eot)) || (rc = eog_add(v, v->eom)))
        goto oom;
    {
        bool has_return = false, has_call = false, has_end = false, has_flush = false, has_tool_resp = false,
             has_s = false;
        int32_t end_id = TOK_NULL, s_id = TOK_NULL;
        for (int32_t i = 0; i < v->n_eog; i++) {
            int32_t id = v->eog[i];
            if (text_is(v, id, "<|return|>")) has_return = true;
            else if (text_is(v, id, "<|call|>") || text_is(v, id, "<|calls|>")) has_call = true;
            else if (text_is(v, id, "<|flush|>")) has_flush = true;
            else if (text_is(v, id, "<|end|>")) { has_end = true; end_id = id; }
            if (text_is(v, id, "<|tool_response>")) has_tool_resp = true;
            else if (text_is(v, id, "</s>")) { has_s = true; s_id = id; }
        }
        if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
            eog_remove(v, end_id);
            v->attr[end_id] = TA_USER_DEFINED;
        }
        if (has_tool_resp && has_s) {
            eog_remove(v, s_id);
            v->attr[s_id] = TA_NORMAL;
        }
    }

    /* special-token cache: longest text first. llama.cpp uses std::sort, so
     * its order among equal lengths is unspecified; ours is by id. It only
     * matters when two equal-length special texts overlap in the input. */
    v->special = malloc((size_t)n * sizeof *v->special);
    if (!v->special)
        goto oom;
    for (int32_t id = 0; id < n; id++)
        if (v->attr[id] & (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN))
            v->special[v->n_special++] = id;
    qsort_r(v->special, (size_t)v->n_special, sizeof *v->special, cmp_special, v);

    if ((rc = tok_build_pieces(v)))
        goto oom;

    /* per-token LSTRIP/RSTRIP chosen by model name / pre / arch */
    {
        char name[256] = "";
        snprintf(name, sizeof name, "%s", d->name ? d->name : "");
        lower_ascii(name);
        const char *pre = d->pre ? d->pre : "", *arch = d->arch ? d->arch : "";
        if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
            strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
            set_attr_by_text(v, "<mask>", TA_LSTRIP, true);
        } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
            for (int32_t k = 0; k < v->n_special; k++)
                v->attr[v->special[k]] |= TA_RSTRIP;
            set_attr_by_text(v, "</s>", TA_RSTRIP, true);
            set_attr_by_text(v, "<unk>", TA_RSTRIP, false);
            set_attr_by_text(v, "<s>", TA_RSTRIP, false);
            set_attr_by_text(v, "<|endoftext|>", TA_RSTRIP, false);
        } else if (strstr(name, "modern-bert")) {
            set_attr_by_text(v, "[MASK]", TA_LSTRIP, true);
        }
    }
    *out = v;
    return 0;
oom:
    rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory");
fail:
    tok_free(v);
    return rc;
}

/* ---- loading from a GGUF ---- */

static int get_id(const struct gguf *g, const char *key, int64_t *out, struct err *e)
{
    int64_t x;
    int rc = gguf_get_i64(g, key, &x, e);
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    *out = x < 0 ? -2 : x;
    return 0;
}

static int get_flag(const struct gguf *g, const char *key, int *out, struct err *e)
{
    bool b;
    int rc = gguf_get_bool(g, key, &b, e);
    if (rc == ERR_NOTFOUND)
        return 0;
    if (rc)
        return rc;
    *out = b;
    return 0;
}

static char *dup_str(const struct gguf *g, const char *key, int *rc, struct err *e)
{
    struct gguf_str s;
    int r = gguf_get_str(g, key, &s, e);
    if (r) {
        if (r != ERR_NOTFOUND)
            *rc = r;
        return NULL;
    }
    char *p = malloc(s.len + 1);
    if (!p) {
        *rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    memcpy(p, s.ptr, s.len);
    p[s.len] = 0;
    return p;
}

int tok_load(struct tok_vocab **out, const struct gguf *g, struct err *e)
{
    *out = NULL;
    struct tok_desc d;
    tok_desc_init(&d);
    int rc = 0;
    char *model = NULL, *pre = NULL, *name = NULL, *arch = NULL;
    const char **toks = NULL, **merges = NULL;
    uint32_t *tlen = NULL, *mlen = NULL;
    float *scores = NULL;
    int32_t *types = NULL, *supp = NULL;

    model = dup_str(g, "tokenizer.ggml.model", &rc, e);
    if (!rc && !model)
        rc = err_set(e, ERR_NOTFOUND, "tokenizer: key tokenizer.ggml.model is missing");
    if (!rc) pre = dup_str(g, "tokenizer.ggml.pre", &rc, e);
    if (!rc) name = dup_str(g, "general.name", &rc, e);
    if (!rc) arch = dup_str(g, "general.architecture", &rc, e);
    if (rc)
        goto done;
    d.model = model;
    d.pre = pre;
    d.name = name;
    d.arch = arch;

    const struct gguf_kv *kt = gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (!kt || kt->type != GGUF_ARRAY || kt->arr_type != GGUF_STRING) {
        rc = err_set(e, kt ? ERR_FORMAT : ERR_NOTFOUND, "tokenizer: tokenizer.ggml.tokens %s",
                     kt ? "is not an array of strings" : "is missing");
        goto done;
    }
    if (kt->arr_n == 0 || kt->arr_n > INT32_MAX / 2) {
        rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens has %llu entries", (unsigned long long)kt->arr_n);
        goto done;
    }
    int32_t n = (int32_t)kt->arr_n;
    toks = malloc((size_t)n * sizeof *toks);
    tlen = malloc((size_t)n * sizeof *tlen);
    if (!toks || !tlen)
        goto oom;
    for (int32_t i = 0; i < n; i++) {
        struct gguf_str s = gguf_arr_str(kt, (uint64_t)i);
        if (s.len > UINT32_MAX / 2) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: token %d is too long", (int)i);
            goto done;
        }
        toks[i] = s.ptr;
        tlen[i] = (uint32_t)s.len;
    }
    d.n_tokens = n;
    d.tokens = toks;
    d.token_len = tlen;

    const struct gguf_kv *ks = gguf_find_kv(g, "tokenizer.ggml.scores");
    if (ks) {
        if (ks->type != GGUF_ARRAY || (ks->arr_type != GGUF_FLOAT32 && ks->arr_type != GGUF_INT32)) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.scores must be an array of float32 or int32");
            goto done;
        }
        if (ks->arr_n < (uint64_t)n) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.scores has %llu entries, fewer than the %d tokens",
                         (unsigned long long)ks->arr_n, (int)n);
            goto done;
        }
        if (!(scores = malloc((size_t)n * sizeof *scores)))
            goto oom;
        for (int32_t i = 0; i < n; i++)
            scores[i] = ks->arr_type == GGUF_FLOAT32 ? gguf_arr_f32(ks, (uint64_t)i) : (float)gguf_arr_i64(ks, (uint64_t)i);
        d.scores = scores;
    }
    const struct gguf_kv *ky = gguf_find_kv(g, "tokenizer.ggml.token_type");
    if (ky) {
        if (ky->type != GGUF_ARRAY || ky->arr_type != GGUF_INT32) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.token_type must be an array of int32");
            goto done;
        }
        if (ky->arr_n < (uint64_t)n) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.token_type has %llu entries, fewer than the %d tokens",
                         (unsigned long long)ky->arr_n, (int)n);
            goto done;
        }
        if (!(types = malloc((size_t)n * sizeof *types)))
            goto oom;
        for (int32_t i = 0; i < n; i++)
            types[i] = (int32_t)gguf_arr_i64(ky, (uint64_t)i);
        d.types = types;
    }
    const struct gguf_kv *km = gguf_find_kv(g, "tokenizer.ggml.merges");
    if (km) {
        if (km->type != GGUF_ARRAY || km->arr_type != GGUF_STRING || km->arr_n > INT32_MAX / 2) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.merges must be an array of strings");
            goto done;
        }
        int32_t nm = (int32_t)km->arr_n;
        merges = malloc((size_t)(nm ? nm : 1) * sizeof *merges);
        mlen = malloc((size_t)(nm ? nm : 1) * sizeof *mlen);
        if (!merges || !mlen)
            goto oom;
        for (int32_t i = 0; i < nm; i++) {
            struct gguf_str s = gguf_arr_str(km, (uint64_t)i);
            merges[i] = s.ptr;
            mlen[i] = (uint32_t)(s.len > UINT32_MAX / 2 ? 0 : s.len);
        }
        d.n_merges = nm;
        d.merges = merges;
        d.merge_len = mlen;
    }
    const struct gguf_kv *kq = gguf_find_kv(g, "tokenizer.ggml.suppress_tokens");
    if (kq) {
        if (kq->type != GGUF_ARRAY || kq->arr_type != GGUF_INT32 || kq->arr_n > INT32_MAX / 2) {
            rc = err_set(e, ERR_FORMAT, "tokenizer: tokenizer.ggml.suppress_tokens must be an array of int32");
            goto done;
        }
        int32_t nq = (int32_t)kq->arr_n;
        if (!(supp = malloc((size_t)(nq ? nq : 1) * sizeof *supp)))
            goto oom;
        for (int32_t i = 0; i < nq; i++)
            supp[i] = (int32_t)gguf_arr_i64(kq, (uint64_t)i);
        d.suppress = supp;
        d.n_suppress = nq;
    }
    if ((rc = get_id(g, "tokenizer.ggml.bos_token_id", &d.bos, e)) ||
        (rc = get_id(g, "tokenizer.ggml.eos_token_id", &d.eos, e)) ||
        (rc = get_id(g, "tokenizer.ggml.eot_token_id", &d.eot, e)) ||
        (rc = get_id(g, "tokenizer.ggml.eom_token_id", &d.eom, e)) ||
        (rc = get_id(g, "tokenizer.ggml.unknown_token_id", &d.unk, e)) ||
        (rc = get_id(g, "tokenizer.ggml.seperator_token_id", &d.sep, e)) ||
        (rc = get_id(g, "tokenizer.ggml.padding_token_id", &d.pad, e)) ||
        (rc = get_id(g, "tokenizer.ggml.mask_token_id", &d.mask, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_bos_token", &d.add_bos, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_eos_token", &d.add_eos, e)) ||
        (rc = get_flag(g, "tokenizer.ggml.add_space_prefix", &d.add_space_prefix, e)))
        goto done;
    rc = tok_build(out, &d, e);
    goto done;
oom:
    rc = err_set(e, ERR_NOMEM, "tokenizer: out of memory");
done:
    free(model);
    free(pre);
    free(name);
    free(arch);
    free(toks);
    free(tlen);
    free(merges);
    free(mlen);
    free(scores);
    free(types);
    free(supp);
    return rc;
}

int32_t tok_n_vocab(const struct tok_vocab *v) { return v->n_tokens; }
int32_t tok_bos(const struct tok_vocab *v) { return v->bos; }
int32_t tok_eos(const struct tok_vocab *v) { return v->eos; }
bool tok_add_bos(const struct tok_vocab *v) { return v->add_bos; }

bool tok_is_eog(const struct tok_vocab *v, int32_t id)
{
    int32_t lo = 0, hi = v->n_eog - 1;
    while (lo <= hi) {
        int32_t mid = (lo + hi) / 2;
        if (v->eog[mid] == id)
            return true;
        if (v->eog[mid] < id)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return false;
}

enum tok_attr tok_attr_of(const struct tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens)
        return TOK_UNDEFINED;
    uint32_t a = v->attr[id];
    if (a & TA_CONTROL) return TOK_CONTROL;
    if (a & TA_USER_DEFINED) return TOK_USER_DEFINED;
    if (a & TA_UNKNOWN) return TOK_UNKNOWN;
    if (a & TA_BYTE) return TOK_BYTE;
    if (a & TA_UNUSED) return TOK_UNUSED;
    if (a & TA_NORMAL) return TOK_NORMAL;
    return TOK_UNDEFINED;
}

const char *tok_text(const struct tok_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n_tokens)
        return "";
    return v->text[id];
}

const int32_t *tok_suppress_tokens(const struct tok_vocab *v, size_t *n)
{
    *n = (size_t)v->n_suppress;
    return v->suppress;
}

int32_t tok_lookup(const struct tok_vocab *v, const char *text, size_t len)
{
    return tok_map_find(v, text, len);
}
