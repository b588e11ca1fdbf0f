/* bench_sampling — time of one sample (smp_sample + smp_accept) with the
 * default chain (top-k 40, top-p 0.95, min-p 0.05, temperature 0.8) over
 * rows of random logits, CHAINS chains in turn as a serving step samples its
 * rows: each chain's candidate list is cache-cold when its turn comes.
 *
 *   bench_sampling [--vocab N] [--chains C] [--samples S] [--seed X]
 *
 * Prints the µs per sample and a checksum of the sampled ids (the same for
 * the same arguments, whatever the sampler's inner workings). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../worker/serve/sampling.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t lcg(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

int main(int argc, char **argv)
{
    long vocab = 512, chains = 64, samples = 20000, seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (!strcmp(argv[i], "--vocab")) vocab = v;
        else if (!strcmp(argv[i], "--chains")) chains = v;
        else if (!strcmp(argv[i], "--samples")) samples = v;
        else if (!strcmp(argv[i], "--seed")) seed = v;
        else {
            fprintf(stderr, "usage: bench_sampling [--vocab N] [--chains C] [--samples S] [--seed X]\n");
            return 2;
        }
    }
    if (vocab < 2 || vocab > (1 << 24) || chains < 1 || chains > 1024 || samples < chains) {
        fprintf(stderr, "bench_sampling: --vocab 2..16M, --chains 1..1024, --samples >= chains\n");
        return 2;
    }
    struct smp_params p = smp_params_default();
    struct smp_chain **c = calloc((size_t)chains, sizeof *c);
    float *rows = malloc((size_t)vocab * (size_t)chains * sizeof *rows);
    if (!c || !rows) {
        fprintf(stderr, "bench_sampling: out of memory\n");
        return 1;
    }
    struct err e;
    for (long r = 0; r < chains; r++) {
        p.seed = (uint32_t)(seed + r);
        if (!(c[r] = smp_new(&p, (int32_t)vocab, &e))) {
            fprintf(stderr, "bench_sampling: %s\n", e.msg);
            return 1;
        }
    }
    /* roughly normal logits (sum of four uniforms), sd ~3 */
    uint32_t s = (uint32_t)seed;
    for (long i = 0; i < vocab * chains; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++)
            u += (float)(lcg(&s) % 100000) / 100000.0f;
        rows[i] = (u - 2.0f) * 5.2f;
    }
    long rounds = samples / chains, sum = 0;
    double t0 = now_s();
    for (long it = 0; it < rounds; it++)
        for (long r = 0; r < chains; r++) {
            int32_t t = smp_sample(c[r], rows + r * vocab);
            smp_accept(c[r], t);
            sum += t;
        }
    double dt = now_s() - t0;
    printf("vocab %ld, %ld chains: %.2f us a sample (checksum %ld)\n", vocab, chains, dt * 1e6 / (double)(rounds * chains),
           sum);
    for (long r = 0; r < chains; r++)
        smp_free(c[r]);
    free(c);
    free(rows);
    return 0;
}
