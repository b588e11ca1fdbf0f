/* hip_bench — speed of the `hip` engine, llama-bench style:
 *   hip_bench MODEL [--pp N] [--tg N] [--depth D] [--reps R] [--no-graph]
 * pp: one batch of N prompt tokens from an empty cache (logits of the last only);
 * tg: N single-token greedy decode steps (argmax on the device) after D cached
 * positions. Warm-up first, then R repetitions; prints the median and all reps.
 * --profile: kernel times of 16 decode steps, and of one prefill when --pp is set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../../worker/hip/hip_engine.h"
#include "../../worker/engine/engine.h"
#include "../../worker/hip/hip_rt.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int prefill(struct hip_engine *c, struct engine_tok *t, int from, int n, int nb, int V, struct err *e)
{
    for (int done = 0; done < n; done += nb) {
        int k = n - done < nb ? n - done : nb;
        for (int i = 0; i < k; i++)
            t[i] = (struct engine_tok){ .token = (int)((1000003u * (unsigned)(from + done + i) + 7u) % (unsigned)V),
                                        .pos = from + done + i, .seq = 0, .logits = done + i == n - 1 };
        int32_t out;
        int rc = hip_engine_decode_greedy(c, t, k, &out, e);
        if (rc)
            return rc;
    }
    return 0;
}

/* Print the kernel times gathered since profiling was turned on, per `per` repetitions (unit: "/token",
 * "/step", or "" for one run), each line starting with tag; then turn profiling off. rc: the caller's
 * result so far (nothing is read after a failure); returns the new one. */
