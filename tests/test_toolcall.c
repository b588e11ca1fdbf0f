/* test_toolcall.c — tool calls out of generated text (common/toolcall.h):
 * each family in its own format, content around calls, malformed JSON as
 * content, streams split at every byte, tool_choice validation. */
#include "../common/toolcall.h"

#include "check.h"

static json_t *tools_fixture(void)
{
    return json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                      "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},\"required\":[\"city\"]}}},"
                      "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\"}}}]",
                      0, NULL);
}

/* What a parse gave, as one comparable line: content|name(args)|name(args)… */
static char *summary(const char *content, const struct tc_parser *p)
{
    struct tc_buf b = {0};
    tc_buf_put(&b, content, strlen(content));
    for (size_t i = 0; i < p->n_calls; i++) {
        tc_buf_put(&b, "|", 1);
        tc_buf_put(&b, p->calls[i].name, strlen(p->calls[i].name));
        tc_buf_put(&b, "(", 1);
        tc_buf_put(&b, p->calls[i].args, strlen(p->calls[i].args));
        tc_buf_put(&b, ")", 1);
    }
    return b.p;
}

/* Parse text whole, then split into two pieces at every byte and fed in
 * single bytes: every way must give `want` (content|calls) and the same
 * call ids. */
static void expect(int family, int max_calls, const char *text, const char *want)
{
    json_t *tools = tools_fixture();
    struct tc_parser p;
    char *content = NULL;
    CHECK(tc_parse_all(&p, family, tools, max_calls, 42, text, &content) == 0, "parse");
    char *got = summary(content ? content : "", &p);
    CHECK(!strcmp(got, want), "%s: %s\n      got  '%s'\n      want '%s'", tc_family_name(family), text, got, want);
    char ids[8][32];
    size_t n_ids = p.n_calls < 8 ? p.n_calls : 8;
    for (size_t i = 0; i < n_ids; i++)
        memcpy(ids[i], p.calls[i].id, 32);
    free(got);
    free(content);
    tc_parser_free(&p);
    size_t n = strlen(text);
    int bad = 0;
    for (size_t cut = 0; cut <= n + 1 && bad < 3; cut++) {
        /* cut == n + 1: one byte at a time */
        tc_parser_init(&p, family, tools, max_calls, 42);
        struct tc_buf c = {0};
        size_t first, seen = 0;
        int rc = 0;
        if (cut <= n) {
            rc |= tc_feed(&p, text, cut, false, &c, &first);
            CHECK(first == seen, "first_new");
            seen = p.n_calls;
            rc |= tc_feed(&p, text + cut, n - cut, false, &c, &first);
        } else {
            for (size_t i = 0; i < n; i++)
                rc |= tc_feed(&p, text + i, 1, false, &c, &first);
        }
        rc |= tc_feed(&p, NULL, 0, true, &c, &first);
        tc_buf_put(&c, "", 0);
        char *s = summary(c.p, &p);
        if (rc || strcmp(s, want)) {
            bad++;
            CHECK(0, "split at %zu: got '%s' want '%s'", cut, s, want);
        }
        for (size_t i = 0; i < n_ids && i < p.n_calls; i++)
            if (strcmp(ids[i], p.calls[i].id)) {
                bad++;
                CHECK(0, "split at %zu: call %zu id %s != %s", cut, i, p.calls[i].id, ids[i]);
            }
        free(s);
        tc_buf_free(&c);
        tc_parser_free(&p);
    }
    json_decref(tools);
}

static void hermes_format(void)
{
    expect(TC_HERMES, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
           "|get_weather({\"city\":\"Paris\"})");
    expect(TC_HERMES, 0,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
           "|get_weather({\"city\":\"Paris\"})|get_time({})");
    expect(TC_HERMES, 0,
           "Let me look that up.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon}\"}}\n"
           "</tool_call>\n",
           "Let me look that up.|get_weather({\"city\":\"Lyon}\"})");
    /* no closing tag (a stop string cut it): still a call */
    expect(TC_HERMES, 0, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}", "|get_time({})");
    /* arguments given as a JSON string are passed as they are */
    expect(TC_HERMES, 0, "<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\": 1}\"}</tool_call>",
           "|get_time({\"tz\": 1})");
    /* parallel_tool_calls false: the first call only */
    expect(TC_HERMES, 1,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
           "|get_weather({\"city\":\"Paris\"})");
    /* plain text, and text that only looks like a marker's start */
    expect(TC_HERMES, 0, "Hello <tool a < b\n", "Hello <tool a < b\n");
    expect(TC_HERMES, 0, "", "");
}

