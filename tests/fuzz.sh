#!/bin/bash
# fuzz.sh — build the GGUF reader's libFuzzer target and run a fixed budget of
# inputs from a seed corpus (writer-made files + the shared models if present).
#   FUZZ_RUNS (default 200000) and FUZZ_SECONDS (default 60) bound the run.
# Prints "ok - fuzz_gguf", "not ok - fuzz_gguf" or "skip - fuzz_gguf: why".
set -u
cd "$(dirname "$0")/.."
OUT=build/fuzz
RUNS=${FUZZ_RUNS:-200000}
SECS=${FUZZ_SECONDS:-60}
SRC="worker/gguf/gguf.c worker/gguf/gguf_dump.c worker/num/qtype.c common/err.c"
mkdir -p "$OUT"

if ! command -v clang >/dev/null 2>&1; then
    echo "skip - fuzz_gguf: clang with libFuzzer not installed"
    exit 0
fi
# libFuzzer ships with clang's runtime package; probe with a trivial target
probe=$OUT/probe.c
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}' >"$probe"
if ! clang -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" >/dev/null 2>&1; then
    echo "skip - fuzz_gguf: clang with libFuzzer not installed"
    exit 0
fi

CFLAGS="-std=c17 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror -fno-omit-frame-pointer"
if ! clang $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        tests/fuzz_gguf.c $SRC -o "$OUT/fuzz_gguf" >"$OUT/build.log" 2>&1; then
    sed 's/^/# /' "$OUT/build.log" | tail -20
    echo "not ok - fuzz_gguf (build failed)"
    exit 1
fi
if ! clang $CFLAGS -DGGUF_FUZZ_MKSEEDS tests/fuzz_gguf.c $SRC worker/gguf/gguf_write.c \
        -o "$OUT/mkseeds" >>"$OUT/build.log" 2>&1; then
    sed 's/^/# /' "$OUT/build.log" | tail -20
    echo "not ok - fuzz_gguf (seed writer build failed)"
    exit 1
fi

# a fresh corpus each run, so the result does not depend on earlier runs
rm -rf "$OUT/corpus" "$OUT/seeds"
mkdir -p "$OUT/corpus" "$OUT/seeds"
if ! "$OUT/mkseeds" "$OUT/seeds"; then
    echo "not ok - fuzz_gguf (seed writer failed)"
    exit 1
fi
SHARED=${LLM170_SHARED:-../shared/data}
for f in "$SHARED"/models/*.gguf; do
    # the header (keys + tensor infos) is where the parser works; keep seeds small
    [ -f "$f" ] && head -c 65536 "$f" >"$OUT/seeds/shared-$(basename "$f")"
done

log=$OUT/fuzz.log
"$OUT/fuzz_gguf" -runs="$RUNS" -max_total_time="$SECS" -max_len=65536 -seed=1 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$OUT/" -print_final_stats=1 \
    "$OUT/corpus" "$OUT/seeds" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
    grep -E 'ERROR|SUMMARY|invariant|runtime error|Test unit written' "$log" | head -20 | sed 's/^/# /'
    echo "not ok - fuzz_gguf (exit $rc; log $log)"
    exit 1
fi
grep -E '^stat::number_of_executed_units' "$log" | sed 's/^/# /'
# a run that executed no input (an empty corpus, a zero budget) tested nothing
units=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if [ "${units:-0}" -lt 1 ]; then
    echo "not ok - fuzz_gguf (no input executed; log $log)"
    exit 1
fi
echo "ok - fuzz_gguf"
