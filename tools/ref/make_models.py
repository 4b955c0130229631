# Builds tiny random-weight HF models (llama/mistral/qwen2/qwen3, f32+bf16) and dumps golden reference outputs for loom tests.
"""Reference-fixture generator for loom.

Usage:
    /work/refenv/bin/python tools/ref/make_models.py --out tests/fixtures

Writes
    <out>/models/<arch>_<dtype>/       config.json, generation_config.json, *.safetensors
    <out>/golden/<name>.json           prompts, greedy ids, top-5 logprobs per greedy step
    <out>/golden/<name>.logits.safetensors   F32 prompt_<i> [len_i, vocab]: full-prompt logits
    <out>/golden/<name>.greedy.safetensors   F32 prompt_<i> [32, vocab]: logits that produced greedy token j
    <out>/golden/prompts.json          the 4 prompts (same for every model)
    <out>/golden/VERSIONS.txt          library versions used

Everything is deterministic (fixed seeds, CPU, eager attention, float32 reference math).
"""

import argparse
import copy
import json
import os
import platform
import shutil

import numpy as np
import torch
from torch import nn

import safetensors
import transformers
from safetensors import safe_open
from safetensors.torch import save_file, load_file
from transformers import (
    AutoModelForCausalLM,
    GenerationConfig,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

VOCAB = 256
N_GEN = 32
TOP_K = 5
LOGIT_SCALE = 3.0
PROMPT_LENS = [5, 11, 17, 3]
PROMPT_SEED = 1234
# Seeds for the weights (shared by the f32 and bf16 variant of an arch). qwen2/qwen3 seeds were
# picked from a small scan so that greedy continuations are varied (tied qwen2 tends to lock into
# repeating one token for many seeds).
ARCH_SEEDS = {"llama": 101, "mistral": 202, "qwen2": 306, "qwen3": 405}

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=None,
    hidden_act="silu",
)


