# Writes a random-weight Qwen3-MoE model with Qwen3-30B-A3B's layer shape and fewer layers (bf16), for loom bench.
"""Usage: python3 tools/bench/moe/make_moe_bench_model.py OUT_DIR [--layers 2] [--gguf OUT.gguf]

Qwen3-30B-A3B layer: hidden 2048, 32 query / 4 KV heads of 128, 128 experts of 768, top-8,
norm_topk_prob; vocab 151936. Weights ~N(0, 0.02) in bf16 (numpy only, no torch). --gguf also writes the same values as an F16
GGUF for llama.cpp (arch qwen3moe, experts stacked as ffn_{gate,up,down}_exps; needs the `gguf`
package, e.g. .venv-bench/bin/python).
"""
import argparse
import json
import os
import struct

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--layers", type=int, default=2)
p.add_argument("--gguf", default=None, help="also write the weights as an F16 GGUF here")
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
bits = {}  # name -> bf16 bit patterns, kept for the GGUF
with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for name, shape in shapes:
        if len(shape) == 1:
            v = np.ones(shape, dtype=np.float32)
        else:
            v = rng.standard_normal(shape, dtype=np.float32) * 0.02
        b = (v.view(np.uint32) >> 16).astype(np.uint16)
        f.write(b.tobytes())
        if a.gguf:
            bits[name] = b
print("wrote", a.out, offset >> 20, "MiB")


def f16(name):
    return (bits.pop(name).astype(np.uint32) << 16).view(np.float32).astype(np.float16)


def f32(name):
    return (bits.pop(name).astype(np.uint32) << 16).view(np.float32)


if a.gguf:
    import gguf

    w = gguf.GGUFWriter(a.gguf + ".tmp", "qwen3moe")
    w.add_name("qwen3-30b-a3b layer shape (random weights)")
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(H)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV)
    w.add_key_length(HD)
    w.add_value_length(HD)
    w.add_rope_freq_base(config["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_expert_count(E)
    w.add_expert_used_count(K)
    w.add_expert_feed_forward_length(F)
    w.add_vocab_size(V)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("none")  # no tokenizer: the benchmark feeds token ids
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", f16("model.embed_tokens.weight"))
    for l in range(a.layers):
        p_, b_ = f"model.layers.{l}.", f"blk.{l}."
        w.add_tensor(b_ + "attn_norm.weight", f32(p_ + "input_layernorm.weight"))
        w.add_tensor(b_ + "ffn_norm.weight", f32(p_ + "post_attention_layernorm.weight"))
        for src, dst in [("q_proj", "attn_q"), ("k_proj", "attn_k"), ("v_proj", "attn_v"), ("o_proj", "attn_output")]:
            w.add_tensor(b_ + dst + ".weight", f16(p_ + "self_attn." + src + ".weight"))
        w.add_tensor(b_ + "attn_q_norm.weight", f32(p_ + "self_attn.q_norm.weight"))
        w.add_tensor(b_ + "attn_k_norm.weight", f32(p_ + "self_attn.k_norm.weight"))
        w.add_tensor(b_ + "ffn_gate_inp.weight", f32(p_ + "mlp.gate.weight"))  # the router, F32 as converted
        for proj, dst in [("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")]:
            w.add_tensor(b_ + dst + ".weight",  # [E, out, in]
                         np.stack([f16(f"{p_}mlp.experts.{e}.{proj}.weight") for e in range(E)]))
    w.add_tensor("output_norm.weight", f32("model.norm.weight"))
    w.add_tensor("output.weight", f16("lm_head.weight"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    os.replace(a.gguf + ".tmp", a.gguf)
    print("wrote", a.gguf)
