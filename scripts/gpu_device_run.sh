#!/bin/bash
# gpu_device_run.sh DIR — one GPU-machine session: kernel compile + kernel tests + engine parity vs
# the CPU engine, then speed (bigsynth qwen3-8b q4_k: pp512, tg128 with and without graphs).
# DIR holds: bin/ (test_hip_*, hip_bench built elsewhere), libs/ (utf8proc, pcre2), src/ (this tree),
# shared/ (README.md + models/stories260K.gguf), m/ (small synthetic models), tokenizer.json.xz,
# bigsynth.py. Logs go to $OUT (or /tmp/out). Prints a short table last.
set -u
G=$(cd "${1:-.}" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$G/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/kcache
STAGE=${STAGE:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,memory.used --format=csv | tee "$O/gpu.txt"
cd "$G/src"
summary=()
run() { # name, log, command...
    local name=$1 log=$2; shift 2
    local t0=$SECONDS
    "$@" >"$O/$log" 2>&1
    local rc=$?
    local ok fail skip
    ok=$(grep -c '^ok - ' "$O/$log"); fail=$(grep -c '^not ok - ' "$O/$log"); skip=$(grep -c '^skip - ' "$O/$log")
    summary+=("$(printf '%-22s rc=%d ok=%d fail=%d skip=%d %ds' "$name" "$rc" "$ok" "$fail" "$skip" $((SECONDS - t0)))")
    grep -E '^(not ok|skip|#)' "$O/$log" | head -60
}
if [ "$STAGE" != bench ]; then
    run compile compile.log "$G/bin/test_hip_compile"
    run kernels kernels.log "$G/bin/test_hip_kernels"
    M=$(ls "$G"/m/*.gguf | tr '\n' ':')
    LLM170_SHARED=$G/shared LLM170_HIP_MODELS=${M%:} run engine engine.log "$G/bin/test_hip_engine"
fi
if [ "$STAGE" != test ]; then
    xz -dc "$G/tokenizer.json.xz" >/tmp/tok.json
    t0=$SECONDS
    python3 "$G/bigsynth.py" --preset qwen3-8b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/q8b.gguf >"$O/bigsynth.log" 2>&1
    summary+=("bigsynth qwen3-8b q4_k rc=$? $((SECONDS - t0))s")
    "$G/bin/hip_bench" /tmp/q8b.gguf --pp 512 --tg 128 --reps 3 2>&1 | tee "$O/bench.log"
    "$G/bin/hip_bench" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 --no-graph 2>&1 | tee -a "$O/bench.log"
    if [ -n "${DEPTH:-}" ]; then
        "$G/bin/hip_bench" /tmp/q8b.gguf --pp 0 --tg 128 --depth 4096 --reps 3 2>&1 | tee -a "$O/bench.log"
    fi
fi
echo "==== summary"
printf '%s\n' "${summary[@]}"
grep -h '^RESULT\|^# /tmp' "$O"/bench.log 2>/dev/null
grep -h 'worst logits' "$O"/engine.log 2>/dev/null
