/* synth_model.h — a small dense model (llama, qwen2 or qwen3) with random weights, written with the
 * project's own GGUF writer: the demo model of `make run` (tests/tools/mkdemo.c) and the models the
 * backend tests compare engines on (tests/test_vk_engine.c). A SentencePiece byte vocabulary (<unk>
 * <s> </s>, the 256 byte tokens, printable ASCII), weights uniform in ±scale from a fixed LCG, norms 1;
 * the matrices may be quantized to any type quant_weights_row writes (rows must be whole blocks). */
#ifndef LLM170_TESTS_SYNTH_MODEL_H
#define LLM170_TESTS_SYNTH_MODEL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../worker/gguf/gguf_write.h"
#include "../worker/num/quant.h"

struct synth_spec {
    const char *arch;   /* "llama", "qwen2" or "qwen3" (q/k norms) */
    const char *name;   /* general.name */
    int n_embd, n_ff, n_head, n_head_kv, n_layer;
    enum qtype wtype;   /* type of every 2-D weight (token_embd and output included) */
    bool biases;        /* q/k/v biases (qwen2) and an output bias */
    bool tied;          /* no output.weight: the output reads token_embd */
    uint64_t seed;
};

#define SYNTH_N_VOCAB (3 + 256 + 95)

static inline float synth_uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

/* n values uniform in ±scale written as an [ne0, ne1] tensor of type t (1-D when ne1 == 0) */
static inline int synth_tensor(struct gguf_w *w, const char *name, int64_t ne0, int64_t ne1, float scale, enum qtype t,
                               uint64_t *s)
{
    const int64_t rows = ne1 ? ne1 : 1;
    float *d = malloc((size_t)(ne0 * rows) * sizeof *d);
    const size_t rb = qtype_row_size(t, ne0);
    void *q = t == QT_F32 ? NULL : malloc(rb * (size_t)rows);
    int rc = d && (t == QT_F32 || q) ? 0 : ERR_NOMEM;
    for (int64_t i = 0; !rc && i < ne0 * rows; i++)
        d[i] = scale ? synth_uniform(s) * scale : 1.0f;
    for (int64_t r = 0; !rc && q && r < rows; r++)
        if (!quant_weights_row(t, d + r * ne0, (char *)q + (size_t)r * rb, ne0))
            rc = ERR_UNSUPPORTED;
    if (!rc) {
        int64_t ne[2] = { ne0, ne1 };
        rc = q ? gguf_w_tensor(w, name, ne1 ? 2 : 1, ne, t, q, rb * (size_t)rows)
               : gguf_w_tensor(w, name, ne1 ? 2 : 1, ne, QT_F32, d, (size_t)(ne0 * rows) * sizeof *d);
    }
    free(d);
    free(q);
    return rc;
}

static inline int synth_model_write(const struct synth_spec *sp, const char *path, struct err *e)
{
    struct gguf_w *w = gguf_w_new();
    char *tok[SYNTH_N_VOCAB] = { 0 };
    float score[SYNTH_N_VOCAB] = { 0 };
    int32_t type[SYNTH_N_VOCAB] = { 0 };
    if (!w)
        return err_set(e, ERR_NOMEM, "synth model: out of memory");
    /* <unk> <s> </s>, the byte tokens, then printable ASCII as single-character pieces ("▁" marks a
     * leading space, as SentencePiece does) */
    tok[0] = strdup("<unk>"), type[0] = 2;
    tok[1] = strdup("<s>"), type[1] = 3;
    tok[2] = strdup("</s>"), type[2] = 3;
    for (int b = 0; b < 256; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        tok[3 + b] = strdup(buf);
        type[3 + b] = 6;
    }
    for (int c = 0; c < 95; c++) {
        char buf[4] = { (char)(32 + c), 0 };
        if (c == 0)
            strcpy(buf, "\xe2\x96\x81");
        tok[3 + 256 + c] = strdup(buf);
        type[3 + 256 + c] = 1;
        score[3 + 256 + c] = -(float)c;
    }
    const char *A = sp->arch;
    char key[96];
#define KEY(x) (snprintf(key, sizeof key, "%s." x, A), key)
    gguf_w_str(w, "general.architecture", A);
    gguf_w_str(w, "general.name", sp->name);
    gguf_w_u32(w, KEY("context_length"), 2048);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)sp->n_embd);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)sp->n_ff);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)sp->n_layer);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)sp->n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)sp->n_head_kv);
    gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)(sp->n_embd / sp->n_head));
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f);
#undef KEY
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", SYNTH_N_VOCAB, (const char *const *)tok);
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", SYNTH_N_VOCAB, score);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", SYNTH_N_VOCAB, type);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);

    uint64_t s = sp->seed;
    const int E = sp->n_embd, hd = E / sp->n_head, kv = hd * sp->n_head_kv, F = sp->n_ff;
    const enum qtype t = sp->wtype;
    int rc = synth_tensor(w, "token_embd.weight", E, SYNTH_N_VOCAB, 1.0f, t, &s);
    if (!rc)
        rc = synth_tensor(w, "output_norm.weight", E, 0, 0, QT_F32, &s);
    if (!rc && !sp->tied)
        rc = synth_tensor(w, "output.weight", E, SYNTH_N_VOCAB, 0.2f, t, &s);
    if (!rc && sp->biases)
        rc = synth_tensor(w, "output.bias", SYNTH_N_VOCAB, 0, 0.1f, QT_F32, &s);
    for (int l = 0; !rc && l < sp->n_layer; l++) {
        char name[64];
#define NAME(x) (snprintf(name, sizeof name, "blk.%d." x, l), name)
        rc = synth_tensor(w, NAME("attn_norm.weight"), E, 0, 0, QT_F32, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("attn_q.weight"), E, E, 0.2f, t, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("attn_k.weight"), E, kv, 0.2f, t, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("attn_v.weight"), E, kv, 0.2f, t, &s);
        if (!rc && sp->biases)
            rc = synth_tensor(w, NAME("attn_q.bias"), E, 0, 0.1f, QT_F32, &s);
        if (!rc && sp->biases)
            rc = synth_tensor(w, NAME("attn_k.bias"), kv, 0, 0.1f, QT_F32, &s);
        if (!rc && sp->biases)
            rc = synth_tensor(w, NAME("attn_v.bias"), kv, 0, 0.1f, QT_F32, &s);
        if (!rc && !strcmp(A, "qwen3"))
            rc = synth_tensor(w, NAME("attn_q_norm.weight"), hd, 0, 0, QT_F32, &s);
        if (!rc && !strcmp(A, "qwen3"))
            rc = synth_tensor(w, NAME("attn_k_norm.weight"), hd, 0, 0, QT_F32, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("attn_output.weight"), E, E, 0.2f, t, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("ffn_norm.weight"), E, 0, 0, QT_F32, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("ffn_gate.weight"), E, F, 0.2f, t, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("ffn_up.weight"), E, F, 0.2f, t, &s);
        if (!rc)
            rc = synth_tensor(w, NAME("ffn_down.weight"), F, E, 0.2f, t, &s);
#undef NAME
    }
    if (rc)
        rc = err_set(e, rc, "synth model: a tensor of type %s could not be written", qtype_get(t)->name);
    else
        rc = gguf_w_write(w, path, e);
    gguf_w_free(w);
    for (int i = 0; i < SYNTH_N_VOCAB; i++)
        free(tok[i]);
    return rc;
}

#endif
