#!/usr/bin/env python3
"""embeddings_http.py GOLDEN — the HTTP cases of tests/embeddings_http.sh against $URL (a running
`llm170 serve` of the golden's model). Standard library only. Prints one line per case."""
import base64
import json
import math
import os
import struct
import sys
import urllib.error
import urllib.request

URL = os.environ["URL"]
failed = 0


def post(body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(URL + "/v1/embeddings", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def case(name, ok, why=""):
    global failed
    if ok:
        print("ok - embeddings_http_" + name)
    else:
        failed += 1
        print("#   " + why)
        print("not ok - embeddings_http_" + name)


def maxdiff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) else float("inf")


def main():
    g = json.load(open(sys.argv[1]))
    model_cases = [c for c in g["cases"] if c["pooling"] == "model"]
    tol = g["tolerance_abs"]

    # one token-array input: llama.cpp's vector; the response's shape
    c0 = model_cases[0]
    st, r = post({"input": c0["prompt"]})
    ok = st == 200 and r.get("object") == "list" and len(r.get("data", [])) == 1
    d = maxdiff(r["data"][0]["embedding"], c0["embedding"]) if ok else None
    ok = ok and r["data"][0]["object"] == "embedding" and r["data"][0]["index"] == 0 and d <= tol
    ok = ok and r["usage"] == {"prompt_tokens": len(c0["prompt"]), "total_tokens": len(c0["prompt"])}
    ok = ok and isinstance(r.get("model"), str) and r["model"]
    case("token_input_equals_llamacpp", ok, "status %d, max diff %s, body %.300s" % (st, d, json.dumps(r)))

    # several inputs (more than the gateway keeps in flight): in order, each equal to llama.cpp's and to itself
    ins = [c["prompt"] for c in model_cases] * 10
    st, r = post({"input": ins})
    ok = st == 200 and [x["index"] for x in r.get("data", [])] == list(range(len(ins)))
    worst_ref = worst_self = 0.0
    if ok:
        for i, x in enumerate(r["data"]):
            ref = model_cases[i % len(model_cases)]
            worst_ref = max(worst_ref, maxdiff(x["embedding"], ref["embedding"]))
            worst_self = max(worst_self, maxdiff(x["embedding"], r["data"][i % len(model_cases)]["embedding"]))
        ok = worst_ref <= tol and worst_self <= 1e-5
        ok = ok and r["usage"]["prompt_tokens"] == sum(len(p) for p in ins)
    case("batch_of_%d" % len(ins), ok, "status %d, vs llama.cpp %.3g, vs the same input %.3g" % (st, worst_ref, worst_self))

    # float and base64 are the same bits
    st1, rf = post({"input": c0["prompt"], "encoding_format": "float"})
    st2, rb = post({"input": c0["prompt"], "encoding_format": "base64"})
    ok = st1 == 200 and st2 == 200 and isinstance(rb["data"][0]["embedding"], str)
    if ok:
        raw = base64.b64decode(rb["data"][0]["embedding"])
        vb = struct.unpack("<%df" % (len(raw) // 4), raw)
        vf = [struct.unpack("<f", struct.pack("<f", x))[0] for x in rf["data"][0]["embedding"]]
        ok = list(vb) == vf
    case("base64_equals_float", ok, "status %d/%d" % (st1, st2))

    # dimensions: the first N values, unit length again
    n_embd = len(c0["embedding"])
    st, r = post({"input": c0["prompt"], "dimensions": 16})
    ok = st == 200 and len(r["data"][0]["embedding"]) == 16
    if ok:
        v = r["data"][0]["embedding"]
        full = rf["data"][0]["embedding"][:16]
        nf = math.sqrt(sum(x * x for x in full))
        ok = abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-6 and maxdiff(v, [x / nf for x in full]) < 1e-6
    case("dimensions_truncated_renormalised", ok, "status %d %.200s" % (st, json.dumps(r)))
    st, r = post({"input": c0["prompt"], "dimensions": n_embd})
    case("dimensions_equal_n_embd", st == 200 and r["data"][0]["embedding"] == rf["data"][0]["embedding"], "status %d" % st)

    # text input
    st, r = post({"input": "Hello world", "model": r.get("model", "")})
    ok = st == 200 and len(r["data"][0]["embedding"]) == n_embd
    ok = ok and abs(math.sqrt(sum(x * x for x in r["data"][0]["embedding"])) - 1) < 1e-5 and r["usage"]["prompt_tokens"] > 0
    case("text_input", ok, "status %d %.200s" % (st, json.dumps(r)))
    st, r = post({"input": ["Hello world", "Hello world again"]})
    case("text_array_input", st == 200 and len(r["data"]) == 2 and r["data"][0]["embedding"] != r["data"][1]["embedding"],
         "status %d" % st)

    # refusals: status 400, an OpenAI error object, the field at fault
    bad = [
        ("missing_input", {"model": "x"}, "input"),
        ("empty_string", {"input": ""}, "input"),
        ("empty_array", {"input": []}, "input"),
        ("empty_string_in_array", {"input": ["a", ""]}, "input"),
        ("empty_token_array", {"input": [[1, 2], []]}, "input"),
        ("mixed_types", {"input": ["a", 5]}, "input"),
        ("not_a_string", {"input": {"a": 1}}, "input"),
        ("negative_token", {"input": [1, -2]}, "input"),
        ("bad_encoding_format", {"input": "a", "encoding_format": "hex"}, "encoding_format"),
        ("dimensions_zero", {"input": "a", "dimensions": 0}, "dimensions"),
        ("dimensions_not_integer", {"input": "a", "dimensions": "8"}, "dimensions"),
        ("dimensions_too_large", {"input": [5, 6], "dimensions": n_embd + 1}, "dimensions"),
        ("token_outside_vocab", {"input": [5, 10 ** 9]}, None),
        ("too_long_for_the_context", {"input": [5] * 5000}, None),
    ]
    for name, body, param in bad:
        st, r = post(body)
        err = r.get("error", {}) if isinstance(r, dict) else {}
        ok = st == 400 and isinstance(err.get("message"), str) and err["message"]
        if param:
            ok = ok and err.get("param") == param
        case("refuses_" + name, ok, "status %d %.300s" % (st, json.dumps(r)))
    st, r = post(None, raw=b"{not json")
    case("refuses_bad_json", st == 400 and "error" in r, "status %d" % st)
    st, r = post({"input": c0["prompt"], "model": "no-such-model"})
    case("unknown_model_404", st == 404 and "error" in r, "status %d %.200s" % (st, json.dumps(r)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
