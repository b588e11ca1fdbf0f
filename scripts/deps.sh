#!/bin/sh
# deps.sh — the Debian packages llm170 builds, runs and tests with, listed once.
#   scripts/deps.sh check [SET]     exit 0 when all of SET are installed
#   scripts/deps.sh install [SET]   install the missing ones (root), else print the apt-get line and fail
#   scripts/deps.sh list [SET]      print SET's packages, one a line
# SET: build (default; what `make` / `make install` need), run (build + what `make run`'s demo uses),
# test (everything: what `make test` / `make asan` need too).
set -eu

# build + runtime libraries
BUILD_PKGS="gcc make pkg-config libnng-dev libmsgpack-dev libmicrohttpd-dev libsystemd-dev libjansson-dev
libpcre2-dev libutf8proc-dev libvulkan-dev glslc"
# make run: the demo asks the gateway for a completion with curl
RUN_PKGS="curl"
# tests only: fuzzer + sanitizer runtime, clang for the CC=clang build check, Vulkan on the CPU (lavapipe),
# numpy for the shared model writers, systemd-analyze for unit checks, node/npm for the llama.cpp oracle
# and the OpenAI SDK client tests
TEST_PKGS="clang libclang-rt-14-dev mesa-vulkan-drivers python3 python3-numpy systemd nodejs"

set_pkgs() {
    case "$1" in
    build) echo "$BUILD_PKGS" ;;
    run) echo "$BUILD_PKGS $RUN_PKGS" ;;
    test) echo "$BUILD_PKGS $RUN_PKGS $TEST_PKGS" ;;
    *) echo "deps.sh: unknown set '$1' (build, run, test)" >&2; exit 2 ;;
    esac
}

cmd=${1:-check}
PKGS=$(set_pkgs "${2:-build}")

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

case "$cmd" in
list)
    for p in $PKGS; do echo "$p"; done
    ;;
check)
    [ -z "$missing" ] && exit 0
    echo "missing packages:$missing" >&2
    exit 1
    ;;
install)
    [ -z "$missing" ] && exit 0
    if [ "$(id -u)" = 0 ]; then
        echo "installing:$missing" >&2
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq >/dev/null || true
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing >/dev/null
    else
        echo "llm170: missing Debian packages; run as root:" >&2
        echo "  apt-get install -y$missing" >&2
        exit 1
    fi
    ;;
*)
    echo "usage: $0 check|install|list [build|run|test]" >&2
    exit 2
    ;;
esac
