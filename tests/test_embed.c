/* test_embed.c — embeddings through the scheduler (sched_request.embed) on the CPU engine (and on the
 * hip one where a GPU is): the pooled, L2-normalised final hidden states equal llama.cpp's
 * llama_get_embeddings_seq (tests/golden/embed_synth-qwen3.json: a synthetic qwen3 whose GGUF says
 * pooling_type = last; the model's own pooling, mean and cls) within 1e-4; pooling across prefill chunks;
 * batch invariance (alone = in a batch with other embeddings and a generation, within 1e-5; 1e-4 on hip);
 * prefix reuse; the refusals. The model is rebuilt from the golden's recipe (tests/oracle/synth.py: python3
 * with numpy and ../shared); without them the cases skip. Every loop is bounded by a step count. */
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "../worker/engine/engine.h"
#include "../worker/gguf/gguf.h"
#include "../worker/hip/hip_rt.h"
#include "../worker/serve/sched.h"
#include "check.h"

#define MAXR 16
#define MAXE 1024

struct rec {
    bool used;
    int finish, err_code, n_prompt, n_gen, n_cached, n_tokens;
    int n_embd;
    float v[MAXE];
    char message[160];
};
struct coll {
    struct rec r[MAXR];
};

static void on_event(void *user, const struct sched_event *ev)
{
    struct coll *c = user;
    struct rec *r = &c->r[ev->id % MAXR];
    r->used = true;
    if (ev->token >= 0)
        r->n_tokens++;
    if (!ev->finish)
        return;
    r->finish = ev->finish;
    r->err_code = ev->err_code;
    r->n_prompt = ev->n_prompt;
    r->n_gen = ev->n_gen;
    r->n_cached = ev->n_cached;
    snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "");
    r->n_embd = ev->embd ? ev->n_embd : 0;
    if (ev->embd && ev->n_embd <= MAXE)
        memcpy(r->v, ev->embd, (size_t)ev->n_embd * sizeof *r->v);
}

static json_t *g_golden;
static bool g_verbose; /* print each comparison (test_oracle only, so the output stays short) */
static struct model *g_model;
static struct engine_ctx *g_eng;
static char g_why[256];
static char g_path[256];

/* 1 ready, 0 a missing resource (g_why says which), -1 broken (a failed check) */
static int setup(void)
{
    if (g_eng)
        return 1;
    if (g_why[0])
        return 0;
    json_error_t je;
    if (!g_golden && !(g_golden = json_load_file("tests/golden/embed_synth-qwen3.json", 0, &je))) {
        CHECK(0, "tests/golden/embed_synth-qwen3.json: %s", je.text);
        return -1;
    }
    const char *sh = check_shared_dir();
    if (!sh) {
        snprintf(g_why, sizeof g_why, "../shared/data is absent");
        return 0;
    }
    const char *py = NULL;
    static const char *cands[] = { "python3", "/usr/bin/python3" };
    for (size_t i = 0; !py && i < 2; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0)
            py = cands[i];
    }
    if (!py) {
        snprintf(g_why, sizeof g_why, "no python3 with numpy (tried python3, /usr/bin/python3)");
        return 0;
    }
    json_t *desc = json_object_get(g_golden, "model");
    char *args = json_dumps(json_object_get(desc, "args"), JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(g_path, sizeof g_path, "/tmp/llm170-test-embed-%d.gguf", (int)getpid());
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "LLM170_SHARED='%s' %s tests/oracle/synth.py '%s' '%s' >/dev/null 2>&1", sh, py,
             args ? args : "{}", g_path);
    free(args);
    if (system(cmd) != 0) {
        CHECK(0, "tests/oracle/synth.py failed");
        return -1;
    }
    char got[80] = "";
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", g_path);
    FILE *f = popen(cmd, "r");
    if (f) {
        if (!fgets(got, sizeof got, f))
            got[0] = 0;
        pclose(f);
    }
    const char *sha = json_string_value(json_object_get(desc, "sha256"));
    if (!sha || strncmp(got, sha, 64)) {
        unlink(g_path);
        snprintf(g_why, sizeof g_why, "the synthetic model's sha256 differs from the golden's (tool drift?)");
        return 0;
    }
    struct err e;
    int rc = model_load(&g_model, g_path, &e);
    unlink(g_path);
    if (rc) {
        CHECK(0, "model_load: %s", e.msg);
        return -1;
    }
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 4;
    p.n_ctx = 64;
    p.n_batch = 128;
    p.n_threads = 2;
    p.kv_f32 = true; /* the oracle's cache */
    if (engine_create(&g_eng, g_model, &p, &e)) {
        CHECK(0, "engine_create: %s", e.msg);
        return -1;
    }
    return 1;
}

