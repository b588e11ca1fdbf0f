/* bench_quant.c — rough speed of matmul (not a test).
 *
 *   bench_quant [type] [n_in] [n_out] [n_tok] [threads] [seconds] [packed]
 * defaults: q4_K 1024 3072 1 1 1.0. Prints weight GB/s (weight bytes read
 * per second, counting the matrix once per call) and GFLOP/s (2·n_in·n_out·n_tok).
 * LLM170_SIMD=scalar|avx2|avx512 caps the SIMD level. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../worker/num/matmul.h"
#include "../../worker/num/quant.h"

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *tn = argc > 1 ? argv[1] : "q4_K";
    int64_t n_in = argc > 2 ? atoll(argv[2]) : 1024;
    int64_t n_out = argc > 3 ? atoll(argv[3]) : 3072;
    int64_t n_tok = argc > 4 ? atoll(argv[4]) : 1;
    int nth = argc > 5 ? atoi(argv[5]) : 1;
    double secs = argc > 6 ? atof(argv[6]) : 1.0;
    int packed = argc > 7 && atoi(argv[7]) != 0; /* use matmul_pack / matmul_packed_run */
    enum qtype t = QT_COUNT;
    for (uint32_t i = 0; i < QT_COUNT; i++)
        if (qtype_get(i) && !strcmp(qtype_get(i)->name, tn))
            t = (enum qtype)i;
    if (t == QT_COUNT || !qtype_get(t)->compute) {
        fprintf(stderr, "unknown or non-compute type %s\n", tn);
        return 1;
    }
    size_t wr = qtype_row_size(t, n_in);
    uint8_t *W = malloc(wr * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    float *X = malloc((size_t)(n_in * n_tok) * sizeof(float));
    float *Y = malloc((size_t)(n_out * n_tok) * sizeof(float));
    if (!W || !row || !X || !Y)
        return 1;
    srand(1);
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
        quant_weights_row(t, row, W + (size_t)r * wr, n_in);
    }
    for (int64_t i = 0; i < n_in * n_tok; i++)
        X[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    struct tpool *tp = tpool_create(nth);
    struct matmul_scratch s = {0};
    struct matmul_packed *pk = packed ? matmul_pack(t, W, n_in, n_out, NULL) : NULL;
    if (packed && !pk) {
        fprintf(stderr, "no packed form for %s here\n", tn);
        return 1;
    }
#define RUN_MM() (pk ? matmul_packed_run(tp, &s, pk, X, n_tok, Y) : matmul(tp, &s, t, W, n_in, n_out, X, n_tok, Y))
    RUN_MM(); /* warm-up */
    /* best of many calls: the CI box is shared, the minimum is the least noisy figure */
    double t0 = now(), t1 = t0, per = 1e30, c0cpu = cpu_now();
    int iters = 0;
    while (t1 - t0 < secs) {
        iters++;
        double c0 = now();
        RUN_MM();
        t1 = now();
        if (t1 - c0 < per)
            per = t1 - c0;
    }
    double cpu_per = (cpu_now() - c0cpu) / iters / nth; /* CPU seconds per call per thread: immune to preemption */
    printf("%s%s simd=%s n_in=%lld n_out=%lld n_tok=%lld threads=%d: %.3f ms/call, %.2f GB/s weights, %.2f GFLOP/s (cpu time %.3f ms/call/thread)\n",
           tn, pk ? "(packed)" : "", quant_simd_name(), (long long)n_in, (long long)n_out, (long long)n_tok, nth, per * 1e3,
           (double)(wr * (size_t)n_out) / per * 1e-9, 2.0 * (double)(n_in * n_out * n_tok) / per * 1e-9, cpu_per * 1e3);
    matmul_packed_free(pk);
    matmul_scratch_free(&s);
    tpool_destroy(tp);
    free(W);
    free(row);
    free(X);
    free(Y);
    return 0;
}