static void hermes_malformed(void)
{
    /* bad JSON: the text is content, as written */
    expect(TC_HERMES, 0, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {city: Paris}}\n</tool_call>");
    /* never closed */
    expect(TC_HERMES, 0, "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
           "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ");
    /* not a call object */
    expect(TC_HERMES, 0, "<tool_call>[1, 2]</tool_call>", "<tool_call>[1, 2]</tool_call>");
    expect(TC_HERMES, 0, "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>");
    /* a good call after a bad one is still a call */
    expect(TC_HERMES, 0,
           "<tool_call>oops</tool_call> then <tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
           "<tool_call>oops</tool_call> then|get_time({})");
}

static void qwen_xml_format(void)
{
    expect(TC_QWEN_XML, 0,
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
           "</parameter>\n</function>\n</tool_call>",
           "|get_weather({\"city\":\"Paris\",\"days\":3})");
    /* a string parameter stays a string even when it looks like a number; no schema: a string */
    expect(TC_QWEN_XML, 0,
           "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n</function>\n"
           "</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\n\"CET\" zone\n</parameter>\n</function>\n"
           "</tool_call>",
           "Checking.|get_weather({\"city\":\"1984\"})|get_time({\"tz\":\"\\\"CET\\\" zone\"})");
    expect(TC_QWEN_XML, 0, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", "|get_time({})");
    /* the JSON form is read too, and the XML form in the Hermes family */
    expect(TC_QWEN_XML, 0, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "|get_time({})");
    expect(TC_AUTO, 0, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>", "|get_time({})");
    /* never closed, or broken: content */
    expect(TC_QWEN_XML, 0, "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
           "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar");
    expect(TC_QWEN_XML, 0, "<tool_call>\n<function=get_weather>\n<parameter=city\nParis</function></tool_call>",
           "<tool_call>\n<function=get_weather>\n<parameter=city\nParis</function></tool_call>");
    expect(TC_QWEN_XML, 0, "<tool_call>\n<func>x</func>\n</tool_call>", "<tool_call>\n<func>x</func>\n</tool_call>");
}

static void llama3_format(void)
{
    expect(TC_LLAMA3, 0, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
           "|get_weather({\"city\":\"Paris\"})");
    expect(TC_LLAMA3, 0, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}", "|get_time({})");
    expect(TC_LLAMA3, 0, "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
                         "{\"name\": \"get_time\", \"parameters\": {}}",
           "|get_weather({\"city\":\"Paris\"})|get_time({})");
    expect(TC_LLAMA3, 0, "Checking.<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}", "Checking.|get_time({})");
    /* JSON that is not a call of one of the tools is content */
    expect(TC_LLAMA3, 0, "{\"name\": \"Bob\", \"age\": 3}", "{\"name\": \"Bob\", \"age\": 3}");
    expect(TC_LLAMA3, 0, "{\"name\": \"rm_rf\", \"parameters\": {}}", "{\"name\": \"rm_rf\", \"parameters\": {}}");
    /* a call in the middle of prose without the tag is prose */
    expect(TC_LLAMA3, 0, "Use {\"name\": \"get_time\", \"parameters\": {}} later",
           "Use {\"name\": \"get_time\", \"parameters\": {}} later");
    expect(TC_LLAMA3, 0, "{\"name\": \"get_time\", \"parameters\": {", "{\"name\": \"get_time\", \"parameters\": {");
}

static void mistral_format(void)
{
    expect(TC_MISTRAL, 0, "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]",
           "|get_weather({\"city\":\"Paris\"})");
    expect(TC_MISTRAL, 0,
           "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
           "{\"name\": \"get_time\", \"arguments\": {}}]",
           "|get_weather({\"city\":\"Paris\"})|get_time({})");
    /* the control token not rendered: the bare array */
    expect(TC_MISTRAL, 0, " [{\"name\": \"get_time\", \"arguments\": {}}]", "|get_time({})");
    expect(TC_MISTRAL, 0, "Sure. [TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]", "Sure.|get_time({})");
    expect(TC_MISTRAL, 0, "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": }]",
           "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": }]");
    expect(TC_MISTRAL, 0, "[1, 2, 3] are numbers", "[1, 2, 3] are numbers");
}

