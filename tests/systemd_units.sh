#!/bin/bash
# systemd_units.sh — contrib/systemd units pass `systemd-analyze verify`
# (with ExecStart pointed at this build's binaries, which verify requires to exist).
set -u
BIN=${LLM170_BIN:-bin}
if ! command -v systemd-analyze >/dev/null; then echo "skip - systemd units: systemd-analyze absent"; exit 0; fi
T=$(mktemp -d /tmp/llm170-units.XXXXXX)
trap 'rm -rf "$T"' EXIT
for u in contrib/systemd/*.service contrib/systemd/*.socket; do
    [ -e "$u" ] || continue
    name=$(basename "$u")
    sed -E "s#/usr/bin/(llm170[a-z-]*)#$(cd "$BIN" && pwd)/\\1#g" "$u" >"$T/$name"
done
for u in "$T"/*.service; do
    [ -e "$u" ] || continue
    name=$(basename "$u")
    prog=$(sed -nE 's#^ExecStart=([^ ]+).*#\1#p' "$u")
    if [ ! -x "$prog" ]; then echo "skip - $name: $(basename "$prog") not built"; continue; fi
    out=$(cd "$T" && systemd-analyze verify --man=no "$u" 2>&1)
    # verify also lints the host's own units it pulls in; judge only lines about ours
    mine=$(printf '%s\n' "$out" | grep -F "$name" || true)
    if [ -z "$mine" ]; then echo "ok - systemd-analyze verify $name"; else echo "$mine" | sed 's/^/# /'; echo "not ok - systemd-analyze verify $name"; fi
    grep -q '^Type=notify' "$u" && grep -q '^WatchdogSec=' "$u" && grep -q '^Restart=on-failure' "$u" &&
        grep -q '^NoNewPrivileges=yes' "$u" && grep -q '^ProtectSystem=strict' "$u" && grep -q '^PrivateTmp=yes' "$u" &&
        echo "ok - $name: notify, watchdog, restart, hardening" || echo "not ok - $name: notify, watchdog, restart, hardening"
done
