/* test_jinja.c — the Jinja subset (worker/chat/jinja.h) and chat rendering
 * (common/chat.h).
 *
 * Language cases: expected outputs are what Jinja2 (Python semantics,
 * trim_blocks + lstrip_blocks) prints for the same template. Chat cases:
 * expected prompts are the worked renderings of ../shared/spec/arch-dense.md
 * §7.1 (the official Qwen3 template, a verbatim copy in tests/golden/) and
 * §7.2 (Llama 3.x), plus the Phi-3 template stored in a shared vocab GGUF. */
#include <jansson.h>
#include <stdint.h>
#include <time.h>

#include "../worker/chat/chat_render.h"
#include "../worker/chat/jinja.h"
#include "check.h"

/* 2025-03-05 12:00:00 UTC, rendered with TZ=UTC */
#define PINNED_NOW ((time_t)1741176000)

static char *render(const char *tmpl, const char *vars_json, int *rc, struct err *e)
{
    struct jinja_tmpl *t = NULL;
    json_t *vars = vars_json ? json_loads(vars_json, 0, NULL) : json_object();
    char *out = NULL;
    *rc = jinja_parse(&t, tmpl, strlen(tmpl), e);
    if (!*rc) {
        struct jinja_opts o = {.now = PINNED_NOW, .max_steps = 100000};
        *rc = jinja_render(t, vars, &o, &out, NULL, e);
    }
    jinja_free(t);
    json_decref(vars);
    return out;
}

#define EXPECT_RENDER(tmpl, vars, want)                                                            \
    do {                                                                                           \
        struct err e_;                                                                             \
        int rc_;                                                                                   \
        char *got_ = render((tmpl), (vars), &rc_, &e_);                                            \
        CHECK(rc_ == 0, "%s: error %s", (tmpl), e_.msg);                                           \
        if (got_)                                                                                  \
            CHECK(!strcmp(got_, (want)), "%s:\n#   got  [%s]\n#   want [%s]", (tmpl), got_, (want)); \
        free(got_);                                                                                \
    } while (0)

#define EXPECT_FAIL(tmpl, vars, code, needle)                                                      \
    do {                                                                                           \
        struct err e_;                                                                             \
        int rc_;                                                                                   \
        char *got_ = render((tmpl), (vars), &rc_, &e_);                                            \
        CHECK(rc_ == (code), "%s: rc %d (%s) want %d", (tmpl), rc_, rc_ ? e_.msg : got_, (code));  \
        if (rc_)                                                                                   \
            CHECK(strstr(e_.msg, (needle)) != NULL, "message '%s' lacks '%s'", e_.msg, (needle));  \
        free(got_);                                                                                \
    } while (0)

static void arithmetic_and_literals(void)
{
    EXPECT_RENDER("{{ 1 + 2 * 3 }}", NULL, "7");
    EXPECT_RENDER("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }}", NULL, "3 -4 1 2 3.5 1024");
    EXPECT_RENDER("{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 0.00001 }} {{ 2.5e-3 }} {{ 123456.5 }}", NULL,
                  "1.0 0.30000000000000004 1e+20 1e-05 0.0025 123456.5");
    EXPECT_RENDER("{{ 'a' ~ 1 ~ none ~ true }}", NULL, "a1NoneTrue");
    EXPECT_RENDER("{{ 'ab' * 3 }}{{ [1] + [2] }}", NULL, "ababab[1, 2]");
    EXPECT_RENDER("{{ \"a\\nb\" }}|{{ '\\u00e9\\x41' }}|{{ 'it''s' }}", NULL, "a\nb|\xc3\xa9" "A|its");
    EXPECT_RENDER("{{ {'a': {'b': 1}}['a']['b'] }}", NULL, "1");
    EXPECT_RENDER("{{ ['x', \"it's\", 1, 2.0, none, true, {'k': 'v'}] }}", NULL,
                  "['x', \"it's\", 1, 2.0, None, True, {'k': 'v'}]");
    EXPECT_RENDER("{{ 'y' if 1 > 2 else 'n' }}{{ 'z' if false }}", NULL, "n");
    EXPECT_RENDER("{{ 1 < 2 and 'b' or 'c' }}{{ 0 or '' or 'last' }}{{ not 0 }}", NULL, "blastTrue");
    EXPECT_RENDER("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}", NULL,
                  "TrueTrueTrueTrue");
    EXPECT_RENDER("{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 'abc' < 'abd' }}{{ [1, 2] == [1, 2] }}", NULL, "TrueTrueTrueTrue");
}

