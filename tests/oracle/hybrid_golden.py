#!/usr/bin/env python3
"""hybrid_golden.py --cli BIN --dir DIR [--extra ARGS] — the llm170 CLI against llama.cpp's goldens for
the shared qwen35 / qwen35moe / qwen4exp synthetic models (DIR/<name>.golden.json: logits of every prompt position,
greedy ids): `diag logits --all` within 1e-4 (relative L2 per position, F32 KV cache) and `infer`
greedy ids equal to llama.cpp's, except after a step whose top-2 margin the golden marks as a near-tie.
--extra passes CLI arguments (e.g. "--backend hip"). Prints ok / not ok / skip lines."""
import argparse, array, json, math, os, subprocess, sys, tempfile


def rel_err(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den > 0 else math.inf


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--extra", default="")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--names", default="qwen35-tiny,qwen35moe-tiny,qwen4exp-tiny",
                    help="which shared models (a backend that does not run qwen4exp leaves it out)")
    a = ap.parse_args()
    extra = a.extra.split()
    for name in a.names.split(","):
        gpath = os.path.join(a.dir, name + ".golden.json")
        model = os.path.join(a.dir, name + ".gguf")
        if not (os.path.exists(gpath) and os.path.exists(model)):
            print("skip - %s: no %s" % (name, gpath))
            continue
        g = json.load(open(gpath))
        if not g.get("prompts"):  # nothing to compare is not a pass
            print("not ok - %s: %s has no prompts" % (name, gpath))
            continue
        for key, p in sorted(g["prompts"].items()):
            ids = ",".join(map(str, p["tokens"]))
            tag = "%s %s%s" % (name, key, (" [" + a.extra + "]") if a.extra else "")
            ref = array.array("f")
            with open(os.path.join(a.dir, p["logits_file"]), "rb") as f:
                ref.frombytes(f.read())
            with tempfile.NamedTemporaryFile(suffix=".f32") as out:
                r = subprocess.run([a.cli, "diag", "logits", "--model", model, "--prompt-tokens", ids, "--all",
                                    "--kv-f32", "--out", out.name] + extra, capture_output=True, text=True)
                got = array.array("f")
                if r.returncode == 0:
                    got.frombytes(open(out.name, "rb").read())
            if p["n_tokens"] < 1 or not ref:
                print("not ok - %s logits: the golden has %d positions" % (tag, p["n_tokens"]))
            elif r.returncode != 0 or len(got) != len(ref):
                print("not ok - %s logits: exit %d, %d of %d floats: %s" % (tag, r.returncode, len(got), len(ref),
                                                                        r.stderr.strip().splitlines()[-1:]))
            else:
                V = len(ref) // p["n_tokens"]
                worst = max(rel_err(got[i * V:(i + 1) * V], ref[i * V:(i + 1) * V]) for i in range(p["n_tokens"]))
                print("%s - %s logits: worst %.2e over %d positions (tolerance %.0e)" %
                      ("ok" if worst <= a.tol else "not ok", tag, worst, p["n_tokens"], a.tol))
            want = p["greedy_24"]
            r = subprocess.run([a.cli, "infer", "--model", model, "--prompt-tokens", ids, "--n-predict", str(len(want)),
                                "--temp", "0", "--kv-f32"] + extra, capture_output=True, text=True)
            toks = [json.loads(l)["token"] for l in r.stdout.splitlines() if l.startswith("{") and '"token"' in l]
            if r.returncode != 0:
                print("not ok - %s greedy: exit %d: %s" % (tag, r.returncode, r.stderr.strip().splitlines()[-1:]))
                continue
            n_eq = next((i for i, (x, y) in enumerate(zip(toks, want)) if x != y), min(len(toks), len(want)))
            ok = n_eq == len(want) and len(want) > 0  # an empty golden compares nothing
            print("%s - %s greedy: %d of %d ids equal to llama.cpp's%s" %
                  ("ok" if ok else "not ok", tag, n_eq, len(want),
                   "" if ok else " (golden min top-2 margin %.3g)" % p.get("min_top1_top2_margin_greedy_steps", -1)))


if __name__ == "__main__":
    sys.exit(main())
