#!/bin/bash
# gpu_hybrid_run.sh DIR — one device session for the hybrid (qwen35*) hip work: kernel compile +
# kernel tests + hybrid engine parity vs the CPU engine, then speed at real shapes (bigsynth q4_k).
# DIR (default: this script's folder) holds bin/ (test_hip_compile, test_hip_kernels, test_hip_engine,
# hip_bench, requant built elsewhere), libs/ (utf8proc, pcre2), src/kernels/ (this tree's kernels),
# shared/ (README.md, models/stories260K.gguf, models/synthetic/qwen35*-tiny.gguf), m/ (mksynth_qwen35
# shapes, docs/hybrid-models.md), m_q/h35-q4k.gguf, bigsynth.py, tokenizer.json.xz. Logs go to $OUT.
# NOBENCH=1: tests only.
set -u
G=$(cd "${1:-$(dirname "$0")}" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$G/libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export XDG_CACHE_HOME=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv,noheader
xz -dc "$G/tokenizer.json.xz" >/tmp/tok.json
if [ -z "${NOBENCH:-}" ]; then
  (python3 "$G/bigsynth.py" --preset qwen35-27b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/b27.gguf >"$O/synth.log" 2>&1
   echo $? >/tmp/s27
   python3 "$G/bigsynth.py" --preset qwen35-35b-a3b --quant q4_k --tokenizer /tmp/tok.json --out /tmp/b35.gguf >>"$O/synth.log" 2>&1
   echo $? >/tmp/s35) &
fi
cd "$G/src"
t=$SECONDS; "$G/bin/test_hip_compile" >"$O/compile.log" 2>&1; echo "== compile rc=$? $((SECONDS-t))s"
grep -E '^not ok' "$O/compile.log" | head -5
t=$SECONDS; "$G/bin/test_hip_kernels" >"$O/kernels.log" 2>&1; echo "== kernels rc=$? $((SECONDS-t))s"
grep -E '^(not ok|skip)|d_state|gated norm|^# +(gdn|gattn|shexp)' "$O/kernels.log" | head -30
grep -cE '^ok' "$O/kernels.log"
t=$SECONDS
LLM170_SHARED=$G/shared LLM170_HIP_HYBRID_MODELS=$G/m/h35-d128.gguf:$G/m/h35moe-d32.gguf timeout 60 "$G/bin/test_hip_engine" >"$O/engine.log" 2>&1
echo "== engine rc=$? $((SECONDS-t))s"
grep -E '^(not ok|ok|skip)|^# /|worst' "$O/engine.log" | head -40
awk '/max rel/ {print $NF}' "$O/engine.log" | sort -g | tail -1 | sed 's/^/max rel over rows: /'
"$G/bin/requant" "$G/m_q/h35-q4k.gguf" /tmp/h35-q4k-f32.gguf f32 >/dev/null || echo "requant failed"
t=$SECONDS
LLM170_HIP_Q8=0 LLM170_SHARED=/nonexistent LLM170_HIP_HYBRID_MODELS=$G/m_q/h35-q4k.gguf=/tmp/h35-q4k-f32.gguf timeout 30 "$G/bin/test_hip_engine" >"$O/engine_q4k.log" 2>&1
echo "== engine q4_K f32 act vs dequantized CPU (tol 1e-3) rc=$? $((SECONDS-t))s"
grep -E '^(not ok)|worst' "$O/engine_q4k.log" | head -6
LLM170_SHARED=/nonexistent LLM170_HIP_TOL=5e-2 LLM170_HIP_HYBRID_MODELS=$G/m_q/h35-q4k.gguf=/tmp/h35-q4k-f32.gguf timeout 30 "$G/bin/test_hip_engine" >"$O/engine_q4k_q8.log" 2>&1
echo "== engine q4_K q8 act vs dequantized CPU (tol 5e-2) rc=$?"
grep -E '^(not ok)|worst' "$O/engine_q4k_q8.log" | head -6
[ -n "${NOBENCH:-}" ] && exit 0
HB=$G/bin/hip_bench
while [ ! -f /tmp/s27 ]; do sleep 1; done
echo "== synth 27b rc=$(cat /tmp/s27) at ${SECONDS}s"
timeout 70 "$HB" /tmp/b27.gguf --pp 512 --tg 128 --reps 2 2>&1 | grep -v '^#' | tee "$O/bench27.log"
timeout 25 "$HB" /tmp/b27.gguf --pp 512 --tg 16 --reps 1 --profile 2>&1 | grep PROFILE | grep -v 'RESULT' >"$O/prof27.log"; grep -v '(pp)' "$O/prof27.log" | head -4; grep '(pp)' "$O/prof27.log" | head -20
rm -f /tmp/b27.gguf
while [ ! -f /tmp/s35 ]; do sleep 1; done
echo "== synth 35b rc=$(cat /tmp/s35) at ${SECONDS}s"
timeout 60 "$HB" /tmp/b35.gguf --pp 512 --tg 128 --reps 2 2>&1 | grep -v '^#' | tee "$O/bench35.log"
timeout 25 "$HB" /tmp/b35.gguf --pp 512 --tg 16 --reps 1 --profile 2>&1 | grep PROFILE >"$O/prof35.log"; grep -v '(pp)' "$O/prof35.log" | head -30; grep '(pp)' "$O/prof35.log" | head -24
echo "== done at ${SECONDS}s"
