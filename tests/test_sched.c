/* test_sched.c — the continuous-batching scheduler in-process on the real
 * stories260K model: greedy output equals llama.cpp's (tests/golden), batch
 * invariance (16 concurrent requests = each alone), cancellation frees its
 * slot, bounded queue, prompt too long, prefix reuse, stop strings, length
 * limit, logprobs. Every loop is bounded by a step count. */
#include <jansson.h>
#include <locale.h>
#include <math.h>
#include <wchar.h>
#include <unistd.h>

#include "../worker/engine/engine.h"
#include "../worker/gguf/gguf.h"
#include "../worker/serve/sched.h"
#include "../worker/tok/tok.h"
#include "check.h"

#define MAXR 64
#define MAXT 512

struct rec {
    uint64_t id;
    int32_t toks[MAXT];
    int n;
    char text[8192];
    size_t n_text;
    int finish;
    int n_cached, n_prompt, n_gen;
    int stop_hit;
    int err_code;
    char message[128];
    int n_logprob_events;
    bool logprob_ok;
    int n_top_seen, n_top_byte, n_top_bad_utf8;
};

static struct model *g_model;

struct coll {
    struct rec r[MAXR];
};

static void on_event(void *user, const struct sched_event *ev)
{
    struct coll *c = user;
    struct rec *r = &c->r[ev->id % MAXR];
    r->id = ev->id;
    if (ev->token >= 0 && r->n < MAXT)
        r->toks[r->n++] = ev->token;
    if (ev->n_text && r->n_text + ev->n_text < sizeof r->text) {
        memcpy(r->text + r->n_text, ev->text, ev->n_text);
        r->n_text += ev->n_text;
        r->text[r->n_text] = 0;
    }
    for (int i = 0; i < ev->n_top; i++) {
        r->n_top_seen++;
        r->n_top_byte += tok_attr_of(model_vocab(g_model), ev->top[i].token) == TOK_BYTE;
        r->n_top_bad_utf8 += mbstowcs(NULL, ev->top[i].text, 0) == (size_t)-1;
    }
    if (ev->has_logprob) {
        r->n_logprob_events++;
        bool ok = ev->logprob <= 0 && ev->n_top >= 1;
        for (int i = 0; i + 1 < ev->n_top; i++)
            ok &= ev->top[i].logprob >= ev->top[i + 1].logprob;
        /* greedy: the chosen token is the most probable one */
        ok &= ev->n_top >= 1 && ev->top[0].token == ev->token && fabsf(ev->top[0].logprob - ev->logprob) < 1e-5f;
        if (r->n_logprob_events == 1)
            r->logprob_ok = ok;
        else
            r->logprob_ok &= ok;
    }
    if (ev->finish) {
        r->finish = ev->finish;
        r->n_cached = ev->n_cached;
        r->n_prompt = ev->n_prompt;
        r->n_gen = ev->n_gen;
        r->stop_hit = ev->stop_hit;
        r->err_code = ev->err_code;
        snprintf(r->message, sizeof r->message, "%s", ev->message ? ev->message : "");
    }
}

static bool g_utf8_locale;
static struct engine_ctx *g_eng;
static json_t *g_golden;
static char g_golden_why[256]; /* why tests/golden/greedy_stories260K.json did not load */

/* The shared model and one engine for every case: 1 ready, 0 no shared data
 * (the case skips), -1 the model or engine failed (a failed check: broken). */
static int setup(void)
{
    if (g_eng)
        return 1;
    const char *sh = check_shared_dir();
    if (!sh)
        return 0;
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh);
    struct err e;
    if (!g_model && model_load(&g_model, path, &e)) {
        CHECK(0, "model_load %s: %s", path, e.msg);
        return -1;
    }
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 16;
    p.n_ctx = 256;
    p.n_batch = 256;
    p.n_threads = 2;
    if (engine_create(&g_eng, g_model, &p, &e)) {
        CHECK(0, "engine_create: %s", e.msg);
        return -1;
    }
    json_error_t je;
    g_golden = json_load_file("tests/golden/greedy_stories260K.json", 0, &je);
    if (!g_golden)
        snprintf(g_golden_why, sizeof g_golden_why, "%s", je.text);
    return 1;
}

