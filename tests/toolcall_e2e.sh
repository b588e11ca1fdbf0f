#!/bin/bash
# toolcall_e2e.sh — tool_choice through the whole path (gateway → llm170d →
# worker → chat template → model → gateway's tool-call reading), on
# stories260K with Qwen3's tool-calling template put in (build/tests/tools/settmpl).
# The model cannot call tools, so what is checked is the part that does not
# depend on its skill: with tool_choice naming a function, the worker writes
# the start of a call (<tool_call>\n{"name": "get_weather", "arguments": )
# into the assistant's turn and sends it in front of the model's text, so
# the reply (streamed or not) starts with it — and, as the model's arguments
# are not JSON, the text comes back as content with finish_reason "stop";
# without tool_choice nothing is prefilled.
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

# auto: nothing prefilled
r=$(chat '')
content=$(jq -r '.choices[0].message.content // ""' <<<"$r")
if [ "${content:0:11}" != "<tool_call>" ] && [ -n "$content" ]; then ok toolcall_e2e_auto_not_prefilled
else bad toolcall_e2e_auto_not_prefilled "reply: $r"; fi
exit $rc
