#!/usr/bin/env python3
"""References from transformers running in bfloat16 for loom's single-rounding bf16 default.

For each `_bf16` fixture model (run after make_models.py / make_models_gemma.py), loads it with
dtype=torch.bfloat16 on CPU (eager attention: every activation, the residual stream and the
logits are bf16, as vLLM/transformers serve bf16 models) and writes, for the 4 golden prompts:

  tests/fixtures/golden_bf16/<name>.logits.safetensors  BF16 tensors (lossless: HF's logits
      are bf16) prompt_i [len_i, vocab] and greedy_i [32, vocab] (row j: the logits that chose
      greedy token j, full re-run per step as make_models.py does)
  tests/fixtures/golden_bf16/<name>.json  {"model", "prompts", "greedy": [[32 ids]...],
      "margins": [[top1 - top2 logit per greedy step]...]}

Deterministic (CPU, fixed fixtures); ~10 s on 2 cores.
Usage: .venv-ref/bin/python tools/ref/make_bf16_refs.py --out tests/fixtures
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

MODELS = ["llama_bf16", "mistral_bf16", "qwen2_bf16", "qwen3_bf16", "gemma2_bf16", "gemma3_bf16"]
N_GEN = 32


@torch.no_grad()
def logits_of(model, ids):
    return model(input_ids=torch.tensor([ids], dtype=torch.long)).logits[0]  # [len, vocab] bf16


@torch.no_grad()
def greedy(model, ids):
    seq, gen, rows, margins = list(ids), [], [], []
    for _ in range(N_GEN):
        row = logits_of(model, seq)[-1]
        top = torch.topk(row.float(), 2).values
        tok = int(torch.argmax(row.float()).item())
        gen.append(tok)
        rows.append(row.clone())
        margins.append(float(top[0] - top[1]))
        seq.append(tok)
    return gen, torch.stack(rows), margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    with open(os.path.join(args.out, "golden", "prompts.json")) as f:
        prompts = json.load(f)["prompts"]
    out_dir = os.path.join(args.out, "golden_bf16")
    os.makedirs(out_dir, exist_ok=True)
    for name in MODELS:
        model = AutoModelForCausalLM.from_pretrained(
            os.path.join(args.out, "models", name), dtype=torch.bfloat16,
            attn_implementation="eager").eval()
        assert next(model.parameters()).dtype == torch.bfloat16, name
        tensors, greedy_ids, margins = {}, [], []
        for i, ids in enumerate(prompts):
            tensors[f"prompt_{i}"] = logits_of(model, ids).contiguous()
            g, rows, m = greedy(model, ids)
            assert torch.equal(rows[0], tensors[f"prompt_{i}"][-1]), name
            tensors[f"greedy_{i}"] = rows.contiguous()
            greedy_ids.append(g)
            margins.append(m)
        save_file(tensors, os.path.join(out_dir, f"{name}.logits.safetensors"))
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump({"model": name, "prompts": prompts, "greedy": greedy_ids, "margins": margins}, f)
            f.write("\n")
        print(f"{name}: max|logit| {max(float(t.float().abs().max()) for t in tensors.values()):.3f}, "
              f"min margin {min(min(m) for m in margins):.4f}")


if __name__ == "__main__":
    main()
