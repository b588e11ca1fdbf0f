#!/usr/bin/env python3
"""synth.py KWARGS_JSON OUT — write a synthetic dense model by calling write_model() of the shared
tools' synth_dense.py (run from ../shared/tools, never copied) with the keyword arguments given as
JSON (a "rope_scaling" list becomes the tuple write_model expects). Needs numpy. The recipes live
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
    synth_dense.write_model(sys.argv[2], **kw)


if __name__ == "__main__":
    main()
