#!/bin/bash
# test_anthropic_sdk.sh — the official Anthropic Node SDK (@anthropic-ai/sdk,
# pinned in tests/anthropic_sdk/install.sh) as a real client of the Messages
# API, twice: over the gateway's HTTP layer on the fake backend
# (build/tests/tools/fake_gateway: scripted Qwen tool calls → tool_use blocks,
# the tool_result follow-up) and over `llm170 serve --model stories260K.gguf`
# (create, the SDK's stream helper against the greedy reply, countTokens,
# stop_sequences). Both check the SDK's error classes (wrong key, bad block,
# unknown model). Each half SKIPs with the reason while a piece is missing
# (node/npm, the registry, a binary, the model).
set -u
cd "$(dirname "$0")/.."
BIN=${LLM170_BIN:-$PWD/bin}
BUILD=${LLM170_BUILD:-$PWD/build}
SHARED=${LLM170_SHARED:-../shared/data}
MODEL=$SHARED/models/stories260K.gguf
TOOL=$BUILD/tests/tools/fake_gateway

SDK=$(bash tests/anthropic_sdk/install.sh 2>/tmp/llm170-asdk-install.$$) || {
    echo "skip - anthropic_sdk: $(cat /tmp/llm170-asdk-install.$$)"; rm -f /tmp/llm170-asdk-install.$$; exit 0; }
rm -f /tmp/llm170-asdk-install.$$

RUN=$(mktemp -d)
fpid= spid=
cleanup() {
    exec 9>&- 2>/dev/null
    [ -n "$spid" ] && kill -TERM "$spid" 2>/dev/null
    for _ in $(seq 100); do
        alive=0
        for p in $fpid $spid; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    for p in $fpid $spid; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT
rc=0

# ---- the fake backend
if [ -x "$TOOL" ]; then
    KEY=sk-fake-anth-$$
    mkfifo "$RUN/fifo"
    # the tool serves until its stdin closes: hold the fifo open on fd 9
    "$TOOL" --api-key "$KEY" <"$RUN/fifo" >"$RUN/fake.out" 2>&1 &
    fpid=$!
    exec 9>"$RUN/fifo"
    for _ in $(seq 50); do grep -q '^port ' "$RUN/fake.out" 2>/dev/null && break; sleep 0.1; done
    port=$(sed -n 's/^port //p' "$RUN/fake.out")
    if [ -z "$port" ]; then
        echo "not ok - anthropic_sdk_fake_started"; sed 's/^/#   /' "$RUN/fake.out"; rc=1
    else
        BASE_URL=http://127.0.0.1:$port API_KEY=$KEY SDK_DIR=$SDK FAKE=1 \
            timeout 120 node tests/anthropic_sdk/e2e.mjs || rc=1
    fi
    exec 9>&-
    wait "$fpid" 2>/dev/null
    fpid=
else
    echo "skip - anthropic_sdk_fake: $TOOL not built"
fi

# ---- llm170 serve on stories260K
serve_skip() { echo "skip - anthropic_sdk_serve: $1"; exit $rc; }
[ -f "$MODEL" ] || serve_skip "$MODEL not present"
for p in llm170 llm170d llm170-worker llm170-gateway; do
    [ -x "$BIN/$p" ] || serve_skip "$BIN/$p is not built yet"
done
PORT=$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
KEY=sk-llm170-anth-$$
export XDG_RUNTIME_DIR=$RUN LLM170_SOCKET=ipc://$RUN/llm170d.sock   # a private daemon socket
"$BIN/llm170" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" --slots 2 --api-key "$KEY" \
    >"$RUN/serve.log" 2>&1 &
spid=$!
up=0
for _ in $(seq 600); do
    kill -0 "$spid" 2>/dev/null || break
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && { up=1; break; }
    sleep 0.1
done
if [ "$up" != 1 ]; then
    echo "not ok - anthropic_sdk_serve_started"
    tail -20 "$RUN/serve.log" | sed 's/^/#   /'
    exit 1
fi
BASE_URL=http://127.0.0.1:$PORT API_KEY=$KEY SDK_DIR=$SDK \
    timeout 300 node tests/anthropic_sdk/e2e.mjs || rc=1
exit $rc
