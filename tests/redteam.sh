#!/bin/bash
# redteam.sh — attacks against real llm170 processes. Runs every part in
# tests/redteam/*.sh (ipc.sh: the local sockets; http.sh: HTTP framing) and
# passes their case lines through ("ok - …", "not ok - …", "skip - …", each
# saying what was tried and what happened). Parts need root to act as another
# uid; they SKIP with the reason when they cannot run.
set -u
here=$(cd "$(dirname "$0")" && pwd)
rc=0
shopt -s nullglob
parts=("$here"/redteam/*.sh)
if [ ${#parts[@]} -eq 0 ]; then
    echo "skip - redteam: no parts in tests/redteam/"
    exit 0
fi
for part in "${parts[@]}"; do
    name=$(basename "$part" .sh)
    echo "# redteam part: $name"
    out=$(timeout 600 bash "$part" 2>&1)
    prc=$?
    printf '%s\n' "$out"
    if printf '%s\n' "$out" | grep -q '^not ok - '; then
        rc=1
    elif [ $prc -ne 0 ]; then # crashed or timed out without saying why
        echo "not ok - redteam $name: exited with status $prc"
        rc=1
    elif ! printf '%s\n' "$out" | grep -qE '^(ok|skip) - '; then # a part that tried nothing has not passed
        echo "not ok - redteam $name: no case ran"
        rc=1
    fi
done
exit $rc
