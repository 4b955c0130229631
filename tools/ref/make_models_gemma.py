# Builds tiny random-weight Gemma 2 / Gemma 3 (text) HF models (f32+bf16) and their golden outputs for loom tests.
"""Gemma reference-fixture generator for loom (same formats as make_models.py).

Usage:
    .venv-ref/bin/python tools/ref/make_models_gemma.py --out tests/fixtures

Writes <out>/models/gemma{2,3}_{f32,bf16}/ and <out>/golden/gemma{2,3}_{f32,bf16}.{json,logits.safetensors,
greedy.safetensors}, on the prompts of <out>/golden/prompts.json (written by make_models.py).

Every Gemma feature that changes the math is on: √hidden embedding scale, (1 + w) RMSNorm with
non-trivial weights, four norms per layer, GeGLU (gelu_pytorch_tanh), attention and final logit
soft-capping (caps small enough to bite; Gemma 3's attn_logit_softcapping is set too, and
transformers 5.24 ignores it there), sliding windows shorter than the prompts (prompts up to
17 tokens + 32 generated) on alternating layers, query_pre_attn_scalar != head_dim, head_dim 32
!= hidden/heads, tied embeddings; Gemma 3 adds q/k norms and distinct local/global RoPE thetas with
linear RoPE scaling on the global layers. verify() checks that each feature moves the logits.

gemma2_gelu_f32 (--variants): gemma2_f32's weights with hidden_activation "gelu" (and a stray
hidden_act "gelu_pytorch_tanh"). transformers 5.24's Gemma2MLP is ACT2FN[config.hidden_activation],
so "gelu" is the exact erf GELU there (only GemmaConfig, Gemma 1, remaps a legacy "gelu" to tanh)
and hidden_act is never read; verify_variants() asserts both and that the logits differ from
gemma2_f32's.
"""

import argparse
import json
import os

import torch
from torch import nn
from transformers import AutoModelForCausalLM, Gemma2Config, Gemma3TextConfig

from make_models import N_GEN, VOCAB, build_one, prompt_logits  # same dir (sys.path[0])
import make_models

ARCH_SEEDS = {"gemma2": 501, "gemma3": 601}
POST_NORM_SCALE = 5.0

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,  # √64 = 8 is exact in bf16: the f32 reference and a bf16 model agree on it
    intermediate_size=128,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    hidden_activation="gelu_pytorch_tanh",
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    query_pre_attn_scalar=24,
)


def make_config(arch):
    if arch == "gemma2":
        # layer_types default: sliding, full, sliding, full
        return Gemma2Config(
            **COMMON,
            sliding_window=4,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=5.0,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if arch == "gemma3":
        return Gemma3TextConfig(
            **COMMON,
            sliding_window=6,
            sliding_window_pattern=3,  # layer_types: sliding, sliding, full, sliding
            attn_logit_softcapping=3.0,
            final_logit_softcapping=6.0,
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
            },
        )
    raise ValueError(arch)


# f32-only variants: name -> (arch whose config and seed they start from, config overrides).
VARIANTS = {
    "gemma2_gelu": ("gemma2", dict(hidden_activation="gelu", hidden_act="gelu_pytorch_tanh")),
}

_llama_reinit = make_models.reinit_


@torch.no_grad()
def reinit_gemma_(model, seed):
    """make_models.reinit_, then every Gemma RMSNorm weight minus 1: (1 + w) gets the Llama-style
    scale N(1, 0.1) (final norm ×3 with the tied head) that make_models gives its models, and the
    post-attention / post-feedforward norms ×POST_NORM_SCALE."""
    _llama_reinit(model, seed)
    if "Gemma" not in type(model).__name__:
        return
    for mname, mod in model.named_modules():
        if type(mod).__name__.endswith("RMSNorm"):
            mod.weight.sub_(1.0)
            # Block outputs ×5 so that the residual is not dominated by the token's own
            # embedding, which the tied head would copy (greedy repeating one token).
            if mname.endswith(("post_attention_layernorm", "post_feedforward_layernorm")):
                mod.weight.copy_((1.0 + mod.weight) * POST_NORM_SCALE - 1.0)


def make_variant_config(name):
    arch, overrides = VARIANTS[name]
    cfg = make_config(arch)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def patch_make_models():
    make_models.ARCH_SEEDS.update(ARCH_SEEDS)
    make_models.ARCH_SEEDS.update({name: ARCH_SEEDS[arch] for name, (arch, _) in VARIANTS.items()})
    make_models.reinit_ = reinit_gemma_
    base_make_config = make_models.make_config
    make_models.make_config = lambda arch: (make_config(arch) if arch in ARCH_SEEDS else
                                            make_variant_config(arch) if arch in VARIANTS else
                                            base_make_config(arch))


