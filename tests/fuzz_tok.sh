#!/bin/bash
# fuzz_tok.sh — build the tokenizer's libFuzzer target (tests/fuzz_tok.c) with
# ASan + UBSan and run a fixed budget from a seed corpus (the stress corpus and
# the llama.cpp .inp strings). FUZZ_RUNS (default 100000) and FUZZ_SECONDS
# (default 30) bound the run. Prints ok / not ok / skip - fuzz_tok.
set -u
cd "$(dirname "$0")/.."
OUT=build/fuzz_tok
RUNS=${FUZZ_RUNS:-100000}
SECS=${FUZZ_SECONDS:-30}
SHARED=${LLM170_SHARED:-../shared/data}
mkdir -p "$OUT"
if [ ! -f "$SHARED/README.md" ]; then
    echo "skip - fuzz_tok: $SHARED is absent"
    exit 0
fi
if ! command -v clang >/dev/null 2>&1; then
    echo "skip - fuzz_tok: clang with libFuzzer not installed"
    exit 0
fi
probe=$OUT/probe.c
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}' >"$probe"
if ! clang -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" >/dev/null 2>&1; then
    echo "skip - fuzz_tok: clang with libFuzzer not installed"
    exit 0
fi
SRC="$(ls worker/tok/tok_*.c) worker/gguf/gguf.c worker/num/qtype.c common/err.c"
CFLAGS="-std=c17 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer"
if ! clang $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        tests/fuzz_tok.c $SRC -lutf8proc -o "$OUT/fuzz_tok" >"$OUT/build.log" 2>&1; then
    sed 's/^/# /' "$OUT/build.log" | tail -20
    echo "not ok - fuzz_tok (build failed)"
    exit 1
fi
rm -rf "$OUT/corpus" "$OUT/seeds"
mkdir -p "$OUT/corpus" "$OUT/seeds"
i=0
for f in "$SHARED"/tokenizer/stress/*.txt; do
    for sel in 0 193 66 131 4; do  # vocab/flag selector byte, then the text
        { printf "\\$(printf %o $(( (sel + i) % 256 )))"; cat "$f"; } >"$OUT/seeds/s$i-$sel"
    done
    i=$((i + 1))
done
log=$OUT/fuzz.log
LLM170_SHARED="$SHARED" "$OUT/fuzz_tok" -runs="$RUNS" -max_total_time="$SECS" -max_len=4096 -seed=1 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix="$OUT/" -print_final_stats=1 "$OUT/corpus" "$OUT/seeds" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|fuzz_tok:' "$log" | head -20 | sed 's/^/# /'
    echo "not ok - fuzz_tok (exit $rc; log $log)"
    exit 1
fi
grep -E '^stat::number_of_executed_units' "$log" | sed 's/^/# /'
# a run that executed no input (an empty corpus, a zero budget) tested nothing
units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ "${units:-0}" -lt 1 ]; then
    echo "not ok - fuzz_tok (no input executed; log $log)"
    exit 1
fi
echo "ok - fuzz_tok"
