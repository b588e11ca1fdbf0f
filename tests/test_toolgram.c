/* test_toolgram.c — tool_choice "required" / a named function enforced by
 * constrained decoding (worker/serve/toolgram.h), end to end through the
 * scheduler: N requests sampled at temperature 1.0 on tiny models
 * (stories260K, random-weight qwen35-tiny and Llama-2-vocabulary models),
 * three tools whose parameters have nested objects, enums, arrays and
 * numbers, named and required choices, one call or parallel calls, in the
 * Hermes (Qwen), Mistral and Llama 3 frames. The prompt ends with the
 * call's prefilled start (tc_prefill) as the worker writes it; the reply
 * (prefill + text) is read with common/toolcall.c's parser of the family,
 * and every call's name and arguments are checked with the independent
 * validator of schema_valid.h. N is LLM170_TOOLGRAM_N (default 24 a model;
 * the acceptance run is 200). */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/toolcall.h"
#include "../worker/engine/engine.h"
#include "../worker/serve/gram.h"
#include "../worker/serve/sched.h"
#include "../worker/serve/toolgram.h"
#include "../worker/tok/tok.h"
#include "check.h"
#include "schema_valid.h"

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\",\"maxLength\":10},\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},"
    "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"unit\"],\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"book_flight\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"route\":{\"type\":\"object\",\"properties\":{\"from\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}$\"},"
    "\"to\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{3}$\"}},\"required\":[\"from\",\"to\"],\"additionalProperties\":false},"
    "\"passengers\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
    "\"maxLength\":8},\"age\":{\"type\":\"integer\"}},\"required\":[\"name\"],\"additionalProperties\":false},"
    "\"minItems\":1,\"maxItems\":3},\"max_price\":{\"type\":\"number\"}},\"required\":[\"route\",\"passengers\"],"
    "\"additionalProperties\":false}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"set_mode\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"mode\":{\"enum\":[\"on\",\"off\",1,null]},\"level\":{\"type\":[\"number\",\"null\"]},\"flags\":{\"type\":"
    "\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":4}},\"required\":[\"mode\",\"level\"],"
    "\"additionalProperties\":false}}}]";

static const char *const tool_names[3] = {"get_weather", "book_flight", "set_mode"};
static const int families[3] = {TC_HERMES, TC_MISTRAL, TC_LLAMA3};

static json_t *tool_params(json_t *tools, const char *name)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name))
            return json_object_get(fn, "parameters");
    }
    return NULL;
}

/* Request i's choice: named (each tool in turn) or required, one call or parallel, in a family. */
static void choice_of(int i, struct tc_choice *c, int *family)
{
    memset(c, 0, sizeof *c);
    c->mode = i % 4 == 3 ? TC_CHOICE_REQUIRED : TC_CHOICE_NAMED;
    if (c->mode == TC_CHOICE_NAMED)
        snprintf(c->name, sizeof c->name, "%s", tool_names[i % 3]);
    c->parallel = i % 5 == 4;
    *family = families[(i / 4) % 3];
}

/* ---------------------------------------------------------------- grammar alone */

static json_t *load_tools(void)
{
    json_error_t je;
    json_t *t = json_loads(tools_json, 0, &je);
    CHECK(t != NULL, "tools: %s", je.text);
    return t;
}

/* What the grammar takes and refuses, without a model: the frame, the name,
 * the arguments' schema, one call vs parallel calls, and nothing after. */
