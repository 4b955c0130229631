# Builds PEFT LoRA adapters (random, non-zero B) on the tiny fixture models and dumps PEFT's reference outputs.
"""LoRA adapter reference-fixture generator for loom.

Usage (after tools/ref/make_models.py has written tests/fixtures/models and golden):
    /work/refenv/bin/python tools/ref/make_adapters.py --out tests/fixtures

Writes
    <out>/adapters/<name>/adapter_config.json, adapter_model.safetensors   (PEFT save_pretrained)
    <out>/adapters/MANIFEST.json          per adapter: base, file dtype, tensors (name/shape/dtype),
                                          and per adapted module r, alpha, scaling as PEFT computed them
    <out>/golden_lora/<name>.json         prompts, greedy ids (unmerged, merged[, merged_bf16]),
                                          max_abs_delta_vs_base
    <out>/golden_lora/<name>.unmerged.safetensors   F32 prompt_<i> [len_i, 256]: PeftModel logits
    <out>/golden_lora/<name>.merged.safetensors     same after merge_and_unload() (merged in f32)
    <out>/golden_lora/<name>.merged_bf16.safetensors  (bf16 bases) merged weights rounded to bf16
    <out>/golden_lora/mixed_llama.json + .safetensors PEFT mixed-batch forward (adapter_names=[...])
    <out>/golden_lora/VERSIONS.txt

Everything is deterministic (fixed seeds, CPU, eager attention, float32 reference math). All
references are computed from the files as saved (base reloaded from disk, adapter loaded with
PeftModel.from_pretrained), so F16/BF16 adapters are evaluated with their rounded values.
"""

import argparse
import json
import os
import platform
import re
import shutil
import sys
import warnings
import zlib

import numpy as np
import torch
from torch import nn

import peft
import safetensors
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import N_GEN, VOCAB, greedy, prompt_logits  # noqa: E402

# ||scale * B @ A||_F = DELTA_RATIO * ||W||_F for every adapted module (W = the base weight).
DELTA_RATIO = 0.5
ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
ST_DTYPE = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}

# name, base model folder, file dtype, LoraConfig kwargs.
ADAPTERS = [
    ("llama_qv_r8_f32", "llama_f32", "f32",
     dict(target_modules=["q_proj", "v_proj"], r=8, lora_alpha=16)),
    ("llama_all_r4_f16", "llama_f32", "f16",
     dict(target_modules=ALL7, r=4, lora_alpha=8)),
    ("llama_mlp_r6", "llama_f32", "f32",
     dict(target_modules=["gate_proj", "up_proj", "down_proj"], r=6, lora_alpha=12, use_rslora=False)),
    ("llama_bf16_rslora", "llama_bf16", "bf16",
     dict(target_modules="all-linear", r=8, lora_alpha=16, use_rslora=True)),
    ("llama_embed", "llama_f32", "f32",
     dict(target_modules=["embed_tokens", "v_proj"], r=4, lora_alpha=8)),
    # PEFT 0.21 refuses layers_to_transform/layers_pattern with a regex (str) target_modules
    # ("`layers_to_transform` cannot be used when `target_modules` is a str."), so the regex and the
    # layer-selection cases are two adapters.
    # PEFT writes adapter_config.json with sort_keys=True, so the pattern dicts below are written in
    # sorted key order ('^' < lowercase letters); "first key in file order" = the order shown here.
    ("mistral_regex", "mistral_f32", "f32",
     dict(target_modules=r".*\.(q_proj|k_proj|down_proj)$",
          exclude_modules=r"model\.layers\.1\.self_attn\.k_proj",
          r=4, lora_alpha=8,
          # layer-2 q_proj matches both keys: the first one (rank 6) wins
          rank_pattern={"^model.layers.2.self_attn.q_proj": 6, "k_proj": 2, "q_proj": 5},
          # layer-0 down_proj matches both keys: the first one (alpha 2) wins
          alpha_pattern={"^model.layers.0.mlp.down_proj": 2, "down_proj": 3})),
    ("mistral_layers", "mistral_f32", "f32",
     dict(target_modules=["q_proj", "v_proj", "down_proj"], layers_to_transform=[0, 2],
          layers_pattern="layers", r=4, lora_alpha=8)),
    ("qwen2_exclude", "qwen2_f32", "f32",
     dict(target_modules="all-linear", exclude_modules=["o_proj", "model.layers.1.mlp.up_proj"],
          r=4, lora_alpha=8)),
    ("qwen2_lmhead_tied", "qwen2_f32", "f32",
     dict(target_modules=["lm_head", "q_proj"], r=4, lora_alpha=8)),
    ("qwen3_lora_bias", "qwen3_f32", "f32",
     dict(target_modules=["q_proj", "o_proj", "up_proj"], lora_bias=True, r=4, lora_alpha=8)),
    ("qwen3_dora", "qwen3_f32", "f32",
     dict(target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True, r=4, lora_alpha=8)),
    ("qwen3_bf16_dora_bf16", "qwen3_bf16", "bf16",
     dict(target_modules=["k_proj", "gate_proj"], use_dora=True, r=4, lora_alpha=8)),
]

