#!/bin/bash
# toolcall_e2e.sh — tool_choice through the whole path (gateway → llm170d →
# worker → chat template → model → gateway's tool-call reading), on
# stories260K with Qwen3's tool-calling template put in (build/tests/tools/settmpl).
# The model cannot call tools by itself: with tool_choice naming a function,
# the worker writes the start of a call (<tool_call>\n{"name": "get_weather",
# "arguments": ) into the assistant's turn and sends it in front of the
# model's text, so the reply (streamed or not) starts with it; and the call
# grammar (worker/serve/toolgram.h) holds the rest to the function's
# parameters schema and the closing </tool_call>, so with room to finish,
# named and required requests sampled at temperature 1.0 come back as real
# tool calls whose arguments a validator here (python, written from the
# schemas below) accepts. Without tool_choice nothing is prefilled or
# constrained; response_format beside a forced call is refused.
set -u
cd "$(dirname "$0")/.."
BIN=${LLM170_BIN:-$PWD/bin}
BUILD=${LLM170_BUILD:-$PWD/build}
SHARED=${LLM170_SHARED:-../shared/data}
MODEL=$SHARED/models/stories260K.gguf
TMPL=tests/golden/qwen3.chat_template.jinja
skip() { echo "skip - toolcall_e2e: $1"; exit 0; }
[ -f "$MODEL" ] || skip "$MODEL not present"
[ -f "$TMPL" ] || skip "$TMPL not present"
for p in "$BIN/llm170d" "$BIN/llm170-worker" "$BIN/llm170-gateway" "$BUILD/tests/tools/settmpl"; do
    [ -x "$p" ] || skip "$p is not built yet"
done
command -v jq >/dev/null || skip "jq is not installed"

RUN=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT

"$BUILD/tests/tools/settmpl" "$MODEL" "$RUN/tools.gguf" "$TMPL" || { echo "not ok - toolcall_e2e_model"; exit 1; }
export XDG_RUNTIME_DIR=$RUN LLM170_SOCKET=ipc://$RUN/llm170d.sock
PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$BIN/llm170d" --socket "$LLM170_SOCKET" --model "$RUN/tools.gguf" --devices cpu --slots 2 >"$RUN/d.log" 2>&1 &
pids+=($!)
"$BIN/llm170-gateway" --listen "127.0.0.1:$PORT" --daemon "$LLM170_SOCKET" >"$RUN/g.log" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && { up=1; break; }
    sleep 0.1
done
if [ "$up" != 1 ]; then
    echo "# not healthy within 60 s:"; tail -5 "$RUN/d.log" "$RUN/g.log" | sed 's/^/#   /'
    echo "not ok - toolcall_e2e_started"
    exit 1
fi

rc=0
ok() { echo "ok - $1"; }
bad() { echo "# $2" | head -5; echo "not ok - $1"; rc=1; }
TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]'
PREFIX=$'<tool_call>\n{"name": "get_weather", "arguments": '
chat() { # extra fields → response body
    curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"tools\":$TOOLS,\"max_tokens\":6,\"temperature\":0$1}"
}

# named function: the reply starts with the call's opening
r=$(chat ',"tool_choice":{"type":"function","function":{"name":"get_weather"}}')
echo "# named: $(jq -c '.choices[0]' <<<"$r")"
content=$(jq -r '.choices[0].message.content // ""' <<<"$r")
calls=$(jq -r '.choices[0].message.tool_calls // [] | map(.function.name) | join(",")' <<<"$r")
if [ "${content:0:${#PREFIX}}" = "$PREFIX" ] || [ "$calls" = get_weather ]; then
    ok toolcall_e2e_named_prefilled
else
    bad toolcall_e2e_named_prefilled "reply: $r"
fi
# not JSON after the prefix (stories260K writes prose): content, and no "tool_calls" finish
fin=$(jq -r '.choices[0].finish_reason' <<<"$r")
if { [ -n "$calls" ] && [ "$fin" = tool_calls ]; } || { [ -z "$calls" ] && [ "$fin" != tool_calls ]; }; then
    ok toolcall_e2e_finish_reason
