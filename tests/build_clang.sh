#!/bin/bash
# build_clang.sh — `make CC=clang` builds (-Wall -Wextra -Werror under clang's
# own warnings). Every compile command `make CC=clang all` would run, as a
# syntax and semantics check only (-fsyntax-only: the warnings, a few seconds
# instead of a second full build).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if ! command -v clang >/dev/null; then echo "skip - make CC=clang: clang absent (apt-get install clang)"; exit 0; fi
T=$(mktemp -d /tmp/llm170-clang.XXXXXX)
trap 'rm -rf "$T"' EXIT
# -B -n: every command, nothing run; the objects' paths are dropped, -MMD too (it would write .d files)
make -s -B -n --no-print-directory -C "$ROOT" CC=clang BUILD="$T/b" BIN="$T/b/bin" DEPS=true all 2>/dev/null |
    grep -E '^clang .* -c ' | sed -E -e 's/ -o [^ ]+//' -e 's/ -MMD -MP//' -e 's/$/ -fsyntax-only/' >"$T/cmds"
n=$(wc -l <"$T/cmds")
if [ "$n" -lt 20 ]; then echo "#   only $n compile commands from make -n"; echo "not ok - make CC=clang"; exit 0; fi
# generated sources: make -n names them but writes none
"$ROOT/scripts/embed_kernels.sh" "$T/b/gen/hip_kernels_gen.c"
"$ROOT/scripts/embed_shaders.sh" "$T/b/gen/vk_shaders_gen.c" || {
    echo "not ok - make CC=clang: scripts/embed_shaders.sh failed"; exit 0; }
(cd "$ROOT" && xargs -P 2 -I{} sh -c '{} 2>&1 || echo "FAILED: {}"' <"$T/cmds") >"$T/log"
if grep -q '^FAILED: ' "$T/log"; then
    grep -E 'error:|^FAILED' "$T/log" | head -20 | sed 's/^/#   /'
    echo "not ok - make CC=clang: $n sources, $(grep -c '^FAILED: ' "$T/log") fail under clang -Werror"
else
    echo "ok - make CC=clang: $n sources compile under clang -Werror"
fi
