#!/usr/bin/env python3
# PEFT LoRA adapters on the MoE fixture models (expert LoRA, both layouts) and PEFT's reference outputs.
"""Expert-LoRA reference fixtures (run after make_models_moe.py):

    .venv-ref/bin/python tools/ref/make_adapters_moe.py --out tests/fixtures

Two adapter layouts exist for MoE experts, and PEFT 0.21 on transformers 5 loads both:

* "v4" / vLLM layout: one LoRA per expert module, as PEFT saved them when experts were nn.Linear
  (transformers 4) and as vLLM reads them:
      base_model.model.model.layers.L.mlp.experts.E.{gate,up,down}_proj.lora_{A,B}.weight   (Qwen3-MoE)
      base_model.model.model.layers.L.block_sparse_moe.experts.E.w{1,2,3}.lora_{A,B}.weight (Mixtral)
      base_model.model.model.layers.L.block_sparse_moe.gate.lora_{A,B}.weight               (router)
  PEFT converts them on load into its fused form (rank 2r over gate_up_proj, block-diagonal B).
  These files are written here directly (PEFT on transformers 5 can no longer produce them).
* "native" layout: what PEFT 0.21 saves on transformers 5 with target_parameters
  ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"(, "mlp.gate.weight")]:
      ...mlp.experts.base_layer.lora_A.weight [E*r, H], lora_B.weight [2I, E*r]  (gate_up_proj)
      ...mlp.experts.lora_A.weight            [E*r, I], lora_B.weight [H, E*r]   (down_proj)
      ...mlp.gate.lora_A.weight [r, H], lora_B.weight [E, r]                    (router)
  (which expert parameter is the outer wrapper follows PEFT's processing order; the shapes tell
  them apart). Expert e's factors: A_e = A[e*r:(e+1)*r], B_e = B[:, e::E] (B's columns are
  rank-major, expert-minor); for gate_up_proj the first I rows of B_e are gate_proj's, the next I
  up_proj's, sharing A_e.

Dumps (golden_lora/<name>.{unmerged,merged}.safetensors + <name>.json) have make_adapters.py's
format. PEFT 0.21 refuses mixed adapter batches on expert LoRA ("does not support mixed adapter
batches yet"), so golden_lora/mixed_<base>.json lists a per-row assignment whose reference rows are
each adapter's unmerged dump (PEFT's mixed dumps equal the rows alone, see make_adapters.py).
Router near-ties are checked on the adapted models as in make_models_moe.py.
"""

import argparse
import json
import os
import shutil
import sys
import warnings
import zlib

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import make_prompts  # noqa: E402
from make_adapters import max_delta, run_all  # noqa: E402
from make_models_moe import MIN_ROUTER_MARGIN, RouterProbe  # noqa: E402

R, ALPHA = 4, 8
DELTA_RATIO = 0.5  # each expert's delta ≈ half its base weight (entry-wise std)

# First seed salt tried per adapter (the result of the scan in main(), so reruns are quick).
SALTS = {"qwen3_moe_experts_v4": 3, "mixtral_native": 2, "mixtral_all_linear": 6, "qwen3_moe_native_pattern": 1,
         "mixtral_native_pattern": 2}