/* At the top of each case: skip without the shared data, end (failed) when it did not load. */
#define SETUP_OR_END()                                                   \
    do {                                                                 \
        int setup_rc_ = setup();                                         \
        if (setup_rc_ == 0)                                              \
            SKIP("stories260K.gguf not available (../shared/data)");     \
        if (setup_rc_ < 0)                                               \
            return;                                                      \
    } while (0)

static struct sched *make(struct coll *c, int slots, int queue, int chunk)
{
    struct sched_params sp = {.n_slots = slots, .n_queue = queue, .n_batch = 256, .prefill_chunk = chunk};
    struct sched *s;
    struct err e;
    memset(c, 0, sizeof *c);
    /* a scheduler that cannot be made fails the case (callers end it on NULL) */
    int rc = sched_create(&s, g_eng, g_model, &sp, on_event, c, &e);
    CHECK(rc == 0, "sched_create(%d slots, queue %d, chunk %d): %s", slots, queue, chunk, e.msg);
    if (rc)
        return NULL;
    return s;
}

/* Step until idle (bounded). */
static int run_all(struct sched *s, int max_steps)
{
    struct err e;
    int steps = 0;
    while (!sched_idle(s) && steps < max_steps) {
        if (sched_step(s, &e) < 0)
            printf("# step: %s\n", e.msg);
        steps++;
    }
    return steps;
}

static int encode(const char *text, int32_t *out, int cap)
{
    int32_t *ids;
    size_t n;
    struct err e;
    if (tok_encode(model_vocab(g_model), text, strlen(text), true, true, &ids, &n, &e))
        return 0;
    if ((int)n > cap)
        n = (size_t)cap;
    memcpy(out, ids, n * sizeof *ids);
    free(ids);
    return (int)n;
}

static const char *extra_prompts[6] = {
    "The girl", "Once upon a time, there was", "He ran to the", "A big fish", "They played", "Lily saw a",
};

/* prompt i of 16: the 10 golden prompts, then 6 more */
static int prompt_of(int i, int32_t *ids, int cap)
{
    if (i < 10 && g_golden) {
        json_t *p = json_object_get(json_array_get(json_object_get(g_golden, "cases"), (size_t)i), "prompt");
        int n = 0;
        for (size_t k = 0; k < json_array_size(p) && n < cap; k++)
            ids[n++] = (int32_t)json_integer_value(json_array_get(p, k));
        return n;
    }
    return encode(extra_prompts[i % 6], ids, cap);
}

static bool near_tie(double top1, double gap) { return gap / (fabs(top1) > 1 ? fabs(top1) : 1) < 1e-2; }

