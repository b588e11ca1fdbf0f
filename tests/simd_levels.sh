#!/bin/bash
# simd_levels.sh — the CPU-kernel tests once per SIMD level this machine has (LLM170_SIMD=scalar,
# avx2, avx512: worker/num/quant.c, ops.c and gdn.c read it), so a box with AVX-512 also checks what
# an AVX2-only or a plain x86-64 box runs, and no result depends on which box CI lands on.
# One case line per level and test; a level the CPU lacks is a skip line that names it.
# Runs: test_quant, test_model, parity_logits.sh, parity_greedy.sh, parity_hybrid.sh (~1.5 min on
# 2 cores for all three levels). Not under the sanitizer build (make asan): there every test runs
# at the best level already and the three extra passes would take several times as long.
cd "$(dirname "$0")/.." || exit 1
BUILD=${LLM170_BUILD:-$PWD/build}
export LLM170_BIN=${LLM170_BIN:-$PWD/bin} LLM170_BUILD=$BUILD

if [ ! -x "$BUILD/tests/test_quant" ]; then
    echo "skip - simd levels: $BUILD/tests/test_quant not built"; exit 0
fi
if grep -q __asan_init "$BUILD/tests/test_quant" 2>/dev/null; then
    echo "skip - simd levels: sanitizer build (the per-level runs belong to the plain build's make test)"
    exit 0
fi

# The levels as worker/num/quant.c decides them: AVX2 needs avx2+fma+f16c, AVX-512 adds f/bw/vl/dq.
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
has() { for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1;; esac; done; }
levels="scalar"
lacks=()
if has avx2 fma f16c; then levels="$levels avx2"; else lacks+=("avx2:avx2 fma f16c"); fi
if has avx2 fma f16c avx512f avx512bw avx512vl avx512dq; then
    levels="$levels avx512"
else
    lacks+=("avx512:avx512f avx512bw avx512vl avx512dq")
fi

tests=("$BUILD/tests/test_quant" "$BUILD/tests/test_model" tests/parity_logits.sh tests/parity_greedy.sh
       tests/parity_hybrid.sh)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for lvl in $levels; do
    for t in "${tests[@]}"; do
        name="simd $lvl: $(basename "$t")"
        case "$t" in
            *.sh) LLM170_SIMD=$lvl timeout 600 bash "$t" >"$log" 2>&1 ;;
            *) LLM170_SIMD=$lvl timeout 600 "$t" >"$log" 2>&1 ;;
        esac
        rc=$?
        p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log"); s=$(grep -c '^skip - ' "$log")
        if [ "$f" -gt 0 ] || [ "$rc" -ne 0 ] || [ $((p + s)) -eq 0 ]; then
            echo "not ok - $name: $f failed, $p ok, exit $rc$([ $((p + f + s)) -eq 0 ] && echo ', no case ran')"
            grep -v '^ok - ' "$log" | grep -v '^skip - ' | tail -20 | sed 's/^/#   /'
        elif [ "$p" -eq 0 ]; then
            echo "skip - $name: all $s cases skipped ($(grep -m1 '^skip - ' "$log" | sed 's/^skip - //'))"
        else
            echo "ok - $name: $p ok, $s skipped"
        fi
    done
done
for l in "${lacks[@]}"; do
    echo "skip - simd ${l%%:*}: not on this CPU (needs ${l#*:})"
done
exit 0