static void indexing_and_slicing(void)
{
    const char *v = "{\"m\": [\"a\", \"b\", \"c\", \"d\"], \"s\": \"h\\u00e9llo\"}";
    EXPECT_RENDER("{{ m[::-1] }}|{{ m[1:3] }}|{{ m[-1] }}|{{ m[:-2] }}|{{ m[::2] }}", v,
                  "['d', 'c', 'b', 'a']|['b', 'c']|d|['a', 'b']|['a', 'c']");
    EXPECT_RENDER("{{ s[1:3] }}|{{ s[-1] }}|{{ s[::-1] }}|{{ s|length }}", v, "\xc3\xa9l|o|oll\xc3\xa9h|5");
    EXPECT_RENDER("{{ m[10] is defined }}{{ m.nope is defined }}", v, "FalseFalse");
}

static void statements(void)
{
    EXPECT_RENDER("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                  "{{ loop.revindex }},{% endfor %}",
                  NULL, "10TrueFalse3,21FalseFalse2,32FalseTrue1,");
    EXPECT_RENDER("{% set ns = namespace(n=0, s='') %}{% for i in range(5) %}{% set ns.n = ns.n + i %}"
                  "{% endfor %}{{ ns.n }}",
                  NULL, "10");
    /* a set inside a loop does not leak out: that is what namespace() is for */
    EXPECT_RENDER("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", NULL, "21");
    EXPECT_RENDER("{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}", NULL, "c");
    EXPECT_RENDER("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}", NULL, "a=1;b=2;");
    EXPECT_RENDER("{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}", NULL, "ab");
    EXPECT_RENDER("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}"
                  "{% endif %}{{ i }}{% endfor %}",
                  NULL, "013");
    EXPECT_RENDER("{% for i in [] %}x{% else %}empty{% endfor %}", NULL, "empty");
    EXPECT_RENDER("{% for i in range(6) if i is even %}{{ i }}{{ loop.length }}{% endfor %}", NULL, "032343");
    EXPECT_RENDER("{% macro greet(name, p='Hi') %}{{ p }} {{ name }}{% endmacro %}{{ greet('Bob') }}/"
                  "{{ greet('Al', p='Yo') }}",
                  NULL, "Hi Bob/Yo Al");
    EXPECT_RENDER("{% set x %}hi {{ 1 }}{% endset %}[{{ x }}]", NULL, "[hi 1]");
    EXPECT_RENDER("{% set a, b = 1, 2 %}{{ b }}{{ a }}", NULL, "21");
    EXPECT_RENDER("a{# a comment #}b{#- trimmed -#}  c", NULL, "abc");
    EXPECT_RENDER("{% generation %}gen{% endgeneration %}", NULL, "gen");
}

static void whitespace_control(void)
{
    EXPECT_RENDER("a  {%- if true -%}  b  {%- endif -%}  c", NULL, "abc");
    EXPECT_RENDER("a {{- 'b' -}} c", NULL, "abc");
    /* trim_blocks drops the newline after a block tag, lstrip_blocks the indent before it */
    EXPECT_RENDER("x\n  {% if true %}\n  y\n  {% endif %}\nz", NULL, "x\n  y\nz");
    EXPECT_RENDER("{{ 'v' }}\nw", NULL, "v\nw"); /* not after an expression */
    EXPECT_RENDER("  {%+ if true %}k{% endif %}", NULL, "  k");
}

