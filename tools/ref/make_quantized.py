# Quantizes tiny fixture models with compressed-tensors' own code (W8A8 int-quantized, W4A16 pack-quantized) and dumps transformers reference outputs on CPU.
"""Pre-quantized compressed-tensors fixtures for loom.

Usage (compressed-tensors and loguru installed with --no-deps into a --target folder, so the
reference venv itself is not changed; see tools/ref/README.md):
    PYTHONPATH=/work/ct-pkgs .venv-ref/bin/python tools/ref/make_quantized.py --out tests/fixtures

Run after make_models.py (it reads tests/fixtures/models/<base>). Writes
    <out>/models/ct_<name>/        config.json (quantization_config), model.safetensors as
                                   compressed-tensors' ModelCompressor writes it
    <out>/golden/ct_<name>.json, .logits.safetensors, .greedy.safetensors
                                   transformers on CPU loading that folder (it decompresses the
                                   weights with compressed-tensors and, for W8A8, fake-quantizes
                                   the input activations per token at run time), same format as
                                   make_models.py's goldens
    <out>/golden/ct_<name>.lora.safetensors
                                   F32 "<adapter>.prompt_<i>" [len_i, vocab]: PEFT running a
                                   fixture adapter over that same transformers model
    <out>/golden/ct_<name>.dequant.safetensors
                                   compressed-tensors' own decompression of a few projections
                                   (F32 copies of its output; exact, its dtype is bf16)
"""

import argparse
import json
import os
import shutil
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GenerationConfig

sys.path.insert(0, os.path.dirname(__file__))
import make_models  # noqa: E402  (prompts, greedy, prompt_logits)

import compressed_tensors  # noqa: E402
from compressed_tensors.compressors import ModelCompressor  # noqa: E402
from compressed_tensors.quantization import (  # noqa: E402
    QuantizationConfig,
    QuantizationStatus,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils import calculate_qparams  # noqa: E402

# name -> (base fixture, config_groups {group: (targets, preset or dict)}, ignore)
W4_G32 = dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=32)
W4_G128 = dict(num_bits=4, type="int", symmetric=True, strategy="group", group_size=128)
FIXTURES = {
    # W8A8: int8 per-channel weights, dynamic per-token int8 activations ("int-quantized").
    "w8a8_llama": ("llama_bf16", {"group_0": (["Linear"], "W8A8")}, ["lm_head"]),
    # W4A16 groups of 32 everywhere, except groups of 128 where a projection has 128 inputs
    # (o_proj [64, 128] and down_proj [64, 128] of qwen3): a regex target ahead of "Linear".
    "w4a16_qwen3": ("qwen3_bf16",
                    {"group_0": (["Linear"], {"weights": W4_G32}),
                     "group_1": (["re:.*(o_proj|down_proj)$"], {"weights": W4_G128})},
                    ["lm_head"]),
    # W4A16 g32 on a model with q/k/v biases and tied embeddings.
    "w4a16_qwen2": ("qwen2_bf16", {"group_0": (["Linear"], {"weights": W4_G32})}, ["lm_head"]),
}
# PEFT adapters (tests/fixtures/adapters) run over each quantized model for the LoRA reference.
LORA = {"w8a8_llama": ["llama_qv_r8_f32", "llama_mlp_r6"], "w4a16_qwen3": ["qwen3_lora_bias", "qwen3_dora"],
        "w4a16_qwen2": ["qwen2_exclude"]}
# Projections whose decompressed weights are dumped for the bit-exact dequantization test.
DEQUANT_DUMP = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.o_proj",
                "model.layers.2.mlp.down_proj"]


def make_config(groups, ignore):
    config_groups = {}
    for gname, (targets, scheme) in groups.items():
        if isinstance(scheme, str):
            config_groups[gname] = compressed_tensors.quantization.preset_name_to_scheme(scheme, targets)
        else:
            config_groups[gname] = dict(targets=targets, **scheme)
    return QuantizationConfig(config_groups=config_groups, ignore=ignore,
                              quantization_status=QuantizationStatus.INITIALIZED)


