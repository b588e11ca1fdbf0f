#!/bin/bash
# gpu_device_run.sh DIR — one GPU-machine session: kernel compile + kernel tests + engine parity vs
# the CPU engine, then speed (bigsynth qwen3-8b q4_k: pp512, tg128 with and without graphs).
# With PEER=1 (DIR/anchor/ holding llama.cpp's gitRelease.bundle and llama-anchor-device.sh) the
# peer llama.cpp CUDA build runs in the background during the tests and is timed alternately with ours.
# DIR holds: bin/ (test_hip_*, hip_bench built elsewhere), libs/ (utf8proc, pcre2), src/ (this tree),
# shared/ (README.md + models/stories260K.gguf), m/ (small synthetic models), tokenizer.json.xz,
# bigsynth.py. Logs go to $OUT (or /tmp/out). Prints a short table last.
# QUICK=1: only pp512/tg128, tg128 of bin_prev and with LLM170_HIP_GQA=1, tg128 @ d4096 (DEPTH=1), one
# profile and the peer; the 8B model is written in the background during the tests; the peer is waited
# for until PEER_WAIT seconds into the run (default 330) and benched only if built by then.
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
xz -dc "$G/tokenizer.json.xz" >/tmp/tok.json
if [ -n "${QUICK:-}" ] && [ "$STAGE" != test ]; then
    (python3 "$G/bigsynth.py" --preset qwen3-8b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/q8b.gguf \
        >"$O/bigsynth.log" 2>&1; echo $? >/tmp/synth_rc) &
    synth_pid=$!
fi
if [ -n "${PEER:-}" ]; then
    (bash "$G/anchor/llama-anchor-device.sh" >"$O/peer_build.log" 2>&1; echo $? >/tmp/peer_rc) &
    peer_pid=$!
fi
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
if [ "$STAGE" != bench ]; then
    # quantized weights end to end (q4_K, q6_K output), 2 layers of qwen3-0.6b: the CPU runs q8_K
    # activations, the GPU q8 per 32 (or f32 with LLM170_HIP_Q8=0): reported, looser tolerance
    python3 "$G/bigsynth.py" --preset qwen3-0.6b --layers 2 --quant q4_k --tokenizer /tmp/tok.json --out /tmp/q06.gguf >"$O/bigsynth_small.log" 2>&1
    LLM170_HIP_TOL=5e-2 LLM170_HIP_MODELS=/tmp/q06.gguf run engine_q4k_q8act engine_q4k.log "$G/bin/test_hip_engine"
    LLM170_HIP_Q8=0 LLM170_HIP_TOL=5e-2 LLM170_HIP_MODELS=/tmp/q06.gguf run engine_q4k_f32act engine_q4k_f32.log "$G/bin/test_hip_engine"
fi
if [ "$STAGE" != test ] && [ -n "${QUICK:-}" ]; then
    LB=/root/llama/build/bin/llama-bench
    HB="$G/bin/hip_bench"
    wait "$synth_pid"
    summary+=("bigsynth qwen3-8b q4_k rc=$(cat /tmp/synth_rc) done at ${SECONDS}s")
    if [ -n "${PEER:-}" ]; then
        while kill -0 "$peer_pid" 2>/dev/null && [ $SECONDS -lt "${PEER_WAIT:-330}" ]; do sleep 2; done
        if kill -0 "$peer_pid" 2>/dev/null; then
            summary+=("peer build not done at ${SECONDS}s: peer not benched")
        else
            summary+=("peer build rc=$(cat /tmp/peer_rc) done by ${SECONDS}s")
        fi
        tail -3 "$O/peer_build.log"
    fi
    "$HB" /tmp/q8b.gguf --pp 512 --tg 128 --reps 3 2>&1 | tee "$O/bench.log"
    [ -n "${PEER:-}" ] && [ -x $LB ] && ! kill -0 "$peer_pid" 2>/dev/null &&
        $LB -m /tmp/q8b.gguf -fa 1 -ngl 99 -r 3 -p 512 -n 128 2>&1 | tee "$O/peer_bench.log"
    if [ -n "${DEPTH:-}" ]; then
        "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --depth 4096 --reps 3 2>&1 | tee -a "$O/bench.log"
        [ -n "${PEER:-}" ] && [ -x $LB ] && ! kill -0 "$peer_pid" 2>/dev/null &&
            $LB -m /tmp/q8b.gguf -fa 1 -ngl 99 -r 3 -p 0 -n 128 -d 4096 2>&1 | tee -a "$O/peer_bench.log"
    fi
    if [ -x "$G/bin_prev/hip_bench" ]; then
        "$G/bin_prev/hip_bench" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 2>&1 | sed 's/^RESULT/RESULT(previous build)/' | tee -a "$O/bench.log"
    fi
    LLM170_HIP_GQA=1 "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 2>&1 | sed 's/^RESULT/RESULT(GQA=1)/' | tee -a "$O/bench.log"
    "$HB" /tmp/q8b.gguf --pp 0 --tg 32 --reps 1 --profile 2>&1 | grep PROFILE | tee "$O/profile.log"
    if [ -n "${DEPTH:-}" ] && [ $SECONDS -lt 450 ]; then
        LLM170_HIP_GQA=1 "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --depth 4096 --reps 1 2>&1 | sed 's/^RESULT/RESULT(GQA=1)/' | tee -a "$O/bench.log"
    fi
    [ -n "${PEER:-}" ] && kill "$peer_pid" 2>/dev/null
