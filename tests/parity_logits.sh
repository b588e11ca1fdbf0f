#!/bin/bash
# parity_logits.sh — `llm170 diag logits --all` against llama.cpp's logits of every prompt position
# (tests/golden/logits/*: stories260K and synthetic llama/qwen2/qwen3/qwen3moe models, F32 weights,
# tolerance 1e-4; tests/golden/quant/*: the same kind of models with weights quantized by
# tests/tools/requant to 15 types, tolerance 1e-2). Each model is rebuilt (../shared/tools/
# synth_dense.py, then requant) or taken from ../shared/data, and must be the exact file (sha256;
# for quantized models the weights' sha256) the golden was made from. The goldens used an F32 KV
# cache: the CLI's --kv-f32 is passed when it has one.
cd "$(dirname "$0")/.." || exit 1
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has diag logits; then
    echo "skip - parity logits: llm170 CLI lacks diag logits"; exit 0
fi
EXTRA="${LLM170_PARITY_EXTRA:-}"   # e.g. "--backend hip" on a GPU machine
"$CLI" diag --help 2>&1 | grep -q -- '--kv-f32' && EXTRA="$EXTRA --kv-f32"
SHARED=$(find_shared) || SHARED=""
PYNP=$(find_numpy_python) || PYNP=""
[ -n "$SHARED" ] && export LLM170_SHARED=$SHARED
LIVE=$(oracle_bin) || LIVE=""   # the fetched oracle, when this machine has it
REQUANT=${LLM170_REQUANT:-${LLM170_BUILD:-$PWD/build}/tests/tools/requant}
python3 tests/oracle/parity.py logits --live "$LIVE" --cli "$CLI" --extra="$EXTRA" --shared "$SHARED" --pynp "$PYNP" \
    --requant "$REQUANT" --golden tests/golden/logits/*.json tests/golden/quant/*.json ||
    echo "not ok - parity logits: tests/oracle/parity.py stopped (exit $?): the cases after the last line were not compared"
# without the oracle only the committed goldens are compared: say so, the live extra cases are not silently gone
[ -n "$LIVE" ] || echo "skip - parity logits live oracle extras: needs the oracle from .cache/oracle (tests/oracle/fetch.sh libs, from npm; then build.sh): not available"
exit 0
