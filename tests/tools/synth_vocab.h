/* synth_vocab.h — the small SentencePiece-style vocabulary our synthetic-model writers put in a file
 * (specials, byte fallback, single characters, numbered pieces) so that it loads anywhere; the goldens
 * feed token ids directly. Same n → the same bytes: the goldens' sha256 checks rely on it. */
#ifndef LLM170_TESTS_SYNTH_VOCAB_H
#define LLM170_TESTS_SYNTH_VOCAB_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../worker/gguf/gguf_write.h"

/* n tokens (n > 260): 0 <unk>, 1 <s> (bos), 2 </s> (eos), 3..258 the bytes, 259 ▁, then characters and
 * pieces. -1 when out of memory. */
static inline int synth_spm_vocab(struct gguf_w *w, int n)
{
    char **toks = calloc((size_t)n, sizeof(char *));
    float *scores = malloc(sizeof(float) * (size_t)n);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n);
    int rc = toks && scores && types ? 0 : -1;
    for (int i = 0; !rc && i < n; i++) {
        char b[32];
        int ty = 1; /* normal */
        if (i == 0)
            snprintf(b, sizeof b, "<unk>"), ty = 2;
        else if (i == 1)
            snprintf(b, sizeof b, "<s>"), ty = 3;
        else if (i == 2)
            snprintf(b, sizeof b, "</s>"), ty = 3;
        else if (i < 259)
            snprintf(b, sizeof b, "<0x%02X>", i - 3), ty = 6;
        else if (i == 259)
            snprintf(b, sizeof b, "\xe2\x96\x81"); /* ▁ */
        else if (i < 259 + 95)
            snprintf(b, sizeof b, "%c", 33 + (i - 260));
        else
            snprintf(b, sizeof b, "\xe2\x96\x81t%d", i);
        if (!(toks[i] = strdup(b)))
            rc = -1;
        types[i] = ty;
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
    }
    if (!rc) {
        gguf_w_str(w, "tokenizer.ggml.model", "llama");
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", (uint64_t)n, (const char *const *)toks);
        gguf_w_arr_f32(w, "tokenizer.ggml.scores", (uint64_t)n, scores);
        gguf_w_arr_i32(w, "tokenizer.ggml.token_type", (uint64_t)n, types);
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
        gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true);
    }
    for (int i = 0; toks && i < n; i++)
        free(toks[i]);
    free(toks), free(scores), free(types);
    return rc;
}

#endif
