#!/bin/bash
# serve_topk_ab.sh — a GPU worker serving through HTTP with the top-k pre-selection on the device
# (default) and without it (LLM170_DEVICE_TOPK=0), alternating off / on / off / on, one `llm170 serve
# --backend hip --slots 64` per run, 64 streaming tests/tools/loadgen clients, 64 tokens a request; the
# worker's last step counters of each run (LLM170_SCHED_STATS=5).
# Environment: BIN (llm170 and the programs it starts; default bin), LOADGEN (default
# build/tests/tools/loadgen), MODELS ("path:seconds ..."; default stories260K for 15 s), T (host
# threads, 8), PORT (18095). Run from the repository root on a machine with a GPU.
set -u
BIN=${BIN:-bin}; LOADGEN=${LOADGEN:-build/tests/tools/loadgen}; P=${PORT:-18095}
export LLM170_SOCKET=ipc:///tmp/llm170-topk-ab.sock
for ms in ${MODELS:-../shared/data/models/stories260K.gguf:15}; do
    M=${ms%:*}; S=${ms##*:}
    for mode in 0 1 0 1; do
        env LLM170_DEVICE_TOPK=$mode LLM170_SCHED_STATS=5 "$BIN/llm170" serve --model "$M" --backend hip \
            --threads "${T:-8}" --slots 64 --port "$P" >/tmp/serve-topk-ab.log 2>&1 &
        SP=$!
        for _ in $(seq 400); do curl -sf "localhost:$P/health" 2>/dev/null | grep -q ok && break; sleep 0.25; done
        echo "[$(basename "$M") device_topk=$mode] $("$LOADGEN" --port "$P" --clients 64 --seconds "$S" --max-tokens 64 2>&1 | grep -E '^clients')"
        grep stats /tmp/serve-topk-ab.log | tail -1 | cut -c1-330
        kill $SP; wait $SP 2>/dev/null
    done
done
