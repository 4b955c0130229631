# Tiny random mixture-of-experts checkpoints whose experts are 64 wide (Qwen3-MoE, Mixtral; bf16), for int4 experts in `loom quantize` tests and the GPTQ/AWQ MoE fixtures.
"""Writes tests/fixtures/models/{qwen3_moe_w64_bf16, mixtral_w64_bf16}: the shapes of make_models_moe.py's
fixtures but with 64-wide experts, so a group of 32 or 64 divides both of an expert's input widths
(the fixtures' 24- and 48-wide experts have none, and their int4 experts stay dense). No goldens:
tests/golden/ct_quantize_golden_test.cc compares loom with loom (`loom quantize` vs `--quantize`
at load, bitwise), tools/ref/check_loom_quantize.py compares with transformers live, and
make_gptq_awq.py quantizes them into the GPTQ/AWQ MoE fixtures (with references).

    .venv-ref/bin/python tools/ref/make_moe_w64.py --out tests/fixtures

make_models_moe.py's configs and initialisation (its seeds, router scale and logit scale), with
the expert width set to 64. Deterministic; a second or so.
"""

import argparse
import os
import sys

import torch
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_models import save_model  # noqa: E402
from make_models_moe import SEEDS, make_config, reinit_  # noqa: E402


def make_w64(name, folder):
    arch = "qwen3_moe" if name.startswith("qwen3_moe") else "mixtral"
    cfg = make_config(arch)
    if arch == "qwen3_moe":
        cfg.moe_intermediate_size = 64
    else:
        cfg.intermediate_size = 64  # Mixtral's per-expert width
    seed = SEEDS[arch]
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    reinit_(model, seed)
    save_model(model.eval(), folder, "bf16", shard=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures")
    a = ap.parse_args()
    for name in ("qwen3_moe_w64_bf16", "mixtral_w64_bf16"):
        make_w64(name, os.path.join(a.out, "models", name))
        print("wrote", name)


if __name__ == "__main__":
    main()
