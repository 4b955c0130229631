# Reference perplexities from transformers (windows of --ctx tokens, stride = ctx) for loom's perplexity test and the demo model's figures.
"""Perplexity references for `loom perplexity` (src/engine/perplexity.h).

Usage:
    .venv-ref/bin/python tools/ref/make_perplexity.py --out tests/fixtures
        writes tests/fixtures/golden/perplexity.json: 400 token ids (seed 4321, ids 3..255),
        ctx 64 (7 windows, the last one short), and for llama_f32 / llama_bf16 / qwen2_bf16
        transformers' summed NLL, scored tokens and perplexity (f32 compute, eager attention).
    .venv-ref/bin/python tools/ref/make_perplexity.py --model models/demo --text FILE --ctx 512
        prints transformers' perplexity of a text file (tokenizer(text), special tokens added,
        as `loom perplexity` encodes it), for checking loom's figure on a real model.

Same loop as loom: window w holds tokens [w·ctx, (w+1)·ctx); token t of a window is scored
from the window's tokens before it; log-softmax in float64 over the f32 logits.
"""

import argparse
import json
import math
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

FIXTURES = ["llama_f32", "llama_bf16", "qwen2_bf16"]


@torch.no_grad()
def window_nll(model, tokens, ctx):
    nll, n, windows = 0.0, 0, 0
    for s in range(0, len(tokens) - 1, ctx):
        ids = tokens[s:s + ctx]
        if len(ids) < 2:
            break
        logits = model(input_ids=torch.tensor([ids])).logits[0].to(torch.float64)
        lp = torch.log_softmax(logits, dim=-1)
        for t in range(1, len(ids)):
            nll -= float(lp[t - 1, ids[t]])
            n += 1
        windows += 1
    return nll, n, windows


def load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                attn_implementation="eager").eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="fixtures root (writes golden/perplexity.json)")
    ap.add_argument("--model", help="a model folder with a tokenizer (with --text)")
    ap.add_argument("--text")
    ap.add_argument("--ctx", type=int, default=512)
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.model:
        tok = AutoTokenizer.from_pretrained(a.model)
        with open(a.text, encoding="utf-8") as f:
            tokens = tok(f.read())["input_ids"]
        nll, n, w = window_nll(load(a.model), tokens, a.ctx)
        print(json.dumps({"model": a.model, "text": a.text, "ctx": a.ctx, "tokens": len(tokens),
                          "predicted": n, "windows": w, "nll_mean": nll / n,
                          "perplexity": math.exp(nll / n)}, indent=2))
        return
    g = torch.Generator().manual_seed(4321)
    tokens = torch.randint(3, 256, (400,), generator=g).tolist()
    ctx = 64
    out = {"seed": 4321, "ctx": ctx, "tokens": tokens, "models": {}}
    for name in FIXTURES:
        nll, n, w = window_nll(load(os.path.join(a.out, "models", name)), tokens, ctx)
        out["models"][name] = {"nll_sum": nll, "predicted": n, "windows": w,
                               "perplexity": math.exp(nll / n)}
        print(name, out["models"][name])
    with open(os.path.join(a.out, "golden", "perplexity.json"), "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main()
