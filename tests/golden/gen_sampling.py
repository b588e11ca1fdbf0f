#!/usr/bin/env python3
"""Write tests/golden/sampling_chain.txt: tokens chosen by llama.cpp's own
sampler chain (libllama of npm @node-llama-cpp/linux-x64@3.21.1 = llama.cpp
80fb11a, called through its C API with ctypes, no model) for random logits,
parameters and seeds. test_sampling.c replays every case through smp_*.

usage: gen_sampling.py LIBDIR > tests/golden/sampling_chain.txt
LIBDIR holds libllama.v0.4.0.so and its libggml*.so.

Line format (space separated):
  n_vocab lseed seed top_k top_p min_p typical temp repeat freq presence
  last_n min_keep order hist bias steps tokens
order: sampler names joined by ',' ('-' = none); hist: token ids accepted
before the first step ('-' = none); bias: id:value pairs ('-' = none);
tokens: the token chosen at each step (each is accepted before the next).
Logits of a step: n_vocab draws of x = x*1664525 + 1013904223 (mod 2^32)
starting from lseed, logit = ((x >> 8) - 2^23) / 2^20, exact in float32;
the state carries over from step to step. Cases whose logits repeat a value
within a step are skipped by choosing another lseed (tie order is
implementation-defined).
Also skipped: typical_p < 1 while some candidate has p == 0 (a -inf bias, or
greedy temperature before typ_p). llama.cpp then computes the entropy as NaN
(0 * ln 0) and its result depends on how std::sort orders NaN scores; we
use 0 * ln 0 = 0 instead (see worker/serve/sampling.c)."""
import ctypes, math, os, random, sys

libdir = sys.argv[1]
for dep in ("libggml-base.so", "libggml.v0.4.0.so"):
    ctypes.CDLL(os.path.join(libdir, dep), mode=ctypes.RTLD_GLOBAL)
L = ctypes.CDLL(os.path.join(libdir, "libllama.v0.4.0.so"))

class TokenData(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int32), ("logit", ctypes.c_float), ("p", ctypes.c_float)]
class TokenDataArray(ctypes.Structure):
    _fields_ = [("data", ctypes.POINTER(TokenData)), ("size", ctypes.c_size_t),
                ("selected", ctypes.c_int64), ("sorted", ctypes.c_bool)]
class LogitBias(ctypes.Structure):
    _fields_ = [("token", ctypes.c_int32), ("bias", ctypes.c_float)]
class ChainParams(ctypes.Structure):
    _fields_ = [("no_perf", ctypes.c_bool)]

vp = ctypes.c_void_p
L.llama_sampler_chain_init.restype = vp
L.llama_sampler_chain_init.argtypes = [ChainParams]
L.llama_sampler_chain_add.argtypes = [vp, vp]
L.llama_sampler_apply.argtypes = [vp, ctypes.POINTER(TokenDataArray)]
L.llama_sampler_accept.argtypes = [vp, ctypes.c_int32]
L.llama_sampler_free.argtypes = [vp]
for name, args in [("top_k", [ctypes.c_int32]), ("top_p", [ctypes.c_float, ctypes.c_size_t]),
                   ("min_p", [ctypes.c_float, ctypes.c_size_t]),
                   ("typical", [ctypes.c_float, ctypes.c_size_t]),
                   ("temp_ext", [ctypes.c_float, ctypes.c_float, ctypes.c_float]),
                   ("penalties", [ctypes.c_int32, ctypes.c_int32, ctypes.c_float, ctypes.c_float, ctypes.c_float]),
                   ("logit_bias", [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(LogitBias)]),
                   ("dist", [ctypes.c_uint32])]:
    f = getattr(L, "llama_sampler_init_" + name)
    f.restype = vp
    f.argtypes = args

def f32(x):
    return ctypes.c_float(x).value

def gen_logits(state, n):
    out = []
    for _ in range(n):
        state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(((state >> 8) - (1 << 23)) / float(1 << 20))
    return state, out

