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
    # groups of 128 on 64-input projections: config groups of 64 by module name (Int4GroupFor)
    ("qwen3_bf16", ["--scheme", "int4", "--group-size", "128"]),
    # mixture of experts: experts quantized per expert, routers dense in `ignore`; the fixtures'
    # experts are 24 and 48 wide (no common group of 32 with 64: int4 experts stay dense)
    ("qwen3_moe_bf16", ["--scheme", "int4", "--group-size", "128", "--quantize-head"]),
    ("mixtral_bf16", ["--scheme", "int8"]),
    # experts 64 wide (make_moe_w64.py): int4 experts in "Linear"'s group of 32, and groups of
    # 128 → the experts' own "re:" config group of 64
    ("qwen3_moe_w64_bf16", ["--scheme", "int4", "--group-size", "32"]),
    ("qwen3_moe_w64_bf16", ["--scheme", "int4", "--group-size", "128"]),
    ("mixtral_w64_bf16", ["--scheme", "int4", "--group-size", "128"]),
    ("mixtral_w64_bf16", ["--scheme", "int8"]),
    ("qwen3_moe_w64_bf16", ["--scheme", "int8"]),
]


def expert_weights(ref):
    """Per-expert weights "<layer>.<block>.experts.<e>.<leaf>" (the files' names) from transformers
    5's fused params."""
    out = {}
    mixtral = ref.config.model_type == "mixtral"
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    for pname, p in ref.named_parameters():
        if mixtral:  # transformers 5 calls Mixtral's block "mlp"; the files say block_sparse_moe
            pname = pname.replace(".mlp.", ".block_sparse_moe.")
        if pname.endswith(".experts.gate_up_proj"):
            w = p.detach().numpy()  # [E, 2I, H]: gate rows, then up
            i = w.shape[1] // 2
            for e in range(w.shape[0]):
                out[f"{pname[:-len('gate_up_proj')]}{e}.{names[0]}"] = w[e, :i]
                out[f"{pname[:-len('gate_up_proj')]}{e}.{names[1]}"] = w[e, i:]
        elif pname.endswith(".experts.down_proj"):
            w = p.detach().numpy()  # [E, H, I]
            for e in range(w.shape[0]):
                out[f"{pname[:-len('down_proj')]}{e}.{names[2]}"] = w[e]
    return out


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


def set_weights(model, weights):
    """Puts `weights` (module name → [out, in]) into `model`, experts into the fused params."""
    mods = dict(model.named_modules())
    params = dict(model.named_parameters())
    mixtral = model.config.model_type == "mixtral"
    for name, w in weights.items():
        t = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32))
        if ".experts." not in name:
            mods[name].weight.data.copy_(t)
            continue
        block, rest = name.split(".experts.")
        e, leaf = rest.split(".")
        if mixtral:
            block = block.replace(".block_sparse_moe", ".mlp")
        if leaf in ("down_proj", "w2"):
            params[block + ".experts.down_proj"].data[int(e)].copy_(t)
        else:
            p = params[block + ".experts.gate_up_proj"].data[int(e)]
            i = p.shape[0] // 2
            (p[:i] if leaf in ("gate_proj", "w1") else p[i:]).copy_(t)


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--fixtures", default="tests/fixtures")
    ap.add_argument("--work", default="/tmp/loom-quantize-check")
    ap.add_argument("--only", default="", help="run the cases whose fixture contains this")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.manual_seed(0)
    prompts = json.load(open(os.path.join(a.fixtures, "golden", "prompts.json")))["prompts"]
    ok = True
    for i, (fixture, flags) in enumerate(CASES):
        if a.only not in fixture:
            continue
        src = os.path.join(a.fixtures, "models", fixture)
        folder = os.path.join(a.work, f"{i}_{fixture}")
        subprocess.run([a.loom, "quantize", "--model", src, "--out", folder] + flags, check=True,
                       capture_output=True)
        want = expected_weights(folder)
        dense = load(src)
        try:
            ref = load(folder)
            how = "transformers + compressed-tensors"
        except RuntimeError:
            # transformers 5.24 fuses a MoE's experts while loading and does so for packed
            # (int4) experts only: int8 or dense experts under a quantization_config fail there
            # ("Concatenate ... Ckpt contains: 0"). Reference: transformers on the dense model
            # with the files' q · scale in place (W8A8's activation rounding is then not in it).
            ref = load(src)
            set_weights(ref, want)
            how = "transformers on the files' q*scale (it cannot load this MoE checkpoint)"
        ref(input_ids=torch.tensor([[1]]))  # compressed-tensors decompresses on the first forward
        have = {m: mod.weight.detach().numpy() for m, mod in ref.named_modules()
                if getattr(mod, "weight", None) is not None}
        have.update(expert_weights(ref))
        wdiff = max(float(np.abs(have[m] - w).max()) for m, w in want.items())
        experts = sum(".experts." in m for m in want)
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
        print(f"{fixture} {' '.join(flags)} [{how}]: decompressed weights ({len(want)} projections, "
              f"{experts} experts) vs q*scale max diff {wdiff:g}; "
              f"loom vs transformers top-5 log-prob max diff {worst:.4f}; clear greedy steps "
              f"{agree}/{clear}; (transformers dense vs quantized: {worst_dense:.3f}) "
              f"{'OK' if good else 'FAIL'}")
    print("all OK" if ok else "FAILED")


if __name__ == "__main__":
    main()
