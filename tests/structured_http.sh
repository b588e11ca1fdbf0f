#!/bin/bash
# structured_http.sh — response_format over HTTP through the whole stack
# (`llm170 serve`: gateway → daemon → worker) on stories260K at temperature 1:
# json_schema outputs, streamed and not, parse and hold to their schema;
# json_object gives an object; an unsupported keyword is a 400 naming it.
# Real processes on a private socket; every wait bounded.
set -u
BIN=${LLM170_BIN:-bin}
SHARED=${LLM170_SHARED:-../shared/data}
MODEL=$SHARED/models/stories260K.gguf
ok() { echo "ok - $1"; }
notok() { echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else notok "$1"; fi; }
[ -x "$BIN/llm170-gateway" ] || { echo "skip - structured_http: gateway not built"; exit 0; }
command -v curl >/dev/null && command -v python3 >/dev/null || { echo "skip - structured_http: needs curl and python3"; exit 0; }
[ -r "$MODEL" ] || { echo "skip - structured_http: needs $MODEL (../shared/data absent)"; exit 0; }
T=$(mktemp -d /tmp/llm170-structured.XXXXXX)
SPID=
cleanup() { [ -n "$SPID" ] && kill -KILL "$SPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

port=$((20000 + RANDOM % 20000))
"$BIN/llm170" serve --model "$MODEL" --port "$port" --threads 2 --slots 4 --socket "ipc://$T/s.sock" 2>"$T/s.log" & SPID=$!
code=000
for _ in $(seq 150); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$port/health" 2>/dev/null); [ "$code" = 200 ] && break; sleep 0.1
done
if [ "$code" != 200 ]; then notok "structured_http: serve healthy"; sed 's/^/#   /' "$T/s.log"; exit 0; fi

# one schema: an object with an enum, a bounded integer-free number, a date and a bounded array
SCHEMA='{"type":"object","properties":{"color":{"enum":["red","green"]},"n":{"type":"integer"},"day":{"type":"string","format":"date"},"xs":{"type":"array","items":{"type":"boolean"},"minItems":1,"maxItems":3}},"required":["color","n","day","xs"],"additionalProperties":false}'
cat >"$T/check.py" <<'PY'
import json, re, sys
kind, path = sys.argv[1], sys.argv[2]
bad = []
for i, line in enumerate(open(path)):
    try:
        r = json.loads(line)
        if kind == "stream":
            text, finish = "", None
            for ev in r:
                ch = ev["choices"][0]
                text += ch.get("text") or ""
                finish = ch.get("finish_reason") or finish
        else:
            text, finish = r["choices"][0]["text"], r["choices"][0]["finish_reason"]
        v = json.loads(text)
        ok = finish == "stop" and isinstance(v, dict)
        if kind != "object":
            ok = ok and set(v) == {"color", "n", "day", "xs"} and v["color"] in ("red", "green") \
                and type(v["n"]) is int and re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", v["day"]) \
                and isinstance(v["xs"], list) and 1 <= len(v["xs"]) <= 3 and all(type(x) is bool for x in v["xs"])
        if not ok:
            bad.append("%d: finish %s: %s" % (i, finish, text[:200]))
    except Exception as e:
        bad.append("%d: %s: %s" % (i, e, line[:200]))
for b in bad[:5]:
    print("#   " + b)
sys.exit(1 if bad else 0)
PY
req() { # response_format, seed, stream
    printf '{"prompt":"Once upon a time","max_tokens":200,"temperature":1.0,"seed":%s,"stream":%s,"response_format":%s}' "$2" "$3" "$1"
}
: >"$T/plain"; : >"$T/stream"; : >"$T/object"
for s in 1 2 3 4 5 6; do
    curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "$(req "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"strict\":true,\"schema\":$SCHEMA}}" $s false)" |
        tr -d '\n' >>"$T/plain"; echo >>"$T/plain"
    # SSE: the data lines as one JSON array
    curl -s -N -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "$(req "{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"t\",\"schema\":$SCHEMA}}" $s true)" |
        sed -n 's/^data: //p' | grep -v '^\[DONE\]' | python3 -c 'import sys,json; print(json.dumps([json.loads(l) for l in sys.stdin if l.strip()]))' >>"$T/stream"
done
check "structured_http: json_schema answers parse and follow the schema" "python3 '$T/check.py' plain '$T/plain'"
check "structured_http: streamed json_schema answers too" "python3 '$T/check.py' stream '$T/stream'"
# json_object: an object; the small closed schema beside it (llama-server's form) keeps a temperature-1
# answer short (an open object lets the model write strings until max_tokens)
curl -s -m 30 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "$(req '{"type":"json_object","schema":{"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"],"additionalProperties":false}}' 7 false)" |
    tr -d '\n' >"$T/object"; echo >>"$T/object"
check "structured_http: json_object answers an object" "python3 '$T/check.py' object '$T/object'"
curl -s -m 30 -w ' %{http_code}' "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d "$(req '{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":{"a":{"type":"string","minProperties":1}}}}}' 1 false)" >"$T/bad"
check "structured_http: unsupported keyword is a 400 naming it" \
    "grep -q \"'minProperties'.*\\\"param\\\":\\\"response_format\\\".* 400\$\" '$T/bad'"

kill -INT "$SPID"; for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
wait "$SPID"; SPID=
