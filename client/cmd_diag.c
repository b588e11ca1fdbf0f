/* cmd_diag.c — `llm170 diag logits` and `llm170 diag chunk-check`.
 *
 * diag logits: one prefill, raw f32 logits to a file (for parity checks).
 * chunk-check: the same prompt prefilled at once and in chunks of several
 * sizes must give the same logits at every position (exit 1 otherwise). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *USAGE =
    "usage: llm170 diag logits --model M (--prompt-tokens IDS | --prompt TEXT) [--all] --out F [--backend B]\n"
    "       llm170 diag chunk-check --model M --prompt-tokens IDS [--chunks 16,63,512] [--backend B]\n"
    "common options: --threads N, --kv-f32 (f32 KV cache), --tolerance X (chunk-check, default 1e-4)\n";

/* Relative error ||a - b|| / ||b|| of two rows. */
static double rel_err(const float *a, const float *b, int n)
{
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Prefill `ids` into sequence 0 (cleared first) in chunks of `chunk`; every
 * position's logits when `all`, else the last one's, into out. */
static int prefill(struct engine_ctx *ctx, const int32_t *ids, int n, int chunk, bool all, float *out,
                   int32_t n_vocab, struct err *e)
{
    engine_seq_truncate(ctx, 0, 0);
    struct engine_tok *b = malloc((size_t)chunk * sizeof *b);
    if (!b)
        return err_set(e, ERR_NOMEM, "out of memory");
    int rc = 0;
    float *dst = out;
    for (int done = 0; done < n && rc == 0; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        int want = 0;
        for (int j = 0; j < k; j++) {
            b[j].token = ids[done + j];
            b[j].pos = done + j;
            b[j].seq = 0;
            b[j].logits = all || done + j == n - 1;
            want += b[j].logits;
        }
        rc = engine_decode(ctx, b, k, dst, e);
        dst += (size_t)want * (size_t)n_vocab;
    }
    free(b);
    return rc;
}

struct diag_opts {
    const char *model, *prompt, *out;
    int32_t *ids;
    size_t n_ids;
    bool all;
    int32_t chunks[32];
    int n_chunks;
    double tol;
    struct engine_params ep;
};

static int parse(const char *verb, int argc, char **argv, struct diag_opts *o)
{
    const char *v;
    bool missing = false;
    long l;
    engine_params_default(&o->ep);
    o->tol = 1e-4;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE, stdout);
            return -1;
        } else if (!strcmp(a, "--all")) {
            o->all = true;
        } else if (!strcmp(a, "--kv-f32")) {
            o->ep.kv_f32 = true;
        } else if (cli_opt(argc, argv, &i, "--model", &v, &missing) && !missing) {
            o->model = v;
        } else if (!missing && cli_opt(argc, argv, &i, "--prompt-tokens", &v, &missing) && !missing) {
            free(o->ids);
            if (!cli_parse_ids(v, &o->ids, &o->n_ids) || o->n_ids == 0)
                return cli_usage_error(verb, "--prompt-tokens wants ids like 1,2,3");
        } else if (!missing && cli_opt(argc, argv, &i, "--prompt", &v, &missing) && !missing) {
            o->prompt = v;
        } else if (!missing && cli_opt(argc, argv, &i, "--out", &v, &missing) && !missing) {
            o->out = v;
        } else if (!missing && cli_opt(argc, argv, &i, "--backend", &v, &missing) && !missing) {
            if (!cli_parse_backend(v, &o->ep.backend))
                return cli_usage_error(verb, "unknown backend '%s'", v);
        } else if (!missing && cli_opt(argc, argv, &i, "--threads", &v, &missing) && !missing) {
            if (!cli_parse_int(v, 1, 1024, &l))
                return cli_usage_error(verb, "--threads wants 1..1024");
            o->ep.n_threads = (int)l;
        } else if (!missing && cli_opt(argc, argv, &i, "--tolerance", &v, &missing) && !missing) {
            if (!cli_parse_float(v, &o->tol) || o->tol < 0)
                return cli_usage_error(verb, "--tolerance wants a non-negative number");
        } else if (!missing && cli_opt(argc, argv, &i, "--chunks", &v, &missing) && !missing) {
            int32_t *c;
            size_t nc;
            if (!cli_parse_ids(v, &c, &nc) || nc == 0 || nc > 32)
                return cli_usage_error(verb, "--chunks wants sizes like 16,63,512");
            o->n_chunks = 0;
            for (size_t j = 0; j < nc; j++) {
                if (c[j] < 1) {
                    free(c);
                    return cli_usage_error(verb, "chunk sizes must be >= 1");
                }
                o->chunks[o->n_chunks++] = c[j];
            }
            free(c);
        } else if (missing) {
            return cli_usage_error(verb, "%s needs a value", a);
        } else {
            return cli_usage_error(verb, "unknown option '%s'", a);
        }
        if (missing)
            return cli_usage_error(verb, "%s needs a value", a);
    }
    if (!o->model)
        return cli_usage_error(verb, "--model is required");
    return 0;
}

