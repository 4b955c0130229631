# Quantizes tiny fixture models to bitsandbytes NF4 and FP4 with transformers (QLoRA's base), trains nothing but writes QLoRA adapters over them, and dumps bitsandbytes/transformers/PEFT reference outputs on CPU.
"""bitsandbytes 4-bit (NF4, FP4) fixtures for loom.

Usage (bitsandbytes installed with --no-deps into a --target folder, so the reference venv itself
is not changed; see tools/ref/README.md):
    PYTHONPATH=/work/pkgs-nf4 .venv-ref/bin/python tools/ref/make_bnb.py --out tests/fixtures

Run after make_models.py (it reads tests/fixtures/models/<base>). Writes
    <out>/models/<name>/            config.json (quantization_config quant_method "bitsandbytes"),
                                    model.safetensors as transformers' save_pretrained writes a
                                    BitsAndBytesConfig(load_in_4bit, nf4 or fp4) model
    <out>/golden/<name>.json, .logits.safetensors, .greedy.safetensors
                                    transformers on CPU loading that folder, f32 compute (see
                                    below), same format as make_models.py's goldens
    <out>/adapters/qlora_<name>/    a PEFT LoRA (or DoRA) adapter created over the 4-bit model with
                                    random non-zero B (what QLoRA training leaves)
    <out>/golden/<name>.lora.safetensors
                                    F32 "<adapter>.prompt_<i>" [len_i, vocab]: PEFT running that
                                    adapter over the 4-bit model
    <out>/golden/<name>.dequant.safetensors
                                    bitsandbytes' own dequantize_4bit of a few projections (F32)

The reference runs bitsandbytes' generic 4-bit path on CPU: dequantize_4bit to f32, then an f32
linear. Linear4bit's avx512-bf16 CPU fast path (taken on CPUs with AVX512_BF16) is switched off:
it computes with bf16 activations, an error loom's f32 kernels do not have.
"""

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, GenerationConfig

sys.path.insert(0, os.path.dirname(__file__))
import make_models  # noqa: E402  (prompts, greedy, prompt_logits)

import bitsandbytes as bnb  # noqa: E402
import bitsandbytes.functional as bnbf  # noqa: E402

# name -> (base fixture, base dtype, quant type, double quant (4-bit) or llm_int8_threshold
#          (int8), adapter {target_modules, use_dora})
FIXTURES = {
    # bf16 base, plain NF4 (absmax f32), QLoRA over every projection.
    "nf4_llama": ("llama_bf16", torch.bfloat16, "nf4", False,
                  dict(target_modules="all-linear", use_dora=False, r=8, lora_alpha=16)),
    # f32 base, NF4 with double quant (8-bit absmax, nested f32 absmax per 256 blocks + offset),
    # q/k/v biases, tied embeddings; a DoRA adapter (PEFT takes its norm over the dequantized base).
    "nf4dq_qwen2": ("qwen2_f32", torch.float32, "nf4", True,
                    dict(target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True, r=4,
                         lora_alpha=8)),
    # f32 base (q/k norms), plain FP4 (BitsAndBytesConfig's default type), QLoRA everywhere.
    "fp4_qwen3": ("qwen3_f32", torch.float32, "fp4", False,
                  dict(target_modules="all-linear", use_dora=False, r=8, lora_alpha=16)),
    # bf16 base, FP4 with double quant; a DoRA adapter on attention and up_proj.
    "fp4dq_mistral": ("mistral_bf16", torch.bfloat16, "fp4", True,
                      dict(target_modules=["q_proj", "k_proj", "o_proj", "up_proj"], use_dora=True,
                           r=4, lora_alpha=8)),
    # LLM.int8 (load_in_8bit) of an f32 base with bitsandbytes' default outlier threshold 6.0.
    "int8_llama": ("llama_f32", torch.float32, "int8", 6.0,
                   dict(target_modules="all-linear", use_dora=False, r=8, lora_alpha=16)),
    # LLM.int8 without outlier decomposition (threshold 0: every element in int8), bf16 base,
    # q/k/v biases, tied head; a DoRA adapter (PEFT's norm over int8_vectorwise_dequant, f32).
    "int8t0_qwen2": ("qwen2_bf16", torch.bfloat16, "int8", 0.0,
                     dict(target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True, r=4,
                          lora_alpha=8)),
    # Mixture of experts, bf16 base: transformers 5 holds the experts as fused parameters, not
    # Linear modules, so load_in_4bit quantizes the attention only; experts and routers stay bf16
    # (saved per expert). QLoRA on the attention projections.
    "nf4_mixtral": ("mixtral_bf16", torch.bfloat16, "nf4", False,
                    dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], use_dora=False,
                         r=8, lora_alpha=16)),
    # The same with LLM.int8 (threshold 6.0): attention in int8, experts and routers bf16.
    "int8_mixtral": ("mixtral_bf16", torch.bfloat16, "int8", 6.0,
                     dict(target_modules=["q_proj", "v_proj"], use_dora=False, r=8, lora_alpha=16)),
}
DEQUANT_DUMP = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
                "model.layers.2.mlp.down_proj"]
