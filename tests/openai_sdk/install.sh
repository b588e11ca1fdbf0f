#!/bin/bash
# install.sh — put the official OpenAI Node SDK (pinned) under .cache/openai-sdk
# (ignored by git). Prints the directory; exit 1 with a reason on stderr when
# node/npm are missing or the registry cannot be reached.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$ROOT/.cache/openai-sdk
VERSION=4.104.0
command -v node >/dev/null || { echo "node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "npm is not installed" >&2; exit 1; }
if [ "$(node -p "try{require('$DIR/node_modules/openai/package.json').version}catch(e){''}" 2>/dev/null)" != "$VERSION" ]; then
    mkdir -p "$DIR"
    [ -f "$DIR/package.json" ] || echo '{"name":"llm170-openai-sdk-tests","private":true}' >"$DIR/package.json"
    if ! (cd "$DIR" && timeout 300 npm install --no-audit --no-fund --loglevel=error "openai@$VERSION") >"$DIR/npm.log" 2>&1; then
        echo "npm install openai@$VERSION failed (registry unreachable?): $(grep -v "^\s*$" "$DIR/npm.log" | head -2 | tr "\n" " ")" >&2
        exit 1
    fi
fi
echo "$DIR"
