#!/bin/bash
# gpu_ab.sh STAGE PART — two builds of the engine side by side on one GPU, alternating, so that a
# refactor cannot hide a slowdown: STAGE/old and STAGE/new each hold llm170, llm170d, llm170-worker,
# llm170-gateway, hip_bench and loadgen; STAGE/libs their shared libraries; STAGE/tok.json.xz a HF
# tokenizer.json (the vocabulary of the synthetic models); STAGE/tools/bigsynth.py (../shared/tools);
# STAGE/sh/data and STAGE/sh/tools a copy of ../shared's README, stories260K, models/synthetic and the
# synth_dense.py + gguf_synth.py writers (PART=checks also wants STAGE/new/requant and mksynth_qwen35).
#   PART=8b:  writes bigsynth qwen3-8b (q4_k) to /tmp in the background, runs STAGE/new/test_hip_*
#             meanwhile, then old, new, old, new: hip_bench pp512 + tg128 (3 reps), batched decode
#             B = 16, 64, and `llm170 serve --backend hip --slots 64` under 64 streaming loadgen clients
#             (SERVE_S s).
#   PART=all: the same, and qwen35-27b (q4_k, written alongside) after it: pp512 + tg128 and batched
#             decode, old / new / old / new.
#   PART=checks: the new build's hip parity against the CPU engine on the hybrids and on q4_K / q8_0
#             weights, and against the llama.cpp goldens (tests/parity_*.sh --backend hip), while
#             qwen35-27b is written; then its batched decode through `llm170 bench --np` (16, 64),
#             old / new / old / new.
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
if [ "$PART" = checks ]; then
    synth qwen35-27b /tmp/q27.gguf &
    B=$S/new
    export LLM170_SHARED=$S/sh/data
    "$B/mksynth_qwen35" --out /tmp/h35-d128.gguf --arch qwen35 --vocab 1000 --n-embd 256 --n-layer 5 \
        --recurrent 11010 --n-head 4 --n-head-kv 2 --head-dim 64 --rope-dim 32 --sections 6,5,5,0 --d-state 128 \
        --h-k 2 --h-v 4 --n-ff 320 --nextn 0 --type f32 --std 0.05 >/dev/null
    "$B/mksynth_qwen35" --out /tmp/h35moe-d32.gguf --arch qwen35moe --vocab 800 --n-embd 128 --n-layer 4 \
        --interval 2 --n-head 8 --n-head-kv 2 --head-dim 32 --rope-dim 16 --sections 3,3,2,0 --d-state 32 --h-k 2 \
        --h-v 6 --n-expert 8 --n-used 3 --n-ff-exp 64 --n-ff-shexp 96 --nextn 1 --type f32 --std 0.08 >/dev/null
    python3 "$S/sh/tools/synth_dense.py" --arch qwen3 --n-embd 256 --n-ff 512 --seed 21 --out /tmp/q3e256.gguf \
        >/dev/null && "$B/requant" /tmp/q3e256.gguf /tmp/q3e256-q4_k.gguf q4_k >/dev/null &&
        "$B/requant" /tmp/q3e256.gguf /tmp/q3e256-q8_0.gguf q8_0 >/dev/null
    t=$O/checks.log
    LLM170_HIP_HYBRID_MODELS=/tmp/h35-d128.gguf:/tmp/h35moe-d32.gguf timeout 120 "$B/test_hip_engine" >"$t" 2>&1
    say "test_hip_engine (hybrids) rc=$?"
    LLM170_HIP_MODELS=/tmp/q3e256-q4_k.gguf:/tmp/q3e256-q8_0.gguf LLM170_HIP_TOL=6e-2 \
        timeout 60 "$B/test_hip_engine" >>"$t" 2>&1
    say "test_hip_engine (q4_K, q8_0) rc=$?"
    export LLM170_BIN=$B LLM170_REQUANT=$B/requant LLM170_PARITY_EXTRA="--backend hip"
    timeout 150 bash tests/parity_logits.sh >>"$t" 2>&1; say "parity_logits (hip) rc=$?"
    timeout 100 bash tests/parity_greedy.sh >>"$t" 2>&1; say "parity_greedy (hip) rc=$?"
    timeout 60 bash tests/parity_hybrid.sh >>"$t" 2>&1; say "parity_hybrid (hip) rc=$?"
    unset LLM170_PARITY_EXTRA LLM170_BIN
    say "checks: $(grep -c '^ok' "$t") ok, $(grep -c '^not ok' "$t") not ok, $(grep -c '^skip' "$t") skip"
    grep -E '^not ok|^skip' "$t" | head -12 | tee -a "$LOG"
    wait_file /tmp/q27.gguf || exit 1
    timeout 60 "$S/new/hip_bench" /tmp/q27.gguf --pp 0 --tg 0 --reps 1 --batch 16 2>&1 | tail -3 | sed 's/^/hip_bench --batch: /' | tee -a "$LOG"
    for b in old new old new; do
        for np in 16 64; do
            echo "$b 27b $(timeout 120 "$S/$b/llm170" bench --model /tmp/q27.gguf --backend hip --pp 0 --tg 64 --np $np \
                --reps 2 2>&1 | grep -E 'np '"$np" | tail -1)" | tee -a "$LOG"
        done
    done
    wait
    say "done"
    exit 0
fi
# both models written at once (16 cores), while the new build's GPU tests run
synth qwen3-8b /tmp/q8b.gguf &
[ "$PART" = all ] && synth qwen35-27b /tmp/q27.gguf &
for t in test_hip_compile test_hip_kernels test_hip_engine; do
    LLM170_SHARED=$S/sh/data timeout 150 "$S/new/$t" >"$O/$t.log" 2>&1
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
