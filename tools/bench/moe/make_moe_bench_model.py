# Writes a random-weight Qwen3-MoE model with Qwen3-30B-A3B's layer shape and fewer layers (bf16), for loom bench.
"""Usage: python3 tools/bench/moe/make_moe_bench_model.py OUT_DIR [--layers 2]

Qwen3-30B-A3B layer: hidden 2048, 32 query / 4 KV heads of 128, 128 experts of 768, top-8,
norm_topk_prob; vocab 151936. Weights ~N(0, 0.02) in bf16 (numpy only, no torch).
"""
import argparse
import json
import os
import struct

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=2)
a = p.parse_args()
H, HEADS, KV, HD, E, F, K, V = 2048, 32, 4, 128, 128, 768, 8, 151936
os.makedirs(a.out, exist_ok=True)
config = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": H,
    "num_attention_heads": HEADS, "num_key_value_heads": KV, "head_dim": HD,
    "num_hidden_layers": a.layers, "num_experts": E, "moe_intermediate_size": F,
    "num_experts_per_tok": K, "norm_topk_prob": True, "intermediate_size": 6144,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": V, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 4096, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "hidden_act": "silu", "attention_bias": False, "torch_dtype": "bfloat16",
    "bos_token_id": 1, "eos_token_id": 2, "use_sliding_window": False,
}
with open(os.path.join(a.out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)

shapes = [("model.embed_tokens.weight", (V, H))]
for l in range(a.layers):
    p_ = f"model.layers.{l}."
    shapes += [(p_ + "input_layernorm.weight", (H,)), (p_ + "post_attention_layernorm.weight", (H,)),
               (p_ + "self_attn.q_proj.weight", (HEADS * HD, H)), (p_ + "self_attn.k_proj.weight", (KV * HD, H)),
               (p_ + "self_attn.v_proj.weight", (KV * HD, H)), (p_ + "self_attn.o_proj.weight", (H, HEADS * HD)),
               (p_ + "self_attn.q_norm.weight", (HD,)), (p_ + "self_attn.k_norm.weight", (HD,)),
               (p_ + "mlp.gate.weight", (E, H))]
    for e in range(E):
        x = f"{p_}mlp.experts.{e}."
        shapes += [(x + "gate_proj.weight", (F, H)), (x + "up_proj.weight", (F, H)), (x + "down_proj.weight", (H, F))]
shapes += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]

header, offset = {}, 0
for name, shape in shapes:
    n = int(np.prod(shape)) * 2
    header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
    offset += n
text = json.dumps(header).encode()
text += b" " * ((8 - len(text) % 8) % 8)
rng = np.random.default_rng(0)
with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for name, shape in shapes:
        if len(shape) == 1:
            v = np.ones(shape, dtype=np.float32)
        else:
            v = rng.standard_normal(shape, dtype=np.float32) * 0.02
        f.write((v.view(np.uint32) >> 16).astype(np.uint16).tobytes())
print("wrote", a.out, offset >> 20, "MiB")
