/* engine_util.h — small helpers shared by the engine tests (test_model.c,
 * test_qwen35.c): relative error, argmax, loading a model with its error
 * printed as a test comment. */
#ifndef LLM170_TESTS_ENGINE_UTIL_H
#define LLM170_TESTS_ENGINE_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "../worker/engine.h"

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

#endif
