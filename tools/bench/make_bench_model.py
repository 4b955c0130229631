# Writes a random-weight benchmark model (Qwen2.5-0.5B or Llama-3.2-1B shape): an HF folder (bf16 safetensors) for loom and the same weights as a GGUF for llama.cpp.
"""Random-weight benchmark model with the exact shape of Qwen2.5-0.5B (default) or Llama-3.2-1B.

    .venv-bench/bin/python tools/bench/make_bench_model.py --out bench-models/qwen2.5-0.5b-shape
    .venv-bench/bin/python tools/bench/make_bench_model.py --out bench-models/llama3.2-1b-shape --shape llama3.2-1b

(--shape defaults to llama3.2-1b when the folder name starts with "llama3.2-1b".)

writes
    bench-models/qwen2.5-0.5b-shape/{config.json, generation_config.json, model.safetensors}
    bench-models/qwen2.5-0.5b-shape.f16.gguf      (--gguf-dtype f16, the default; bf16 also possible)

Only numpy and gguf are needed (no torch): weights are drawn with numpy's PCG64 generator (seeded)
as float32 N(0, 0.02), rounded to bf16 (round-to-nearest-even) and written as BF16 safetensors.
The GGUF holds exactly those bf16 values, converted to F16 (exact for all but the tiny values
below f16's normal range) or kept as BF16. Norm weights are 1.0 (the HF initialisation), so the
activations stay in a sane range; q/k/v biases are random like the matrices.

The GGUF follows llama.cpp's conventions for arch "qwen2" / "llama": norms F32, matrices F16/BF16,
tied embeddings (no output.weight), and tokenizer.ggml.model = "none" with <arch>.vocab_size set,
which makes llama.cpp create that many dummy tokens (no tokenizer: the benchmark feeds token ids).
The Llama shape uses plain RoPE (theta 500000) without Llama 3's frequency rescaling on both
sides: the rescaling only changes a table of 32 frequencies, not the work per token.
"""

import argparse
import json
import os
import struct
import sys
import time

import numpy as np

# The shapes (the real models' config.json values).
SHAPES = {
    "qwen2.5-0.5b": dict(arch="qwen2", hf_arch="Qwen2ForCausalLM", vocab=151936, hidden=896, ffn=4864,
                         layers=24, heads=14, kv_heads=2, head_dim=64, rope_theta=1000000.0,
                         rms_eps=1e-6, max_pos=32768, bos=151643, eos=151645, qkv_bias=True),
    "llama3.2-1b": dict(arch="llama", hf_arch="LlamaForCausalLM", vocab=128256, hidden=2048, ffn=8192,
                        layers=16, heads=32, kv_heads=8, head_dim=64, rope_theta=500000.0,
                        rms_eps=1e-5, max_pos=131072, bos=128000, eos=128001, qkv_bias=False),
}
STD = 0.02
S = SHAPES["qwen2.5-0.5b"]  # the shape being written (main() sets it)


def hf_tensor_specs():
    """(name, shape, kind) in a fixed order; kind is 'norm' (ones) or 'rand'."""
    hidden, ffn = S["hidden"], S["ffn"]
    q_dim, kv_dim = S["heads"] * S["head_dim"], S["kv_heads"] * S["head_dim"]
    specs = [("model.embed_tokens.weight", (S["vocab"], hidden), "rand")]
    for i in range(S["layers"]):
        p = f"model.layers.{i}."
        specs.append((p + "input_layernorm.weight", (hidden,), "norm"))
        for proj, rows in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
            specs.append((p + f"self_attn.{proj}_proj.weight", (rows, hidden), "rand"))
            if S["qkv_bias"]:
                specs.append((p + f"self_attn.{proj}_proj.bias", (rows,), "rand"))
        specs += [
            (p + "self_attn.o_proj.weight", (hidden, q_dim), "rand"),
            (p + "post_attention_layernorm.weight", (hidden,), "norm"),
            (p + "mlp.gate_proj.weight", (ffn, hidden), "rand"),
            (p + "mlp.up_proj.weight", (ffn, hidden), "rand"),
            (p + "mlp.down_proj.weight", (hidden, ffn), "rand"),
        ]
    specs.append(("model.norm.weight", (hidden,), "norm"))
    return specs


