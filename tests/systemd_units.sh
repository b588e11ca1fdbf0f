#!/bin/bash
# systemd_units.sh — `make install DESTDIR=…` lays out the programs, the units
# and the sample config; the installed units pass `systemd-analyze verify`,
# score at most 2.5 on `systemd-analyze security --offline=yes` and keep
# their contract: Type=notify, watchdog, restart, the llm170 dynamic user
# shared by daemon and gateway, a 0750 runtime directory, no UMask=0000,
# the kernel cache in CacheDirectory=, no capabilities, a syscall filter and
# a closed device policy with the GPU nodes.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${LLM170_BIN:-$ROOT/bin}
BUILD=${LLM170_BUILD:-$ROOT/build}
MAX_EXPOSURE=2.5
PROGS="llm170 llm170d llm170-worker llm170-gateway"
UNITS="llm170d.service llm170-gateway.service"
if ! command -v systemd-analyze >/dev/null; then echo "skip - systemd units: systemd-analyze absent (apt-get install systemd)"; exit 0; fi
for p in $PROGS; do
    if [ ! -x "$BIN/$p" ]; then echo "skip - systemd units: $p not built"; exit 0; fi
done
BIN=$(cd "$BIN" && pwd)
T=$(mktemp -d /tmp/llm170-units.XXXXXX)
trap 'rm -rf "$T"' EXIT
report() { if [ -z "$2" ]; then echo "ok - $1"; else printf '#   %s\n' "$2"; echo "not ok - $1"; fi; }

# --- make install: the built programs as they are (-o: never rebuild here), no package installs
install_into() {
    local old=()
    for p in $PROGS; do old+=(-o "$BIN/$p"); done
    make -s --no-print-directory -C "$ROOT" install DESTDIR="$1" PREFIX=/usr/local BIN="$BIN" BUILD="$BUILD" \
        DEPS=true "${old[@]}" 2>&1
}
out=$(install_into "$T")
rc=$?
why=""
[ "$rc" -eq 0 ] || why="make install: exit $rc: $(echo "$out" | tail -3)"
for p in $PROGS; do [ -x "$T/usr/local/bin/$p" ] || why="$why no executable /usr/local/bin/$p;"; done
for u in $UNITS; do
    f="$T/usr/local/lib/systemd/system/$u"
    if [ ! -f "$f" ]; then why="$why no $u;"; continue; fi
    exe=$(sed -nE 's#^ExecStart=([^ ]+).*#\1#p' "$f")
    [[ $exe == /usr/local/bin/llm170* ]] || why="$why $u: ExecStart=$exe, not under /usr/local/bin;"
done
[ -f "$T/etc/llm170/llm170.conf" ] && cmp -s "$T/etc/llm170/llm170.conf" "$ROOT/contrib/llm170.conf" ||
    why="$why /etc/llm170/llm170.conf is not the sample;"
report "make install DESTDIR: four programs, two units, sample config" "$why"
if [ "$rc" -ne 0 ]; then exit 0; fi

echo "model = /srv/mine.gguf" >"$T/etc/llm170/llm170.conf"
out=$(install_into "$T")
why=""
grep -qx "model = /srv/mine.gguf" "$T/etc/llm170/llm170.conf" || why="the existing config was replaced"
report "make install keeps an existing /etc/llm170/llm170.conf" "$why"

# --- verify, with the host's own units under the root (verify resolves sysinit.target & co. there)
mkdir -p "$T/usr/lib/systemd"
for d in /usr/lib/systemd/system /lib/systemd/system; do
    [ -d "$d" ] && { cp -r "$d" "$T/usr/lib/systemd/"; break; }
done
for u in $UNITS; do
    f="$T/usr/local/lib/systemd/system/$u"
    [ -f "$f" ] || continue
    out=$(systemd-analyze verify --man=no --root="$T" "$f" 2>&1)
    # verify also lints the host's units it pulls in; judge only lines about ours
    mine=$(printf '%s\n' "$out" | grep -F "$u" || true)
    report "systemd-analyze verify $u" "$mine"
    sec=$(systemd-analyze security --offline=yes --root="$T" "$f" 2>&1)
    score=$(printf '%s\n' "$sec" | sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p')
    if [ -z "$score" ]; then
        report "$u: exposure <= $MAX_EXPOSURE" "no score: $(printf '%s\n' "$sec" | tail -2)"
    elif awk -v s="$score" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(s <= m) }'; then
        echo "ok - $u: exposure $score <= $MAX_EXPOSURE"
    else
        report "$u: exposure <= $MAX_EXPOSURE" "exposure $score; worst: $(printf '%s\n' "$sec" | grep '^✗' | cut -c1-62 | tr -s ' ' | head -8 | tr '\n' ';')"
    fi
