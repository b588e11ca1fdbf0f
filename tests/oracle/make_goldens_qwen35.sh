#!/bin/bash
# make_goldens_qwen35.sh — llama.cpp goldens for models of our own qwen35 writer
# (build/tests/tools/mksynth_qwen35) into tests/golden/qwen35/: per model NAME a NAME.json (the
# writer arguments, the file's sha256, the prompts, llama.cpp's greedy ids and top-1 gaps) and
# NAME.pN.logits.f32 (every prompt position, n_tokens × n_vocab LE f32). Oracle settings as the
# shared synthetic goldens: --threads 1 --kv f32, flash attention off, one decode for the prompt.
# Needs the oracle (fetch.sh + build.sh; network for the first fetch). test_qwen35 rebuilds each
# model with the writer and checks the sha256 before comparing.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
bash tests/oracle/fetch.sh libs
ORACLE=$(bash tests/oracle/build.sh)
MK=${LLM170_BUILD:-build}/tests/tools/mksynth_qwen35
[ -x "$MK" ] || { echo "make_goldens_qwen35.sh: build $MK first (make)" >&2; exit 1; }
OUT=tests/golden/qwen35
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

# name | writer arguments (what each model exercises is in tests/golden/qwen35/README.md)
MODELS=(
"dense_hv3|--arch qwen35 --seed 351 --vocab 512 --n-embd 96 --n-layer 6 --interval 3 --n-head 8 --n-head-kv 2 --head-dim 32 --rope-dim 32 --sections 6,5,5,0 --rope-base 10000 --d-state 32 --h-k 2 --h-v 6 --d-conv 4 --n-ff 160 --rms-eps 0.05 --tie"
"moe_fused_pattern|--arch qwen35moe --seed 352 --vocab 512 --n-embd 64 --n-layer 6 --recurrent 011011 --n-head 4 --n-head-kv 1 --head-dim 16 --rope-dim 8 --sections 2,1,1,0 --rope-base 10000 --d-state 8 --h-k 4 --h-v 4 --n-expert 16 --n-used 4 --n-ff-exp 24 --n-ff-shexp 48 --fused-gate-up --nextn 1"
"dense_q8|--arch qwen35 --seed 353 --vocab 512 --n-embd 128 --n-layer 4 --interval 4 --n-head 4 --n-head-kv 2 --head-dim 64 --rope-dim 16 --sections 3,3,2,0 --rope-base 1000000 --d-state 32 --h-k 2 --h-v 4 --n-ff 256 --type q8_0 --embd-type f32"
)
PROMPT_SHORT="1,17,300,45,511,2,99"
PROMPT_LONG=$(/usr/bin/python3 -c 'import random; r=random.Random(35); print(",".join(str(r.randrange(3,512)) for _ in range(130)))')

for spec in "${MODELS[@]}"; do
    name=${spec%%|*}; args=${spec#*|}
    model=$TMP/$name.gguf
    # shellcheck disable=SC2086
    "$MK" --out "$model" $args
    sha=$(sha256sum "$model" | cut -d' ' -f1)
    greedy=()
    for p in short long; do
        if [ $p = short ]; then toks=$PROMPT_SHORT; else toks=$PROMPT_LONG; fi
        n=$(echo "$toks" | tr ',' '\n' | wc -l)
        "$ORACLE" logits --model "$model" --prompt-tokens "$toks" --all --out "$OUT/$name.p$n.logits.f32" \
            --threads 1 --kv f32 >/dev/null
        greedy+=("$n" "$toks" "$("$ORACLE" greedy --model "$model" --prompt-tokens "$toks" --n 24 --threads 1 --kv f32)")
    done
    /usr/bin/python3 - "$OUT/$name.json" "$args" "$sha" "${greedy[@]}" <<'PY'
import json, sys
out, args, sha = sys.argv[1:4]
rest = sys.argv[4:]
prompts = []
for i in range(0, len(rest), 3):
    n, toks, g = rest[i:i + 3]
    g = json.loads(g)
    prompts.append({"n_tokens": int(n), "tokens": [int(t) for t in toks.split(",")],
                    "logits_file": out.rsplit("/", 1)[1].replace(".json", ".p%s.logits.f32" % n),
                    "greedy_24": g["ids"], "greedy_gap": g["gap"]})
doc = {"writer_args": args.split(), "sha256": sha,
       "oracle": "tests/oracle oracle (llama.cpp 80fb11a CPU), logits --all --threads 1 --kv f32 (flash attention off), greedy --n 24",
       "prompts": prompts}
json.dump(doc, open(out, "w"), indent=1)
PY
    echo "wrote $OUT/$name.json"
done