static void grammar_shapes(void)
{
    json_t *tools = load_tools();
    struct err e = {0};
    struct gram *g = NULL;
    struct tc_choice c = {.mode = TC_CHOICE_NAMED, .name = "get_weather"};
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &g, &e) == 0 && g, "named hermes: %s", e.msg);
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                      "\"celsius\"}}\n</tool_call>";
    CHECK(gram_match(g, one, strlen(one)), "a valid call");
    const char *bad[] = {
        "<tool_call>\n{\"name\": \"set_mode\", \"arguments\": {\"mode\": \"on\", \"level\": 1}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"kelvin\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}",
        /* two calls where one is allowed (one string, on two lines) */
        ("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>"
         "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n</tool_call>"),
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>x",
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}, \"x\": 1}\n</tool_call>",
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        CHECK(!gram_match(g, bad[k], strlen(bad[k])), "refused %zu: %s", k, bad[k]);
    gram_free(g);
    /* parallel: the two calls in a row are one reply; required: any tool */
    c = (struct tc_choice){.mode = TC_CHOICE_REQUIRED, .parallel = true};
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &g, &e) == 0 && g, "required hermes: %s", e.msg);
    const char *two = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": "
                      "\"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"set_mode\", \"arguments\": {\"mode\": null, "
                      "\"level\": 2.5}}\n</tool_call>";
    CHECK(gram_match(g, two, strlen(two)), "two calls with parallel_tool_calls");
    CHECK(gram_match(g, bad[0], strlen(bad[0])), "required: set_mode too");
    gram_free(g);
    /* Llama 3 writes "parameters"; Mistral a list after [TOOL_CALLS] */
    c = (struct tc_choice){.mode = TC_CHOICE_NAMED, .name = "set_mode", .parallel = true};
    CHECK(toolgram_compile(tools, &c, TC_LLAMA3, &g, &e) == 0 && g, "llama3: %s", e.msg);
    const char *l3 = "{\"name\": \"set_mode\", \"parameters\": {\"mode\": 1, \"level\": null}}";
    CHECK(gram_match(g, l3, strlen(l3)), "llama3 call");
    gram_free(g);
    CHECK(toolgram_compile(tools, &c, TC_MISTRAL, &g, &e) == 0 && g, "mistral: %s", e.msg);
    const char *mi = "[TOOL_CALLS] [{\"name\": \"set_mode\", \"arguments\": {\"mode\": 1, \"level\": null}}, {\"name\": "
                     "\"set_mode\", \"arguments\": {\"mode\": \"off\", \"level\": 0}}]";
    CHECK(gram_match(g, mi, strlen(mi)), "mistral calls");
    gram_free(g);
    /* nothing to enforce: auto, none, a family without a JSON call form */
    c = (struct tc_choice){.mode = TC_CHOICE_AUTO};
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &g, &e) == 0 && !g, "auto: no grammar");
    c = (struct tc_choice){.mode = TC_CHOICE_NONE};
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &g, &e) == 0 && !g, "none: no grammar");
    c = (struct tc_choice){.mode = TC_CHOICE_REQUIRED};
    CHECK(toolgram_compile(tools, &c, TC_QWEN_XML, &g, &e) == 0 && !g, "qwen-xml: no grammar");
    CHECK(toolgram_compile(tools, &c, TC_NONE, &g, &e) == 0 && !g, "no family: no grammar");
    /* a parameters schema outside the subset is refused, naming the keyword */
    json_t *odd = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                             "\"properties\":{\"a\":{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}}}]",
                             0, NULL);
    int rc = toolgram_compile(odd, &c, TC_HERMES, &g, &e);
    CHECK(rc == ERR_INVALID && !g && strstr(e.msg, "contentEncoding") && strstr(e.msg, "parameters"), "rc %d: %s", rc,
          e.msg);
    json_decref(odd);
    json_decref(tools);
}

/* ---------------------------------------------------------------- through the scheduler */

#define COLLECT_MAX 32768
#include "sched_collect.h"

static int n_requests(void)
{
    const char *s = getenv("LLM170_TOOLGRAM_N");
    int n = s ? atoi(s) : 24;
    return n > 0 ? n : 24;
}

/* The reply (prefill + text) as the gateway reads it: only calls, each to
 * the right function with arguments valid for its parameters. */
static bool check_reply(json_t *tools, const struct tc_choice *c, int family, const char *reply, char *why, size_t cap)
{
    struct tc_parser p;
    char *content = NULL;
    bool ok = false;
    if (tc_parse_all(&p, family, tools, c->parallel ? 0 : 1, 1, reply, &content)) {
        snprintf(why, cap, "parser: out of memory");
        goto out;
    }
    if (content[strspn(content, " \n")]) {
        snprintf(why, cap, "content beside the calls: \"%.80s\"", content);
        goto out;
    }
    if (p.n_calls < 1 || (!c->parallel && p.n_seen != 1) || p.n_seen > TOOLGRAM_MAX_CALLS) {
        snprintf(why, cap, "%zu calls (%zu seen)", p.n_calls, p.n_seen);
        goto out;
    }
    for (size_t k = 0; k < p.n_calls; k++) {
        const char *name = p.calls[k].name;
        if (c->mode == TC_CHOICE_NAMED && strcmp(name, c->name)) {
            snprintf(why, cap, "call %zu names '%s', not '%s'", k, name, c->name);
            goto out;
        }
        json_t *params = tool_params(tools, name);
        if (!params) {
            snprintf(why, cap, "call %zu names '%s', which is no tool", k, name);
            goto out;
        }
        json_error_t je;
        json_t *args = json_loads(p.calls[k].args, 0, &je);
        char w[160] = "";
        bool v = args && valid(args, params, params, w, sizeof w);
        json_decref(args);
        if (!v) {
            snprintf(why, cap, "call %zu (%s) arguments %s: %.100s", k, name, args ? w : je.text, p.calls[k].args);
            goto out;
        }
    }
    ok = true;
out:
    free(content);
    tc_parser_free(&p);
    return ok;
}

