/* fake_backend.h — a test double of gateway/backend.h for the HTTP-layer
 * tests (tests/test_gateway.c, tests/tools/fake_gateway.c). Include after
 * the gateway sources. It "generates" a predictable sequence:
 *   token i has id 100+i and text "w<i> " ("s<seed>_<i> " when seeded),
 *   logprob -0.25 and alternatives (-0.25, -1.5, -2.5);
 *   4 tokens unless max_tokens says otherwise; stop strings cut the text (DONE's stop_hit names the one);
 *   prompt/last message containing QUEUE_FULL → 429 at submit, TOO_LONG (or
 *   longer than 4000 bytes) → a context error event, SLOW → tokens at 20 ms each
 *  (500 unless max_tokens says otherwise) (for disconnect tests); FAIL_MID → an error event after 2
 *  tokens, CANCEL_MID → a cancel after 2 tokens that nobody asked for (as when the worker dies);
 *  model other than "" / "fake-model" → 404;
 *  TOOLCALL / TOOLCALL2 / TOOLBAD → a reply in Qwen's tool-call format (one call; text + two calls; a call
 *  with broken JSON), sent 5 bytes a token, finish "stop". An embedding job (proto_gen.embed) ends with DONE
 *  carrying an 8-value unit vector that depends on the prompt (same prompt, same vector), n_prompt = its
 *  length. */
#ifndef LLM170_TESTS_FAKE_BACKEND_H
#define LLM170_TESTS_FAKE_BACKEND_H

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>


static atomic_int fake_canceled;        /* jobs that ended by cancel */
static atomic_int fake_submitted;
static atomic_bool fake_ready = true;
static pthread_mutex_t fake_mu = PTHREAD_MUTEX_INITIALIZER;
static struct proto_gen fake_last;        /* scalar copy of the last request */
static char fake_last_bias[512];        /* "tok:bias,text:bias," */
static char fake_last_msgs[512];        /* "role:content|" */
static char fake_last_tool[128];        /* the last request's tool_name ("" none) */
static char fake_last_calls[512];       /* the messages' tool calls "id=name(args);" and results "<-id;" */
static char fake_last_tools[512];       /* the tools as compact JSON ("" none) */

/* Scripted replies: a model answering with tool calls in Qwen's format. */
static const char *fake_tool_script(const char *prompt)
{
    if (strstr(prompt, "TOOLCALL2"))
        return "I will check both.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
               "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>";
    if (strstr(prompt, "TOOLCALL"))
        return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    if (strstr(prompt, "TOOLBAD"))
        return "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city}}\n</tool_call>";
    return NULL;
}

struct gw_job {
    gw_event_fn fn;
    void *user;
    atomic_bool cancel;
    pthread_mutex_t mu;
    bool finished, released;
    char prompt[256];
    int max_tokens;
    uint32_t seed;
    bool seeded, slow, long_prompt, embed;
    int logprobs;
    char stop[4][32];
    int n_stop;
};

static void fake_job_free(struct gw_job *j)
{
    pthread_mutex_destroy(&j->mu);
    free(j);
}

