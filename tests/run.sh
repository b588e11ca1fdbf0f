#!/bin/bash
# run.sh BUILD BIN — run every test program and shell test; print "N passed, N failed, N skipped".
# Each test prints lines "ok - name", "not ok - name", "skip - name: why".
# A test program that crashes or exits non-zero without a "not ok" line counts as one failure,
# and so does one that prints no case line at all ("no case ran"): a test that checked nothing
# has not passed. tests/prepare.sh (run before the suite) is a preparation step, not a test.
set -u
BUILD=${1:-build}
BIN=${2:-bin}
export LLM170_BIN="$PWD/$BIN" LLM170_BUILD="$PWD/$BUILD"
pass=0 fail=0 skip=0
failed_names=()
log=$(mktemp)
trap 'rm -f "$log"' EXIT

run_one() { # name, command...
    local name=$1; shift
    local t0=$SECONDS
    timeout 900 "$@" >"$log" 2>&1
    local rc=$?
    local p f s
    p=$(grep -c '^ok - ' "$log"); f=$(grep -c '^not ok - ' "$log"); s=$(grep -c '^skip - ' "$log")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        f=1; echo "not ok - $name (exit $rc)" >>"$log"
    elif [ $((p + f + s)) -eq 0 ]; then
        f=1; echo "not ok - $name (no case ran)" >>"$log"
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
    printf '%-40s %3d ok %3d failed %3d skipped  (%ds)\n' "$name" "$p" "$f" "$s" $((SECONDS - t0))
    if [ "$f" -gt 0 ]; then
        grep -v '^ok - ' "$log" | tail -40 | sed 's/^/    /'
        failed_names+=("$name")
    fi
    grep '^skip - ' "$log" | sed 's/^/    /'
}

for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    case "$t" in *.o|*.d) continue;; esac
    run_one "$(basename "$t")" "$t"
done
for t in tests/*.sh; do
    case "$(basename "$t")" in run.sh|prepare.sh) continue;; esac
    run_one "$(basename "$t")" bash "$t"
done

[ ${#failed_names[@]} -gt 0 ] && echo "failed: ${failed_names[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
