#!/bin/bash
# version.sh — every program answers --version with one line
# "PROG VERSION (commit HASH; backends: cpu hip …)", exit 0: the version of
# common/version.h and the commit the build came from.
set -u
BIN=${LLM170_BIN:-bin}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
want_ver=$(sed -nE 's/^#define LLM170_VERSION "([^"]+)".*/\1/p' "$ROOT/common/version.h")
in_git=0
git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1 && in_git=1
commits=""
for p in llm170 llm170d llm170-worker llm170-gateway; do
    if [ ! -x "$BIN/$p" ]; then echo "skip - $p --version: not built"; continue; fi
    out=$("$BIN/$p" --version 2>&1)
    rc=$?
    lines=$(printf '%s\n' "$out" | wc -l)
    re="^$p ([0-9]+\.[0-9]+\.[0-9]+[^ ]*) \(commit ([0-9a-f]{4,40}|unknown); backends: cpu( [a-z]+)*\)$"
    why=""
    if [ "$rc" -ne 0 ]; then why="exit $rc"
    elif [ "$lines" -ne 1 ] || ! [[ $out =~ $re ]]; then why="not one version line"
    elif [ "${BASH_REMATCH[1]}" != "$want_ver" ]; then why="version ${BASH_REMATCH[1]}, common/version.h says $want_ver"
    else
        c=${BASH_REMATCH[2]}
        commits="$commits $c"
        # built from this checkout: the hash must name one of its commits
        if [ "$in_git" = 1 ] && ! git -C "$ROOT" cat-file -e "$c^{commit}" 2>/dev/null; then
            why="commit '$c' is not a commit of this repository"
        fi
        case " ${out##*backends: }" in *" hip"*) ;; *) why="hip backend not listed";; esac
        case " ${out##*backends: }" in *" vulkan"*) ;; *) why="vulkan backend not listed";; esac
    fi
    if [ -z "$why" ]; then echo "ok - $p --version: $out"
    else printf '#   %s\n' "$out" "$why"; echo "not ok - $p --version"; fi
done
n=$(printf '%s\n' $commits | sort -u | grep -c .)
# fewer than two programs answered: nothing to compare
if [ "$(printf '%s\n' $commits | grep -c .)" -lt 2 ]; then echo "skip - one commit across the programs: fewer than two programs gave a commit"
elif [ "$n" -le 1 ]; then echo "ok - one commit across the programs"; else echo "#   $commits"; echo "not ok - one commit across the programs"; fi
