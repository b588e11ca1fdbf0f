/* fuzz_tok.c — libFuzzer target for the tokenizer: arbitrary bytes through
 * tok_encode (all flag combinations) on several real vocabularies, then
 * tok_detokenize, pieces and the streaming detokenizer. It checks that ids
 * stay in range and that every stream chunk ends on a character boundary;
 * the sanitizers check the rest. The first input byte picks the vocabulary
 * and flags. Vocabularies come from ../shared/data (LLM170_SHARED). */
#include "../worker/gguf/gguf.h"
#include "../worker/tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *k_files[] = {
    "tokenizer/ggml-vocab-gpt-2.gguf",          /* gpt2 hand-written splitter */
    "tokenizer/ggml-vocab-llama-spm.gguf",      /* SPM, byte fallback */
    "tokenizer/ggml-vocab-phi-3.gguf",          /* SPM + RSTRIP specials */
    "tokenizer/ggml-vocab-deepseek-llm.gguf",   /* regex engine, wide + collapsed */
    "tokenizer/ggml-vocab-deepseek-coder.gguf",
    "tokenizer/ggml-vocab-falcon.gguf",
    "tokenizer/ggml-vocab-gpt-neox.gguf",       /* default pre-tokenizer */
    "models/stories260K.gguf",                  /* 512-token SPM */
};
#define N_FILES (sizeof k_files / sizeof k_files[0])
static struct tok_vocab *g_v[N_FILES];
static size_t g_nv;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("LLM170_SHARED") ? getenv("LLM170_SHARED") : "../shared/data";
    for (size_t i = 0; i < N_FILES; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, k_files[i]);
        struct gguf *g;
        struct err e;
        if (gguf_open(&g, p, &e))
            continue;
        if (tok_load(&g_v[g_nv], g, &e) == 0)
            g_nv++;
        gguf_close(g);
    }
    if (!g_nv) {
        fprintf(stderr, "fuzz_tok: no vocabulary under %s\n", dir);
        exit(2);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *d, size_t n)
{
    if (n < 1)
        return 0;
    const struct tok_vocab *v = g_v[d[0] % g_nv];
    bool add = d[0] & 0x40, parse = d[0] & 0x80;
    const char *text = (const char *)d + 1;
    size_t len = n - 1;
    int32_t *ids;
    size_t ni;
    struct err e;
    if (tok_encode(v, text, len, add, parse, &ids, &ni, &e))
        return 0; /* a clean refusal (codepoint above U+10FFFF) */
    for (size_t i = 0; i < ni; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(v))
            abort();
    size_t dl;
    char *dt = tok_detokenize_ex(v, ids, ni, d[0] & 1, d[0] & 2, &dl);
    if (!dt)
        abort();
    free(dt);
    /* stream: the chunks concatenate to the pieces, and no well-formed
     * multi-byte character is cut by a chunk boundary */
    struct tok_stream st;
    tok_stream_init(&st);
    size_t cap = tok_piece_max(v) + 8, total = 0, pl = 0;
    for (size_t i = 0; i < ni; i++)
        total += tok_piece(v, ids[i], d[0] & 2, NULL, 0);
    char *all = malloc(total + 8), *pieces = malloc(total + 8);
    size_t *cut = malloc((ni + 1) * sizeof *cut), n_cut = 0, at = 0;
    for (size_t i = 0; i < ni; i++) {
        size_t k = tok_stream_push(v, &st, ids[i], d[0] & 2, all + at, cap);
        if (k > cap || at + k > total)
            abort();
        at += k;
        cut[n_cut++] = at;
        pl += tok_piece(v, ids[i], d[0] & 2, pieces + pl, total - pl);
    }
    size_t held = (size_t)st.n_pending;
    if (at + held != pl || memcmp(all, pieces, at))
        abort();
    for (size_t s0 = 0; s0 < at;) {
        unsigned char c = (unsigned char)all[s0];
        size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        bool ok = s0 + len <= at;
        for (size_t j = 1; ok && j < len; j++)
            ok = ((unsigned char)all[s0 + j] & 0xC0) == 0x80;
        if (!ok)
            len = 1;
        for (size_t k = 0; len > 1 && k < n_cut; k++)
            if (cut[k] > s0 && cut[k] < s0 + len)
                abort();
        s0 += len;
    }
    char tail[8];
    tok_stream_flush(&st, tail, sizeof tail);
    free(all);
    free(pieces);
    free(cut);
    free(ids);
    return 0;
}