int cmd_diag(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const char *sub = argv[1];
    bool logits_mode = !strcmp(sub, "logits");
    if (!logits_mode && strcmp(sub, "chunk-check"))
        return cli_usage_error("diag", "unknown diag command '%s' (logits, chunk-check)", sub);
    const char *verb = logits_mode ? "diag logits" : "diag chunk-check";
    struct diag_opts o;
    memset(&o, 0, sizeof o);
    int prc = parse(verb, argc, argv, &o);
    if (prc != 0) {
        free(o.ids);
        return prc < 0 ? 0 : prc;
    }
    if (logits_mode) {
        if (!o.out || (!o.ids == !o.prompt)) {
            free(o.ids);
            return cli_usage_error(verb, "needs --out F and exactly one of --prompt-tokens / --prompt");
        }
    } else {
        if (!o.ids) {
            free(o.ids);
            return cli_usage_error(verb, "needs --prompt-tokens");
        }
        if (o.n_chunks == 0) {
            o.chunks[0] = 16, o.chunks[1] = 63, o.chunks[2] = 512;
            o.n_chunks = 3;
        }
    }

    struct model *m = cli_load_model(o.model);
    if (!m) {
        free(o.ids);
        return 1;
    }
    struct err e;
    err_clear(&e);
    const struct tok_vocab *vocab = model_vocab(m);
    int32_t n_vocab = tok_n_vocab(vocab);
    int rc = 1;
    struct engine_ctx *ctx = NULL;
    float *ref = NULL, *got = NULL;
    FILE *f = NULL;

    if (o.prompt && tok_encode(vocab, o.prompt, strlen(o.prompt), true, true, &o.ids, &o.n_ids, &e) != 0) {
        cli_error("cannot tokenize the prompt: %s", e.msg);
        goto out;
    }
    if (o.n_ids == 0) {
        cli_error("empty prompt");
        goto out;
    }
    for (size_t j = 0; j < o.n_ids; j++)
        if (o.ids[j] >= n_vocab) {
            cli_error("token id %d is outside the vocabulary (%d tokens)", o.ids[j], n_vocab);
            goto out;
        }
    int n = (int)o.n_ids;
    o.ep.n_seq = 1;
    o.ep.n_batch = n; /* the unchunked reference is one call */
    if (o.ep.n_ctx < n)
        o.ep.n_ctx = n;
    if (engine_create(&ctx, m, &o.ep, &e) != 0) {
        cli_error("%s", e.msg);
        goto out;
    }
    bool all = logits_mode ? o.all : true;
    size_t rows = all ? (size_t)n : 1;
    ref = malloc(rows * (size_t)n_vocab * sizeof *ref);
    got = logits_mode ? NULL : malloc(rows * (size_t)n_vocab * sizeof *got);
    if (!ref || (!logits_mode && !got)) {
        cli_error("out of memory");
        goto out;
    }
    if (prefill(ctx, o.ids, n, n, all, ref, n_vocab, &e) != 0) {
        cli_error("decode failed: %s", e.msg);
        goto out;
    }
    if (logits_mode) {
        f = fopen(o.out, "wb");
        if (!f || fwrite(ref, sizeof *ref, rows * (size_t)n_vocab, f) != rows * (size_t)n_vocab) {
            cli_error("cannot write '%s'", o.out);
            goto out;
        }
        if (fclose(f) != 0) {
            f = NULL;
            cli_error("cannot write '%s'", o.out);
            goto out;
        }
        f = NULL;
        printf("%d\n", n_vocab);
        rc = 0;
        goto out;
    }
    rc = 0;
    for (int c = 0; c < o.n_chunks; c++) {
        if (prefill(ctx, o.ids, n, o.chunks[c], true, got, n_vocab, &e) != 0) {
            cli_error("decode failed: %s", e.msg);
            rc = 1;
            goto out;
        }
        double worst = 0;
        int worst_pos = 0;
        for (int p = 0; p < n; p++) {
            double r = rel_err(got + (size_t)p * (size_t)n_vocab, ref + (size_t)p * (size_t)n_vocab, n_vocab);
            if (!(r <= worst)) { /* also catches NaN */
                worst = r;
                worst_pos = p;
            }
        }
        bool ok = worst <= o.tol;
        printf("chunk %d: max rel err %.3g at pos %d %s\n", o.chunks[c], worst, worst_pos, ok ? "ok" : "DIVERGES");
        if (!ok)
            rc = 1;
    }
out:
    if (f)
        fclose(f);
    free(ref);
    free(got);
    free(o.ids);
    engine_free(ctx);
    model_free(m);
    return rc;
}