def gguf_name(hf_name):
    """llama.cpp tensor name for an HF Qwen2 / Llama tensor name."""
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    parts = hf_name.split(".")  # model.layers.N.<module>.<proj>.<weight|bias>
    i, rest = parts[2], ".".join(parts[3:])
    table = {
        "input_layernorm.weight": "attn_norm.weight",
        "self_attn.q_proj.weight": "attn_q.weight",
        "self_attn.q_proj.bias": "attn_q.bias",
        "self_attn.k_proj.weight": "attn_k.weight",
        "self_attn.k_proj.bias": "attn_k.bias",
        "self_attn.v_proj.weight": "attn_v.weight",
        "self_attn.v_proj.bias": "attn_v.bias",
        "self_attn.o_proj.weight": "attn_output.weight",
        "post_attention_layernorm.weight": "ffn_norm.weight",
        "mlp.gate_proj.weight": "ffn_gate.weight",
        "mlp.up_proj.weight": "ffn_up.weight",
        "mlp.down_proj.weight": "ffn_down.weight",
    }
    return f"blk.{i}.{table[rest]}"


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bf16 bit patterns, round to nearest even (no NaNs here)."""
    u = x.astype(np.float32, copy=False).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return ((u + rounding) >> np.uint32(16)).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def make_weights(seed):
    """Returns {hf_name: uint16 bf16 bits} (about 1 GB in all)."""
    rng = np.random.Generator(np.random.PCG64(seed))
    weights = {}
    for name, shape, kind in hf_tensor_specs():
        if kind == "norm":
            w = np.ones(shape, dtype=np.float32)
        else:
            w = rng.standard_normal(shape, dtype=np.float32)
            w *= np.float32(STD)
        weights[name] = f32_to_bf16_bits(w)
        del w
    return weights


def hf_config():
    cfg = {
        "architectures": [S["hf_arch"]],
        "model_type": S["arch"],
        "attention_dropout": 0.0,
        "bos_token_id": S["bos"],
        "eos_token_id": S["eos"],
        "hidden_act": "silu",
        "hidden_size": S["hidden"],
        "initializer_range": STD,
        "intermediate_size": S["ffn"],
        "max_position_embeddings": S["max_pos"],
        "num_attention_heads": S["heads"],
        "num_hidden_layers": S["layers"],
        "num_key_value_heads": S["kv_heads"],
        "head_dim": S["head_dim"],
        "rms_norm_eps": S["rms_eps"],
        # Both spellings: transformers 4.x reads rope_theta, 5.x rope_parameters.
        "rope_theta": S["rope_theta"],
        "rope_parameters": {"rope_theta": S["rope_theta"], "rope_type": "default"},
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": S["vocab"],
    }
    if S["arch"] == "qwen2":
        cfg.update({"max_window_layers": S["layers"], "sliding_window": None, "use_sliding_window": False,
                    "layer_types": ["full_attention"] * S["layers"]})
    else:
        cfg.update({"attention_bias": False, "mlp_bias": False, "pretraining_tp": 1})
    return cfg


def write_safetensors(path, weights):
    """Writes BF16 safetensors by hand (the format is an 8-byte header length, a JSON header, raw data)."""
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    names = sorted(weights)
    for name in names:
        n = weights[name].nbytes
        header[name] = {"dtype": "BF16", "shape": list(weights[name].shape),
                        "data_offsets": [offset, offset + n]}
        offset += n
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * (-len(hjson) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name in names:
            f.write(np.ascontiguousarray(weights[name]).astype("<u2", copy=False).tobytes())
    os.replace(tmp, path)


def write_gguf(path, weights, dtype):
    import gguf

    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, S["arch"])
    w.add_name(f"{os.path.basename(path).split('.')[0]} (random weights)")
    w.add_context_length(S["max_pos"])
    w.add_embedding_length(S["hidden"])
    w.add_block_count(S["layers"])
    w.add_feed_forward_length(S["ffn"])
    w.add_head_count(S["heads"])
    w.add_head_count_kv(S["kv_heads"])
    w.add_key_length(S["head_dim"])
    w.add_value_length(S["head_dim"])
    w.add_rope_dimension_count(S["head_dim"])
    w.add_rope_freq_base(S["rope_theta"])
    w.add_layer_norm_rms_eps(S["rms_eps"])
    w.add_vocab_size(S["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.MOSTLY_BF16)
    # No tokenizer: llama.cpp's "none" vocab type, sized by qwen2.vocab_size (dummy tokens).
    w.add_tokenizer_model("none")
    w.add_bos_token_id(S["bos"])
    w.add_eos_token_id(S["eos"])

    for name, shape, kind in hf_tensor_specs():
        bits = weights[name]
        gname = gguf_name(name)
        if len(shape) == 1 and kind == "norm":
            w.add_tensor(gname, bf16_bits_to_f32(bits))  # norms F32 (llama.cpp convention)
        elif len(shape) == 1:
            # Biases: F32 like llama.cpp's converter (1-D tensors stay F32).
            w.add_tensor(gname, bf16_bits_to_f32(bits))
        elif dtype == "f16":
            w.add_tensor(gname, bf16_bits_to_f32(bits).astype(np.float16))
        else:
            w.add_tensor(gname, bits, raw_shape=shape, raw_dtype=gguf.GGMLQuantizationType.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="HF folder to write, e.g. bench-models/qwen2.5-0.5b-shape")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None,
                    help="model shape (default: llama3.2-1b if the folder name starts with it, else qwen2.5-0.5b)")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--gguf-dtype", choices=["f16", "bf16"], default="f16",
                    help="matrix type in the GGUF (default f16)")
    ap.add_argument("--gguf", default=None,
                    help="GGUF path (default: <out>.<gguf-dtype>.gguf, next to the folder)")
    ap.add_argument("--no-gguf", action="store_true", help="write only the HF folder")
    ap.add_argument("--force", action="store_true", help="rewrite files that already exist")
    args = ap.parse_args()

    out = args.out.rstrip("/")
    global S
    shape = args.shape or ("llama3.2-1b" if os.path.basename(out).startswith("llama3.2-1b") else "qwen2.5-0.5b")
    S = SHAPES[shape]
    gguf_path = args.gguf or f"{out}.{args.gguf_dtype}.gguf"
    st_path = os.path.join(out, "model.safetensors")
    want_gguf = not args.no_gguf
    stamp_path = os.path.join(out, "bench_model.json")
    stamp = {"seed": args.seed, "std": STD, "generator": "numpy PCG64 standard_normal float32 -> bf16 RNE"}
    if shape != "qwen2.5-0.5b":  # (the Qwen stamp predates --shape: existing models stay up to date)
        stamp["shape"] = shape

    def up_to_date(path):
        if args.force or not os.path.exists(path) or not os.path.exists(stamp_path):
            return False
        with open(stamp_path) as f:
            return json.load(f) == stamp

    need_st = not up_to_date(st_path)
    need_gguf = want_gguf and not up_to_date(gguf_path)
    if not need_st and not need_gguf:
        print(f"[make_bench_model] up to date: {out}" + (f" and {gguf_path}" if want_gguf else ""))
        return 0

    os.makedirs(out, exist_ok=True)
    t0 = time.time()
    weights = make_weights(args.seed)
    n_params = sum(v.size for v in weights.values())
    print(f"[make_bench_model] {n_params / 1e6:.1f} M parameters drawn in {time.time() - t0:.1f} s")

    if need_st:
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(hf_config(), f, indent=2)
            f.write("\n")
        with open(os.path.join(out, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": S["bos"], "eos_token_id": S["eos"], "do_sample": False}, f, indent=2)
            f.write("\n")
        t1 = time.time()
        write_safetensors(st_path, weights)
        print(f"[make_bench_model] wrote {st_path} ({os.path.getsize(st_path) / 2**20:.0f} MiB, "
              f"{time.time() - t1:.1f} s)")
    if need_gguf:
        t1 = time.time()
        write_gguf(gguf_path, weights, args.gguf_dtype)
        print(f"[make_bench_model] wrote {gguf_path} ({os.path.getsize(gguf_path) / 2**20:.0f} MiB, "
              f"{time.time() - t1:.1f} s)")
    with open(stamp_path, "w") as f:
        json.dump(stamp, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