static void run_model(const char *file)
{
    const char *sh = check_shared_dir();
    if (!sh)
        SKIP("no shared data (../shared/data)");
    char path[4200];
    snprintf(path, sizeof path, "%s/models/%s", sh, file);
    struct model *m = NULL;
    struct engine_ctx *eng = NULL;
    struct sched *s = NULL;
    struct err e = {0};
    if (model_load(&m, path, &e)) {
        CHECK(0, "model_load %s: %s", path, e.msg);
        return;
    }
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 16;
    p.n_ctx = 8192; /* room for TOOLGRAM_MAX_CALLS parallel calls of a model that rarely ends */
    p.n_batch = 256;
    p.n_threads = 2;
    int total = n_requests();
    struct run r = {calloc((size_t)total, sizeof *r.o), total};
    char **pre = calloc((size_t)total, sizeof *pre);
    json_t *tools = load_tools();
    struct sched_params sp = {.n_slots = 16, .n_queue = total, .n_batch = 256};
    if (!r.o || !pre || engine_create(&eng, m, &p, &e) || sched_create(&s, eng, m, &sp, on_event, &r, &e)) {
        CHECK(0, "setup: %s", e.msg);
        goto out;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < total; i++) {
        struct tc_choice c;
        int family;
        choice_of(i, &c, &family);
        /* the prompt ends with the call's start, as the worker renders it */
        pre[i] = tc_prefill(family, c.mode == TC_CHOICE_NAMED ? c.name : NULL);
        char ptxt[512];
        snprintf(ptxt, sizeof ptxt, "Once upon a time, a tool was called.%s", pre[i] ? pre[i] : "");
        int32_t *prompt;
        size_t n_prompt;
        struct gram *g = NULL;
        CHECK(tok_encode(model_vocab(m), ptxt, strlen(ptxt), true, true, &prompt, &n_prompt, &e) == 0, "tokenize");
        CHECK(toolgram_compile(tools, &c, family, &g, &e) == 0 && g, "toolgram_compile %d: %s", i, e.msg);
        struct sched_request q;
        sched_request_init(&q);
        q.id = (uint64_t)i;
        q.prompt = prompt;
        q.n_prompt = n_prompt;
        q.smp.temp = 1.0f;
        q.smp.seed = 2000u + (uint32_t)i;
        q.max_tokens = c.parallel ? 7000 : 700;
        q.gram = g;
        q.gram_prefix = pre[i];
        CHECK(sched_submit(s, &q, &e) == 0, "submit %d: %s", i, e.msg);
        free(prompt);
    }
    long steps = 0;
    while (!sched_idle(s) && steps < 3000L * total) {
        if (sched_step(s, &e) < 0)
            break;
        steps++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int bad = 0, stops = 0, n_par = 0, n_multi = 0;
    size_t bytes = 0;
    for (int i = 0; i < total; i++) {
        struct out *o = &r.o[i];
        struct tc_choice c;
        int family;
        choice_of(i, &c, &family);
        char reply[COLLECT_MAX + 256];
        snprintf(reply, sizeof reply, "%s%s", pre[i] ? pre[i] : "", o->text);
        char why[400] = "";
        bool ok = o->finish == SCHED_STOP && !o->overflow && check_reply(tools, &c, family, reply, why, sizeof why);
        stops += o->finish == SCHED_STOP;
        bytes += o->n;
        n_par += c.parallel;
        n_multi += c.parallel && strstr(strstr(reply, "arguments") ? reply : "", "}, {\"name\"") != NULL;
        if (c.parallel && family == TC_HERMES) {
            const char *x = strstr(reply, "</tool_call>");
            n_multi += x && strstr(x + 1, "<tool_call>") != NULL;
        }
        if (!ok && bad++ < 8)
            printf("#   %s request %d (%s, %s%s, finish %d %s): %s: %.400s\n", file, i, tc_family_name(family),
                   c.mode == TC_CHOICE_NAMED ? c.name : "required", c.parallel ? ", parallel" : "", o->finish,
                   o->message, o->overflow ? "overflow" : why, reply);
        if (getenv("LLM170_TOOLGRAM_SHOW") && i < 12)
            printf("#   request %d (%zu bytes): %s\n", i, strlen(reply), reply + (strlen(reply) > 600 ? strlen(reply) - 600 : 0));
    }
    printf("# %s: %d tool-call requests (%d parallel, %d with several calls) in %.2f s, %ld steps, %zu output bytes, "
           "%d finished with stop\n", file, total, n_par, n_multi, secs, steps, bytes, stops);
    CHECK(bad == 0, "%s: %d of %d replies not valid calls", file, bad, total);
out:
    sched_free(s);
    engine_free(eng);
    model_free(m);
    for (int i = 0; pre && i < total; i++)
        free(pre[i]);
    free(pre);
    json_decref(tools);
    free(r.o);
}

/* The scheduler takes the grammar whatever happens (ASan sees a leak
 * otherwise): a grammar beside a JSON schema, and a prefilled start the
 * grammar does not accept, are refused; an accepted one is skipped. */
static void sched_checks(void)
{
    const char *sh = check_shared_dir();
    if (!sh)
        SKIP("no shared data (../shared/data)");
    char path[4200];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", sh);
    struct model *m = NULL;
    struct engine_ctx *eng = NULL;
    struct sched *s = NULL;
    struct err e = {0};
    struct engine_params p;
    engine_params_default(&p);
    p.n_seq = 1;
    p.n_ctx = 512;
    p.n_batch = 64;
    struct run r = {calloc(1, sizeof *r.o), 1};
    struct sched_params sp = {.n_slots = 1, .n_queue = 2, .n_batch = 64};
    json_t *tools = load_tools();
    if (model_load(&m, path, &e) || engine_create(&eng, m, &p, &e) || sched_create(&s, eng, m, &sp, on_event, &r, &e)) {
        CHECK(0, "setup: %s", e.msg);
        goto out;
    }
    int32_t prompt[2] = {1, 100};
    struct tc_choice c = {.mode = TC_CHOICE_NAMED, .name = "set_mode"};
    struct sched_request q;
    sched_request_init(&q);
    q.prompt = prompt;
    q.n_prompt = 2;
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &q.gram, &e) == 0 && q.gram, "compile: %s", e.msg);
    q.json_schema = "{\"type\":\"object\"}";
    int rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "grammar"), "schema and grammar: rc %d %s", rc, e.msg);
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &q.gram, &e) == 0 && q.gram, "compile: %s", e.msg);
    q.json_schema = NULL;
    q.gram_prefix = "<tool_call>\n{\"name\": \"get_weather\", ";
    rc = sched_submit(s, &q, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "prefilled start"), "foreign prefix: rc %d %s", rc, e.msg);
    char *pre = tc_prefill(TC_HERMES, "set_mode");
    CHECK(toolgram_compile(tools, &c, TC_HERMES, &q.gram, &e) == 0 && q.gram, "compile: %s", e.msg);
    q.gram_prefix = pre;
    q.smp.temp = 1.0f;
    q.smp.seed = 9;
    q.max_tokens = 400;
    CHECK(sched_submit(s, &q, &e) == 0, "submit: %s", e.msg);
    for (int i = 0; i < 1000 && !sched_idle(s); i++)
        sched_step(s, &e);
    char reply[COLLECT_MAX + 64], why[400] = "";
    snprintf(reply, sizeof reply, "%s%s", pre, r.o[0].text);
    CHECK(r.o[0].finish == SCHED_STOP && check_reply(tools, &c, TC_HERMES, reply, why, sizeof why), "reply %s: %s", why,
          reply);
    free(pre);
out:
    sched_free(s);
    engine_free(eng);
    model_free(m);
    json_decref(tools);
    free(r.o);
}

static void stories260k(void) { run_model("stories260K.gguf"); }
static void qwen35_tiny_random(void) { run_model("synthetic/qwen35-tiny.gguf"); }
static void llama2_tiny_random(void) { run_model("untrained/llama-2-tiny-random.gguf"); }

int main(void)
{
    RUN(grammar_shapes);
    RUN(sched_checks);
    RUN(stories260k);
    RUN(qwen35_tiny_random);
    RUN(llama2_tiny_random);
    CHECK_EXIT();
}
