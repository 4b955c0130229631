# LoRA peer benchmark: loom's adapter scenarios (unmerged, merged, 8 different adapters, load time) next to llama.cpp's runtime LoRA on the same rank-16 adapter; writes docs/PERFORMANCE.md's bench:lora section.
"""loom vs llama.cpp with a LoRA adapter, same random-weight Qwen2.5-0.5B-shaped model, one invocation.

    .venv-bench/bin/python tools/bench/bench_lora.py            # all defaults, as below

Steps (one after another, nothing overlaps):
  1. checks the model (make_bench_model.py if missing) and the PEFT adapters bench-models/adapters/r16-0..7
     (written by make_bench_adapters.py);
  2. converts r16-0 (PEFT safetensors, BF16) to a GGUF LoRA adapter bench-models/adapters/r16-0.gguf
     (see convert_peft_to_gguf) unless it is up to date;
  3. checks the conversion: llama.cpp loads it, it changes the logits, and llama.cpp's adapted
     log-probs agree with `loom generate --lora` (which matches PEFT) on the same prompt, while a
     wrong scale (half of it) or no adapter do not;
  4. `build/loom bench --model M --threads T --prompt-len P --gen-tokens G --repeats R --lora r16-0 ... r16-7 --json`
     (base b1, adapter unmerged b1, adapter merged b1, base b8, 8 different adapters b8, adapter load ms);
  5. llama.cpp through llama-cpp-python (this script run as a child): base and r16-0.gguf applied at
     runtime (llama_adapter_lora_init + llama_set_adapters_lora, scale 1.0), batch 1, prefill and decode
     tokens/s, interleaved, best of R; adapter load time;
  6. rewrites the part of docs/PERFORMANCE.md between <!-- bench:lora:begin --> and <!-- bench:lora:end -->
     (appended at the end of the file if the markers are absent).
The combined figures are printed as one JSON line at the end (and written to --json-out if given).
The idle check, the during-run CPU accounting and the priority of the measuring processes are
bench_core.py's.
"""

import argparse
import ctypes
import datetime
import json
import os
import platform
import shlex
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench_core as core  # noqa: E402  (sets OPENBLAS_NUM_THREADS=1, imports numpy)
import numpy as np  # noqa: E402

ROOT = core.ROOT
BEGIN, END = "<!-- bench:lora:begin -->", "<!-- bench:lora:end -->"
NOISE = 0.03  # |merged / base - 1| below this counts as "equal within noise" (best-of-R run-to-run spread)

# PEFT module path -> llama.cpp tensor name part (Qwen2; the same table as make_bench_model.gguf_name)
PROJ = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def log(msg):
    print(f"[bench_lora] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# safetensors (read by hand: the venv has numpy and gguf, no safetensors package)


def safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(n)), 8 + n


def safetensors_tensor_bytes(path):
    header, _ = safetensors_header(path)
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")


def read_safetensors_f32(path):
    """{name: float32 array} for F32 / F16 / BF16 tensors."""
    header, base = safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            s, e = info["data_offsets"]
            f.seek(base + s)
            raw = f.read(e - s)
            dt = info["dtype"]
            if dt == "BF16":
                x = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << np.uint32(16)).view(np.float32)
            elif dt == "F16":
                x = np.frombuffer(raw, dtype="<f2").astype(np.float32)
            elif dt == "F32":
                x = np.frombuffer(raw, dtype="<f4").copy()
            else:
                raise ValueError(f"{path}: tensor {name} has dtype {dt} (F32, F16 or BF16 expected)")
            out[name] = x.reshape(info["shape"])
    return out


# ---------------------------------------------------------------------------------------------
# PEFT -> GGUF LoRA adapter


def peft_to_gguf_name(key):
    """'base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight' -> 'blk.3.attn_q.weight.lora_a'."""
    k = key
    for prefix in ("base_model.model.", ""):
        if k.startswith(prefix + "model.layers."):
            k = k[len(prefix) + len("model.layers."):]
            break
    else:
        raise ValueError(f"unexpected adapter tensor {key}")
    layer, rest = k.split(".", 1)
    for suffix, gsuffix in ((".lora_A.weight", "lora_a"), (".lora_B.weight", "lora_b")):
        if rest.endswith(suffix):
            module = rest[: -len(suffix)]
            if module not in PROJ:
                break
            return f"blk.{int(layer)}.{PROJ[module]}.weight.{gsuffix}"
    raise ValueError(f"unexpected adapter tensor {key} (only lora_A/lora_B of the 7 projections are converted)")


