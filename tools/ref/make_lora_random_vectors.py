# Random PEFT LoRA configs on the tiny fixture models, saved by PEFT, with PEFT's own outputs: loom's differential vectors.
"""Randomized LoRA differential vectors: loom against PEFT on adapters no one picked by hand.

Usage (after make_models*.py have written tests/fixtures/models):
    .venv-ref/bin/python tools/ref/make_lora_random_vectors.py --out tests/fixtures --cases 120

Each case draws a base model (dense: llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, phi4mini,
f32 and some bf16; MoE: mixtral, qwen3_moe on their attention and router) and a LoraConfig from the
space SPEC-adapters.md section 3 accepts: target_modules as a list (leaf names, dotted suffixes, full
paths, sometimes embed_tokens / lm_head), a regex string or "all-linear"; exclude_modules (list or
regex); layers_to_transform (int or list, with or without layers_pattern); r 1-16; integer or
fractional lora_alpha; use_rslora; use_dora; lora_bias; rank_pattern / alpha_pattern with leaf,
anchored-path and regex keys; file dtype f32, f16 or bf16. PEFT creates the adapter, its A and B are
drawn at random (||scale*B@A|| = 0.5 ||W|| per module, so every adapted module moves the output),
PEFT saves it, and the reference is PeftModel.from_pretrained on the saved files (F16/BF16 values as
rounded): prompt logits, greedy tokens with their top-1 margin, and PEFT's merge_and_unload logits.
A draw PEFT refuses (a target that matches nothing, say) is drawn again; the refusals are counted.

Writes
    <out>/lora_random/cases.json        per case: name, base, config as saved, prompt, greedy,
                                        min_greedy_margin, merged_greedy, max |adapter - base|
    <out>/lora_random/<name>/adapter_config.json, adapter_model.safetensors
    <out>/lora_random/<name>.logits.safetensors   F32 unmerged [len, vocab], merged [len, vocab]
    <out>/lora_random/VERSIONS.txt
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import sys
import warnings

import torch
from torch import nn

import peft
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_adapters import (DTYPES, lora_layers, load_base, quiet, reinit_adapter_,  # noqa: E402
                           rewrite_config_sorted, save_adapter)
from make_models import VOCAB, prompt_logits  # noqa: E402

# base folder -> weight of the draw
BASES = {
    "llama_f32": 3, "llama_bf16": 2, "mistral_f32": 2, "qwen2_f32": 3, "qwen2_bf16": 3,
    "qwen3_f32": 3, "qwen3_bf16": 2, "gemma2_f32": 2, "gemma3_f32": 2, "phi3_f32": 2,
    "phi4mini_f32": 1, "mixtral_f32": 2, "qwen3_moe_f32": 2,
}

# What the committed draw must contain: the kinds of case the first runs found loom wrong on
# (cases.json must have one of each; --seed is moved until it does).
COVERAGE = {
    "ensure_weight_tying on a tied model (its head LoRA was refused as untargeted)":
        lambda c: c["config"].get("ensure_weight_tying"),
    "a MoE base (SiLU tails were not batch-invariant at an expert FFN of 24)":
        lambda c: c["base"] == "qwen3_moe_f32",
    "lora_bias merged on a bf16 base with biases (the merged bias kept f32)":
        lambda c: c["base"] == "qwen2_bf16" and c["config"].get("lora_bias"),
    "layers_to_transform 0 with layers_pattern (refused as unset)":
        lambda c: c["config"].get("layers_to_transform") == 0 and "layers_pattern" in c["config"],
    "DoRA on an embedding (refused)":
        lambda c: c["config"].get("use_dora") and "embed_tokens" in str(c["config"]["target_modules"]),
    "embedding LoRA on a tied model, merged (PEFT's merge writes the shared table)":
        lambda c: c["base"].startswith(("qwen2", "gemma")) and "embed_tokens" in str(c["config"]["target_modules"]),
}
N_GEN = 6
DELTA_MIN = 0.05  # a case whose adapter moves no logit by this much is drawn again


def linear_paths(model):
    """Module paths PEFT can put a LoRA layer on: nn.Linear (not the head) and the input embedding."""
    head = model.get_output_embeddings()
    lin, emb = [], []
    for path, mod in model.named_modules():
        if isinstance(mod, nn.Linear) and mod is not head:
            lin.append(path)
        elif isinstance(mod, nn.Embedding) and mod is model.get_input_embeddings():
            emb.append(path)
    return lin, emb


def layer_of(path):
    m = re.search(r"\.layers\.(\d+)\.", path)
    return int(m.group(1)) if m else None


def regex_for(rng, leaves, paths):
    """A regex target_modules / exclude_modules over module paths (must match the whole path)."""
    kind = rng.randrange(3)
    pick = sorted(rng.sample(leaves, rng.randint(1, min(3, len(leaves)))))
    if kind == 0:
        return r".*\.(" + "|".join(map(re.escape, pick)) + r")$"
    if kind == 1:
        layers = sorted({layer_of(p) for p in paths if layer_of(p) is not None})
        ls = sorted(rng.sample(layers, rng.randint(1, len(layers))))
        return r"model\.layers\.(" + "|".join(map(str, ls)) + r")\..*\.(" + "|".join(map(re.escape, pick)) + ")"
    return r".*(" + "|".join(p[: max(2, len(p) - rng.randint(0, 3))] for p in pick) + r").*"


def pattern_keys(rng, leaves, paths):
    """rank_pattern / alpha_pattern keys: leaf names, anchored full paths, and regex fragments."""
    keys = set()
    for _ in range(rng.randint(1, 3)):
        kind = rng.randrange(4)
        if kind == 0:
            keys.add(rng.choice(leaves))
        elif kind == 1:
            keys.add("^" + rng.choice(paths))
        elif kind == 2:
            p = rng.choice(paths)
            keys.add(r"layers\.%d\.\w+\.%s" % (layer_of(p) or 0, p.rsplit(".", 1)[1]))
        else:
            keys.add(rng.choice(leaves)[:2] + r"\w*")
    return sorted(keys)  # PEFT saves sort_keys=True: draw the dicts in that order


def draw_config(rng, model):
    lin, emb = linear_paths(model)
    leaves = sorted({p.rsplit(".", 1)[1] for p in lin})
    kw = {}
    form = rng.random()
    if form < 0.45:
        tm = rng.sample(leaves, rng.randint(1, len(leaves)))
        for i, t in enumerate(tm):  # some entries as dotted suffixes or full paths
            full = [p for p in lin if p.endswith("." + t)]
            if rng.random() < 0.15:
                tm[i] = ".".join(rng.choice(full).split(".")[-2:])
            elif rng.random() < 0.1:
                tm[i] = rng.choice(full)
        if rng.random() < 0.12 and emb:
            tm.append("embed_tokens")
        if rng.random() < 0.12:
            tm.append("lm_head")
        kw["target_modules"] = sorted(set(tm))
        # PEFT 0.18+'s ensure_weight_tying on a tied model: the head adapted too, its LoRA tied
        # to the embedding's (no random draw, so the seeds keep their cases).
        if ("embed_tokens" in kw["target_modules"] and model.config.tie_word_embeddings
                and len(kw["target_modules"]) % 2 == 0):
            kw["ensure_weight_tying"] = True
    elif form < 0.7:
        kw["target_modules"] = regex_for(rng, leaves, lin)
    else:
        kw["target_modules"] = "all-linear"
    if rng.random() < 0.2:
        if rng.random() < 0.5:
            ex = rng.sample(leaves, 1) + ([rng.choice(lin)] if rng.random() < 0.5 else [])
            kw["exclude_modules"] = sorted(ex)
        else:
            kw["exclude_modules"] = regex_for(rng, leaves, lin)
    if isinstance(kw["target_modules"], list) and rng.random() < 0.25:
        layers = sorted({layer_of(p) for p in lin if layer_of(p) is not None})
        lt = sorted(rng.sample(layers, 1 if rng.random() < 0.4 else rng.randint(1, len(layers))))
        kw["layers_to_transform"] = lt[0] if len(lt) == 1 and rng.random() < 0.7 else lt
        if rng.random() < 0.5:
            kw["layers_pattern"] = "layers" if rng.random() < 0.5 else ["layers"]
    kw["r"] = rng.randint(1, 16)
    kw["lora_alpha"] = rng.choice([rng.randint(1, 64), round(rng.uniform(0.5, 40), 2)])
    kw["use_rslora"] = rng.random() < 0.3
    kw["use_dora"] = rng.random() < 0.2
    kw["lora_bias"] = not kw["use_dora"] and rng.random() < 0.15
    if rng.random() < 0.3:
        kw["rank_pattern"] = {k: rng.randint(1, 16) for k in pattern_keys(rng, leaves, lin)}
    if rng.random() < 0.3:
        kw["alpha_pattern"] = {k: rng.choice([rng.randint(1, 64), round(rng.uniform(0.5, 40), 2)])
                               for k in pattern_keys(rng, leaves, lin)}
    return kw


@torch.no_grad()
def greedy(model, ids):
    seq, gen, margin = list(ids), [], float("inf")
    for _ in range(N_GEN):
        row = prompt_logits(model, seq)[-1]
        top2 = torch.topk(row, 2).values
        margin = min(margin, float(top2[0] - top2[1]))
        tok = int(torch.argmax(row))
        gen.append(tok)
        seq.append(tok)
    return gen, margin


@torch.no_grad()
def merged_model(pm, base):
    """PEFT's merge_and_unload, untying a targeted tied head and giving lora_bias a zero base bias
    first (as make_adapters.py does); bf16 bases: merged weights rounded to bf16, as loom merges."""
    inner = pm.base_model.model
    modules = dict(lora_layers(pm))
    # PEFT's merge of either side of a tied pair writes the shared table (both sides change);
    # unmerged, and in loom, only the adapted side does: untie first (make_adapters.py's note).
    tied = (inner.get_input_embeddings().weight, inner.get_output_embeddings().weight)
    if inner.config.tie_word_embeddings and any(m.get_base_layer().weight is w for m in modules.values()
                                                for w in tied):
        head = inner.lm_head
        head = head.get_base_layer() if hasattr(head, "get_base_layer") else head
        head.weight = nn.Parameter(head.weight.detach().clone())
        inner.config.tie_word_embeddings = False
    for _, mod in modules.items():
        b = mod.get_base_layer()
        if mod.lora_bias.get("default") and getattr(b, "bias", None) is None:
            b.bias = nn.Parameter(torch.zeros(b.out_features))
    m, _ = quiet(pm.merge_and_unload)
    if base.endswith("_bf16"):
        for p in m.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return m.eval()


@torch.no_grad()
def make_case(out, name, rng, counts):
    base = rng.choices(list(BASES), weights=list(BASES.values()))[0]
    model = load_base(out, base)
    kw = draw_config(rng, model)
    dtype_name = rng.choice(["f32", "f16", "bf16"])
    folder = os.path.join(out, "lora_random", name)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        cfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **kw)
        pm, _ = quiet(get_peft_model, model, cfg)
    except Exception as e:  # PEFT refuses the draw: count it, draw again
        counts[type(e).__name__ + ": " + str(e).split("\n")[0][:70]] = counts.get(
            type(e).__name__ + ": " + str(e).split("\n")[0][:70], 0) + 1
        return None
    odd = [p for p, m in lora_layers(pm) if not isinstance(m.get_base_layer(), (nn.Linear, nn.Embedding))]
    if odd:  # e.g. a regex that names a fused-experts module: target_parameters' ground, not drawn here
        counts["non-linear module targeted"] = counts.get("non-linear module targeted", 0) + 1
        return None
    reinit_adapter_(pm, rng.randrange(1 << 30))
    log = {}
    save_adapter(pm, folder, dtype_name, log, "w", save_embedding_layers=False)
    cfg = rewrite_config_sorted(folder)
    del pm

    prompt = [rng.randrange(3, VOCAB) for _ in range(rng.randint(3, 10))]
    ref, _ = quiet(PeftModel.from_pretrained, load_base(out, base), folder)
    ref.eval()
    n_modules = len(dict(lora_layers(ref)))
    unmerged = prompt_logits(ref, prompt).contiguous()
    gen, margin = greedy(ref, prompt)
    base_logits = prompt_logits(load_base(out, base).eval(), prompt)
    delta = float((unmerged - base_logits).abs().max())
    if delta < DELTA_MIN:
        counts["adapter barely moves the logits"] = counts.get("adapter barely moves the logits", 0) + 1
        shutil.rmtree(folder)
        return None
    merged = merged_model(ref, base)
    merged_logits = prompt_logits(merged, prompt).contiguous()
    merged_gen, merged_margin = greedy(merged, prompt)
    save_file({"unmerged": unmerged, "merged": merged_logits},
              os.path.join(out, "lora_random", f"{name}.logits.safetensors"))
    keep = ("target_modules", "exclude_modules", "layers_to_transform", "layers_pattern", "r",
            "lora_alpha", "use_rslora", "use_dora", "lora_bias", "rank_pattern", "alpha_pattern",
            "ensure_weight_tying")
    return {"name": name, "base": base, "file_dtype": dtype_name,
            "config": {k: cfg[k] for k in keep if cfg.get(k) is not None and cfg[k] is not False and cfg[k] != {}},
            "modules": n_modules, "prompt": prompt,
            "greedy": gen, "min_greedy_margin": margin, "merged_greedy": merged_gen,
            "merged_min_greedy_margin": merged_margin, "max_abs_delta_vs_base": delta}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--cases", type=int, default=80)
    ap.add_argument("--seed", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.simplefilter("ignore")
    root = os.path.join(args.out, "lora_random")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    rng = random.Random(args.seed)
    cases, counts, draws = [], {}, 0
    while len(cases) < args.cases:
        draws += 1
        c = make_case(args.out, f"case_{len(cases):03d}", rng, counts)
        if c:
            cases.append(c)
            print(f"{c['name']} {c['base']:13s} {c['file_dtype']:4s} modules {c['modules']:3d} "
                  f"delta {c['max_abs_delta_vs_base']:.3f} margin {c['min_greedy_margin']:.4f} "
                  f"{json.dumps(c['config'])[:150]}", flush=True)
    with open(os.path.join(root, "cases.json"), "w") as f:
        json.dump({"seed": args.seed, "draws": draws, "refused_draws": counts, "cases": cases}, f, indent=None)
        f.write("\n")
    with open(os.path.join(root, "VERSIONS.txt"), "w") as f:
        f.write(f"python {platform.python_version()}\ntorch {torch.__version__}\n"
                f"transformers {transformers.__version__}\npeft {peft.__version__}\n")
    print(f"{len(cases)} cases from {draws} draws; refused: {counts}")
    missing = [k for k, f in COVERAGE.items() if not any(f(c) for c in cases)]
    if missing:
        sys.exit(f"seed {args.seed}: no case of {missing}; try another --seed")


if __name__ == "__main__":
    main()