elif [ "$STAGE" != test ]; then
    t0=$SECONDS
    python3 "$G/bigsynth.py" --preset qwen3-8b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/q8b.gguf >"$O/bigsynth.log" 2>&1
    summary+=("bigsynth qwen3-8b q4_k rc=$? $((SECONDS - t0))s")
    if [ -n "${PEER:-}" ]; then
        wait "$peer_pid"
        summary+=("peer build rc=$(cat /tmp/peer_rc)")
        tail -3 "$O/peer_build.log"
    fi
    LB=/root/llama/build/bin/llama-bench
    HB="$G/bin/hip_bench"
    "$HB" /tmp/q8b.gguf --pp 512 --tg 128 --reps 3 2>&1 | tee "$O/bench.log"
    [ -n "${PEER:-}" ] && [ -x $LB ] && $LB -m /tmp/q8b.gguf -fa 1 -ngl 99 -r 3 -p 512 -n 128 2>&1 | tee "$O/peer_bench.log"
    if [ -x "$G/bin_prev/hip_bench" ]; then
        "$G/bin_prev/hip_bench" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 2>&1 | sed 's/^RESULT/RESULT(previous build)/' | tee -a "$O/bench.log"
    fi
    "$HB" /tmp/q8b.gguf --pp 512 --tg 128 --reps 3 2>&1 | tee -a "$O/bench.log"
    "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 --no-graph 2>&1 | tee -a "$O/bench.log"
    LLM170_HIP_MMA=0 "$HB" /tmp/q8b.gguf --pp 512 --tg 0 --reps 3 2>&1 | sed "s/^RESULT/RESULT(fma gemm)/" | tee -a "$O/bench.log"
    LLM170_HIP_Q8=0 "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --reps 3 2>&1 | sed 's/^RESULT/RESULT(f32 act)/' | tee -a "$O/bench.log"
    "$HB" /tmp/q8b.gguf --pp 0 --tg 32 --reps 1 --profile 2>&1 | grep PROFILE | tee "$O/profile.log"
    "$HB" /tmp/q8b.gguf --pp 0 --tg 0 --reps 1 --batch 1,4,16,64 2>&1 | grep 'RESULT\|hip_bench' | tee -a "$O/bench.log"
    if [ -n "${DEPTH:-}" ]; then
        "$HB" /tmp/q8b.gguf --pp 0 --tg 128 --depth 4096 --reps 3 2>&1 | tee -a "$O/bench.log"
        [ -n "${PEER:-}" ] && [ -x $LB ] && $LB -m /tmp/q8b.gguf -fa 1 -ngl 99 -r 3 -p 0 -n 128 -d 4096 2>&1 | tee -a "$O/peer_bench.log"
        "$HB" /tmp/q8b.gguf --pp 0 --tg 32 --depth 4096 --reps 1 --profile 2>&1 | grep PROFILE | sed 's/^PROFILE/PROFILE(d4096)/' | tee -a "$O/profile.log"
    fi
    if [ -n "${MOE:-}" ]; then
        rm -f /tmp/q8b.gguf
        t0=$SECONDS
        python3 "$G/bigsynth.py" --preset qwen3-30b-a3b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/moe.gguf >"$O/bigsynth_moe.log" 2>&1
        summary+=("bigsynth qwen3-30b-a3b q4_k rc=$? $((SECONDS - t0))s")
        "$HB" /tmp/moe.gguf --pp 64 --tg 128 --reps 3 2>&1 | tee -a "$O/bench.log"
    fi
fi
echo "==== summary"
printf '%s\n' "${summary[@]}"
grep -h '^RESULT\|^# /tmp' "$O"/bench.log 2>/dev/null
cat "$O"/profile.log 2>/dev/null
for f in engine engine_q4k engine_q4k_f32; do echo "$f: $(grep -h 'worst logits' "$O/$f.log" 2>/dev/null)"; done
grep -h '| qwen3\|^| model' "$O"/peer_bench.log 2>/dev/null