@torch.no_grad()
def verify_variants(out, prompts):
    from safetensors.torch import load_file
    for name, (arch, overrides) in VARIANTS.items():
        m = load(out, f"{name}_f32")
        with open(os.path.join(out, "models", f"{name}_f32", "config.json")) as f:
            saved = json.load(f)
        for k, v in overrides.items():
            assert saved.get(k) == v, (name, k, saved.get(k))
        acts = {type(layer.mlp.act_fn).__name__ for layer in m.model.layers}
        assert acts == {"GELUActivation"}, (name, acts)  # ACT2FN["gelu"]: nn.functional.gelu (erf)
        assert all(layer.mlp.act_fn.act is torch.nn.functional.gelu for layer in m.model.layers), name
        ref = load_file(os.path.join(out, "golden", f"{name}_f32.logits.safetensors"))
        base = load_file(os.path.join(out, "golden", f"{arch}_f32.logits.safetensors"))
        for i, ids in enumerate(prompts):
            d = float((prompt_logits(m, ids) - ref[f"prompt_{i}"]).abs().max())
            assert d <= 1e-4, (name, i, d)
        d = max(float((ref[k] - base[k]).abs().max()) for k in ref)
        assert d > 1e-3, (name, "logits barely differ from the tanh model", d)
        print(f"  verify {name}_f32: erf GELU (hidden_act ignored); max logit change vs {arch}_f32 {d:.3g}")


def load(out, name):
    return AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "models", name), dtype=torch.float32, attn_implementation="eager").eval()


@torch.no_grad()
def verify(out, prompts, names):
    """Reload each folder: logits equal the dump, KV-cache generate() equals the greedy dump; then
    switch each Gemma feature off in turn and check that the logits move."""
    from safetensors.torch import load_file
    for name in names:
        m = load(out, name)
        ref = load_file(os.path.join(out, "golden", f"{name}.logits.safetensors"))
        with open(os.path.join(out, "golden", f"{name}.json")) as f:
            doc = json.load(f)
        for i, ids in enumerate(prompts):
            d = float((prompt_logits(m, ids) - ref[f"prompt_{i}"]).abs().max())
            assert d <= 1e-4, (name, i, d)
            o = m.generate(torch.tensor([ids]), max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False,
                           eos_token_id=None, pad_token_id=0)
            assert o[0, len(ids):].tolist() == doc["greedy"][i], (name, i, "generate() != greedy")
        print(f"  verify {name}: reload + KV-cache generate OK")

    for arch in ARCH_SEEDS:
        name = f"{arch}_f32"
        ids = prompts[2]  # 17 tokens: longer than both windows
        base = prompt_logits(load(out, name), ids)

        def moved(label, edit, expect_change=True):
            m = load(out, name)
            edit(m)
            d = float((prompt_logits(m, ids) - base).abs().max())
            print(f"  {arch}: without {label}: max logit change {d:.3g}")
            assert (d > 1e-2) if expect_change else (d == 0), (arch, label, d)

        def no_window(m):
            for layer in m.model.layers:
                layer.self_attn.sliding_window = None
            m.config.layer_types = ["full_attention"] * len(m.config.layer_types)

        def no_attn_cap(m):
            for layer in m.model.layers:
                layer.self_attn.attn_logit_softcapping = None

        def no_final_cap(m):
            m.config.final_logit_softcapping = None

        def scalar_is_head_dim(m):
            for layer in m.model.layers:
                layer.self_attn.scaling = m.config.head_dim ** -0.5

        def no_embed_scale(m):
            m.model.embed_tokens.embed_scale.fill_(1.0)

        moved("sliding window", no_window)
        # transformers 5.24's Gemma3Attention never passes attn_logit_softcapping to the attention
        # function: the config value has no effect there (loom ignores it for Gemma 3 too).
        moved("attention soft-capping", no_attn_cap, expect_change=arch != "gemma3")
        moved("final soft-capping", no_final_cap)
        moved("query_pre_attn_scalar", scalar_is_head_dim)
        moved("embedding scale", no_embed_scale)
        if arch == "gemma3":
            def same_rope(m):
                rot = m.model.rotary_emb
                rot.sliding_attention_inv_freq.copy_(rot.full_attention_inv_freq)
            moved("local RoPE theta", same_rope)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--no-verify", action="store_true")
    ap.add_argument("--verify-only", action="store_true", help="check the written fixtures only")
    ap.add_argument("--variants", action="store_true", help="write (and check) only the VARIANTS fixtures")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    patch_make_models()
    with open(os.path.join(args.out, "golden", "prompts.json")) as f:
        prompts = json.load(f)["prompts"]
    summary, names = [], []
    if args.variants:
        for name in VARIANTS:
            if not args.verify_only:
                build_one(name, "f32", args.out, prompts, summary)
        for s in summary:
            print(f"{s['name']:16s} logits std {s['logits_std']:6.3f}  min top1-top2 margin {s['min_margin']:.4f}")
        verify_variants(args.out, prompts)
        return
    for arch in ARCH_SEEDS:
        for dn in ("f32", "bf16"):
            if not args.verify_only:
                build_one(arch, dn, args.out, prompts, summary)
            names.append(f"{arch}_{dn}")
    for s in summary:
        print(f"{s['name']:14s} logits std {s['logits_std']:6.3f}  distinct greedy tokens/prompt {s['distinct_greedy']}"
              f"  min top1-top2 margin {s['min_margin']:.4f}")
        print(f"{'':14s} greedy[0] = {s['greedy0']}")
    if not args.no_verify:
        verify(args.out, prompts, names)


if __name__ == "__main__":
    main()