#define SETUP_OR_END()                \
    do {                              \
        int rc_ = setup();            \
        if (rc_ == 0)                 \
            SKIP(g_why);              \
        if (rc_ < 0)                  \
            return;                   \
    } while (0)

static struct sched *make_on(struct engine_ctx *eng, struct coll *c, int slots, int chunk)
{
    struct sched_params sp = {.n_slots = slots, .n_queue = 16, .n_batch = 128, .prefill_chunk = chunk};
    struct sched *s = NULL;
    struct err e;
    memset(c, 0, sizeof *c);
    int rc = sched_create(&s, eng, g_model, &sp, on_event, c, &e);
    CHECK(rc == 0, "sched_create: %s", e.msg);
    return rc ? NULL : s;
}

static struct sched *make(struct coll *c, int slots, int chunk) { return make_on(g_eng, c, slots, chunk); }

static int pool_of(const char *name)
{
    return !strcmp(name, "mean") ? SCHED_POOL_MEAN : !strcmp(name, "cls") ? SCHED_POOL_CLS
         : !strcmp(name, "last") ? SCHED_POOL_LAST : SCHED_POOL_MODEL;
}

/* The golden case i's prompt (ids) and pooling. */
static int case_prompt(size_t i, int32_t *ids, int cap, int *pool)
{
    json_t *c = json_array_get(json_object_get(g_golden, "cases"), i);
    json_t *p = json_object_get(c, "prompt");
    int n = 0;
    for (size_t k = 0; k < json_array_size(p) && n < cap; k++)
        ids[n++] = (int32_t)json_integer_value(json_array_get(p, k));
    *pool = pool_of(json_string_value(json_object_get(c, "pooling")));
    return n;
}

static int submit_embed(struct sched *s, uint64_t id, const int32_t *ids, int n, int pool, struct err *e)
{
    struct sched_request q;
    sched_request_init(&q);
    q.id = id;
    q.prompt = ids;
    q.n_prompt = (size_t)n;
    q.embed = true;
    q.pooling = pool;
    return sched_submit(s, &q, e);
}

/* Step until every submitted id finished (bounded). */
static void drain(struct sched *s, struct coll *c, const uint64_t *ids, int n)
{
    struct err e;
    for (int step = 0; step < 400; step++) {
        bool all = true;
        for (int i = 0; i < n; i++)
            all &= c->r[ids[i] % MAXR].finish != 0;
        if (all)
            return;
        CHECK(sched_step(s, &e) >= 0, "sched_step: %s", e.msg);
    }
    CHECK(0, "requests did not finish in 400 steps");
}

static double max_abs(const float *a, const float *b, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        if (fabs((double)a[i] - (double)b[i]) > m)
            m = fabs((double)a[i] - (double)b[i]);
    return m;
}

/* ours vs the golden vector of case i, within tol */
static void check_golden_tol(size_t i, const struct rec *r, double tol)
{
    json_t *c = json_array_get(json_object_get(g_golden, "cases"), i);
    json_t *v = json_object_get(c, "embedding");
    const char *name = json_string_value(json_object_get(c, "name"));
    CHECK(r->finish == SCHED_STOP, "%s: finish %d (%s)", name, r->finish, r->message);
    CHECK(r->n_embd == (int)json_array_size(v), "%s: n_embd %d, golden %zu", name, r->n_embd, json_array_size(v));
    if (r->n_embd != (int)json_array_size(v))
        return;
    double m = 0, nn = 0;
    for (int k = 0; k < r->n_embd; k++) {
        double d = fabs((double)r->v[k] - json_real_value(json_array_get(v, (size_t)k)));
        m = d > m ? d : m;
        nn += (double)r->v[k] * r->v[k];
    }
    CHECK(m <= tol, "%s: max |ours - llama.cpp| = %.3g > %.3g", name, m, tol);
    if (g_verbose)
        printf("#   %-14s max |ours - llama.cpp| = %.3g\n", name, m);
    CHECK(fabs(nn - 1.0) < 1e-5, "%s: |v|^2 = %.9g, not 1", name, nn);
}

static void check_golden(size_t i, const struct rec *r) { check_golden_tol(i, r, 1e-4); }

static size_t n_cases(void) { return json_array_size(json_object_get(g_golden, "cases")); }