static void *fake_job_main(void *arg)
{
    struct gw_job *j = arg;
    if (strstr(j->prompt, "TOO_LONG") || j->long_prompt) {
        struct gw_event ev = {.kind = GW_EV_ERROR, .err_code = ERR_RANGE,
                              .err_msg = "the prompt (900 tokens) does not fit the context (64)"};
        j->fn(j->user, &ev);
        goto out;
    }
    if (j->embed) {
        float v[8];
        double ss = 0;
        size_t h = 5381;
        for (const char *p = j->prompt; *p; p++)
            h = h * 33 + (unsigned char)*p;
        for (int k = 0; k < 8; k++) {
            v[k] = (float)((h >> (3 * k)) % 17) - 8.0f;
            ss += (double)v[k] * v[k];
        }
        for (int k = 0; k < 8; k++)
            v[k] = ss > 0 ? (float)(v[k] / sqrt(ss)) : 0.0f;
        struct gw_event ev = {.kind = GW_EV_DONE, .finish = "stop", .n_prompt = (int32_t)strlen(j->prompt),
                              .embd = v, .n_embd = 8};
        j->fn(j->user, &ev);
        goto out;
    }
    const char *script = fake_tool_script(j->prompt);
    if (script) {
        size_t len = strlen(script), k = 0;
        int n = 0;
        for (; k < len; k += 5, n++) {
            char piece[8];
            snprintf(piece, sizeof piece, "%.5s", script + k);
            struct gw_event ev = {.kind = GW_EV_TOKEN, .token = 100 + n, .text = piece};
            j->fn(j->user, &ev);
        }
        struct gw_event ev = {.kind = GW_EV_DONE, .finish = "stop", .n_prompt = 5, .n_gen = n};
        j->fn(j->user, &ev);
        goto out;
    }
    char text[8192] = "";
    int n = 0;
    bool stopped = false, canceled = false;
    int stop_hit = 0;
    for (int i = 0; i < j->max_tokens; i++) {
        if (i == 2 && (strstr(j->prompt, "FAIL_MID") || strstr(j->prompt, "CANCEL_MID"))) {
            bool c = strstr(j->prompt, "CANCEL_MID") != NULL;
            usleep(20000); /* the first chunks reach the client as a started stream */
            struct gw_event ev = {.kind = GW_EV_ERROR, .err_code = c ? ERR_CANCELED : ERR_INTERNAL,
                                  .err_msg = c ? "canceled" : "the worker crashed"};
            j->fn(j->user, &ev);
            goto out;
        }
        if (atomic_load(&j->cancel)) {
            canceled = true;
            break;
        }
        if (j->slow)
            usleep(20000);
        char piece[32];
        if (j->seeded)
            snprintf(piece, sizeof piece, "s%u_%d ", j->seed, i);
        else
            snprintf(piece, sizeof piece, "w%d ", i);
        size_t before = strlen(text);
        strncat(text, piece, sizeof text - before - 1);
        n++;
        /* stop strings: cut before the match and never send it */
        size_t cut = (size_t)-1;
        for (int s = 0; s < j->n_stop; s++) {
            char *hit = strstr(text, j->stop[s]);
            if (hit && (size_t)(hit - text) < cut) {
                cut = (size_t)(hit - text);
                stop_hit = s + 1;
            }
        }
        char released[64];
        if (cut != (size_t)-1) {
            snprintf(released, sizeof released, "%.*s", (int)(cut > before ? cut - before : 0), text + before);
            stopped = true;
        } else {
            snprintf(released, sizeof released, "%s", piece);
        }
        struct gw_top top[3] = {{100 + i, -0.25f, "best"}, {7, -1.5f, "alt"}, {8, -2.5f, "\xc3\xa9"}};
        struct gw_event ev = {.kind = GW_EV_TOKEN, .token = 100 + i, .text = released, .has_logprob = true,
                              .logprob = -0.25f, .top = top, .n_top = j->logprobs > 3 ? 3 : (size_t)(j->logprobs > 0 ? j->logprobs : 0),
                              .n_prompt = i == 0 ? 5 : 0}; /* as the worker's first token says the prompt's length */
        j->fn(j->user, &ev);
        if (stopped)
            break;
    }
    if (canceled) {
        atomic_fetch_add(&fake_canceled, 1);
        struct gw_event ev = {.kind = GW_EV_ERROR, .err_code = ERR_CANCELED, .err_msg = "canceled"};
        j->fn(j->user, &ev);
    } else {
        struct gw_event ev = {.kind = GW_EV_DONE, .finish = stopped ? "stop" : "length", .n_prompt = 5, .n_gen = n,
                              .stop_hit = stopped ? stop_hit : 0};
        j->fn(j->user, &ev);
    }
out:
    pthread_mutex_lock(&j->mu);
    j->finished = true;
    bool rel = j->released;
    pthread_mutex_unlock(&j->mu);
    if (rel)
        fake_job_free(j);
    return NULL;
}