def convert_peft_to_gguf(adapter_dir, out_path, dtype="f16"):
    """Writes a llama.cpp LoRA adapter GGUF for a PEFT adapter of the Qwen2 bench model.

    llama.cpp's format (llama-adapter.cpp, convert_lora_to_gguf.py): general.type = "adapter",
    general.architecture = the base model's ("qwen2"), adapter.type = "lora", adapter.lora.alpha
    (float32); one tensor pair per adapted weight, named after the base tensor plus ".lora_a" /
    ".lora_b". PEFT's lora_A [r, in] and lora_B [out, r] are stored with the same numpy shapes
    (ggml ne = [in, r] and [r, out]: llama.cpp checks base.ne[0] == a.ne[0], base.ne[1] == b.ne[1],
    a.ne[1] == b.ne[0]) and computes delta = scale * B (A x) with scale = adapter_scale * alpha / rank,
    rank = b.ne[0] = r. With adapter_scale 1.0 this is PEFT's lora_alpha / r.
    Returns a summary dict.
    """
    import gguf

    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    for k, bad in (("use_rslora", True), ("use_dora", True)):
        if cfg.get(k) == bad:
            raise SystemExit(f"{adapter_dir}: {k} is not handled by this converter")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise SystemExit(f"{adapter_dir}: rank_pattern / alpha_pattern are not handled by this converter")
    r, alpha = int(cfg["r"]), float(cfg["lora_alpha"])
    st = os.path.join(adapter_dir, "adapter_model.safetensors")
    tensors = read_safetensors_f32(st)
    np_dtype = {"f16": np.float16, "f32": np.float32}[dtype]
    tmp = out_path + ".tmp"
    w = gguf.GGUFWriter(tmp, "qwen2")  # writes general.architecture = "qwen2"
    w.add_type(gguf.GGUFType.ADAPTER)  # general.type = "adapter"
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")  # adapter.type
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)  # adapter.lora.alpha
    w.add_name(f"{os.path.basename(adapter_dir.rstrip('/'))} (PEFT LoRA r={r}, alpha={alpha:g})")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if dtype == "f16" else gguf.LlamaFileType.ALL_F32)
    inexact, count, shapes = 0, 0, {}
    for key in sorted(tensors, key=lambda k: (int(k.split("layers.")[1].split(".")[0]), k)):
        x = tensors[key]
        name = peft_to_gguf_name(key)
        if name.endswith("lora_a") and x.shape[0] != r or name.endswith("lora_b") and x.shape[1] != r:
            raise SystemExit(f"{key}: shape {list(x.shape)} does not have rank {r}")
        y = np.ascontiguousarray(x.astype(np_dtype))
        inexact += int(np.count_nonzero(y.astype(np.float32) != x))
        count += x.size
        w.add_tensor(name, y)
        if name.startswith("blk.0."):
            shapes[name] = list(y.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()
    os.replace(tmp, out_path)
    return {"path": out_path, "dtype": dtype, "rank": r, "alpha": alpha, "scale": alpha / r,
            "n_tensors": len(tensors), "n_values": count, "values_not_exact": inexact,
            "bytes": os.path.getsize(out_path), "layer0_shapes": shapes,
            "source": os.path.relpath(st, ROOT)}


def gguf_up_to_date(adapter_dir, out_path, dtype):
    if not os.path.exists(out_path):
        return False
    src = max(os.path.getmtime(os.path.join(adapter_dir, f))
              for f in ("adapter_config.json", "adapter_model.safetensors"))
    if os.path.getmtime(out_path) < src:
        return False
    try:
        import gguf
        rd = gguf.GGUFReader(out_path)
        want = gguf.GGMLQuantizationType.F16 if dtype == "f16" else gguf.GGMLQuantizationType.F32
        return all(t.tensor_type == want for t in rd.tensors)
    except Exception:  # noqa: BLE001  (unreadable = rewrite it)
        return False


# ---------------------------------------------------------------------------------------------
# llama.cpp side (run as a child process: `bench_lora.py --llamacpp-child verify|bench ...`)


def llamacpp_child(args):
    import llama_cpp as L
    import bench_llamacpp as BL

    BL._LOG_ECHO = args.verbose
    L.llama_log_set(BL._log_cb, ctypes.c_void_p())
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    model = L.llama_model_load_from_file(args.gguf.encode(), mp)
    if not model:
        sys.stderr.write("".join(BL._LOG_LINES[-30:]))
        raise SystemExit(f"llama.cpp could not load {args.gguf}")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = {"engine": "llama.cpp", "llama_cpp_python": L.__version__, "lora_gguf": args.lora_gguf,
           "threads": args.threads, "system_info": L.llama_print_system_info().decode().strip()}

    # Adapter load: llama_adapter_lora_init from a warm page cache (the file was just written/read).
    load_ms, adapter = [], None
    for i in range(5):
        BL._LOG_LINES.clear()
        t0 = time.perf_counter()
        ad = L.llama_adapter_lora_init(model, args.lora_gguf.encode())
        dt = (time.perf_counter() - t0) * 1e3
        if not ad:
            sys.stderr.write("".join(BL._LOG_LINES[-30:]))
            raise SystemExit(f"llama.cpp could not load the adapter {args.lora_gguf}")
        load_ms.append(dt)
        if i == 0:
            lines = "".join(BL._LOG_LINES)
            out["adapter_log"] = [" ".join(s.split(":", 1)[-1].split()) for s in lines.splitlines()
                                  if "tensors from lora file" in s or "LoRA buffer size" in s]
            fallbacks = [s for s in lines.splitlines() if "cannot use buft" in s]
            out["adapter_buft_fallbacks"] = len(fallbacks)
            if fallbacks:  # e.g. "lora for 'blk.0.attn_q.weight' cannot use buft 'CPU_REPACK', fallback to CPU"
                out["adapter_buft_fallback_example"] = " ".join(fallbacks[0].split(":", 1)[-1].split())
            buf = ctypes.create_string_buffer(128)
            meta = {}
            for key in ("general.type", "general.architecture", "adapter.type", "adapter.lora.alpha"):
                if L.llama_adapter_meta_val_str(ad, key.encode(), buf, 128) >= 0:
                    meta[key] = buf.value.decode()
            out["adapter_meta"] = meta
        if i < 4:
            L.llama_adapter_lora_free(ad)
        else:
            adapter = ad
    load_ms.sort()
    out["adapter_load_ms_best"], out["adapter_load_ms_median"] = load_ms[0], load_ms[len(load_ms) // 2]
    out["adapter_load_ms_runs"] = load_ms

    def set_lora(bench, scale):
        arr = (L.llama_adapter_lora_p_ctypes * 1)(adapter)
        sc = (ctypes.c_float * 1)(scale)
        n = 1 if scale else 0
        if L.llama_set_adapters_lora(bench.ctx, arr if n else None, n, sc if n else None) != 0:
            raise RuntimeError("llama_set_adapters_lora failed")

    fa = L.LLAMA_FLASH_ATTN_TYPE_AUTO
    if args.llamacpp_child == "verify":
        toks = [int(t) for t in args.prompt_tokens.split(",")]
        check = [int(t) for t in args.check_tokens.split(",")] if args.check_tokens else []
        bench = BL.Bench(model, args.threads, 1, 256, 256, 256, fa)
        res = {}
        base_logits = None
        for label, scale in (("base", 0.0), ("lora", 1.0), ("lora_half", 0.5)):
            set_lora(bench, scale)
            L.llama_memory_clear(bench.mem, True)
            bench._fill([(t, j, 0, j == len(toks) - 1) for j, t in enumerate(toks)])
            bench._decode()
            ptr = L.llama_get_logits_ith(bench.ctx, len(toks) - 1)
            logits = np.ctypeslib.as_array(ptr, shape=(n_vocab,)).astype(np.float64)
            m = logits.max()
            lp = logits - (m + np.log(np.exp(logits - m).sum()))
            d = {"argmax": int(logits.argmax()), "logit_rms": float(np.sqrt((logits ** 2).mean())),
                 "logprobs": {str(t): float(lp[t]) for t in check}}
            if base_logits is None:
                base_logits = logits
            else:
                diff = logits - base_logits
                d["max_abs_logit_change_vs_base"] = float(np.abs(diff).max())
                d["rms_logit_change_vs_base"] = float(np.sqrt((diff ** 2).mean()))
            res[label] = d
        bench.close()
        out["verify"] = res
    else:
        per_seq = args.prompt_len + args.gen_tokens
        n_ctx = max(256, ((per_seq + 255) // 256) * 256)
        n_batch = args.prompt_len
        base = BL.Bench(model, args.threads, 1, n_ctx, n_batch, min(512, n_batch), fa)
        lora = BL.Bench(model, args.threads, 1, n_ctx, n_batch, min(512, n_batch), fa)
        set_lora(lora, 1.0)
        rng = np.random.default_rng(args.seed)
        prompts = rng.integers(0, n_vocab, size=(1, args.prompt_len)).tolist()
        for b in (base, lora):  # warm-up (page faults, thread pool, graph reservation)
            b.run(prompts, min(8, args.gen_tokens))
        runs = {"base": [], "lora": []}
        for _ in range(args.repeats):  # interleaved, like loom bench
            runs["base"].append(base.run(prompts, args.gen_tokens))
            runs["lora"].append(lora.run(prompts, args.gen_tokens))
        first_tokens = {}
        for name, rs in runs.items():
            out[name] = {
                "batch": 1,
                "prefill_tokens_per_s": args.prompt_len / min(r[0] for r in rs),
                "decode_tokens_per_s": args.gen_tokens / min(r[1] for r in rs),
                "prefill_s_runs": [r[0] for r in rs],
                "decode_s_runs": [r[1] for r in rs],
            }
            first_tokens[name] = rs[0][4]
            log(f"llama.cpp {name}: prefill {out[name]['prefill_tokens_per_s']:.1f} tok/s, "
                f"decode {out[name]['decode_tokens_per_s']:.2f} tok/s")
        out["last_token_differs"] = first_tokens["base"] != first_tokens["lora"]
        base.close()
        lora.close()
    L.llama_adapter_lora_free(adapter)
    L.llama_model_free(model)
    print(json.dumps(out))
    return 0


# ---------------------------------------------------------------------------------------------
# Verification against loom (which matches PEFT, tests/ref)


def loom_top_logprobs(loom, model, prompt, lora=None, k=10):
    cmd = [loom, "--threads", "2", "generate", "--model", model, "--prompt-tokens", ",".join(map(str, prompt)),
           "--max-tokens", "1", "--temperature", "0", "--logprobs", str(k), "--output", "json"]
    if lora:
        cmd += ["--lora", lora]
    j = core.last_json_line(core.run(cmd, timeout=600, quiet=True))
    return {int(e["token"]): float(e["logprob"]) for e in j["logprobs"][0]}, int(j["generated_tokens"][0])


def verify(args, py, loom, model, gguf_path, lora_gguf, adapter_dir):
    """llama.cpp loads the GGUF adapter, it changes the logits, and its adapted log-probs match loom's
    (loom matches PEFT: alpha / r scaling) on the tokens loom ranks top; base and half scale do not."""
    rng = np.random.default_rng(7)
    prompt = rng.integers(0, 151936, size=16).tolist()
    res = {"prompt_tokens": prompt}
    have_loom = core.loom_supports_bench(loom)[0]
    if have_loom:
        lb, lb_tok = loom_top_logprobs(loom, model, prompt)
        ll, ll_tok = loom_top_logprobs(loom, model, prompt, adapter_dir)
        res["loom"] = {"base_argmax": lb_tok, "lora_argmax": ll_tok}
        check = sorted(set(lb) | set(ll))
    else:
        check = []
    out = core.last_json_line(core.run(
        [py, os.path.abspath(__file__), "--llamacpp-child", "verify", "--gguf", gguf_path, "--lora-gguf", lora_gguf,
         "--threads", str(args.threads), "--prompt-tokens", ",".join(map(str, prompt)),
         "--check-tokens", ",".join(map(str, check))], timeout=600, quiet=True))
    v = out["verify"]
    res["llamacpp"] = v
    res["llamacpp_meta"] = out.get("adapter_meta")
    res["llamacpp_adapter_log"] = out.get("adapter_log")
    res["llamacpp_buft_fallbacks"] = out.get("adapter_buft_fallbacks")
    res["llamacpp_buft_fallback_example"] = out.get("adapter_buft_fallback_example")
    res["lora_changes_logits"] = v["lora"]["max_abs_logit_change_vs_base"] > 1e-3
    if have_loom:
        def maxdiff(loom_lp, which):
            return max(abs(v[which]["logprobs"][str(t)] - x) for t, x in loom_lp.items())
        res["max_abs_logprob_diff"] = {
            "llamacpp_base_vs_loom_base": maxdiff(lb, "base"),
            "llamacpp_lora_vs_loom_lora": maxdiff(ll, "lora"),
            "llamacpp_half_scale_vs_loom_lora": maxdiff(ll, "lora_half"),
            "llamacpp_base_vs_loom_lora": maxdiff(ll, "base"),
        }
        d = res["max_abs_logprob_diff"]
        res["agrees_with_loom"] = (d["llamacpp_lora_vs_loom_lora"] < 0.25 * d["llamacpp_half_scale_vs_loom_lora"]
                                   and d["llamacpp_lora_vs_loom_lora"] < 0.25 * d["llamacpp_base_vs_loom_lora"])
        res["argmax_equal"] = {"base": v["base"]["argmax"] == lb_tok, "lora": v["lora"]["argmax"] == ll_tok}
    return res


# ---------------------------------------------------------------------------------------------
# Markdown


def fmt(x, nd=1):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def pct(x, signed=True):
    return "n/a" if x is None else (f"{x:+.1f} %" if signed else f"{x:.1f} %")


def scen(loom, name):
    for r in (loom or {}).get("lora_results", []):
        if r.get("scenario") == name:
            return r
    return {}


def figures(report):
    """The ratios; None where a side did not run."""
    loom, llama = report.get("loom"), report.get("llamacpp")
    f = {}
    b1, un, me = scen(loom, "base, batch 1"), scen(loom, "adapter unmerged, batch 1"), scen(loom, "adapter merged, batch 1")
    b8, mx = scen(loom, "base, batch 8"), scen(loom, "8 different adapters, batch 8")

    def over(x, base, key):  # overhead in % of the base rate: (1 - x / base) * 100
        return (1 - x[key] / base[key]) * 100 if x.get(key) and base.get(key) else None

    def rel(x, base, key):
        return x[key] / base[key] * 100 if x.get(key) and base.get(key) else None

    f["loom_unmerged_decode_overhead_pct"] = over(un, b1, "decode_tokens_per_s")
    f["loom_unmerged_prefill_overhead_pct"] = over(un, b1, "prefill_tokens_per_s")
    f["loom_merged_decode_vs_base_pct"] = rel(me, b1, "decode_tokens_per_s")
    f["loom_merged_prefill_vs_base_pct"] = rel(me, b1, "prefill_tokens_per_s")
    f["loom_mixed8_decode_vs_base8_pct"] = rel(mx, b8, "decode_tokens_per_s")
    f["loom_mixed8_prefill_vs_base8_pct"] = rel(mx, b8, "prefill_tokens_per_s")
    if loom:
        f["loom_adapter_load_ms_best"] = loom.get("adapter_load_ms_best")
        f["loom_adapter_load_ms_median"] = loom.get("adapter_load_ms_median")
    if llama:
        f["llamacpp_lora_decode_overhead_pct"] = over(llama["lora"], llama["base"], "decode_tokens_per_s")
        f["llamacpp_lora_prefill_overhead_pct"] = over(llama["lora"], llama["base"], "prefill_tokens_per_s")
        f["llamacpp_adapter_load_ms_best"] = llama.get("adapter_load_ms_best")
        f["llamacpp_adapter_load_ms_median"] = llama.get("adapter_load_ms_median")
    if loom and llama and un.get("decode_tokens_per_s"):
        f["loom_unmerged_vs_llamacpp_lora_decode"] = un["decode_tokens_per_s"] / llama["lora"]["decode_tokens_per_s"]
    return f


def verdict(ok):
    return "n/a" if ok is None else ("**met**" if ok else "**not met**")


def render(report):
    a = report["args"]
    loom, llama = report.get("loom"), report.get("llamacpp")
    f = report["figures"]
    ad = report["adapter"]
    conv = report.get("conversion", {})
    ver = report.get("verify", {})
    L = [BEGIN, "## LoRA adapters: loom vs llama.cpp, rank-16 adapter on all seven projections (CPU)", ""]
    L.append(f"Measured {report['date']} on **{report['cpu']}** ({', '.join(report['cpu_flags'])}), "
             f"{report['nproc']} cores, **{a['threads']} threads**, prompt {a['prompt_len']} tokens, "
             f"{a['gen_tokens']} generated tokens per sequence, best of {a['repeats']} runs after a warm-up, "
             "scenarios interleaved within each engine. Model: the random-weight Qwen2.5-0.5B-shaped bench model "
             f"(loom: `{os.path.relpath(a['model'], ROOT)}`, bf16; llama.cpp: `{os.path.relpath(a['gguf'], ROOT)}`, "
             f"the same values as F16). Adapters: `{os.path.relpath(a['adapters'], ROOT)}/r{a['rank']}-0..{a['count'] - 1}`, "
             f"random PEFT LoRA, r = {ad['rank']}, lora_alpha = {ad['alpha']:g} (scale {ad['alpha'] / ad['rank']:g}), "
             "q/k/v/o/gate/up/down of all 24 layers, BF16: "
             f"**{ad['bytes'] / 2**20:.1f} MiB per adapter = {ad['bytes'] / ad['model_bytes'] * 100:.2f} % of the "
             f"model's {ad['model_bytes'] / 2**20:.0f} MiB**. llama.cpp (llama-cpp-python "
             f"{llama.get('llama_cpp_python', '?') if llama else '?'}, CPU build, `GGML_NATIVE=ON`, flash_attn auto) "
             f"applies r{a['rank']}-0 converted to `{os.path.relpath(conv.get('path', '?'), ROOT)}` "
             f"({conv.get('dtype', '?').upper()}) at runtime (`llama_adapter_lora_init` + "
             "`llama_set_adapters_lora`, scale 1.0, unmerged).")
    L.append("")
    L.append("| scenario | loom prefill tok/s | loom decode tok/s | llama.cpp prefill tok/s | llama.cpp decode tok/s "
             "| decode vs its own base | target | |")
    L.append("|---|---:|---:|---:|---:|---|---|---|")
    lb = llama.get("base", {}) if llama else {}
    ll = llama.get("lora", {}) if llama else {}

    def row(name, s, lc, vs, target, ok):
        L.append(f"| {name} | {fmt(s.get('prefill_tokens_per_s'))} | {fmt(s.get('decode_tokens_per_s'), 2)} "
                 f"| {fmt(lc.get('prefill_tokens_per_s')) if lc else '—'} "
                 f"| {fmt(lc.get('decode_tokens_per_s'), 2) if lc else '—'} | {vs} | {target} | {ok} |")

    o_loom, o_ll = f.get("loom_unmerged_decode_overhead_pct"), f.get("llamacpp_lora_decode_overhead_pct")
    me, mx = f.get("loom_merged_decode_vs_base_pct"), f.get("loom_mixed8_decode_vs_base8_pct")
    if loom:
        row("base, batch 1", scen(loom, "base, batch 1"), lb, "—", "", "")
        row("1 adapter unmerged, batch 1", scen(loom, "adapter unmerged, batch 1"), ll,
            f"loom overhead {pct(o_loom, False)}; llama.cpp overhead {pct(o_ll, False)}",
            "(a) loom ≤ 5 % overhead; (e) llama.cpp's overhead for comparison",
            verdict(None if o_loom is None else o_loom <= 5.0))
        row("1 adapter merged, batch 1", scen(loom, "adapter merged, batch 1"), {}, f"{pct(me, False)} of base",
            f"(c) = base within noise (±{NOISE * 100:.0f} %)",
            verdict(None if me is None else abs(me - 100) <= NOISE * 100))
        row("base, batch 8", scen(loom, "base, batch 8"), {}, "—", "", "")
        row(f"8 different adapters, batch 8", scen(loom, "8 different adapters, batch 8"), {},
            f"{pct(mx, False)} of base batch 8 (aggregate)", "(b) ≥ 85 % of base batch 8",
            verdict(None if mx is None else mx >= 85.0))
        lm, lmm = f.get("loom_adapter_load_ms_best"), f.get("loom_adapter_load_ms_median")
        cm, cmm = f.get("llamacpp_adapter_load_ms_best"), f.get("llamacpp_adapter_load_ms_median")
        L.append(f"| adapter load, warm page cache (ms, best / median of 5) | {fmt(lm, 2)} / {fmt(lmm, 2)} | | "
                 f"{fmt(cm, 2)} / {fmt(cmm, 2)} | | | (d) ≤ 50 ms (median) | "
                 f"{verdict(None if lmm is None else lmm <= 50.0)} |")
    else:
        L.append(f"| loom | not run: {report.get('loom_skipped', '?')} | | | | | | |")
        if llama:
            row("llama.cpp base, batch 1", {}, lb, "—", "", "")
            row("llama.cpp adapter, batch 1", {}, ll, f"overhead {pct(o_ll, False)}", "(e)", "")
    L.append("")
    notes = []
    if loom and llama and f.get("loom_unmerged_vs_llamacpp_lora_decode"):
        notes.append(f"With the adapter, loom decodes {f['loom_unmerged_vs_llamacpp_lora_decode']:.2f}× as fast as "
                     "llama.cpp (batch 1). Prefill overhead of the unmerged adapter: loom "
                     f"{pct(f.get('loom_unmerged_prefill_overhead_pct'), False)}, llama.cpp "
                     f"{pct(f.get('llamacpp_lora_prefill_overhead_pct'), False)}. llama.cpp applies adapters per "
                     "context, not per sequence, so it has no counterpart to the batch-8 mixed-adapter row; loom's "
                     "prefill there is "
                     f"{pct(f.get('loom_mixed8_prefill_vs_base8_pct'), False)} of base.")
    if loom:
        notes.append(f"loom's merged row folds r{a['rank']}-0 into a second copy of the weights "
                     "(W + scale·B·A in f32, rounded to bf16) and runs it as a plain model. Its load time is "
                     "`LoadAdapter` (parse, validate, attach), llama.cpp's is `llama_adapter_lora_init` on the GGUF; "
                     f"both read from a warm page cache. loom holds the adapter as {loom.get('adapter_bytes', 0) / 2**20:.1f} MiB; "
                     f"peak RSS of the loom run {fmt(loom.get('peak_rss_mib'), 0)} MiB (two models: base and merged).")
    if conv:
        notes.append(f"The GGUF adapter: `general.type = adapter`, `general.architecture = qwen2`, `adapter.type = lora`, "
                     f"`adapter.lora.alpha = {conv['alpha']:g}`; {conv['n_tensors']} tensors named "
                     "`blk.N.<attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down>.weight.lora_a|lora_b`, "
                     f"lora_a [r, in] and lora_b [out, r] as in PEFT ({conv['dtype'].upper()}, "
                     f"{conv['values_not_exact']:,} of {conv['n_values']:,} BF16 values not exact in F16, all tiny). "
                     f"llama.cpp's scale = alpha / rank = {conv['alpha']:g} / {conv['rank']} = {conv['scale']:g} = PEFT's.")
    if ver:
        v = ver.get("llamacpp", {})
        fb = ""
        if ver.get("llamacpp_buft_fallbacks"):
            fb = (f"; for {ver['llamacpp_buft_fallbacks']} of the adapted weights it logs "
                  f"\"{ver.get('llamacpp_buft_fallback_example', '')}\": the base weights sit in a repacked "
                  "buffer, the adapter in a plain CPU buffer")
        s = (f"Checked before timing: llama.cpp loads it (\"{'; '.join(ver.get('llamacpp_adapter_log') or [])}\"{fb}) and it "
             f"changes the last-token logits by up to {v.get('lora', {}).get('max_abs_logit_change_vs_base', 0):.3f} "
             f"(rms {v.get('lora', {}).get('rms_logit_change_vs_base', 0):.4f}; logit rms "
             f"{v.get('base', {}).get('logit_rms', 0):.3f})")
        d = ver.get("max_abs_logprob_diff")
        if d:
            s += (f"; on a 16-token prompt its log-probs of loom's top tokens agree with `loom generate --lora` "
                  f"(loom matches PEFT) to {d['llamacpp_lora_vs_loom_lora']:.4f}, against "
                  f"{d['llamacpp_half_scale_vs_loom_lora']:.4f} at half the scale and "
                  f"{d['llamacpp_base_vs_loom_lora']:.4f} without the adapter (base vs base: "
                  f"{d['llamacpp_base_vs_loom_base']:.4f}); greedy token "
                  f"{'equal' if ver.get('argmax_equal', {}).get('lora') else 'different'} with the adapter"
                  f" — {'consistent' if ver.get('agrees_with_loom') else '**NOT consistent**'}")
        notes.append(s + ".")
    if report.get("priority"):
        notes.append(f"The measuring processes ran at niceness {report['priority']}, each in a scheduler autogroup of "
                     "its own (so that other sessions' jobs on this shared 2-core machine take little CPU from the "
                     "compute threads).")
    notes.append(f"Prefill: the {a['prompt_len']}-token prompt of each sequence in one forward call (batch 8 = 8 × "
                 f"{a['prompt_len']} tokens). Decode: one token per sequence per step, greedy; tok/s counts the tokens of "
                 "all sequences (loom: the steps after the prefill; llama.cpp: "
                 f"{a['gen_tokens']} steps).")
    busy = {f"before {k}": v for k, v in report.get("busy_before", {}).items() if v > 0.10}
    busy.update({f"during {k}": v for k, v in report.get("others_cpu_during", {}).items() if v > 0.05})
    if busy:
        notes.append("**Warning: other processes were using the CPUs while these figures were taken ("
                     + ", ".join(f"{k}: {v:.0%}" for k, v in busy.items())
                     + " of the machine); rerun on an idle machine.**")
    else:
        notes.append("The machine was otherwise idle during the runs (checked from /proc/stat).")
    L.extend(notes)
    L.append("")
    L.append("Rerun (after `tools/bench/setup_venv.sh`, `tools/bench/make_bench_adapters.py` and building `build/loom`):")
    L.append("")
    L.append("```sh")
    L.append(report["command"])
    L.append("```")
    L.append("")
    L.append("It runs `" + report["loom_command"] + "` and then llama.cpp.")
    L.append(END)
    return "\n".join(L)


def update_doc(path, section):
    text = open(path).read() if os.path.exists(path) else "# loom performance\n"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        text = pre + section + post
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--model", default="bench-models/qwen2.5-0.5b-shape")
    ap.add_argument("--gguf", default=None, help="base model GGUF (default: <model>.f16.gguf)")
    ap.add_argument("--adapters", default="bench-models/adapters", help="folder holding r<rank>-<i>/")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--count", type=int, default=8, help="adapters r<rank>-0 .. r<rank>-<count-1> for loom")
    ap.add_argument("--lora-dtype", choices=["f16", "f32"], default="f16", help="tensor type of the GGUF adapter")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--doc", default="docs/PERFORMANCE.md")
    ap.add_argument("--no-doc", action="store_true", help="do not touch the docs file")
    ap.add_argument("--skip-loom", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--skip-verify", action="store_true")
    ap.add_argument("--convert-only", action="store_true", help="write the GGUF adapter and stop")
    ap.add_argument("--json-out", default=None, help="also write the combined JSON here")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds allowed for each engine")
    ap.add_argument("--priority", type=int, default=-10,
                    help="niceness of the measuring processes (default -10; 0 = leave as is), each in a scheduler "
                         "autogroup of its own, as in bench_core.py; needs root")
    ap.add_argument("--wait-idle", type=float, default=120,
                    help="before each measurement, wait up to this many seconds for the CPUs to be idle")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp child: echo llama.cpp's log")
    # internal: the llama.cpp child
    ap.add_argument("--llamacpp-child", choices=["verify", "bench"], help=argparse.SUPPRESS)
    ap.add_argument("--lora-gguf", help=argparse.SUPPRESS)
    ap.add_argument("--prompt-tokens", help=argparse.SUPPRESS)
    ap.add_argument("--check-tokens", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=1234, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.llamacpp_child:
        return llamacpp_child(args)
    core.PRIORITY = args.priority

    def absp(p):
        return p if os.path.isabs(p) else os.path.join(ROOT, p)

    model = absp(args.model.rstrip("/"))
    gguf_path = absp(args.gguf or args.model.rstrip("/") + ".f16.gguf")
    loom = absp(args.loom)
    adapters_dir = absp(args.adapters)
    names = [os.path.join(adapters_dir, f"r{args.rank}-{i}") for i in range(args.count)]
    lora_gguf = names[0] + ".gguf"
    py = core.venv_python()
    cpu, flags = core.cpu_info()

    # 1. inputs
    if not os.path.exists(os.path.join(model, "model.safetensors")) or not os.path.exists(gguf_path):
        core.run([py, os.path.join(HERE, "make_bench_model.py"), "--out", os.path.relpath(model, ROOT),
                  "--gguf", os.path.relpath(gguf_path, ROOT)], timeout=1800)
    missing = [n for n in names if not os.path.exists(os.path.join(n, "adapter_model.safetensors"))]
    if missing:
        raise SystemExit(f"missing adapters {', '.join(os.path.relpath(m, ROOT) for m in missing)}: run "
                         f"`python tools/bench/make_bench_adapters.py --count {args.count} --rank {args.rank}` "
                         "(needs numpy and safetensors)")
    model_bytes = safetensors_tensor_bytes(os.path.join(model, "model.safetensors"))
    with open(os.path.join(names[0], "adapter_config.json")) as f:
        acfg = json.load(f)
    adapter_info = {"rank": acfg["r"], "alpha": acfg["lora_alpha"], "model_bytes": model_bytes,
                    "bytes": safetensors_tensor_bytes(os.path.join(names[0], "adapter_model.safetensors"))}

    # 2. conversion
    if gguf_up_to_date(names[0], lora_gguf, args.lora_dtype):
        import gguf
        rd = gguf.GGUFReader(lora_gguf)
        conv = {"path": lora_gguf, "dtype": args.lora_dtype, "rank": acfg["r"], "alpha": float(acfg["lora_alpha"]),
                "scale": acfg["lora_alpha"] / acfg["r"], "n_tensors": len(rd.tensors),
                "n_values": int(sum(int(np.prod(t.shape)) for t in rd.tensors)), "bytes": os.path.getsize(lora_gguf),
                "values_not_exact": None, "up_to_date": True}
        # recount the inexact values (cheap) so that the docs can say it
        src = read_safetensors_f32(os.path.join(names[0], "adapter_model.safetensors"))
        np_dtype = np.float16 if args.lora_dtype == "f16" else np.float32
        conv["values_not_exact"] = int(sum(np.count_nonzero(x.astype(np_dtype).astype(np.float32) != x)
                                           for x in src.values()))
        log(f"{os.path.relpath(lora_gguf, ROOT)} is up to date")
    else:
        t0 = time.time()
        conv = convert_peft_to_gguf(names[0], lora_gguf, args.lora_dtype)
        log(f"wrote {os.path.relpath(lora_gguf, ROOT)} ({conv['bytes'] / 2**20:.1f} MiB, {conv['n_tensors']} tensors, "
            f"{time.time() - t0:.1f} s)")
    if args.convert_only:
        print(json.dumps(conv))
        return 0

    cmd = ".venv-bench/bin/python tools/bench/bench_lora.py"
    if sys.argv[1:]:
        cmd += " " + shlex.join(sys.argv[1:])
    loom_cmd = ["build/loom" if loom == absp("build/loom") else loom, "bench", "--model", os.path.relpath(model, ROOT),
                "--threads", str(args.threads), "--prompt-len", str(args.prompt_len), "--gen-tokens",
                str(args.gen_tokens), "--repeats", str(args.repeats), "--lora",
                *[os.path.relpath(n, ROOT) for n in names], "--json"]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu, "cpu_flags": flags, "nproc": os.cpu_count(), "kernel": platform.release(),
        "priority": args.priority,
        "args": {"model": model, "gguf": gguf_path, "adapters": adapters_dir, "rank": args.rank, "count": args.count,
                 "threads": args.threads, "prompt_len": args.prompt_len, "gen_tokens": args.gen_tokens,
                 "repeats": args.repeats},
        "adapter": adapter_info, "conversion": conv, "command": cmd, "loom_command": shlex.join(loom_cmd),
    }

    # 3. verification (light: a 16-token prompt in each engine)
    if not args.skip_verify and not args.skip_llamacpp:
        log("checking the GGUF adapter (llama.cpp loads it, changes the logits, agrees with loom)")
        report["verify"] = v = verify(args, py, loom, model, gguf_path, lora_gguf, names[0])
        log(f"  logits changed by up to {v['llamacpp']['lora']['max_abs_logit_change_vs_base']:.3f}; "
            f"log-prob diffs vs loom: {json.dumps(v.get('max_abs_logprob_diff'))}")
        if not v["lora_changes_logits"]:
            raise SystemExit("the GGUF adapter does not change llama.cpp's logits: not benchmarking a no-op")
        if v.get("agrees_with_loom") is False:
            log("  WARNING: llama.cpp's adapted log-probs do not match loom's (scale or layout wrong?)")

    busy = {}
    report["busy_before"] = busy
    # 4. loom
    if args.skip_loom:
        report["loom_skipped"] = "--skip-loom"
    else:
        ok, why = core.loom_supports_bench(loom)
        if ok:
            hp = subprocess.run([loom, "bench", "--help"], capture_output=True, text=True).stdout
            if "--lora" not in hp:
                ok, why = False, "`loom bench --help` does not offer --lora"
        if not ok:
            report["loom_skipped"] = why
            log(f"skipping loom: {why}")
        else:
            busy["loom"] = core.wait_idle(args.wait_idle)
            out = core.run([loom, *loom_cmd[1:]], timeout=args.timeout, name="loom")
            report["loom"] = core.last_json_line(out)
            for line in out.strip().splitlines()[:-1]:
                log("  " + line)

    # 5. llama.cpp
    if args.skip_llamacpp:
        report["llamacpp_skipped"] = "--skip-llamacpp"
    else:
        busy["llamacpp"] = core.wait_idle(args.wait_idle)
        out = core.run([py, os.path.abspath(__file__), "--llamacpp-child", "bench", "--gguf", gguf_path,
                        "--lora-gguf", lora_gguf, "--threads", str(args.threads), "--prompt-len", str(args.prompt_len),
                        "--gen-tokens", str(args.gen_tokens), "--repeats", str(args.repeats)],
                       timeout=args.timeout, name="llamacpp")
        report["llamacpp"] = core.last_json_line(out)

    report["others_cpu_during"] = dict(core.OTHERS_CPU)
    report["figures"] = figures(report)

    # 6. docs
    section = render(report)
    if not args.no_doc:
        update_doc(absp(args.doc), section)
        log(f"updated {args.doc}")
    if args.json_out:
        with open(absp(args.json_out), "w") as f:
            json.dump(report, f, indent=2)
    print(section, file=sys.stderr)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
