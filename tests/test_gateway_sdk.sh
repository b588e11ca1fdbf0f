#!/bin/bash
# test_gateway_sdk.sh — the official OpenAI Node SDK against the gateway's HTTP
# layer over the fake backend (build/tests/tools/fake_gateway): SSE parsing,
# error objects, auth, aborts as a real client sees them. The same script runs
# against the real daemon in tests/test_openai_sdk.sh.
set -u
cd "$(dirname "$0")/.."
BUILD=${LLM170_BUILD:-$PWD/build}
TOOL=$BUILD/tests/tools/fake_gateway
[ -x "$TOOL" ] || { echo "skip - gateway_sdk: $TOOL not built"; exit 0; }
SDK=$(bash tests/openai_sdk/install.sh 2>/tmp/llm170-sdk-install.$$) || {
    echo "skip - gateway_sdk: $(cat /tmp/llm170-sdk-install.$$)"; rm -f /tmp/llm170-sdk-install.$$; exit 0; }
rm -f /tmp/llm170-sdk-install.$$
KEY=sk-fake-$$
fifo=$(mktemp -u)
mkfifo "$fifo"
# the tool serves until its stdin closes: hold the fifo open on fd 9
"$TOOL" --api-key "$KEY" <"$fifo" >"$fifo.out" 2>&1 &
pid=$!
exec 9>"$fifo"
cleanup() { exec 9>&-; wait "$pid" 2>/dev/null; rm -f "$fifo" "$fifo.out"; }
trap cleanup EXIT
for _ in $(seq 50); do grep -q '^port ' "$fifo.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's/^port //p' "$fifo.out")
[ -n "$port" ] || { echo "not ok - gateway_sdk: fake_gateway did not start: $(cat "$fifo.out")"; exit 1; }
BASE_URL=http://127.0.0.1:$port API_KEY=$KEY SDK_DIR=$SDK FAKE=1 MODEL=fake-model \
    timeout 300 node tests/openai_sdk/e2e.mjs
