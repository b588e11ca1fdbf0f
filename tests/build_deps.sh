#!/bin/bash
# build_deps.sh — `make` installs only what building and running need (the
# test-only packages come with `make test`), and no compile starts before
# `deps` has finished installing (else `make -j` on a fresh machine failed:
# jansson.h not found while apt-get was still running).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d /tmp/llm170-deps.XXXXXX)
trap 'rm -rf "$T"' EXIT
report() { # name, reason ("" = ok)
    if [ -z "$2" ]; then echo "ok - $1"; else printf '#   %s\n' "$2"; echo "not ok - $1"; fi
}

# 1. the package sets
build=" $(bash "$ROOT/scripts/deps.sh" list build | tr '\n' ' ') "
test=" $(bash "$ROOT/scripts/deps.sh" list test | tr '\n' ' ') "
why=""
for p in nodejs clang libclang-rt-14-dev mesa-vulkan-drivers python3-numpy; do
    case "$build" in *" $p "*) why="$why $p in the build set;";; esac
    case "$test" in *" $p "*) ;; *) why="$why $p not in the test set;";; esac
done
for p in gcc libjansson-dev libnng-dev libmicrohttpd-dev; do
    case "$build" in *" $p "*) ;; *) why="$why $p not in the build set;";; esac
done
report "deps.sh: test-only packages outside the build set" "$why"

# 2. which set each entry point installs (dry run, with a recognisable installer)
all=$(make -C "$ROOT" -n -s BUILD="$T/b" BIN="$T/b/bin" DEPS=DEPSCMD all 2>&1 | grep DEPSCMD | tr '\n' ';')
tst=$(make -C "$ROOT" -n -s BUILD="$T/b" BIN="$T/b/bin" DEPS=DEPSCMD test 2>&1 | grep DEPSCMD | tr '\n' ';')
why=""
[[ $all == *"DEPSCMD install build"* ]] || why="make all does not install the build set: $all"
[[ $all == *"install test"* ]] && why="make all installs the test set: $all"
[[ $tst == *"DEPSCMD install test"* ]] || why="$why make test does not install the test set: $tst"
report "make installs the build set, make test the test set" "$why"

# 3. compiles wait for deps: an installer that takes a second, a compiler that
# fails when started before it finished
cat >"$T/deps" <<EOS
#!/bin/sh
[ "\$2" = build ] || exit 0
sleep 1; touch "$T/deps.done"
EOS
cat >"$T/cc" <<EOS
#!/bin/sh
[ -e "$T/deps.done" ] || { echo "compiler started before deps finished" >&2; exit 1; }
exec cc "\$@"
EOS
chmod +x "$T/deps" "$T/cc"
out=$(make -C "$ROOT" -j2 BUILD="$T/b" BIN="$T/b/bin" DEPS="$T/deps" CC="$T/cc" \
    "$T/b/common/err.o" "$T/b/common/malloc_tune.o" 2>&1)
rc=$?
why=""
[ "$rc" -eq 0 ] && [ -e "$T/b/common/err.o" ] && [ -e "$T/b/common/malloc_tune.o" ] || why="make -j2 exit $rc: $(echo "$out" | tail -3)"
report "make -j2: objects compile only after deps" "$why"