else
    bad toolcall_e2e_finish_reason "finish $fin with calls '$calls': $r"
fi

# the same streamed: the first content carries the prefix
s=$(curl -s -N "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"tools\":$TOOLS,\"max_tokens\":6,\"temperature\":0,\"stream\":true,\"tool_choice\":\"required\"}")
streamed=$(sed -n 's/^data: //p' <<<"$s" | grep -v '^\[DONE\]' | jq -rj '.choices[0].delta.content // ""')
PREFIX_ANY=$'<tool_call>\n{"name": "'
if [ "${streamed:0:${#PREFIX_ANY}}" = "$PREFIX_ANY" ] || grep -q '"tool_calls"' <<<"$s"; then
    ok toolcall_e2e_required_streamed
else
    bad toolcall_e2e_required_streamed "streamed: $streamed"
fi

# with room to finish, at temperature 1.0: real calls with valid arguments (tight schemas: bounded strings, no
# further members, so a model that rarely ends still closes its call)
TOOLS2='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":12},"unit":{"enum":["celsius","fahrenheit"]},"days":{"type":"integer"}},"required":["city","unit"],"additionalProperties":false}}},{"type":"function","function":{"name":"set_alarm","parameters":{"type":"object","properties":{"time":{"type":"object","properties":{"h":{"type":"integer"},"m":{"type":"integer"}},"required":["h","m"],"additionalProperties":false},"repeat":{"type":"array","items":{"enum":["mon","tue"]},"maxItems":2},"level":{"type":"number"}},"required":["time"],"additionalProperties":false}}}]'
# the reply's message on stdin; $1 the name every call must have ("" any), $2 the most calls, $3 "cut" when the
# reply may end in an unfinished call (content starting <tool_call>); prints what is wrong
validate() {
    python3 -c '
import json, sys
want, most, cut = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "cut"
m = json.load(sys.stdin)
def isint(v): return isinstance(v, int) and not isinstance(v, bool)
def isnum(v): return isinstance(v, (int, float)) and not isinstance(v, bool)
def weather(a):
    return set(a) <= {"city", "unit", "days"} and isinstance(a.get("city"), str) and len(a["city"]) <= 12 and \
        a.get("unit") in ("celsius", "fahrenheit") and ("days" not in a or isint(a["days"]))
def alarm(a):
    t = a.get("time")
    return set(a) <= {"time", "repeat", "level"} and isinstance(t, dict) and set(t) == {"h", "m"} and \
        isint(t["h"]) and isint(t["m"]) and ("level" not in a or isnum(a["level"])) and \
        ("repeat" not in a or (isinstance(a["repeat"], list) and len(a["repeat"]) <= 2 and
                               all(x in ("mon", "tue") for x in a["repeat"])))
calls = m.get("tool_calls") or []
if not 1 <= len(calls) <= most: print("%d calls: %s" % (len(calls), json.dumps(m))); sys.exit()
content = (m.get("content") or "").strip()
if content and not (cut and content.startswith("<tool_call>")): print("content beside the calls: %r" % m["content"]); sys.exit()
for c in calls:
    f = c["function"]
    if want and f["name"] != want: print("called %s, not %s" % (f["name"], want)); sys.exit()
    try: a = json.loads(f["arguments"])
    except Exception as e: print("arguments not JSON (%s): %s" % (e, f["arguments"])); sys.exit()
    ok = weather(a) if f["name"] == "get_weather" else alarm(a) if f["name"] == "set_alarm" else False
    if not isinstance(a, dict) or not ok: print("%s: arguments not valid: %s" % (f["name"], f["arguments"])); sys.exit()
' "$1" "$2" "${3:-}"
}
chat2() { # seed, extra fields → response body
    curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}],\"tools\":$TOOLS2,\"max_tokens\":1500,\"temperature\":1.0,\"seed\":$1$2}"
}
# (stories260K's context is 512 and it rarely ends: with parallel_tool_calls it writes calls until the context
# is full, so there the calls it finished are checked, and the cut one must be the last thing)
for mode in named required parallel; do
    case $mode in
    named) extra=',"tool_choice":{"type":"function","function":{"name":"get_weather"}},"parallel_tool_calls":false'
        want=get_weather; most=1 ;;
    required) extra=',"tool_choice":"required","parallel_tool_calls":false'; want=; most=1 ;;
    parallel) extra=',"tool_choice":"required"'; want=; most=16 ;;
    esac
    fails=
    for seed in 1 2 3 4 5 6; do
        r=$(chat2 $seed "$extra")
        fin=$(jq -r '.choices[0].finish_reason' <<<"$r")
        cut=; [ $mode = parallel ] && [ "$fin" = length ] && cut=cut
        why=$(jq -c '.choices[0].message' <<<"$r" | validate "$want" $most $cut)
        [ "$fin" = tool_calls ] || [ -n "$cut" ] || why="finish_reason $fin ${why}"
        [ -n "$why" ] && fails+="seed $seed: $why | "
    done
    echo "# $mode: last reply $(jq -c '.choices[0].message.tool_calls' <<<"$r" | head -c 300)"
    if [ -z "$fails" ]; then ok toolcall_e2e_${mode}_valid_calls; else bad toolcall_e2e_${mode}_valid_calls "$fails"; fi
