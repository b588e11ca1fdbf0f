#!/bin/bash
# run.sh MODEL — what `make run` does after building: start the service on a
# model, show one completion through the HTTP API, then keep serving until Ctrl-C.
# MODEL defaults (in the Makefile) to ../shared/data/models/stories260K.gguf;
# without it, the project writes a small demo model of its own and says so.
set -eu
BIN=${BIN:-bin}
MODEL=${1:-}
PORT=${PORT:-8080}
PROMPT=${PROMPT:-Once upon a time}

if [ -z "$MODEL" ]; then
    MODEL=build/demo.gguf
    echo "llm170: ../shared/data/models/stories260K.gguf not found; writing a small demo model with random weights to $MODEL (its text is noise)"
    build/tests/tools/mkdemo "$MODEL"
fi
[ -r "$MODEL" ] || { echo "llm170: cannot open model '$MODEL'" >&2; exit 1; }

if [ ! -x "$BIN/llm170d" ] || [ ! -x "$BIN/llm170-gateway" ]; then
    # service programs not built: show the in-process engine instead
    echo "== in-process completion ($MODEL)"
    "$BIN/llm170" infer --model "$MODEL" --prompt "$PROMPT" --n-predict 48 | sed -n 's/.*"text":"\(.*\)"}$/\1/p' | tr -d '\n'
    echo
    exit 0
fi

echo "== starting llm170 serve on 127.0.0.1:$PORT with $MODEL"
"$BIN/llm170" serve --model "$MODEL" --host 127.0.0.1 --port "$PORT" &
SERVE=$!
trap 'kill $SERVE 2>/dev/null; wait $SERVE 2>/dev/null' EXIT INT TERM
for _ in $(seq 1 100); do
    curl -fs "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
    kill -0 $SERVE 2>/dev/null || { echo "llm170: the service exited during start-up" >&2; exit 1; }
    sleep 0.2
done
echo "== POST /v1/completions {\"prompt\": \"$PROMPT\", \"max_tokens\": 48}"
curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"$PROMPT\", \"max_tokens\": 48, \"temperature\": 0}"
echo
echo "== serving on http://127.0.0.1:$PORT (OpenAI API: /v1/chat/completions, /v1/completions); Ctrl-C stops"
if [ -t 0 ]; then wait $SERVE; fi