done

# --- the contract of the units (values as written: the last assignment wins in systemd)
val() { sed -nE "s/^$2=(.*)/\1/p" "$T/usr/local/lib/systemd/system/$1" | tail -1; }
has() { grep -qxF "$2" "$T/usr/local/lib/systemd/system/$1"; }
D=llm170d.service G=llm170-gateway.service
why=""
[ "$(val $D Type)" = notify ] || why="$why Type=notify;"
[ -n "$(val $D WatchdogSec)" ] || why="$why WatchdogSec;"
[ "$(val $D Restart)" = on-failure ] || why="$why Restart=on-failure;"
report "$D: notify, watchdog, restart" "$why"
for u in $D $G; do
    why=""
    [ "$(val $u User)" = llm170 ] && [ "$(val $u Group)" = llm170 ] && [ "$(val $u DynamicUser)" = yes ] ||
        why="$why not User=llm170 Group=llm170 DynamicUser=yes;"
    grep -qE '^UMask=0*0$' "$T/usr/local/lib/systemd/system/$u" && why="$why UMask=0000;"
    has $u "CapabilityBoundingSet=" || why="$why CapabilityBoundingSet= not empty;"
    grep -q '^SystemCallFilter=@system-service' "$T/usr/local/lib/systemd/system/$u" || why="$why SystemCallFilter=@system-service;"
    [ "$(val $u DevicePolicy)" = closed ] || why="$why DevicePolicy=closed;"
    for k in NoNewPrivileges=yes ProtectSystem=strict PrivateTmp=yes; do has $u "$k" || why="$why $k;"; done
    report "$u: llm170 dynamic user, no capabilities, syscall filter, hardening" "$why"
done
why=""
[ "$(val $D RuntimeDirectory)" = llm170 ] || why="$why RuntimeDirectory=llm170;"
case "$(val $D RuntimeDirectoryMode)" in 0750|750|0700|700) ;; *) why="$why RuntimeDirectoryMode=$(val $D RuntimeDirectoryMode);"; esac
[ "$(val $D CacheDirectory)" = llm170 ] || why="$why CacheDirectory=llm170 (the kernel cache, \$CACHE_DIRECTORY);"
for dev in /dev/kfd char-drm /dev/nvidiactl /dev/nvidia-uvm char-nvidia-frontend; do
    grep -qE "^DeviceAllow=$dev " "$T/usr/local/lib/systemd/system/$D" || why="$why DeviceAllow=$dev;"
done
grep -q '^MemoryDenyWriteExecute=yes' "$T/usr/local/lib/systemd/system/$D" &&
    why="$why MemoryDenyWriteExecute=yes breaks the GPU runtimes' JIT;"
report "$D: 0750 runtime directory, kernel cache, GPU devices" "$why"
why=""
# systemd removes a unit's RuntimeDirectory when that unit stops: the gateway must not own llm170d's
[ -z "$(val $G RuntimeDirectory)" ] || why="$why declares RuntimeDirectory=$(val $G RuntimeDirectory);"
[[ " $(val $G Wants) " == *" llm170d.service "* ]] || why="$why Wants=llm170d.service;"
[[ " $(val $G After) " == *" llm170d.service "* ]] || why="$why After=llm170d.service;"
grep -q '^ExecStart=.* --daemon ipc:///run/llm170/llm170d.sock' "$T/usr/local/lib/systemd/system/$G" &&
    grep -q '^ExecStart=.* --listen 127.0.0.1:8080' "$T/usr/local/lib/systemd/system/$G" ||
    why="$why ExecStart without --listen 127.0.0.1:8080 --daemon ipc:///run/llm170/llm170d.sock;"
report "$G: after llm170d, its socket, no RuntimeDirectory of its own" "$why"
