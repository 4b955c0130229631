# Checks that compressed-tensors + transformers load folders written by `loom quantize` and that their outputs are close to loom's (run by hand; results in docs/QUANTIZATION.md).
"""Run by hand (compressed-tensors from a --target folder, as for make_quantized.py):

    PYTHONPATH=/work/ct-pkgs .venv-ref/bin/python tools/ref/check_loom_quantize.py \
        --loom build/loom --fixtures tests/fixtures --work /tmp/loom-quantize-check

For each case it runs `loom quantize` on a fixture model, then
  1. loads the written folder with transformers (dtype float32, eager attention): compressed-
     tensors decompresses every projection; the decompressed weight must equal q · scale read
     straight from the safetensors with numpy (the packing, the nibble order, the signed int4
     scales and the shapes read as loom means them): max |difference| printed, must be 0;
  2. runs `loom generate` (greedy, 8 tokens, top-5 log-probs) on the written folder and compares
     the log-probs with transformers' log-softmax for the same tokens (its W8A8 quantizes the
     activations per token with scale max|x|/127.5, loom with max|x|/127; its W4A16 keeps them
     in f32, loom rounds them to int8: so close, not equal); greedy tokens where transformers'
     top-1 margin exceeds 0.5 must agree;
  3. prints the quantization's own size for scale: transformers on the dense original vs the
     written folder (largest log-prob difference).
"""

import argparse
import json
import os
import shutil
import subprocess

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

CASES = [  # (fixture, loom quantize flags)
    ("llama_bf16", ["--scheme", "int8"]),
    ("qwen3_bf16", ["--scheme", "int8", "--quantize-head"]),
    ("qwen2_bf16", ["--scheme", "int4", "--group-size", "32", "--quantize-head"]),  # tied → untied
    ("qwen3_bf16", ["--scheme", "int4", "--group-size", "32"]),
    ("gemma2_bf16", ["--scheme", "int4", "--group-size", "32"]),
]


def load(folder):
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                attn_implementation="eager").eval()


def unpack_int4(packed, shape):  # compressed-tensors pack_to_int32, as loom writes it
    out, cols = shape
    words = packed.view(np.uint32)
    q = np.zeros((out, cols), dtype=np.int32)
    for e in range(8):
        q[:, e::8] = ((words >> (4 * e)) & 15).astype(np.int32) - 8
    return q


def expected_weights(folder):
    tensors = {k: (v.float() if v.dtype == torch.bfloat16 else v).numpy()
               for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    out = {}
    for name, t in tensors.items():
        if name.endswith(".weight_packed"):
            m = name[: -len(".weight_packed")]
            shape = tensors[m + ".weight_shape"].tolist()
            q = unpack_int4(t, shape)
            s = tensors[m + ".weight_scale"].astype(np.float32)
            g = shape[1] // s.shape[1]
            out[m] = q.astype(np.float32) * np.repeat(s, g, axis=1)
        elif name.endswith(".weight_scale") and (name[: -len("_scale")]) in tensors and \
                tensors[name[: -len("_scale")]].dtype == np.int8:
            m = name[: -len(".weight_scale")]
            out[m] = tensors[m + ".weight"].astype(np.float32) * t.astype(np.float32)
    return out


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--work", default="/tmp/loom-quantize-check")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    prompts = json.load(open(os.path.join(a.fixtures, "golden", "prompts.json")))["prompts"]
    ok = True
    for i, (fixture, flags) in enumerate(CASES):
        src = os.path.join(a.fixtures, "models", fixture)
        folder = os.path.join(a.work, f"{i}_{fixture}")
        subprocess.run([a.loom, "quantize", "--model", src, "--out", folder] + flags, check=True,
                       capture_output=True)
        ref = load(folder)
        dense = load(src)
        ref(input_ids=torch.tensor([[1]]))  # compressed-tensors decompresses on the first forward
        mods = dict(ref.named_modules())
        want = expected_weights(folder)
        wdiff = max(float(np.abs(mods[m].weight.detach().numpy() - w).max()) for m, w in want.items())
        worst, worst_dense, clear, agree = 0.0, 0.0, 0, 0
        for ids in prompts:
            r = subprocess.run([a.loom, "generate", "--model", folder, "--prompt-tokens",
                                ",".join(map(str, ids)), "--max-tokens", "8", "--temperature", "0",
                                "--ignore-eos", "--logprobs", "5", "--output", "json"],
                               check=True, capture_output=True, text=True)
            res = json.loads(r.stdout)
            seq = ids + res["generated_tokens"]
            x = torch.tensor([seq])
            lp = torch.log_softmax(ref(input_ids=x).logits[0].double(), -1)
            lpd = torch.log_softmax(dense(input_ids=x).logits[0].double(), -1)
            for s, top in enumerate(res["logprobs"]):
                row = lp[len(ids) - 1 + s]
                for t in top:
                    worst = max(worst, abs(float(row[t["token"]]) - t["logprob"]))
                worst_dense = max(worst_dense, float((row - lpd[len(ids) - 1 + s]).abs().max()))
                v, k = torch.topk(row, 2)
                if float(v[0] - v[1]) > 0.5:
                    clear += 1
                    agree += int(int(k[0]) == res["generated_tokens"][s])
        good = wdiff == 0 and agree == clear
        ok = ok and good
        print(f"{fixture} {' '.join(flags)}: decompressed weights vs q*scale max diff {wdiff:g}; "
              f"loom vs transformers top-5 log-prob max diff {worst:.4f}; clear greedy steps "
              f"{agree}/{clear}; (transformers dense vs quantized: {worst_dense:.3f}) "
              f"{'OK' if good else 'FAIL'}")
    print("all OK" if ok else "FAILED")


if __name__ == "__main__":
    main()
