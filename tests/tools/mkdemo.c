/* mkdemo.c — write a small demo model (llama arch, SentencePiece byte vocab,
 * random weights) with the project's own GGUF writer. `make run` uses it when
 * no real model is at hand; its output is noise, but every layer of the stack
 * (loader, tokenizer, forward pass, daemon, HTTP) runs for real on it.
 *
 *   mkdemo OUT.gguf [seed] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/gguf/gguf_write.h"
#include "../../worker/num/quant.h"

enum { N_EMBD = 64, N_LAYER = 2, N_HEAD = 4, N_HEAD_KV = 2, N_FF = 128 };


static float uniform(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

static int add_matrix(struct gguf_w *w, const char *name, int64_t n_in, int64_t n_out, float scale, uint64_t *s)
{
    float *d = malloc((size_t)(n_in * n_out) * sizeof *d);
    if (!d)
        return ERR_NOMEM;
    for (int64_t i = 0; i < n_in * n_out; i++)
        d[i] = uniform(s) * scale;
    int64_t ne[2] = { n_in, n_out };
    int rc = gguf_w_tensor(w, name, 2, ne, QT_F32, d, (size_t)(n_in * n_out) * sizeof *d);
    free(d);
    return rc;
}

static int add_norm(struct gguf_w *w, const char *name)
{
    float d[N_EMBD];
    for (int i = 0; i < N_EMBD; i++)
        d[i] = 1.0f;
    int64_t ne[1] = { N_EMBD };
    return gguf_w_tensor(w, name, 1, ne, QT_F32, d, sizeof d);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: mkdemo OUT.gguf [seed]\n");
        return 2;
    }
    uint64_t seed = argc == 3 ? strtoull(argv[2], NULL, 10) : 170;
    struct gguf_w *w = gguf_w_new();
    if (!w)
        return 1;

    /* vocabulary: <unk> <s> </s>, the 256 byte tokens, then printable ASCII as
     * single-character pieces ("▁" marks a leading space, as SentencePiece does) */
    enum { N_BYTE = 256, N_CHAR = 95 };
    int n_vocab = 3 + N_BYTE + N_CHAR;
    char **tok = calloc((size_t)n_vocab, sizeof *tok);
    float *score = calloc((size_t)n_vocab, sizeof *score);
    int32_t *type = calloc((size_t)n_vocab, sizeof *type);
    if (!tok || !score || !type)
        return 1;
    tok[0] = strdup("<unk>"), type[0] = 2;
    tok[1] = strdup("<s>"), type[1] = 3;
    tok[2] = strdup("</s>"), type[2] = 3;
    for (int b = 0; b < N_BYTE; b++) {
        char buf[8];
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        tok[3 + b] = strdup(buf);
        type[3 + b] = 6;
    }
    for (int c = 0; c < N_CHAR; c++) {
        char buf[4] = { (char)(32 + c), 0 };
        if (c == 0)
            strcpy(buf, "\xe2\x96\x81"); /* "▁" stands for the space */
        tok[3 + N_BYTE + c] = strdup(buf);
        type[3 + N_BYTE + c] = 1;
        score[3 + N_BYTE + c] = -(float)c;
    }

    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_str(w, "general.name", "llm170-demo (random weights)");
    gguf_w_u32(w, "llama.context_length", 2048);
    gguf_w_u32(w, "llama.embedding_length", N_EMBD);
    gguf_w_u32(w, "llama.feed_forward_length", N_FF);
    gguf_w_u32(w, "llama.block_count", N_LAYER);
    gguf_w_u32(w, "llama.attention.head_count", N_HEAD);
    gguf_w_u32(w, "llama.attention.head_count_kv", N_HEAD_KV);
    gguf_w_u32(w, "llama.rope.dimension_count", N_EMBD / N_HEAD);
    gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n_vocab, (const char *const *)tok);
    gguf_w_arr_f32(w, "tokenizer.ggml.scores", (uint64_t)n_vocab, score);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", (uint64_t)n_vocab, type);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);

    uint64_t s = seed;
    int hd = N_EMBD / N_HEAD;
    add_matrix(w, "token_embd.weight", N_EMBD, n_vocab, 1.0f, &s);
    add_norm(w, "output_norm.weight");
    add_matrix(w, "output.weight", N_EMBD, n_vocab, 0.2f, &s);
    for (int l = 0; l < N_LAYER; l++) {
        char name[64];
#define NAME(x) (snprintf(name, sizeof name, "blk.%d." x, l), name)
        add_norm(w, NAME("attn_norm.weight"));
        add_matrix(w, NAME("attn_q.weight"), N_EMBD, N_EMBD, 0.2f, &s);
        add_matrix(w, NAME("attn_k.weight"), N_EMBD, hd * N_HEAD_KV, 0.2f, &s);
        add_matrix(w, NAME("attn_v.weight"), N_EMBD, hd * N_HEAD_KV, 0.2f, &s);
        add_matrix(w, NAME("attn_output.weight"), N_EMBD, N_EMBD, 0.2f, &s);
        add_norm(w, NAME("ffn_norm.weight"));
        add_matrix(w, NAME("ffn_gate.weight"), N_EMBD, N_FF, 0.2f, &s);
        add_matrix(w, NAME("ffn_up.weight"), N_EMBD, N_FF, 0.2f, &s);
        add_matrix(w, NAME("ffn_down.weight"), N_FF, N_EMBD, 0.2f, &s);
#undef NAME
    }
    struct err e;
    err_clear(&e);
    int rc = gguf_w_write(w, argv[1], &e);
    if (rc != 0)
        fprintf(stderr, "mkdemo: %s\n", e.msg);
    gguf_w_free(w);
    for (int i = 0; i < n_vocab; i++)
        free(tok[i]);
    free(tok);
    free(score);
    free(type);
    return rc ? 1 : 0;
}
