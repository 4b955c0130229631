# Runs loom's and llama.cpp's benchmarks side by side plus a memory-bandwidth probe, and writes the table into docs/PERFORMANCE.md.
"""loom vs llama.cpp, same random-weight Qwen2.5-0.5B-shaped model, one invocation.

    .venv-bench/bin/python tools/bench/bench_core.py            # all defaults, as below

Steps (one after another, nothing overlaps):
  1. makes the model with make_bench_model.py if it is missing;
  2. streaming-read bandwidth with numpy (see measure_bandwidth), 1 thread and --threads threads;
  3. `build/loom bench --model M --threads T --prompt-len P --gen-tokens G --batch 1,8 --json`
     (the last stdout line is its JSON object);
  4. `.venv-bench/bin/python tools/bench/bench_llamacpp.py --gguf M.f16.gguf --threads T ...`;
  5. rewrites the part of docs/PERFORMANCE.md between <!-- bench:core:begin --> and <!-- bench:core:end -->.
The combined figures are printed as one JSON line at the end (and written to --json-out if given).
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import struct
import subprocess
import sys
import threading
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the bandwidth probe makes its own threads
import numpy as np  # noqa: E402
from bench_sched import enter_priority_session  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
BEGIN, END = "<!-- bench:core:begin -->", "<!-- bench:core:end -->"


def log(msg):
    print(f"[bench_core] {msg}", file=sys.stderr, flush=True)


def venv_python():
    p = os.path.join(ROOT, ".venv-bench", "bin", "python")
    if not os.path.exists(p):
        raise SystemExit("missing .venv-bench: run tools/bench/setup_venv.sh first")
    return p


def cpu_info():
    model, flags = "unknown", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    keep = ["avx2", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile"]
    return model, [f for f in keep if f in flags]


# ---------------------------------------------------------------------------------------------
# Idle check: 2 compute threads on a 2-core machine collapse when anything else runs (OpenMP and
# spin barriers wait for a descheduled thread), so the figures are only meaningful on an idle machine.


def proc_stat():
    """(idle, total, nice) jiffies of all CPUs, from /proc/stat ("nice" = processes with niceness > 0)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + (v[4] if len(v) > 4 else 0), sum(v[:8]), v[1]


def cpu_busy_fraction(seconds=1.0, count_niced=True):
    """Fraction of all CPUs busy during `seconds` (this process sleeps meanwhile). With
    count_niced=False, time of processes running at niceness > 0 is not counted."""
    i0, t0, n0 = proc_stat()
    time.sleep(seconds)
    i1, t1, n1 = proc_stat()
    if t1 == t0:
        return 0.0
    busy = (t1 - t0) - (i1 - i0) - (0 if count_niced else n1 - n0)
    return busy / (t1 - t0)


def wait_idle(max_wait, threshold=0.10):
    """Waits (up to max_wait seconds) until other processes leave the CPUs idle; returns the last busy
    fraction."""
    deadline = time.time() + max_wait
    busy = cpu_busy_fraction(2.0)
    warned = False
    while busy > threshold and time.time() < deadline:
        if not warned:
            log(f"machine busy ({busy:.0%} of CPU used by other processes); waiting up to {max_wait:.0f} s")
            warned = True
        time.sleep(3)
        busy = cpu_busy_fraction(2.0)
    if busy > threshold:
        log(f"machine still busy ({busy:.0%}); going ahead (see the during-run check)")
    return busy


PRIORITY = 0


def _child_setup():
    """preexec_fn of the measuring processes: a session of their own (so a scheduler autogroup of their
    own: with autogroups, plain nice values only order processes within one session) at PRIORITY."""
    enter_priority_session(PRIORITY)


# ---------------------------------------------------------------------------------------------
# Bandwidth