/* each golden case alone: llama.cpp's vector; the model's pooling is read from the GGUF */
static void test_oracle(void)
{
    SETUP_OR_END();
    CHECK_EQ_INT(model_info(g_model)->pooling_type, 3);
    CHECK_EQ_INT(sched_pooling(g_model), SCHED_POOL_LAST);
    CHECK(n_cases() >= 4, "golden has %zu cases", n_cases());
    g_verbose = true;
    for (size_t i = 0; i < n_cases(); i++) {
        struct coll c;
        struct sched *s = make(&c, 2, 0);
        if (!s)
            return;
        int32_t ids[64];
        int pool;
        int n = case_prompt(i, ids, 64, &pool);
        struct err e;
        uint64_t id = 1;
        CHECK(submit_embed(s, id, ids, n, pool, &e) == 0, "submit: %s", e.msg);
        drain(s, &c, &id, 1);
        check_golden(i, &c.r[1]);
        CHECK_EQ_INT(c.r[1].n_prompt, n);
        CHECK_EQ_INT(c.r[1].n_gen, 0);
        CHECK_EQ_INT(c.r[1].n_tokens, 0);
        sched_free(s);
    }
    g_verbose = false;
}

/* prefill chunks of 7: mean sums over every chunk, last takes the final chunk's last row, cls the first's */
static void test_chunked(void)
{
    SETUP_OR_END();
    for (size_t i = 0; i < n_cases(); i++) {
        struct coll c;
        struct sched *s = make(&c, 2, 7);
        if (!s)
            return;
        int32_t ids[64];
        int pool;
        int n = case_prompt(i, ids, 64, &pool);
        struct err e;
        uint64_t id = 3;
        CHECK(submit_embed(s, id, ids, n, pool, &e) == 0, "submit: %s", e.msg);
        drain(s, &c, &id, 1);
        check_golden(i, &c.r[3]);
        sched_free(s);
    }
}

/* Each of the first nc golden cases alone on eng (one slot, nothing cached before or after), into alone[i];
 * checked against llama.cpp's vector within golden_tol unless it is negative. False when no scheduler. */
static bool each_alone(struct engine_ctx *eng, size_t nc, struct coll *alone, double golden_tol)
{
    for (size_t i = 0; i < nc; i++) {
        struct sched *s = make_on(eng, &alone[i], 1, 0);
        if (!s)
            return false;
        int32_t ids[64];
        int pool;
        int n = case_prompt(i, ids, 64, &pool);
        struct err e;
        uint64_t id = 1 + i;
        CHECK(submit_embed(s, id, ids, n, pool, &e) == 0, "submit: %s", e.msg);
        drain(s, &alone[i], &id, 1);
        if (golden_tol >= 0)
            check_golden_tol(i, &alone[i].r[1 + i], golden_tol);
        sched_free(s);
        engine_seq_truncate(eng, 0, 0); /* nothing cached for the batched run either */
    }
    return true;
}

/* All nc cases at once on s (4 slots) with a 20-token generation in the same steps (submitted and stepped
 * first, so the embeddings are prefilled next to its decode rows), against each case alone: the same
 * vectors within tol. Returns the largest difference. */
static double batched_vs_alone(struct sched *s, size_t nc, const struct coll *alone, struct coll *all, double tol,
                               const char *what)
{
    struct err e = {0};
    int32_t gp[5] = {1, 50, 60, 70, 80};
    struct sched_request g;
    sched_request_init(&g);
    g.id = 15;
    g.prompt = gp;
    g.n_prompt = 5;
    g.max_tokens = 20;
    CHECK(sched_submit(s, &g, &e) == 0, "submit generation: %s", e.msg);
    CHECK(sched_step(s, &e) >= 0, "step: %s", e.msg);
    uint64_t ids_all[9];
    for (size_t i = 0; i < nc; i++) {
        int32_t ids[64];
        int pool;
        int n = case_prompt(i, ids, 64, &pool);
        ids_all[i] = 1 + i;
        CHECK(submit_embed(s, ids_all[i], ids, n, pool, &e) == 0, "submit: %s", e.msg);
    }
    ids_all[nc] = 15;
    drain(s, all, ids_all, (int)nc + 1);
    CHECK(all->r[15].finish == SCHED_LENGTH && all->r[15].n_tokens == 20, "%s generation: finish %d, %d tokens", what,
          all->r[15].finish, all->r[15].n_tokens);
    double worst = 0;
    for (size_t i = 0; i < nc; i++) {
        const struct rec *a = &alone[i].r[1 + i], *b = &all->r[1 + i];
        CHECK(a->finish == SCHED_STOP && b->finish == SCHED_STOP, "%s case %zu: finish %d / %d (%s)", what, i, a->finish,
              b->finish, b->message);
        CHECK(a->n_embd > 0 && a->n_embd == b->n_embd, "%s case %zu: n_embd %d / %d", what, i, a->n_embd, b->n_embd);
        if (a->n_embd > 0 && a->n_embd == b->n_embd) {
            double m = max_abs(a->v, b->v, a->n_embd);
            worst = m > worst ? m : worst;
            CHECK(m <= tol, "%s case %zu: alone vs batched differ by %.3g > %.0e", what, i, m, tol);
        }
    }
    return worst;
}

