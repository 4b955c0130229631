# Writes N random rank-R PEFT LoRA adapters (all seven projections) for the bench model, for `loom bench --lora`.
"""Random-weight PEFT LoRA adapters in PEFT's saved format (adapter_config.json +
adapter_model.safetensors, keys base_model.model.model.layers.N.<proj>.lora_{A,B}.weight),
shaped for bench-models/qwen2.5-0.5b-shape. Values only matter for speed, but are non-zero.

    .venv-bench/bin/python tools/bench/make_bench_adapters.py --count 8 --rank 16
"""
import argparse
import json
import os

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def save_safetensors(tensors, path):
    """Writes a safetensors file with numpy only (the bench venv has no safetensors package).
    uint16 arrays hold bf16 bits and are labelled BF16."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, x in tensors.items():
        dtype = {"float32": "F32", "uint16": "BF16"}[x.dtype.name]
        data = np.ascontiguousarray(x).tobytes()
        header[name] = {"dtype": dtype, "shape": list(x.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as fh:
        fh.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            fh.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "bench-models", "qwen2.5-0.5b-shape"))
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-models", "adapters"))
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    d, f, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"self_attn.q_proj": (q, d), "self_attn.k_proj": (kv, d), "self_attn.v_proj": (kv, d),
              "self_attn.o_proj": (d, q), "mlp.gate_proj": (f, d), "mlp.up_proj": (f, d),
              "mlp.down_proj": (d, f)}
    r = args.rank
    for i in range(args.count):
        rng = np.random.default_rng(1000 + i)
        tensors = {}
        for layer in range(layers):
            for name, (out_f, in_f) in shapes.items():
                key = f"base_model.model.model.layers.{layer}.{name}"
                a = (rng.standard_normal((r, in_f)) / np.sqrt(in_f)).astype(np.float32)
                b = (rng.standard_normal((out_f, r)) * 0.01).astype(np.float32)
                for suffix, x in (("lora_A.weight", a), ("lora_B.weight", b)):
                    if args.dtype == "bfloat16":  # round to nearest even, stored as uint16 bits
                        bits = x.view(np.uint32)
                        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
                        tensors[f"{key}.{suffix}"] = bits
                    else:
                        tensors[f"{key}.{suffix}"] = x
        folder = os.path.join(args.out, f"r{r}-{i}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "adapter_model.safetensors")
        save_safetensors(tensors, path)
        config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 2 * r,
                  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                     "down_proj"],
                  "lora_dropout": 0.0, "bias": "none", "use_rslora": False, "use_dora": False,
                  "base_model_name_or_path": "qwen2.5-0.5b-shape"}
        json.dump(config, open(os.path.join(folder, "adapter_config.json"), "w"), indent=2)
        print(folder, sum(t.nbytes for t in tensors.values()) / 2**20, "MiB")


if __name__ == "__main__":
    main()
