/* oracle.c — drive llama.cpp (80fb11a, the npm @node-llama-cpp/linux-x64@3.21.1 CPU libraries)
 * through its public C API to produce reference outputs for llm170's parity tests.
 * Test tooling only: built by tests/oracle/build.sh against the libraries fetch.sh caches;
 * never part of the product.
 *
 *   oracle tokenize --model M [--no-special] [--no-bos] [--text S | --file F]   (stdin otherwise)
 *       prints [id, id, ...] — add_special = !--no-bos, parse_special = !--no-special
 *   oracle tokenize-inp --model M --inp F [--no-special] [--no-bos]
 *       F in llama.cpp's .inp layout (cases separated by "\n__ggml_vocab_test__\n");
 *       prints one line of space-separated ids per case
 *   oracle logits --model M --prompt-tokens 1,2,3 [--all] --out F [--threads 1] [--kv f32|f16]
 *       one llama_decode for the whole prompt, flash attention off; writes f32 LE logits of every
 *       position (--all) or of the last; prints "n_vocab N n_tokens T"
 *   oracle greedy --model M --prompt-tokens 1,2,3 --n N [--threads 1] [--kv f32|f16] [--stop-eog]
 *       prompt in one decode, then one token per decode; prints JSON
 *       {"ids":[...],"top1":[...],"gap":[...]} — top1 = largest logit, gap = top1 - second largest
 *   oracle embed --model M --prompt-tokens 1,2,3 [--pooling mean|cls|last] --out F [--threads 1]
 *       one llama_decode with embeddings on (pooling from the model unless given), F32 KV; writes
 *       llama_get_embeddings_seq of the sequence, n_embd f32 LE, not normalised; prints "n_embd N"
 *   oracle quantize IN OUT TYPE
 *       llama_model_quantize with pure = true (every quantizable tensor gets TYPE), 1 thread
 *   oracle info
 *       which CPU variant was loaded, and llama.cpp's system info
 *
 * The CPU backend library is chosen explicitly so that goldens do not depend on the machine:
 * ORACLE_CPU=<variant> (file libggml-cpu-<variant>.so), default "haswell" when the CPU has
 * AVX2+FMA+F16C, else "x64". ORACLE_LIB_DIR overrides the library folder (default: ../lib next
 * to this program). ORACLE_VERBOSE=1 lets llama.cpp log. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llama_api.h"

static int g_verbose;

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("oracle: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

static void quiet_log(int32_t level, const char *text, void *user)
{
    (void)user;
    if (g_verbose || level == 4) /* errors always */
        fputs(text, stderr);
}

/* ---- argument helpers ---- */

struct opts {
    const char *model, *text, *file, *out, *inp, *kv, *pooling;
    const char *tokens;       /* "1,2,3" */
    int no_special, no_bos, all, threads, n, stop_eog, tg, reps;
};

static void parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof *o);
    o->threads = 1;
    o->kv = "f32";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL(field) do { if (!v) die("%s needs a value", a); o->field = v; i++; } while (0)
        if (!strcmp(a, "--model")) VAL(model);
        else if (!strcmp(a, "--text")) VAL(text);
        else if (!strcmp(a, "--file")) VAL(file);
        else if (!strcmp(a, "--out")) VAL(out);
        else if (!strcmp(a, "--inp")) VAL(inp);
        else if (!strcmp(a, "--kv")) VAL(kv);
        else if (!strcmp(a, "--pooling")) VAL(pooling);
        else if (!strcmp(a, "--prompt-tokens")) VAL(tokens);
        else if (!strcmp(a, "--threads")) { if (!v) die("--threads needs a value"); o->threads = atoi(v); i++; }
        else if (!strcmp(a, "--n")) { if (!v) die("--n needs a value"); o->n = atoi(v); i++; }
        else if (!strcmp(a, "--tg")) { if (!v) die("--tg needs a value"); o->tg = atoi(v); i++; }
        else if (!strcmp(a, "--reps")) { if (!v) die("--reps needs a value"); o->reps = atoi(v); i++; }
        else if (!strcmp(a, "--no-special")) o->no_special = 1;
        else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--all")) o->all = 1;
        else if (!strcmp(a, "--stop-eog")) o->stop_eog = 1;
        else die("unknown option '%s'", a);
#undef VAL
    }
    if (!o->model) die("--model is required");
    if (o->threads < 1) die("--threads must be >= 1");
    if (strcmp(o->kv, "f32") && strcmp(o->kv, "f16")) die("--kv must be f32 or f16");
}

