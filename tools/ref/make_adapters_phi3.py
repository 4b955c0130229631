# Builds PEFT LoRA adapters on the tiny Phi-3 models (fused qkv_proj / gate_up_proj) and PEFT's reference outputs.
"""Phi-3 adapter fixtures for loom (same conventions and golden format as make_adapters.py).

Usage (after tools/ref/make_models_phi3.py):
    .venv-ref/bin/python tools/ref/make_adapters_phi3.py --out tests/fixtures

PEFT wraps the fused projections as plain Linears: a LoRA on self_attn.qkv_proj has
lora_B [q_dim + 2·kv_dim, r] and adds scale·B·A·x to the fused output before it is split into
q, k, v (gate_up_proj: before the chunk into gate and up). Writes adapters/<name>/,
golden_lora/<name>.{json,unmerged,merged[,merged_bf16].safetensors}, golden_lora/mixed_phi3.*
(two adapters and base rows in one PEFT forward) and adapters/MANIFEST_phi3.json.
"""

import argparse
import json
import os
import sys

import torch
import transformers
from peft import PeftModel
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_adapters as ma  # noqa: E402
import make_models_phi3  # noqa: E402

ADAPTERS = [
    ("phi3_qkv_o_r8", "phi3_f32", "f32",
     dict(target_modules=["qkv_proj", "o_proj"], r=8, lora_alpha=16)),
    ("phi3_mlp_r4_f16", "phi3_f32", "f16",
     dict(target_modules=["gate_up_proj", "down_proj"], r=4, lora_alpha=8)),
    ("phi4mini_all_bf16", "phi4mini_bf16", "bf16",
     dict(target_modules="all-linear", r=4, lora_alpha=8, use_rslora=True)),
]
MIXED_BASE = "phi3_f32"
# (adapter, prompt index) per row. transformers picks the longrope factor set per forward from the
# longest row (max position + 1), so a padded batch holding the 17-token prompt would run every row
# with the long factors: the rows here are the prompts of at most 16 tokens, each as it runs alone.
MIXED_ROWS = [("phi3_qkv_o_r8", 0), ("__base__", 1), ("phi3_mlp_r4_f16", 3), ("phi3_mlp_r4_f16", 1)]


@torch.no_grad()
def mixed(out, all_prompts):
    """ma.mixed for the Phi-3 base: one right-padded PEFT forward with adapter_names per row."""
    golden = os.path.join(out, "golden_lora")
    assign = [a for a, _ in MIXED_ROWS]
    index = [i for _, i in MIXED_ROWS]
    prompts = [all_prompts[i] for i in index]
    assert max(len(p) for p in prompts) <= make_models_phi3.ORIGINAL
    names = [n for n in dict.fromkeys(assign) if n != "__base__"]
    pm, _ = ma.quiet(PeftModel.from_pretrained, ma.load_base(out, MIXED_BASE),
                     os.path.join(out, "adapters", names[0]), adapter_name=names[0])
    for n in names[1:]:
        ma.quiet(pm.load_adapter, os.path.join(out, "adapters", n), adapter_name=n)
    pm.eval()
    L = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), L, dtype=torch.long)
    mask = torch.zeros(len(prompts), L, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :len(p)] = torch.tensor(p)
        mask[i, :len(p)] = 1
    logits = pm(input_ids=ids, attention_mask=mask, adapter_names=assign).logits.float()
    rows = {f"row_{i}": logits[i, :len(p)].contiguous() for i, p in enumerate(prompts)}
    save_file(rows, os.path.join(golden, "mixed_phi3.safetensors"))
    worst = 0.0
    for i, a in enumerate(assign):
        ref_file = (os.path.join(out, "golden", f"{MIXED_BASE}.logits.safetensors") if a == "__base__"
                    else os.path.join(golden, f"{a}.unmerged.safetensors"))
        d = float((rows[f"row_{i}"] - load_file(ref_file)[f"prompt_{index[i]}"]).abs().max())
        worst = max(worst, d)
        assert d <= ma.MIXED_TOL, f"mixed row {i} ({a}): {d} vs alone"
    greedy = []
    for i, a in enumerate(assign):  # each row's greedy run alone (full forwards)
        ref_json = (os.path.join(out, "golden", f"{MIXED_BASE}.json") if a == "__base__"
                    else os.path.join(golden, f"{a}.json"))
        d = json.load(open(ref_json))
        greedy.append(d["greedy"][index[i]] if a == "__base__" else d["unmerged"]["greedy"][index[i]])
    doc = {"base": MIXED_BASE, "prompts": prompts, "prompt_index": index, "adapter_names": assign,
           "adapters": {n: f"../adapters/{n}" for n in names}, "padding": "right, token 0",
           "logits_file": "mixed_phi3.safetensors", "max_abs_diff_vs_alone": worst,
           "greedy": greedy, "greedy_note": "each row's greedy run alone (full forwards; every row "
                                            "crosses original_max_position_embeddings)"}
    with open(os.path.join(golden, "mixed_phi3.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")
    print(f"mixed batch {MIXED_ROWS}: every row == alone within {worst:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    out = args.out
    with open(os.path.join(out, "golden", "prompts.json")) as f:
        prompts = json.load(f)["prompts"]
    manifest = {}
    for name, base, dtype_name, kw in ADAPTERS:
        log = {}
        cfg = ma.make_adapter(out, name, base, dtype_name, kw, log)
        folder = os.path.join(out, "adapters", name)
        tensors = ma.file_tensors(folder)
        assert all(ma.KEY_RE.match(t[0]) for t in tensors), name
        base_logits = load_file(os.path.join(out, "golden", f"{base}.logits.safetensors"))
        res, delta = ma.reference(out, name, base, kw, prompts, base_logits, log)
        assert delta > 0.5, f"{name}: adapter barely changes the logits ({delta})"
        assert res["merged"]["max_abs_delta_vs_unmerged"] < 1e-3, (name, res["merged"])
        doc = {"adapter": name, "base": base, "prompts": prompts, **res, "max_abs_delta_vs_base": delta}
        with open(os.path.join(out, "golden_lora", f"{name}.json"), "w") as f:
            json.dump(doc, f, indent=None)
            f.write("\n")
        manifest[name] = {"base": base, "file_dtype": tensors[0][2], "modules": log["modules"],
                          "tensors": tensors, "config": {k: cfg[k] for k in (
                              "target_modules", "r", "lora_alpha", "use_rslora")}}
        spec_d = ma.check_spec_math(out, name, base, prompts)
        fused = sorted({p.rsplit(".", 1)[1] for p in log["modules"]})
        print(f"{name:20s} base {base:13s} {len(tensors):3d} tensors {fused}  max|adapter-base| {delta:.3f}"
              f"  merged-vs-unmerged {res['merged']['max_abs_delta_vs_unmerged']:.2g}"
              f"  min greedy margin {res['unmerged']['min_greedy_margin']:.4f}"
              f"  distinct greedy {[len(set(g)) for g in res['unmerged']['greedy']]}"
              f"  spec-math merge vs PEFT {spec_d:.2g}")
    with open(os.path.join(out, "adapters", "MANIFEST_phi3.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    mixed(out, prompts)


if __name__ == "__main__":
    main()
