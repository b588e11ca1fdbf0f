#!/usr/bin/env python3
"""synth.py KWARGS_JSON OUT — write a synthetic dense model by calling write_model() of the shared
tools' synth_dense.py (run from ../shared/tools, never copied) with the keyword arguments given as
JSON (a "rope_scaling" list becomes the tuple write_model expects; "pooling_type" N, which write_model
lacks, adds the key {arch}.pooling_type = N for embedding models). Needs numpy. The recipes live
in the goldens, so a test rebuilds exactly the model a golden was made from; the golden's sha256
catches any drift of the tool."""
import json
import os
import sys


def tools_dir():
    data = os.environ.get("LLM170_SHARED", "../shared/data")
    return os.path.join(os.path.abspath(data), "..", "tools")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    kw = json.loads(sys.argv[1])
    sys.path.insert(0, tools_dir())
    import synth_dense  # noqa: E402  (from ../shared/tools)
    if kw.get("rope_scaling"):
        kw["rope_scaling"] = tuple(kw["rope_scaling"])
    pooling = kw.pop("pooling_type", None)
    if pooling is not None:
        # write_model has no pooling key (embedding models): add {arch}.pooling_type with the
        # vocabulary, as part of the same metadata block
        gs = synth_dense.gs
        write_vocab = gs.write_vocab
        arch = kw.get("arch", "llama")

        def with_pooling(w, v):
            w.u32(arch + ".pooling_type", int(pooling))
            write_vocab(w, v)
        gs.write_vocab = with_pooling
    synth_dense.write_model(sys.argv[2], **kw)


if __name__ == "__main__":
    main()
