#!/bin/bash
# gpu_ab.sh STAGE PART — two builds of the engine side by side on one GPU, alternating, so that a
# refactor cannot hide a slowdown: STAGE/old and STAGE/new each hold llm170, llm170d, llm170-worker,
# llm170-gateway, hip_bench and loadgen; STAGE/libs their shared libraries; STAGE/tok.json.xz a HF
# tokenizer.json (the vocabulary of the synthetic models); STAGE/tools/bigsynth.py (../shared/tools).
#   PART=8b:  writes bigsynth qwen3-8b (q4_k) to /tmp in the background, runs STAGE/new/test_hip_*
#             meanwhile, then old, new, old, new: hip_bench pp512 + tg128 (3 reps), batched decode
#             B = 16, 64, and `llm170 serve --backend hip --slots 64` under 64 streaming loadgen clients
#             (SERVE_S s).
#   PART=all: the same, and qwen35-27b (q4_k, written alongside) after it: pp512 + tg128 and batched
#             decode, old / new / old / new.
# Each figure is printed as "<build> <model> …" lines; compare the medians of old and new.
# Run from the repository root (the test programs read ../shared through STAGE/shared).
set -u
S=$(cd "${1:?stage folder}" && pwd)
PART=${2:?part: 8b or all}
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/kcache
SERVE_S=${SERVE_S:-20}
LOG=$O/ab-$PART.log
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee -a "$LOG"

synth() { # preset out
    [ -f "$2" ] && return 0
    python3 "$S/tools/bigsynth.py" --preset "$1" --quant q4_k --tokenizer /tmp/tok.json --out "$2.tmp" \
        >>"$O/synth.log" 2>&1 && mv "$2.tmp" "$2" || { rm -f "$2.tmp"; touch "$2.fail"; }
}
wait_file() { # the model, or give up when its writer failed or after 400 s
    local t0=$SECONDS
    while [ ! -f "$1" ]; do
        if [ -f "$1.fail" ] || [ $((SECONDS - t0)) -gt 400 ]; then say "no $1"; return 1; fi
        sleep 1
    done
}
bench() { # build label model args...
    local b=$1 l=$2 m=$3; shift 3
    timeout 150 "$S/$b/hip_bench" "$m" "$@" 2>&1 | grep -E '^RESULT' | sed "s/^/$b $l /" | tee -a "$LOG"
}
serve() { # build label model
    local b=$1 l=$2 m=$3 p=18097
    export LLM170_SOCKET=ipc:///tmp/llm170-ab-$b.sock
    "$S/$b/llm170" serve --model "$m" --backend hip --threads 8 --slots 64 --port $p >"$O/serve-$b.log" 2>&1 &
    local sp=$!
    for _ in $(seq 480); do curl -sf "localhost:$p/health" 2>/dev/null | grep -q ok && break; sleep 0.25; done
    echo "$b $l serve64 $("$S/$b/loadgen" --port $p --clients 64 --seconds "$SERVE_S" --max-tokens 64 2>&1 |
        grep -E '^clients')" | tee -a "$LOG"
    kill $sp; wait $sp 2>/dev/null
    unset LLM170_SOCKET
}
round() { # build label model
    bench "$1" "$2" "$3" --pp 512 --tg 128 --reps 3
    bench "$1" "$2" "$3" --pp 0 --tg 0 --reps 1 --batch 16,64
    serve "$1" "$2" "$3"
}

xz -dc "$S/tok.json.xz" >/tmp/tok.json
# both models written at once (16 cores), while the new build's GPU tests run
synth qwen3-8b /tmp/q8b.gguf &
[ "$PART" = all ] && synth qwen35-27b /tmp/q27.gguf &
for t in test_hip_compile test_hip_kernels test_hip_engine; do
    LLM170_SHARED=$S/shared timeout 150 "$S/new/$t" >"$O/$t.log" 2>&1
    say "$t rc=$? ok=$(grep -c '^ok' "$O/$t.log") not_ok=$(grep -c '^not ok' "$O/$t.log") skip=$(grep -c '^skip' "$O/$t.log")"
    grep -E '^not ok' "$O/$t.log" | head -5 | tee -a "$LOG"
done
wait_file /tmp/q8b.gguf || exit 1
for b in old new old new; do round $b 8b /tmp/q8b.gguf; done
rm -f /tmp/q8b.gguf
if [ "$PART" = all ] && wait_file /tmp/q27.gguf; then
    for b in old new old new; do
        bench $b 27b /tmp/q27.gguf --pp 512 --tg 128 --reps 3
        bench $b 27b /tmp/q27.gguf --pp 0 --tg 0 --reps 1 --batch 16,64
    done
fi
wait
say "done"