static void batch_invariance_and_golden(void)
{
    SETUP_OR_END();
    /* the golden is committed next to this test: without it the comparison below cannot run */
    CHECK(g_golden != NULL, "tests/golden/greedy_stories260K.json: %s (run from the repository root)", g_golden_why);
    const int N = 16, NPRED = 48;
    static struct rec alone[16];
    struct coll *c = calloc(1, sizeof *c);
    /* each alone, no prefix reuse: the reference */
    for (int i = 0; i < N; i++) {
        struct sched *s = make(c, 16, 16, 0);
        if (!s)
            break;
        int32_t ids[64];
        struct sched_request q;
        sched_request_init(&q);
        q.id = (uint64_t)i + 1;
        q.prompt = ids;
        q.n_prompt = (size_t)prompt_of(i, ids, 64);
        q.max_tokens = NPRED;
        q.cache_prompt = false;
        struct err e;
        CHECK(sched_submit(s, &q, &e) == 0, "submit: %s", e.msg);
        run_all(s, 500);
        alone[i] = c->r[(i + 1) % MAXR];
        CHECK_EQ_INT(alone[i].finish, SCHED_LENGTH);
        CHECK_EQ_INT(alone[i].n, NPRED);
        sched_free(s);
    }
    /* all 16 together, small prefill chunks so prefill and decode interleave */
    struct sched *s = make(c, 16, 16, 24);
    int steps = 0;
    if (s) {
        for (int i = 0; i < N; i++) {
            int32_t ids[64];
            struct sched_request q;
            sched_request_init(&q);
            q.id = (uint64_t)i + 1;
            q.prompt = ids;
            q.n_prompt = (size_t)prompt_of(i, ids, 64);
            q.max_tokens = NPRED;
            struct err e;
            CHECK(sched_submit(s, &q, &e) == 0, "submit %d: %s", i, e.msg);
            if (i == 7)
                sched_step(s, &e); /* some arrive while others already run */
        }
        steps = run_all(s, 2000);
        sched_free(s);
    }
    int same = 0;
    for (int i = 0; i < N; i++) {
        struct rec *r = &c->r[(i + 1) % MAXR];
        bool eq = r->n == alone[i].n && !memcmp(r->toks, alone[i].toks, sizeof(int32_t) * (size_t)r->n) &&
                  !strcmp(r->text, alone[i].text);
        CHECK(eq, "request %d: batched output differs from alone ('%.40s' vs '%.40s')", i, r->text, alone[i].text);
        same += eq;
    }
    printf("# batch invariance: %d/16 identical (%d tokens each, %d steps together)\n", same, NPRED, steps);
    CHECK(steps < 16 * NPRED / 2, "requests were batched (%d steps)", steps);
    /* the 10 golden prompts against llama.cpp's greedy ids (f16 KV) until a near-tie */
    int compared = 0, expected = 0;
    for (int i = 0; g_golden && i < 10; i++) {
        json_t *cs = json_array_get(json_object_get(g_golden, "cases"), (size_t)i);
        json_t *want = json_object_get(cs, "ids_kv_f16"), *top1 = json_object_get(cs, "top1_kv_f16"),
               *gap = json_object_get(cs, "gap_kv_f16");
        struct rec *r = &c->r[(i + 1) % MAXR];
        for (int k = 0; k < NPRED && k < (int)json_array_size(want); k++) { /* comparable steps */
            expected++;
            if (near_tie(json_number_value(json_array_get(top1, (size_t)k)),
                         json_number_value(json_array_get(gap, (size_t)k))))
                break;
        }
        for (int k = 0; k < r->n && k < (int)json_array_size(want); k++) {
            if (r->toks[k] != (int32_t)json_integer_value(json_array_get(want, (size_t)k))) {
                CHECK(0, "golden %d step %d: %d vs llama.cpp %d", i, k, r->toks[k],
                      (int)json_integer_value(json_array_get(want, (size_t)k)));
                break;
            }
            compared++;
            if (near_tie(json_number_value(json_array_get(top1, (size_t)k)),
                         json_number_value(json_array_get(gap, (size_t)k))))
                break;
        }
    }
    printf("# %d/%d batched greedy tokens equal to llama.cpp's (up to each case's first near-tie)\n", compared,
           expected);
    CHECK(compared == expected && expected > 100, "compared %d of %d tokens", compared, expected);
    free(c);
}

