#!/bin/bash
# make_goldens_qwen4exp.sh — llama.cpp goldens for models of our own qwen4exp writer
# (build/tests/tools/mksynth_qwen4exp) into tests/golden/qwen4exp/: per model NAME a NAME.json (the
# writer arguments, the file's sha256, the prompts, llama.cpp's argmax and top-1/top-2 gap at every
# prompt position, its greedy ids and their gaps) and NAME.pN.logits.f32 (every prompt position,
# n_tokens × n_vocab LE f32). Oracle settings as the qwen35 goldens: --threads 1 --kv f32, flash
# attention off, one decode for the prompt, then one decode per greedy token. Needs the oracle
# (fetch.sh + build.sh; network for the first fetch). A test rebuilds each model with the writer
# and checks the sha256 before comparing, so the models themselves are not stored.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
bash tests/oracle/fetch.sh libs
ORACLE=$(bash tests/oracle/build.sh)
MK=${LLM170_BUILD:-build}/tests/tools/mksynth_qwen4exp
[ -x "$MK" ] || { echo "make_goldens_qwen4exp.sh: build $MK first (make $MK)" >&2; exit 1; }
OUT=tests/golden/qwen4exp
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

# name | writer arguments (what each model exercises is in tests/golden/qwen4exp/README.md)
MODELS=(
"hc4_qsa_ple|--seed 4171 --vocab 512 --n-embd 64 --n-layer 8 --interval 4 --hc 4 --hc-lr 6 --n-head 4
    --n-head-kv 2 --head-dim 16 --n-rot 16 --sections 3,3,2,0 --ratios 4 --top-k 8 --idx-heads 4
    --idx-dim 16 --d-state 8 --h-k 2 --h-v 6 --n-expert 6 --n-used 3 --n-ff-exp 16 --n-ff-shexp 24
    --ple-layer 1 --ngram 3 --heads-per-ngram 4 --ple-kernel 4 --ple-vocab 11,13,17,19,23,29,31,37
    --ple-eos 2"
"hc3_ratio0_tied|--seed 4112 --vocab 512 --n-embd 48 --n-layer 6 --interval 3 --hc 3 --hc-lr 8
    --n-head 4 --n-head-kv 1 --head-dim 32 --n-rot 8 --sections 1,1,0,1 --ratios 0,0,0,0,0,2 --top-k 6
    --idx-heads 2 --idx-dim 16 --d-state 16 --h-k 2 --h-v 4 --n-expert 4 --n-used 2 --n-ff-exp 24
    --n-ff-shexp 32 --fused-gate-up --no-ple --tie --rms-eps 0.02 --gain 2 --embd-std 0.5"
"q8|--seed 4105 --vocab 512 --n-embd 64 --n-layer 4 --interval 4 --hc 4 --hc-lr 32 --n-head 4
    --n-head-kv 2 --head-dim 32 --n-rot 16 --sections 3,3,2,0 --ratios 4 --top-k 8 --idx-heads 4
    --idx-dim 32 --d-state 16 --h-k 2 --h-v 4 --n-expert 6 --n-used 3 --n-ff-exp 32 --n-ff-shexp 32
    --ple-layer 1 --ngram 3 --heads-per-ngram 1 --ple-kernel 4 --ple-eos 5 --type q8_0 --embd-type f32
    --ple-type q8_0"
)
# 7 tokens with both PLE eos ids of the models (5 at position 2, 2 at position 5)
PROMPT_SHORT="1,17,5,300,45,2,99"
# 130 random ids with PLE eos ids planted singly, doubled, tripled and side by side (2 is the eos of
# hc4_qsa_ple, 5 that of q8; for the other model each is an ordinary token)
PROMPT_LONG=$(/usr/bin/python3 -c '
import random
r = random.Random(4)
t = [r.randrange(3, 512) for _ in range(130)]
for p, v in ((17, 2), (40, 2), (41, 2), (63, 5), (88, 5), (89, 5), (105, 2), (106, 5),
             (120, 2), (121, 2), (122, 2)):
    t[p] = v
t[0] = 1
print(",".join(map(str, t)))')

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
        g=$("$ORACLE" greedy --model "$model" --prompt-tokens "$toks" --n 24 --threads 1 --kv f32)
        greedy+=("$n" "$toks" "$g")
    done
    /usr/bin/python3 - "$OUT/$name.json" "$args" "$sha" "${greedy[@]}" <<'PY'
import array, json, sys
out, args, sha = sys.argv[1:4]
rest = sys.argv[4:]
folder, base = out.rsplit("/", 1)
prompts = []
for i in range(0, len(rest), 3):
    n, toks, g = rest[i:i + 3]
    g = json.loads(g)
    lf = base.replace(".json", ".p%s.logits.f32" % n)
    lg = array.array("f")
    with open(folder + "/" + lf, "rb") as f:
        lg.frombytes(f.read())
    nv = len(lg) // int(n)
    am, gap = [], []
    for r in range(int(n)):
        row = lg[r * nv:(r + 1) * nv]
        best = max(range(nv), key=row.__getitem__)
        second = max(row[j] for j in range(nv) if j != best)
        am.append(best)
        gap.append(round(row[best] - second, 7))
    prompts.append({"n_tokens": int(n), "tokens": [int(t) for t in toks.split(",")], "logits_file": lf,
                    "n_vocab": nv, "argmax": am, "argmax_gap": gap, "min_argmax_gap": min(gap),
                    "greedy_24": g["ids"], "greedy_gap": g["gap"], "min_greedy_gap": min(g["gap"])})
doc = {"writer_args": args.split(), "sha256": sha,
       "oracle": "tests/oracle oracle (llama.cpp 80fb11a CPU), logits --all --threads 1 --kv f32"
                 " (flash attention off), greedy --n 24",
       "prompts": prompts}
with open(out, "w") as f:
    json.dump(doc, f, indent=1)
PY
    echo "wrote $OUT/$name.json"
done
