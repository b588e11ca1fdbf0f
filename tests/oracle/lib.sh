# lib.sh — shell helpers shared by the parity tests and make_goldens.sh (source it).

# Print a python3 that has numpy (the shared model writers need it): $PYTHON_NUMPY, python3 on PATH,
# or Debian's /usr/bin/python3. Non-zero when there is none.
find_numpy_python() {
    local p
    for p in ${PYTHON_NUMPY:-} python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' >/dev/null 2>&1; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}

# The shared data folder (../shared/data from the repo root, or $LLM170_SHARED), or non-zero.
find_shared() {
    local d=${LLM170_SHARED:-../shared/data}
    [ -f "$d/README.md" ] || return 1
    (cd "$d" && pwd)
}

# The llm170 CLI under test: $LLM170_BIN/llm170 (tests/run.sh sets LLM170_BIN), else bin/llm170.
llm170_cli() {
    echo "${LLM170_BIN:-$PWD/bin}/llm170"
}

# cli_has VERB [SUBVERB] — does the CLI list VERB in its --help (and SUBVERB in `VERB --help`)?
cli_has() {
    local cli
    cli=$(llm170_cli)
    [ -x "$cli" ] || return 1
    "$cli" --help 2>&1 | grep -qE "^[[:space:]]*$1([[:space:]]|\$)" || return 1
    [ -z "${2:-}" ] && return 0
    "$cli" "$1" --help 2>&1 | grep -qw -- "$2"
}

# The oracle program when its libraries are cached (fetch.sh) — built on demand; non-zero otherwise.
oracle_bin() {
    [ -f .cache/oracle/lib/libllama.v0.4.0.so ] || return 1
    bash tests/oracle/build.sh 2>/dev/null
}
