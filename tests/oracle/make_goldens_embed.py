#!/usr/bin/env python3
"""make_goldens_embed.py --oracle BIN --pynp PYTHON OUT — tests/golden/embed_synth-qwen3.json: llama.cpp's
pooled embeddings (llama_get_embeddings_seq, one llama_decode per input, F32 KV, 1 thread) of a synthetic
qwen3 whose GGUF says pooling_type = 3 (last), for the model's own pooling and for mean and cls, each
L2-normalised here as llama.cpp's common_embd_normalize(…, 2) does (sum of squares in double). Checked by
build/tests/test_embed. Needs ../shared (LLM170_SHARED) and numpy (through PYTHON for the model writer)."""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_info  # noqa: E402

RECIPE = {"arch": "qwen3", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_head_kv": 2, "n_ff": 128, "seed": 7,
          "pooling_type": 3}


def prompt(seed, n, n_vocab=1518):
    """Deterministic ids in [3, n_vocab) (no python RNG: the golden must not depend on its version)."""
    x, out = seed, []
    for _ in range(n):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(3 + x % (n_vocab - 3))
    return out


CASES = [  # name, pooling asked of the oracle (None = the model's), prompt
    ("model-last-8", None, prompt(1, 8)),
    ("model-last-40", None, prompt(2, 40)),
    ("mean-40", "mean", prompt(3, 40)),
    ("cls-12", "cls", prompt(4, 12)),
    ("last-1", "last", prompt(5, 1)),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--pynp", required=True)
    ap.add_argument("out")
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as td:
        model = os.path.join(td, "m.gguf")
        subprocess.run([a.pynp, os.path.join(here, "synth.py"), json.dumps(RECIPE), model], check=True)
        cases = []
        for name, pooling, ids in CASES:
            out = os.path.join(td, name + ".f32")
            cmd = [a.oracle, "embed", "--model", model, "--prompt-tokens", ",".join(map(str, ids)), "--out", out]
            if pooling:
                cmd += ["--pooling", pooling]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            raw = open(out, "rb").read()
            v = struct.unpack("<%df" % (len(raw) // 4), raw)
            norm = math.sqrt(sum(float(x) * float(x) for x in v))
            cases.append({"name": name, "pooling": pooling or "model", "prompt": ids, "raw_norm": norm,
                          "embedding": [float("%.9g" % (x / norm)) for x in v]})
        golden = {
            "oracle": "llama.cpp 80fb11a (npm @node-llama-cpp/linux-x64@3.21.1, CPU haswell), llama_get_embeddings_seq, "
                      "1 thread, F32 KV, flash attention off, the whole input in one llama_decode",
            "normalised": "L2 (common_embd_normalize, norm 2)",
            "tolerance_abs": 1e-4,
            "model": {"kind": "synth_dense", "args": RECIPE, "sha256": gguf_info.file_sha256(model)},
            "cases": cases,
        }
    with open(a.out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
