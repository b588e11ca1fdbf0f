/* bench_hybrid.c — prefill and decode speed of any model the engine loads
 * (made for the qwen35 / qwen35moe shapes of mksynth_qwen35 --preset 27b /
 * 35b-a3b, but arch-agnostic).
 *
 *   bench_hybrid MODEL [--prompt N] [--chunk B] [--gen M] [--threads T] [--chunk-min K]
 *
 * Prefills N pseudo-random tokens in engine_decode calls of B, then decodes
 * M tokens one by one (greedy), and prints tokens/s for both. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../worker/engine/engine.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_hybrid MODEL [--prompt N] [--chunk B] [--gen M] [--threads T] [--chunk-min K]\n");
        return 2;
    }
    int n_prompt = 512, chunk = 512, n_gen = 16, threads = 0, chunk_min = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--prompt"))
            n_prompt = v;
        else if (!strcmp(argv[i], "--chunk"))
            chunk = v;
        else if (!strcmp(argv[i], "--gen"))
            n_gen = v;
        else if (!strcmp(argv[i], "--threads"))
            threads = v;
        else if (!strcmp(argv[i], "--chunk-min"))
            chunk_min = v;
    }
    if (n_prompt < 1 || chunk < 1 || n_gen < 0) {
        fprintf(stderr, "bench_hybrid: bad sizes\n");
        return 2;
    }
    struct err e = { 0 };
    struct model *m = NULL;
    double t0 = now();
    if (model_load(&m, argv[1], &e)) {
        fprintf(stderr, "bench_hybrid: %s\n", e.msg);
        return 1;
    }
    const struct model_info *mi = model_info(m);
    struct engine_params p;
    engine_params_default(&p);
    p.n_ctx = n_prompt + n_gen + 1;
    p.n_batch = chunk;
    p.n_threads = threads;
    p.gdn_chunk_min = chunk_min;
    struct engine_ctx *c = NULL;
    if (engine_create(&c, m, &p, &e)) {
        fprintf(stderr, "bench_hybrid: %s\n", e.msg);
        model_free(m);
        return 1;
    }
    double t1 = now();
    printf("%s (%s): %d layers, n_embd %d, %.2f GB, load + engine %.1f s\n", mi->name, mi->arch, mi->n_layer,
           mi->n_embd, (double)mi->n_bytes / 1e9, t1 - t0);
    struct engine_tok *toks = calloc((size_t)chunk, sizeof *toks);
    float *logits = malloc(sizeof(float) * (size_t)mi->n_vocab);
    unsigned s = 1;
    int rc = 0;
    t0 = now();
    for (int i = 0; i < n_prompt && !rc; i += chunk) {
        int k = n_prompt - i < chunk ? n_prompt - i : chunk;
        for (int j = 0; j < k; j++) {
            s = s * 1103515245u + 12345u;
            toks[j] = (struct engine_tok){ .token = (int32_t)((s >> 8) % (unsigned)mi->n_vocab), .pos = i + j,
                                           .logits = i + j == n_prompt - 1 };
        }
        rc = engine_decode(c, toks, k, logits, &e);
    }
    t1 = now();
    if (!rc)
        printf("prefill %d tokens in calls of %d: %.2f s, %.1f tok/s\n", n_prompt, chunk, t1 - t0,
               n_prompt / (t1 - t0));
    t0 = now();
    for (int g = 0; g < n_gen && !rc; g++) {
        int best = 0;
        for (int i = 1; i < mi->n_vocab; i++)
            if (logits[i] > logits[best])
                best = i;
        struct engine_tok t = { .token = best, .pos = n_prompt + g, .logits = true };
        rc = engine_decode(c, &t, 1, logits, &e);
    }
    t1 = now();
    if (rc)
        fprintf(stderr, "bench_hybrid: %s\n", e.msg);
    else if (n_gen)
        printf("decode %d tokens: %.2f s, %.2f tok/s\n", n_gen, t1 - t0, n_gen / (t1 - t0));
    free(toks);
    free(logits);
    engine_free(c);
    model_free(m);
    return rc ? 1 : 0;
}