DEQUANT_DUMP_MOE = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.k_proj",
                    "model.layers.2.self_attn.o_proj"]  # a MoE's MLPs are experts (not quantized)
ADAPTER_SEED = 77


def load_bnb(folder):
    """The saved 4-/8-bit model as a user loads it: CPU, f32 compute, the generic bnb path."""
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                 attn_implementation="eager", device_map="cpu")
    # transformers keeps the checkpoint's dtype for the modules bitsandbytes did not quantize
    # (bf16 embeddings, norms and head of nf4_llama) whatever `dtype` says: upcast them, so the
    # whole forward is f32 as loom's (exact: bf16 → f32).
    for p in model.parameters():
        if p.dtype in (torch.bfloat16, torch.float16):
            p.data = p.data.float()
    n = 0
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear4bit):
            m.support_avx512bf16_for_cpu = False
            n += 1
        n += isinstance(m, bnb.nn.Linear8bitLt)
    assert n > 0, "no Linear4bit / Linear8bitLt modules"
    model.eval()
    # Linear8bitLt moves SCB from the weight to its state on the first forward; PEFT's DoRA reads
    # the state before that and fails, so run one token first (no effect on any result).
    with torch.no_grad():
        model(input_ids=torch.tensor([[1]]))
    # PEFT's DoRA on CPU dequantizes the 8-bit weight and then re-assigns module.weight =
    # module.weight.to(device): the new Int8Params has CB but no SCB, and the next forward's
    # init_8bit_state copies that None into the state (int8_mm_dequant then fails on None). Give the
    # weight back its own SCB before each forward; it is the same tensor, so nothing changes.
    for m in model.modules():
        if isinstance(m, bnb.nn.Linear8bitLt):
            m.loom_scb = m.state.SCB

            def keep_scb(mod, args):
                if getattr(mod.weight, "CB", None) is not None and getattr(mod.weight, "SCB", None) is None:
                    mod.weight.SCB = mod.loom_scb
            m.register_forward_pre_hook(keep_scb)
    return model


def make_adapter(folder, adapter_dir, spec):
    from peft import LoraConfig, get_peft_model
    base = load_bnb(folder)
    cfg = LoraConfig(r=spec["r"], lora_alpha=spec["lora_alpha"], target_modules=spec["target_modules"],
                     use_dora=spec["use_dora"], lora_dropout=0.0, task_type="CAUSAL_LM")
    peft_model = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(ADAPTER_SEED)
    with torch.no_grad():
        for name, p in sorted(peft_model.named_parameters()):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.08)
            elif "lora_magnitude_vector" in name:
                p.mul_(1 + 0.1 * torch.randn(p.shape, generator=g))
    if os.path.isdir(adapter_dir):
        shutil.rmtree(adapter_dir)
    peft_model.save_pretrained(adapter_dir)


