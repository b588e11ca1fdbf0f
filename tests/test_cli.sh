#!/bin/bash
# test_cli.sh — the llm170 CLI contract of system.md, on the real stories260K model.
# Expected values come from ../shared/data/models/stories260K.golden.json (an
# independent double-precision reference) and from the spec's stated formats.
set -u
L=${LLM170_BIN:-bin}/llm170
D=${LLM170_SHARED:-../shared/data}
M=$D/models/stories260K.gguf
G=$D/models/stories260K.golden.json
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

ok() { echo "ok - $1"; }
bad() { echo "not ok - $1"; shift; for l in "$@"; do echo "#   $l"; done; }
quiet() { "$@" >/dev/null 2>&1; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else bad "$name" "command: $*"; fi; }
# same A B: both outputs exist, are not empty and are equal (two failed runs are not "the same")
same() { [ -s "$1" ] && [ -s "$2" ] && cmp -s "$1" "$2"; }

# --- usage and errors (need no model) ---
"$L" --help >"$T/out" 2>&1; check "help exits 0 and lists infer" grep -q infer "$T/out"
"$L" frobnicate >/dev/null 2>"$T/err"; rc=$?
check "unknown command exits 2" test $rc -eq 2
check "unknown command says so on one stderr line" test "$(wc -l <"$T/err")" -eq 1
"$L" infer --prompt x >/dev/null 2>"$T/err"; rc=$?
check "missing --model is a usage error (2)" test $rc -eq 2
"$L" infer --model "$T/nope.gguf" --prompt x >/dev/null 2>"$T/err"; rc=$?
check "missing model file exits 1" test $rc -eq 1
check "missing model file message" grep -qx "llm170: cannot open model '$T/nope.gguf': No such file or directory" "$T/err"
for v in infer tokenize detokenize gguf-dump bench diag; do
    "$L" $v --help >"$T/out" 2>&1; rc=$?
    check "$v --help exits 0 with usage" test $rc -eq 0 -a -s "$T/out"
done
printf 'GGUF\003\000\000\000' >"$T/bad.gguf"
"$L" gguf-dump "$T/bad.gguf" >/dev/null 2>"$T/err"; rc=$?
check "truncated GGUF: clean error, exit 1" test $rc -eq 1
check "truncated GGUF: message names the file" grep -q "bad.gguf" "$T/err"

if [ ! -r "$M" ] || [ ! -r "$G" ]; then
    echo "skip - cli model tests: $M not found (shared test data absent)"
    exit 0
fi

# golden facts
read -r IDS0 TEXT0_FILE <<<"$(python3 - "$G" "$T" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
c = g["cases"][0]
open(sys.argv[2] + "/text0", "w").write(c["text"][len(c["prompt"]):])
open(sys.argv[2] + "/ids0", "w").write(",".join(map(str, c["ids"])))
print(",".join(map(str, c["prompt_ids_with_bos"])), sys.argv[2] + "/text0")
PY
)"

# tokenize: the golden's prompt ids, printed as [id, id, ...]
"$L" tokenize --model "$M" --text "Once upon a time" >"$T/tok"
check "tokenize prints the golden ids" test "$(cat "$T/tok")" = "[$(echo "$IDS0" | sed 's/,/, /g')]"
printf 'Once upon a time' | "$L" tokenize --model "$M" >"$T/tok2"
check "tokenize reads stdin" same "$T/tok" "$T/tok2"
"$L" tokenize --model "$M" --no-bos --text "Once upon a time" >"$T/tok3"
check "tokenize --no-bos drops BOS" test "$(cat "$T/tok3")" = "[$(echo "$IDS0" | cut -d, -f2- | sed 's/,/, /g')]"

# detokenize round trip
"$L" detokenize --model "$M" $(echo "$IDS0" | tr ',' ' ') >"$T/detok"
check "detokenize gives the text back" grep -qx " *Once upon a time" "$T/detok"

# infer: JSON lines, greedy continuation equal to the golden text
N=$(python3 -c 'import sys; print(len(sys.argv[1].split(",")) - len(sys.argv[2].split(",")))' "$(cat "$T/ids0")" "$IDS0")
"$L" infer --model "$M" --prompt "Once upon a time" --n-predict "$N" >"$T/infer"
python3 - "$T/infer" "$T/text0" "$IDS0" >"$T/res" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
want = open(sys.argv[2]).read()
n_prompt = len(sys.argv[3].split(","))
keys_ok = bool(lines) and all(list(l.keys()) == ["seq", "pos", "token", "text"] for l in lines)
pos_ok = bool(lines) and [l["pos"] for l in lines] == list(range(n_prompt, n_prompt + len(lines)))
text = "".join(l["text"] for l in lines)
print("keys", keys_ok); print("pos", pos_ok); print("text", text == want)
PY
check "infer lines are {seq,pos,token,text}" grep -qx "keys True" "$T/res"
check "infer positions follow the prompt" grep -qx "pos True" "$T/res"
check "infer greedy text equals the golden continuation" grep -qx "text True" "$T/res"

