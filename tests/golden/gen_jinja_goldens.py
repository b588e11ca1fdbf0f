#!/usr/bin/env python3
"""gen_jinja_goldens.py — expected renderings for tests/test_jinja.c from the
reference implementation, Python's Jinja2, configured the way Hugging Face
renders chat templates (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loop controls, its tojson, raise_exception, strftime_now).

Run by hand when cases change (needs `jinja2`, e.g. Debian's python3-jinja2):
    python3 tests/golden/gen_jinja_goldens.py > tests/golden/jinja_cases.json
The C test only reads the JSON; it never runs Python.
"""
import datetime
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
NOW = datetime.datetime(2025, 3, 5, 12, 0, 0)  # the test pins strftime_now to this


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: NOW.strftime(fmt)
    return env


QWEN3 = open(os.path.join(HERE, "qwen3.chat_template.jinja"), encoding="utf-8").read()

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city — «now»",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}]

qwen3_cases = [
    ("qwen3_single_turn", {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True}),
    ("qwen3_no_thinking", {"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": True,
                           "enable_thinking": False}),
    ("qwen3_no_gen_prompt", {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}],
                             "add_generation_prompt": False}),
    ("qwen3_multi_turn_reasoning", {"messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nfirst thoughts\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2", "reasoning_content": "second thoughts"},
        {"role": "user", "content": "Q3 with unicode: café, 日本, 🙂"}], "add_generation_prompt": True}),
    ("qwen3_last_assistant_kept", {"messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "<think>r</think>partial"}], "add_generation_prompt": False}),
    ("qwen3_tools_full", {"messages": [
        {"role": "system", "content": "You are X."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "content": "22C"},
        {"role": "tool", "content": "18C"},
        {"role": "assistant", "content": "Paris 22C, Rome 18C."},
        {"role": "user", "content": "<tool_response>\nnot a query\n</tool_response>"}],
        "tools": TOOLS, "add_generation_prompt": True, "enable_thinking": False}),
    ("qwen3_tools_no_system", {"messages": [{"role": "user", "content": "Hi"}], "tools": TOOLS,
                               "add_generation_prompt": True}),
    ("qwen3_system_midway", {"messages": [
        {"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "user", "content": "c"}],
        "add_generation_prompt": True}),
]

# language cases: template + variables; expected output (or error) from Jinja2
lang_cases = [
    ("arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 10 / 4 }}", {}),
    ("floats", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 0.00001 }} {{ 2.5e-3 }} {{ 123456.5 }} {{ 1e16 }} {{ 1e15 }} {{ -0.0 }}", {}),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 2.5 ~ [1, 'x'] }}", {}),
    ("repr", "{{ ['x', \"it's\", 1, 2.0, none, true, {'k': 'v'}] }}|{{ {'a': [1, {'b': none}]} }}", {}),
    ("escapes", "{{ 'a\\nb\\t\\\\c' }}|{{ \"q\\\"q\" }}|{{ '\\u00e9' }}", {}),
    ("slices", "{{ m[::-1] }}|{{ m[1:3] }}|{{ m[-1] }}|{{ m[:-2] }}|{{ m[::2] }}|{{ m[5:] }}|{{ s[1:3] }}|{{ s[::-1] }}",
     {"m": ["a", "b", "c", "d"], "s": "héllo"}),
    ("loops", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.length }},{% endfor %}",
     {"xs": [1, 2, 3]}),
    ("loop_else_filter", "{% for i in [] %}x{% else %}empty{% endfor %}|{% for i in range(7) if i is odd %}{{ i }}{{ loop.length }}{% endfor %}", {}),
    ("loop_controls", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
    ("dict_loops", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}|{{ d|length }}",
     {"d": {"z": 1, "a": [2], "m": None}}),
    ("scoping", "{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}", {}),
    ("namespace", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("ifs", "{% if 0 %}a{% elif '' %}b{% elif [] %}c{% elif {} %}d{% elif none %}e{% elif 'x' %}f{% endif %}{% if not undefined_thing %}g{% endif %}", {}),
    ("macro", "{% macro tag(name, attrs={}, close=true) %}<{{ name }}{% for k, v in attrs.items() %} {{ k }}=\"{{ v }}\"{% endfor %}>{% if close %}</{{ name }}>{% endif %}{% endmacro %}{{ tag('a', {'href': 'x'}) }}{{ tag('br', close=false) }}", {}),
    ("set_block", "{% set x %}  hi {{ 1 + 1 }}\n{% endset %}[{{ x }}]", {}),
    ("whitespace", "a  {%- if true -%}  b  {%- endif -%}  c\n  {% if true %}\n  y\n  {% endif %}\nz\n{# note #}\nw {{- ' v ' -}} u", {}),
    ("lstrip_plus", "x\n    {%+ if true %}k{% endif %}\n   {% for i in [1] %}\n{{ i }}\n   {% endfor %}\nend", {}),
    ("string_methods", "{{ '  a b  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\\n\\nq\\n'.lstrip('\\n') }}|{{ 'q\\n\\n '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a b  c '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'Hello'.startswith('He') }}{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'hello world'.title() }}|{{ 'aBc'.upper() }}{{ 'aBc'.lower() }}|{{ 'a-b-c'.replace('-', '+') }}|{{ 'abcb'.find('b') }}{{ 'abc'.find('z') }}|{{ 'abcb'.count('b') }}", {}),
    ("filters", "{{ [3, 1, 2]|sort|join(',') }}|{{ [3, 1, 2]|sort(reverse=true)|list }}|{{ 'abc'|length }}|{{ [1, 2]|first }}{{ [1, 2]|last }}|{{ none|default('d') }}{{ missing|default('u') }}{{ ''|default('e', true) }}|{{ '  t '|trim }}|{{ 'Ab'|lower }}{{ 'Ab'|upper }}|{{ [1, 2, 2, 3]|unique|list }}|{{ [1, 2]|reverse|list }}|{{ 'ab'|reverse }}|{{ 'a\\nb'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}|{{ 3.7|int }}{{ '12'|int }}{{ 'x'|int }}|{{ 2|float }}|{{ -3|abs }}|{{ [1, 2.5]|sum }}|{{ 'a b  c'|wordcount }}", {}),
    ("select_map", "{{ xs|map(attribute='a')|list }}|{{ xs|selectattr('a', 'equalto', 2)|list|length }}|{{ xs|rejectattr('a', 'odd')|map(attribute='a')|join(',') }}|{{ ['a', 'b']|map('upper')|join }}|{{ [0, 1, '', 'x']|select|list }}|{{ xs|map(attribute='missing', default='d')|list }}",
     {"xs": [{"a": 1}, {"a": 2}, {"a": 3}]}),
    # (tuples print as lists here: Python's tuple repr is the one thing not modelled)
    ("dict_methods", "{{ d.get('a') }}{{ d.get('z', 'dflt') }}{{ d.get('z') }}|{{ d.keys()|list }}|{{ d.values()|list }}|{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %}|{% for k, v in d|items %}{{ k }}{{ v }}{% endfor %}",
     {"d": {"b": 2, "a": 1}}),
    ("tests", "{{ x is defined }}{{ y is none }}{{ 'a' is string }}{{ 3 is odd }}{{ 4 is even }}{{ 4 is divisibleby 2 }}{{ 3 is number }}{{ 3.0 is float }}{{ 3 is integer }}{{ x is not mapping }}{{ {} is mapping }}{{ false is false }}{{ true is true }}{{ [1] is iterable }}{{ 'a' is sequence }}{{ nope is undefined }}{{ 'ab' is lower }}{{ 2 is in [1, 2] }}{{ 1 is eq 1 }}{{ 1 is ne 2 }}{{ 1 is lt 2 }}{{ x is sameas 1 }}",
     {"x": 1, "y": None}),
    ("tojson", "{{ v|tojson }}|{{ v|tojson(indent=2) }}|{{ v|tojson(separators=(',', ':')) }}|{{ v|tojson(ensure_ascii=true) }}|{{ v|tojson(sort_keys=true) }}|{{ 'x\\u0001\"'|tojson }}",
     {"v": {"z": [1, 2.5, True, None, "é\n"], "a": {}, "b": []}}),
    ("comparisons", "{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 'abc' < 'abd' }}{{ [1, 2] == [1, 2] }}{{ none == none }}{{ 1 == '1' }}{{ 2 > 1.5 }}{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 'z' not in 'abc' }}", {}),
    ("logic", "{{ 1 < 2 and 'b' or 'c' }}|{{ 0 or '' or 'last' }}|{{ not 0 }}|{{ 'y' if 1 > 2 else 'n' }}|{{ 'z' if false }}|{{ (1, 2)|list }}|{{ (1,)|length }}", {}),
    ("percent_format", "{{ '%s is %d (%.1f%%)' % ('Al', 30, 12.345) }}|{{ 'hi %s' % 'you' }}|{{ '%s-%s'|format(1, 'b') }}|{{ '%05d|%x' % (42, 255) }}", {}),
    ("strftime", "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d') }}", {}),
    ("str_ops", "{{ 'ab' * 3 }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}|{{ 'x'|string ~ 5|string }}|{{ 'abc'[1] }}|{{ 'abc'[-1] }}", {}),
    ("undefined_ops", "[{{ nope }}]{{ nope|length }}{{ nope is defined }}{% for x in nope %}x{% endfor %}{{ d.missing is defined }}",
     {"d": {}}),
    ("precedence", "{{ x is string and x|length > 2 }}|{{ not x is none }}|{{ -1|abs }}|{{ 'a' if n == 1 else 'b' if n == 2 else 'c' }}|{{ (1 + 2) ~ 3 }}|{{ 'a' ~ (1 + 2) }}|{{ 2 * 3 ** 2 }}|{{ (1 + 2) * 3 }}|{{ 10 - 2 - 3 }}",
     {"x": "abc", "n": 2}),
    ("loop_extras", "{% for m in ms|selectattr('role', 'equalto', 'user') %}{{ m.content }}{% endfor %}|{% for i in [1, 2, 3] %}{{ loop.previtem is defined }}{{ loop.nextitem|default('-') }}{{ loop.cycle('o', 'e') }} {% endfor %}",
     {"ms": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}),
    ("literals", "{{ {'a': 1,}|length }}|{{ [1, 2, 3][1:] }}|{{ range(3)|list }}{{ range(1, 10, 3)|list }}|{{ '{{' }}x{{ '}}' }}|{{ \"a\" \"b\" }}|{{ 1 if true }}|{{ {'k': {'n': [1]}}['k']['n'][0] }}", {}),
    ("multiline_tags", "{%-\n  if x\n-%}\n  yes\n{%- endif\n%}|{{\n  x\n}}", {"x": 1}),
    ("err_raise", "{{ raise_exception('bad roles') }}", {}),
    ("err_add_types", "{{ 'a' + 1 }}", {}),
    ("err_undefined_attr", "{{ nope.attr }}", {}),
    ("err_div_zero", "{{ 1 // 0 }}", {}),
    ("err_syntax", "{% if %}x{% endif %}", {}),
    ("err_unclosed", "{% for x in y %}", {}),
    ("err_set_attr", "{% set d.x = 1 %}", {"d": {}}),
]


def render(env, src, variables):
    try:
        return {"expected": env.from_string(src).render(**variables)}
    except Exception as e:  # the expectation is only that it fails
        return {"error": type(e).__name__ + ": " + str(e)}


def main():
    env = make_env()
    out = []
    for name, v in qwen3_cases:
        case = {"name": name, "template_file": "qwen3.chat_template.jinja", "vars": v}
        case.update(render(env, QWEN3, v))
        out.append(case)
    for name, src, v in lang_cases:
        case = {"name": name, "template": src, "vars": v}
        case.update(render(env, src, v))
        out.append(case)
    json.dump({"generator": "tests/golden/gen_jinja_goldens.py with jinja2 " + jinja2.__version__,
               "now": NOW.isoformat(), "cases": out}, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