/* Parse "1,2,3" into a malloc'ed array. */
static llama_token *parse_ids(const char *s, int *n_out)
{
    int cap = 16, n = 0;
    llama_token *ids = malloc(sizeof *ids * cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) die("bad token id list '%s'", s);
        if (n == cap) ids = realloc(ids, sizeof *ids * (cap *= 2));
        ids[n++] = (llama_token)v;
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    if (n == 0) die("empty token id list");
    *n_out = n;
    return ids;
}

/* Read a whole file (or stdin when path is NULL); *len gets the byte count. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) die("cannot open '%s': %s", path, strerror(errno));
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    if (ferror(f)) die("cannot read '%s'", path ? path : "stdin");
    if (path) fclose(f);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ---- library setup ---- */

static char g_libdir[PATH_MAX + 16];
static char g_variant[64];

static void init_backend(void)
{
    g_verbose = getenv("ORACLE_VERBOSE") && atoi(getenv("ORACLE_VERBOSE"));
    llama_log_set(quiet_log, NULL);
    ggml_log_set(quiet_log, NULL);
    const char *dir = getenv("ORACLE_LIB_DIR");
    if (dir && *dir) {
        snprintf(g_libdir, sizeof g_libdir, "%s", dir);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) die("cannot find own path");
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        snprintf(g_libdir, sizeof g_libdir, "%s/../lib", exe);
    }
    const char *var = getenv("ORACLE_CPU");
    if (var && *var) {
        snprintf(g_variant, sizeof g_variant, "%s", var);
    } else {
        __builtin_cpu_init();
        int has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                  __builtin_cpu_supports("f16c");
        snprintf(g_variant, sizeof g_variant, "%s", has ? "haswell" : "x64");
    }
    char path[PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", g_libdir, g_variant);
    if (!ggml_backend_load(path)) die("cannot load CPU backend '%s' (unsupported CPU or missing file)", path);
    if (ggml_backend_dev_count() < 1) die("no ggml device after loading '%s'", path);
    llama_backend_init();
}

/* Check that the library's defaults sit at the offsets llama_api.h declares; a layout mismatch
 * (wrong library version) would otherwise silently set the wrong fields. */
static void sanity_check_abi(void)
{
    struct llama_context_params c = llama_context_default_params();
    struct llama_model_params m = llama_model_default_params();
    struct llama_model_quantize_params q = llama_model_quantize_default_params();
    int ok = c.n_ctx == 512 && c.n_batch == 2048 && c.n_ubatch == 512 && c.n_seq_max == 1 &&
             c.rope_scaling_type == -1 && c.flash_attn_type == -1 && c.yarn_ext_factor == -1.0f &&
             c.defrag_thold == -1.0f && c.type_k == ORACLE_GGML_F16 && c.type_v == ORACLE_GGML_F16 &&
             c.offload_kqv && c.no_perf && c.op_offload && c.swa_full && !c.kv_unified &&
             c.samplers == NULL && c.n_samplers == 0 && c.ctx_other == NULL;
    ok = ok && m.n_gpu_layers == -1 && m.split_mode == 1 && m.load_mode == -1 && m.lazy_mode == 1 &&
         !m.vocab_only && m.use_extra_bufts && !m.load_mtp;
    ok = ok && q.nthread == 0 && q.ftype == 7 && q.output_tensor_type == 43 &&
         q.token_embedding_type == 43 && q.quantize_output_tensor && !q.pure &&
         q.max_buf_size == 8ull * 1024 * 1024 * 1024;
    if (!ok) die("llama.cpp library does not have the ABI llama_api.h expects (not 80fb11a?)");
}

static struct llama_model *load_model(const char *path, int vocab_only)
{
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = vocab_only;
    mp.n_gpu_layers = 0;
    struct llama_model *m = llama_model_load_from_file(path, mp);
    if (!m) die("cannot load model '%s'", path);
    return m;
}

static struct llama_context *make_ctx(struct llama_model *m, int n_ctx, int threads, const char *kv)
{
    struct llama_context_params cp = llama_context_default_params();
    /* the whole prompt is one batch and one micro-batch */
    uint32_t n = (uint32_t)n_ctx;
    cp.n_ctx = n;
    cp.n_batch = n;
    cp.n_ubatch = n;
    cp.n_seq_max = 1;
    cp.n_outputs_max = 0;
    cp.n_outputs_max_per_seq = 0;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = ORACLE_FA_OFF;
    cp.type_k = cp.type_v = strcmp(kv, "f16") ? ORACLE_GGML_F32 : ORACLE_GGML_F16;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) die("cannot create a context (n_ctx %d)", n_ctx);
    return ctx;
}

