#!/bin/bash
# gpu_moe.sh STAGE — the MoE prompt path (grouped tensor-core GEMMs, docs/hip-backend.md) checked and
# timed in one device call:
#   1. kernels against their CPU references (test_hip_kernels: moe_group + mmag* among them);
#   2. engine parity hip vs CPU on a synthetic qwen3moe with 256-wide rows in q4_K, q8_0 and f16 (the
#      grouped GEMM's types; f32 weights keep the GEMVs), prompts of 100 tokens;
#   3. speed: bigsynth qwen3-30b-a3b and qwen35-35b-a3b (q4_k) pp512 / pp2048 / tg128 with the grouped
#      GEMMs and without (LLM170_HIP_MOE_GEMM=0), and llama.cpp 80fb11a's llama-bench on the same files
#      when PEER=1 (built here by scripts/peer_build.sh from STAGE/anchor/llama-src.tar.xz meanwhile).
# STAGE: new/ (hip_bench, requant, test_hip_kernels, test_hip_engine), libs/, tok.json.xz, tools/bigsynth.py,
# sh/tools/synth_dense.py (+ gguf_synth.py), anchor/ with PEER=1. Run from the repository root.
set -u
S=$(cd "${1:?stage folder}" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/kcache
B=$S/new
T=$O/tests.log
R=$O/bench.log
say() { echo "[$SECONDS s] $*" | tee -a "$O/summary.txt"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader | tee -a "$O/summary.txt"
xz -dc "$S/tok.json.xz" >/tmp/tok.json
peer_pid=
if [ -n "${PEER:-}" ]; then
    (bash scripts/peer_build.sh build "$S/anchor/llama-src.tar.xz" >"$O/peer_build.log" 2>&1; echo $? >/tmp/peer_rc) &
    peer_pid=$!
fi
synth() { # preset out
    [ -f "$2" ] || python3 "$S/tools/bigsynth.py" --preset "$1" --quant q4_k --tokenizer /tmp/tok.json \
        --out "$2.tmp" >>"$O/synth.log" 2>&1 && mv "$2.tmp" "$2" || { rm -f "$2.tmp"; touch "$2.fail"; }
}
(synth qwen3-30b-a3b /tmp/q30.gguf; synth qwen35-35b-a3b /tmp/q35.gguf) &

t=$SECONDS; timeout 150 "$B/test_hip_kernels" >"$T" 2>&1; say "test_hip_kernels rc=$? $((SECONDS - t))s"
grep -E 'mmag|moe_group' "$T" | head -24 >>"$O/summary.txt"
python3 "$S/sh/tools/synth_dense.py" --arch qwen3moe --n-embd 256 --n-ff 512 --n-expert 8 --n-expert-used 3 \
    --n-ff-exp 256 --n-layer 2 --seed 5 --out /tmp/moe.gguf >/dev/null &&
    "$B/requant" /tmp/moe.gguf /tmp/moe-q4_k.gguf q4_k >/dev/null && "$B/requant" /tmp/moe.gguf /tmp/moe-q8_0.gguf q8_0 >/dev/null
python3 "$S/sh/tools/synth_dense.py" --arch qwen3moe --n-embd 256 --n-ff 512 --n-expert 8 --n-expert-used 3 \
    --n-ff-exp 256 --n-layer 2 --seed 6 --dtype f16 --out /tmp/moe-f16.gguf >/dev/null
for g in 1 0; do
    t=$SECONDS
    LLM170_HIP_MOE_GEMM=$g LLM170_HIP_MODELS=/tmp/moe-q4_k.gguf:/tmp/moe-q8_0.gguf:/tmp/moe-f16.gguf LLM170_HIP_TOL=6e-2 \
        timeout 120 "$B/test_hip_engine" >"$O/engine-moe$g.log" 2>&1
    say "test_hip_engine MoE (MOE_GEMM=$g) rc=$? $((SECONDS - t))s: $(grep -c '^ok' "$O/engine-moe$g.log") ok, $(grep -c '^not ok' "$O/engine-moe$g.log") not ok"
    grep -E '^not ok|worst' "$O/engine-moe$g.log" | head -12 >>"$O/summary.txt"
done
say "kernels: $(grep -c '^ok' "$T") ok, $(grep -c '^not ok' "$T") not ok"
grep -E '^not ok' -A3 "$T" | head -20 >>"$O/summary.txt"

ours() { # label model args...
    local l=$1 m=$2; shift 2
    timeout 150 "$B/hip_bench" "$m" "$@" 2>&1 | grep -E '^RESULT' | sed "s/^/ours $l /" | tee -a "$R" "$O/summary.txt"
}
peer() { # label model
    [ -x /root/llama/build/bin/llama-bench ] || return 0
    timeout 200 /root/llama/build/bin/llama-bench -m "$2" -fa 1 -ngl 99 -r 3 -p 512,2048 -n 128 2>&1 | grep -E '^\|' |
        sed "s/^/peer $1 /" | tee -a "$R" "$O/summary.txt"
}
wait_file() {
    local t0=$SECONDS
    while [ ! -f "$1" ]; do
        if [ -f "$1.fail" ] || [ $((SECONDS - t0)) -gt 300 ]; then say "no $1"; return 1; fi
        sleep 1
    done
}
for m in q30 q35; do
    wait_file /tmp/$m.gguf || continue
    ours "$m" /tmp/$m.gguf --pp 512 --tg 128 --reps 3
    ours "$m" /tmp/$m.gguf --pp 2048 --tg 0 --reps 2
    (export LLM170_HIP_MOE_GEMM=0; ours "$m-gemv" /tmp/$m.gguf --pp 512 --tg 0 --reps 2)
    if [ -n "$peer_pid" ]; then
        wait "$peer_pid"
        peer "$m" /tmp/$m.gguf
        ours "$m-again" /tmp/$m.gguf --pp 512 --tg 128 --reps 3
    fi
    rm -f /tmp/$m.gguf
done
say "done"
