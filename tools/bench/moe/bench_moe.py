# MoE forward side by side: loom vs llama.cpp on the same random Qwen3-30B-A3B-layer-shaped weights, with bytes read per decode token against active and total parameters.
"""    .venv-bench/bin/python tools/bench/moe/bench_moe.py [--layers 2]

Makes bench-models/qwen3-moe-a3b-<L>l (bf16 safetensors) and its F16 GGUF with
make_moe_bench_model.py if missing, then runs `loom bench` and bench_llamacpp.py on them (batch 1
and 8, prompt 64, 16 generated tokens, 2 threads), one after the other, and prints a Markdown table
(paste it into docs/PERFORMANCE.md) and one JSON line.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_core as core  # noqa: E402

H, HEADS, KV, HD, E, F, K, V = 2048, 32, 4, 128, 128, 768, 8, 151936


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--gen-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args()
    core.PRIORITY = -10
    model = os.path.join(core.ROOT, f"bench-models/qwen3-moe-a3b-{a.layers}l")
    gguf = model + ".f16.gguf"
    py = core.venv_python()
    if not os.path.exists(os.path.join(model, "model.safetensors")) or not os.path.exists(gguf):
        core.run([py, os.path.join(core.HERE, "moe", "make_moe_bench_model.py"), model, "--layers",
                  str(a.layers), "--gguf", gguf], timeout=3600)
    common = ["--threads", str(a.threads), "--prompt-len", str(a.prompt_len), "--gen-tokens", str(a.gen_tokens),
              "--batch", "1,8", "--repeats", str(a.repeats)]
    core.wait_idle(60)
    loom = core.last_json_line(core.run([os.path.join(core.ROOT, "build/loom"), "bench", "--model", model,
                                         "--no-check-weights", "--json"] + common, timeout=3600, name="loom"))
    core.wait_idle(60)
    llama = core.last_json_line(core.run([py, os.path.join(core.HERE, "bench_llamacpp.py"), "--gguf", gguf]
                                         + common, timeout=3600, name="llamacpp"))
    attn = H * (HEADS * HD) * 2 + H * (KV * HD) * 2
    active = a.layers * (attn + K * 3 * F * H + E * H) + V * H  # + the head
    total = a.layers * (attn + E * 3 * F * H + E * H) + V * H
    bw = core.last_json_line(core.run([py, os.path.join(core.HERE, "bench_core.py"), "--bandwidth-probe",
                                       str(a.threads), "1.0"], timeout=600, quiet=True))["gb_per_s"]
    rows = []
    for name, res in (("loom (bf16)", loom), ("llama.cpp (F16)", llama)):
        b1, b8 = core.by_batch(res, 1), core.by_batch(res, 8)
        d1 = b1.get("decode_tokens_per_s") or 0
        rows.append(f"| {name} | {core.fmt(b1.get('prefill_tokens_per_s'))} | {core.fmt(d1)} "
                    f"| {core.fmt(b8.get('prefill_tokens_per_s'))} | {core.fmt(b8.get('decode_tokens_per_s'))} "
                    f"| {d1 * active * 2 / 1e9:.1f} |")
    cpu, flags = core.cpu_info()
    print(f"{a.layers} layers, {cpu} ({', '.join(flags)}), {a.threads} threads, prompt {a.prompt_len}, "
          f"{a.gen_tokens} generated; active params per token {active / 1e6:.0f}M ({active * 2 / 1e9:.2f} GB "
          f"in 16-bit), all experts {total / 1e6:.0f}M; streaming bandwidth {bw:.1f} GB/s "
          f"(roofline at batch 1: {bw * 1e9 / (active * 2):.1f} tok/s if only routed experts are read, "
          f"{bw * 1e9 / (total * 2):.1f} if all are).")
    print()
    print("| engine | prefill b1 tok/s | decode b1 tok/s | prefill b8 tok/s | decode b8 tok/s | GB/s at decode b1 (active bytes × tok/s) |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(r)
    others = {k: v for k, v in core.OTHERS_CPU.items() if v > 0.05}
    if others:
        print("\nWarning: other processes used the CPUs: " + ", ".join(f"{k} {v:.0%}" for k, v in others.items()))
    print(json.dumps({"loom": loom, "llamacpp": llama, "active_params": active, "total_params": total, "gb_per_s": bw}))


if __name__ == "__main__":
    main()