# Adapters whose saved adapter_config.json keeps the literal target_modules "all-linear" (PEFT itself
# writes the expanded list, as llama_bf16_rslora shows).
KEEP_ALL_LINEAR = {"qwen2_exclude"}

# Mixed batch: 4 prompts, one adapter (or the base) each, one padded forward.
MIXED_BASE = "llama_f32"
MIXED_ASSIGN = ["llama_qv_r8_f32", "__base__", "llama_mlp_r6", "llama_all_r4_f16"]
MIXED_TOL = 1e-5

KEY_RE = re.compile(
    r"^base_model\.model\.("
    r"model\.layers\.\d+\.(self_attn|mlp)\.[a-z_]+_proj\.(lora_A\.weight|lora_B\.weight|lora_B\.bias|lora_magnitude_vector)"
    r"|model\.embed_tokens\.lora_embedding_[AB]"
    r"|lm_head\.lora_[AB]\.weight)$"
)


# Per-adapter seed salt, picked by a small scan so that every greedy step has a top-1/top-2 logit
# margin >= 2e-3 (no near-ties a correct engine could legitimately flip) and no prompt's
# continuation collapses into repeating 1-3 tokens. Absent = 0.
SEED_SALT = {"qwen3_bf16_dora_bf16": 1}


def seed_of(name):
    return zlib.crc32(f"{name}/{SEED_SALT.get(name, 0)}".encode()) & 0x7FFFFFFF


def load_base(out, base):
    m = AutoModelForCausalLM.from_pretrained(
        os.path.join(out, "models", base), dtype=torch.float32, attn_implementation="eager")
    return m.eval()


def quiet(fn, *a, **kw):
    """Run fn, returning (result, [warning messages]) with PEFT/transformers warnings captured."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = fn(*a, **kw)
    msgs = [str(x.message).split("\n")[0] for x in w
            if "is_gradient_checkpointing" not in str(x.message)]
    return r, msgs


def lora_layers(pm):
    for mname, mod in pm.named_modules():
        if isinstance(mod, LoraLayer):
            yield mname.removeprefix("base_model.model."), mod


@torch.no_grad()
def reinit_adapter_(pm, seed):
    """Replace PEFT's init (B = 0) by random A, B with ||scale*B@A|| = DELTA_RATIO*||W||."""
    g = torch.Generator().manual_seed(seed)

    def randn(shape, std):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std

    for path, mod in lora_layers(pm):
        W = mod.get_base_layer().weight.detach().float()
        s = mod.scaling["default"]
        r = mod.r["default"]
        if "default" in mod.lora_embedding_A:  # embedding: A [r, vocab], B [dim, r], delta = (B@A).T
            A = randn(mod.lora_embedding_A["default"].shape, 1.0 / W.shape[0] ** 0.5)
            B = randn(mod.lora_embedding_B["default"].shape, 1.0 / r ** 0.5)
            B *= DELTA_RATIO * W.norm() / (s * B @ A).norm()
            mod.lora_embedding_A["default"].copy_(A)
            mod.lora_embedding_B["default"].copy_(B)
            continue
        la, lb = mod.lora_A["default"], mod.lora_B["default"]
        A = randn(la.weight.shape, 1.0 / la.in_features ** 0.5)
        B = randn(lb.weight.shape, 1.0 / r ** 0.5)
        B *= DELTA_RATIO * W.norm() / (s * B @ A).norm()
        la.weight.copy_(A)
        lb.weight.copy_(B)
        if lb.bias is not None:  # lora_bias
            lb.bias.copy_(randn(lb.bias.shape, 0.1))
        if mod.use_dora["default"]:
            n = torch.linalg.norm(W + s * (B @ A), dim=1)
            mag = n * (1.0 + randn(n.shape, 0.1))
            mod.lora_magnitude_vector["default"].weight.copy_(mag)


