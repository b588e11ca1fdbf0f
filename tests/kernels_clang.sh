#!/bin/bash
# kernels_clang.sh — every GPU kernel source (kernels/*.cu) parses and type-checks as the run-time
# compilers will see it, on a machine with no GPU and no toolkit: clang's CUDA front end for NVIDIA
# (sm_80, and again with __CUDA_ARCH__ 900 for the sm_90-only paths) and its HIP front end for AMD,
# -Wall -Werror, with tests/kernel_decls.h standing in for what NVRTC and hipRTC build in and
# kernels/prelude.h included first as hip_rt.c hands it over. Without it a kernel that does not compile
# is found only on a GPU machine, where every model of its weight type then fails to load.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CLANG=$(command -v clang || command -v clang-14 || true)
if [ -z "$CLANG" ]; then echo "skip - kernel sources under clang: clang absent (apt-get install clang)"; exit 0; fi
# a clang without the CUDA / HIP front ends (or their device targets) cannot judge the sources
probe=$(mktemp /tmp/llm170-kprobe.XXXXXX.cu)
trap 'rm -f "$probe"' EXIT
echo '__attribute__((global)) void k(int *p) { *p = 1; }' >"$probe"
common=(-fsyntax-only -std=c++17 -Wall -Werror -Wno-unknown-cuda-version -include "$ROOT/tests/kernel_decls.h"
    -include "$ROOT/kernels/prelude.h" -I"$ROOT/kernels")
cu="-x cuda --cuda-device-only --cuda-gpu-arch=sm_80 -nocudainc -nocudalib -D__CUDACC_RTC__"
flavours=("cuda:$cu" "cuda sm_90:$cu -U__CUDA_ARCH__ -D__CUDA_ARCH__=900"
    "hip:-x hip --cuda-device-only --offload-arch=gfx90a -nogpuinc -nogpulib -D__HIPCC_RTC__")
for fl in "${flavours[@]}"; do
    name=${fl%%:*}
    # shellcheck disable=SC2206
    args=(${fl#*:})
    if ! "$CLANG" "${args[@]}" -fsyntax-only -Wno-unknown-cuda-version "$probe" >/dev/null 2>&1; then
        echo "skip - kernel sources under clang ($name): $CLANG has no $name device front end"; continue
    fi
    n=0 bad=0
    for f in "$ROOT"/kernels/*.cu; do
        n=$((n + 1))
        if ! out=$("$CLANG" "${args[@]}" "${common[@]}" "$f" 2>&1); then
            bad=$((bad + 1))
            printf '%s\n' "$out" | grep -E 'error' | head -5 | sed 's/^/#   /'
            echo "not ok - $(basename "$f") under clang ($name)"
        fi
    done
    [ "$bad" = 0 ] && echo "ok - kernel sources under clang ($name): $n files"
done
exit 0