/* ---- commands ---- */

static llama_token *tokenize(const struct llama_vocab *v, const char *text, size_t len, int add, int parse, int *n_out)
{
    if (len > INT32_MAX / 2) die("text too long");
    int cap = (int)len + 8;
    llama_token *ids = malloc(sizeof *ids * cap);
    int n = llama_tokenize(v, text, (int32_t)len, ids, cap, add, parse);
    if (n < 0) {
        cap = -n;
        ids = realloc(ids, sizeof *ids * cap);
        n = llama_tokenize(v, text, (int32_t)len, ids, cap, add, parse);
        if (n < 0) die("llama_tokenize failed (%d)", n);
    }
    *n_out = n;
    return ids;
}

static int cmd_tokenize(struct opts *o)
{
    size_t len;
    char *text;
    if (o->text) { text = strdup(o->text); len = strlen(text); }
    else text = read_all(o->file, &len);
    struct llama_model *m = load_model(o->model, 1);
    int n;
    llama_token *ids = tokenize(llama_model_get_vocab(m), text, len, !o->no_bos, !o->no_special, &n);
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(ids); free(text);
    llama_model_free(m);
    return 0;
}

static int cmd_tokenize_inp(struct opts *o)
{
    if (!o->inp) die("--inp is required");
    size_t len;
    char *all = read_all(o->inp, &len);
    struct llama_model *m = load_model(o->model, 1);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = all, *end = all + len;
    while (p < end) {
        char *q = strstr(p, sep);
        size_t clen = q ? (size_t)(q - p) : (size_t)(end - p);
        int n;
        llama_token *ids = tokenize(v, p, clen, !o->no_bos, !o->no_special, &n);
        for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        free(ids);
        if (!q) break;
        p = q + sizeof sep - 1;
    }
    free(all);
    llama_model_free(m);
    return 0;
}

/* Decode tokens[0..n) at positions pos0.. in one batch; output rows for all or only the last. */
static void decode(struct llama_context *ctx, const llama_token *tokens, int n, int pos0, int all)
{
    struct llama_batch b;
    llama_pos *pos = malloc(sizeof *pos * n);
    int32_t *nseq = malloc(sizeof *nseq * n);
    llama_seq_id **seq = malloc(sizeof *seq * n);
    int8_t *out = malloc((size_t)n);
    static llama_seq_id seq0 = 0;
    for (int i = 0; i < n; i++) {
        pos[i] = pos0 + i;
        nseq[i] = 1;
        seq[i] = &seq0;
        out[i] = (int8_t)(all || i == n - 1);
    }
    b.n_tokens = n;
    b.token = (llama_token *)tokens;
    b.embd = NULL;
    b.pos = pos;
    b.n_seq_id = nseq;
    b.seq_id = seq;
    b.logits = out;
    int rc = llama_decode(ctx, b);
    if (rc != 0) die("llama_decode failed (%d) for %d tokens at position %d", rc, n, pos0);
    free(pos); free(nseq); free(seq); free(out);
}

static int cmd_logits(struct opts *o)
{
    if (!o->tokens || !o->out) die("logits needs --prompt-tokens and --out");
    int n;
    llama_token *ids = parse_ids(o->tokens, &n);
    struct llama_model *m = load_model(o->model, 0);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    for (int i = 0; i < n; i++)
        if (ids[i] >= nv) die("token id %d out of range (n_vocab %d)", ids[i], nv);
    struct llama_context *ctx = make_ctx(m, n, o->threads, o->kv);
    decode(ctx, ids, n, 0, o->all);
    FILE *f = fopen(o->out, "wb");
    if (!f) die("cannot write '%s': %s", o->out, strerror(errno));
    int rows = o->all ? n : 1;
    for (int r = 0; r < rows; r++) {
        const float *l = llama_get_logits_ith(ctx, o->all ? r : -1);
        if (!l) die("no logits for row %d", r);
        if (fwrite(l, sizeof(float), (size_t)nv, f) != (size_t)nv) die("short write to '%s'", o->out);
    }
    if (fclose(f)) die("cannot write '%s'", o->out);
    printf("n_vocab %d n_tokens %d rows %d\n", nv, n, rows);
    llama_free(ctx);
    llama_model_free(m);
    free(ids);
    return 0;
}

