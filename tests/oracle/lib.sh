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
