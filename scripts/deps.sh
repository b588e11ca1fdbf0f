#!/bin/sh
# deps.sh — the Debian packages llm170 builds, tests and runs with, listed once.
#   scripts/deps.sh check     exit 0 when all are installed
#   scripts/deps.sh install   install the missing ones (root), else print the apt-get line and fail
set -eu

# build + runtime libraries
PKGS="gcc make pkg-config libnng-dev libmsgpack-dev libmicrohttpd-dev libsystemd-dev libjansson-dev
libpcre2-dev libutf8proc-dev libvulkan-dev glslc"
# tests: fuzzer + sanitizer runtime, Vulkan on the CPU (lavapipe), numpy for the shared model writers,
# systemd-analyze for unit checks, node/npm for the llama.cpp oracle and the OpenAI SDK client tests
PKGS="$PKGS clang libclang-rt-14-dev mesa-vulkan-drivers python3 python3-numpy systemd curl nodejs"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done

case "${1:-check}" in
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
    echo "usage: $0 check|install" >&2
    exit 2
    ;;
esac