static void cancel_frees_slot_and_queue_full(void)
{
    SETUP_OR_END();
    struct coll *c = calloc(1, sizeof *c);
    struct sched *s = make(c, 2, 1, 0);
    if (!s) {
        free(c);
        return;
    }
    int32_t ids[64];
    int n = prompt_of(0, ids, 64);
    struct sched_request q;
    sched_request_init(&q);
    q.prompt = ids;
    q.n_prompt = (size_t)n;
    q.max_tokens = 200;
    q.ignore_eos = true;
    struct err e;
    for (int i = 1; i <= 3; i++) {
        q.id = (uint64_t)i;
        CHECK(sched_submit(s, &q, &e) == 0, "submit %d: %s", i, e.msg);
    }
    q.id = 4;
    int rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_FULL, "4th: %d (%s)", rc, e.msg);
    for (int k = 0; k < 5; k++)
        sched_step(s, &e);
    int active, queued;
    sched_stats(s, &active, &queued);
    CHECK(active == 2 && queued == 1, "active %d queued %d", active, queued);
    CHECK_EQ_INT(c->r[3].n, 0);
    CHECK_EQ_INT(sched_cancel(s, 1), 0);
    CHECK_EQ_INT(sched_cancel(s, 99), ERR_NOTFOUND);
    for (int k = 0; k < 5; k++)
        sched_step(s, &e);
    CHECK_EQ_INT(c->r[1].finish, SCHED_CANCEL);
    CHECK(c->r[1].n >= 4 && c->r[1].n <= 6, "canceled after %d tokens", c->r[1].n);
    CHECK(c->r[3].n >= 3, "the queued request took the freed slot (%d tokens)", c->r[3].n);
    /* a queued request can be canceled too */
    q.id = 5;
    CHECK(sched_submit(s, &q, &e) == 0, "submit 5");
    CHECK_EQ_INT(sched_cancel(s, 5), 0);
    sched_step(s, &e);
    CHECK_EQ_INT(c->r[5].finish, SCHED_CANCEL);
    CHECK_EQ_INT(c->r[5].n, 0);
    sched_cancel(s, 2);
    sched_cancel(s, 3);
    run_all(s, 10);
    CHECK(sched_idle(s), "idle after canceling all");
    sched_close(s);
    rc = sched_submit(s, &q, &e);
    CHECK_EQ_INT(rc, ERR_CANCELED);
    sched_free(s);
    free(c);
}

static void bad_requests(void)
{
    SETUP_OR_END();
    struct coll *c = calloc(1, sizeof *c);
    struct sched *s = make(c, 2, 2, 0);
    if (!s) {
        free(c);
        return;
    }
    static int32_t big[300];
    for (int i = 0; i < 300; i++)
        big[i] = 300 + i % 100;
    struct sched_request q;
    sched_request_init(&q);
    q.id = 1;
    q.prompt = big;
    q.n_prompt = 256; /* = n_ctx: no room left to generate */
    struct err e;
    int rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_RANGE && strstr(e.msg, "context"), "too long: %d %s", rc, e.msg);
    q.n_prompt = 0;
    CHECK_EQ_INT(sched_submit(s, &q, &e), ERR_INVALID);
    big[3] = 100000;
    q.n_prompt = 10;
    rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "vocabulary"), "bad id: %s", e.msg);
    big[3] = 303;
    q.smp.repeat_penalty = -1.0f;
    rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_INVALID, "bad sampler parameters refused: %d %s", rc, e.msg);
    /* longest prompt that fits: generation stops at the context end */
    sched_request_init(&q);
    q.id = 2;
    q.prompt = big;
    q.n_prompt = 250;
    q.ignore_eos = true;
    CHECK(sched_submit(s, &q, &e) == 0, "250 tokens: %s", e.msg);
    run_all(s, 100);
    CHECK_EQ_INT(c->r[2].finish, SCHED_LENGTH);
    /* positions 250..255 take 6 decoded tokens, whose logits give a 7th */
    CHECK(c->r[2].n_gen == 7, "generated to the context end (%d)", c->r[2].n_gen);
    sched_free(s);
    free(c);
}