static int fake_submit(void *ctx, const struct proto_gen *g, gw_event_fn fn, void *user, struct gw_job **out,
                       struct err *e)
{
    (void)ctx;
    atomic_fetch_add(&fake_submitted, 1);
    if (g->model && *g->model && strcmp(g->model, "fake-model"))
        return err_set(e, ERR_NOTFOUND, "model '%s' not found", g->model);
    if (!fake_ready)
        return err_set(e, ERR_IO, "no worker is ready");
    const char *p = g->prompt;
    if (g->messages) {
        json_t *last = json_array_get(g->messages, json_array_size(g->messages) - 1);
        p = json_string_value(json_object_get(last, "content"));
    }
    if (p && strstr(p, "QUEUE_FULL"))
        return err_set(e, ERR_FULL, "the queue is full (8 waiting)");
    pthread_mutex_lock(&fake_mu);
    fake_last = *g;
    fake_last_bias[0] = fake_last_msgs[0] = fake_last_calls[0] = fake_last_tools[0] = 0;
    char *tj = g->tools ? json_dumps(g->tools, JSON_COMPACT) : NULL;
    snprintf(fake_last_tools, sizeof fake_last_tools, "%s", tj ? tj : "");
    free(tj);
    snprintf(fake_last_tool, sizeof fake_last_tool, "%s", g->tool_name ? g->tool_name : "");
    for (size_t i = 0; i < g->n_logit_bias; i++) {
        char one[64];
        if (g->logit_bias[i].text)
            snprintf(one, sizeof one, "%s:%g,", g->logit_bias[i].text, g->logit_bias[i].bias);
        else
            snprintf(one, sizeof one, "%d:%g,", g->logit_bias[i].token, g->logit_bias[i].bias);
        strncat(fake_last_bias, one, sizeof fake_last_bias - strlen(fake_last_bias) - 1);
    }
    for (size_t i = 0; g->messages && i < json_array_size(g->messages); i++) {
        json_t *m = json_array_get(g->messages, i);
        char one[128];
        snprintf(one, sizeof one, "%s:%s|", json_string_value(json_object_get(m, "role")),
                 json_string_value(json_object_get(m, "content")));
        strncat(fake_last_msgs, one, sizeof fake_last_msgs - strlen(fake_last_msgs) - 1);
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(m, "tool_calls"), k, tc) {
            json_t *fn = json_object_get(tc, "function");
            snprintf(one, sizeof one, "%s=%s(%s);", json_string_value(json_object_get(tc, "id")),
                     json_string_value(json_object_get(fn, "name")), json_string_value(json_object_get(fn, "arguments")));
            strncat(fake_last_calls, one, sizeof fake_last_calls - strlen(fake_last_calls) - 1);
        }
        if (json_is_string(json_object_get(m, "tool_call_id"))) {
            snprintf(one, sizeof one, "<-%s;", json_string_value(json_object_get(m, "tool_call_id")));
            strncat(fake_last_calls, one, sizeof fake_last_calls - strlen(fake_last_calls) - 1);
        }
    }
    pthread_mutex_unlock(&fake_mu);
    struct gw_job *j = calloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    j->fn = fn;
    j->user = user;
    snprintf(j->prompt, sizeof j->prompt, "%s", p ? p : "");
    if (g->n_tokens)
        snprintf(j->prompt, sizeof j->prompt, "tokens:%zu", g->n_tokens);
    j->max_tokens = (g->set & PG_MAX_TOKENS) && g->max_tokens >= 0 ? g->max_tokens : 4;
    j->seeded = g->set & PG_SEED;
    j->seed = g->seed;
    j->long_prompt = p && strlen(p) > 4000;
    j->embed = g->embed;
    j->slow = strstr(j->prompt, "SLOW") != NULL;
    if (j->slow && !(g->set & PG_MAX_TOKENS))
        j->max_tokens = 500;
    if (j->max_tokens > 100)
        j->slow = true;
    j->logprobs = g->logprobs;
    for (size_t i = 0; i < g->n_stop && i < 4; i++)
        snprintf(j->stop[j->n_stop++], sizeof j->stop[0], "%s", g->stop[i]);
    pthread_t th;
    pthread_create(&th, NULL, fake_job_main, j);
    pthread_detach(th);
    *out = j;
    return 0;
}

static void fake_cancel(void *ctx, struct gw_job *j)
{
    (void)ctx;
    atomic_store(&j->cancel, true);
}

static void fake_release(void *ctx, struct gw_job *j)
{
    (void)ctx;
    pthread_mutex_lock(&j->mu);
    j->released = true;
    bool fin = j->finished;
    pthread_mutex_unlock(&j->mu);
    if (fin)
        fake_job_free(j);
}

static int fake_status(void *ctx, struct gw_status *st, struct err *e)
{
    (void)ctx;
    (void)e;
    memset(st, 0, sizeof *st);
    st->ready = fake_ready;
    st->n_models = 1;
    snprintf(st->models[0], sizeof st->models[0], "fake-model");
    st->n_workers = 1;
    st->workers[0] = (struct gw_worker_status){.device = "cpu", .backend = "cpu", .state = "ready",
                                               .model = "fake-model", .idx = 0, .slots = 4, .active = 1,
                                               .queued = 2, .n_ctx = 64, .mem = 12345};
    st->active = 1;
    st->queued = 2;
    return 0;
}

static int fake_tokenize(void *ctx, const char *model, const char *text, bool add_special, bool parse_special,
                         int32_t **ids, size_t *n, struct err *e)
{
    (void)ctx;
    (void)model;
    (void)parse_special;
    (void)e;
    size_t l = strlen(text), k = 0;
    *ids = malloc((l + 2) * sizeof **ids);
    if (add_special)
        (*ids)[k++] = 1;
    for (size_t i = 0; i < l; i++)
        (*ids)[k++] = (unsigned char)text[i];
    *n = k;
    return 0;
}

static int fake_detokenize(void *ctx, const char *model, const int32_t *ids, size_t n, char **text, struct err *e)
{
    (void)ctx;
    (void)model;
    *text = malloc(n + 1);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 1 || ids[i] > 255) {
            free(*text);
            return err_set(e, ERR_INVALID, "token id %d is outside the vocabulary", ids[i]);
        }
        (*text)[i] = (char)ids[i];
    }
    (*text)[n] = 0;
    return 0;
}

static const struct gw_backend fake = {NULL, fake_status, fake_tokenize, fake_detokenize,
                                       fake_submit, fake_cancel, fake_release};

#endif