static void auto_and_none(void)
{
    /* the gateway does not see the template: every form is recognised */
    expect(TC_AUTO, 0, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "|get_time({})");
    expect(TC_AUTO, 0, "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]", "|get_time({})");
    expect(TC_AUTO, 0, "{\"name\": \"get_time\", \"parameters\": {}}", "|get_time({})");
    expect(TC_AUTO, 0, "Plain [answer] with {braces}.", "Plain [answer] with {braces}.");
    /* TC_NONE: everything is content */
    expect(TC_NONE, 0, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>");
}

static void call_ids(void)
{
    json_t *tools = tools_fixture();
    struct tc_parser a, b;
    char *ca, *cb;
    const char *t = "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"
                    "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>";
    CHECK(!tc_parse_all(&a, TC_HERMES, tools, 0, 0, t, &ca), "parse");
    CHECK(!tc_parse_all(&b, TC_HERMES, tools, 0, 0, t, &cb), "parse");
    CHECK(a.n_calls == 2 && b.n_calls == 2, "two calls");
    if (a.n_calls == 2 && b.n_calls == 2) {
        CHECK(!strncmp(a.calls[0].id, "call_", 5) && strlen(a.calls[0].id) == 29, "id '%s'", a.calls[0].id);
        CHECK(strcmp(a.calls[0].id, a.calls[1].id), "ids within a reply differ");
        /* every part of the id is drawn: the last 8 characters differ too */
        CHECK(strcmp(a.calls[0].id + 21, a.calls[1].id + 21) && strcmp(a.calls[0].id + 21, b.calls[0].id + 21),
              "id tails %s %s %s", a.calls[0].id, a.calls[1].id, b.calls[0].id);
        CHECK(strcmp(a.calls[0].id, b.calls[0].id), "ids of two replies differ (random seed)");
    }
    free(ca);
    free(cb);
    tc_parser_free(&a);
    tc_parser_free(&b);
    json_decref(tools);
}

static void family_detection(void)
{
    char *qwen3 = check_read_file("tests/golden/qwen3.chat_template.jinja", NULL);
    if (qwen3)
        CHECK_EQ_INT(tc_family_from_template(qwen3), TC_HERMES);
    free(qwen3);
    CHECK_EQ_INT(tc_family_from_template("{{- '<|start_header_id|>ipython<|end_header_id|>' }}<|python_tag|>"),
                 TC_LLAMA3);
    CHECK_EQ_INT(tc_family_from_template("{{ '[AVAILABLE_TOOLS] ' + tools|tojson + '[/AVAILABLE_TOOLS]' }}"
                                         "{{ '[TOOL_CALLS] ' }}"),
                 TC_MISTRAL);
    CHECK_EQ_INT(tc_family_from_template("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}"), TC_NONE);
    CHECK_EQ_INT(tc_family_from_template(NULL), TC_NONE);
    CHECK_EQ_INT(tc_family_from_template("{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"), TC_QWEN_XML);
}

static int choice(const char *tc, const char *par, struct tc_choice *c, const char **param, struct err *e)
{
    json_t *tools = tools_fixture();
    json_t *t = tc ? json_loads(tc, JSON_DECODE_ANY, NULL) : NULL;
    json_t *p = par ? json_loads(par, JSON_DECODE_ANY, NULL) : NULL;
    int rc = tc_choice_parse(t, p, tools, c, param, e);
    json_decref(t);
    json_decref(p);
    json_decref(tools);
    return rc;
}

static void tool_choice_parsing(void)
{
    struct tc_choice c;
    const char *param;
    struct err e;
    CHECK(!choice(NULL, NULL, &c, &param, &e) && c.mode == TC_CHOICE_AUTO && c.parallel, "default");
    CHECK(!choice("\"none\"", "false", &c, &param, &e) && c.mode == TC_CHOICE_NONE && !c.parallel, "none");
    CHECK(!choice("\"required\"", NULL, &c, &param, &e) && c.mode == TC_CHOICE_REQUIRED, "required");
    CHECK(!choice("{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}}", NULL, &c, &param, &e) &&
              c.mode == TC_CHOICE_NAMED && !strcmp(c.name, "get_time"),
          "named");
    int rc = choice("{\"type\":\"function\",\"function\":{\"name\":\"launch\"}}", NULL, &c, &param, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "'launch', which is not in 'tools'") && !strcmp(param, "tool_choice"),
          "unknown function: rc %d '%s'", rc, e.msg);
    rc = choice("\"always\"", NULL, &c, &param, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "\"always\"") && !strcmp(param, "tool_choice"), "bad mode: '%s'", e.msg);
    rc = choice("{\"type\":\"function\"}", NULL, &c, &param, &e);
    CHECK(rc == ERR_INVALID && !strcmp(param, "tool_choice"), "no function: '%s'", e.msg);
    rc = choice("7", NULL, &c, &param, &e);
    CHECK(rc == ERR_INVALID && !strcmp(param, "tool_choice"), "number: '%s'", e.msg);
    rc = choice(NULL, "\"yes\"", &c, &param, &e);
    CHECK(rc == ERR_INVALID && !strcmp(param, "parallel_tool_calls"), "parallel: '%s'", e.msg);
    /* required / a function without tools */
    json_t *req = json_string("required");
    rc = tc_choice_parse(req, NULL, NULL, &c, &param, &e);
    CHECK(rc == ERR_INVALID && !strcmp(param, "tool_choice"), "required without tools: '%s'", e.msg);
    json_decref(req);
}