static void prefix_reuse_stop_logprobs(void)
{
    SETUP_OR_END();
    struct coll *c = calloc(1, sizeof *c);
    struct sched *s = make(c, 4, 4, 0);
    if (!s) {
        free(c);
        return;
    }
    int32_t ids[64];
    int n = prompt_of(1, ids, 64);
    struct sched_request q;
    sched_request_init(&q);
    q.id = 1;
    q.prompt = ids;
    q.n_prompt = (size_t)n;
    q.max_tokens = 40;
    struct err e;
    CHECK(sched_submit(s, &q, &e) == 0, "first");
    run_all(s, 200);
    CHECK_EQ_INT(c->r[1].n_cached, 0);
    /* the same prompt again: all but its last token come from the cache */
    q.id = 2;
    q.n_probs = 3;
    CHECK(sched_submit(s, &q, &e) == 0, "second");
    run_all(s, 200);
    CHECK_EQ_INT(c->r[2].n_cached, n - 1);
    CHECK(!strcmp(c->r[1].text, c->r[2].text), "same text with a reused prefix");
    CHECK_EQ_INT(c->r[2].n_logprob_events, 40);
    CHECK(c->r[2].logprob_ok, "logprobs: chosen = top[0], descending, <= 0");
    /* 32 alternatives a token: byte tokens among them still come as valid UTF-8 text */
    q.id = 5;
    q.n_probs = 32;
    q.max_tokens = 20;
    CHECK(sched_submit(s, &q, &e) == 0, "n_probs 32");
    run_all(s, 200);
    printf("# %d top alternatives, %d of them byte tokens, %d not valid UTF-8\n", c->r[5].n_top_seen,
           c->r[5].n_top_byte, c->r[5].n_top_bad_utf8);
    CHECK_EQ_INT(c->r[5].n_top_seen, 20 * 32);
    if (g_utf8_locale)
        CHECK_EQ_INT(c->r[5].n_top_bad_utf8, 0);
    else
        printf("# no C.UTF-8 locale: the alternatives' UTF-8 validity is not checked\n");
    q.n_probs = 3;
    q.max_tokens = 40;
    /* a prompt extending the first one's prompt+output reuses through a copy into another slot */
    int32_t ext[128];
    memcpy(ext, ids, sizeof(int32_t) * (size_t)n);
    memcpy(ext + n, c->r[1].toks, sizeof(int32_t) * 10);
    q.id = 3;
    q.prompt = ext;
    q.n_prompt = (size_t)n + 10;
    q.n_probs = -1;
    q.max_tokens = 20;
    CHECK(sched_submit(s, &q, &e) == 0, "third");
    run_all(s, 200);
    CHECK_EQ_INT(c->r[3].n_cached, n + 9);
    CHECK(c->r[3].n == 20 && !memcmp(c->r[3].toks, c->r[1].toks + 10, 20 * sizeof(int32_t)),
          "continuation equals the first run's tokens 10..29");
    /* stop string: a piece from the middle of the known output */
    const char *full = c->r[1].text;
    size_t L = strlen(full);
    CHECK(L > 30, "first output long enough (%zu)", L);
    if (L > 30) {
        char stop[8];
        memcpy(stop, full + 20, 5);
        stop[5] = 0;
        const char *first = strstr(full, stop);
        const char *stops[] = {"\x01 never", stop};
        q.id = 4;
        q.prompt = ids;
        q.n_prompt = (size_t)n;
        q.max_tokens = 40;
        q.stop = stops;
        q.n_stop = 2;
        CHECK(sched_submit(s, &q, &e) == 0, "fourth");
        run_all(s, 200);
        CHECK_EQ_INT(c->r[4].finish, SCHED_STOP);
        CHECK(strlen(c->r[4].text) == (size_t)(first - full) && !strncmp(c->r[4].text, full, (size_t)(first - full)),
              "cut before the stop string '%s': '%s'", stop, c->r[4].text);
        CHECK(c->r[4].stop_hit == 2, "stop_hit %d names the second stop string", c->r[4].stop_hit);
        CHECK(c->r[1].stop_hit == 0, "no stop string, stop_hit %d", c->r[1].stop_hit);
    }
    sched_free(s);
    free(c);
}

/* Decode rows go first and prefill is sliced: a long prompt arriving while
 * another request decodes neither stalls it nor waits forever. */
