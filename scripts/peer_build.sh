#!/bin/bash
# peer_build.sh export DIR | build TARBALL | pack TARBALL DIR — the llama.cpp speed peer for GPU runs.
#   export (here): llama.cpp 80fb11a from npm node-llama-cpp@3.21.1's llama/gitRelease.bundle, written as
#          DIR/llama-src.tar.xz without history, vocab models and docs (≈ 9 MB instead of 34: the device
#          transfer is limited).
#   build (on the GPU machine): unpack to /root/llama and build llama-bench and llama-batched-bench with
#          CUDA for sm_90, as ../shared/tools/llama-anchor-device.sh does (a few minutes on 16 cores);
#          SERVER=1 adds llama-server (its web UI off: the export leaves the UI's assets out).
#   pack (here, where nvcc is and no GPU need be): the same build in $PEER_DIR (default ~/llama-peer), linked
#          against the CUDA driver's stub, then its bin folder stripped as DIR/peer.tar.xz (≈ 41 MB) to carry:
#          on the device `tar xJf peer.tar.xz -C /root/llama` and run the tools with
#          LD_LIBRARY_PATH=/root/llama/build/bin; `build` then finds them built. On 2 cores the build takes
#          about 50 minutes of this machine's time instead of 5 of the device's.
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
pack)
    tarball=$(realpath "${2:?TARBALL}") out=$(cd "${3:?DIR}" && pwd) B=${PEER_DIR:-$HOME/llama-peer}
    stub=$(mktemp -d) pkg=$(mktemp -d)
    trap 'rm -rf "$stub" "$pkg"' EXIT
    # the tools link against libggml-cuda, which needs libcuda.so.1: the toolkit's stub stands in for it
    ln -s /usr/local/cuda/lib64/stubs/libcuda.so "$stub/libcuda.so.1"
    [ -d "$B/ggml" ] || { mkdir -p "$B" && tar xJf "$tarball" -C "$B"; }
    cmake -S "$B" -B "$B/build" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$stub" >"$B.cmake.log" 2>&1
    cmake --build "$B/build" -j"$(nproc)" --target llama-bench llama-batched-bench >"$B.build.log" 2>&1
    mkdir -p "$pkg/build/bin" && cp -a "$B/build/bin/." "$pkg/build/bin/"
    find "$pkg/build/bin" -type f -exec strip --strip-unneeded {} \;
    tar cf - -C "$pkg" build | xz -T0 -6 >"$out/peer.tar.xz"
    ls -la "$out/peer.tar.xz" ;;
*)
    echo "usage: peer_build.sh export DIR | peer_build.sh build TARBALL | peer_build.sh pack TARBALL DIR" >&2
    exit 2 ;;
esac