static void call_schema_hook(void)
{
    json_t *tools = tools_fixture();
    struct tc_choice c = {.mode = TC_CHOICE_NAMED, .name = "get_weather", .parallel = true};
    json_t *s = tc_call_schema(tools, &c);
    char *txt = s ? json_dumps(s, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    CHECK(txt && !strcmp(txt, "{\"properties\":{\"arguments\":{\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
                              "\"required\":[\"city\"],\"type\":\"object\"},\"name\":{\"const\":\"get_weather\"}},"
                              "\"required\":[\"name\",\"arguments\"],\"type\":\"object\"}"),
          "named schema %s", txt ? txt : "(null)");
    free(txt);
    json_decref(s);
    c.mode = TC_CHOICE_REQUIRED;
    s = tc_call_schema(tools, &c);
    CHECK(s && json_array_size(json_object_get(s, "anyOf")) == 2, "required: anyOf both tools");
    json_decref(s);
    c.mode = TC_CHOICE_AUTO;
    CHECK(tc_call_schema(tools, &c) == NULL, "auto: nothing to enforce");
    const char *o, *cl;
    tc_call_frame(TC_HERMES, &o, &cl);
    CHECK(!strcmp(o, "<tool_call>\n") && !strcmp(cl, "\n</tool_call>"), "hermes frame");
    json_decref(tools);
}

/* The prefilled start of a call, and that a reply continuing it is read as a call. */
static void prefill(void)
{
    char *p = tc_prefill(TC_HERMES, "get_weather");
    CHECK(p && !strcmp(p, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "), "hermes '%s'", p ? p : "");
    if (p) {
        char text[256];
        snprintf(text, sizeof text, "%s{\"city\": \"Paris\"}}\n</tool_call>", p);
        expect(TC_AUTO, 0, text, "|get_weather({\"city\":\"Paris\"})");
    }
    free(p);
    p = tc_prefill(TC_HERMES, NULL);
    CHECK(p && !strcmp(p, "<tool_call>\n{\"name\": \""), "hermes any '%s'", p ? p : "");
    free(p);
    p = tc_prefill(TC_LLAMA3, "get_time");
    CHECK(p && !strcmp(p, "{\"name\": \"get_time\", \"parameters\": "), "llama3 '%s'", p ? p : "");
    if (p) {
        char text[256];
        snprintf(text, sizeof text, "%s{}}", p);
        expect(TC_AUTO, 0, text, "|get_time({})");
    }
    free(p);
    p = tc_prefill(TC_MISTRAL, "a\"b");
    CHECK(p && !strcmp(p, "[TOOL_CALLS] [{\"name\": \"a\\\"b\", \"arguments\": "), "mistral, escaped '%s'", p ? p : "");
    free(p);
    p = tc_prefill(TC_QWEN_XML, "get_time");
    CHECK(p && !strcmp(p, "<tool_call>\n<function=get_time>\n"), "qwen-xml '%s'", p ? p : "");
    if (p) {
        char text[256];
        snprintf(text, sizeof text, "%s</function>\n</tool_call>", p);
        expect(TC_AUTO, 0, text, "|get_time({})");
    }
    free(p);
    CHECK(tc_prefill(TC_NONE, "x") == NULL && tc_prefill(TC_AUTO, "x") == NULL, "no text form");
}

int main(void)
{
    RUN(hermes_format);
    RUN(hermes_malformed);
    RUN(qwen_xml_format);
    RUN(llama3_format);
    RUN(mistral_format);
    RUN(auto_and_none);
    RUN(call_ids);
    RUN(family_detection);
    RUN(tool_choice_parsing);
    RUN(call_schema_hook);
    RUN(prefill);
    CHECK_EXIT();
}
