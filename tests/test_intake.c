/* test_intake.c — what keeps a worker's request intake from stalling it:
 * the intake thread (worker/serve/intake.h) prepares requests while the
 * scheduler keeps stepping the running ones, hands them over in arrival
 * order, and a cancel reaches a request still being prepared; and
 * tok_count_min (the floor under a prompt's token count that lets an
 * over-long prompt be refused before tokenizing) never exceeds the real
 * count, on every vocabulary of the shared test data. Every wait is bounded. */
#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include "../worker/engine/engine.h"
#include "../worker/gguf/gguf.h"
#include "../worker/serve/intake.h"
#include "../worker/serve/sched.h"
#include "../worker/tok/tok.h"
#include "check.h"

/* ---------------------------------------------------------------- intake */

struct rec {
    int n, finish;
};

struct world {
    struct sched *s;
    struct rec r[8];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool gate_open, gate_entered, gate_left;
    uint64_t submitted[8], canceled[8];
    int n_submitted, n_canceled;
};

struct tjob {
    uint64_t id;
    int32_t prompt[8];
    int n;
    bool gated; /* prepare waits until the test opens the gate: a tokenization that takes as long as the test likes */
};

static void on_event(void *user, const struct sched_event *ev)
{
    struct world *w = user;
    struct rec *r = &w->r[ev->id % 8];
    r->n += ev->token >= 0;
    if (ev->finish)
        r->finish = ev->finish;
}

static void t_prepare(void *user, void *job)
{
    struct world *w = user;
    struct tjob *j = job;
    if (!j->gated)
        return;
    pthread_mutex_lock(&w->mu);
    w->gate_entered = true;
    pthread_cond_broadcast(&w->cv);
    while (!w->gate_open)
        pthread_cond_wait(&w->cv, &w->mu);
    w->gate_left = true;
    pthread_mutex_unlock(&w->mu);
}

static void t_submit(void *user, void *job)
{
    struct world *w = user;
    struct tjob *j = job;
    struct sched_request q;
    sched_request_init(&q);
    q.id = j->id;
    q.prompt = j->prompt;
    q.n_prompt = (size_t)j->n;
    q.max_tokens = 8;
    struct err e;
    if (sched_submit(w->s, &q, &e))
        printf("# submit %llu: %s\n", (unsigned long long)j->id, e.msg);
    pthread_mutex_lock(&w->mu);
    w->submitted[w->n_submitted++ % 8] = j->id;
    pthread_mutex_unlock(&w->mu);
}

static void t_canceled(void *user, void *job)
{
    struct world *w = user;
    pthread_mutex_lock(&w->mu);
    w->canceled[w->n_canceled++ % 8] = ((struct tjob *)job)->id;
    pthread_mutex_unlock(&w->mu);
}

static void t_free(void *user, void *job)
{
    (void)user;
    free(job);
}

static int cancel_in_sched(void *ctx, uint64_t id) { return sched_cancel(ctx, id); }

static struct tjob *tjob(uint64_t id, bool gated)
{
    struct tjob *j = calloc(1, sizeof *j);
    j->id = id;
    j->gated = gated;
    j->n = 4;
    for (int i = 0; i < 4; i++)
        j->prompt[i] = 1 + 100 * i + (int32_t)id;
    return j;
}

/* While request B is being prepared (held at the gate), the scheduler
 * steps request A on; C, which came after B, waits behind it; a cancel for
 * B reaches it in the intake, so B never enters the scheduler; a cancel for
 * C once submitted reaches the scheduler. */
static void prepare_off_the_step_loop(void)
{
    const char *sh = check_shared_dir();
    if (!sh)
        SKIP("stories260K.gguf not available (../shared/data)");
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh);
    struct model *m;
    struct err e;
    if (model_load(&m, path, &e))
        SKIP("stories260K.gguf not loadable");
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 4;
    p.n_ctx = 256;
    p.n_batch = 64;
    p.n_threads = 1;
    struct engine_ctx *eng = NULL;
    static struct world w;
    memset(&w, 0, sizeof w);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct sched_params sp = {.n_slots = 4, .n_queue = 4, .n_batch = 64};
    struct intake *in = NULL;
    static const struct intake_ops ops = {t_prepare, t_submit, t_canceled, t_free};
    if (engine_create(&eng, m, &p, &e) || sched_create(&w.s, eng, m, &sp, on_event, &w, &e) ||
        intake_create(&in, &ops, &w, &e)) {
        CHECK(0, "setup: %s", e.msg);
        goto out;
    }
    /* A runs */
    struct sched_request q;
    sched_request_init(&q);
    int32_t pa[3] = {1, 400, 300};
    q.id = 1;
    q.prompt = pa;
    q.n_prompt = 3;
    q.max_tokens = 40;
    q.ignore_eos = true;
    CHECK(sched_submit(w.s, &q, &e) == 0, "A: %s", e.msg);
    for (int i = 0; i < 2; i++)
        sched_step(w.s, &e);
    intake_push(in, 2, tjob(2, true));
    intake_push(in, 3, tjob(3, false));
    pthread_mutex_lock(&w.mu);
    for (int i = 0; i < 500 && !w.gate_entered; i++) { /* bounded: 5 s */
        pthread_mutex_unlock(&w.mu);
        usleep(10000);
        pthread_mutex_lock(&w.mu);
    }
    bool entered = w.gate_entered;
    pthread_mutex_unlock(&w.mu);
    CHECK(entered, "B's preparation started");
    int a0 = w.r[1].n;
    for (int i = 0; i < 10; i++)
        sched_step(w.s, &e);
    pthread_mutex_lock(&w.mu);
    bool b_preparing = w.gate_entered && !w.gate_left;
    int n_sub = w.n_submitted;
    pthread_mutex_unlock(&w.mu);
    CHECK(w.r[1].n - a0 == 10, "A got a token in each of 10 steps while B was being prepared (%d)", w.r[1].n - a0);
    CHECK(b_preparing, "B still in preparation");
    CHECK(n_sub == 0, "C did not overtake B (%d submitted)", n_sub);
    CHECK(intake_pending(in) == 2, "B and C in the intake (%d)", intake_pending(in));
    CHECK(intake_cancel(in, 2, cancel_in_sched, w.s) == 0, "cancel B while it is prepared");
    pthread_mutex_lock(&w.mu);
    w.gate_open = true;
    pthread_cond_broadcast(&w.cv);
    pthread_mutex_unlock(&w.mu);
    intake_flush(in);
    CHECK(w.n_canceled == 1 && w.canceled[0] == 2, "B ended canceled (%d)", w.n_canceled);
    CHECK(w.n_submitted == 1 && w.submitted[0] == 3, "only C reached the scheduler (%d)", w.n_submitted);
    CHECK(intake_cancel(in, 3, cancel_in_sched, w.s) == 0, "cancel C: found in the scheduler");
    CHECK(intake_cancel(in, 99, cancel_in_sched, w.s) == ERR_NOTFOUND, "an unknown id");
    for (int i = 0; i < 100 && !sched_idle(w.s); i++)
        sched_step(w.s, &e);
    CHECK(w.r[2].n == 0 && w.r[2].finish == 0, "the scheduler never saw B");
    CHECK(w.r[3].finish == SCHED_CANCEL, "C canceled in the scheduler (%d)", w.r[3].finish);
    CHECK(w.r[1].finish == SCHED_LENGTH && w.r[1].n == 40, "A finished (%d, %d tokens)", w.r[1].finish, w.r[1].n);
