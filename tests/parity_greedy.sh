#!/bin/bash
# parity_greedy.sh — `llm170 infer` (greedy, 64 tokens) on stories260K against llama.cpp's greedy
# continuations of 10 prompts (tests/golden/greedy_stories260K.json): ids must be equal, except
# after a first divergence at a near-tie (top-2 gap < 1e-2 relative), or when we stop at EOS.
# Run once per prompt, then all 10 prompts as one batched call (one sequence each).
cd "$(dirname "$0")/.." || exit 1
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has infer; then
    echo "skip - parity greedy: llm170 CLI lacks infer"; exit 0
fi
SHARED=$(find_shared) || { echo "skip - parity greedy: no ../shared/data/models/stories260K.gguf"; exit 0; }
G=tests/golden/greedy_stories260K.json
M=$SHARED/models/stories260K.gguf
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"]["sha256"])' "$G")
got=$(python3 tests/oracle/gguf_info.py sha256 "$M")
if [ "$want" != "$got" ]; then
    echo "not ok - parity greedy: $M is not the model the golden was made from"; exit 0
fi
python3 tests/oracle/parity.py greedy --cli "$CLI" --golden "$G" --model "$M"
python3 tests/oracle/parity.py greedy --cli "$CLI" --golden "$G" --model "$M" --batched
exit 0
