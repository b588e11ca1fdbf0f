#!/bin/bash
# install.sh — put the official Anthropic Node SDK (pinned) under
# .cache/anthropic-sdk (ignored by git). Prints the directory; exit 1 with a
# reason on stderr when node/npm are missing or the registry cannot be reached.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$ROOT/.cache/anthropic-sdk
VERSION=1.16.0
command -v node >/dev/null || { echo "node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is not installed" >&2; exit 1; }
# the package's "exports" hide its package.json from require(): read the file
PKG=$DIR/node_modules/@anthropic-ai/sdk/package.json
if [ "$(node -e "try{console.log(JSON.parse(require('fs').readFileSync('$PKG','utf8')).version)}catch(e){}" 2>/dev/null)" != "$VERSION" ]; then
    mkdir -p "$DIR"
    [ -f "$DIR/package.json" ] || echo '{"name":"llm170-anthropic-sdk-tests","private":true}' >"$DIR/package.json"
    if ! (cd "$DIR" && timeout 300 npm install --no-audit --no-fund --loglevel=error "@anthropic-ai/sdk@$VERSION") >"$DIR/npm.log" 2>&1; then
        echo "npm install @anthropic-ai/sdk@$VERSION failed (registry unreachable?): $(grep -v "^\s*$" "$DIR/npm.log" | head -2 | tr "\n" " ")" >&2
        exit 1
    fi
fi
echo "$DIR"