static void decode_first_bounded_prefill(void)
{
    SETUP_OR_END();
    struct coll *c = calloc(1, sizeof *c);
    struct sched *s = make(c, 2, 2, 16);
    if (!s) {
        free(c);
        return;
    }
    int32_t ids[64];
    int n = prompt_of(0, ids, 64);
    struct sched_request q;
    sched_request_init(&q);
    q.id = 1;
    q.prompt = ids;
    q.n_prompt = (size_t)n;
    q.max_tokens = 100;
    q.ignore_eos = true;
    struct err e;
    CHECK(sched_submit(s, &q, &e) == 0, "A");
    for (int k = 0; k < 3; k++)
        sched_step(s, &e);
    static int32_t big[150];
    for (int i = 0; i < 150; i++)
        big[i] = 300 + (i * 7) % 150;
    q.id = 2;
    q.prompt = big;
    q.n_prompt = 150;
    q.max_tokens = 5;
    CHECK(sched_submit(s, &q, &e) == 0, "B");
    int a_before = c->r[1].n, steps_to_b = 0, a_stalls = 0;
    for (int k = 0; k < 30 && c->r[2].n == 0; k++) {
        int a = c->r[1].n;
        sched_step(s, &e);
        a_stalls += c->r[1].n != a + 1;
        steps_to_b++;
    }
    printf("# 150-token prompt prefilled in %d steps of <= 16 tokens; the decoding request got a token in each (%d stalls)\n",
           steps_to_b, a_stalls);
    CHECK(a_before >= 2, "A decoding before B arrives");
    CHECK_EQ_INT(a_stalls, 0);
    CHECK(steps_to_b == 10, "B's first token after ceil(150/16) = 10 steps, not %d", steps_to_b);
    sched_cancel(s, 1);
    run_all(s, 20);
    /* the counters a serving worker reports: both prompts evaluated whole (no cache yet), two fresh slots */
    struct sched_counters sc;
    sched_get_counters(s, &sc);
    CHECK(sc.admitted == 2 && sc.prefill_tokens == (uint64_t)n + 150 && sc.slot_gaps == 0,
          "counters: %llu admitted, %llu prompt tokens (want %d), %llu slot reuses", (unsigned long long)sc.admitted,
          (unsigned long long)sc.prefill_tokens, n + 150, (unsigned long long)sc.slot_gaps);
    CHECK(sc.steps >= 13 && sc.decode_rows >= (uint64_t)(a_before + steps_to_b), "%llu steps, %llu decode rows",
          (unsigned long long)sc.steps, (unsigned long long)sc.decode_rows);
    q.id = 3; /* takes a slot a finished request left: one empty-slot interval measured */
    q.max_tokens = 1;
    CHECK(sched_submit(s, &q, &e) == 0, "C");
    run_all(s, 20);
    sched_get_counters(s, &sc);
    CHECK(sc.admitted == 3 && sc.slot_gaps == 1 && sc.slot_gap_ns > 0, "C reused a slot (%llu gaps)",
          (unsigned long long)sc.slot_gaps);
    sched_free(s);
    free(c);
}

/* stories260K with token `poison`'s embedding row set to NaN, written to a
 * temporary file: a sequence whose prompt holds that token gets NaN logits,
 * every other sequence stays as it was. */
static struct model *poisoned_model(int32_t poison, char *path, size_t cap)
{
    const char *sh = check_shared_dir();
    char src[4200];
    snprintf(src, sizeof src, "%s/models/stories260K.gguf", sh);
    size_t len;
    char *buf = check_read_file(src, &len);
    struct gguf *g;
    struct err e;
    if (!buf || gguf_open(&g, src, &e)) {
        free(buf);
        return NULL;
    }
    const struct gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    bool ok = t && t->type == 0 /* F32 */ && poison < t->ne[1];
    if (ok) {
        size_t off = (size_t)((const char *)t->data - (const char *)g->parts[0].map) +
                     (size_t)poison * (size_t)t->ne[0] * sizeof(float);
        for (int64_t i = 0; i < t->ne[0]; i++) {
            float nan = NAN;
            memcpy(buf + off + (size_t)i * sizeof nan, &nan, sizeof nan);
        }
    }
    gguf_close(g);
    snprintf(path, cap, "/tmp/llm170-test-sched-nan-%d.gguf", (int)getpid());
    FILE *f = ok ? fopen(path, "wb") : NULL;
    ok = f && fwrite(buf, 1, len, f) == len;
    if (f)
        ok &= fclose(f) == 0;
    free(buf);
    struct model *m = NULL;
    if (ok && model_load(&m, path, &e))
        printf("# %s\n", e.msg);
    return m;
}

/* A model whose logits turn NaN for one sequence ends that request with an
 * error, and the other sequences of the same steps finish as on a sound model. */