# name, base, layout, targets
ADAPTERS = [
    ("qwen3_moe_native", "qwen3_moe_f32", "native",
     dict(target_modules=["q_proj", "v_proj"],
          target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"])),
    ("qwen3_moe_experts_v4", "qwen3_moe_f32", "v4",
     dict(target_modules=r".*\.(o_proj|experts\.\d+\.(gate_proj|up_proj|down_proj))$")),
    ("mixtral_native", "mixtral_f32", "native",
     dict(target_modules=["q_proj", "o_proj"],
          target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight"])),
    ("mixtral_experts_v4", "mixtral_f32", "v4",
     dict(target_modules=["k_proj", "w1", "w2", "w3", "gate"])),
    # What a user gets from LoraConfig(target_modules="all-linear") on transformers 5: PEFT turns
    # the v4 expert/router names into target_parameters (gate_up_proj, down_proj, gate.weight)
    # with rank_pattern/alpha_pattern ".*\.gate_up_proj" = 2r / 2·alpha, and (Qwen3-MoE) drops the
    # dense mlp_only layers' gate/up/down_proj, whose names it moved to the experts.
    ("qwen3_moe_all_linear", "qwen3_moe_f32", "native", dict(target_modules="all-linear")),
    ("mixtral_all_linear", "mixtral_f32", "native", dict(target_modules="all-linear")),
    # rank_pattern / alpha_pattern on expert parameters: PEFT matches the keys against the
    # parameter's path (model.layers.L.mlp.experts.gate_up_proj, model.layers.L.mlp.gate.weight),
    # first matching key in file order.
    ("qwen3_moe_native_pattern", "qwen3_moe_f32", "native",
     dict(target_modules=["q_proj", "o_proj"],
          target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj"],
          rank_pattern={r"layers\.0\.mlp\.experts\.gate_up_proj": 2, "experts.down_proj": 6, "o_proj": 3},
          alpha_pattern={"gate_up_proj": 4, r"layers\.2\.mlp\.experts\.down_proj": 20})),
    ("mixtral_native_pattern", "mixtral_f32", "native",
     dict(target_modules=["v_proj"],
          target_parameters=["mlp.experts.gate_up_proj", "mlp.experts.down_proj", "mlp.gate.weight"],
          rank_pattern={"gate.weight": 2, "gate_up_proj": 6},
          alpha_pattern={r"layers\.1\..*": 2, "down_proj": 16})),
]
MIXED = {
    "qwen3_moe_f32": ["qwen3_moe_native", "__base__", "qwen3_moe_experts_v4", "qwen3_moe_experts_v4"],
    "mixtral_f32": ["mixtral_experts_v4", "mixtral_native", "__base__", "mixtral_experts_v4"],
}
# The all-linear and pattern adapters beside the others: golden_lora/mixed_<key>.json.
MIXED_MORE = {
    "qwen3_moe_f32_more": ("qwen3_moe_f32", ["qwen3_moe_all_linear", "qwen3_moe_native_pattern", "__base__",
                                             "qwen3_moe_native"]),
    "mixtral_f32_more": ("mixtral_f32", ["mixtral_native_pattern", "mixtral_experts_v4", "mixtral_all_linear",
                                         "mixtral_native_pattern"]),
}


class NearTie(Exception):
    pass


def gen_for(name, salt):
    return torch.Generator().manual_seed(zlib.crc32(f"{name}/{salt}".encode()))


def load_base(out, base):
    return AutoModelForCausalLM.from_pretrained(os.path.join(out, "models", base), dtype=torch.float32,
                                                attn_implementation="eager").eval()


def b_std(rank):
    return DELTA_RATIO / ((ALPHA / R) * rank ** 0.5)


@torch.no_grad()
def make_native(out, name, base, kw, salt):
    pm = get_peft_model(load_base(out, base), LoraConfig(r=R, lora_alpha=ALPHA, **kw))
    g = gen_for(name, salt)
    for pname, p in sorted(pm.named_parameters()):
        if ".lora_A." in pname:
            p.copy_(torch.randn(p.shape, generator=g) / p.shape[1] ** 0.5)
        elif ".lora_B." in pname:
            p.copy_(torch.randn(p.shape, generator=g) * b_std(R))
    folder = os.path.join(out, "adapters", name)
    shutil.rmtree(folder, ignore_errors=True)
    pm.save_pretrained(folder)
    os.remove(os.path.join(folder, "README.md"))
    cfg_path = os.path.join(folder, "adapter_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["target_modules"] = sorted(cfg["target_modules"])
    cfg["target_parameters"] = sorted(cfg["target_parameters"])
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def make_v4(out, name, base, kw, salt):
    """Per-expert (transformers 4 / vLLM) layout, written directly."""
    with open(os.path.join(out, "models", base, "config.json")) as f:
        mc = json.load(f)
    g = gen_for(name, salt)
    h, L = mc["hidden_size"], mc["num_hidden_layers"]
    heads, kv, hd = mc["num_attention_heads"], mc["num_key_value_heads"], mc["head_dim"]
    num_e = mc.get("num_experts") or mc["num_local_experts"]
    sd = {}

    def lora(path, out_f, in_f):
        sd[f"base_model.model.{path}.lora_A.weight"] = torch.randn(R, in_f, generator=g) / in_f ** 0.5
        sd[f"base_model.model.{path}.lora_B.weight"] = torch.randn(out_f, R, generator=g) * b_std(R)

    for layer in range(L):
        p = f"model.layers.{layer}"
        if mc["model_type"] == "qwen3_moe":
            lora(f"{p}.self_attn.o_proj", h, heads * hd)
            if layer in mc["mlp_only_layers"]:
                continue
            i = mc["moe_intermediate_size"]
            for e in range(num_e):
                lora(f"{p}.mlp.experts.{e}.gate_proj", i, h)
                lora(f"{p}.mlp.experts.{e}.up_proj", i, h)
                lora(f"{p}.mlp.experts.{e}.down_proj", h, i)
        else:
            i = mc["intermediate_size"]
            lora(f"{p}.self_attn.k_proj", kv * hd, h)
            lora(f"{p}.block_sparse_moe.gate", num_e, h)
            for e in range(num_e):
                lora(f"{p}.block_sparse_moe.experts.{e}.w1", i, h)
                lora(f"{p}.block_sparse_moe.experts.{e}.w3", i, h)
                lora(f"{p}.block_sparse_moe.experts.{e}.w2", h, i)
    folder = os.path.join(out, "adapters", name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    save_file({k: v.contiguous() for k, v in sorted(sd.items())},
              os.path.join(folder, "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = LoraConfig(r=R, lora_alpha=ALPHA, **kw).to_dict()
    cfg = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
    cfg["base_model_name_or_path"] = f"tests/fixtures/models/{base}"
    cfg["peft_type"] = "LORA"
    cfg["task_type"] = "CAUSAL_LM"
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


@torch.no_grad()
def hand_merged(out, name, base):
    """The base with every per-expert (v4) LoRA delta added by hand: what the layout means."""
    m = load_base(out, base)
    sd = load_file(os.path.join(out, "adapters", name, "adapter_model.safetensors"))
    params = dict(m.named_parameters())
    for k in sd:
        if not k.endswith(".lora_A.weight"):
            continue
        path = k[len("base_model.model."):-len(".lora_A.weight")].replace("block_sparse_moe", "mlp")
        delta = (ALPHA / R) * sd[k.replace("lora_A", "lora_B")] @ sd[k]
        parts = path.split(".")
        if ".experts." in path:
            e, leaf, pre = int(parts[-2]), parts[-1], ".".join(parts[:-2])
            inter = params[pre + ".down_proj"].shape[2]
            if leaf in ("gate_proj", "w1"):
                params[pre + ".gate_up_proj"][e, :inter] += delta
            elif leaf in ("up_proj", "w3"):
                params[pre + ".gate_up_proj"][e, inter:] += delta
            else:
                params[pre + ".down_proj"][e] += delta
        else:
            params[path + ".weight"] += delta
    return m


def all_linear_expected(out, base):
    """The modules PEFT 0.21's all-linear adapts on these transformers 5 MoE models: every
    attention projection, and on sparse layers the fused experts and the router; not lm_head, and
    not a dense (mlp_only) layer's gate/up/down_proj."""
    with open(os.path.join(out, "models", base, "config.json")) as f:
        mc = json.load(f)
    want = set()
    for layer in range(mc["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        want |= {f"{p}.self_attn.{n}" for n in ("q_proj", "k_proj", "v_proj", "o_proj")}
        if layer not in mc.get("mlp_only_layers", []):
            want |= {f"{p}.mlp.experts", f"{p}.mlp.experts.base_layer", f"{p}.mlp.gate"}
    return want


@torch.no_grad()
def check_all_linear(out, name, base, prompts, unmerged):
    folder = os.path.join(out, "adapters", name)
    sd = load_file(os.path.join(folder, "adapter_model.safetensors"))
    got = {k[len("base_model.model."):].split(".lora_")[0] for k in sd}
    assert got == all_linear_expected(out, base), (name, sorted(got ^ all_linear_expected(out, base)))
    with open(os.path.join(folder, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["target_modules"] == ["k_proj", "o_proj", "q_proj", "v_proj"], cfg["target_modules"]
    assert cfg["target_parameters"] == ["down_proj", "gate.weight", "gate_up_proj"], cfg["target_parameters"]
    assert cfg["rank_pattern"] == {r".*\.gate_up_proj": 2 * R}, cfg["rank_pattern"]
    assert cfg["alpha_pattern"] == {r".*\.gate_up_proj": 2 * ALPHA}, cfg["alpha_pattern"]
    # The same file with the config as a user writes it ("all-linear", no patterns) loads the same.
    tmp = os.path.join(out, "adapters", f".{name}.string")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp)
    cfg.update(target_modules="all-linear", target_parameters=None, rank_pattern={}, alpha_pattern={})
    with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    pm = PeftModel.from_pretrained(load_base(out, base), tmp).eval()
    again, _, _ = run_all(pm, prompts)
    shutil.rmtree(tmp)
    d = max_delta(again, unmerged)
    assert d == 0, (name, d)


def peft_dir_for(out, name, layout):
    """PEFT 0.21 on transformers 5 drops the experts of a v4 Qwen3-MoE adapter whose target_modules
    is a regex (they load unadapted, silently); the same file with the list of leaf names it
    adapts loads right. The v4 references use that list (loom reads the regex file)."""
    folder = os.path.join(out, "adapters", name)
    if layout != "v4":
        return folder
    tmp = os.path.join(out, "adapters", f".{name}.peft")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp)
    sd = load_file(os.path.join(folder, "adapter_model.safetensors"))
    leaves = sorted({k.split(".lora_")[0].rsplit(".", 1)[-1] for k in sd})
    with open(os.path.join(tmp, "adapter_config.json")) as f:
        cfg = json.load(f)
    cfg["target_modules"] = leaves
    with open(os.path.join(tmp, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    return tmp


@torch.no_grad()
def reference(out, name, base, prompts, salt, layout):
    golden = os.path.join(out, "golden_lora")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pm = PeftModel.from_pretrained(load_base(out, base), peft_dir_for(out, name, layout)).eval()
    bad = [str(w.message) for w in caught if "missing" in str(w.message).lower() or "unexpected" in str(w.message).lower()]
    assert not bad, (name, bad)
    probe = RouterProbe(pm.base_model.model)
    unmerged, ugen, umargin = run_all(pm, prompts)
    probe.close()
    if probe.min_margin < MIN_ROUTER_MARGIN:
        raise NearTie(f"{name}: router top-k margin {probe.min_margin:.3g}")
    if layout == "v4":  # PEFT's conversion (fused, rank 2r, block-diagonal B) == the per-expert sums
        by_hand, _, _ = run_all(hand_merged(out, name, base), prompts[:1])
        d_hand = float((by_hand["prompt_0"] - unmerged["prompt_0"]).abs().max())
        assert d_hand < 1e-4, (name, d_hand)
        shutil.rmtree(os.path.join(out, "adapters", f".{name}.peft"))
    if name.endswith("_all_linear"):
        check_all_linear(out, name, base, prompts, unmerged)
    base_logits = load_file(os.path.join(out, "golden", f"{base}.logits.safetensors"))
    delta_base = max_delta(unmerged, base_logits)
    assert delta_base > 0.5, (name, delta_base)
    merged_model = pm.merge_and_unload().eval()
    merged, mgen, mmargin = run_all(merged_model, prompts)
    d = max_delta(merged, unmerged)
    assert d < 1e-3, (name, d)
    save_file(unmerged, os.path.join(golden, f"{name}.unmerged.safetensors"))
    save_file(merged, os.path.join(golden, f"{name}.merged.safetensors"))
    doc = {"adapter": name, "base": base, "prompts": prompts, "seed": f"crc32('{name}/{salt}')",
           "unmerged": {"greedy": ugen, "min_greedy_margin": umargin},
           "merged": {"greedy": mgen, "min_greedy_margin": mmargin, "max_abs_delta_vs_unmerged": d},
           "max_abs_delta_vs_base": delta_base,
           "routing": {"min_topk_margin": probe.min_margin, "expert_loads": probe.loads}}
    with open(os.path.join(golden, f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")
    print(f"{name:22s} vs base {delta_base:6.3f}  merged-unmerged {d:.2g}  router margin "
          f"{probe.min_margin:.2g}  greedy margin {min(umargin, mmargin):.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", help="adapter names to (re)make (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    os.makedirs(os.path.join(args.out, "golden_lora"), exist_ok=True)
    prompts = make_prompts()
    for name, base, layout, kw in ADAPTERS:
        if args.only and name not in args.only:
            continue
        for salt in range(SALTS.get(name, 0), 16):  # the first salt without a routing near-tie
            (make_native if layout == "native" else make_v4)(args.out, name, base, kw, salt)
            try:
                reference(args.out, name, base, prompts, salt, layout)
                break
            except NearTie as e:
                print(f"  {e}; next salt")
        else:
            raise RuntimeError(f"{name}: no salt without a routing near-tie")
    mixed = {base: (base, assign) for base, assign in MIXED.items()}
    mixed.update(MIXED_MORE)
    for key, (base, assign) in mixed.items():
        doc = {"base": base, "prompts": prompts, "adapter_names": assign,
               "reference": "row i = golden_lora/<adapter>.unmerged.safetensors prompt_i "
                            "(golden/<base>.logits.safetensors for __base__)"}
        with open(os.path.join(args.out, "golden_lora", f"mixed_{key}.json"), "w") as f:
            json.dump(doc, f, indent=None)
            f.write("\n")


if __name__ == "__main__":
    main()