done
# streamed, reassembled as an SDK does: the same kind of valid call
s=$(curl -s -N "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Alarm?\"}],\"tools\":$TOOLS2,\"max_tokens\":1500,\"temperature\":1.0,\"seed\":7,\"stream\":true,\"parallel_tool_calls\":false,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"set_alarm\"}}}")
msg=$(sed -n 's/^data: //p' <<<"$s" | grep -v '^\[DONE\]' | jq -s -c '
    [.[].choices[0].delta] as $d
    | {content: ([$d[].content // ""] | join("")),
       tool_calls: ([$d[].tool_calls // [] | .[]] | group_by(.index)
                    | map({function: {name: ([.[].function.name // ""] | join("")),
                                       arguments: ([.[].function.arguments // ""] | join(""))}}))}')
why=$(validate set_alarm 1 <<<"$msg")
if [ -z "$why" ]; then ok toolcall_e2e_streamed_valid_call; else bad toolcall_e2e_streamed_valid_call "$why: $msg"; fi
# one grammar a reply: response_format beside a forced call is refused
code=$(curl -s -o "$RUN/rf.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$TOOLS2,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}")
if [ "$code" = 400 ] && grep -q 'cannot be combined with tool_choice' "$RUN/rf.json"; then ok toolcall_e2e_response_format_refused
else bad toolcall_e2e_response_format_refused "HTTP $code: $(cat "$RUN/rf.json")"; fi
# a parameters schema the grammar cannot follow: a 400 naming the keyword (auto is not constrained: accepted)
ODD='[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"string","contentEncoding":"base64"}}}}}]'
code=$(curl -s -o "$RUN/odd.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$ODD,\"tool_choice\":\"required\",\"max_tokens\":4}")
code_auto=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$ODD,\"max_tokens\":4}")
if [ "$code" = 400 ] && grep -q contentEncoding "$RUN/odd.json" && [ "$code_auto" = 200 ]; then
    ok toolcall_e2e_unsupported_parameters_refused
else
    bad toolcall_e2e_unsupported_parameters_refused "required HTTP $code: $(cat "$RUN/odd.json"); auto HTTP $code_auto"
fi

# auto: nothing prefilled
r=$(chat '')
content=$(jq -r '.choices[0].message.content // ""' <<<"$r")
if [ "${content:0:11}" != "<tool_call>" ] && [ -n "$content" ]; then ok toolcall_e2e_auto_not_prefilled
else bad toolcall_e2e_auto_not_prefilled "reply: $r"; fi
exit $rc
