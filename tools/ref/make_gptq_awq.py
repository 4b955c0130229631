# Quantizes tiny fixture models into hub-format GPTQ (v1 and gptq_v2) and AWQ (GEMM) checkpoints, dumps the formats' own dequantization and transformers/PEFT references on CPU.
"""Pre-quantized GPTQ / AWQ fixtures for loom.

Usage (AutoAWQ installed with --no-deps into a --target folder; see tools/ref/README.md):
    PYTHONPATH=/work/pkgs-gptq .venv-ref/bin/python tools/ref/make_gptq_awq.py --out tests/fixtures

Neither gptqmodel (needs its C++/CUDA build) nor AutoAWQ's quantizer (its package imports
`datasets` and GPU helpers) runs here, and transformers on CPU cannot run either format without
gptqmodel. So:
  * quantization: round-to-nearest min/max per group with gptqmodel's Quantizer.find_params rules
    (asym: scale = (max(w,0) − min(w,0)) / 15, zero = round(−min/scale); sym: zero 8), for act
    order a GPTQ-style permutation (descending random "Hessian diagonal"; g_idx[perm[i]] = i //
    group_size) — GPTQ's error feedback is calibration, not format, and is left out;
  * packing: written here following gptqmodel's PackableQuantLinear.pack_original (qweight
    row r nibble j = input 8r + j; qzeros nibble j = output 8c + j; v1 stores zero − 1 by
    subtracting 0x11111111 per word, as gptqmodel's convert_gptq_v2_to_v1_format does) and
    AutoAWQ's WQLinear_GEMM.from_linear (order_map [0, 2, 4, 6, 1, 3, 5, 7]);
  * dequantization: AWQ with AutoAWQ's own unpack_awq + reverse_awq_order (awq/utils/
    packing_utils.py, loaded by path), GPTQ with gptqmodel's dequantize_weight steps (v1 → v2 by
    adding 0x11111111 per word; scales[g_idx] · (q − zeros[g_idx])), products in f32 (exact);
  * reference: transformers on CPU (f32, eager) with those dequantized weights in place of the
    projections (a MoE's experts into transformers 5's fused expert parameters); PEFT adapters
    over that model.
Writes, like make_quantized.py: <out>/models/<name>/, <out>/golden/<name>.{json,logits,greedy,
lora,dequant}.safetensors.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, GenerationConfig

sys.path.insert(0, os.path.dirname(__file__))
import make_models  # noqa: E402

# name -> (base, method, group_size, sym, desc_act, checkpoint_format)
FIXTURES = {
    "gptq_llama_g32_act": ("llama_bf16", "gptq", 32, False, True, "gptq"),
    "gptq_qwen2_g128_sym": ("qwen2_bf16", "gptq", 128, True, False, "gptq"),
    "gptq_llama_g64_v2": ("llama_bf16", "gptq", 64, False, False, "gptq_v2"),
    "awq_qwen2_g32": ("qwen2_bf16", "awq", 32, False, False, None),
    "gptq_qwen3_g32_sym_act": ("qwen3_bf16", "gptq", 32, True, True, "gptq"),
    # mixture of experts: experts quantized per expert (…experts.<e>.gate_proj.qweight, as
    # gptqmodel writes them), routers dense; from the 64-wide-expert models (make_moe_w64.py): the
    # formats pack 8 inputs per word and loom reads inputs in multiples of 32.
    "gptq_qwen3_moe_g32": ("qwen3_moe_w64_bf16", "gptq", 32, True, False, "gptq"),
    "gptq_mixtral_g32_act": ("mixtral_w64_bf16", "gptq", 32, False, True, "gptq"),
    "awq_qwen3_moe_g32": ("qwen3_moe_w64_bf16", "awq", 32, False, False, None),
}
LORA = {"gptq_llama_g32_act": ["llama_qv_r8_f32", "llama_mlp_r6"],
        "gptq_qwen2_g128_sym": ["qwen2_exclude"], "gptq_llama_g64_v2": ["llama_qv_r8_f32"],
        "awq_qwen2_g32": ["qwen2_exclude"], "gptq_qwen3_g32_sym_act": ["qwen3_dora", "qwen3_lora_bias"]}
PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
DEQUANT_DUMP = ["model.layers.0.self_attn.q_proj", "model.layers.1.self_attn.o_proj",
                "model.layers.2.mlp.down_proj"]
DEQUANT_DUMP_MOE = {  # the first one gets the zero points of 0 (asym)
    "gptq_qwen3_moe_g32": ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.experts.3.down_proj",
                           "model.layers.2.mlp.experts.5.gate_proj"],
    "gptq_mixtral_g32_act": ["model.layers.0.self_attn.q_proj", "model.layers.1.block_sparse_moe.experts.2.w2",
                             "model.layers.2.block_sparse_moe.experts.0.w1"],
    "awq_qwen3_moe_g32": ["model.layers.0.self_attn.q_proj", "model.layers.2.mlp.experts.7.down_proj",
                          "model.layers.0.mlp.experts.1.up_proj"],
}
EXPERT = re.compile(r"\.experts\.(\d+)\.(gate_proj|up_proj|down_proj|w1|w3|w2)$")


def is_projection(name):
    """`name` (a tensor) is the .weight of a projection both formats quantize (routers are not)."""
    if not name.endswith(".weight"):
        return False
    mod = name[: -len(".weight")]
    return any(mod.endswith(p) for p in PROJ) or EXPERT.search(mod) is not None


def put_weight(model, mod, w):
    """Copies `w` into `model`'s projection `mod` (the files' name): a Linear, or one expert's
    slice of transformers 5's fused gate_up_proj [E, 2I, H] (gate rows, then up) / down_proj."""
    m = EXPERT.search(mod)
    if m is None:
        model.state_dict()[mod + ".weight"].copy_(w)
        return
    block = mod[: m.start()].replace(".block_sparse_moe", ".mlp")  # transformers 5 names Mixtral's "mlp"
    e, leaf = int(m.group(1)), m.group(2)
    params = dict(model.named_parameters())
    if leaf in ("down_proj", "w2"):
        params[block + ".experts.down_proj"].data[e].copy_(w)
    else:
        p = params[block + ".experts.gate_up_proj"].data[e]
        i = p.shape[0] // 2
        (p[:i] if leaf in ("gate_proj", "w1") else p[i:]).copy_(w)
AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]




def find_awq_utils():
    spec = importlib.util.find_spec("awq")
    if spec is None:
        raise SystemExit("AutoAWQ not found: pip install --no-deps --target /work/pkgs-gptq autoawq")
    path = os.path.join(os.path.dirname(spec.origin), "utils", "packing_utils.py")
    s = importlib.util.spec_from_file_location("awq_packing_utils", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    return mod


def qparams(w, sym):
    """gptqmodel Quantizer.find_params (4 bits, per row of w [rows, members])."""
    maxq = 15
    xmin = torch.minimum(w.min(dim=1).values, torch.zeros(1))
    xmax = torch.maximum(w.max(dim=1).values, torch.zeros(1))
    if sym:
        xmax = torch.maximum(xmin.abs(), xmax)
        xmin = torch.where(xmin < 0, -xmax, xmin)
    tmp = (xmin == 0) & (xmax == 0)
    xmin[tmp], xmax[tmp] = -1, 1
    scale = ((xmax - xmin) / maxq).to(torch.float16).to(torch.float32)  # stored f16
    zero = torch.full_like(scale, (maxq + 1) / 2) if sym else torch.round(-xmin / scale)
    return scale, zero.clamp(0, maxq)


def quantize(W, group, sym, desc_act, gen, zero0=False):
    """W [out, in] f32 → int codes q [out, in], scales [groups, out], zeros [groups, out], g_idx [in].
    zero0: rows 0..7 of group 0 made non-negative first, so their zero point is 0 (GPTQ v1 then
    stores nibble 15 with a borrow — the case gptqmodel's +0x11111111 carries back)."""
    out, cin = W.shape
    g = cin if group == -1 else group
    if desc_act:
        perm = torch.argsort(torch.rand(cin, generator=gen), descending=True)
        g_idx = torch.empty(cin, dtype=torch.int32)
        g_idx[perm] = (torch.arange(cin) // g).to(torch.int32)
    else:
        g_idx = (torch.arange(cin) // g).to(torch.int32)
    groups = (cin + g - 1) // g
    scales = torch.zeros(groups, out)
    zeros = torch.zeros(groups, out)
    q = torch.zeros(out, cin, dtype=torch.int32)
    if zero0:
        W = W.clone()
        c0 = (g_idx == 0).nonzero().flatten()
        W[:8, c0] = W[:8, c0].abs()
    for gi in range(groups):
        cols = (g_idx == gi).nonzero().flatten()
        s, z = qparams(W[:, cols], sym)
        scales[gi], zeros[gi] = s, z
        q[:, cols] = torch.clamp(torch.round(W[:, cols] / s[:, None]) + z[:, None], 0, 15).to(torch.int32)
    return q, scales, zeros.to(torch.int32), g_idx


def pack_gptq(q, zeros, v2):
    """gptqmodel pack_original: qweight [in/8, out], nibble j of row r = input 8r + j; qzeros
    [groups, out/8], nibble j of column c = output 8c + j; v1 subtracts 0x11111111 per word."""
    qt = q.t().numpy().astype(np.uint32)  # [in, out]
    qweight = np.zeros((qt.shape[0] // 8, qt.shape[1]), dtype=np.uint32)
    for r in range(qweight.shape[0]):
        for j in range(8):
            qweight[r] |= qt[8 * r + j] << (4 * j)
    z = zeros.numpy().astype(np.uint32)  # [groups, out]
    qzeros = np.zeros((z.shape[0], z.shape[1] // 8), dtype=np.uint32)
    for c in range(qzeros.shape[1]):
        for j in range(8):
            qzeros[:, c] |= z[:, 8 * c + j] << (4 * j)
    if not v2:
        qzeros = (qzeros.astype(np.uint64) - 0x11111111) % (1 << 32)
        qzeros = qzeros.astype(np.uint32)
    return torch.from_numpy(qweight.view(np.int32)), torch.from_numpy(qzeros.view(np.int32))


def dequant_gptq(qweight, qzeros, scales, g_idx, v2):
    """gptqmodel dequantize_weight (after its v1 → v2 conversion), in f32: [out, in]."""
    qz = qzeros.numpy().view(np.uint32).astype(np.uint64)
    if not v2:
        qz = (qz + 0x11111111) % (1 << 32)
    wf = np.arange(0, 32, 4, dtype=np.uint64)
    zeros = ((qz[:, :, None] >> wf[None, None, :]) & 15).reshape(qz.shape[0], -1)
    qw = qweight.numpy().view(np.uint32).astype(np.uint64)
    weight = ((qw[:, None, :] >> wf[None, :, None]) & 15).reshape(-1, qw.shape[1])  # [in, out]
    gi = g_idx.long().numpy()
    w = scales.float().numpy()[gi] * (weight.astype(np.float32) - zeros.astype(np.float32)[gi])
    return torch.from_numpy(np.ascontiguousarray(w.T)).to(torch.float32)


def pack_awq(q, zeros):
    """AutoAWQ WQLinear_GEMM.from_linear: qweight [in, out/8], qzeros [groups, out/8]."""
    intweight = q.t().contiguous().to(torch.int32)  # [in, out]
    qweight = torch.zeros((intweight.shape[0], intweight.shape[1] // 8), dtype=torch.int32)
    for col in range(intweight.shape[1] // 8):
        for i in range(8):
            qweight[:, col] |= intweight[:, col * 8 + AWQ_ORDER[i]] << (i * 4)
    zeros = zeros.to(torch.int32)
    qzeros = torch.zeros((zeros.shape[0], zeros.shape[1] // 8), dtype=torch.int32)
    for col in range(zeros.shape[1] // 8):
        for i in range(8):
            qzeros[:, col] |= zeros[:, col * 8 + AWQ_ORDER[i]] << (i * 4)
    return qweight, qzeros


def dequant_awq(pu, qweight, qzeros, scales, group):
    """AutoAWQ's own unpack_awq + reverse_awq_order; (q − z) · s in f32: [out, in]."""
    iw, iz = pu.unpack_awq(qweight, qzeros, 4)
    iw, iz = pu.reverse_awq_order(iw, iz, 4)
    iw = torch.bitwise_and(iw, 15).to(torch.float32)
    iz = torch.bitwise_and(iz, 15).to(torch.float32).repeat_interleave(group, dim=0)
    s = scales.to(torch.float32).repeat_interleave(group, dim=0)
    return ((iw - iz) * s).t().contiguous()


def build(name, out, prompts, pu):
    base, method, group, sym, desc_act, fmt = FIXTURES[name]
    src = os.path.join(out, "models", base)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    cfg = json.load(open(os.path.join(src, "config.json")))
    gen = torch.Generator().manual_seed(1234)
    written, deq = {}, {}
    zero_zeros = 0
    dump = DEQUANT_DUMP_MOE.get(name, DEQUANT_DUMP)
    for k, t in tensors.items():
        if not is_projection(k):
            if k.endswith(".bias") and any(k.endswith(p + ".bias") for p in PROJ):
                written[k] = t.to(torch.float16)  # both formats store biases f16
            else:
                written[k] = t
            continue
        mod = k[: -len(".weight")]
        W = t.to(torch.float32)
        q, scales, zeros, g_idx = quantize(W, group, sym, desc_act, gen,
                                           zero0=not sym and mod == dump[0])
        zero_zeros += int((zeros == 0).sum())
        if method == "gptq":
            qweight, qzeros = pack_gptq(q, zeros, fmt == "gptq_v2")
            written[mod + ".qweight"], written[mod + ".qzeros"] = qweight, qzeros
            written[mod + ".scales"] = scales.to(torch.float16)
            written[mod + ".g_idx"] = g_idx
            deq[mod] = dequant_gptq(qweight, qzeros, scales.to(torch.float16), g_idx, fmt == "gptq_v2")
        else:
            qweight, qzeros = pack_awq(q, zeros)
            written[mod + ".qweight"], written[mod + ".qzeros"] = qweight, qzeros
            written[mod + ".scales"] = scales.to(torch.float16)
            deq[mod] = dequant_awq(pu, qweight, qzeros, scales.to(torch.float16), group)
        # The pack → the format's unpack round trip gives back the codes: s[g_idx] · (q − z[g_idx]).
        gi = g_idx.long()
        direct = scales[gi].t() * (q.to(torch.float32) - zeros[gi].t().to(torch.float32))
        assert torch.equal(deq[mod], direct), mod
    folder = os.path.join(out, "models", name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    save_file({k: v.contiguous() for k, v in written.items()}, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    if method == "gptq":
        qc = {"quant_method": "gptq", "bits": 4, "group_size": group, "desc_act": desc_act, "sym": sym,
              "true_sequential": True, "checkpoint_format": fmt, "lm_head": False,
              "meta": {"quantizer": ["loom tools/ref/make_gptq_awq.py"], "damp_percent": 0.05,
                       "static_groups": False}, "pack_dtype": "int32"}
    else:
        qc = {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True,
              "version": "gemm", "modules_to_not_convert": None}
    cfg["quantization_config"] = qc
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    GenerationConfig(bos_token_id=1, eos_token_id=2).save_pretrained(folder)

    def reference():
        ref = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager")
        sd = ref.state_dict()
        with torch.no_grad():
            for mod, w in deq.items():
                put_weight(ref, mod, w)
                if mod + ".bias" in written:
                    sd[mod + ".bias"].copy_(written[mod + ".bias"].to(torch.float32))
        return ref.eval()

    ref = reference()
    probe = None
    if "moe" in base or "mixtral" in base:  # router decisions near a tie would make a flaky golden
        from make_models_moe import RouterProbe
        if not hasattr(ref.config, "num_experts"):
            ref.config.num_experts = ref.config.num_local_experts
        probe = RouterProbe(ref)
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
        json.dump({"model": name, "prompts": prompts, "greedy": greedy_ids, "top_logprobs": tops,
                   "greedy_logits_file": f"{name}.greedy.safetensors"}, f)
        f.write("\n")
    save_file({n: deq[n].contiguous() for n in dump}, os.path.join(golden, f"{name}.dequant.safetensors"))
    from peft import PeftModel
    lora = {}
    for adapter in LORA.get(name, []):
        peft_model = PeftModel.from_pretrained(reference(), os.path.join(out, "adapters", adapter)).eval()
        for i, ids in enumerate(prompts):
            lora[f"{adapter}.prompt_{i}"] = make_models.prompt_logits(peft_model, ids).contiguous()
    if lora:
        save_file(lora, os.path.join(golden, f"{name}.lora.safetensors"))
    margin = min(float(r[0] - r[1]) for k in greedy_rows for r in torch.topk(greedy_rows[k], 2, dim=-1).values)
    nontrivial = any(not torch.equal(written[m + ".g_idx"].long(), torch.arange(written[m + ".g_idx"].numel()) // group)
                     for m in deq) if method == "gptq" and group > 0 else False
    print(f"{name}: from {base}, {method} g{group} sym={sym} desc_act={desc_act} format={fmt}, "
          f"non-trivial g_idx {nontrivial}, {zero_zeros} zero points of 0, min greedy margin {margin:.3f}"
          + (f", min router top-k margin {probe.min_margin:.3g}" if probe else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.manual_seed(0)
    prompts = make_models.make_prompts()
    pu = find_awq_utils()
    for name in args.only or FIXTURES:
        build(name, args.out, prompts, pu)


if __name__ == "__main__":
    main()