def run_case(c):
    chain = L.llama_sampler_chain_init(ChainParams(True))
    if c["bias"]:
        arr = (LogitBias * len(c["bias"]))(*[LogitBias(t, b) for t, b in c["bias"]])
        L.llama_sampler_chain_add(chain, L.llama_sampler_init_logit_bias(c["n"], len(c["bias"]), arr))
    for s in c["order"]:
        if s == "penalties":
            smp = L.llama_sampler_init_penalties(c["n"], c["last_n"], c["rep"], c["freq"], c["pres"])
        elif s == "top_k":
            smp = L.llama_sampler_init_top_k(c["top_k"])
        elif s == "typ_p":
            smp = L.llama_sampler_init_typical(c["typ"], c["min_keep"])
        elif s == "top_p":
            smp = L.llama_sampler_init_top_p(c["top_p"], c["min_keep"])
        elif s == "min_p":
            smp = L.llama_sampler_init_min_p(c["min_p"], c["min_keep"])
        elif s == "temperature":
            smp = L.llama_sampler_init_temp_ext(c["temp"], 0.0, 1.0)
        L.llama_sampler_chain_add(chain, smp)
    L.llama_sampler_chain_add(chain, L.llama_sampler_init_dist(c["seed"]))
    for t in c["hist"]:
        L.llama_sampler_accept(chain, t)
    state = c["lseed"]
    toks = []
    for _ in range(c["steps"]):
        state, logits = gen_logits(state, c["n"])
        if len(set(logits)) != len(logits) and not c.get("ties_ok"):
            L.llama_sampler_free(chain)
            return None
        data = (TokenData * c["n"])(*[TokenData(i, l, 0.0) for i, l in enumerate(logits)])
        arr = TokenDataArray(data, c["n"], -1, False)
        L.llama_sampler_apply(chain, ctypes.byref(arr))
        assert arr.selected >= 0
        tok = arr.data[arr.selected].id
        toks.append(tok)
        L.llama_sampler_accept(chain, tok)
    L.llama_sampler_free(chain)
    return toks

DEFAULT = ["penalties", "top_k", "typ_p", "top_p", "min_p", "temperature"]
rng = random.Random(170)
cases = []
while len(cases) < 400:
    big = len(cases) % 10 == 9
    n = rng.choice([2000, 5000]) if big else rng.randint(2, 64)
    c = dict(n=n, lseed=rng.getrandbits(32), seed=rng.getrandbits(32),
             top_k=rng.choice([0, 0, 1, 3, 10, 40, 100]),
             top_p=f32(rng.choice([1.0, 0.95, 0.9, 0.5, rng.random()])),
             min_p=f32(rng.choice([0.0, 0.05, 0.1, rng.random() * 0.5])),
             typ=f32(rng.choice([1.0, 1.0, 1.0, 0.9, rng.random()])),
             temp=f32(rng.choice([0.8, 1.0, 0.0, 0.5, 1.5, rng.random() * 2])),
             rep=f32(rng.choice([1.0, 1.0, 1.1, 1.5, 0.8])),
             freq=f32(rng.choice([0.0, 0.0, 0.5, -0.3])),
             pres=f32(rng.choice([0.0, 0.0, 0.4, 1.0])),
             last_n=rng.choice([64, 0, 3, 16]),
             min_keep=rng.choice([0, 0, 0, 1, 2, 5]),
             steps=3 if big else rng.randint(1, 12))
    order = list(DEFAULT)
    if rng.random() < 0.3:
        rng.shuffle(order)
        order = order[:rng.randint(0, len(order))]
    c["order"] = order
    c["hist"] = [rng.randrange(n) for _ in range(rng.randint(0, 20))]
    c["bias"] = []
    if rng.random() < 0.3:
        for _ in range(rng.randint(1, 4)):
            c["bias"].append((rng.randrange(n), f32(rng.choice([-math.inf, -2.0, 0.5, 3.0]))))
    if "typ_p" in order and c["typ"] < 1.0:
        if any(b == -math.inf for _, b in c["bias"]):
            continue
        if "temperature" in order and c["temp"] <= 0 and order.index("temperature") < order.index("typ_p"):
            continue
    toks = run_case(c)
    if toks is None:
        continue
    c["tokens"] = toks
    cases.append(c)

# a few Qwen-sized vocabularies through the default chain (top_k 40 and off);
# 151936 draws from 2^24 values always repeat some, so ties are allowed here:
# they sit far below the top of the list, where no cut or draw lands
for i in range(6):
    c = dict(n=151936, lseed=rng.getrandbits(32), seed=rng.getrandbits(32),
             top_k=[40, 0][i % 2], top_p=f32(0.95), min_p=f32([0.05, 0.0, 0.05][i % 3]), typ=1.0,
             temp=f32(0.8), rep=f32(1.1), freq=0.0, pres=0.0, last_n=64, min_keep=0, steps=2,
             order=list(DEFAULT), hist=[rng.randrange(151936) for _ in range(10)], bias=[],
             ties_ok=True)
    toks = run_case(c)
    if toks is None:
        continue
    c["tokens"] = toks
    cases.append(c)

def fmt(x):
    return "-inf" if x == -math.inf else repr(x)

print("# llama.cpp 80fb11a sampler-chain goldens; generated by tests/golden/gen_sampling.py")
for c in cases:
    print(" ".join(str(v) for v in [
        c["n"], c["lseed"], c["seed"], c["top_k"], fmt(c["top_p"]), fmt(c["min_p"]), fmt(c["typ"]),
        fmt(c["temp"]), fmt(c["rep"]), fmt(c["freq"]), fmt(c["pres"]), c["last_n"], c["min_keep"],
        ",".join(c["order"]) or "-", ",".join(map(str, c["hist"])) or "-",
        ",".join("%d:%s" % (t, fmt(b)) for t, b in c["bias"]) or "-",
        c["steps"], ",".join(map(str, c["tokens"]))]))
