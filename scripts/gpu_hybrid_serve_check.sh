#!/bin/bash
# gpu_hybrid_serve_check.sh STAGE — the first check of the next device session: on 2026-12-03 every HTTP
# request to qwen35-27b on the hip backend ended in an error after its prompt step (docs/benchmarks.md),
# while bench --np ran and the hybrids' engine tests passed. This serves a 4-layer qwen35 with the real
# 248k vocabulary (written here with ../shared/tools/bigsynth.py's writer; STAGE/tools/bigsynth.py,
# STAGE/tok.json.xz) through hip and prints one request's whole answer (streamed and not, sampled and
# greedy) and a short loadgen run; then the logits of a 9-token prompt's every row through hip (llm170 diag
# logits --all), counted for NaN / inf, with the tensor-core GEMM and without (LLM170_HIP_MMA=0): the
# requests end right after a prompt step, the only step whose products run on f16 tensor cores, and the
# check that ends a request on non-finite logits (b67617c) came after the last serving run that passed.
# MODEL=/tmp/q27.gguf (a bigsynth qwen35-27b) adds that file to the logits check.
# STAGE/new holds llm170* and loadgen, STAGE/libs their libraries.
set -u
S=$(cd "${1:?stage folder}" && pwd)
O=${OUT:-/tmp/out}
mkdir -p "$O"
export LD_LIBRARY_PATH=$S/libs:/usr/local/cuda/lib64 XDG_CACHE_HOME=/tmp/kc
xz -dc "$S/tok.json.xz" >/tmp/tok.json
python3 - "$S/tools/bigsynth.py" <<'PY'
import sys, importlib.util
spec = importlib.util.spec_from_file_location("bigsynth", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
m.PRESETS["qwen35-mini"] = dict(arch="qwen35", n_layer=4, n_embd=256, n_ff=512, n_head=4, n_head_kv=2, head_dim=256,
                                n_vocab=248320, n_rot=64, sections=[11, 11, 10, 0], d_state=128, h_k=2, h_v=4, d_conv=4,
                                interval=4)
sys.argv = ["bigsynth.py", "--preset", "qwen35-mini", "--quant", "q4_k", "--tokenizer", "/tmp/tok.json",
            "--out", "/tmp/mini35.gguf"]
m.main()
PY
N=$S/new
export LLM170_SOCKET=ipc:///tmp/hsc.sock LLM170_SCHED_STATS=2
"$N/llm170" serve --model /tmp/mini35.gguf --backend hip --slots 8 --ctx 1024 --port 18092 >"$O/serve.log" 2>&1 &
sp=$!
for _ in $(seq 600); do curl -sf localhost:18092/health 2>/dev/null | grep -q ok && break; sleep 0.1; done
for body in '"temperature":0.8,"stream":true' '"temperature":0.8' '"temperature":0'; do
    curl -s -m 5 localhost:18092/v1/completions -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,$body}" | head -c 1500
    echo
done
timeout 10 "$N/loadgen" --port 18092 --clients 8 --seconds 4 --max-tokens 16 --temperature 0.8 2>&1 | grep -E '^clients'
kill $sp
wait $sp 2>/dev/null
grep -v 'ready\|serving\|listening\|stopp\|drain' "$O/serve.log" | head -8
for m in /tmp/mini35.gguf ${MODEL:-}; do
    for mma in 1 0; do
        LLM170_HIP_MMA=$mma "$N/llm170" diag logits --model "$m" --backend hip --all \
            --prompt "Once upon a time there was a little" --out /tmp/lg.f32 >/dev/null 2>&1 || echo "diag failed on $m"
        python3 -c "import numpy as n; v=n.fromfile('/tmp/lg.f32', n.float32); f=n.isfinite(v); \
print('$m MMA=$mma: %d values, %d not finite, |max| %.3g' % (v.size, v.size - f.sum(), n.abs(v[f]).max()))"
    done
done