@torch.no_grad()
def calibrate_weights(model):
    """Weight qparams from the weights' own min/max (what llm-compressor's minmax observer does)
    through compressed-tensors' calculate_qparams."""
    for name, module in model.named_modules():
        scheme = getattr(module, "quantization_scheme", None)
        if scheme is None or scheme.weights is None:
            continue
        args = scheme.weights
        w = module.weight
        if args.strategy == "channel":
            lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
        elif args.strategy == "group":
            g = w.reshape(w.shape[0], -1, args.group_size)
            lo, hi = g.amin(dim=2), g.amax(dim=2)
        else:
            raise ValueError(f"{name}: strategy {args.strategy}")
        scale, zp = calculate_qparams(lo, hi, args)
        module.weight_scale.data.copy_(scale.to(module.weight_scale.dtype))
        if hasattr(module, "weight_zero_point"):
            module.weight_zero_point.data.copy_(zp.to(module.weight_zero_point.dtype))
        module.quantization_status = QuantizationStatus.FROZEN


def build(name, out, prompts):
    base, groups, ignore = FIXTURES[name]
    src = os.path.join(out, "models", base)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    apply_quantization_config(model, make_config(groups, ignore))
    calibrate_weights(model)
    compressor = ModelCompressor.from_pretrained_model(model)
    compressor.compress_model(model)
    folder = os.path.join(out, "models", f"ct_{name}")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    compressor.update_config(folder)
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(folder)

    # Reference: transformers loads the folder as any user would (CPU, f32 compute).
    ref = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                               attn_implementation="eager")
    ref.eval()
    golden = os.path.join(out, "golden")
    gname = f"ct_{name}"
    logits, greedy_rows, greedy_ids, tops = {}, {}, [], []
    for i, ids in enumerate(prompts):
        logits[f"prompt_{i}"] = make_models.prompt_logits(ref, ids).contiguous()
        g, rows, top = make_models.greedy(ref, ids)
        greedy_ids.append(g)
        tops.append(top)
        greedy_rows[f"prompt_{i}"] = rows.contiguous()
    save_file(logits, os.path.join(golden, f"{gname}.logits.safetensors"))
    save_file(greedy_rows, os.path.join(golden, f"{gname}.greedy.safetensors"))
    with open(os.path.join(golden, f"{gname}.json"), "w") as f:
        json.dump({"model": gname, "prompts": prompts, "greedy": greedy_ids,
                   "top_logprobs": tops, "greedy_logits_file": f"{gname}.greedy.safetensors"}, f)
        f.write("\n")
    # compressed-tensors' own decompression of a few projections (what transformers now holds).
    mods = dict(ref.named_modules())
    deq = {n: mods[n].weight.detach().to(torch.float32).contiguous() for n in DEQUANT_DUMP}
    deq_dtype = {n: str(mods[n].weight.dtype) for n in DEQUANT_DUMP}
    save_file(deq, os.path.join(golden, f"{gname}.dequant.safetensors"))
    # LoRA reference: PEFT over the same transformers model (adapter unmerged, f32).
    from peft import PeftModel
    lora = {}
    for adapter in LORA.get(name, []):
        lora_base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                    attn_implementation="eager")
        # compressed-tensors decompresses on the first forward; PEFT needs the weights there.
        lora_base(input_ids=torch.tensor([[1]]))
        peft_model = PeftModel.from_pretrained(lora_base, os.path.join(out, "adapters", adapter)).eval()
        for i, ids in enumerate(prompts):
            lora[f"{adapter}.prompt_{i}"] = make_models.prompt_logits(peft_model, ids).contiguous()
    if lora:
        save_file(lora, os.path.join(golden, f"{gname}.lora.safetensors"))
    margin = min(float(r[0] - r[1]) for k in greedy_rows
                 for r in torch.topk(greedy_rows[k], 2, dim=-1).values)
    print(f"{gname}: from {base}, dequantized dtype {deq_dtype}, min greedy margin {margin:.3f}")


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
