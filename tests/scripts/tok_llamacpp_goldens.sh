#!/bin/bash
# tok_llamacpp_goldens.sh LIBDIR APIDIR — regenerate tests/golden/tok_llamacpp_<vocab>.txt from
# llama.cpp itself (see tok_llamacpp_dump.c). LIBDIR holds the npm node-llama-cpp 3.21.1 CPU
# libraries (libllama.v0.4.0.so, libggml*.so, libggml-cpu-*.so); APIDIR holds the oracle's
# llama_api.h. Inputs: the shared stress corpus. Vocabularies: the GGUFs in ../shared/data, the
# qwen2 and llama-bpe vocabs test_tokenizer rebuilds (LLM170_TOK_WRITE_VOCABS), and the Qwen3
# vocabs of tok_qwen3_vocab.sh when built.
set -eu
LIB=${1:?LIBDIR}; API=${2:?APIDIR}
BUILD=${BUILD:-build}
SHARED=${LLM170_SHARED:-../shared/data}
OUT=tests/golden
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
cc -std=c17 -O2 -Wall -Wextra -I"$API" -o "$TMP/dump" tests/scripts/tok_llamacpp_dump.c \
    -L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -Wl,-rpath,"$LIB"
CPU="$LIB/libggml-cpu-haswell.so"
LLM170_TOK_WRITE_VOCABS="$TMP" "$BUILD/tests/test_tokenizer" >/dev/null || true
T=$SHARED/tokenizer
mkdir -p "$OUT"
one() { # name gguf
    [ -f "$2" ] || { echo "skip $1: $2 absent"; return; }
    "$TMP/dump" "$CPU" "$1" "$2" "$T"/stress/*.txt > "$OUT/tok_llamacpp_$1.txt"
    echo "wrote $OUT/tok_llamacpp_$1.txt"
}
for v in llama-spm phi-3 gpt-2 deepseek-coder deepseek-llm falcon mpt refact starcoder gpt-neox baichuan; do
    one "$v" "$T/ggml-vocab-$v.gguf"
done
"$TMP/dump" --unicode > "$OUT/tok_llamacpp_unicode.txt" && echo "wrote $OUT/tok_llamacpp_unicode.txt"
one stories260K "$SHARED/models/stories260K.gguf"
one qwen2 "$TMP/qwen2-vocab.gguf"
one llama-bpe "$TMP/llama-bpe-vocab.gguf"
one qwen3 "$BUILD/tok/qwen3-vocab.gguf"
one qwen3-pre-qwen35 "$BUILD/tok/qwen3-pre-qwen35-vocab.gguf"
