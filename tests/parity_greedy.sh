#!/bin/bash
# parity_greedy.sh — `llm170 infer` (greedy) against llama.cpp's greedy continuations
# (tests/golden/greedy_*.json): stories260K, 10 text prompts x 64 tokens, and synthetic qwen2 /
# qwen3 / qwen3moe models (rebuilt by ../shared/tools/synth_dense.py; quantized to q4_k / q8_0 / f16 by
# tests/tools/requant for the *-e256-* goldens), 2 prompts x 32 tokens. Ids
# must be equal, except after a first divergence at a near-tie (top-2 gap < 1e-2 relative), or when
# we stop at EOS. Each prompt alone, then all prompts of a model as one batched call.
# LLM170_PARITY_EXTRA adds CLI arguments (e.g. "--backend hip" on a GPU machine).
cd "$(dirname "$0")/.." || exit 1
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has infer; then
    echo "skip - parity greedy: llm170 CLI lacks infer"; exit 0
fi
SHARED=$(find_shared) || SHARED=""
PYNP=$(find_numpy_python) || PYNP=""
[ -n "$SHARED" ] && export LLM170_SHARED=$SHARED
REQUANT=${LLM170_REQUANT:-${LLM170_BUILD:-$PWD/build}/tests/tools/requant}
python3 tests/oracle/parity.py greedy --cli "$CLI" --shared "$SHARED" --pynp "$PYNP" --requant "$REQUANT" --golden tests/golden/greedy_*.json --extra="${LLM170_PARITY_EXTRA:-}" ||
    echo "not ok - parity greedy: tests/oracle/parity.py stopped (exit $?): the cases after the last line were not compared"
python3 tests/oracle/parity.py greedy --cli "$CLI" --shared "$SHARED" --pynp "$PYNP" --requant "$REQUANT" --golden tests/golden/greedy_*.json --batched --extra="${LLM170_PARITY_EXTRA:-}" ||
    echo "not ok - parity greedy batched: tests/oracle/parity.py stopped (exit $?): the cases after the last line were not compared"
exit 0
