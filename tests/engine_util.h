/* engine_util.h — small helpers shared by the engine tests (test_model.c,
 * test_qwen35.c): relative error, argmax, loading a model with its error
 * printed as a test comment, decoding a sequence in chunks. */
#ifndef LLM170_TESTS_ENGINE_UTIL_H
#define LLM170_TESTS_ENGINE_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "../worker/engine/engine.h"

/* ‖a − b‖₂ / ‖b‖₂ */
static inline double rel_l2(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static inline struct model *load(const char *path)
{
    struct model *m = NULL;
    struct err e = { 0 };
    if (model_load(&m, path, &e)) {
        printf("#   model_load(%s): %s\n", path, e.msg);
        return NULL;
    }
    return m;
}

/* Decode ids[0..n) of `seq` (starting at its cached length) in chunks of `chunk`, all logits to out[n][V]. */
static inline int run_seq(struct engine_ctx *c, int seq, const int32_t *ids, int n, int chunk, float *out, int n_vocab)
{
    struct engine_tok toks[512];
    int pos0 = engine_seq_len(c, seq);
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        for (int j = 0; j < k; j++)
            toks[j] = (struct engine_tok){ .token = ids[i + j], .pos = pos0 + i + j, .seq = seq, .logits = out != NULL };
        struct err e = { 0 };
        if (engine_decode(c, toks, k, out ? out + (size_t)i * n_vocab : NULL, &e)) {
            printf("#   engine_decode: %s\n", e.msg);
            return -1;
        }
    }
    return 0;
}

#endif
