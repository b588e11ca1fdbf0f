#!/bin/bash
# config_socket.sh — one `socket` key for llm170d, llm170-gateway and the CLI:
# with only `[daemon] socket = …` in the config file, the daemon listens
# there, `llm170 ps --config F` finds it and the gateway started with the same
# --config (no --daemon) reaches it (/health 200); a flag still wins.
# Real processes (fake worker), every wait bounded.
set -u
cd "$(dirname "$0")/.."
BIN=${LLM170_BIN:-$PWD/bin}
BUILD=${LLM170_BUILD:-$PWD/build}
FAKE=$BUILD/tests/tools/fake_worker
for f in "$BIN/llm170d" "$BIN/llm170-gateway" "$BIN/llm170" "$FAKE"; do
    [ -x "$f" ] || { echo "skip - config_socket: $f not built"; exit 0; }
done
command -v curl >/dev/null || { echo "skip - config_socket: curl not installed"; exit 0; }
T=$(mktemp -d /tmp/llm170-cfgsock.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; shift; for r in "$@"; do echo "#   $r"; done; }

cat >"$T/llm170.conf" <<CONF
[daemon]
socket = ipc://$T/run/llm170d.sock
model = $BIN/llm170d
worker = $FAKE
[gateway]
api_key =
CONF
# the environment names another socket: the config file decides, as for llm170d
export LLM170_SOCKET="ipc://$T/elsewhere.sock"
"$BIN/llm170d" --config "$T/llm170.conf" 2>"$T/d.log" &
pids+=($!)
up=0
for _ in $(seq 100); do "$BIN/llm170" ps --config "$T/llm170.conf" 2>/dev/null | grep -q ' ready ' && { up=1; break; }; sleep 0.1; done
if [ $up = 1 ]; then ok "config_socket: llm170 ps --config reads [daemon] socket"; else nok "config_socket: llm170 ps --config reads [daemon] socket" "$(tail -3 "$T/d.log")"; fi
"$BIN/llm170" ps --config "$T/llm170.conf" --socket "ipc://$T/nothing.sock" >/dev/null 2>&1
if [ $? -ne 0 ]; then ok "config_socket: --socket still wins over the config"; else nok "config_socket: --socket still wins over the config"; fi

port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
"$BIN/llm170-gateway" --config "$T/llm170.conf" --listen "127.0.0.1:$port" >"$T/gw.log" 2>&1 &
pids+=($!)
code=000
for _ in $(seq 50); do
    code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")
    [ "$code" = 200 ] && break
    sleep 0.1
done
if [ "$code" = 200 ]; then ok "config_socket: the gateway reaches the daemon through [daemon] socket (/health $code)"
else nok "config_socket: the gateway reaches the daemon through [daemon] socket (/health $code)" "$(head -2 "$T/gw.log")"; fi
