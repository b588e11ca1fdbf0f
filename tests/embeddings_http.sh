#!/bin/bash
# embeddings_http.sh — POST /v1/embeddings end to end: `llm170 serve` (daemon + worker + gateway) on the
# synthetic qwen3 of tests/golden/embed_synth-qwen3.json (pooling_type last in its GGUF): token inputs
# equal llama.cpp's vectors over HTTP, several inputs in one request (more than the gateway keeps in
# flight) each equal to the same input alone, float and base64 the same bits, dimensions cut and
# re-normalised, text input, and every refusal with its 400 and field. Needs ../shared, python3 with numpy
# (the model writer) and curl; SKIPs with the reason otherwise. Every process it starts is stopped.
set -u
cd "$(dirname "$0")/.."
. tests/oracle/lib.sh
BIN=${LLM170_BIN:-$PWD/bin}
skip() { echo "skip - embeddings_http: $1"; exit 0; }
SHARED=$(find_shared) || skip "../shared/data is absent"
PY=$(find_numpy_python) || skip "no python3 with numpy"
command -v curl >/dev/null || skip "no curl"
for p in llm170 llm170d llm170-worker llm170-gateway; do [ -x "$BIN/$p" ] || skip "$BIN/$p is not built"; done
GOLDEN=tests/golden/embed_synth-qwen3.json
T=$(mktemp -d /tmp/llm170-embed.XXXXXX)
pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
    rm -rf "$T"
}
trap cleanup EXIT
args=$("$PY" -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["model"]["args"]))' "$GOLDEN")
LLM170_SHARED=$SHARED "$PY" tests/oracle/synth.py "$args" "$T/m.gguf" >/dev/null 2>&1 || { echo "not ok - embeddings_http_model"; exit 1; }
want=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["sha256"])' "$GOLDEN")
[ "$(sha256sum "$T/m.gguf" | cut -d' ' -f1)" = "$want" ] || skip "the synthetic model's sha256 differs from the golden's (tool drift?)"

port=$((20000 + RANDOM % 20000))
export XDG_RUNTIME_DIR=$T LLM170_SOCKET=ipc://$T/d.sock
"$BIN/llm170" serve --model "$T/m.gguf" --host 127.0.0.1 --port "$port" --slots 4 >"$T/serve.log" 2>&1 &
pid=$!
up=0
for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || break
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && { up=1; break; }
    sleep 0.1
done
if [ "$up" != 1 ]; then
    echo "not ok - embeddings_http_serve_started"
    tail -20 "$T/serve.log" | sed 's/^/#   /'
    exit 1
fi
echo "ok - embeddings_http_serve_started"
URL=http://127.0.0.1:$port timeout 300 python3 tests/scripts/embeddings_http.py "$GOLDEN"
rc=$?
[ -n "${EMBED_HTTP_HOLD:-}" ] && { echo "# serving on port $port"; sleep "$EMBED_HTTP_HOLD"; }
exit $rc