static void filters_tests_methods(void)
{
    EXPECT_RENDER("{{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nq\\n'.lstrip('\\n') }}|"
                  "{{ 'q\\n\\n'.rstrip() }}|{{ '  t '|trim }}",
                  NULL, "a b|hi|q\n|q|t");
    EXPECT_RENDER("{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'a</t>b</t>c'.split('</t>')[-1] }}|"
                  "{{ 'a b c'.split(' ', 1) }}",
                  NULL, "['a', 'b', '', 'c']|['a', 'b', 'c']|c|['a', 'b c']");
    EXPECT_RENDER("{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}{{ 'hello'.upper() }}"
                  "{{ 'a-b-c'.replace('-', '+', 1) }}{{ 'ab'.title() }}{{ 'abcb'.find('b') }}",
                  NULL, "TrueTrueHELLOa+b-cAb1");
    EXPECT_RENDER("{{ [3, 1, 2]|sort|join(',') }} {{ 'abc'|length }} {{ [1, 2]|first }}{{ [1, 2]|last }} "
                  "{{ none|default('d') }}{{ missing|default('u') }}{{ ''|default('e', true) }} {{ 'Ab'|lower }}",
                  NULL, "1,2,3 3 12 Noneue ab");
    EXPECT_RENDER("{{ [{'a': 1}, {'a': 2}]|map(attribute='a')|list }}|"
                  "{{ [{'r': 'u'}, {'r': 'a'}, {'r': 'a'}]|selectattr('r', 'equalto', 'a')|list|length }}|"
                  "{{ [{'r': 'u'}, {'r': 'a'}]|rejectattr('r', 'equalto', 'a')|map(attribute='r')|join }}|"
                  "{{ ['a', 'b']|map('upper')|join }}|{{ [1, 2, 2]|unique|list }}|{{ [1, 2]|reverse|list }}",
                  NULL, "[1, 2]|2|u|AB|[1, 2]|[2, 1]");
    EXPECT_RENDER("{{ {'a': 1, 'b': [true, none, 'x\"y'], 'c': 'caf\\u00e9', 'd': 0.5}|tojson }}", NULL,
                  "{\"a\": 1, \"b\": [true, null, \"x\\\"y\"], \"c\": \"caf\xc3\xa9\", \"d\": 0.5}");
    EXPECT_RENDER("{{ x|tojson(indent=2) }}", "{\"x\": {\"a\": [1, {}], \"b\": []}}",
                  "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}");
    EXPECT_RENDER("{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(ensure_ascii=true) }}",
                  "{\"x\": {\"k\": \"\\u00e9\\n\"}}", "{\"k\":\"\xc3\xa9\\n\"}|{\"k\": \"\\u00e9\\n\"}");
    EXPECT_RENDER("{{ x is defined }}{{ y is none }}{{ 'a' is string }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}"
                  "{{ 3 is number }}{{ x is not mapping }}{{ false is false }}{{ [1] is iterable }}",
                  "{\"x\": 1, \"y\": null}", "TrueTrueTrueTrueTrueTrueTrueTrueTrue");
    EXPECT_RENDER("{{ d.get('a') }}{{ d.get('z', 'dflt') }}{{ d.keys()|list }}{{ d.values()|list }}{{ d|length }}",
                  "{\"d\": {\"a\": 1}}", "1dflt['a'][1]1");
    EXPECT_RENDER("{{ '%s is %d years (%.1f%%)' % ('Al', 30, 12.345) }}|{{ 'hi %s' % 'you' }}|{{ '%s-%s'|format(1, 'b') }}",
                  NULL, "Al is 30 years (12.3%)|hi you|1-b");
    EXPECT_RENDER("{{ 'x'|string ~ 5|string }}{{ '42'|int + 1 }}{{ 2|float }}{{ -3|abs }}{{ 'a\\nb'|indent(2) }}",
                  NULL, "x5432.03a\n  b");
}

static void globals(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    EXPECT_RENDER("{{ strftime_now('%d %b %Y') }}", NULL, "05 Mar 2025");
    EXPECT_RENDER("{{ range(3)|list }}{{ range(1, 7, 2)|list }}", NULL, "[0, 1, 2][1, 3, 5]");
    EXPECT_RENDER("{{ dict(a=1)|tojson }}", NULL, "{\"a\": 1}");
}

