#!/usr/bin/env python3
"""llama_bpe_vocab.py OUT — write a vocab-only GGUF of the Llama 3 tokenizer ("llama-bpe") from
../shared/data/tokenizer/llama3-tiktoken/tokenizer.model, following the recipe in
../shared/data/tokenizer/stress/README.md (the vocab behind llama.cpp's ggml-vocab-llama-bpe.gguf):

* tokens = the 128,000 tiktoken ranks in rank order, bytes mapped through GPT-2's byte->unicode table;
* merges = for every token in rank order, every split of its bytes into two vocab tokens, ordered by
  (token rank, left rank, right rank);
* ids 128000..128255 = the Llama 3 special tokens, CONTROL;
* bos 128000, eos 128009, add_bos true, model gpt2, pre llama-bpe.

Uses the GGUF writer of ../shared/tools/gguf_synth.py (imported from there). Stdlib only."""
import base64
import os
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    data = os.path.abspath(os.environ.get("LLM170_SHARED", "../shared/data"))
    sys.path.insert(0, os.path.join(data, "..", "tools"))
    import gguf_synth as gs  # noqa: E402  (from ../shared/tools)

    ranks = {}
    with open(os.path.join(data, "tokenizer", "llama3-tiktoken", "tokenizer.model"), "rb") as f:
        for line in f:
            if line.strip():
                b64, r = line.split()
                ranks[base64.b64decode(b64)] = int(r)
    n = len(ranks)
    assert n == 128000 and sorted(ranks.values()) == list(range(n)), "unexpected tokenizer.model"
    by_rank = [None] * n
    for b, r in ranks.items():
        by_rank[r] = b

    # GPT-2 byte -> unicode table: printable bytes map to themselves, the rest to 256+k
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, k = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + k)
            k += 1
    enc = lambda bs: "".join(table[x] for x in bs)

    tokens = [enc(b) for b in by_rank]
    merges = []
    for b in by_rank:
        splits = []
        for i in range(1, len(b)):
            left, right = b[:i], b[i:]
            if left in ranks and right in ranks:
                splits.append((ranks[left], ranks[right]))
        for lr, rr in sorted(splits):
            merges.append(tokens[lr] + " " + tokens[rr])

    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + \
        ["<|reserved_special_token_%d|>" % i for i in range(4)] + \
        ["<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"] + \
        ["<|reserved_special_token_%d|>" % i for i in range(5, 251)]
    assert len(specials) == 256
    tokens += specials
    types = [gs.TT_NORMAL] * n + [gs.TT_CONTROL] * 256

    w = gs.GGUFWriter()
    A = "llama"
    w.s("general.architecture", A)
    w.s("general.name", "llama-bpe")
    w.u32(A + ".vocab_size", len(tokens))
    w.u32(A + ".context_length", 8192)
    w.u32(A + ".embedding_length", 64)
    w.u32(A + ".block_count", 1)
    w.u32(A + ".feed_forward_length", 128)
    w.u32(A + ".attention.head_count", 4)
    w.u32(A + ".attention.head_count_kv", 4)
    w.f32(A + ".attention.layer_norm_rms_epsilon", 1e-5)
    w.f32(A + ".rope.freq_base", 500000.0)
    w.u32(A + ".rope.dimension_count", 16)
    gs.write_vocab(w, {"model": "gpt2", "pre": "llama-bpe", "tokens": tokens, "scores": None, "types": types,
                       "merges": merges, "bos": 128000, "eos": 128009, "unk": None, "pad": None,
                       "add_bos": True, "add_eos": None, "chat_template": None})
    w.write(sys.argv[1])


if __name__ == "__main__":
    main()