def measure_bandwidth(threads, gib=1.0, repeats=3):
    """Streaming read bandwidth in GB/s (1e9 B/s) using numpy reductions over a `gib` GiB array.

    The array is split into `threads` contiguous slices, one Python thread per slice (numpy releases
    the GIL inside reductions). Kernels tried: np.max over uint8 and float32 views and np.dot(x, x)
    (OpenBLAS sdot, one BLAS thread each); best of `repeats` for each, the fastest kernel wins. numpy's
    kernels are not hand-tuned streaming loops, so this is a lower bound on what the memory system
    can deliver.
    """
    n = int(gib * 2**30) // 64 * 64
    buf = np.empty(n, dtype=np.uint8)
    buf[:] = 1  # touch every page before timing
    kernels = {
        "max_u8": lambda x: x.max(),
        "max_f32": lambda x: x.view(np.float32).max(),
        "dot_f32": lambda x: np.dot(x.view(np.float32), x.view(np.float32)),
    }
    chunk = n // threads // 64 * 64
    slices = [buf[i * chunk:(i + 1) * chunk] for i in range(threads)]
    total = chunk * threads
    best = {}
    for name, fn in kernels.items():
        for _ in range(repeats):
            barrier = threading.Barrier(threads + 1)
            done = []

            def work(x):
                barrier.wait()
                fn(x)
                done.append(time.perf_counter())

            ts = [threading.Thread(target=work, args=(s,)) for s in slices]
            for t in ts:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in ts:
                t.join()
            gbps = total / (max(done) - t0) / 1e9
            best[name] = max(best.get(name, 0.0), gbps)
    del buf, slices
    kernel = max(best, key=best.get)
    return {"threads": threads, "gb_per_s": best[kernel], "kernel": kernel, "per_kernel": best}


# ---------------------------------------------------------------------------------------------
# Model bytes


def safetensors_weight_bytes(model_dir):
    """Bytes one decode step must stream: every tensor once. With tied embeddings the lm_head reads the
    full embedding matrix, so the embedding counts once (the lookup of one row is negligible); with
    untied embeddings the embedding table is left out and lm_head.weight counts."""
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    total, embed, has_lm_head = 0, 0, False
    for fn in files:
        with open(os.path.join(model_dir, fn), "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
        for name, info in header.items():
            if name == "__metadata__":
                continue
            nbytes = info["data_offsets"][1] - info["data_offsets"][0]
            total += nbytes
            if name.endswith("embed_tokens.weight"):
                embed = nbytes
            if name == "lm_head.weight":
                has_lm_head = True
    return total - embed if has_lm_head else total


# ---------------------------------------------------------------------------------------------
# Runners


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON line in output")


OTHERS_CPU = {}  # name -> fraction of the machine's CPU time used by other processes during its run


def run(cmd, timeout, name=None, quiet=False):
    if not quiet:
        log("$ " + shlex.join(cmd))
    t0 = time.time()
    i0, j0, _ = proc_stat()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                       preexec_fn=_child_setup)
    i1, j1, _ = proc_stat()
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if name and j1 > j0:
        hz = os.sysconf("SC_CLK_TCK")
        busy_s = ((j1 - j0) - (i1 - i0)) / hz
        child_s = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
        OTHERS_CPU[name] = max(0.0, busy_s - child_s) / ((j1 - j0) / hz)
        if OTHERS_CPU[name] > 0.05:
            log(f"  WARNING: other processes used {OTHERS_CPU[name]:.0%} of the CPUs during this run")
    if p.stderr.strip():
        for line in p.stderr.strip().splitlines()[-8:]:
            log("  | " + line)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    if not quiet:
        log(f"  done in {time.time() - t0:.0f} s")
    return p.stdout


def merge_rounds(rounds):
    """Best prefill and best decode per batch size over rounds (each a bench JSON object); peak RSS max."""
    merged = dict(rounds[0])
    merged["results"] = []
    for r0 in rounds[0].get("results", []):
        same = [r for rr in rounds for r in rr.get("results", []) if r.get("batch") == r0.get("batch")]
        m = dict(max(same, key=lambda r: r.get("decode_tokens_per_s") or 0))
        m["prefill_tokens_per_s"] = max(r.get("prefill_tokens_per_s") or 0 for r in same)
        m["decode_tokens_per_s"] = max(r.get("decode_tokens_per_s") or 0 for r in same)
        merged["results"].append(m)
    merged["peak_rss_mib"] = max(rr.get("peak_rss_mib") or 0 for rr in rounds)
    merged["rounds"] = len(rounds)
    return merged


