#!/bin/bash
# parity_hybrid.sh — the CLI (`diag logits --all`, `infer` greedy) against llama.cpp's goldens of the shared
# synthetic qwen35 / qwen35moe / qwen4exp models (../shared/data/models/synthetic/*.golden.json): logits ≤ 1e-4 at
# every position, greedy ids equal. LLM170_PARITY_EXTRA adds CLI arguments ("--backend hip" on a GPU).
cd "$(dirname "$0")/.." || exit 1
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has diag logits; then
    echo "skip - parity hybrid: llm170 CLI lacks diag logits"; exit 0
fi
SHARED=$(find_shared) || { echo "skip - parity hybrid: no ../shared/data (set LLM170_SHARED)"; exit 0; }
python3 tests/oracle/hybrid_golden.py --cli "$CLI" --dir "$SHARED/models/synthetic" --extra="${LLM170_PARITY_EXTRA:-}" ||
    echo "not ok - parity hybrid: tests/oracle/hybrid_golden.py stopped (exit $?): the cases after the last line were not compared"
exit 0
