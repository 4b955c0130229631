# Builds PEFT LoRA adapters on the tiny Gemma 2/3 fixture models and dumps PEFT's reference outputs (make_adapters.py's formats).
"""Gemma LoRA adapter reference fixtures for loom.

Usage (after make_models_gemma.py has written tests/fixtures/models/gemma*):
    .venv-ref/bin/python tools/ref/make_adapters_gemma.py --out tests/fixtures

Runs make_adapters.py's pipeline (random non-zero B, PEFT save, unmerged / merged / merged_bf16
references, spec-math merge check) on the adapters below, then a PEFT mixed-batch forward on
gemma3_f32 (two adapters + base rows) written as golden_lora/mixed_gemma3.{json,safetensors}.
The embed_tokens adapter (gemma3_embed_v) gets an unmerged reference only: PEFT multiplies the LoRA
embedding delta by Gemma's embed_scale, and on the tied embedding PEFT's in-place merge would also
change the head (loom's merge unties, so its merged run must equal PEFT's unmerged one).
"""

import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_adapters  # noqa: E402
from make_adapters import ALL7, N_GEN, PeftModel, load_base, quiet  # noqa: E402

ADAPTERS = [
    ("gemma2_all_r8", "gemma2_f32", "f32", dict(target_modules=ALL7, r=8, lora_alpha=16)),
    ("gemma2_bf16_qv", "gemma2_bf16", "bf16", dict(target_modules=["q_proj", "v_proj"], r=4, lora_alpha=8)),
    ("gemma3_all_linear_r4", "gemma3_f32", "f32", dict(target_modules="all-linear", r=4, lora_alpha=8)),
    ("gemma3_mlp_r6_f16", "gemma3_f32", "f16",
     dict(target_modules=["gate_proj", "up_proj", "down_proj"], r=6, lora_alpha=12)),
    ("gemma3_bf16_qko", "gemma3_bf16", "bf16",
     dict(target_modules=["q_proj", "k_proj", "o_proj"], r=4, lora_alpha=8, use_rslora=True)),
]

# Seed salts from a small scan (as make_adapters.SEED_SALT): every greedy step keeps a top-1/top-2
# margin >= 2e-3.
SEED_SALT = {"gemma2_all_r8": 5, "gemma2_bf16_qv": 7, "gemma3_all_linear_r4": 1}

EMBED_ADAPTER = ("gemma3_embed_v", "gemma3_f32", "f32",
                 dict(target_modules=["embed_tokens", "v_proj"], r=4, lora_alpha=8))

MIXED_BASE = "gemma3_f32"
MIXED_ASSIGN = ["gemma3_all_linear_r4", "__base__", "gemma3_mlp_r6_f16", "gemma3_all_linear_r4"]
MIXED_TAG = "mixed_gemma3"


