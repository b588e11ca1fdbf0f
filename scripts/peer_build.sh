#!/bin/bash
# peer_build.sh export DIR | peer_build.sh build TARBALL — the llama.cpp speed peer for GPU runs.
#   export (here): llama.cpp 80fb11a from npm node-llama-cpp@3.21.1's llama/gitRelease.bundle, written as
#          DIR/llama-src.tar.xz without history, vocab models and docs (≈ 9 MB instead of 34: the device
#          transfer is limited).
#   build (on the GPU machine): unpack to /root/llama and build llama-bench and llama-batched-bench with
#          CUDA for sm_90, as ../shared/tools/llama-anchor-device.sh does (a few minutes on 16 cores);
#          SERVER=1 adds llama-server (its web UI off: the export leaves the UI's assets out).
# The peer is only ever compared against; it is never linked into llm170.
set -eu
case "${1:-}" in
export)
    out=$(cd "${2:?DIR}" && pwd)
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack node-llama-cpp@3.21.1 >/dev/null && tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle &&
        git clone -q package/llama/gitRelease.bundle src && cd src &&
        tar --exclude=.git --exclude='./models/*.gguf' --exclude='./docs' --exclude='./tools/server/public*' \
            --exclude='./tools/server/webui' -cf - . | xz -T2 -6 >"$out/llama-src.tar.xz")
    rm -rf "$tmp"
    ls -la "$out/llama-src.tar.xz" ;;
build)
    B=/root/llama
    srv=OFF targets="llama-bench llama-batched-bench"
    [ "${SERVER:-0}" = 1 ] && srv=ON targets="$targets llama-server"
    if [ ! -x "$B/build/bin/llama-bench" ] || { [ $srv = ON ] && [ ! -x "$B/build/bin/llama-server" ]; }; then
        [ -d "$B/ggml" ] || { mkdir -p "$B" && tar xJf "${2:?TARBALL}" -C "$B"; }
        cmake -S "$B" -B "$B/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=$srv -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
            -DCMAKE_BUILD_TYPE=Release >"$B.cmake.log" 2>&1
        # shellcheck disable=SC2086
        cmake --build "$B/build" -j"$(nproc)" --target $targets >"$B.build.log" 2>&1
    fi
    for t in $targets; do ls -la "$B/build/bin/$t"; done ;;
*)
    echo "usage: peer_build.sh export DIR | peer_build.sh build TARBALL" >&2; exit 2 ;;
esac