static void errors(void)
{
    EXPECT_FAIL("{{ raise_exception('Only user and assistant roles') }}", NULL, ERR_INVALID,
                "Only user and assistant roles");
    EXPECT_FAIL("{{ 'x'|frobnicate }}", NULL, ERR_UNSUPPORTED, "unsupported filter 'frobnicate'");
    EXPECT_FAIL("{% include 'other.jinja' %}", NULL, ERR_UNSUPPORTED, "unsupported statement");
    EXPECT_FAIL("{{ 1 is frob }}", NULL, ERR_UNSUPPORTED, "unsupported test 'frob'");
    EXPECT_FAIL("{{ 'a'.zap() }}", NULL, ERR_UNSUPPORTED, "unsupported method string.zap()");
    EXPECT_FAIL("line1\n{% if %}", NULL, ERR_FORMAT, "line 2");
    EXPECT_FAIL("{{ x", NULL, ERR_FORMAT, "unclosed");
    EXPECT_FAIL("{% for x in y %}", NULL, ERR_FORMAT, "endfor");
    EXPECT_FAIL("{% endif %}", NULL, ERR_FORMAT, "unexpected");
    EXPECT_FAIL("{{ 'a' + 1 }}", NULL, ERR_INVALID, "unsupported operand");
    EXPECT_FAIL("{{ nope.attr }}", NULL, ERR_INVALID, "'nope' is undefined");
    EXPECT_FAIL("{{ 1 // 0 }}", NULL, ERR_INVALID, "zero");
    EXPECT_FAIL("{{ '%s %s' % 'one' }}", NULL, ERR_INVALID, "not enough arguments");
    EXPECT_FAIL("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, ERR_RANGE, "nested");
    EXPECT_FAIL("{% set x.y = 1 %}", "{\"x\": {}}", ERR_INVALID, "namespace");
    /* hostile nesting is refused, not a stack overflow */
    char deep[2000];
    size_t k = 0;
    k += (size_t)snprintf(deep, sizeof deep, "{{ ");
    for (int i = 0; i < 600; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 600; i++)
        deep[k++] = ')';
    memcpy(deep + k, " }}", 4);
    EXPECT_FAIL(deep, NULL, ERR_UNSUPPORTED, "nested too deeply");
    EXPECT_FAIL("{{ 'ab' * 100000000000 }}", NULL, ERR_RANGE, "too large");
    EXPECT_FAIL("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NULL, ERR_RANGE,
                "runs too long");
}

/* ------------------------------------------------------------ chat templates */

static char *qwen3_template(void)
{
    return check_read_file("tests/golden/qwen3.chat_template.jinja", NULL);
}

static void expect_chat(const char *tmpl, const char *messages, const char *tools, const char *extra, bool strip_bos,
                        const char *bos, const char *want)
{
    json_t *m = json_loads(messages, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL,
           *x = extra ? json_loads(extra, 0, NULL) : NULL;
    CHECK(m != NULL, "bad test messages JSON");
    struct chat_params p = {.tmpl = tmpl, .messages = m, .tools = t, .add_generation_prompt = true,
                            .bos = bos, .eos = NULL, .strip_bos = strip_bos, .extra_vars = x, .now = PINNED_NOW};
    char *out = NULL;
    struct err e;
    int rc = chat_render_ex(&p, &out, &e);
    CHECK(rc == 0, "render failed: %s", e.msg);
    if (out)
        CHECK(!strcmp(out, want), "\n#   got  [%s]\n#   want [%s]", out, want);
    free(out);
    json_decref(m);
    json_decref(t);
    json_decref(x);
}

static void qwen3_spec_example(void)
{
    char *q = qwen3_template();
    if (!q)
        SKIP("tests/golden/qwen3.chat_template.jinja missing");
    /* §7.1 example: no system, one user turn, thinking disabled */
    expect_chat(q, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, "{\"enable_thinking\": false}", true, NULL,
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* default: thinking enabled → nothing after the assistant header */
    expect_chat(q, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, NULL, true, NULL,
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(q);
}

static void qwen3_history_and_reasoning(void)
{
    char *q = qwen3_template();
    if (!q)
        SKIP("tests/golden/qwen3.chat_template.jinja missing");
    /* an earlier assistant turn loses its reasoning (i < last_query_index);
     * content verbatim, no trimming; array-of-parts content joins its text */
    expect_chat(q,
                "[{\"role\":\"system\",\"content\":\"Be nice.\"},"
                "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Q1\"},{\"type\":\"text\",\"text\":\"more\"}]},"
                "{\"role\":\"assistant\",\"content\":\"<think>\\nhmm\\n</think>\\n\\nA1 \"},"
                "{\"role\":\"user\",\"content\":\" Q2\"}]",
                NULL, NULL, true, NULL,
                "<|im_start|>system\nBe nice.<|im_end|>\n"
                "<|im_start|>user\nQ1\nmore<|im_end|>\n"
                "<|im_start|>assistant\nA1 <|im_end|>\n"
                "<|im_start|>user\n Q2<|im_end|>\n"
                "<|im_start|>assistant\n");
    /* the last message is an assistant turn after the last query: reasoning kept,
     * from reasoning_content; a system message not at 0 renders as its own turn */
    expect_chat(q,
                "[{\"role\":\"user\",\"content\":\"Q\"},"
                "{\"role\":\"system\",\"content\":\"S2\"},"
                "{\"role\":\"assistant\",\"content\":\"\\nA\",\"reasoning_content\":\"\\nR\\n\"}]",
                NULL, NULL, true, NULL,
                "<|im_start|>user\nQ<|im_end|>\n"
                "<|im_start|>system\nS2<|im_end|>\n"
                "<|im_start|>assistant\n<think>\nR\n</think>\n\nA<|im_end|>\n"
                "<|im_start|>assistant\n");
    free(q);
}

static void qwen3_tools(void)
{
    char *q = qwen3_template();
    if (!q)
        SKIP("tests/golden/qwen3.chat_template.jinja missing");
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                        "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
    expect_chat(q,
                "[{\"role\":\"system\",\"content\":\"You are X.\"},"
                "{\"role\":\"user\",\"content\":\"Weather in Paris and Rome?\"},"
                "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
                "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}},"
                "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Rome\\\"}\"}}]},"
                "{\"role\":\"tool\",\"content\":\"22C\"},"
                "{\"role\":\"tool\",\"content\":\"18C\"}]",
                tools, "{\"enable_thinking\": false}", true, NULL,
                "<|im_start|>system\nYou are X.\n\n# Tools\n\nYou may call one or more functions to assist with the user "
                "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "
                "\"properties\": {\"city\": {\"type\": \"string\"}}}}}\n</tools>\n\nFor each function call, return a json "
                "object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\nWeather in Paris and Rome?<|im_end|>\n"
                "<|im_start|>assistant\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\n<tool_response>\n22C\n</tool_response>\n<tool_response>\n18C\n</tool_response>"
                "<|im_end|>\n"
                "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    /* tools and no system message: the block starts without content */
    expect_chat(q, "[{\"role\":\"user\",\"content\":\"Hi\"}]", "[{\"name\":\"f\"}]", NULL, true, NULL,
                "<|im_start|>system\n# Tools\n\nYou may call one or more functions to assist with the user "
                "query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
                "{\"name\": \"f\"}\n</tools>\n\nFor each function call, return a json "
                "object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
                "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    free(q);
}

/* A Llama-3.1/3.2-style template written for this test from the format of
 * arch-dense.md §7.2 (system block with the knowledge/today dates, trimmed
 * contents, header/eot framing); exercises `messages[1:]`, `| trim`,
 * `is defined`, strftime_now and bos_token. */
static const char llama31_like[] =
    "{{- bos_token }}\n"
    "{%- if not date_string is defined %}\n"
    "    {%- if strftime_now is defined or use_strftime %}\n"
    "        {%- set date_string = strftime_now('%d %b %Y') %}\n"
    "    {%- else %}\n"
    "        {%- set date_string = '26 Jul 2024' %}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content'] | trim %}\n"
    "    {%- set messages = messages[1:] %}\n"
    "{%- else %}\n"
    "    {%- set system_message = '' %}\n"
    "{%- endif %}\n"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}\n"
    "{%- if tools is not none and tools is defined %}{{- 'Environment: ipython\\n' }}{%- endif %}\n"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}\n"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}\n"
    "{{- system_message }}\n"
    "{{- '<|eot_id|>' }}\n"
    "{%- for message in messages %}\n"
    "    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
    "'<|eot_id|>' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}\n"
    "{%- endif %}\n";

static void llama3_formats(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    /* 3.1: fixed date; the leading <|begin_of_text|> is stripped (the tokenizer adds BOS) */
    expect_chat(llama31_like,
                "[{\"role\":\"system\",\"content\":\" Be brief. \"},{\"role\":\"user\",\"content\":\"  Hi\\n\"}]",
                NULL, NULL, true, "<|begin_of_text|>",
                "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
                "Today Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* 3.2: the date from strftime_now (pinned), no system message, tools → ipython */
    expect_chat(llama31_like, "[{\"role\":\"user\",\"content\":\"Hi\"}]", "[]", "{\"use_strftime\": true}", false,
                "<|begin_of_text|>",
                "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
                "Cutting Knowledge Date: December 2023\nToday Date: 05 Mar 2025\n\n<|eot_id|>"
                "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
    /* 3.0-style per-message format, the built-in "llama3" of llama-chat.cpp */
    expect_chat("{% for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content|trim "
                "+ '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
                "[{\"role\":\"user\",\"content\":\" a \"},{\"role\":\"assistant\",\"content\":\"b\"}]", NULL, NULL, true,
                "<|begin_of_text|>",
                "<|start_header_id|>user<|end_header_id|>\n\na<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\nb<|eot_id|>"
                "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Constructs of other well-known template families, written for this test:
 * role alternation checks, a role renamed through a loop-scoped set, a
 * namespace flag across turns, reasoning stripped with split('</think>'). */
static void other_template_idioms(void)
{
    const char *alternate =
        "{{ bos_token }}{% for message in messages %}"
        "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% if message['role'] == 'assistant' %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}"
        "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}";
    expect_chat(alternate,
                "[{\"role\":\"user\",\"content\":\" Hi \"},{\"role\":\"assistant\",\"content\":\"Yo\"},"
                "{\"role\":\"user\",\"content\":\"Q\"}]",
                NULL, NULL, false, "<bos>",
                "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
                "<start_of_turn>user\nQ<end_of_turn>\n<start_of_turn>model\n");
    json_t *m = json_loads("[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"}]", 0, NULL);
    char *out = NULL;
    struct err e;
    int rc = chat_render(alternate, m, NULL, true, "<bos>", NULL, NULL, &out, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "Conversation roles must alternate"), "rc %d '%s'", rc, e.msg);
    free(out);
    json_decref(m);

    const char *deepseek_like =
        "{% set ns = namespace(is_first=true, system='') %}"
        "{% for message in messages %}{% if message['role'] == 'system' %}{% set ns.system = message['content'] %}"
        "{% endif %}{% endfor %}{{ bos_token }}{{ ns.system }}"
        "{% for message in messages %}"
        "{% if message['role'] == 'user' %}{{ '<|User|>' + message['content'] }}{% set ns.is_first = false %}"
        "{% elif message['role'] == 'assistant' %}{% set content = message['content'] %}"
        "{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}"
        "{{ '<|Assistant|>' + content + '<|end|>' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt and not ns.is_first %}{{ '<|Assistant|><think>\\n' }}{% endif %}";
    expect_chat(deepseek_like,
                "[{\"role\":\"system\",\"content\":\"S.\"},{\"role\":\"user\",\"content\":\"1+1?\"},"
                "{\"role\":\"assistant\",\"content\":\"<think>add</think>2\"},{\"role\":\"user\",\"content\":\"2+2?\"}]",
                NULL, NULL, true, "<BOS>",
                "S.<|User|>1+1?<|Assistant|>2<|end|><|User|>2+2?<|Assistant|><think>\n");
}

static void chatml_default(void)
{
    /* §7.1: llama.cpp's chatml fallback, used when a GGUF has no template */
    expect_chat(NULL, "[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"U\"}]", NULL, NULL,
                true, "<s>", "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
}

/* The tokenizer.chat_template string of a GGUF, found by key (enough for
 * the small shared vocab files; the full parser lives in worker/gguf). */
static char *gguf_template(const char *path)
{
    size_t n = 0;
    unsigned char *d = (unsigned char *)check_read_file(path, &n);
    char *out = NULL;
    if (d) {
        static const char key[] = "tokenizer.chat_template";
        unsigned char *k = memmem(d, n, key, sizeof key - 1);
        if (k && k + sizeof key - 1 + 12 <= d + n) {
            unsigned char *p = k + sizeof key - 1;
            uint32_t type;
            uint64_t len;
            memcpy(&type, p, 4);
            memcpy(&len, p + 4, 8);
            if (type == 8 && p + 12 + len <= d + n && (out = malloc(len + 1))) {
                memcpy(out, p + 12, len);
                out[len] = 0;
            }
        }
    }
    free(d);
    return out;
}

static void phi3_from_gguf(void)
{
    const char *dir = check_shared_dir();
    if (!dir)
        SKIP("../shared/data not present");
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-phi-3.gguf", dir);
    char *t = gguf_template(path);
    if (!t)
        SKIP("ggml-vocab-phi-3.gguf has no readable chat template");
    expect_chat(t,
                "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\",\"content\":\"Yo\"},"
                "{\"role\":\"user\",\"content\":\"Q\"}]",
                NULL, NULL, false, "<s>",
                "<s><|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|>\n<|user|>\nQ<|end|>\n<|assistant|>\n");
    free(t);
}

static void message_checks(void)
{
    struct err e;
    json_t *out = NULL;
    const char *bad[][2] = {
        {"{}", "'messages' must be an array"},
        {"[]", "must not be empty"},
        {"[1]", "messages[0] must be an object"},
        {"[{\"content\":\"x\"}]", "messages[0].role must be a string"},
        {"[{\"role\":\"user\",\"content\":5}]", "messages[0].content must be a string or an array"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]", "'image_url' is not supported"},
        {"[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", "messages[0].content[0].text must be a string"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *m = json_loads(bad[i][0], JSON_DECODE_ANY, NULL);
        int rc = chat_check_messages(m, &out, &e);
        CHECK(rc == ERR_INVALID, "%s accepted", bad[i][0]);
        if (rc)
            CHECK(strstr(e.msg, bad[i][1]) != NULL, "%s: '%s'", bad[i][0], e.msg);
        json_decref(m);
        json_decref(out);
        out = NULL;
    }
    /* a template error surfaces with its message (the gateway returns it as 400) */
    json_t *m = json_loads("[{\"role\":\"tool\",\"content\":\"x\"}]", 0, NULL);
    char *txt = NULL;
    int rc = chat_render("{% if messages[0].role == 'tool' %}{{ raise_exception('Conversation roles must alternate') }}"
                         "{% endif %}",
                         m, NULL, true, NULL, NULL, NULL, &txt, &e);
    CHECK(rc == ERR_INVALID && strstr(e.msg, "Conversation roles must alternate"), "rc %d '%s'", rc, e.msg);
    free(txt);
    rc = chat_render("{% call foo() %}{% endcall %}", m, NULL, true, NULL, NULL, NULL, &txt, &e);
    CHECK(rc == ERR_UNSUPPORTED && strstr(e.msg, "unsupported statement '{% call %}'"), "rc %d '%s'", rc, e.msg);
    free(txt);
    json_decref(m);
}

/* Random templates from template-ish fragments: every one either renders or
 * fails with a message — no crash, no hang (run under `make asan`). */
static void fuzz_no_crash(void)
{
    static const char *const frag[] = {
        "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " elif ", " else ", " endif ",
        " for ", " in ", " endfor ", " set ", " macro ", " endmacro ", " x ", " m ", " messages ", " loop.index ",
        "(", ")", "[", "]", "{", "}", ",", ":", ".", "|", " trim ", " tojson ", " length ", " is ", " not ",
        " defined ", " string ", " and ", " or ", "~", "+", "-", "*", "/", "//", "%", "**", "==", "<", "'a'",
        "\"b\"", "'", "\"", "1", "2.5", " none ", " true ", "namespace(", "range(", "raise_exception(",
        ".split(", ".strip(", "::-1", " items() ", "ns.k", " = ", "text\n", "  ", "\\", "é", " break ",
    };
    unsigned long long seed = 0x9e3779b97f4a7c15ull;
    json_t *vars = json_loads("{\"x\": \"str\", \"m\": [1, {\"a\": [2]}], \"messages\": "
                              "[{\"role\": \"user\", \"content\": \"hi\"}]}", 0, NULL);
    int ok = 0, failed = 0;
    for (int t = 0; t < 4000; t++) {
        char src[1024];
        size_t n = 0;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int parts = 1 + (int)((seed >> 33) % 24);
        for (int k = 0; k < parts; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const char *f = frag[(seed >> 33) % (sizeof frag / sizeof frag[0])];
            size_t l = strlen(f);
            if (n + l + 1 >= sizeof src)
                break;
            memcpy(src + n, f, l);
            n += l;
        }
        src[n] = 0;
        struct jinja_tmpl *tp = NULL;
        struct err e;
        char *out = NULL;
        int rc = jinja_parse(&tp, src, n, &e);
        if (!rc) {
            struct jinja_opts o = {.now = PINNED_NOW, .max_output = 1 << 16, .max_steps = 10000};
            rc = jinja_render(tp, vars, &o, &out, NULL, &e);
        }
        if (rc) {
            failed++;
            CHECK(e.msg[0] != 0 && e.code == rc, "template '%s' failed without a message", src);
        } else {
            ok++;
        }
        free(out);
        jinja_free(tp);
    }
    json_decref(vars);
    CHECK(ok > 50 && failed > 50, "fuzz mix: %d rendered, %d failed", ok, failed);
}

/* Every case of tests/golden/jinja_cases.json: outputs of Python's Jinja2
 * configured as Hugging Face renders chat templates (the reference
 * implementation; tests/golden/gen_jinja_goldens.py wrote them). */
static void jinja2_goldens(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    json_error_t je;
    json_t *doc = json_load_file("tests/golden/jinja_cases.json", 0, &je);
    if (!doc)
        SKIP("tests/golden/jinja_cases.json missing");
    size_t i;
    json_t *cs;
    int n = 0;
    json_array_foreach(json_object_get(doc, "cases"), i, cs) {
        const char *name = json_string_value(json_object_get(cs, "name"));
        const char *file = json_string_value(json_object_get(cs, "template_file"));
        char *src = NULL;
        if (file) {
            char path[512];
            snprintf(path, sizeof path, "tests/golden/%s", file);
            src = check_read_file(path, NULL);
        } else {
            src = strdup(json_string_value(json_object_get(cs, "template")));
        }
        CHECK(src != NULL, "%s: no template", name);
        if (!src)
            continue;
        struct jinja_tmpl *t = NULL;
        struct err e;
        char *out = NULL;
        int rc = jinja_parse(&t, src, strlen(src), &e);
        if (!rc) {
            struct jinja_opts o = {.now = PINNED_NOW};
            rc = jinja_render(t, json_object_get(cs, "vars"), &o, &out, NULL, &e);
        }
        json_t *want = json_object_get(cs, "expected");
        if (want) {
            CHECK(rc == 0, "%s: failed: %s", name, e.msg);
            if (!rc)
                CHECK(!strcmp(out, json_string_value(want)), "%s:\n#   got  [%s]\n#   want [%s]", name, out,
                      json_string_value(want));
        } else {
            CHECK(rc != 0 && e.msg[0], "%s: rendered '%s'; Jinja2 fails with %s", name, out ? out : "",
                  json_string_value(json_object_get(cs, "error")));
        }
        free(out);
        jinja_free(t);
        free(src);
        n++;
    }
    CHECK(n >= 40, "only %d golden cases", n);
    json_decref(doc);
}

int main(void)
{
    RUN(arithmetic_and_literals);
    RUN(indexing_and_slicing);
    RUN(statements);
    RUN(whitespace_control);
    RUN(filters_tests_methods);
    RUN(globals);
    RUN(errors);
    RUN(qwen3_spec_example);
    RUN(qwen3_history_and_reasoning);
    RUN(qwen3_tools);
    RUN(llama3_formats);
    RUN(chatml_default);
    RUN(other_template_idioms);
    RUN(phi3_from_gguf);
    RUN(message_checks);
    RUN(fuzz_no_crash);
    RUN(jinja2_goldens);
    CHECK_EXIT();
}