def make_config(arch):
    if arch == "llama":
        return LlamaConfig(
            **COMMON,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            attention_bias=False,
            mlp_bias=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
    if arch == "mistral":
        return MistralConfig(
            **COMMON,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=8,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if arch == "qwen2":
        return Qwen2Config(
            **COMMON,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    if arch == "qwen3":
        return Qwen3Config(
            **COMMON,
            head_dim=32,
            rms_norm_eps=1e-6,
            tie_word_embeddings=False,
            attention_bias=False,
            use_sliding_window=False,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        )
    raise ValueError(arch)


@torch.no_grad()
def reinit_(model, seed):
    """Re-initialise all parameters so activations/logits are O(1) instead of near-uniform."""
    g = torch.Generator().manual_seed(seed)
    seen = set()

    def normal_(t, mean, std):
        t.copy_(torch.randn(t.shape, generator=g, dtype=torch.float32) * std + mean)

    for mname, mod in model.named_modules():
        if isinstance(mod, nn.Embedding):
            if id(mod.weight) not in seen:
                # std 1 normally; with tied embeddings the same matrix is the lm_head, so use
                # 1/sqrt(hidden) there (otherwise logits std ~8 and greedy just copies the input).
                tied = model.config.tie_word_embeddings
                normal_(mod.weight, 0.0, 1.0 / mod.embedding_dim ** 0.5 if tied else 1.0)
                seen.add(id(mod.weight))
        elif isinstance(mod, nn.Linear):
            if id(mod.weight) not in seen:  # tied lm_head shares embed_tokens.weight
                normal_(mod.weight, 0.0, 1.0 / mod.in_features ** 0.5)
                seen.add(id(mod.weight))
            if mod.bias is not None:
                normal_(mod.bias, 0.0, 0.1)
                seen.add(id(mod.bias))
        elif type(mod).__name__.endswith("RMSNorm"):
            normal_(mod.weight, 1.0, 0.1)
            seen.add(id(mod.weight))
    for pname, p in model.named_parameters():
        if id(p) not in seen:
            raise RuntimeError(f"parameter {pname} was not re-initialised")
    # Sharpen the output distribution (logits std ~3 instead of ~1) so greedy top-1/top-2 margins
    # are comfortably above float32 accumulation noise. A positive scale of the last linear map
    # does not change any argmax, only margins/logprobs.
    if model.config.tie_word_embeddings:
        model.model.norm.weight.mul_(LOGIT_SCALE)  # lm_head is the embedding; scale the final norm
    else:
        model.lm_head.weight.mul_(LOGIT_SCALE)


@torch.no_grad()
def prompt_logits(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    return model(input_ids=x).logits[0].to(torch.float32)


@torch.no_grad()
def greedy(model, ids):
    """Greedy decode N_GEN tokens by re-running the full sequence each step (no eos stop)."""
    seq = list(ids)
    gen, rows, tops = [], [], []
    for _ in range(N_GEN):
        row = prompt_logits(model, seq)[-1]
        lp = torch.log_softmax(row, dim=-1)
        tok = int(torch.argmax(row).item())
        v, i = torch.topk(lp, TOP_K, sorted=True)
        tops.append([[int(a), float(b)] for a, b in zip(i.tolist(), v.tolist())])
        rows.append(row.clone())
        gen.append(tok)
        seq.append(tok)
    return gen, torch.stack(rows), tops


def make_prompts():
    rng = np.random.RandomState(PROMPT_SEED)
    return [[int(t) for t in rng.randint(3, VOCAB, size=n)] for n in PROMPT_LENS]


def save_model(model, folder, dtype_name, shard):
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    sd = model.state_dict()
    total_bytes = sum(t.numel() for n, t in sd.items() if n != "lm_head.weight" or not model.config.tie_word_embeddings)
    total_bytes *= 4 if dtype_name == "f32" else 2
    kwargs = {}
    if shard:
        # a bit more than half of the model -> exactly 2 shards
        kwargs["max_shard_size"] = int(total_bytes * 0.6)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2)
    if dtype_name == "bf16":
        # Convert a copy: model.to(bf16) would also round non-persistent buffers such as rotary
        # inv_freq, which would then corrupt the float32 reference computed from `model`.
        to_save = copy.deepcopy(model).to(torch.bfloat16)
    else:
        to_save = model
    to_save.save_pretrained(folder, **kwargs)
    # make sure generation_config.json is exactly what we want
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(folder)


def build_one(arch, dtype_name, out, prompts, summary):
    name = f"{arch}_{dtype_name}"
    seed = ARCH_SEEDS[arch]
    torch.manual_seed(seed)
    cfg = make_config(arch)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    reinit_(model, seed)  # same base weights for f32 and bf16 of one arch
    if dtype_name == "bf16":
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()

    folder = os.path.join(out, "models", name)
    save_model(model, folder, dtype_name, shard=(arch == "mistral"))

    # references in float32 on the (possibly bf16-rounded) weights
    golden = os.path.join(out, "golden")
    logits = {}
    greedy_rows = {}
    greedy_ids, top_lp = [], []
    for i, ids in enumerate(prompts):
        logits[f"prompt_{i}"] = prompt_logits(model, ids).contiguous()
        g, rows, tops = greedy(model, ids)
        # step 0 of greedy must equal the last row of the prompt logits
        assert torch.equal(rows[0], logits[f"prompt_{i}"][-1]), name
        greedy_ids.append(g)
        top_lp.append(tops)
        greedy_rows[f"prompt_{i}"] = rows.contiguous()
    save_file(logits, os.path.join(golden, f"{name}.logits.safetensors"))
    save_file(greedy_rows, os.path.join(golden, f"{name}.greedy.safetensors"))
    doc = {
        "model": name,
        "prompts": prompts,
        "greedy": greedy_ids,
        "top_logprobs": top_lp,
        "greedy_logits_file": f"{name}.greedy.safetensors",
    }
    with open(os.path.join(golden, f"{name}.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")

    all_logits = torch.cat([logits[k] for k in sorted(logits)])
    summary.append(
        {
            "name": name,
            "logits_std": float(all_logits.std()),
            "distinct_greedy": [len(set(g)) for g in greedy_ids],
            "greedy0": greedy_ids[0],
            # smallest gap between best and 2nd-best logit over all greedy steps (tie risk)
            "min_margin": min(float(r[0] - r[1]) for k in greedy_rows
                              for r in torch.topk(greedy_rows[k], 2, dim=-1).values),
        }
    )
    return model


@torch.no_grad()
def verify(out, prompts, arch_names):
    """Reload every saved folder from disk and compare against the dumps."""
    worst = 0.0
    for name in arch_names:
        folder = os.path.join(out, "models", name)
        m = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        ref = load_file(os.path.join(out, "golden", f"{name}.logits.safetensors"))
        gref = load_file(os.path.join(out, "golden", f"{name}.greedy.safetensors"))
        with open(os.path.join(out, "golden", f"{name}.json")) as f:
            doc = json.load(f)
        for i, ids in enumerate(prompts):
            got = prompt_logits(m, ids)
            d = float((got - ref[f"prompt_{i}"]).abs().max())
            worst = max(worst, d)
            if d > 1e-4:
                raise RuntimeError(f"{name} prompt_{i}: reload mismatch {d}")
            # KV-cache incremental decode must reproduce the greedy tokens
            out_ids = m.generate(
                torch.tensor([ids]), max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False,
                eos_token_id=None, pad_token_id=0, output_scores=True, return_dict_in_generate=True,
            )
            gen = out_ids.sequences[0, len(ids):].tolist()
            if gen != doc["greedy"][i]:
                raise RuntimeError(f"{name} prompt_{i}: generate() (KV cache) != greedy dump")
            sc = torch.stack([s[0] for s in out_ids.scores]).float()
            dg = float((sc - gref[f"prompt_{i}"]).abs().max())
            worst = max(worst, dg)
            if dg > 1e-3:
                raise RuntimeError(f"{name} prompt_{i}: KV-cache step logits mismatch {dg}")
        print(f"  verify {name}: reload + KV-cache generate OK")
    print(f"  verify: worst abs diff {worst:.3g}")

    # structural checks
    mis = os.path.join(out, "models", "mistral_f32")
    idx = json.load(open(os.path.join(mis, "model.safetensors.index.json")))
    shards = sorted(set(idx["weight_map"].values()))
    assert len(shards) >= 2, shards
    print(f"  mistral_f32 shards: {shards}")
    for dn in ("f32", "bf16"):
        mis = os.path.join(out, "models", f"mistral_{dn}")
        assert os.path.exists(os.path.join(mis, "model.safetensors.index.json")), mis
        q2 = os.path.join(out, "models", f"qwen2_{dn}", "model.safetensors")
        with safe_open(q2, "pt") as f:
            keys = list(f.keys())
        assert "lm_head.weight" not in keys, "qwen2 should be tied"
        assert any(k.endswith("q_proj.bias") for k in keys)
    print("  qwen2: no lm_head.weight (tied), q/k/v biases present")

    # sliding window actually matters for mistral (prompt 2 has 17 tokens > 8)
    m = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "models", "mistral_f32"), dtype=torch.float32, attn_implementation="eager").eval()
    a = prompt_logits(m, prompts[2])
    m.config.sliding_window = None
    for layer in m.model.layers:
        layer.self_attn.sliding_window = None
    b = prompt_logits(m, prompts[2])
    d_early = float((a[:8] - b[:8]).abs().max())
    d_late = float((a[8:] - b[8:]).abs().max())
    assert d_early < 1e-5 and d_late > 1e-2, (d_early, d_late)
    print(f"  mistral sliding window effective: diff(pos<8)={d_early:.2g}, diff(pos>=8)={d_late:.3g}")

    # llama3 rope scaling actually matters
    m = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "models", "llama_f32"), dtype=torch.float32, attn_implementation="eager").eval()
    a = prompt_logits(m, prompts[2])
    cfg2 = m.config
    cfg2.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    m2 = AutoModelForCausalLM.from_config(cfg2, attn_implementation="eager", dtype=torch.float32).eval()
    m2.load_state_dict(m.state_dict())
    b = prompt_logits(m2, prompts[2])
    print(f"  llama3 rope scaling effective: max diff vs plain rope = {float((a - b).abs().max()):.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--no-verify", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    out = args.out
    os.makedirs(os.path.join(out, "models"), exist_ok=True)
    golden = os.path.join(out, "golden")
    os.makedirs(golden, exist_ok=True)

    prompts = make_prompts()
    with open(os.path.join(golden, "prompts.json"), "w") as f:
        json.dump({"seed": PROMPT_SEED, "prompts": prompts}, f)
        f.write("\n")
    with open(os.path.join(golden, "VERSIONS.txt"), "w") as f:
        f.write(f"python {platform.python_version()}\n")
        f.write(f"torch {torch.__version__}\n")
        f.write(f"transformers {transformers.__version__}\n")
        f.write(f"safetensors {safetensors.__version__}\n")
        f.write(f"numpy {np.__version__}\n")

    summary = []
    names = []
    for arch in ("llama", "mistral", "qwen2", "qwen3"):
        for dn in ("f32", "bf16"):
            build_one(arch, dn, out, prompts, summary)
            names.append(f"{arch}_{dn}")

    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    print("prompts:", prompts)
    for s in summary:
        print(f"{s['name']:14s} logits std {s['logits_std']:6.3f}  distinct greedy tokens/prompt {s['distinct_greedy']}"
              f"  min top1-top2 margin {s['min_margin']:.4f}")
        print(f"{'':14s} greedy[0] = {s['greedy0']}")
    bad = [s["name"] for s in summary if not (0.5 <= s["logits_std"] <= 8.0) or min(s["distinct_greedy"]) < 2]
    if bad:
        print("WARNING: degenerate-looking models:", bad)

    if not args.no_verify:
        verify(out, prompts, names)


if __name__ == "__main__":
    main()