# batched: two sequences decoded together equal each run alone
A=1,274,287,381,261,352
B=1,403,407,261,378
"$L" infer --model "$M" --prompt-tokens $A --n-predict 20 >"$T/a"
"$L" infer --model "$M" --prompt-tokens $B --n-predict 20 >"$T/b"
"$L" infer --model "$M" --prompt-tokens $A --prompt-tokens $B --n-predict 20 >"$T/ab"
grep '"seq":0' "$T/ab" >"$T/ab0"
grep '"seq":1' "$T/ab" | sed 's/"seq":1/"seq":0/' >"$T/ab1"
check "batched seq 0 equals its solo run" same "$T/ab0" "$T/a"
check "batched seq 1 equals its solo run" same "$T/ab1" "$T/b"

# sampling: same seed → same tokens; temperature changes the result
"$L" infer --model "$M" --prompt-tokens 1 --n-predict 24 --temp 1.5 --seed 1 >"$T/s1"
"$L" infer --model "$M" --prompt-tokens 1 --n-predict 24 --temp 1.5 --seed 1 >"$T/s2"
"$L" infer --model "$M" --prompt-tokens 1 --n-predict 24 --temp 1.5 --seed 2 >"$T/s3"
check "same seed reproduces" same "$T/s1" "$T/s2"
differs() { [ -s "$1" ] && [ -s "$2" ] && ! cmp -s "$1" "$2"; }
check "another seed differs" differs "$T/s1" "$T/s3"

# diag logits: file sizes and n_vocab
"$L" diag logits --model "$M" --prompt-tokens "$IDS0" --out "$T/l1" >"$T/nv"
check "diag logits prints n_vocab" test "$(cat "$T/nv")" = 512
check "diag logits writes one row" test "$(stat -c %s "$T/l1")" -eq $((512 * 4))
"$L" diag logits --model "$M" --prompt-tokens "$IDS0" --all --out "$T/l2" >/dev/null
check "diag logits --all writes every row" test "$(stat -c %s "$T/l2")" -eq $((5 * 512 * 4))
tail -c $((512 * 4)) "$T/l2" >"$T/l2last"
check "last row of --all equals the single row" same "$T/l1" "$T/l2last"

# diag chunk-check passes on a 100-token prompt for every chunk size the issue names
P=$(python3 -c 'print(",".join(str(1 + (i * 37) % 500) for i in range(100)))')
check "chunk-check 1,7,16,64,512" quiet "$L" diag chunk-check --model "$M" --prompt-tokens "$P" --chunks 1,7,16,64,512

# chunk-check on every architecture: synthetic dense models from the shared writer
# (numpy: Debian's python3), the shared hybrid models as they are
PY3=/usr/bin/python3
SYN=${LLM170_SHARED_TOOLS:-../shared/tools}/synth_dense.py
if [ -x "$PY3" ] && "$PY3" -c 'import numpy' 2>/dev/null && [ -r "$SYN" ]; then
    for a in llama qwen2 qwen3 qwen3moe; do
        "$PY3" "$SYN" --arch $a --out "$T/$a.gguf" >/dev/null 2>&1
        check "chunk-check $a 1,7,16,64,512" quiet "$L" diag chunk-check --model "$T/$a.gguf" --prompt-tokens "$P" --chunks 1,7,16,64,512
    done
else
    echo "skip - chunk-check on synthetic dense archs: needs /usr/bin/python3 with numpy and $SYN"
fi
for h in qwen35-tiny qwen35moe-tiny; do
    HM=$D/models/synthetic/$h.gguf
    [ -r "$HM" ] || { echo "skip - chunk-check $h: $HM not found"; continue; }
    check "chunk-check $h 1,16,63,64,65,512" quiet "$L" diag chunk-check --model "$HM" --prompt-tokens "$P" --chunks 1,16,63,64,65,512
done

# bench: table and json rows
"$L" bench --model "$M" --pp 32 --tg 8 --np 2 --reps 1 --json >"$T/bench"
check "bench --json has pp32, tg8 and np 2 rows" test "$(grep -c '"test":"\(pp32\|tg8\|np 2\)"' "$T/bench")" -eq 3

# gguf-dump
"$L" gguf-dump --limit 2 "$M" >"$T/dump"
check "gguf-dump shows the architecture" grep -q 'general.architecture: string = "llama"' "$T/dump"
check "gguf-dump lists 48 tensors" test "$(grep -c ' offset ' "$T/dump")" -eq 48
"$L" gguf-dump --meta-only "$M" >"$T/dump2"
# the metadata must be there: an empty dump (a failed run) has no tensors either
check "gguf-dump --meta-only has no tensors" test "$(grep -c ' offset ' "$T/dump2")" -eq 0 -a \
    "$(grep -c 'general.architecture: string = "llama"' "$T/dump2")" -eq 1
exit 0
