/* cmd_bench.c — `llm170 bench`: llama-bench style throughput numbers.
 *
 * Tests: ppN (prefill N tokens in one batch), tgN (N single-token decode
 * steps), tgN@dD (the same after a D-token context), and "np K" (K sequences
 * decoding together, aggregate tokens/s). Each test runs once to warm up,
 * then --reps times; the table shows median ± standard deviation. Token ids
 * are pseudo-random (speed does not depend on them). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static const char *USAGE =
    "usage: llm170 bench --model M [--pp 512] [--tg 128] [--depth D] [--np K] [--reps R]\n"
    "                    [--backend B] [--threads N] [--json]\n"
    "  --pp N      prompt-processing test of N tokens (0 skips)\n"
    "  --tg N      token-generation test of N tokens (0 skips)\n"
    "  --depth D   also run tgN after a D-token context (tgN@dD)\n"
    "  --np K      also run K sequences decoding N tokens together (aggregate t/s)\n"
    "  --reps R    repetitions after a warm-up (default 3)\n";

struct bench {
    struct engine_ctx *ctx;
    struct engine_tok *batch; /* [max(pp, depth, np)] */
    float *logits;            /* [np][n_vocab] */
    int32_t n_vocab;
    uint64_t rng;
};

static int32_t next_tok(struct bench *b)
{
    b->rng = b->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int32_t)((b->rng >> 33) % (uint64_t)b->n_vocab);
}

/* Prefill n tokens of seq 0 starting at pos0, in calls of at most n_batch. */
static int fill(struct bench *b, int seq, int pos0, int n, int n_batch, struct err *e)
{
    for (int done = 0; done < n; done += n_batch) {
        int k = n - done < n_batch ? n - done : n_batch;
        for (int j = 0; j < k; j++)
            b->batch[j] = (struct engine_tok){ next_tok(b), pos0 + done + j, seq, done + j == n - 1 };
        if (engine_decode(b->ctx, b->batch, k, b->logits, e) != 0)
            return -1;
    }
    return 0;
}

