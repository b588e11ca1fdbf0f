#!/bin/bash
# redteam/http.sh — HTTP framing and slow-client attacks on a real llm170-gateway
# (in front of a real llm170d serving stories260K, on a private socket and a free
# loopback port). Each case sends raw bytes over bash's /dev/tcp with a bounded
# wait, prints what it sent, and asserts the status line and that exactly one
# response came back (a second one would mean a smuggled request was served).
# Then 60 slowloris connections: /health must still answer from another client
# address, and the header deadline must close them.
# One line per case: ok - / not ok - / skip - (tests/redteam.sh passes them on).
set -u
trap "" PIPE # a server that closes early must not kill this script
cd "$(dirname "$0")/../.."
BIN=${LLM170_BIN:-$PWD/bin}
MODEL=${LLM170_REDTEAM_MODEL:-../shared/data/models/stories260K.gguf}
GW=$BIN/llm170-gateway
[ -x "$GW" ] && [ -x "$BIN/llm170d" ] || { echo "skip - redteam_http: $BIN/llm170-gateway or llm170d not built"; exit 0; }
[ -r "$MODEL" ] || { echo "skip - redteam_http: $MODEL absent"; exit 0; }
command -v curl >/dev/null || { echo "skip - redteam_http: curl not installed"; exit 0; }
command -v python3 >/dev/null || { echo "skip - redteam_http: python3 (free port) not installed"; exit 0; }
T=$(mktemp -d /tmp/llm170-rt-http.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; shift; for l in "$@"; do printf '#   %s\n' "$l"; done; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { local t=$EPOCHREALTIME; echo "${t/./}"; } # microseconds
HDR_TIMEOUT=3

"$BIN/llm170d" --socket "ipc://$T/d.sock" --model "$MODEL" --threads 1 --slots 2 --ctx 2048 2>"$T/d.log" &
pids+=($!)
PORT=$(free_port)
"$GW" --listen "127.0.0.1:$PORT" --daemon "ipc://$T/d.sock" --header-timeout "$HDR_TIMEOUT" 2>"$T/gw.log" &
GWPID=$!
pids+=($GWPID)
code=000
for _ in $(seq 150); do
    code=$(curl -s -o /dev/null -w '%{http_code}' -m 2 "http://127.0.0.1:$PORT/health" 2>/dev/null)
    [ "$code" = 200 ] && break
    sleep 0.1
done
if [ "$code" != 200 ]; then
    nok "redteam_http: gateway + llm170d healthy" "health $code" "$(tail -3 "$T/gw.log" "$T/d.log")"
    
# llm170 serve on that busy port: fails before loading the model, in one line
t0=$(now)
timeout 10 "$BIN/llm170" serve --model "$MODEL" --port "$PORT" --threads 1 --socket "ipc://$T/s2.sock" >/dev/null 2>"$T/serve.log"
rc=$?
t1=$(now)
ms=$(((t1 - t0) / 1000))
if [ "$rc" -eq 1 ] && [ "$ms" -lt 1000 ] && grep -q 'Address already in use' "$T/serve.log" && [ "$(wc -l <"$T/serve.log")" -eq 1 ]; then
    ok "http_serve_busy_port_fails ($ms ms: $(cat "$T/serve.log"))"
else
    nok http_serve_busy_port_fails "rc $rc after $ms ms: $(head -3 "$T/serve.log")"
fi
exit 0
fi

# raw NAME WANT BYTES: send BYTES (printf %b escapes) on a fresh connection, read
# until the server closes (at most 3 s), then assert the first status is WANT and
# exactly one status line came back, within the bound.
raw() {
    local name=$1 want=$2 bytes=$3 fd out t0 t1 n st
    printf '#   %s sends: %q\n' "$name" "$(printf '%b' "$bytes")"
    if ! exec {fd}<>"/dev/tcp/127.0.0.1/$PORT"; then
        nok "$name" "connect failed"
        return
    fi
    t0=$(now)
    printf '%b' "$bytes" >&"$fd" 2>/dev/null
    out=$(timeout 3 cat <&"$fd" 2>/dev/null | tr -d '\0'; echo "rc=${PIPESTATUS[0]}")
    local rc=${out##*rc=}
    out=${out%rc=*}
    t1=$(now)
    exec {fd}>&-
    n=$(printf '%s\n' "$out" | grep -c '^HTTP/1\.[01] [0-9][0-9][0-9]')
    st=$(printf '%s\n' "$out" | sed -n 's/^HTTP\/1\.[01] \([0-9][0-9][0-9]\).*/\1/p' | head -1)
    local ms=$(((t1 - t0) / 1000))
    if [ "${MHD_OWN:-}" ] && [ "${st:-none}" = "$want" ] && [ "$n" -eq 2 ] && [ "$rc" -ne 124 ]; then
        # libmicrohttpd rejects this before the gateway sees the request, and 0.9.75
        # writes its own 400's header block twice; status and close are right
        ok "$name ($st in $ms ms, closed)"
        echo "skip - ${name}_one_header_block: libmicrohttpd 0.9.75 answers this itself and sends its 400 header block twice (an upstream defect; the gateway never sees the request)"
    elif [ "${st:-none}" = "$want" ] && [ "$n" -eq 1 ] && [ "$rc" -ne 124 ]; then
        ok "$name ($st in $ms ms, one response, closed)"
    else
        nok "$name" "got status ${st:-none}, $n responses, $ms ms$([ "$rc" -eq 124 ] && echo ', still open after 3 s (hang)'); want $want, one response, closed"
    fi
}

H='Host: x\r\n'
# a valid request body: a server that gets the framing wrong answers it with a 200
B='{"prompt":"a","max_tokens":1}' # 29 bytes
raw http_valid_control 200 "GET /health HTTP/1.1\r\n${H}Connection: close\r\n\r\n"
raw http_duplicate_content_length 400 \
    "POST /v1/completions HTTP/1.1\r\n${H}Content-Type: application/json\r\nContent-Length: 29\r\nContent-Length: 29\r\n\r\n$B"
raw http_conflicting_content_length 400 \
    "POST /v1/completions HTTP/1.1\r\n${H}Content-Length: 29\r\nContent-Length: 60\r\n\r\n${B}GET /health HTTP/1.1\r\n${H}\r\n"
raw http_content_length_and_chunked 400 \
    "POST /v1/completions HTTP/1.1\r\n${H}Content-Length: 34\r\nTransfer-Encoding: chunked\r\n\r\n1d\r\n$B\r\n0\r\n\r\nGET /health HTTP/1.1\r\n${H}\r\n"
MHD_OWN=1 raw http_negative_content_length 400 \
    "POST /v1/completions HTTP/1.1\r\n${H}Content-Length: -1\r\n\r\n$B"
raw http_bare_cr_in_header 400 \
    "GET /health HTTP/1.1\r\n${H}X-Note: a\rX-Injected: b\r\nConnection: close\r\n\r\n"
raw http_nul_in_path 400 "GET /health%00.html HTTP/1.1\r\n${H}Connection: close\r\n\r\n"
raw http_nul_in_model_path 400 "GET /v1/models/x%00y HTTP/1.1\r\n${H}Connection: close\r\n\r\n"
raw http_unknown_transfer_encoding 501 \
    "POST /v1/completions HTTP/1.1\r\n${H}Transfer-Encoding: gzip\r\n\r\n$B"
raw http_chunked_then_unknown_encoding 501 \
    "POST /v1/completions HTTP/1.1\r\n${H}Transfer-Encoding: chunked, gzip\r\n\r\n1d\r\n$B\r\n0\r\n\r\n"

# 60 slowloris connections: a request line, then one header line a second, never
# the blank line. Each records when its writes start failing (the server closed it).
slow() { # i
    trap '' PIPE
    local fd t0 t1 k
    exec {fd}<>"/dev/tcp/127.0.0.1/$PORT" || { echo "-1" >"$T/slow.$1"; return; }
    t0=$(now)
    printf 'GET /health HTTP/1.1\r\nHost: x\r\n' >&"$fd"
    for k in $(seq 12); do
        sleep 1
        printf 'X-Slow-%d: y\r\n' "$k" >&"$fd" 2>/dev/null || break
    done
    t1=$(now)
    echo $(((t1 - t0) / 1000)) >"$T/slow.$1"
    exec {fd}>&-
}
echo "#   slowloris sends: 60 x 'GET /health HTTP/1.1\\r\\nHost: x\\r\\n' then 'X-Slow-N: y\\r\\n' once a second (header deadline ${HDR_TIMEOUT} s)"
spids=()
for i in $(seq 60); do slow "$i" & spids+=($!); done
sleep 1.5
# a client at another loopback address, while all 60 are open
t0=$(now)
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 --interface 127.0.0.2 "http://127.0.0.1:$PORT/health" 2>/dev/null)
t1=$(now)
ms=$(((t1 - t0) / 1000))
if [ "$code" = 200 ] && [ "$ms" -lt 2000 ]; then
    ok "http_health_beside_60_slowloris (200 in $ms ms)"
else
    nok http_health_beside_60_slowloris "health $code after $ms ms (bound 2000 ms)"
fi
for p in "${spids[@]}"; do wait "$p"; done
closed=0 longest=0
for i in $(seq 60); do
    v=$(cat "$T/slow.$i" 2>/dev/null || echo -1)
    [ "$v" -ge 0 ] && [ "$v" -lt $(((HDR_TIMEOUT + 3) * 1000)) ] && closed=$((closed + 1))
    [ "$v" -gt "$longest" ] && longest=$v
done
if [ "$closed" -eq 60 ]; then
    ok "http_slowloris_header_deadline (60 of 60 closed, the last after $longest ms; deadline ${HDR_TIMEOUT} s)"
else
    nok http_slowloris_header_deadline "$closed of 60 closed within $((HDR_TIMEOUT + 3)) s (longest $longest ms)"
fi
code=$(curl -s -o /dev/null -w '%{http_code}' -m 5 "http://127.0.0.1:$PORT/health" 2>/dev/null)
if [ "$code" = 200 ]; then ok "http_health_after_slowloris"; else nok http_health_after_slowloris "health $code"; fi

# a second gateway on the same port fails at once with one clear line
t0=$(now)
timeout 5 "$GW" --listen "127.0.0.1:$PORT" --daemon "ipc://$T/d.sock" >/dev/null 2>"$T/gw2.log"
rc=$?
t1=$(now)
ms=$(((t1 - t0) / 1000))
if [ "$rc" -eq 1 ] && [ "$ms" -lt 1000 ] && grep -q 'Address already in use' "$T/gw2.log" && [ "$(wc -l <"$T/gw2.log")" -eq 1 ]; then
    ok "http_second_gateway_same_port_fails ($ms ms: $(cat "$T/gw2.log"))"
else
    nok http_second_gateway_same_port_fails "rc $rc after $ms ms: $(head -3 "$T/gw2.log")"
fi

# llm170 serve on that busy port: fails before loading the model, in one line
t0=$(now)
timeout 10 "$BIN/llm170" serve --model "$MODEL" --port "$PORT" --threads 1 --socket "ipc://$T/s2.sock" >/dev/null 2>"$T/serve.log"
rc=$?
t1=$(now)
ms=$(((t1 - t0) / 1000))
if [ "$rc" -eq 1 ] && [ "$ms" -lt 1000 ] && grep -q 'Address already in use' "$T/serve.log" && [ "$(wc -l <"$T/serve.log")" -eq 1 ]; then
    ok "http_serve_busy_port_fails ($ms ms: $(cat "$T/serve.log"))"
else
    nok http_serve_busy_port_fails "rc $rc after $ms ms: $(head -3 "$T/serve.log")"
fi

# a worker killed mid-stream: the stream ends with an error event, then data: [DONE]
echo "#   worker_killed sends: a streamed completion (2000 tokens, ignore_eos), then SIGKILL to the worker after 0.1 s"
WPID=$(pgrep -P "${pids[0]}" llm170-worker | head -1)
if [ -z "$WPID" ]; then
    echo "skip - http_stream_worker_killed: no worker process found under llm170d"
else
    curl -s -N -m 20 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt":"Once upon a time","max_tokens":2000,"ignore_eos":true,"stream":true}' >"$T/killed.out" &
    CPID=$!
    sleep 0.1
    kill -KILL "$WPID" 2>/dev/null
    wait "$CPID"
    chunks=$(grep -c '^data: {"id' "$T/killed.out")
    last2=$(grep '^data: ' "$T/killed.out" | tail -2 | cut -c1-60 | tr '\n' '|')
    if grep -q '"finish_reason":"length"' "$T/killed.out"; then
        echo "skip - http_stream_worker_killed: the generation finished ($chunks chunks) before the worker was killed"
    elif [[ "$last2" == 'data: {"error":'*'|data: [DONE]|' ]]; then
        ok "http_stream_worker_killed ($chunks chunks, then an error event and [DONE])"
    else
        nok http_stream_worker_killed "$chunks chunks; the stream ended with: $last2"
    fi
fi
exit 0