static int cmd_embed(struct opts *o)
{
    if (!o->tokens || !o->out) die("embed needs --prompt-tokens and --out");
    int n;
    llama_token *ids = parse_ids(o->tokens, &n);
    struct llama_model *m = load_model(o->model, 0);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    for (int i = 0; i < n; i++)
        if (ids[i] >= nv) die("token id %d out of range (n_vocab %d)", ids[i], nv);
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n; /* the whole input in one micro-batch */
    cp.n_seq_max = 1;
    cp.n_outputs_max = 0;
    cp.n_outputs_max_per_seq = 0;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.flash_attn_type = ORACLE_FA_OFF;
    cp.type_k = cp.type_v = ORACLE_GGML_F32;
    cp.no_perf = true;
    cp.embeddings = true;
    cp.pooling_type = -1; /* LLAMA_POOLING_TYPE_UNSPECIFIED: the model's */
    if (o->pooling)
        cp.pooling_type = !strcmp(o->pooling, "mean") ? 1 : !strcmp(o->pooling, "cls") ? 2
                        : !strcmp(o->pooling, "last") ? 3 : (die("--pooling must be mean, cls or last"), 0);
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) die("cannot create an embeddings context (n_ctx %d)", n);
    decode(ctx, ids, n, 0, 1);
    const float *v = llama_get_embeddings_seq(ctx, 0);
    if (!v) die("no pooled embedding for sequence 0 (pooling none?)");
    int ne = llama_model_n_embd(m);
    FILE *f = fopen(o->out, "wb");
    if (!f) die("cannot write '%s': %s", o->out, strerror(errno));
    if (fwrite(v, sizeof(float), (size_t)ne, f) != (size_t)ne) die("short write to '%s'", o->out);
    if (fclose(f)) die("cannot write '%s'", o->out);
    printf("n_embd %d n_tokens %d\n", ne, n);
    llama_free(ctx);
    llama_model_free(m);
    free(ids);
    return 0;
}

