#!/bin/bash
# serve_load.sh — acceptance 6 of the serving issue, one backend after the other: `llm170 bench --np 64`
# (before and after), then `llm170 serve --slots 64` loaded by tests/tools/loadgen with 64 streaming
# clients: "sampled" (distinct prompts, temperature 0.8, 60 s), "greedy" (one prompt, temperature 0,
# 30 s) and "empty" (BOS only, 30 s); per process RSS every 10 s and CPU time, and the worker's step
# counters (LLM170_SCHED_STATS=10, last three lines). With ROUNDS=R > 1 the sampled load runs R times,
# each after a bench of its own (the serving processes stay up, idle, during a bench), so every ratio
# has a bench on each side of it: this machine's bench moves by ±10 % from one minute to the next.
# Environment: BIN (llm170, llm170d, llm170-worker, llm170-gateway; default bin), LOADGEN (default
# build/tests/tools/loadgen), MODEL (default ../shared/data/models/stories260K.gguf), BACKENDS (default
# "cpu"), T_cpu / T_hip (threads, default 8 / 8), SECS_sampled / SECS_other (60 / 30), ROUNDS (1),
# PORT (18093), OUT (serve logs, default /tmp). Run from the repository root on a machine nothing else loads.
set -u
BIN=${BIN:-bin}; LOADGEN=${LOADGEN:-build/tests/tools/loadgen}; M=${MODEL:-../shared/data/models/stories260K.gguf}
O=${OUT:-/tmp}; P=${PORT:-18093}
echo "$(nproc) cores; $(uptime)"
for B in ${BACKENDS:-cpu}; do
    T=${T_cpu:-8}; [ "$B" = hip ] && T=${T_hip:-8}
    export LLM170_SOCKET=ipc:///tmp/llm170-load-$B.sock
    bench() { "$BIN/llm170" bench --model "$M" --pp 0 --tg 64 --np 64 --reps 40 --backend "$B" --threads "$T" 2>&1 | grep -E "np 64"; }
    echo "== $B, $T threads"; bench
    LLM170_SCHED_STATS=10 "$BIN/llm170" serve --model "$M" --backend "$B" --threads "$T" --slots 64 --port "$P" >"$O/serve-$B.log" 2>&1 &
    SP=$!
    for _ in $(seq 240); do curl -sf "localhost:$P/health" 2>/dev/null | grep -q ok && break; sleep 0.25; done
    R=${ROUNDS:-1}
    runs="sampled"; for r in $(seq 2 "$R"); do runs="$runs bench sampled"; done
    for w in $runs greedy empty; do
        [ $w = bench ] && { echo "bench:"; bench; continue; }
        S=${SECS_sampled:-60}; [ $w != sampled ] && S=${SECS_other:-30}
        case $w in
            sampled) out=$("$LOADGEN" --port "$P" --clients 64 --seconds "$S" --max-tokens 64 2>&1);;
            greedy) out=$("$LOADGEN" --port "$P" --clients 64 --seconds "$S" --max-tokens 64 --temperature 0 --same-prompt 2>&1);;
            empty) out=$("$LOADGEN" --port "$P" --clients 64 --seconds "$S" --max-tokens 64 --same-prompt --prompt "" 2>&1);;
        esac
        echo "[$B $w ${S}s] $(echo "$out" | grep -E '^clients')"
        echo "$out" | grep -E 'RSS' | sed 's/^/    /'
    done
    kill $SP; wait $SP 2>/dev/null
    grep "stats" "$O/serve-$B.log" | tail -"${STATS_LINES:-3}" | cut -c1-400
    echo "bench after:"; bench
done