@torch.no_grad()
def mixed(out, prompts):
    """make_adapters.mixed for MIXED_BASE / MIXED_ASSIGN, written as MIXED_TAG.{json,safetensors}."""
    golden = os.path.join(out, "golden_lora")
    names = [n for n in dict.fromkeys(MIXED_ASSIGN) if n != "__base__"]
    pm, _ = quiet(PeftModel.from_pretrained, load_base(out, MIXED_BASE),
                  os.path.join(out, "adapters", names[0]), adapter_name=names[0])
    for n in names[1:]:
        quiet(pm.load_adapter, os.path.join(out, "adapters", n), adapter_name=n)
    pm.eval()
    L = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    mask = torch.zeros(len(prompts), L, dtype=torch.long)
    for i, p in enumerate(prompts):  # right padding with token 0
        ids[i, :len(p)] = torch.tensor(p)
        mask[i, :len(p)] = 1
    logits = pm(input_ids=ids, attention_mask=mask, adapter_names=list(MIXED_ASSIGN)).logits.float()
    rows = {f"row_{i}": logits[i, :len(p)].contiguous() for i, p in enumerate(prompts)}
    save_file(rows, os.path.join(golden, f"{MIXED_TAG}.safetensors"))
    lids = torch.zeros(len(prompts), L, dtype=torch.long)
    lmask = torch.zeros(len(prompts), L, dtype=torch.long)
    for i, p in enumerate(prompts):
        lids[i, L - len(p):] = torch.tensor(p)
        lmask[i, L - len(p):] = 1
    gen = pm.generate(input_ids=lids, attention_mask=lmask, adapter_names=list(MIXED_ASSIGN),
                      max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False, eos_token_id=None,
                      pad_token_id=0)[:, L:].tolist()
    worst = 0.0
    for i, a in enumerate(MIXED_ASSIGN):
        if a == "__base__":
            ref_json = os.path.join(out, "golden", f"{MIXED_BASE}.json")
            ref_file = os.path.join(out, "golden", f"{MIXED_BASE}.logits.safetensors")
        else:
            ref_json = os.path.join(golden, f"{a}.json")
            ref_file = os.path.join(golden, f"{a}.unmerged.safetensors")
        with open(ref_json) as f:
            d = json.load(f)
        alone = d["greedy"][i] if a == "__base__" else d["unmerged"]["greedy"][i]
        assert gen[i] == alone, f"mixed generate row {i} ({a}) != alone"
        diff = float((rows[f"row_{i}"] - load_file(ref_file)[f"prompt_{i}"]).abs().max())
        worst = max(worst, diff)
        assert diff <= make_adapters.MIXED_TOL, f"mixed row {i} ({a}): {diff} vs alone"
    doc = {"base": MIXED_BASE, "prompts": prompts, "adapter_names": list(MIXED_ASSIGN),
           "adapters": {n: f"../adapters/{n}" for n in names}, "padding": "right, token 0",
           "logits_file": f"{MIXED_TAG}.safetensors", "max_abs_diff_vs_alone": worst,
           "greedy": gen, "greedy_note": "PEFT generate(adapter_names=...), left padding, KV cache; "
                                         "equal to each row's greedy run alone"}
    with open(os.path.join(golden, f"{MIXED_TAG}.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")
    print(f"mixed batch {MIXED_ASSIGN}: every row == alone within {worst:.3g}; generate() == alone")


@torch.no_grad()
def embed_unmerged(out, prompts):
    """EMBED_ADAPTER saved as PEFT saves it; golden_lora/<name>.json + .unmerged.safetensors."""
    import shutil
    name, base, dtype_name, kw = EMBED_ADAPTER
    log = {}
    make_adapters.make_adapter(out, name, base, dtype_name, kw, log)
    shutil.rmtree(os.path.join(out, "adapters", name + "_peft_default_save"), ignore_errors=True)
    pm, _ = quiet(PeftModel.from_pretrained, load_base(out, base), os.path.join(out, "adapters", name))
    pm.eval()
    emb = pm.base_model.model.model.embed_tokens
    assert emb._get_embed_scale() is not None, "PEFT did not find Gemma's embed_scale"
    logits, gen, margin = make_adapters.run_all(pm, prompts)
    assert margin >= 2e-3, (name, margin)
    base_logits = load_file(os.path.join(out, "golden", f"{base}.logits.safetensors"))
    delta = make_adapters.max_delta(logits, base_logits)
    assert delta > 0.5, (name, delta)
    save_file(logits, os.path.join(out, "golden_lora", f"{name}.unmerged.safetensors"))
    doc = {"adapter": name, "base": base, "prompts": prompts,
           "unmerged": {"greedy": gen, "min_greedy_margin": margin}, "max_abs_delta_vs_base": delta,
           "note": "unmerged only; PEFT scales the embedding LoRA delta by embed_scale"}
    with open(os.path.join(out, "golden_lora", f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")
    print(f"{name}: unmerged reference, max|adapter-base| {delta:.3f}, min greedy margin {margin:.4f}, "
          f"distinct greedy {[len(set(g)) for g in gen]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--mixed-only", action="store_true")
    args = ap.parse_args()
    make_adapters.ADAPTERS = ADAPTERS
    make_adapters.SEED_SALT.update(SEED_SALT)
    if not args.mixed_only:
        # make_adapters.main with --only: every adapter of ADAPTERS, no MANIFEST / mixed_llama rewrite.
        sys.argv = [sys.argv[0], "--out", args.out, "--only", *[a[0] for a in ADAPTERS]]
        make_adapters.main()
    with open(os.path.join(args.out, "golden", "prompts.json")) as f:
        prompts = json.load(f)["prompts"]
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    mixed(args.out, prompts)
    embed_unmerged(args.out, prompts)


if __name__ == "__main__":
    main()