out:
    intake_free(in);
    sched_free(w.s);
    engine_free(eng);
    model_free(m);
}

/* ---------------------------------------------------------------- tok_count_min */

static const char *const extra_texts[] = {
    "", " ", "          ", "\n\n\n\t\t  \r\n", "a", "hello world", "\xff\xfe\xfd invalid \xc3",
    "<s></s><unk><|endoftext|><|im_start|>user\n<|im_end|>[MASK] <mask>  <s>  ",
    "a   <mask>   b   </s>   c", "ñandú 🦀 日本語のテキスト", "                                                  x",
};

static int check_vocab(const char *path, int *n_texts, int *n_bad, size_t *span)
{
    struct gguf *g;
    struct tok_vocab *v;
    struct err e;
    if (gguf_open(&g, path, &e))
        return -1;
    if (tok_load(&v, g, &e)) {
        gguf_close(g);
        return -1;
    }
    *span = tok_span_max(v);
    char inp[4300];
    snprintf(inp, sizeof inp, "%s.inp", path);
    char *text = check_read_file(inp, NULL);
    /* the vocab's own test inputs, then ones aimed at the bound's corners */
    const char *texts[256];
    size_t lens[256];
    int nt = 0;
    for (char *t = text; t && nt < 200;) {
        char *sep = strstr(t, "\n__ggml_vocab_test__\n");
        texts[nt] = t;
        lens[nt++] = sep ? (size_t)(sep - t) : strlen(t);
        if (!sep)
            break;
        t = sep + strlen("\n__ggml_vocab_test__\n");
    }
    for (size_t k = 0; k < sizeof extra_texts / sizeof *extra_texts; k++) {
        texts[nt] = extra_texts[k];
        lens[nt++] = strlen(extra_texts[k]);
    }
    for (int i = 0; i < nt; i++) {
        size_t floor = tok_count_min(v, texts[i], lens[i], *span);
        for (int sw = 0; sw < 4; sw++) {
            int32_t *ids;
            size_t n;
            if (tok_encode(v, texts[i], lens[i], sw & 1, sw & 2, &ids, &n, &e))
                continue;
            free(ids);
            if (floor > n) {
                (*n_bad)++;
                printf("#   %s: text %d: floor %zu > %zu tokens\n", path, i, floor, n);
            }
            (*n_texts)++;
        }
    }
    free(text);
    tok_free(v);
    gguf_close(g);
    return 0;
}

static void count_min_is_a_floor(void)
{
    const char *sh = check_shared_dir();
    if (!sh)
        SKIP("no shared test data (../shared/data)");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizer", sh);
    DIR *d = opendir(dir);
    if (!d)
        SKIP("no tokenizer vocabularies");
    int n_vocab = 0, n_bounded = 0, n_texts = 0, n_bad = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf"))
            continue;
        char path[8500];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        size_t span = 0;
        if (check_vocab(path, &n_texts, &n_bad, &span))
            continue;
        n_vocab++;
        n_bounded += span > 0;
    }
    closedir(d);
    char model[4300];
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", sh);
    size_t span = 0;
    if (check_vocab(model, &n_texts, &n_bad, &span) == 0) {
        n_vocab++;
        n_bounded += span > 0;
        CHECK(span > 0 && span < 64, "stories260K's vocabulary bounds a prompt (span %zu)", span);
    }
    printf("# %d vocabularies (%d give a bound), %d tokenizations, none below the floor\n", n_vocab, n_bounded,
           n_texts);
    CHECK(n_vocab >= 5 && n_texts > 100, "%d vocabularies, %d texts", n_vocab, n_texts);
    CHECK(n_bad == 0, "%d tokenizations below the floor", n_bad);
}

int main(void)
{
    RUN(prepare_off_the_step_loop);
    RUN(count_min_is_a_floor);
    CHECK_EXIT();
}