static void nonfinite_logits_end_one_request(void)
{
    if (!setup())
        SKIP("stories260K.gguf not available (../shared/data)");
    int32_t pa[64], pb[2];
    int na = encode("Once upon a time, there was", pa, 64), nb = 2;
    /* what A gives on the sound model, and a token it never sees to poison */
    struct coll *ref = calloc(1, sizeof *ref), *c = calloc(1, sizeof *c);
    struct sched *s0 = make(ref, 4, 4, 0);
    struct sched_request q;
    sched_request_init(&q);
    q.id = 1;
    q.prompt = pa;
    q.n_prompt = (size_t)na;
    q.max_tokens = 12;
    q.ignore_eos = true;
    struct err e;
    CHECK(s0 && sched_submit(s0, &q, &e) == 0, "reference: %s", e.msg);
    if (s0)
        run_all(s0, 100);
    sched_free(s0);
    int32_t poison = 300;
    for (bool seen = true; seen && poison < 500; poison += seen) {
        seen = false;
        for (int i = 0; i < na; i++)
            seen |= pa[i] == poison;
        for (int i = 0; i < ref->r[1].n; i++)
            seen |= ref->r[1].toks[i] == poison;
    }
    pb[0] = pa[0]; /* BOS */
    pb[1] = poison;
    char path[256];
    struct model *m = poisoned_model(poison, path, sizeof path);
    CHECK(m != NULL, "poisoned model written and loaded");
    if (!m) {
        unlink(path);
        free(ref);
        free(c);
        return;
    }
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 4;
    p.n_ctx = 256;
    p.n_batch = 256;
    p.n_threads = 2;
    struct engine_ctx *eng = NULL;
    CHECK(engine_create(&eng, m, &p, &e) == 0, "engine: %s", e.msg);
    q.id = 1;
    struct sched_params sp = {.n_slots = 4, .n_queue = 4, .n_batch = 256, .prefill_chunk = 0};
    struct sched *s = NULL;
    if (eng && sched_create(&s, eng, m, &sp, on_event, c, &e) == 0) {
        CHECK(sched_submit(s, &q, &e) == 0, "A: %s", e.msg);
        q.id = 2;
        q.prompt = pb;
        q.n_prompt = (size_t)nb;
        CHECK(sched_submit(s, &q, &e) == 0, "B: %s", e.msg);
        run_all(s, 100);
        CHECK(c->r[2].finish == SCHED_ERROR && c->r[2].err_code == ERR_INTERNAL,
              "B (NaN logits) ended with an error (finish %d, %d tokens)", c->r[2].finish, c->r[2].n);
        CHECK(strstr(c->r[2].message, "non-finite logits") != NULL, "B's message: '%s'", c->r[2].message);
        CHECK(c->r[2].n == 0, "B got no token (%d)", c->r[2].n);
        CHECK(c->r[1].finish == SCHED_LENGTH && c->r[1].n == 12 && ref->r[1].n == 12 &&
                  !memcmp(c->r[1].toks, ref->r[1].toks, sizeof(int32_t) * 12),
              "A finished as on the sound model (finish %d, %d tokens)", c->r[1].finish, c->r[1].n);
        /* the scheduler goes on serving after the error */
        q.id = 3;
        q.prompt = pa;
        q.n_prompt = (size_t)na;
        CHECK(sched_submit(s, &q, &e) == 0, "C: %s", e.msg);
        run_all(s, 100);
        CHECK(c->r[3].finish == SCHED_LENGTH && !memcmp(c->r[3].toks, ref->r[1].toks, sizeof(int32_t) * 12),
              "C after B's error finished as on the sound model (finish %d)", c->r[3].finish);
    }
    sched_free(s);
    engine_free(eng);
    model_free(m);
    unlink(path);
    free(ref);
    free(c);
}

int main(void)
{
    g_utf8_locale = setlocale(LC_CTYPE, "C.UTF-8") != NULL;
    RUN(batch_invariance_and_golden);
    RUN(cancel_frees_slot_and_queue_full);
    RUN(bad_requests);
    RUN(prefix_reuse_stop_logprobs);
    RUN(decode_first_bounded_prefill);
    RUN(nonfinite_logits_end_one_request);
    engine_free(g_eng);
    model_free(g_model);
    json_decref(g_golden);
    CHECK_EXIT();
}
