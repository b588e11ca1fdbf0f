#!/bin/bash
# make_goldens.sh [tok,logits,quant,greedy] — regenerate every golden in tests/golden/ from the
# llama.cpp oracle: fetches the oracle (fetch.sh), builds it (build.sh), finds a python3 with numpy
# for the shared synth_dense.py, and runs make_goldens.py. Quantized models are made with our own
# converter build/tests/tools/requant when it is built, else with llama_model_quantize.
# Needs ../shared (LLM170_SHARED = its data folder) and network for the first fetch.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
. tests/oracle/lib.sh
bash tests/oracle/fetch.sh all
ORACLE=$(bash tests/oracle/build.sh)
PYNP=$(find_numpy_python) || { echo "make_goldens.sh: no python3 with numpy" >&2; exit 1; }
REQ=()
if [ -x "${LLM170_BUILD:-build}/tests/tools/requant" ] && [ -z "${GOLDEN_QUANTIZER_ORACLE:-}" ]; then
    REQ=(--requant "$(cd "${LLM170_BUILD:-build}" && pwd)/tests/tools/requant")
fi
export LLM170_SHARED=${LLM170_SHARED:-$ROOT/../shared/data}
exec python3 tests/oracle/make_goldens.py --oracle "$ORACLE" --pynp "$PYNP" "${REQ[@]}" --only "${1:-tok,logits,quant,greedy}"