/* every case alone, then all of them at once with a generation in the same steps: the same vectors */
static void test_batch_invariant(void)
{
    SETUP_OR_END();
    size_t nc = n_cases();
    if (nc > 8)
        nc = 8;
    static struct coll alone[8], all;
    if (!each_alone(g_eng, nc, alone, -1))
        return;
    struct sched *s = make(&all, 4, 0);
    if (!s)
        return;
    batched_vs_alone(s, nc, alone, &all, 1e-5, "cpu");
    sched_free(s);
}

/* the same input twice with last pooling: the second reuses the cached prefix, same vector */
static void test_prefix_reuse(void)
{
    SETUP_OR_END();
    struct coll c;
    struct sched *s = make(&c, 1, 0);
    if (!s)
        return;
    int32_t ids[64];
    int pool;
    int n = case_prompt(1, ids, 64, &pool);
    struct err e;
    uint64_t a = 1, b = 2;
    CHECK(submit_embed(s, a, ids, n, SCHED_POOL_LAST, &e) == 0, "submit: %s", e.msg);
    drain(s, &c, &a, 1);
    CHECK(submit_embed(s, b, ids, n, SCHED_POOL_LAST, &e) == 0, "submit: %s", e.msg);
    drain(s, &c, &b, 1);
    CHECK_EQ_INT(c.r[2].n_cached, n - 1);
    CHECK(c.r[1].n_embd > 0 && max_abs(c.r[1].v, c.r[2].v, c.r[1].n_embd) <= 1e-5, "reused prefix changed the vector");
    /* mean needs every position's hidden state: nothing reused */
    uint64_t m = 3;
    CHECK(submit_embed(s, m, ids, n, SCHED_POOL_MEAN, &e) == 0, "submit: %s", e.msg);
    drain(s, &c, &m, 1);
    CHECK_EQ_INT(c.r[3].n_cached, 0);
    sched_free(s);
}

/* refusals at submission; an input as long as the context is fine (nothing is generated after it) */
static void test_limits(void)
{
    SETUP_OR_END();
    struct coll c;
    struct sched *s = make(&c, 1, 16);
    if (!s)
        return;
    int32_t ids[65];
    for (int i = 0; i < 65; i++)
        ids[i] = 3 + (i * 37) % 1000;
    struct err e;
    CHECK_EQ_INT(submit_embed(s, 1, ids, 65, SCHED_POOL_MODEL, &e), ERR_RANGE);
    CHECK_EQ_INT(submit_embed(s, 1, ids, 0, SCHED_POOL_MODEL, &e), ERR_INVALID);
    CHECK_EQ_INT(submit_embed(s, 1, ids, 4, 4, &e), ERR_UNSUPPORTED);
    int32_t bad[2] = {5, 1 << 30};
    CHECK_EQ_INT(submit_embed(s, 1, bad, 2, SCHED_POOL_MODEL, &e), ERR_INVALID);
    uint64_t id = 2;
    CHECK(submit_embed(s, id, ids, 64, SCHED_POOL_MEAN, &e) == 0, "64 tokens in a 64-position context: %s", e.msg);
    drain(s, &c, &id, 1);
    CHECK(c.r[2].finish == SCHED_STOP && c.r[2].n_embd > 0, "finish %d: %s", c.r[2].finish, c.r[2].message);
    sched_free(s);
}

/* The GGUF's pooling_type decides: the same weights with pooling_type 1 (mean) give the golden's mean vector
 * when the request leaves pooling to the model; 2 cls; 0 (none) and an absent key the server default, last;
 * 4 (rank, a reranker) is refused. */