static int print_profile(struct hip_engine *c, int rc, const char *tag, const char *what, const char *unit, int per,
                         struct err *e)
{
    struct hip_prof_row rows[64];
    int nr = rc ? 0 : hip_engine_profile_report(c, rows, 64, e);
    if (nr < 0)
        rc = nr;
    double tot = 0;
    for (int i = 0; i < nr; i++)
        tot += rows[i].ms;
    printf("%s %s%skernel time %.3f ms%s\n", tag, what, *what ? " " : "", tot / per, unit);
    for (int i = 0; i < nr; i++)
        printf("%s %-16s %5d calls%s  %8.1f us%s  %6.2f us/call  %5.1f%%\n", tag, rows[i].name, rows[i].calls / per,
               unit, 1e3 * rows[i].ms / per, unit, 1e3 * rows[i].ms / rows[i].calls, 100.0 * rows[i].ms / tot);
    hip_engine_profile(c, false, e);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hip_bench MODEL [--pp N] [--tg N] [--depth D] [--reps R] [--no-graph] [--profile] [--batch 1,4,16,64]\n");
        return 2;
    }
    int pp = 512, tg = 128, depth = 0, reps = 3;
    bool graph = true, profile = false;
    const char *batches = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--pp") && i + 1 < argc)
            pp = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--tg") && i + 1 < argc)
            tg = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc)
            depth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-graph"))
            graph = false;
        else if (!strcmp(argv[i], "--profile"))
            profile = true;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batches = argv[++i];
    }
    if (reps < 1 || reps > 50)
        reps = 3;
    struct err e = { 0 };
    struct model *m = NULL;
    double t0 = now();
    if (model_load(&m, argv[1], &e)) {
        fprintf(stderr, "hip_bench: %s\n", e.msg);
        return 1;
    }
    const int V = model_info(m)->n_vocab;
    struct engine_params p;
    engine_params_default(&p);
    p.backend = BACKEND_HIP;
    p.n_batch = pp > 512 ? pp : 512;
    p.n_ctx = depth + tg + pp + 64;
    p.n_seq = 1;
    struct hip_engine *c = NULL;
    if (hip_engine_create(&c, m, &p, NULL, &e)) {
        fprintf(stderr, "hip_bench: %s\n", e.msg);
        return 1;
    }
    hip_engine_set_graphs(c, graph);
    printf("# %s on %s; load+upload %.1f s; graphs %s\n", argv[1], hip_engine_device(c), now() - t0,
           graph ? "on" : "off");
    struct engine_tok *t = calloc((size_t)p.n_batch, sizeof *t);
    double *ts = calloc((size_t)reps, sizeof(double));
    int rc = 0;
    /* warm-up: module loads, graph capture */
    rc = prefill(c, t, 0, pp, p.n_batch, V, &e);
    for (int i = 0; i < 4 && !rc; i++) {
        struct engine_tok d = { .token = 1, .pos = pp + i, .seq = 0, .logits = true };
        int32_t o;
        rc = hip_engine_decode_greedy(c, &d, 1, &o, &e);
    }
    if (pp > 0) {
        for (int r = 0; r < reps && !rc; r++) {
            hip_engine_seq_truncate(c, 0, 0);
            double a = now();
            rc = prefill(c, t, 0, pp, p.n_batch, V, &e);
            ts[r] = pp / (now() - a);
        }
        qsort(ts, (size_t)reps, sizeof(double), cmpd);
        printf("RESULT pp%d t/s %.1f  (reps:", pp, ts[reps / 2]);
        for (int r = 0; r < reps; r++)
            printf(" %.1f", ts[r]);
        printf(")\n");
    }
    if (tg > 0 && !rc) {
        for (int r = 0; r < reps && !rc; r++) {
            hip_engine_seq_truncate(c, 0, 0);
            if (depth)
                rc = prefill(c, t, 0, depth, p.n_batch, V, &e);
            int32_t tok = 1;
            double a = now();
            for (int i = 0; i < tg && !rc; i++) {
                struct engine_tok d = { .token = tok, .pos = depth + i, .seq = 0, .logits = true };
                rc = hip_engine_decode_greedy(c, &d, 1, &tok, &e);
            }
            ts[r] = tg / (now() - a);
        }
        qsort(ts, (size_t)reps, sizeof(double), cmpd);
        printf("RESULT tg%d", tg);
        if (depth)
            printf(" @ d%d", depth);
        printf(" t/s %.1f  (reps:", ts[reps / 2]);
        for (int r = 0; r < reps; r++)
            printf(" %.1f", ts[r]);
        printf(")\n");
    }
    if (profile && pp > 0 && !rc) {
        /* kernel times of one pp-token prefill (an event after each launch) */
        hip_engine_seq_truncate(c, 0, 0);
        rc = hip_engine_profile(c, true, &e);
        if (!rc)
            rc = prefill(c, t, 0, pp, p.n_batch, V, &e);
        char what[64];
        snprintf(what, sizeof what, "prefill of %d tokens:", pp);
        rc = print_profile(c, rc, "PROFILE(pp)", what, "", 1, &e);
    }
    if (profile && !rc) {
        /* kernel times of tg decode steps (graphs off, an event after each launch) */
        hip_engine_seq_truncate(c, 0, 0);
        rc = prefill(c, t, 0, depth ? depth : 1, p.n_batch, V, &e);
        if (!rc)
            rc = hip_engine_profile(c, true, &e);
        int32_t tok = 1;
        const int steps = tg > 0 && tg < 16 ? tg : 16; /* ~400 launches a step; the event pool holds 32768 */
        for (int i = 0; i < steps && !rc; i++) {
            struct engine_tok d = { .token = tok, .pos = (depth ? depth : 1) + i, .seq = 0, .logits = true };
            rc = hip_engine_decode_greedy(c, &d, 1, &tok, &e);
        }
        char what[64];
        snprintf(what, sizeof what, "%d decode steps after %d positions:", steps, depth ? depth : 1);
        rc = print_profile(c, rc, "PROFILE", what, "/token", steps, &e);
    }
    free(t);
    free(ts);
    hip_engine_free(c);
    c = NULL;
    /* batched decode, llama-batched-bench style: B sequences of 128 prompt tokens, then 128 steps of
     * B tokens (one per sequence, greedy on the device); aggregate decode t/s */
    for (const char *bp = batches; bp && *bp && !rc;) {
        int B = atoi(bp);
        const char *comma = strchr(bp, ',');
        bp = comma ? comma + 1 : NULL;
        if (B < 1 || B > 512)
            continue;
        struct engine_params bpm;
        engine_params_default(&bpm);
        bpm.backend = BACKEND_HIP;
        bpm.n_seq = B;
        bpm.n_ctx = 128 + 128 + 8;
        bpm.n_batch = B > 128 ? B : 128;
        struct hip_engine *bc = NULL;
        if ((rc = hip_engine_create(&bc, m, &bpm, NULL, &e)))
            break;
        hip_engine_set_graphs(bc, graph);
        struct engine_tok *bt = calloc((size_t)bpm.n_batch, sizeof *bt);
        int32_t *out = calloc((size_t)B, sizeof *out);
        for (int rep = 0; rep < 2 && !rc; rep++) { /* the first is the warm-up */
            for (int s = 0; s < B; s++)
                hip_engine_seq_truncate(bc, s, 0);
            double a = now();
            for (int s = 0; s < B && !rc; s++) {
                for (int i = 0; i < 128; i++)
                    bt[i] = (struct engine_tok){ .token = (int)((7919u * (unsigned)(i + 131 * s) + 3u) % (unsigned)V),
                                                 .pos = i, .seq = s, .logits = i == 127 };
                rc = hip_engine_decode_greedy(bc, bt, 128, &out[s], &e);
            }
            double b = now();
            for (int step = 0; step < 128 && !rc; step++) {
                for (int s = 0; s < B; s++)
                    bt[s] = (struct engine_tok){ .token = out[s], .pos = 128 + step, .seq = s, .logits = true };
                rc = hip_engine_decode_greedy(bc, bt, B, out, &e);
            }
            double d = now();
            if (rep == 1 && !rc)
                printf("RESULT batched B=%d: prompt %.1f t/s, decode aggregate %.1f t/s, total %.1f t/s\n", B,
                       128.0 * B / (b - a), 128.0 * B / (d - b), 256.0 * B / (d - a));
        }
        if (profile && !rc) { /* kernel times of 4 more steps (positions 256..259; n_ctx has 8 to spare) */
            rc = hip_engine_profile(bc, true, &e);
            for (int step = 0; step < 4 && !rc; step++) {
                for (int s = 0; s < B; s++)
                    bt[s] = (struct engine_tok){ .token = out[s], .pos = 256 + step, .seq = s, .logits = true };
                rc = hip_engine_decode_greedy(bc, bt, B, out, &e);
            }
            char tag[32];
            snprintf(tag, sizeof tag, "PROFILE(B=%d)", B);
            rc = print_profile(bc, rc, tag, "", "/step", 4, &e);
        }
        free(bt);
        free(out);
        hip_engine_free(bc);
    }
    if (rc)
        fprintf(stderr, "hip_bench: %s\n", e.msg);
    model_free(m);
    return rc ? 1 : 0;
}