static int cmd_greedy(struct opts *o)
{
    if (!o->tokens || o->n < 1) die("greedy needs --prompt-tokens and --n N (N >= 1)");
    int n;
    llama_token *prompt = parse_ids(o->tokens, &n);
    struct llama_model *m = load_model(o->model, 0);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(v);
    for (int i = 0; i < n; i++)
        if (prompt[i] >= nv) die("token id %d out of range (n_vocab %d)", prompt[i], nv);
    struct llama_context *ctx = make_ctx(m, n + o->n, o->threads, o->kv);
    llama_token *gen = malloc(sizeof *gen * o->n);
    float *top1 = malloc(sizeof *top1 * o->n), *gap = malloc(sizeof *gap * o->n);
    int steps = 0;
    decode(ctx, prompt, n, 0, 0);
    for (int s = 0; s < o->n; s++) {
        const float *l = llama_get_logits_ith(ctx, -1);
        if (!l) die("no logits at step %d", s);
        int best = 0;
        for (int i = 1; i < nv; i++)
            if (l[i] > l[best]) best = i; /* first maximum wins, like an argmax */
        float second = -INFINITY;
        for (int i = 0; i < nv; i++)
            if (i != best && l[i] > second) second = l[i];
        gen[s] = best;
        top1[s] = l[best];
        gap[s] = l[best] - second;
        steps++;
        if (o->stop_eog && llama_vocab_is_eog(v, best)) break;
        if (s + 1 < o->n) decode(ctx, &gen[s], 1, n + s, 0);
    }
    printf("{\"ids\":[");
    for (int s = 0; s < steps; s++) printf(s ? ",%d" : "%d", gen[s]);
    printf("],\"top1\":[");
    for (int s = 0; s < steps; s++) printf(s ? ",%.9g" : "%.9g", top1[s]);
    printf("],\"gap\":[");
    for (int s = 0; s < steps; s++) printf(s ? ",%.9g" : "%.9g", gap[s]);
    printf("]}\n");
    free(gen); free(top1); free(gap); free(prompt);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

static const struct { const char *name; int ftype; } k_ftypes[] = {
    {"f32", 0}, {"f16", 1}, {"q4_0", 2}, {"q4_1", 3}, {"q8_0", 7}, {"q5_0", 8}, {"q5_1", 9},
    {"q2_k", 10}, {"q3_k", 12}, {"q4_k", 15}, {"q5_k", 17}, {"q6_k", 18}, {"iq4_nl", 25},
    {"iq4_xs", 30}, {"bf16", 32}, {"mxfp4", 38},
};

static int cmd_quantize(int argc, char **argv)
{
    if (argc != 3) die("usage: oracle quantize IN OUT TYPE");
    int ftype = -1;
    for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
        if (!strcasecmp(argv[2], k_ftypes[i].name)) ftype = k_ftypes[i].ftype;
    if (ftype < 0) die("unknown type '%s'", argv[2]);
    struct llama_model_quantize_params q = llama_model_quantize_default_params();
    q.nthread = 1;
    q.ftype = ftype;
    q.pure = true;
    if (llama_model_quantize(argv[0], argv[1], &q) != 0) die("llama_model_quantize failed");
    return 0;
}

/* bench: llama-bench-like timing of llama.cpp itself, for docs/benchmarks.md
 * side-by-side runs (not a test). Default context settings as llama-bench
 * uses them (f16 KV, flash attention auto, n_ubatch 512); a fresh context per
 * repetition so every run starts from an empty cache; median of --reps. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmd_bench(struct opts *o)
{
    int pp = o->n > 0 ? o->n : 512, tg = o->tg > 0 ? o->tg : 128, reps = o->reps > 0 ? o->reps : 3;
    struct llama_model *m = load_model(o->model, 0);
    int nv = llama_vocab_n_tokens(llama_model_get_vocab(m));
    llama_token *toks = malloc(sizeof *toks * (size_t)(pp > tg ? pp : tg));
    for (int i = 0; i < (pp > tg ? pp : tg); i++)
        toks[i] = (llama_token)((i * 7919 + 13) % nv);
    const char *names[2] = { "pp", "tg" };
    for (int t = 0; t < 2; t++) {
        double *r = malloc(sizeof *r * (size_t)(reps + 1));
        for (int rep = 0; rep <= reps; rep++) { /* rep 0 warms up */
            struct llama_context_params cp = llama_context_default_params();
            cp.n_ctx = (uint32_t)(pp + tg + 16);
            cp.n_batch = 2048;
            cp.n_ubatch = 512;
            cp.n_threads = o->threads;
            cp.n_threads_batch = o->threads;
            cp.no_perf = true;
            struct llama_context *ctx = llama_init_from_model(m, cp);
            if (!ctx) die("cannot create a context");
            double t0 = now_s();
            if (t == 0) {
                decode(ctx, toks, pp, 0, 0);
            } else {
                for (int i = 0; i < tg; i++)
                    decode(ctx, toks + i, 1, i, 0);
            }
            double dt = now_s() - t0;
            if (rep > 0)
                r[rep - 1] = (t == 0 ? pp : tg) / dt;
            llama_free(ctx);
        }
        qsort(r, (size_t)reps, sizeof *r, cmp_d);
        printf("| llama.cpp %s | %d threads | %s%d | %.2f |\n", g_variant, o->threads, names[t], t == 0 ? pp : tg,
               r[reps / 2]);
        fflush(stdout);
        free(r);
    }
    free(toks);
    llama_model_free(m);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fputs("usage: oracle tokenize|tokenize-inp|logits|greedy|quantize|bench|info ... (see oracle.c)\n", stderr);
        return argc < 2 ? 2 : 0;
    }
    init_backend();
    sanity_check_abi();
    const char *cmd = argv[1];
    struct opts o;
    int rc;
    if (!strcmp(cmd, "quantize")) rc = cmd_quantize(argc - 2, argv + 2);
    else if (!strcmp(cmd, "info")) {
        printf("cpu-variant %s\nlibdir %s\n%s\n", g_variant, g_libdir, llama_print_system_info());
        rc = 0;
    } else {
        parse_opts(argc - 2, argv + 2, &o);
        if (!strcmp(cmd, "tokenize")) rc = cmd_tokenize(&o);
        else if (!strcmp(cmd, "tokenize-inp")) rc = cmd_tokenize_inp(&o);
        else if (!strcmp(cmd, "logits")) rc = cmd_logits(&o);
        else if (!strcmp(cmd, "greedy")) rc = cmd_greedy(&o);
        else if (!strcmp(cmd, "embed")) rc = cmd_embed(&o);
        else if (!strcmp(cmd, "bench")) rc = cmd_bench(&o);
        else die("unknown command '%s'", cmd);
    }
    llama_backend_free();
    return rc;
}
