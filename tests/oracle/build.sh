#!/bin/bash
# build.sh — build the oracle program into .cache/oracle/bin/oracle, linked against the llama.cpp
# libraries that fetch.sh put in .cache/oracle/lib (rpath $ORIGIN/../lib). Not part of the product
# build. Prints the program path; exits 1 (with the reason on stderr) when the libraries are absent.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${ORACLE_CACHE:-$ROOT/.cache/oracle}
LIB=$CACHE/lib
SRC=$ROOT/tests/oracle
BIN=$CACHE/bin/oracle
if [ ! -f "$LIB/libllama.v0.4.0.so" ]; then
    echo "build.sh: no oracle libraries in $LIB (run tests/oracle/fetch.sh)" >&2
    exit 1
fi
mkdir -p "$CACHE/bin"
if [ ! -x "$BIN" ] || [ "$SRC/oracle.c" -nt "$BIN" ] || [ "$SRC/llama_api.h" -nt "$BIN" ]; then
    ${CC:-cc} -std=c17 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Werror -o "$BIN.tmp" "$SRC/oracle.c" \
        -L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so \
        -Wl,-rpath,'$ORIGIN/../lib' -lm
    mv "$BIN.tmp" "$BIN"
fi
echo "$BIN"
