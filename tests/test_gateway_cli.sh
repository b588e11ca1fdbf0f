#!/bin/bash
# test_gateway_cli.sh — llm170-gateway as a program: --help, bad usage (exit 2,
# one line on stderr), settings from the config file / environment / flags
# (later wins), /health without a daemon (503 with an OpenAI error object),
# clean stop on SIGTERM, malloc tuned by restarting itself once.
set -u
cd "$(dirname "$0")/.."
BIN=${LLM170_BIN:-$PWD/bin}
GW=$BIN/llm170-gateway
[ -x "$GW" ] || { echo "skip - gateway_cli: $GW not built"; exit 0; }
command -v curl >/dev/null || { echo "skip - gateway_cli: curl not installed"; exit 0; }
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
ok() { echo "ok - $1"; }
nok() { echo "not ok - $1"; }
check() { if eval "$2"; then ok "$1"; else nok "$1"; fi; }

"$GW" --help >"$T/help" 2>&1
check gateway_help "[ \$? -eq 0 ] && grep -q -- '--listen HOST:PORT' '$T/help' && grep -q -- '--api-key' '$T/help'"
"$GW" --frobnicate 1 >/dev/null 2>"$T/err"; rc=$?
check gateway_unknown_flag "[ $rc -eq 2 ] && grep -q \"unknown option '--frobnicate'\" '$T/err'"
"$GW" --listen nonsense >/dev/null 2>"$T/err"; rc=$?
check gateway_bad_listen "[ $rc -eq 2 ] && grep -q 'bad listen address' '$T/err'"
"$GW" --cors-origin '*' >/dev/null 2>"$T/err"; rc=$?
check gateway_cors_star_refused "[ $rc -eq 2 ] && grep -q \"'\\*' is not allowed\" '$T/err' && [ \$(wc -l <'$T/err') -eq 1 ]"
grep -q -- '--header-timeout' "$T/help" && grep -q -- '--max-conns-per-ip' "$T/help" && grep -q -- '--cors-origin' "$T/help"
check gateway_help_strict_flags "[ $? -eq 0 ]"
"$GW" --config "$T/missing.conf" >/dev/null 2>"$T/err"; rc=$?
check gateway_missing_config "[ $rc -eq 1 ] && grep -q 'cannot open config' '$T/err'"

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
start() { # port, extra args... ; waits until it listens
    local port=$1; shift
    "$@" >"$T/gw.$port.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 50); do
        curl -s -o /dev/null "http://127.0.0.1:$port/metrics" && return 0
        sleep 0.1
    done
    return 1
}

# config file: listen + api_key in [gateway]; other sections are not ours
P1=$(free_port)
cat >"$T/llm170.conf" <<CONF
# llm170 config
[daemon]
listen = 127.0.0.1:1
api_key = not-this-one
[gateway]
listen = "127.0.0.1:$P1"
api_key = from-config
daemon = ipc://$T/no-daemon.sock
CONF
if start "$P1" env -u LLM170_API_KEY "$GW" --config "$T/llm170.conf"; then
    c1=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P1/v1/models")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer from-config' "http://127.0.0.1:$P1/v1/models")
    check gateway_config_api_key "[ '$c1' = 401 ] && [ '$c2' = 503 ]"
    body=$(curl -s -w ' %{http_code}' "http://127.0.0.1:$P1/health")
    check gateway_health_without_daemon "echo '$body' | grep -q '\"type\":\"unavailable_error\".* 503\$'"
    body=$(curl -s -m 20 -w ' %{http_code}' -H 'Authorization: Bearer from-config' \
        "http://127.0.0.1:$P1/v1/completions" -d '{"prompt":"x"}')
    check gateway_generate_without_daemon "echo '$body' | grep -q '\"type\":\"unavailable_error\".* 503\$'"
    kill -TERM "${pids[-1]}"
    wait "${pids[-1]}"; rc=$?
    check gateway_sigterm "[ $rc -eq 0 ]"
else
    nok gateway_config_listen; cat "$T"/gw.*.log | sed 's/^/#   /'
fi

# environment beats the config file, the flag beats the environment
P2=$(free_port)
if start "$P2" env LLM170_API_KEY=from-env GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072 "$GW" --config "$T/llm170.conf" --listen "127.0.0.1:$P2"; then
    c1=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer from-config' "http://127.0.0.1:$P2/v1/models")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer from-env' "http://127.0.0.1:$P2/v1/models")
    check gateway_env_api_key "[ '$c1' = 401 ] && [ '$c2' = 503 ]"
    # it restarted itself once with glibc's per-thread malloc cache off (same pid and name; glibc
    # 2.36 cuts the variable at its first ':' as it parses it), the given tunables kept after it
    env_of() { tr '\0' '\n' <"/proc/${pids[-1]}/environ"; }
    check gateway_malloc_tuned "env_of | grep -qx 'GLIBC_TUNABLES=glibc.malloc.tcache_count=0\(:glibc.malloc.trim_threshold=131072\)\?' &&
        env_of | grep -qx 'LLM170_MALLOC_REEXEC=glibc.malloc.trim_threshold=131072' &&
        [ \"\$(cat /proc/${pids[-1]}/comm)\" = llm170-gateway ]"
else
    nok gateway_env_api_key
fi
P3=$(free_port)
if start "$P3" env LLM170_API_KEY=from-env "$GW" --config "$T/llm170.conf" --listen "127.0.0.1:$P3" --api-key from-flag; then
    c1=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer from-env' "http://127.0.0.1:$P3/v1/models")
    c2=$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer from-flag' "http://127.0.0.1:$P3/v1/models")
    check gateway_flag_api_key "[ '$c1' = 401 ] && [ '$c2' = 503 ]"
else
    nok gateway_flag_api_key
fi
