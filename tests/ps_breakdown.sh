#!/bin/bash
# ps_breakdown.sh — `llm170 ps` after the table: each worker's load split (read, compile, upload,
# allocate) and what its memory holds (weights, KV, recurrent states, snapshots, scratch), from a real
# llm170-worker on the CPU backend serving the qwen35-tiny hybrid (so states and snapshots are not 0).
# The table itself keeps its columns. Real processes on a private ipc socket; every wait bounded.
set -u
BIN=${LLM170_BIN:-bin}
SHARED=${LLM170_SHARED:-../shared/data}
MODEL=$SHARED/models/synthetic/qwen35-tiny.gguf
if [ ! -r "$MODEL" ]; then echo "skip - ps_breakdown: needs $MODEL (../shared/data absent)"; exit 0; fi
if [ ! -x "$BIN/llm170d" ] || [ ! -x "$BIN/llm170-worker" ]; then echo "skip - ps_breakdown: llm170d not built"; exit 0; fi
T=$(mktemp -d /tmp/llm170-ps.XXXXXX)
DPID=
cleanup() { [ -n "$DPID" ] && kill -KILL "$DPID" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
export LLM170_SOCKET="ipc://$T/d.sock"
ok() { echo "ok - $1"; }
notok() { echo "not ok - $1"; shift; for l in "$@"; do printf '#   %s\n' "$l"; done; }
check() { if eval "$2"; then ok "$1"; else notok "$1" "$(printf '%s' "${3:-}" | head -20)"; fi; }

# start llm170d with the flags given, wait for a ready worker, leave `llm170 ps`'s output in $out
serve() {
    "$BIN/llm170d" --model "$MODEL" --threads 2 --ctx 128 "$@" 2>"$T/d.log" & DPID=$!
    for _ in $(seq 150); do "$BIN/llm170" ps 2>/dev/null | grep -q ' ready ' && break; sleep 0.1; done
    out=$("$BIN/llm170" ps 2>&1); rc=$?
}
stop() {
    kill -TERM "$DPID"; for _ in $(seq 100); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
    wait "$DPID"; DPID=
}
# bytes of a part as ps prints it ("262144 B", "1.5 MiB", "2.0 GiB"): exact below 1 MiB
bytes_of() { python3 -c '
import re, sys
m = re.search(r"\b" + sys.argv[1] + r" ([0-9.]+) (B|MiB|GiB)", sys.stdin.read())
print(-1 if not m else int(float(m.group(1)) * {"B": 1, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]))' "$1"; }

serve --slots 2
check "ps: the table's row is unchanged" '[ $rc -eq 0 ] && printf "%s\n" "$out" | grep -q "^0 .*cpu .* ready .* qwen35-tiny .* 2 .* 128 "' "$out"
check "ps: the table's header is unchanged" 'printf "%s\n" "$out" | grep -qE "^ID +DEVICE +BACKEND +STATE +PID +MODEL +SLOTS +ACTIVE +QUEUED +CTX +MEMORY +RESTARTS$"' "$out"
load=$(printf '%s\n' "$out" | grep '^worker 0: ready in ')
check "ps: the load split (read, compile, upload, allocate)" \
    '[[ "$load" =~ ^worker\ 0:\ ready\ in\ [0-9.]+\ s\ \(read\ [0-9.]+,\ compile\ 0.00,\ upload\ [0-9.]+,\ allocate\ [0-9.]+\)$ ]]' "$out"
mem=$(printf '%s\n' "$out" | grep '^worker 0: memory ')
check "ps: the memory breakdown line" '[ -n "$mem" ]' "$out"
per=$(printf '%s' "$mem" | bytes_of "of"); st=$(printf '%s' "$mem" | bytes_of states)
sn=$(printf '%s' "$mem" | bytes_of snapshots); kv=$(printf '%s' "$mem" | bytes_of KV)
nsnap=$(printf '%s' "$mem" | sed -nE 's/.*\(([0-9]+) per slot of.*/\1/p')
# qwen35-tiny: 2 GDN layers (of 4), each a conv window (d_conv-1)·(2·H_k·d + H_v·d) = 3·(2·2·16 + 4·16)
# floats and a delta-rule state H_v·d·d = 4·16·16 floats: 2·(384 + 1024)·4 = 11264 bytes a sequence
check "ps: one slot's recurrent state from the model's shapes" '[ "$per" -eq 11264 ] && [ "$st" -eq $((2 * per)) ]' "$mem"
check "ps: snapshots are 4 (the default) per slot, each one state" '[ "$nsnap" = 4 ] && [ "$sn" -eq $((4 * 2 * per)) ]' "$mem"
# 2 attention layers · K and V · 2 slots · 128 positions · 2 KV heads of 32 · 2 bytes (f16)
check "ps: KV cache of 2 slots x 128 positions" '[ "$kv" -eq $((2 * 2 * 2 * 128 * 64 * 2)) ]' "$mem"
# the parts add up to the total the line starts with, and to the MEMORY column
sum=$(printf '%s' "$mem" | python3 -c '
import re, sys
s = sys.stdin.read()
u = {"B": 1, "MiB": 1 << 20, "GiB": 1 << 30}
v = lambda k: float(re.search(k + r" ([0-9.]+) (B|MiB|GiB)", s).group(1)) * u[re.search(k + r" ([0-9.]+) (B|MiB|GiB)", s).group(2)]
tot = v("memory"); parts = sum(v(k) for k in ("weights", "KV", "states", "snapshots", "scratch"))
print("ok" if abs(tot - parts) <= 0.06 * (1 << 20) + 0.001 * tot else "total %d, parts %d" % (tot, parts))')
check "ps: the parts add up to the total" '[ "$sum" = ok ]' "$mem" "$sum"
stop
grep -q "worker 0 (cpu): ready in .* (read .*, compile .*, upload .*, allocate .*)" "$T/d.log"
check "llm170d's log: the ready line has the split" '[ $? -eq 0 ]' "$(cat "$T/d.log")"
grep -q "llm170-worker: qwen35-tiny ready in .* (read .*, compile .*, upload .*, allocate .*;" "$T/d.log"
check "the worker's log: the ready line has the split" '[ $? -eq 0 ]' "$(cat "$T/d.log")"

# the snapshot knob: llm170d's `snapshots` key (and --snapshots, which overrides it) reaches the worker's
# engine (engine_params.n_snap): ps shows that many a slot, and the snapshots' bytes follow
printf '[daemon]\nslots = 2\nsnapshots = 3\n' >"$T/c.conf"
serve --config "$T/c.conf"
mem=$(printf '%s\n' "$out" | grep '^worker 0: memory ')
per=$(printf '%s' "$mem" | bytes_of "of"); sn=$(printf '%s' "$mem" | bytes_of snapshots)
check "config snapshots = 3: 3 per slot, 3 states' worth each" \
    '[[ "$mem" == *"(3 per slot of 11264 B)"* ]] && [ "$sn" -eq $((3 * 2 * 11264)) ]' "$out"
stop
serve --config "$T/c.conf" --snapshots 1
mem=$(printf '%s\n' "$out" | grep '^worker 0: memory ')
check "--snapshots 1 overrides the config" '[[ "$mem" == *"snapshots 22528 B (1 per slot of 11264 B)"* ]]' "$out"
stop
"$BIN/llm170d" --model "$MODEL" --snapshots 65 >/dev/null 2>"$T/e"; rc=$?
check "llm170d: --snapshots beyond 64 is a usage error" '[ $rc -eq 2 ] && grep -q "snapshots" "$T/e"' "$(cat "$T/e")"
"$BIN/llm170-worker" --connect "ipc://$T/none" --model "$MODEL" --snapshots 65 >/dev/null 2>"$T/e"; rc=$?
check "llm170-worker: --snapshots beyond 64 is a usage error" '[ $rc -eq 2 ] && grep -q "snapshots" "$T/e"' "$(cat "$T/e")"
# --gpu N names the device a GPU worker opens (one worker per GPU): not a number is a usage error, a
# device the machine lacks a load failure that says how many there are
"$BIN/llm170-worker" --connect "ipc://$T/none" --model "$MODEL" --gpu one >/dev/null 2>"$T/e"; rc=$?
check "llm170-worker: --gpu one is a usage error" '[ $rc -eq 2 ] && grep -q -- "--gpu" "$T/e"' "$(cat "$T/e")"
# (stories260K: a model every backend runs, so the device is what is refused)
"$BIN/llm170-worker" --connect "ipc://$T/none" --model "$SHARED/models/stories260K.gguf" --backend vulkan --gpu 999 \
    >/dev/null 2>"$T/e"; rc=$?
if grep -q "vulkan backend unavailable" "$T/e"; then
    echo "skip - llm170-worker --gpu 999: no Vulkan device here"
else
    check "llm170-worker --backend vulkan --gpu 999: refused, naming the device count" \
        '[ $rc -ne 0 ] && grep -q "GPU 999 asked for, but there are" "$T/e"' "$(cat "$T/e")"
fi