def build(name, out, prompts):
    base, dtype, qtype, dq, spec = FIXTURES[name]
    src = os.path.join(out, "models", base)
    if qtype == "int8":
        qc = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=dq)
    else:
        qc = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=qtype,
                                bnb_4bit_use_double_quant=dq, bnb_4bit_compute_dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=dtype, quantization_config=qc,
                                                 device_map="cpu")
    folder = os.path.join(out, "models", name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(folder)
    del model

    ref = load_bnb(folder)
    golden = os.path.join(out, "golden")
    logits, greedy_rows, greedy_ids, tops = {}, {}, [], []
    for i, ids in enumerate(prompts):
        logits[f"prompt_{i}"] = make_models.prompt_logits(ref, ids).contiguous()
        g, rows, top = make_models.greedy(ref, ids)
        greedy_ids.append(g)
        tops.append(top)
        greedy_rows[f"prompt_{i}"] = rows.contiguous()
    save_file(logits, os.path.join(golden, f"{name}.logits.safetensors"))
    save_file(greedy_rows, os.path.join(golden, f"{name}.greedy.safetensors"))
    with open(os.path.join(golden, f"{name}.json"), "w") as f:
        json.dump({"model": name, "prompts": prompts, "greedy": greedy_ids,
                   "top_logprobs": tops, "greedy_logits_file": f"{name}.greedy.safetensors"}, f)
        f.write("\n")
    # bitsandbytes' own dequantization to f32 (what its f32-compute matmul multiplies by).
    mods = dict(ref.named_modules())
    deq = {}
    for n in DEQUANT_DUMP_MOE if "mixtral" in name else DEQUANT_DUMP:
        w = mods[n].weight
        if qtype == "int8":
            scb = w.SCB if getattr(w, "SCB", None) is not None else mods[n].state.SCB
            deq[n] = bnbf.int8_vectorwise_dequant(w.data, scb).contiguous()
            continue
        qs = w.quant_state
        saved = qs.dtype
        qs.dtype = torch.float32
        deq[n] = bnbf.dequantize_4bit(w.data, qs).contiguous()
        qs.dtype = saved
    save_file(deq, os.path.join(golden, f"{name}.dequant.safetensors"))

    # The default CPU path (avx512-bf16 when present), for the record only.
    fast = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                attn_implementation="eager", device_map="cpu").eval()
    fast_err = max(float((make_models.prompt_logits(fast, ids) - logits[f"prompt_{i}"]).abs().max())
                   for i, ids in enumerate(prompts))
    del fast
    if qtype == "int8":  # how many activation elements reached the outlier threshold
        seen = [0, 0]

        def count(mod, args):
            x = args[0].to(torch.float16).abs()
            seen[0] += int((x >= mod.state.threshold).sum()) if mod.state.threshold > 0 else 0
            seen[1] += x.numel()
        hooks = [m.register_forward_pre_hook(count) for m in ref.modules()
                 if isinstance(m, bnb.nn.Linear8bitLt)]
        for ids in prompts:
            make_models.prompt_logits(ref, ids)
        for h in hooks:
            h.remove()
        print(f"{name}: {seen[0]} of {seen[1]} prompt activation elements at or above the threshold")

    # QLoRA: PEFT over the 4-bit model, adapter unmerged, f32.
    from peft import PeftModel
    adapter = f"qlora_{name}"
    adapter_dir = os.path.join(out, "adapters", adapter)
    make_adapter(folder, adapter_dir, spec)
    peft_model = PeftModel.from_pretrained(load_bnb(folder), adapter_dir).eval()
    lora = {f"{adapter}.prompt_{i}": make_models.prompt_logits(peft_model, ids).contiguous()
            for i, ids in enumerate(prompts)}
    save_file(lora, os.path.join(golden, f"{name}.lora.safetensors"))
    moved = max(float((lora[f"{adapter}.prompt_{i}"] - logits[f"prompt_{i}"]).abs().max())
                for i in range(len(prompts)))
    margin = min(float(r[0] - r[1]) for k in greedy_rows
                 for r in torch.topk(greedy_rows[k], 2, dim=-1).values)
    print(f"{name}: from {base} ({dtype}, {qtype}, double quant {dq}), min greedy margin {margin:.3f}; "
          f"default CPU path differs by up to {fast_err:.4f}; {adapter} moves logits by up to {moved:.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.manual_seed(0)
    prompts = make_models.make_prompts()
    for name in args.only or FIXTURES:
        build(name, args.out, prompts)


if __name__ == "__main__":
    main()