/* One timed run; returns tokens per second or -1. */
static double run_test(struct bench *b, int pp, int tg, int depth, int np, int n_batch, struct err *e)
{
    for (int s = 0; s < (np > 0 ? np : 1); s++)
        engine_seq_truncate(b->ctx, s, 0);
    if (depth > 0 && fill(b, 0, 0, depth, n_batch, e) != 0)
        return -1;
    double t0 = cli_now();
    long tokens = 0;
    if (pp > 0) {
        if (fill(b, 0, depth, pp, n_batch, e) != 0)
            return -1;
        tokens = pp;
    } else if (np > 0) {
        /* np sequences, each starting empty, decode tg steps together */
        for (int step = 0; step < tg; step++) {
            for (int s = 0; s < np; s++)
                b->batch[s] = (struct engine_tok){ next_tok(b), step, s, true };
            if (engine_decode(b->ctx, b->batch, np, b->logits, e) != 0)
                return -1;
        }
        tokens = (long)tg * np;
    } else {
        for (int step = 0; step < tg; step++) {
            b->batch[0] = (struct engine_tok){ next_tok(b), depth + step, 0, true };
            if (engine_decode(b->ctx, b->batch, 1, b->logits, e) != 0)
                return -1;
        }
        tokens = tg;
    }
    double dt = cli_now() - t0;
    return dt > 0 ? (double)tokens / dt : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cmd_bench(int argc, char **argv)
{
    const char *model_path = NULL, *v;
    bool missing = false, json = false;
    long pp = 512, tg = 128, depth = 0, np = 0, reps = 3, l;
    struct engine_params ep;
    engine_params_default(&ep);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long *dst = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
            continue;
        } else if (cli_opt(argc, argv, &i, "--model", &v, &missing) && !missing) {
            model_path = v;
            continue;
        } else if (!missing && cli_opt(argc, argv, &i, "--backend", &v, &missing) && !missing) {
            if (!cli_parse_backend(v, &ep.backend))
                return cli_usage_error("bench", "unknown backend '%s'", v);
            continue;
        } else if (!missing && cli_opt(argc, argv, &i, "--pp", &v, &missing)) {
            dst = &pp;
        } else if (!missing && cli_opt(argc, argv, &i, "--tg", &v, &missing)) {
            dst = &tg;
        } else if (!missing && cli_opt(argc, argv, &i, "--depth", &v, &missing)) {
            dst = &depth;
        } else if (!missing && cli_opt(argc, argv, &i, "--np", &v, &missing)) {
            dst = &np;
        } else if (!missing && cli_opt(argc, argv, &i, "--reps", &v, &missing)) {
            dst = &reps;
        } else if (!missing && cli_opt(argc, argv, &i, "--threads", &v, &missing)) {
            if (missing || !cli_parse_int(v, 1, 1024, &l))
                return cli_usage_error("bench", "--threads wants 1..1024");
            ep.n_threads = (int)l;
            continue;
        }
        if (missing)
            return cli_usage_error("bench", "%s needs a value", a);
        if (!dst)
            return cli_usage_error("bench", "unknown option '%s'", a);
        if (!cli_parse_int(v, 0, 1 << 20, dst))
            return cli_usage_error("bench", "%s wants a count, got '%s'", a, v);
    }
    if (!model_path)
        return cli_usage_error("bench", "--model is required");
    if (reps < 1)
        reps = 1;

    struct model *m = cli_load_model(model_path);
    if (!m)
        return 1;
    const struct model_info *mi = model_info(m);
    struct err e;
    err_clear(&e);
    struct bench b = { .n_vocab = mi->n_vocab, .rng = 42 };
    int n_seq = np > 1 ? (int)np : 1;
    long need = depth + (pp > tg ? pp : tg) + 1;
    ep.n_seq = n_seq;
    ep.n_ctx = (int)need;
    long fill_max = pp > depth ? pp : depth;
    ep.n_batch = (int)(fill_max > 512 ? 512 : fill_max);
    if (ep.n_batch < n_seq)
        ep.n_batch = n_seq;
    int rc = 1;
    if (engine_create(&b.ctx, m, &ep, &e) != 0) {
        cli_error("%s", e.msg);
        model_free(m);
        return 1;
    }
    int bmax = ep.n_batch > n_seq ? ep.n_batch : n_seq;
    b.batch = malloc((size_t)bmax * sizeof *b.batch);
    b.logits = engine_logits_alloc(b.ctx, (size_t)bmax * (size_t)b.n_vocab);
    double *runs = malloc((size_t)reps * sizeof *runs);
    if (!b.batch || !b.logits || !runs) {
        cli_error("out of memory");
        goto out;
    }

    struct test { char name[48]; int pp, tg, depth, np; } tests[4];
    int nt = 0;
    if (pp > 0) {
        tests[nt] = (struct test){ "", (int)pp, 0, 0, 0 };
        snprintf(tests[nt++].name, 48, "pp%ld", pp);
    }
    if (tg > 0) {
        tests[nt] = (struct test){ "", 0, (int)tg, 0, 0 };
        snprintf(tests[nt++].name, 48, "tg%ld", tg);
    }
    if (tg > 0 && depth > 0) {
        tests[nt] = (struct test){ "", 0, (int)tg, (int)depth, 0 };
        snprintf(tests[nt++].name, 48, "tg%ld@d%ld", tg, depth);
    }
    if (tg > 0 && np > 1) {
        tests[nt] = (struct test){ "", 0, (int)tg, 0, (int)np };
        snprintf(tests[nt++].name, 48, "np %ld", np);
    }

    double gib = (double)mi->n_bytes / (1024.0 * 1024.0 * 1024.0);
    const char *backend = engine_backend_name(ep.backend);
    int threads = ep.n_threads > 0 ? ep.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (!json) {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    }
    bool tty = isatty(2);
    for (int t = 0; t < nt; t++) {
        if (tty)
            fprintf(stderr, "\rrunning %s ...        ", tests[t].name);
        if (run_test(&b, tests[t].pp, tests[t].tg, tests[t].depth, tests[t].np, ep.n_batch, &e) < 0)
            goto fail;
        for (int r = 0; r < reps; r++)
            if ((runs[r] = run_test(&b, tests[t].pp, tests[t].tg, tests[t].depth, tests[t].np, ep.n_batch, &e)) < 0)
                goto fail;
        double mean = 0, sd = 0;
        for (int r = 0; r < reps; r++)
            mean += runs[r] / (double)reps;
        for (int r = 0; r < reps; r++)
            sd += (runs[r] - mean) * (runs[r] - mean);
        sd = reps > 1 ? sqrt(sd / (double)(reps - 1)) : 0;
        qsort(runs, (size_t)reps, sizeof *runs, cmp_double);
        double med = runs[reps / 2];
        if (reps % 2 == 0)
            med = 0.5 * (runs[reps / 2 - 1] + runs[reps / 2]);
        if (tty)
            fprintf(stderr, "\r                              \r");
        if (json)
            printf("{\"model\":\"%s\",\"size_bytes\":%llu,\"params\":%llu,\"backend\":\"%s\",\"threads\":%d,"
                   "\"test\":\"%s\",\"tps_median\":%.3f,\"tps_stddev\":%.3f,\"reps\":%ld}\n",
                   mi->name, (unsigned long long)mi->n_bytes, (unsigned long long)mi->n_params, backend, threads,
                   tests[t].name, med, sd, reps);
        else
            printf("| %s | %.2f GiB | %.2f M | %s | %d | %s | %.2f ± %.2f |\n", mi->name, gib,
                   (double)mi->n_params / 1e6, backend, threads, tests[t].name, med, sd);
        fflush(stdout);
    }
    rc = 0;
    goto out;
fail:
    cli_error("decode failed: %s", e.msg);
out:
    free(runs);
    free(b.batch);
    engine_logits_free(b.ctx, b.logits);
    engine_free(b.ctx);
    model_free(m);
    return rc;
}
