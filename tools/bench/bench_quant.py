# Quantized decode/prefill side by side: loom bf16/int8/int4 vs llama.cpp F16/Q8_0/Q4_0/Q4_K_M on the same random weights, with each against the memory roofline; writes docs/QUANTIZATION.md's figures.
"""loom --quantize vs llama.cpp's own quantized types, one invocation, one after another.

    .venv-bench/bin/python tools/bench/bench_quant.py              # Qwen2.5-0.5B shape
    .venv-bench/bin/python tools/bench/bench_quant.py --model bench-models/llama3.2-1b-shape
    .venv-bench/bin/python tools/bench/bench_quant.py --prompt-len 512 --gen-tokens 8   # pp512
    .venv-bench/bin/python tools/bench/bench_quant.py --lora-only      # adapters over each scheme

Steps: makes the bench model (and its F16 GGUF) if missing; quantizes the GGUF with llama.cpp's own
`llama_model_quantize` to Q8_0, Q4_0 and Q4_K_M (cached next to it); measures streaming bandwidth;
runs `loom [--quantize S --quantize-head] bench --json` for bf16, int8, int4 (groups 128 and 32) and
bench_llamacpp.py on each GGUF; writes the table between the `bench:quant:<model>` markers of
docs/QUANTIZATION.md (`bench:quant:<model>[-pp<N>]` when the prompt is not 128 tokens). With
--lora-configs (default: bf16, int8, int4 g128) it also runs `loom bench --lora` with 8 rank-16
adapters (make_bench_adapters.py; made if missing) over each scheme, batch-invariant kernels as
`loom serve` runs them: base vs one adapter at batch 1 and 8 base sequences vs 8 different
adapters, into the `bench:quant-lora:<model>` markers. Roofline: bandwidth / bytes each decode step streams (loom: every matrix in
its scheme's bytes, the head in the same scheme; llama.cpp: the GGUF's tensor bytes).
"""

import argparse
import datetime
import json
import os
import shlex
import struct
import sys

import bench_core as core

ROOT, HERE = core.ROOT, core.HERE

