# Builds tiny random Phi3ForCausalLM models (longrope past the short context, partial rotary, tied) and their goldens.
"""Phi-3 reference fixtures for loom (same conventions and golden format as make_models.py).

Usage:
    .venv-ref/bin/python tools/ref/make_models_phi3.py --out tests/fixtures

Writes models/<name>/ and golden/<name>.{json,logits.safetensors,greedy.safetensors} for
    phi3_{f32,bf16}     Phi-3.5-mini style: longrope (original 16, max 64), full rotary,
                        sliding_window 12, untied
    phi4mini_{f32,bf16} Phi-4-mini style: longrope, partial_rotary_factor 0.75 (rotary dim 12 of
                        head_dim 16), tied embeddings, no sliding window
on the shared prompts (lengths 5, 11, 17, 3; golden/prompts.json): prompt 2 alone is longer than
original_max_position_embeddings and every prompt + 32 greedy tokens runs past it.

Goldens are full forwards (make_models.greedy re-runs the whole sequence each step), so a sequence
uses the short factors while it has at most 16 tokens and the long ones for every position
beyond. transformers' KV-cache generate() agrees: Phi3ForCausalLM.prepare_inputs_for_generation
drops the cache at the crossing and recomputes it (loom's engine does the same); verify() checks it.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, Phi3Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_models as mm  # noqa: E402

ORIGINAL = 16
SEEDS = {"phi3": 511, "phi4mini": 612}


def factors(seed, n):
    """Deterministic short (≈1) and long (growing to ~8) LongRoPE factor lists of length n."""
    rng = np.random.RandomState(seed)
    short = [round(float(x), 4) for x in 1.0 + 0.2 * rng.rand(n)]
    long = [round(float(x), 4) for x in np.linspace(1.0, 8.0, n) * (1.0 + 0.1 * rng.rand(n))]
    return short, long


def make_config(name):
    common = dict(mm.COMMON)
    common["max_position_embeddings"] = 64
    head_dim = common["hidden_size"] // common["num_attention_heads"]
    if name == "phi3":
        short, long = factors(7, head_dim // 2)
        return Phi3Config(
            **common, rms_norm_eps=1e-5, tie_word_embeddings=False, sliding_window=12,
            original_max_position_embeddings=ORIGINAL,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "short_factor": short, "long_factor": long},
        )
    if name == "phi4mini":
        rotary = int(head_dim * 0.75)
        short, long = factors(8, rotary // 2)
        return Phi3Config(
            **common, rms_norm_eps=1e-5, tie_word_embeddings=True, sliding_window=None,
            original_max_position_embeddings=ORIGINAL, partial_rotary_factor=0.75,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.75,
                             "short_factor": short, "long_factor": long},
        )
    raise ValueError(name)


def build_one(arch, dn, out, prompts, summary):
    # make_models.build_one with this file's configs and seeds.
    saved_cfg, saved_seeds = mm.make_config, dict(mm.ARCH_SEEDS)
    mm.make_config = make_config
    mm.ARCH_SEEDS.update(SEEDS)
    try:
        return mm.build_one(arch, dn, out, prompts, summary)
    finally:
        mm.make_config = saved_cfg
        mm.ARCH_SEEDS.clear()
        mm.ARCH_SEEDS.update(saved_seeds)


@torch.no_grad()
def verify(out, prompts, names):
    for name in names:
        folder = os.path.join(out, "models", name)
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
        ref = load_file(os.path.join(out, "golden", f"{name}.logits.safetensors"))
        gref = load_file(os.path.join(out, "golden", f"{name}.greedy.safetensors"))
        doc = json.load(open(os.path.join(out, "golden", f"{name}.json")))
        worst = 0.0
        for i, ids in enumerate(prompts):
            d = float((mm.prompt_logits(m, ids) - ref[f"prompt_{i}"]).abs().max())
            assert d <= 1e-4, (name, i, d)
            o = m.generate(torch.tensor([ids]), max_new_tokens=mm.N_GEN, min_new_tokens=mm.N_GEN,
                           do_sample=False, eos_token_id=None, pad_token_id=0, output_scores=True,
                           return_dict_in_generate=True)
            sc = torch.stack([s[0] for s in o.scores]).float()
            assert o.sequences[0, len(ids):].tolist() == doc["greedy"][i], (name, i)
            worst = max(worst, float((sc - gref[f"prompt_{i}"]).abs().max()))
            assert worst <= 1e-3, (name, i, worst)
            assert len(doc["greedy"][i]) == mm.N_GEN
        print(f"  verify {name}: reload OK; KV-cache generate (recomputed at the crossing) = greedy dump,"
              f" worst step-logit diff {worst:.3g}")

    # longrope matters: the long set changes prompt 2 (17 tokens > 16), the short set is what
    # prompt 0 (5 tokens) uses; partial rotary leaves the last 4 dims of each head unrotated.
    m = AutoModelForCausalLM.from_pretrained(os.path.join(out, "models", "phi3_f32"),
                                             dtype=torch.float32, attn_implementation="eager").eval()
    a = mm.prompt_logits(m, prompts[2])
    cfg = m.config
    cfg.rope_parameters = dict(cfg.rope_parameters, long_factor=cfg.rope_parameters["short_factor"])
    m2 = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32).eval()
    m2.load_state_dict(m.state_dict())
    b = mm.prompt_logits(m2, prompts[2])
    d = float((a - b).abs().max())
    assert d > 1e-2, d
    print(f"  longrope long factors effective on the 17-token prompt: max diff {d:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    os.makedirs(os.path.join(args.out, "models"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "golden"), exist_ok=True)
    prompts = mm.make_prompts()
    summary, names = [], []
    for arch in ("phi3", "phi4mini"):
        for dn in ("f32", "bf16"):
            build_one(arch, dn, args.out, prompts, summary)
            names.append(f"{arch}_{dn}")
    for s in summary:
        print(f"{s['name']:14s} logits std {s['logits_std']:6.3f}  distinct greedy {s['distinct_greedy']}"
              f"  min top1-top2 margin {s['min_margin']:.4f}")
    if not args.no_verify:
        verify(args.out, prompts, names)


if __name__ == "__main__":
    main()