def loom_supports_bench(loom):
    if not os.path.exists(loom):
        return False, f"{loom} not found"
    try:
        p = subprocess.run([loom, "bench", "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if p.returncode != 0 or "--json" not in p.stdout + p.stderr:
        return False, "`loom bench --help` does not offer --json"
    return True, ""


# ---------------------------------------------------------------------------------------------
# Markdown


def fmt(x, nd=1):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def ratio(a, b):
    return "n/a" if not a or not b else f"{a / b:.2f}×"


def by_batch(res, b):
    if not res:
        return {}
    for r in res.get("results", []):
        if r.get("batch") == b:
            return r
    return {}


def render(report):
    a = report["args"]
    loom, llama = report.get("loom"), report.get("llamacpp")
    l1, c1 = by_batch(loom, 1), by_batch(llama, 1)
    l8, c8 = by_batch(loom, 8), by_batch(llama, 8)
    bw = report.get("bandwidth", {})
    roof = report.get("roofline", {})
    cpu, isa = report["cpu"], ", ".join(report["cpu_flags"])
    L = []
    L.append(BEGIN)
    L.append("## loom vs llama.cpp: random-weight Qwen2.5-0.5B shape (CPU)")
    L.append("")
    L.append(f"Measured {report['date']} on **{cpu}** ({isa}), {report['nproc']} cores, "
             f"**{a['threads']} threads**, prompt {a['prompt_len']} tokens, {a['gen_tokens']} generated tokens "
             f"per sequence, best of {a['repeats']} runs after a warm-up"
             + (f", best of {a['rounds']} alternating rounds" if a.get("rounds", 1) > 1 else "")
             + ". Same weights in both engines: "
             f"loom reads `{os.path.relpath(a['model'], ROOT)}` (bf16 safetensors), llama.cpp reads "
             f"`{os.path.relpath(a['gguf'], ROOT)}` (the same values as F16; norms F32) through "
             f"llama-cpp-python {llama.get('llama_cpp_python', '?') if llama else '?'} (CPU build, "
             f"`GGML_NATIVE=ON`, flash_attn {llama.get('flash_attn', '?') if llama else '?'}).")
    L.append("")
    L.append("| | prefill tok/s (batch 1) | decode tok/s (batch 1) | prefill tok/s (batch 8) "
             "| decode tok/s (batch 8) | peak RSS MiB |")
    L.append("|---|---:|---:|---:|---:|---:|")
    if loom:
        L.append(f"| loom (bf16) | {fmt(l1.get('prefill_tokens_per_s'))} | {fmt(l1.get('decode_tokens_per_s'), 2)} "
                 f"| {fmt(l8.get('prefill_tokens_per_s'))} | {fmt(l8.get('decode_tokens_per_s'), 2)} "
                 f"| {fmt(loom.get('peak_rss_mib'), 0)} |")
    else:
        L.append(f"| loom | not run: {report.get('loom_skipped', '?')} | | | | |")
    if llama:
        L.append(f"| llama.cpp (F16) | {fmt(c1.get('prefill_tokens_per_s'))} "
                 f"| {fmt(c1.get('decode_tokens_per_s'), 2)} | {fmt(c8.get('prefill_tokens_per_s'))} "
                 f"| {fmt(c8.get('decode_tokens_per_s'), 2)} | {fmt(llama.get('peak_rss_mib'), 0)}¹ |")
    else:
        L.append(f"| llama.cpp | not run: {report.get('llamacpp_skipped', '?')} | | | | |")
    if loom and llama:
        L.append(f"| **loom / llama.cpp** | **{ratio(l1.get('prefill_tokens_per_s'), c1.get('prefill_tokens_per_s'))}** "
                 f"| **{ratio(l1.get('decode_tokens_per_s'), c1.get('decode_tokens_per_s'))}** "
                 f"| {ratio(l8.get('prefill_tokens_per_s'), c8.get('prefill_tokens_per_s'))} "
                 f"| {ratio(l8.get('decode_tokens_per_s'), c8.get('decode_tokens_per_s'))} "
                 f"| {ratio(loom.get('peak_rss_mib'), llama.get('peak_rss_mib'))} |")
    L.append("")
    if roof:
        L.append(f"**bf16 decode roofline (batch 1): {roof['tokens_per_s']:.1f} tok/s** = streaming read "
                 f"bandwidth {roof['gb_per_s']:.1f} GB/s ({roof['threads']} threads) / "
                 f"{roof['bytes_per_token'] / 1e6:.1f} MB of weights read per token (every matrix once; the "
                 f"tied embedding once, as the lm_head reads all {report.get('vocab', 151936)} rows; KV-cache "
                 f"reads, well under 1% here, left out).")
        parts = [f"{b['threads']} thread{'s' if b['threads'] > 1 else ''}: {b['gb_per_s']:.1f} GB/s"
                 for b in bw.get("runs", [])]
        L.append(f"Bandwidth method: numpy reductions (`max` over uint8 and float32 views, `np.dot(x, x)` with "
                 f"one BLAS thread) over a {bw.get('gib', 1)} GiB array split across Python threads, best of 3, "
                 f"fastest kernel; GB = 1e9 bytes. {'; '.join(parts)}. numpy's loops are not tuned streaming "
                 f"kernels, so the bandwidth (and the roofline) are lower bounds; the "
                 f"{report.get('l3', '?')} L3 also holds part of the weights between tokens.")
        L.append("")
    notes = []
    if llama:
        own = []
        for r in llama.get("results", []):
            lp = r.get("llama_perf", {})
            own.append(f"batch {r['batch']}: prefill {fmt(lp.get('prefill_tokens_per_s'))}, "
                       f"decode {fmt(lp.get('decode_tokens_per_s'), 2)} tok/s")
        amx = " ".join(llama.get("system_info", "").split()).find("AMX_INT8 = 1") >= 0
        notes.append("¹ llama.cpp's peak RSS is that of the Python process running it "
                     f"({fmt(llama.get('rss_before_load_mib'), 0)} MiB before the model was loaded)"
                     + ("; with llama.cpp's default `use_extra_bufts` on this AMX CPU the F16 matrices are copied "
                        "into an AMX buffer next to the mmapped file, hence about twice the model size "
                        "(`bench_llamacpp.py --extra-bufts off`: ~1 GiB, similar speed). " if amx else ". ")
                     + 
                     "llama.cpp's own counters (`llama_perf_context`, compute time only): " + "; ".join(own) + ".")
    if report.get("priority"):
        notes.append(f"The measuring processes ran at niceness {report['priority']}, each in a scheduler "
                     "autogroup of its own (so that other sessions' jobs on this shared 2-core machine take "
                     "little CPU from the compute threads).")
    notes.append("Prefill: all prompt tokens of all sequences in one forward call (batch 8 = 8 × "
                 f"{a['prompt_len']} tokens). Decode: {a['gen_tokens']} steps of one token per sequence, greedy; "
                 "tok/s counts tokens of all sequences.")
    busy = {}
    busy.update({f"during {k}": v for k, v in report.get("others_cpu_during", {}).items()
                 if v > 0.05 and k.split("#")[0] in ("loom", "llamacpp")})
    if busy:
        notes.append("**Warning: other processes were using the CPUs while these figures were taken ("
                     + ", ".join(f"{k}: {v:.0%}" for k, v in busy.items())
                     + " of the machine); rerun on an idle machine.**")
    else:
        notes.append("The machine was otherwise idle during the runs (checked from /proc/stat).")
    for n in notes:
        L.append(n)
        L.append("")
    L.append("Rerun (after `tools/bench/setup_venv.sh` and building `build/loom`):")
    L.append("")
    L.append("```sh")
    L.append(report["command"])
    L.append("```")
    L.append(END)
    return "\n".join(L)


def update_doc(path, section):
    header = ("# loom performance\n\nFigures measured with the scripts in `tools/bench/` "
              "(see `tools/bench/README.md`). The section between the `bench:core` markers is rewritten "
              "by `tools/bench/bench_core.py`.\n\n")
    text = open(path).read() if os.path.exists(path) else header
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        text = pre + section + post
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


# ---------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--model", default="bench-models/qwen2.5-0.5b-shape")
    ap.add_argument("--gguf", default=None, help="default: <model>.f16.gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run loom and llama.cpp alternately this many times; each figure is the best round "
                         "(evens out drifting background load)")
    ap.add_argument("--doc", default="docs/PERFORMANCE.md")
    ap.add_argument("--no-doc", action="store_true", help="do not touch the docs file")
    ap.add_argument("--skip-loom", action="store_true")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--bandwidth-gib", type=float, default=1.0)
    ap.add_argument("--json-out", default=None, help="also write the combined JSON here")
    ap.add_argument("--timeout", type=int, default=1800, help="seconds allowed for each engine")
    ap.add_argument("--priority", type=int, default=-10,
                    help="niceness for the measuring processes (default -10; 0 = leave as is). Each runs in a "
                         "session of its own whose scheduler autogroup gets this niceness, so that other "
                         "sessions' jobs (builds, tests) take little CPU from the 2 compute threads; needs root")
    ap.add_argument("--wait-idle", type=float, default=120,
                    help="before each measurement, wait up to this many seconds for other processes to "
                         "leave the CPUs idle (default 120; 0 = do not wait)")
    ap.add_argument("--bandwidth-probe", nargs=2, metavar=("THREADS", "GIB"), help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.bandwidth_probe:  # internal: run as a child by main() so that it gets the priority too
        print(json.dumps(measure_bandwidth(int(args.bandwidth_probe[0]), float(args.bandwidth_probe[1]))))
        return 0
    global PRIORITY
    PRIORITY = args.priority

    def absp(p):
        return p if os.path.isabs(p) else os.path.join(ROOT, p)

    model = absp(args.model.rstrip("/"))
    gguf = absp(args.gguf or args.model.rstrip("/") + ".f16.gguf")
    loom = absp(args.loom)
    py = venv_python()
    cpu, flags = cpu_info()
    l3 = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.strip().startswith("L3"):
                l3 = line.split(":", 1)[1].strip().split(" (")[0]
    except OSError:
        pass

    cmd = ".venv-bench/bin/python tools/bench/bench_core.py"
    if sys.argv[1:]:
        cmd += " " + shlex.join(sys.argv[1:])
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu, "cpu_flags": flags, "nproc": os.cpu_count(), "l3": l3,
        "kernel": platform.release(),
        "priority": args.priority,
        "args": {"model": model, "gguf": gguf, "threads": args.threads, "prompt_len": args.prompt_len,
                 "gen_tokens": args.gen_tokens, "batch": args.batch, "repeats": args.repeats,
                 "rounds": args.rounds},
        "command": cmd,
    }

    # 1. model
    if not os.path.exists(os.path.join(model, "model.safetensors")) or not os.path.exists(gguf):
        run([py, os.path.join(HERE, "make_bench_model.py"), "--out", os.path.relpath(model, ROOT),
             "--gguf", os.path.relpath(gguf, ROOT)], timeout=1800)
    with open(os.path.join(model, "config.json")) as f:
        report["vocab"] = json.load(f).get("vocab_size")

    # 2. bandwidth
    log(f"bandwidth probe ({args.bandwidth_gib} GiB, 1 and {args.threads} threads)")
    busy = {"bandwidth": wait_idle(args.wait_idle)}
    report["busy_before"] = busy
    bw_runs = [last_json_line(run([py, os.path.abspath(__file__), "--bandwidth-probe", str(t),
                                   str(args.bandwidth_gib)], timeout=600, name=f"bandwidth_{t}t", quiet=True))
               for t in sorted({1, args.threads})]
    for b in bw_runs:
        log(f"  {b['threads']} thread(s): {b['gb_per_s']:.1f} GB/s ({b['kernel']})")
    report["bandwidth"] = {"gib": args.bandwidth_gib, "runs": bw_runs}
    bw_t = [b for b in bw_runs if b["threads"] == args.threads][0]
    nbytes = safetensors_weight_bytes(model)
    report["roofline"] = {"bytes_per_token": nbytes, "gb_per_s": bw_t["gb_per_s"], "threads": args.threads,
                          "tokens_per_s": bw_t["gb_per_s"] * 1e9 / nbytes}

    # 3./4. loom and llama.cpp, alternating for --rounds rounds; each figure is the best over the rounds
    loom_cmd = [loom, "bench", "--model", model, "--threads", str(args.threads), "--prompt-len",
                str(args.prompt_len), "--gen-tokens", str(args.gen_tokens), "--batch", args.batch,
                "--repeats", str(args.repeats), "--json"]
    llama_cmd = [py, os.path.join(HERE, "bench_llamacpp.py"), "--gguf", gguf, "--threads", str(args.threads),
                 "--prompt-len", str(args.prompt_len), "--gen-tokens", str(args.gen_tokens),
                 "--batch", args.batch, "--repeats", str(args.repeats)]
    engines = []
    if args.skip_loom:
        report["loom_skipped"] = "--skip-loom"
    else:
        ok, why = loom_supports_bench(loom)
        if ok:
            engines.append(("loom", loom_cmd))
        else:
            report["loom_skipped"] = why
            log(f"skipping loom: {why}")
    if args.skip_llamacpp:
        report["llamacpp_skipped"] = "--skip-llamacpp"
    else:
        engines.append(("llamacpp", llama_cmd))
    for rnd in range(args.rounds):
        for name, cmd in engines:
            if f"{name}_skipped" in report:
                continue
            label = name if args.rounds == 1 else f"{name}#{rnd + 1}"
            busy[label] = wait_idle(args.wait_idle)
            try:
                res = last_json_line(run(cmd, timeout=args.timeout, name=label))
            except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                report[f"{name}_skipped"] = "failed: " + str(e).strip().splitlines()[0][:200]
                log(f"{name} {report[f'{name}_skipped']}")
                continue
            report.setdefault(f"{name}_rounds", []).append(res)
    for name, _ in engines:
        if report.get(f"{name}_rounds"):
            report[name] = merge_rounds(report[f"{name}_rounds"])

    report["others_cpu_during"] = dict(OTHERS_CPU)

    # 5. docs
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
