#!/bin/bash
# check_quantizer.sh [TYPE...] — is our quantizer (tests/tools/requant, i.e. quant_weights_row)
# byte-identical with llama.cpp's (llama_model_quantize, pure, no imatrix = ggml's reference
# quantizers)? For each type and each quantized-golden shape, prints "ok - …" or "not ok - …" with
# the number of differing blocks per tensor. Needs the fetched oracle and a built requant; not run
# by `make test` (CI has no oracle) — run it after changing worker/quantize.c.
cd "$(dirname "$0")/../.." || exit 1
. tests/oracle/lib.sh
O=$(oracle_bin) || { echo "skip - quantizer check: no oracle (tests/oracle/fetch.sh libs)"; exit 0; }
R=${LLM170_BUILD:-$PWD/build}/tests/tools/requant
[ -x "$R" ] || { echo "skip - quantizer check: $R not built"; exit 0; }
PYNP=$(find_numpy_python) || { echo "skip - quantizer check: no python3 with numpy"; exit 0; }
SHARED=$(find_shared) || { echo "skip - quantizer check: no ../shared/data"; exit 0; }
export LLM170_SHARED=$SHARED
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
types=${*:-q4_0 q4_1 q5_0 q5_1 q8_0 q2_k q3_k q4_k q5_k q6_k iq4_nl iq4_xs mxfp4 f16 bf16}
for g in tests/golden/quant/*-q8_0.json; do
    args=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["model"]["args"]))' "$g")
    shape=$(basename "$g" -q8_0.json)
    "$PYNP" tests/oracle/synth.py "$args" "$TMP/base.gguf" || exit 1
    for t in $types; do
        "$R" "$TMP/base.gguf" "$TMP/ours.gguf" "$t" && "$O" quantize "$TMP/base.gguf" "$TMP/llama.gguf" "$t" || {
            echo "not ok - quantizer $t $shape: conversion failed"; continue; }
        python3 - "$TMP/ours.gguf" "$TMP/llama.gguf" "$t $shape" <<'PY'
import sys
sys.path.insert(0, "tests/oracle")
import gguf_info as gi
a, b = gi.Reader(sys.argv[1]), gi.Reader(sys.argv[2])
tb = {t[0]: t for t in b.tensors}
bad = []
for t in sorted(a.tensors):
    u = tb.get(t[0])
    if u is None or u[1] != t[1]:
        bad.append("%s: type %d vs %s" % (t[0], t[1], u and u[1]))
        continue
    x, y = a.tensor_bytes(t), b.tensor_bytes(u)
    if x != y:
        blk, size = gi._BLOCK[t[1]]
        nb = len(x) // size
        nd = sum(1 for i in range(nb) if x[i * size:(i + 1) * size] != y[i * size:(i + 1) * size])
        bad.append("%s %d/%d blocks" % (t[0], nd, nb))
if bad:
    print("not ok - quantizer %s: differs from llama_model_quantize in %d tensors: %s" % (sys.argv[3], len(bad), "; ".join(bad[:4])))
else:
    print("ok - quantizer %s: same bytes as llama_model_quantize" % sys.argv[3])
PY
    done
done
