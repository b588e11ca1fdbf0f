#!/bin/bash
# parity_vulkan.sh — the `vulkan` backend against llama.cpp: the logits goldens (tests/golden/logits,
# tests/golden/quant: llama, qwen2, qwen3, qwen3moe; F32 weights to 1e-4, 15 quantized types to 1e-2),
# the greedy continuations (tests/golden/greedy_*) and the shared qwen35 / qwen35moe / qwen4exp goldens
# (logits of every position to 1e-4, greedy ids), as parity_logits.sh, parity_greedy.sh and parity_hybrid.sh run
# them for the CPU, through `llm170 diag logits / infer --backend vulkan`. Runs on any Vulkan device,
# lavapipe in CI; skips without one.
cd "$(dirname "$0")/.." || exit 1
set -o pipefail # a parity.py that stops is reported, not hidden by the sed after it
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has diag logits; then
    echo "skip - parity vulkan: llm170 CLI lacks diag logits"; exit 0
fi
SHARED=$(find_shared) || SHARED=""
if [ -z "$SHARED" ]; then
    echo "skip - parity vulkan: needs ../shared/data (absent)"; exit 0
fi
export LLM170_SHARED=$SHARED
# under `make asan`: the Vulkan loader unloads the driver at vkDestroyInstance and what the driver still
# held then reads as a leak at exit; the CLI cannot keep it mapped, so leaks are not checked here
# (test_vk_kernels and test_vk_engine check the backend's own under ASan, with the driver pinned)
[ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
# a device? the backend's own refusal says why not
probe=$("$CLI" diag logits --model "$SHARED/models/stories260K.gguf" --prompt-tokens 1 --out /dev/null \
        --backend vulkan 2>&1 >/dev/null)
if [ $? -ne 0 ]; then
    case "$probe" in
    *"vulkan backend unavailable"*) echo "skip - parity vulkan: ${probe##*: vulkan backend unavailable: }"; exit 0 ;;
    *) echo "not ok - parity vulkan: the backend failed on stories260K: $probe"; exit 0 ;;
    esac
fi
PYNP=$(find_numpy_python) || PYNP=""
REQUANT=${LLM170_REQUANT:-${LLM170_BUILD:-$PWD/build}/tests/tools/requant}
EXTRA="--backend vulkan"
"$CLI" diag --help 2>&1 | grep -q -- '--kv-f32' && KV="--kv-f32"
python3 tests/oracle/parity.py logits --cli "$CLI" --extra="$EXTRA ${KV:-}" --shared "$SHARED" --pynp "$PYNP" \
    --requant "$REQUANT" --golden tests/golden/logits/*.json tests/golden/quant/*.json |
    sed 's/^\(ok\|not ok\|skip\) - /\1 - vulkan /' ||
    echo "not ok - parity vulkan logits: tests/oracle/parity.py stopped: the cases after the last line were not compared"
python3 tests/oracle/parity.py greedy --cli "$CLI" --shared "$SHARED" --pynp "$PYNP" --requant "$REQUANT" \
    --golden tests/golden/greedy_*.json --extra="$EXTRA" |
    sed 's/^\(ok\|not ok\|skip\) - /\1 - vulkan /' ||
    echo "not ok - parity vulkan greedy: tests/oracle/parity.py stopped: the cases after the last line were not compared"
# the Gated DeltaNet hybrids and qwen4exp
python3 tests/oracle/hybrid_golden.py --cli "$CLI" --dir "$SHARED/models/synthetic" \
    --extra="$EXTRA" | sed 's/^\(ok\|not ok\|skip\) - /\1 - vulkan /' ||
    echo "not ok - parity vulkan hybrids: tests/oracle/hybrid_golden.py stopped: the cases after the last line were not compared"
exit 0