static void test_model_pooling(void)
{
    SETUP_OR_END();
    struct { int key; int want; const char *golden; } rows[] = {
        {1, SCHED_POOL_MEAN, "mean-40"}, {2, SCHED_POOL_CLS, "cls-12"}, {0, SCHED_POOL_LAST, "model-last-40"},
        {-1, SCHED_POOL_LAST, "model-last-8"}, {4, -1, NULL},
    };
    const char *py = system("python3 -c 'import numpy' >/dev/null 2>&1") == 0 ? "python3" : "/usr/bin/python3";
    for (size_t k = 0; k < sizeof rows / sizeof rows[0]; k++) {
        json_t *args = json_deep_copy(json_object_get(json_object_get(g_golden, "model"), "args"));
        if (rows[k].key >= 0)
            json_object_set_new(args, "pooling_type", json_integer(rows[k].key));
        else
            json_object_del(args, "pooling_type");
        char *a = json_dumps(args, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(args);
        char path[256], cmd[8192];
        snprintf(path, sizeof path, "/tmp/llm170-test-embed-pool-%d.gguf", (int)getpid());
        snprintf(cmd, sizeof cmd, "LLM170_SHARED='%s' %s tests/oracle/synth.py '%s' '%s' >/dev/null 2>&1",
                 check_shared_dir(), py, a, path);
        free(a);
        CHECK(system(cmd) == 0, "synth.py with pooling_type %d", rows[k].key);
        struct model *m = NULL;
        struct err e;
        int rc = model_load(&m, path, &e);
        unlink(path);
        CHECK(rc == 0, "model_load: %s", e.msg);
        if (rc)
            return;
        CHECK_EQ_INT(model_info(m)->pooling_type, rows[k].key);
        CHECK_EQ_INT(sched_pooling(m), rows[k].want);
        struct engine_params p;
        engine_params_default(&p);
        p.n_seq = 1;
        p.n_ctx = 64;
        p.n_batch = 64;
        p.n_threads = 2;
        p.kv_f32 = true;
        struct engine_ctx *eng = NULL;
        struct sched *s = NULL;
        static struct coll c;
        memset(&c, 0, sizeof c);
        struct sched_params sp = {.n_slots = 1, .n_queue = 4, .n_batch = 64};
        if (engine_create(&eng, m, &p, &e) || sched_create(&s, eng, m, &sp, on_event, &c, &e)) {
            CHECK(0, "engine/sched: %s", e.msg);
        } else {
            size_t gi = 0;
            for (size_t i = 0; rows[k].golden && i < n_cases(); i++)
                if (!strcmp(json_string_value(json_object_get(json_array_get(json_object_get(g_golden, "cases"), i),
                                                              "name")), rows[k].golden))
                    gi = i;
            int32_t ids[64];
            int pool;
            int n = case_prompt(gi, ids, 64, &pool);
            uint64_t id = 4;
            rc = submit_embed(s, id, ids, n, SCHED_POOL_MODEL, &e);
            if (rows[k].want < 0) {
                CHECK(rc == ERR_UNSUPPORTED && strstr(e.msg, "rank"), "rank: rc %d '%s'", rc, e.msg);
            } else {
                CHECK(rc == 0, "submit: %s", e.msg);
                for (int step = 0; !rc && step < 100 && !c.r[4].finish; step++)
                    sched_step(s, &e);
                check_golden(gi, &c.r[4]);
            }
        }
        sched_free(s);
        engine_free(eng);
        model_free(m);
    }
}

/* A NaN in the model (token 7's embedding row) ends the embedding that reads it with an error, not a NaN
 * vector; an embedding in the same steps that never reads it comes out as on the sound model. */
static void test_nonfinite(void)
{
    SETUP_OR_END();
    char path[256], cmd[8192];
    snprintf(path, sizeof path, "/tmp/llm170-test-embed-nan-%d.gguf", (int)getpid());
    char *a = json_dumps(json_object_get(json_object_get(g_golden, "model"), "args"), JSON_COMPACT | JSON_SORT_KEYS);
    const char *py = system("python3 -c 'import numpy' >/dev/null 2>&1") == 0 ? "python3" : "/usr/bin/python3";
    snprintf(cmd, sizeof cmd, "LLM170_SHARED='%s' %s tests/oracle/synth.py '%s' '%s' >/dev/null 2>&1",
             check_shared_dir(), py, a, path);
    free(a);
    CHECK(system(cmd) == 0, "synth.py");
    size_t len = 0;
    char *buf = check_read_file(path, &len);
    struct gguf *g = NULL;
    struct err e;
    bool ok = buf && gguf_open(&g, path, &e) == 0;
    const struct gguf_tensor *t = ok ? gguf_find_tensor(g, "token_embd.weight") : NULL;
    ok = t && t->type == 0 /* F32 */;
    if (ok) {
        size_t off = (size_t)((const char *)t->data - (const char *)g->parts[0].map) + 7 * (size_t)t->ne[0] * 4;
        for (int64_t i = 0; i < t->ne[0]; i++)
            memcpy(buf + off + (size_t)i * 4, &(float){NAN}, 4);
    }
    gguf_close(g);
    FILE *f = ok ? fopen(path, "wb") : NULL;
    ok = f && fwrite(buf, 1, len, f) == len;
    if (f)
        ok &= fclose(f) == 0;
    free(buf);
    struct model *m = NULL;
    ok = ok && model_load(&m, path, &e) == 0;
    unlink(path);
    CHECK(ok, "poisoned model written and loaded");
    if (!ok)
        return;
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 2;
    p.n_ctx = 64;
    p.n_batch = 64;
    p.n_threads = 2;
    p.kv_f32 = true;
    struct engine_ctx *eng = NULL;
    struct sched *s = NULL;
    static struct coll c;
    memset(&c, 0, sizeof c);
    struct sched_params sp = {.n_slots = 2, .n_queue = 4, .n_batch = 64};
    if (engine_create(&eng, m, &p, &e) || sched_create(&s, eng, m, &sp, on_event, &c, &e)) {
        CHECK(0, "engine/sched: %s", e.msg);
    } else {
        int32_t bad[4] = {5, 9, 7, 11}, ids[64];
        int pool;
        int n = case_prompt(2, ids, 64, &pool); /* mean-40: no token 7 in it */
        bool has7 = false;
        for (int i = 0; i < n; i++)
            has7 |= ids[i] == 7;
        CHECK(!has7, "the clean input reads token 7");
        CHECK(submit_embed(s, 1, bad, 4, SCHED_POOL_MEAN, &e) == 0, "submit: %s", e.msg);
        CHECK(submit_embed(s, 2, ids, n, pool, &e) == 0, "submit: %s", e.msg);
        for (int step = 0; step < 100 && !(c.r[1].finish && c.r[2].finish); step++)
            sched_step(s, &e);
        CHECK(c.r[1].finish == SCHED_ERROR && c.r[1].err_code == ERR_INTERNAL && strstr(c.r[1].message, "non-finite") &&
                  c.r[1].n_embd == 0,
              "poisoned: finish %d code %d '%s'", c.r[1].finish, c.r[1].err_code, c.r[1].message);
        check_golden(2, &c.r[2]);
    }
    sched_free(s);
    engine_free(eng);
    model_free(m);
}

/* The same cases on the hip backend (a GPU machine; elsewhere it skips with the runtime's reason): each
 * golden case alone against llama.cpp's vector, then all of them at once next to a generation (the
 * batch takes the GEMM where alone took GEMVs) against alone. */
static void test_hip(void)
{
    SETUP_OR_END();
    struct err e = {0};
    struct hip_rt *rt = NULL;
    if (hip_rt_open(&rt, &e))
        SKIP(e.msg);
    hip_rt_close(rt);
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 4;
    p.n_ctx = 64;
    p.n_batch = 128;
    p.kv_f32 = true;
    p.backend = BACKEND_HIP;
    struct engine_ctx *h = NULL;
    CHECK(engine_create(&h, g_model, &p, &e) == 0, "hip engine: %s", e.msg);
    if (!h)
        return;
    CHECK(engine_has_embd(h), "the hip engine has embeddings");
    size_t nc = n_cases() > 8 ? 8 : n_cases();
    static struct coll alone[8], all;
    g_verbose = true;
    each_alone(h, nc, alone, 1e-4);
    g_verbose = false;
    struct sched *s = make_on(h, &all, 4, 0);
    if (s)
        printf("#   hip: alone vs batched next to a generation, worst %.3g\n",
               batched_vs_alone(s, nc, alone, &all, 1e-4, "hip"));
    sched_free(s);
    engine_free(h);
}

int main(void)
{
    RUN(test_oracle);
    RUN(test_chunked);
    RUN(test_batch_invariant);
    RUN(test_prefix_reuse);
    RUN(test_limits);
    RUN(test_model_pooling);
    RUN(test_nonfinite);
    RUN(test_hip);
    engine_free(g_eng);
    model_free(g_model);
    json_decref(g_golden);
    CHECK_EXIT();
}