# name, loom flags, bytes per weight of a [rows, k] matrix as a function of k
LOOM_CONFIGS = [
    ("bf16", [], lambda k: 2.0),
    ("int8", ["--quantize", "int8", "--quantize-head"], lambda k: 1.0 + 8.0 / k),
    ("int4 g128", ["--quantize", "int4", "--quantize-head"],
     lambda k: (-(-k // 128) * 128) / k * (0.5 + 2.0 / 128)),
    ("int4 g32", ["--quantize", "int4", "--quantize-group-size", "32", "--quantize-head"],
     lambda k: (-(-k // 128) * 128) / k * (0.5 + 2.0 / 32)),
]
LLAMA_TYPES = [("F16", None), ("Q8_0", 7), ("Q4_0", 2), ("Q4_K_M", 15)]  # llama_ftype values


def loom_bytes_per_token(model_dir, bpw):
    """Every 2-D matrix once in the scheme's bytes (tied embedding counted once, as the head); 1-D tensors
    in their file bytes."""
    total, has_head, embed = 0.0, False, 0.0
    for fn in sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors")):
        with open(os.path.join(model_dir, fn), "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            shape = info["shape"]
            if len(shape) == 2:
                b = shape[0] * shape[1] * bpw(shape[1])
            else:
                b = info["data_offsets"][1] - info["data_offsets"][0]
            total += b
            if name.endswith("embed_tokens.weight"):
                embed = b
            has_head = has_head or name == "lm_head.weight"
    return total - embed if has_head else total


def gguf_tensor_bytes(path):
    import gguf
    r = gguf.GGUFReader(path)
    names = {t.name for t in r.tensors}
    total = sum(int(t.n_bytes) for t in r.tensors)
    if "output.weight" in names:  # untied: the embedding table is only looked up
        total -= sum(int(t.n_bytes) for t in r.tensors if t.name == "token_embd.weight")
    return total


def quantize_gguf(py, src, dst, ftype):
    if os.path.exists(dst):
        return
    code = ("import llama_cpp as L, sys\n"
            "p = L.llama_model_quantize_default_params()\n"
            f"p.ftype = {ftype}\np.nthread = 2\n"
            "rc = L.llama_model_quantize(sys.argv[1].encode(), (sys.argv[2] + '.tmp').encode(), p)\n"
            "sys.exit(rc)\n")
    core.run([py, "-c", code, src, dst], timeout=3600)
    os.replace(dst + ".tmp", dst)


def row(label, res, roof_tps):
    b1, b8 = core.by_batch(res, 1), core.by_batch(res, 8)
    d1 = b1.get("decode_tokens_per_s")
    pct = f"{100 * d1 / roof_tps:.0f}%" if d1 and roof_tps else "n/a"
    return (f"| {label} | {core.fmt(d1)} | {core.fmt(b8.get('decode_tokens_per_s'))} "
            f"| {core.fmt(b1.get('prefill_tokens_per_s'))} | {core.fmt(b8.get('prefill_tokens_per_s'))} "
            f"| {core.fmt(res.get('peak_rss_mib'), 0)} | {roof_tps:.1f} ({pct}) |")


def lora_adapters(py, model, folder):
    """Paths of 8 rank-16 bf16 adapters for `model` (made with make_bench_adapters.py if missing)."""
    tag = os.path.basename(model)
    folder = folder or os.path.join(ROOT, "bench-models", "adapters" if tag == "qwen2.5-0.5b-shape"
                                    else tag + "-adapters")
    paths = [os.path.join(folder, f"r16-{i}") for i in range(8)]
    if not all(os.path.exists(os.path.join(p, "adapter_model.safetensors")) for p in paths):
        core.run([py, os.path.join(HERE, "make_bench_adapters.py"), "--model", model, "--out", folder,
                  "--count", "8", "--rank", "16"], timeout=1800)
    return paths


def lora_md(tag, date, cpu, flags, args, lora_rows):
    """Adapter cost over each weight scheme: batch 1 (one adapter vs none) and batch 8 (8 different
    adapters vs 8 base sequences), decode and prefill, from `loom bench --lora --json`."""
    L = [f"<!-- bench:quant-lora:{tag}:begin -->",
         f"### {tag}: rank-16 adapters over each weight scheme (measured {date})",
         "",
         f"**{cpu}** ({', '.join(flags)}), {args.threads} threads, prompt 128, {args.gen_tokens} generated "
         f"tokens per sequence, best of {args.repeats}, batch-invariant kernels (as `loom serve`); 8 rank-16 "
         f"bf16 adapters on all 7 projections (make_bench_adapters.py); scenarios interleaved in one process.",
         "",
         "| base weights | decode b1: base / 1 adapter (cost) | decode b8: base / 8 different adapters (share) "
         "| prefill b1: base / 1 adapter | prefill b8: base / 8 adapters |",
         "|---|---:|---:|---:|---:|"]
    for label, res in lora_rows:
        by = {r["scenario"]: r for r in res.get("lora_results", [])}
        def f(name, key):
            return (by.get(name) or {}).get(key)
        d1b, d1a = f("base, batch 1", "decode_tokens_per_s"), f("adapter unmerged, batch 1", "decode_tokens_per_s")
        d8b, d8a = f("base, batch 8", "decode_tokens_per_s"), f("8 different adapters, batch 8", "decode_tokens_per_s")
        # loom bench's median of per-repeat ratios where it reports them (steadier on a drifting
        # VM), else the ratio of the bests.
        r1, r8 = res.get("decode_ratio_one_adapter_median"), res.get("decode_ratio_wide_adapters_median")
        if not r1 and d1a and d1b:
            r1 = d1a / d1b
        if not r8 and d8a and d8b:
            r8 = d8a / d8b
        cost = f"{100 * (1 - r1):.1f}%" if r1 else "n/a"
        share = f"{100 * r8:.0f}%" if r8 else "n/a"
        L.append(f"| {label.replace('loom ', '')} | {core.fmt(d1b)} / {core.fmt(d1a)} ({cost}) "
                 f"| {core.fmt(d8b)} / {core.fmt(d8a)} ({share}) "
                 f"| {core.fmt(f('base, batch 1', 'prefill_tokens_per_s'))} / "
                 f"{core.fmt(f('adapter unmerged, batch 1', 'prefill_tokens_per_s'))} "
                 f"| {core.fmt(f('base, batch 8', 'prefill_tokens_per_s'))} / "
                 f"{core.fmt(f('8 different adapters, batch 8', 'prefill_tokens_per_s'))} |")
    others = {k: v for k, v in core.OTHERS_CPU.items() if v > 0.05}
    L.append("")
    if others:
        L.append("**Warning: other processes used the CPUs during " +
                 ", ".join(f"{k} ({v:.0%})" for k, v in others.items()) + "; rerun on an idle machine.**")
        L.append("")
    L += ["Rerun: `.venv-bench/bin/python tools/bench/bench_quant.py --lora-only`",
          f"<!-- bench:quant-lora:{tag}:end -->"]
    section = "\n".join(L)
    print(section)
    return section


def write_section(doc_rel, marker, section):
    """Replaces the text between <!-- bench:MARKER:begin/end --> in the doc (appends it if absent)."""
    doc = os.path.join(ROOT, doc_rel)
    text = open(doc).read()
    begin, end = f"<!-- bench:{marker}:begin -->", f"<!-- bench:{marker}:end -->"
    if begin in text and end in text:
        text = text.split(begin, 1)[0] + section + text.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(doc + ".tmp", "w") as f:
        f.write(text)
    os.replace(doc + ".tmp", doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--model", default="bench-models/qwen2.5-0.5b-shape")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--doc", default="docs/QUANTIZATION.md")
    ap.add_argument("--only", default=None, help="comma-separated config labels to run (default: all)")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--lora-configs", default="bf16,int8,int4 g128",
                    help="loom configs to measure with 8 adapters ('' for none)")
    ap.add_argument("--lora-only", action="store_true", help="only the adapter measurements")
    ap.add_argument("--adapters", default=None,
                    help="folder of r16-0..7 adapters (default: bench-models/adapters for the Qwen "
                         "shape, else <model>-adapters; made if missing)")
    args = ap.parse_args()
    core.PRIORITY = -10
    model = os.path.join(ROOT, args.model.rstrip("/"))
    tag = os.path.basename(model)
    gguf_f16 = model + ".f16.gguf"
    py = core.venv_python()
    if not os.path.exists(os.path.join(model, "model.safetensors")) or not os.path.exists(gguf_f16):
        core.run([py, os.path.join(HERE, "make_bench_model.py"), "--out", os.path.relpath(model, ROOT),
                  "--gguf", os.path.relpath(gguf_f16, ROOT)], timeout=1800)
    ggufs = {}
    for name, ftype in LLAMA_TYPES:
        path = gguf_f16 if ftype is None else f"{model}.{name.lower()}.gguf"
        if ftype is not None and not args.lora_only:
            quantize_gguf(py, gguf_f16, path, ftype)
        ggufs[name] = path
    only = set(args.only.split(",")) if args.only else None
    if args.lora_only:
        only = set()
    suffix = "" if args.prompt_len == 128 else f"-pp{args.prompt_len}"
    bw = core.last_json_line(core.run([py, os.path.join(HERE, "bench_core.py"), "--bandwidth-probe",
                                       str(args.threads), "1.0"], timeout=600, quiet=True))
    gbps = bw["gb_per_s"]
    core.log(f"bandwidth {gbps:.1f} GB/s ({args.threads} threads)")
    common = ["--threads", str(args.threads), "--prompt-len", str(args.prompt_len), "--gen-tokens",
              str(args.gen_tokens), "--batch", "1,8", "--repeats", str(args.repeats)]
    rows = []
    for label, flags, bpw in LOOM_CONFIGS:
        if only is not None and label not in only:
            continue
        core.wait_idle(60)
        res = core.last_json_line(core.run([os.path.join(ROOT, args.loom)] + flags +
                                           ["bench", "--model", model, "--no-check-weights", "--json"] + common,
                                           timeout=args.timeout, name="loom " + label))
        roof = gbps * 1e9 / loom_bytes_per_token(model, bpw)
        rows.append(("loom " + label, res, roof))
    for name, path in ggufs.items():
        if only is not None and name not in only:
            continue
        core.wait_idle(60)
        # llama.cpp's AMX buffer type for quantized weights dies here with SIGILL at its first
        # tileloadd (the AMX tile state is not granted to it on this entry point), so its
        # quantized types run on its AVX512-VNNI kernels; F16 keeps its default.
        extra = [] if name == "F16" else ["--extra-bufts", "off"]
        res = core.last_json_line(core.run([py, os.path.join(HERE, "bench_llamacpp.py"), "--gguf", path] + common
                                           + extra, timeout=args.timeout, name="llama.cpp " + name))
        rows.append(("llama.cpp " + name, res, gbps * 1e9 / gguf_tensor_bytes(path)))
    lora_rows = []
    lora_configs = ([c for c in args.lora_configs.split(",") if c]
                    if not args.only and args.prompt_len == 128 else [])
    if lora_configs:
        adapters = lora_adapters(py, model, args.adapters)
        for label, flags, _ in LOOM_CONFIGS:
            if label not in lora_configs:
                continue
            core.wait_idle(60)
            res = core.last_json_line(core.run(
                [os.path.join(ROOT, args.loom)] + flags + ["bench", "--model", model, "--no-check-weights",
                 "--batch-invariant", "--json", "--lora"] + adapters +
                ["--threads", str(args.threads), "--prompt-len", "128", "--gen-tokens", str(args.gen_tokens),
                 "--repeats", str(args.repeats)], timeout=args.timeout, name="loom lora " + label))
            lora_rows.append(("loom " + label, res))
    cpu, flags = core.cpu_info()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    others = {k: v for k, v in core.OTHERS_CPU.items() if v > 0.05}
    if lora_rows:
        write_section(args.doc, f"quant-lora:{tag}", lora_md(tag, date, cpu, flags, args, lora_rows))
    if not rows:
        return 0
    tag += suffix
    L = [f"<!-- bench:quant:{tag}:begin -->",
         f"### {tag}: loom vs llama.cpp, quantized (measured {date})",
         "",
         f"**{cpu}** ({', '.join(flags)}), {args.threads} threads, prompt {args.prompt_len}, "
         f"{args.gen_tokens} generated tokens per sequence, best of {args.repeats} after a warm-up; same random "
         f"weights (loom from the bf16 safetensors, quantized at load; llama.cpp from the F16 GGUF, quantized "
         f"by its own `llama_model_quantize`; its quantized types with `--extra-bufts off`: "
         + ("its AMX-INT8 buffer type dies with SIGILL at its first `tileloadd` on this VM, so they run its "
            "AVX512-VNNI kernels" if any(f.startswith("amx") for f in flags)
            else "no AMX on this CPU, so that changes nothing")
         + f"). Roofline = {gbps:.1f} GB/s streaming read / bytes one decode step reads in that format.",
         "",
         "| engine, weights | decode b1 tok/s | decode b8 tok/s | prefill b1 tok/s | prefill b8 tok/s "
         "| peak RSS MiB | b1 roofline tok/s (share) |",
         "|---|---:|---:|---:|---:|---:|---:|"]
    L += [row(label, res, roof) for label, res, roof in rows]
    L.append("")
    if others:
        L.append("**Warning: other processes used the CPUs during " +
                 ", ".join(f"{k} ({v:.0%})" for k, v in others.items()) + "; rerun on an idle machine.**")
        L.append("")
    cmd = ".venv-bench/bin/python tools/bench/bench_quant.py" + (" " + shlex.join(sys.argv[1:]) if sys.argv[1:] else "")
    L += ["Rerun: `" + cmd + "`", f"<!-- bench:quant:{tag}:end -->"]
    section = "\n".join(L)
    print(section)
    if not only:
        write_section(args.doc, f"quant:{tag}", section)
    print(json.dumps({label: {"results": res.get("results"), "roofline_tps": roof} for label, res, roof in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