def rewrite_config_sorted(folder, keep_all_linear=False):
    """PEFT writes sets (target_modules, exclude_modules) as lists in hash order: sort them.

    PEFT also replaces "all-linear" by the expanded list of linear module names before saving.
    With keep_all_linear the literal "all-linear" is put back (as a hand-written config has it);
    PeftModel.from_pretrained expands it again to the same modules (checked in reference()).
    """
    p = os.path.join(folder, "adapter_config.json")
    with open(p) as f:
        cfg = json.load(f)
    for k in ("target_modules", "exclude_modules"):
        if isinstance(cfg.get(k), list):
            cfg[k] = sorted(cfg[k])
    if keep_all_linear:
        cfg["target_modules"] = "all-linear"
    with open(p, "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True))
    return cfg


def make_adapter(out, name, base, dtype_name, kw, log):
    folder = os.path.join(out, "adapters", name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model = load_base(out, base)
    cfg = LoraConfig(task_type="CAUSAL_LM", lora_dropout=0.0, **kw)
    pm, w = quiet(get_peft_model, model, cfg)
    log["warnings_create"] = w
    reinit_adapter_(pm, seed_of(name))
    # PEFT's default save_embedding_layers="auto" also stores the *base* weight of a targeted
    # embed_tokens / lm_head (`...embed_tokens.base_layer.weight`, `lm_head.base_layer.weight`).
    # The main fixtures are saved without it (adapter tensors only); targeted-embedding adapters
    # additionally get a `<name>_peft_default_save` copy written with PEFT's default.
    save_adapter(pm, folder, dtype_name, log, "warnings_save", save_embedding_layers=False)
    targets = pm.peft_config["default"].target_modules
    if isinstance(targets, (set, list)) and {"embed_tokens", "lm_head"} & set(targets):
        extra = folder + "_peft_default_save"
        if os.path.isdir(extra):
            shutil.rmtree(extra)
        save_adapter(pm, extra, dtype_name, log, "warnings_save_default")
        rewrite_config_sorted(extra)
    return rewrite_config_sorted(folder, keep_all_linear=name in KEEP_ALL_LINEAR)


def save_adapter(pm, folder, dtype_name, log, log_key, **kw):
    _, w = quiet(pm.save_pretrained, folder, **kw)
    log[log_key] = w
    os.remove(os.path.join(folder, "README.md"))  # PEFT's boilerplate model card
    st = os.path.join(folder, "adapter_model.safetensors")
    if dtype_name != "f32":
        with safe_open(st, "pt") as f:
            meta = f.metadata()
        sd = load_file(st)
        save_file({k: v.to(DTYPES[dtype_name]).contiguous() for k, v in sd.items()}, st, metadata=meta)


def file_tensors(folder):
    st = os.path.join(folder, "adapter_model.safetensors")
    rows = []
    with safe_open(st, "pt") as f:
        for k in f.keys():
            t = f.get_slice(k)
            rows.append([k, list(t.get_shape()), t.get_dtype()])
    return rows


@torch.no_grad()
def run_all(model, prompts):
    logits = {f"prompt_{i}": prompt_logits(model, ids).contiguous() for i, ids in enumerate(prompts)}
    gen, margins = [], []
    for i, ids in enumerate(prompts):
        g, rows, _ = greedy(model, ids)
        assert torch.equal(rows[0], logits[f"prompt_{i}"][-1])
        gen.append(g)
        top2 = torch.topk(rows, 2, dim=-1).values
        margins.append(float((top2[:, 0] - top2[:, 1]).min()))
    return logits, gen, min(margins)


def max_delta(a, b):
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@torch.no_grad()
def reference(out, name, base, kw, prompts, base_logits, log):
    folder = os.path.join(out, "adapters", name)
    golden = os.path.join(out, "golden_lora")
    pm, w = quiet(PeftModel.from_pretrained, load_base(out, base), folder)
    log["warnings_load"] = w
    pm.eval()

    # every file tensor is in the PeftModel, with the file's (possibly rounded) values
    sd = load_file(os.path.join(folder, "adapter_model.safetensors"))
    msd = pm.state_dict()
    for k, v in sd.items():
        mk = re.sub(r"\.(lora_A|lora_B)\.(weight|bias)$", r".\1.default.\2", k)
        mk = re.sub(r"\.(lora_embedding_[AB])$", r".\1.default", mk)
        mk = re.sub(r"\.lora_magnitude_vector$", ".lora_magnitude_vector.default.weight", mk)
        assert torch.equal(msd[mk].float(), v.float()), (name, k)

    modules = {}
    for path, mod in lora_layers(pm):
        modules[path] = {"r": mod.r["default"], "alpha": mod.lora_alpha["default"],
                         "scaling": mod.scaling["default"]}
    log["modules"] = modules
    file_modules = {re.sub(r"\.(lora_[AB]\.(weight|bias)|lora_embedding_[AB]|lora_magnitude_vector)$", "",
                           k).removeprefix("base_model.model.") for k in sd}
    assert file_modules == set(modules), (name, sorted(file_modules ^ set(modules)))

    res = {}
    unm, g_unm, m_unm = run_all(pm, prompts)
    save_file(unm, os.path.join(golden, f"{name}.unmerged.safetensors"))
    res["unmerged"] = {"greedy": g_unm, "min_greedy_margin": m_unm}
    delta = max_delta(unm, base_logits)
    for i, ids in enumerate(prompts):  # KV-cache decode through the PeftModel gives the same tokens
        o = pm.generate(input_ids=torch.tensor([ids]), max_new_tokens=N_GEN, min_new_tokens=N_GEN,
                        do_sample=False, eos_token_id=None, pad_token_id=0)
        assert o[0, len(ids):].tolist() == g_unm[i], (name, i, "generate() != greedy")

    # -- merged (f32) --------------------------------------------------------------------------
    notes = []
    inner = pm.base_model.model
    if inner.config.tie_word_embeddings and "lm_head" in modules:
        # PEFT would add the delta in place to the shared embed/lm_head tensor, i.e. change the input
        # embedding too (unmerged applies it to the output projection only). Dump that as
        # merged_peft_inplace, and as "merged" untie first (what PEFT's merge warning recommends).
        import copy
        naive = copy.deepcopy(pm)
        mm, w = quiet(naive.merge_and_unload)
        log["warnings_merge_inplace"] = w
        nl, ng, _ = run_all(mm.eval(), prompts)
        save_file(nl, os.path.join(golden, f"{name}.merged_peft_inplace.safetensors"))
        res["merged_peft_inplace"] = {"greedy": ng,
                                      "max_abs_delta_vs_unmerged": max_delta(nl, unm)}
        del naive, mm
        head = inner.lm_head.get_base_layer()
        head.weight = nn.Parameter(head.weight.detach().clone())
        inner.config.tie_word_embeddings = False
        notes.append("lm_head untied (weight cloned) before merge_and_unload; PEFT's plain merge "
                     "changes the tied input embedding too: see merged_peft_inplace")
    for path, mod in lora_layers(pm):
        b = mod.get_base_layer()
        if mod.lora_bias.get("default") and b.bias is None:
            # PEFT refuses: "Impossible to merge LoRA with `lora_bias=True` because the base layer
            # has no bias." A zero base bias makes the merge exact (b' = scale * lora_B.bias).
            b.bias = nn.Parameter(torch.zeros(b.out_features))
            notes.append(f"{path}: zero base bias added before merge (PEFT refuses to merge lora_bias "
                         f"into a bias-less layer)")
    merged, w = quiet(pm.merge_and_unload)
    log["warnings_merge"] = w
    merged.eval()
    ml, g_m, m_m = run_all(merged, prompts)
    save_file(ml, os.path.join(golden, f"{name}.merged.safetensors"))
    res["merged"] = {"greedy": g_m, "min_greedy_margin": m_m,
                     "max_abs_delta_vs_unmerged": max_delta(ml, unm)}
    if notes:
        res["merged"]["notes"] = notes

    if base.endswith("_bf16"):
        for p in merged.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
        bl, g_b, m_b = run_all(merged, prompts)
        save_file(bl, os.path.join(golden, f"{name}.merged_bf16.safetensors"))
        res["merged_bf16"] = {"greedy": g_b, "min_greedy_margin": m_b,
                              "max_abs_delta_vs_unmerged": max_delta(bl, unm)}
    return res, delta


def spec_targets(cfg, model):
    """Module paths the config selects, by the rules of SPEC-adapters.md section 3 (not PEFT code)."""
    tm, ex = cfg["target_modules"], cfg.get("exclude_modules")
    head = next(n for n, m in model.named_modules() if m is model.get_output_embeddings())

    def matches(spec, path):
        if isinstance(spec, str):
            return re.fullmatch(spec, path) is not None
        return any(path == e or path.endswith("." + e) for e in spec)

    sel = []
    for path, mod in model.named_modules():
        if not path:
            continue
        if tm == "all-linear":
            ok = isinstance(mod, nn.Linear) and path != head
        else:
            ok = matches(tm, path)
        if ok and ex and matches(ex, path):
            ok = False
        lt = cfg.get("layers_to_transform")
        if ok and lt is not None:
            lp = cfg.get("layers_pattern") or r"[^.]*"
            m = re.match(rf"(?:^|.*?\.){lp}\.(\d+)\.", path)
            ok = m is not None and int(m.group(1)) in ([lt] if isinstance(lt, int) else lt)
        if ok:
            sel.append(path)
    return sel


def spec_pattern(pattern, path, default):
    for k, v in pattern.items():  # first key in file order
        if re.match(rf"(.*\.)?({k})$", path):
            return v
    return default


@torch.no_grad()
def check_spec_math(out, name, base, prompts):
    """Merge the adapter from its files alone with SPEC section 3's formulas; compare to PEFT."""
    folder = os.path.join(out, "adapters", name)
    with open(os.path.join(folder, "adapter_config.json")) as f:
        cfg = json.load(f)
    sd = {k.removeprefix("base_model.model."): v.float()
          for k, v in load_file(os.path.join(folder, "adapter_model.safetensors")).items()}
    model = load_base(out, base)
    mods = sorted({re.sub(r"\.(lora_[AB]\.(weight|bias)|lora_embedding_[AB]|lora_magnitude_vector)$", "", k)
                   for k in sd})
    assert sorted(spec_targets(cfg, model)) == mods, (name, "target rules")
    if model.config.tie_word_embeddings and "lm_head" in mods:  # adapt the output projection only
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    for path in mods:
        mod = model.get_submodule(path)
        r = spec_pattern(cfg["rank_pattern"], path, cfg["r"])
        alpha = spec_pattern(cfg["alpha_pattern"], path, cfg["lora_alpha"])
        scale = alpha / (r ** 0.5 if cfg["use_rslora"] else r)
        if isinstance(mod, nn.Embedding):
            A, B = sd[path + ".lora_embedding_A"], sd[path + ".lora_embedding_B"]
            assert A.shape[0] == r
            mod.weight += scale * (B @ A).T
            continue
        A, B = sd[path + ".lora_A.weight"], sd[path + ".lora_B.weight"]
        assert A.shape[0] == r and B.shape[1] == r, (name, path)
        W = mod.weight + scale * (B @ A)
        if path + ".lora_magnitude_vector" in sd:
            W = (sd[path + ".lora_magnitude_vector"] / torch.linalg.norm(W, dim=1))[:, None] * W
        mod.weight.copy_(W)
        if path + ".lora_B.bias" in sd:
            bb = scale * sd[path + ".lora_B.bias"]
            if mod.bias is None:
                mod.bias = nn.Parameter(bb)
            else:
                mod.bias += bb
    ref = load_file(os.path.join(out, "golden_lora", f"{name}.merged.safetensors"))
    d = max(float((prompt_logits(model.eval(), ids) - ref[f"prompt_{i}"]).abs().max())
            for i, ids in enumerate(prompts))
    assert d < 1e-4, (name, "spec-math merge differs from PEFT merged", d)
    return d


@torch.no_grad()
def check_default_save(out, name, base, prompts):
    """The PEFT-default save of a targeted-embedding adapter: same outputs, plus base_layer weights."""
    folder = os.path.join(out, "adapters", name + "_peft_default_save")
    tensors = file_tensors(folder)
    extra = [t[0] for t in tensors if not KEY_RE.match(t[0])]
    assert extra and all(k.endswith(".base_layer.weight") for k in extra), (name, extra)
    base_sd = load_base(out, base).state_dict()
    sd = load_file(os.path.join(folder, "adapter_model.safetensors"))
    for k in extra:  # the stored "base layer" is exactly the base weight (rounded to the file dtype)
        bk = k.removeprefix("base_model.model.").replace(".base_layer.weight", ".weight")
        assert torch.equal(sd[k].float(), base_sd[bk].to(sd[k].dtype).float()), k
    pm, w = quiet(PeftModel.from_pretrained, load_base(out, base), folder)
    ref = load_file(os.path.join(out, "golden_lora", f"{name}.unmerged.safetensors"))
    for i, ids in enumerate(prompts):
        assert torch.equal(prompt_logits(pm.eval(), ids), ref[f"prompt_{i}"]), (name, i)
    print(f"{'':22s} {name}_peft_default_save: extra {extra}; PeftModel logits == {name}")
    return {"base": base, "file_dtype": tensors[0][2], "reference_same_as": name, "extra_base_layer_tensors": extra,
            "tensors": tensors, "bytes": os.path.getsize(os.path.join(folder, "adapter_model.safetensors")),
            "peft_warnings": w}


@torch.no_grad()
def mixed(out, prompts, adapters_by_name):
    golden = os.path.join(out, "golden_lora")
    names = [n for n in dict.fromkeys(MIXED_ASSIGN) if n != "__base__"]
    for n in names:
        assert adapters_by_name[n][1] == MIXED_BASE, n
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
    save_file(rows, os.path.join(golden, "mixed_llama.safetensors"))
    # decode: PEFT generate() with the same assignment (left padding, as generate() wants, and a
    # KV cache): every row's 32 greedy tokens must equal that adapter's greedy run alone.
    lids = torch.zeros(len(prompts), L, dtype=torch.long)
    lmask = torch.zeros(len(prompts), L, dtype=torch.long)
    for i, p in enumerate(prompts):
        lids[i, L - len(p):] = torch.tensor(p)
        lmask[i, L - len(p):] = 1
    gen = pm.generate(input_ids=lids, attention_mask=lmask, adapter_names=list(MIXED_ASSIGN),
                      max_new_tokens=N_GEN, min_new_tokens=N_GEN, do_sample=False, eos_token_id=None,
                      pad_token_id=0)[:, L:].tolist()
    for i, a in enumerate(MIXED_ASSIGN):
        ref_json = (os.path.join(out, "golden", f"{MIXED_BASE}.json") if a == "__base__"
                    else os.path.join(golden, f"{a}.json"))
        with open(ref_json) as f:
            d = json.load(f)
        alone = d["greedy"][i] if a == "__base__" else d["unmerged"]["greedy"][i]
        assert gen[i] == alone, f"mixed generate row {i} ({a}) != alone"
    worst = 0.0
    for i, a in enumerate(MIXED_ASSIGN):
        ref_file = (os.path.join(out, "golden", f"{MIXED_BASE}.logits.safetensors") if a == "__base__"
                    else os.path.join(golden, f"{a}.unmerged.safetensors"))
        ref = load_file(ref_file)[f"prompt_{i}"]
        d = float((rows[f"row_{i}"] - ref).abs().max())
        worst = max(worst, d)
        assert d <= MIXED_TOL, f"mixed row {i} ({a}): {d} vs alone"
    doc = {"base": MIXED_BASE, "prompts": prompts, "adapter_names": list(MIXED_ASSIGN),
           "adapters": {n: f"../adapters/{n}" for n in names}, "padding": "right, token 0",
           "logits_file": "mixed_llama.safetensors",
           "max_abs_diff_vs_alone": worst,
           "greedy": gen, "greedy_note": "PEFT generate(adapter_names=...), left padding, KV cache; "
                                         "equal to each row's greedy run alone"}
    with open(os.path.join(golden, "mixed_llama.json"), "w") as f:
        json.dump(doc, f, indent=None)
        f.write("\n")
    print(f"mixed batch {MIXED_ASSIGN}: every row == alone within {worst:.3g}; "
          f"mixed generate() == greedy alone for every row")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*", help="build only these adapters (debugging)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    out = args.out
    os.makedirs(os.path.join(out, "adapters"), exist_ok=True)
    golden = os.path.join(out, "golden_lora")
    os.makedirs(golden, exist_ok=True)
    with open(os.path.join(out, "golden", "prompts.json")) as f:
        prompts = json.load(f)["prompts"]
    with open(os.path.join(golden, "VERSIONS.txt"), "w") as f:
        f.write(f"python {platform.python_version()}\n")
        f.write(f"torch {torch.__version__}\n")
        f.write(f"transformers {transformers.__version__}\n")
        f.write(f"peft {peft.__version__}\n")
        f.write(f"safetensors {safetensors.__version__}\n")
        f.write(f"numpy {np.__version__}\n")

    manifest = {}
    by_name = {a[0]: a for a in ADAPTERS}
    todo = [a for a in ADAPTERS if not args.only or a[0] in args.only]
    for name, base, dtype_name, kw in todo:
        log = {}
        cfg = make_adapter(out, name, base, dtype_name, kw, log)
        folder = os.path.join(out, "adapters", name)
        tensors = file_tensors(folder)
        bad = [t[0] for t in tensors if not KEY_RE.match(t[0])]
        assert not bad, (name, bad)
        want = ST_DTYPE[DTYPES[dtype_name]]
        assert all(t[2] == want for t in tensors), (name, {t[2] for t in tensors})
        base_logits = load_file(os.path.join(out, "golden", f"{base}.logits.safetensors"))
        res, delta = reference(out, name, base, kw, prompts, base_logits, log)
        assert delta > 0.5, f"{name}: adapter barely changes the logits ({delta})"
        for mode in ("merged", "merged_bf16"):
            if mode in res:
                tol = 1e-3 if mode == "merged" else 0.5
                assert res[mode]["max_abs_delta_vs_unmerged"] < tol, (name, mode, res[mode])
        for mode in ("unmerged", "merged"):
            assert res[mode]["min_greedy_margin"] >= 2e-3, (name, mode, res[mode]["min_greedy_margin"])
        if "merged_bf16" in res and res["merged_bf16"]["min_greedy_margin"] < 1e-3:
            print(f"WARNING: {name} merged_bf16 greedy has a near-tie ({res['merged_bf16']['min_greedy_margin']})")
        doc = {"adapter": name, "base": base, "prompts": prompts, **res, "max_abs_delta_vs_base": delta}
        with open(os.path.join(golden, f"{name}.json"), "w") as f:
            json.dump(doc, f, indent=None)
            f.write("\n")
        manifest[name] = {
            "base": base, "file_dtype": want, "config": {k: cfg[k] for k in sorted(cfg) if k in (
                "target_modules", "exclude_modules", "r", "lora_alpha", "use_rslora", "use_dora", "lora_bias",
                "rank_pattern", "alpha_pattern", "layers_to_transform", "layers_pattern")},
            "modules": log["modules"], "tensors": tensors,
            "bytes": os.path.getsize(os.path.join(folder, "adapter_model.safetensors")),
            "peft_warnings": sorted(set(sum((v for k, v in log.items() if k.startswith("warnings")), []))),
        }
        spec_d = check_spec_math(out, name, base, prompts)
        extra = folder + "_peft_default_save"
        if os.path.isdir(extra):
            manifest[name + "_peft_default_save"] = check_default_save(out, name, base, prompts)
        scal = sorted({(m["r"], m["alpha"], round(m["scaling"], 6)) for m in log["modules"].values()})
        print(f"{name:22s} base {base:11s} {want:4s} {len(tensors):3d} tensors  (r, alpha, scaling) {scal}")
        print(f"{'':22s} max|adapter-base| {delta:.3f}  merged-vs-unmerged "
              f"{res['merged']['max_abs_delta_vs_unmerged']:.2g}"
              + (f"  merged_bf16-vs-unmerged {res['merged_bf16']['max_abs_delta_vs_unmerged']:.3g}"
                 if "merged_bf16" in res else "")
              + f"  min greedy margin {res['unmerged']['min_greedy_margin']:.4f}"
              + f"  distinct greedy {[len(set(g)) for g in res['unmerged']['greedy']]}"
              + f"  spec-math merge vs PEFT merged {spec_d:.2g}")
        if "merged_peft_inplace" in res:
            print(f"{'':22s} PEFT in-place merge on tied lm_head differs from unmerged by "
                  f"{res['merged_peft_inplace']['max_abs_delta_vs_unmerged']:.3f}")
    if not args.only:
        with open(os.path.join(out, "adapters", "MANIFEST.json"), "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
        mixed(out, prompts, by_name)


if __name__ == "__main__":
    main()
