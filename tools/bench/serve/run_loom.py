# Serving load benchmark of `loom serve`: makes the bench model/adapters if missing, runs the client-concurrency x adapter matrix and/or a soak with load_gen.py, plus a `loom bench` engine-alone reference; writes JSON and a markdown table.
"""Serving benchmark of `loom serve` on the Qwen2.5-0.5B-shaped random-weight bench model.

    .venv-serve-bench/bin/python tools/bench/serve/run_loom.py --mode matrix   # ~6 min
    .venv-serve-bench/bin/python tools/bench/serve/run_loom.py --mode soak     # ~2.5 min
    .venv-serve-bench/bin/python tools/bench/serve/run_loom.py --mode all

What it does (see README.md beside this file):
1. makes bench-models/qwen2.5-0.5b-shape (make_bench_model.py --no-gguf) and
   bench-models/adapters/r16-0..7 (make_bench_adapters.py) when missing, and a servable view
   bench-models/qwen2.5-0.5b-shape-serve (symlinks + a synthetic tokenizer, make_serve_model.py);
2. matrix: `loom bench --closed-loop` engine-alone reference (each scenario's clients, requests
   and adapters, no HTTP), then one `loom serve` and, for each concurrency in {8, 32} x {base only,
   8 adapters round-robin}, load_gen.py with N = max(16, 2 x concurrency) streaming requests of
   128 prompt tokens and 64 output tokens (greedy, ignore_eos);
3. soak: a fresh `loom serve` (with --lora-dir and --allow-runtime-lora), 64 streaming clients for
   60 s over base + 8 adapters, random lengths, adapter load/unload churn, RSS every second;
4. writes <out-dir>/serve_bench_<mode>.json and <out-dir>/serve_bench_<mode>.md.
"""
import argparse
import ctypes
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench_sched import enter_priority_session  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
BENCH = os.path.join(ROOT, "tools", "bench")
DEFAULT_MODEL = os.path.join(ROOT, "bench-models", "qwen2.5-0.5b-shape")
DEFAULT_ADAPTERS = os.path.join(ROOT, "bench-models", "adapters")

sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import make_serve_model  # noqa: E402


def log(msg):
    print(f"[run_loom {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def die_with_parent():
    try:  # Linux: the child gets SIGKILL if this script dies, so no server outlives a run.
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


PRIORITY = -10


def measured_child():
    """preexec_fn of the measured processes (server, loom bench, load generator): die with this
    script, and run in a session of their own whose scheduler autogroup gets niceness PRIORITY
    (with autogroups, a plain nice value only orders processes within one session), as
    tools/bench/bench_core.py does. Needs root; PRIORITY 0 leaves priorities alone."""
    die_with_parent()
    enter_priority_session(PRIORITY)


def cpu_busy_fraction(seconds=2.0):
    def stat():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v[:8])
    i0, t0 = stat()
    time.sleep(seconds)
    i1, t1 = stat()
    return 0.0 if t1 == t0 else 1.0 - (i1 - i0) / (t1 - t0)


def wait_idle(max_wait, threshold=0.10):
    """Waits up to max_wait s until other processes leave the CPUs idle; returns the busy fraction."""
    if max_wait <= 0:
        return None
    deadline = time.time() + max_wait
    busy = cpu_busy_fraction()
    if busy > threshold:
        log(f"machine busy ({busy:.0%} of CPU used by other processes); waiting up to {max_wait:.0f} s")
    while busy > threshold and time.time() < deadline:
        time.sleep(3)
        busy = cpu_busy_fraction()
    if busy > threshold:
        log(f"machine still busy ({busy:.0%}); going ahead (others_cpu_frac in the results says how much)")
    return round(busy, 3)


def run_checked(cmd, **kw):
    log("$ " + " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


# --------------------------------------------------------------------------------------------
# inputs


def ensure_inputs(a):
    model = os.path.abspath(a.model)
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        if model != DEFAULT_MODEL:
            sys.exit(f"model {model} has no model.safetensors")
        log("making the bench model (~25 s, ~2 GB RAM)")
        run_checked([sys.executable, os.path.join(BENCH, "make_bench_model.py"), "--out", model,
                     "--no-gguf"])
    if a.adapter:
        adapters = [os.path.abspath(p) for p in a.adapter]
    else:
        adir = os.path.abspath(a.adapters_dir)
        adapters = [os.path.join(adir, f"r{a.rank}-{i}") for i in range(a.num_adapters)]
        if not all(os.path.exists(os.path.join(p, "adapter_model.safetensors")) for p in adapters):
            log(f"making {a.num_adapters} rank-{a.rank} adapters")
            run_checked([sys.executable, os.path.join(BENCH, "make_bench_adapters.py"), "--model",
                         model, "--out", adir, "--count", str(a.num_adapters), "--rank", str(a.rank)])
    if model.startswith(os.path.join(ROOT, "bench-models") + os.sep):
        serve_dir = model.rstrip("/") + "-serve"
    else:
        serve_dir = os.path.join(os.path.abspath(a.out_dir), os.path.basename(model.rstrip("/")) + "-serve")
    make_serve_model.make(model, serve_dir)
    with open(os.path.join(model, "config.json")) as f:
        vocab = int(json.load(f)["vocab_size"])
    return model, serve_dir, adapters, vocab


def machine_info(a):
    flags = set()
    model_name = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
                if line.startswith("model name") and model_name is None:
                    model_name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    isa = [x for x in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
                       "amx_int8") if x in flags]
    try:
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True).stdout.strip())
    except OSError:
        rev, dirty = None, None
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cpu": model_name, "cores": os.cpu_count(), "isa": isa, "threads": a.threads,
            "git_rev": rev, "git_dirty": dirty, "loom": os.path.abspath(a.loom),
            "loom_mtime": time.strftime("%Y-%m-%d %H:%M", time.gmtime(os.path.getmtime(a.loom)))}


# --------------------------------------------------------------------------------------------
# engine alone


def loom_bench(a, model, extra):
    wait_idle(a.wait_idle)
    # As the server: the same kernels (batch-invariant unless it was turned off, and the global
    # --exact-bf16 or the deprecated no-op --fast-bf16 when the server gets it) and the same
    # scheduler (--target-step-ms, as `--serve-arg=--target-step-ms --serve-arg=T` or `...=T`).
    as_server = [] if "--no-batch-invariant" in a.serve_arg else ["--batch-invariant"]
    for i, f in enumerate(a.serve_arg):
        if f in ("--exact-bf16", "--fast-bf16") or f.startswith("--target-step-ms="):
            as_server.append(f)
        elif f == "--target-step-ms":
            as_server += a.serve_arg[i:i + 2]
    cmd = [a.loom, "--threads", str(a.threads), "bench", "--model", model, "--prompt-len",
           str(a.prompt_len), "--gen-tokens", str(a.gen_tokens), "--json"] + as_server + extra
    log("$ " + " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=measured_child)
    if p.returncode != 0:
        log(f"loom bench failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        return {"error": p.stderr.strip()[-500:], "cmd": cmd}
    last = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    out = json.loads(last[-1]) if last else {}
    out["cmd"] = " ".join(cmd)
    out["wall_s"] = round(time.time() - t0, 1)
    return out


def engine_alone(a, model, adapters, concurrencies):
    """The matrix's workload on the engine alone: `loom bench --closed-loop C` runs C virtual
    clients (each submits its next request the step after its last one finished) through the same
    scheduler and kernels as `loom serve`, with no HTTP, SSE or client in the loop."""
    ref = {"rows": []}
    for c in concurrencies:
        n = a.requests or max(a.min_requests, 2 * c)
        for s in a.sets:
            extra = ["--closed-loop", str(c), "--requests", str(n), "--max-num-seqs",
                     str(a.max_num_seqs), "--seed", str(c)]
            if s == "lora":
                if not adapters:
                    continue
                for p in adapters:
                    extra += ["--lora", p]
            out = loom_bench(a, model, extra)
            cl = out.get("closed_loop") or {}
            ref["rows"].append({"set": s, "clients": c, "requests": n,
                                "output_tps": cl.get("output_tokens_per_s"),
                                "ttft_p50_s": cl.get("ttft_p50_s"), "ttft_p99_s": cl.get("ttft_p99_s"),
                                "cmd": out.get("cmd"), "error": out.get("error")})
    return ref


# --------------------------------------------------------------------------------------------
# the server


class Server:
    LISTEN_RE = re.compile(r"listening on http://([^:\s]+):(\d+)")

    def __init__(self, a, serve_dir, adapters, log_path, runtime_lora):
        self.cmd = [a.loom, "--threads", str(a.threads), "serve", "--model", serve_dir,
                    "--served-model-name", "base", "--max-loras", str(a.max_loras),
                    "--max-num-seqs", str(a.max_num_seqs), "--max-model-len", str(a.max_model_len),
                    "--port", "0"]
        self.names = []
        for i, p in enumerate(adapters):
            self.names.append(f"a{i}")
            self.cmd += ["--lora", f"a{i}={p}"]
        self.lora_dir = None
        if runtime_lora:
            self.lora_dir = os.path.abspath(a.lora_dir or os.path.dirname(adapters[0]))
            self.cmd += ["--lora-dir", self.lora_dir, "--allow-runtime-lora"]
        self.cmd += a.serve_arg
        self.log_path = log_path
        self.proc = None
        self.url = None

    def start(self, timeout=600):
        log("$ " + " ".join(self.cmd) + f"  (log: {self.log_path})")
        self.logf = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=self.logf, stderr=subprocess.STDOUT,
                                     preexec_fn=measured_child)
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loom serve exited with {self.proc.returncode}: "
                                   + open(self.log_path).read()[-1500:])
            if self.url is None:
                m = self.LISTEN_RE.search(open(self.log_path).read())
                if m:
                    self.url = f"http://{m.group(1)}:{m.group(2)}"
            if self.url is not None:
                try:
                    with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                        if r.status == 200:
                            self.ready_s = time.time() - t0
                            log(f"server ready at {self.url} after {self.ready_s:.1f} s "
                                f"(pid {self.proc.pid})")
                            return
                except (urllib.error.URLError, OSError):
                    pass
            time.sleep(0.25)
        raise RuntimeError("loom serve not ready in time")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def metrics(self):
        """Sums of a few vLLM counters from /metrics (for cross-checking token counts)."""
        want = ("vllm:generation_tokens_total", "vllm:prompt_tokens_total")
        out = {k: 0.0 for k in want}
        try:
            with urllib.request.urlopen(self.url + "/metrics", timeout=30) as r:
                for line in r.read().decode().splitlines():
                    for k in want:
                        if line.startswith(k + "{") or line.startswith(k + " "):
                            out[k] += float(line.rsplit(" ", 1)[1])
        except (urllib.error.URLError, OSError, ValueError) as exc:
            log(f"/metrics: {exc!r}")
            return None
        return out

    def stop(self):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                log("loom serve did not stop within 60 s of SIGTERM: SIGKILL")
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode


def load_gen(a, server, models, concurrency, n, out_json, vocab, extra=(), seed=0):
    # Each scenario gets its own seed: the same prompt sent twice to one server would hit its
    # prefix cache.
    cmd = [sys.executable, os.path.join(HERE, "load_gen.py"), "--base-url", server.url,
           "--model", ",".join(models), "--concurrency", str(concurrency),
           "--prompt-len", str(a.prompt_len), "--max-tokens", str(a.gen_tokens),
           "--vocab-size", str(vocab), "--seed", str(seed), "--server-pid", str(server.proc.pid),
           "--output", out_json, "--quiet", "--ramp-up", str(a.ramp_up)] + list(extra)
    if n is not None:
        cmd += ["--num-requests", str(n)]
    busy = wait_idle(a.wait_idle)
    log("$ " + " ".join(cmd))
    before = server.metrics()
    p = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=measured_child)
    if p.returncode != 0:
        raise RuntimeError(f"load_gen failed ({p.returncode}): {p.stderr[-1500:]}")
    with open(out_json) as f:
        rep = json.load(f)
    after = server.metrics()
    if before and after:
        rep["server_counters_delta"] = {k: after[k] - before[k] for k in after}  # incl. warm-up
    rep["machine_busy_before"] = busy
    return rep


# --------------------------------------------------------------------------------------------
# reports


def fmt(x, spec="{:.1f}"):
    return "—" if x is None else spec.format(x)


def matrix_md(res, a):
    lines = ["| models | clients | requests ok/sent | req/s | output tok/s | TTFT p50 / p99 ms | "
             "ITL p50 / p99 ms | TPOT p50 ms | e2e p50 ms | errors | server peak RSS MiB | "
             "server cores busy | client CPU | other processes' CPU | listen-queue overflows |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res:
        t, i, tp, e = r["ttft_ms"], r["itl_ms"], r["tpot_ms"], r["e2e_ms"]
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        lines.append(
            f"| {r['label']} | {r['concurrency']} | {r['requests_ok']}/{r['requests_sent']} | "
            f"{r['requests_per_s']:.3f} | {r['output_tokens_per_s']:.1f} | "
            f"{fmt(t.get('p50'), '{:.0f}')} / {fmt(t.get('p99'), '{:.0f}')} | "
            f"{fmt(i.get('p50'), '{:.0f}')} / {fmt(i.get('p99'), '{:.0f}')} | "
            f"{fmt(tp.get('p50'), '{:.0f}')} | {fmt(e.get('p50'), '{:.0f}')} | {errs} | "
            f"{fmt(r.get('server_peak_rss_mib'), '{:.0f}')} | {fmt(r.get('server_cores_busy'), '{:.2f}')} | "
            f"{fmt(r.get('client_cpu_frac_of_wall'), '{:.2f}')} | "
            f"{fmt(r.get('others_cpu_frac') * 100 if r.get('others_cpu_frac') is not None else None, '{:.0f} %')} | "
            f"{fmt(r.get('tcp_listen_overflows'), '{}')} |")
    return "\n".join(lines)


def engine_md(ref, matrix, a):
    lines = ["| workload | clients | engine alone output tok/s (`loom bench --closed-loop`) | "
             "TTFT p50 / p99 s | HTTP output tok/s | HTTP / engine |",
             "|---|---|---|---|---|---|"]
    for row in ref.get("rows", []):
        http = [r for r in matrix if r["concurrency"] == row["clients"] and r["set"] == row["set"]]
        h = http[0]["output_tokens_per_s"] if http else None
        e = row.get("output_tps")
        ratio = (h / e) if (h and e) else None
        label = "base" if row["set"] == "base" else "8 adapters round-robin"
        lines.append(f"| {label} | {row['clients']} | {fmt(e)} | {fmt(row.get('ttft_p50_s'), '{:.2f}')} / "
                     f"{fmt(row.get('ttft_p99_s'), '{:.2f}')} | {fmt(h)} | "
                     f"{fmt(ratio * 100 if ratio else None, '{:.0f} %')} |")
        row["http_output_tps"] = h
        row["http_over_engine"] = ratio
    return "\n".join(lines)


def soak_md(s):
    v = s.get("rss_verdict") or {}
    c = s.get("churn") or {}
    lines = [
        f"- {s['concurrency']} streaming clients for {s['duration_limit_s']:.0f} s over "
        f"{', '.join(s['models'])}; random lengths (prompt {s['prompt_len']}, output {s['max_tokens']}, "
        f"±{s['range_ratio'] * 100:.0f} %); measured window {s['wall_s']:.1f} s",
        f"- requests ok {s['requests_ok']} / sent {s['requests_sent']}; {s['requests_per_s']:.3f} req/s, "
        f"{s['output_tokens_per_s']:.1f} output tok/s; TTFT p50 / p99 {fmt(s['ttft_ms'].get('p50'), '{:.0f}')} / "
        f"{fmt(s['ttft_ms'].get('p99'), '{:.0f}')} ms; ITL p50 / p99 {fmt(s['itl_ms'].get('p50'), '{:.0f}')} / "
        f"{fmt(s['itl_ms'].get('p99'), '{:.0f}')} ms",
        f"- **non-503 errors: {s['errors_non_503']}** (503: {s['errors'].get('503', 0)}; all: "
        f"{s['errors'] or 'none'})",
        f"- adapter churn: {c.get('cycles', 0)} load → request → unload cycles; load {c.get('load_status')}, "
        f"request {c.get('request_status')}, unload {c.get('unload_status')}; load p50 "
        f"{fmt((c.get('load_ms') or {}).get('p50'))} ms",
        f"- RSS (VmRSS every second): {fmt(v.get('after_warmup_start_mib'), '{:.0f}')} MiB after "
        f"{fmt(v.get('warmup_s'), '{:.0f}')} s warm-up → {fmt(v.get('end_mib'), '{:.0f}')} MiB at the end "
        f"(growth {fmt(v.get('growth_mib'))} MiB, slope {fmt(v.get('slope_mib_per_min'))} MiB/min, "
        f"tolerance {fmt(v.get('tolerance_mib'))} MiB): "
        f"**{'flat' if v.get('flat') else ('NOT flat' if 'flat' in v else 'not determined: ' + str(v.get('note')))}**; "
        f"peak RSS (VmHWM) {fmt(s.get('server_peak_rss_mib'), '{:.0f}')} MiB",
        f"- TCP listen-queue overflows during the run (each a ~1 s stall for one client): "
        f"{s.get('tcp_listen_overflows')}",
        f"- server exit code after SIGTERM: {s.get('server_exit_code')}",
    ]
    vs = s.get("verify_solo")
    if vs:
        lines.append(f"- **solo re-runs: {vs['equal']} / {vs['checked']} equal** to the response under "
                     f"load (token ids and log-probs, compared exactly; {vs.get('sampled_requests', 0)} "
                     f"of them seeded sampling at temperature 0.8, the rest greedy)"
                     + (f"; mismatches: {vs['mismatches']}" if vs.get("mismatches") else ""))
    return "\n".join(lines)


def write_reports(a, result):
    for r in result.get("matrix", []) + ([result["soak"]] if result.get("soak") else []):
        o = r.get("others_cpu_frac")
        if o is not None and o > 0.05:
            result["notes"].append(f"'{r.get('label', 'soak')}' c={r['concurrency']}: other processes "
                                   f"took {o:.0%} of the CPUs during the run: its figures are low")
        if r.get("tcp_listen_overflows"):
            result["notes"].append(f"'{r.get('label', 'soak')}' c={r['concurrency']}: "
                                   f"{r['tcp_listen_overflows']} TCP listen-queue overflows (system-wide "
                                   f"counter): a SYN dropped at a full accept queue costs its client a "
                                   f"1 s retransmission, which lands in TTFT")
    out = os.path.abspath(a.out_dir)
    os.makedirs(out, exist_ok=True)
    m = result["meta"]
    md = [f"# loom serve load benchmark ({m['date_utc']})", "",
          f"loom {m['git_rev']}{' (dirty tree)' if m['git_dirty'] else ''}, binary built {m['loom_mtime']} UTC; "
          f"CPU {m['cpu']}, {m['cores']} cores, ISA {' '.join(m['isa'])}; --threads {m['threads']}; "
          f"model {os.path.basename(result['model'])} (random weights, bf16), "
          f"{len(result['adapters'])} rank-{a.rank} adapters; prompt {a.prompt_len} tokens, "
          f"{a.gen_tokens} output tokens, greedy, ignore_eos, streaming; "
          f"`loom serve --max-num-seqs {a.max_num_seqs} --max-loras {a.max_loras} "
          f"--max-model-len {a.max_model_len}`. Load generator and server share the machine.", ""]
    if result.get("matrix"):
        md += ["## Matrix", "", matrix_md(result["matrix"], a), ""]
        if result.get("engine_alone"):
            md += ["## HTTP overhead against the engine alone", "",
                   engine_md(result["engine_alone"], result["matrix"], a), "",
                   "The engine-alone run is the same closed loop (same clients, requests, lengths, "
                   "scheduler, kernels and --max-num-seqs) with clients that take no time: the ratio is "
                   "what HTTP, SSE, the client and the thread hand-offs cost.", ""]
    if result.get("soak"):
        md += ["## Soak", "", soak_md(result["soak"]), ""]
    if result.get("notes"):
        md += ["## Notes", ""] + [f"- {n}" for n in result["notes"]] + [""]
    stem = os.path.join(out, f"serve_bench_{a.mode}")
    with open(stem + ".json", "w") as f:
        json.dump(result, f, indent=1)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(md) + "\n")
    log(f"wrote {stem}.json and {stem}.md")
    print("\n".join(md))


# --------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--mode", choices=["matrix", "soak", "all"], default="matrix")
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="loom compute threads")
    ap.add_argument("--model", default=DEFAULT_MODEL, help="HF model folder (made if it is the default)")
    ap.add_argument("--adapters-dir", default=DEFAULT_ADAPTERS)
    ap.add_argument("--adapter", action="append", default=[],
                    help="use these adapter folders instead of <adapters-dir>/r16-N (repeatable)")
    ap.add_argument("--lora-dir", default=None,
                    help="soak: loom --lora-dir (default: the adapters' parent folder)")
    ap.add_argument("--num-adapters", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "bench-models", "serve-results"))
    ap.add_argument("--concurrency", default="8,32", help="matrix: client counts")
    ap.add_argument("--sets", default="base,lora",
                    help="matrix: 'base' (base model only) and/or 'lora' (adapters round-robin)")
    ap.add_argument("--requests", type=int, default=None,
                    help="matrix: requests per scenario (default max(--min-requests, 2 x clients))")
    ap.add_argument("--min-requests", type=int, default=16)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=8, help="warm-up requests before the first scenario")
    ap.add_argument("--skip-engine-bench", action="store_true")
    ap.add_argument("--max-num-seqs", type=int, default=32)
    ap.add_argument("--max-loras", type=int, default=8)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="extra `loom serve` argument (repeatable, e.g. --serve-arg=--no-batch-invariant)")
    ap.add_argument("--soak-duration", type=float, default=60.0)
    ap.add_argument("--soak-concurrency", type=int, default=64)
    ap.add_argument("--soak-range-ratio", type=float, default=0.75)
    ap.add_argument("--soak-verify", type=int, default=24,
                    help="soak: re-run this many finished requests alone and compare tokens and "
                         "log-probs bitwise")
    ap.add_argument("--soak-sampled", type=float, default=0.25,
                    help="soak: fraction of requests that sample (seeded) instead of greedy")
    ap.add_argument("--churn-interval", type=float, default=2.0)
    ap.add_argument("--ramp-up", type=float, default=0.0,
                    help="load_gen --ramp-up: spread the clients' first connections over this many "
                         "seconds (default 0: a burst, as real clients do)")
    ap.add_argument("--wait-idle", type=float, default=120.0,
                    help="before each measurement, wait up to this many seconds for the CPUs to be idle")
    ap.add_argument("--priority", type=int, default=-10,
                    help="niceness of the autogroup of each measured process (root; 0 = leave alone)")
    a = ap.parse_args()
    global PRIORITY
    PRIORITY = a.priority
    a.sets = [s for s in a.sets.split(",") if s]
    a.loom = os.path.abspath(a.loom)
    if not os.access(a.loom, os.X_OK):
        sys.exit(f"{a.loom} is not an executable (build loom first)")
    concurrencies = [int(c) for c in a.concurrency.split(",") if c]
    out = os.path.abspath(a.out_dir)
    os.makedirs(out, exist_ok=True)

    est = 0
    if a.mode in ("matrix", "all"):
        est += 30 + (0 if a.skip_engine_bench else 150) + sum(
            (12 if c <= 8 else 30) * max(a.min_requests, 2 * c) // c * len(a.sets) for c in concurrencies)
    if a.mode in ("soak", "all"):
        est += 30 + a.soak_duration + 60
    log(f"expected run time on the 2-core bench VM: roughly {est / 60:.0f} min; keep the machine idle")

    model, serve_dir, adapters, vocab = ensure_inputs(a)
    result = {"meta": machine_info(a), "model": model, "serve_model": serve_dir, "adapters": adapters,
              "settings": {k: v for k, v in vars(a).items()}, "notes": []}
    load1 = os.getloadavg()[0]
    if load1 > 0.5:
        result["notes"].append(f"1-min load average was {load1:.2f} at the start: other work was "
                               f"running; figures may be low")
    names = [f"a{i}" for i in range(len(adapters))]

    try:
        if a.mode in ("matrix", "all"):
            if not a.skip_engine_bench:
                result["engine_alone"] = engine_alone(a, model, adapters, concurrencies)
            srv = Server(a, serve_dir, adapters, os.path.join(out, "serve_matrix.log"), runtime_lora=False)
            srv.start()
            result["server_ready_s"] = round(srv.ready_s, 1)
            rows = []
            first = True
            try:
                for c in concurrencies:
                    for s in a.sets:
                        models = ["base"] if s == "base" else names
                        n = a.requests or max(a.min_requests, 2 * c)
                        label = "base" if s == "base" else f"{len(names)} adapters round-robin"
                        extra = ["--warmup", str(a.warmup)] if first and a.warmup else []
                        first = False
                        rep = load_gen(a, srv, models, c, n, os.path.join(out, f"matrix_{s}_c{c}.json"),
                                       vocab, extra, seed=a.seed * 1000 + len(rows))
                        rep["label"], rep["set"] = label, s
                        rep["loadavg_1min_before"] = load1
                        rows.append(rep)
                        log(f"{label}, c={c}: {rep['requests_ok']}/{rep['requests_sent']} ok, "
                            f"{rep['output_tokens_per_s']:.1f} out tok/s, TTFT p50 "
                            f"{fmt(rep['ttft_ms'].get('p50'), '{:.0f}')} ms, ITL p50 "
                            f"{fmt(rep['itl_ms'].get('p50'), '{:.0f}')} ms, errors {rep['errors']}")
                        if not srv.alive():
                            result["notes"].append(f"loom serve died during '{label}' c={c} "
                                                   f"(exit {srv.proc.returncode}); see serve_matrix.log")
                            raise RuntimeError("server died")
                        load1 = os.getloadavg()[0]
            finally:
                rc = srv.stop()
                result["matrix_server_exit_code"] = rc
                if rc not in (0, None):
                    result["notes"].append(f"matrix server exited with {rc} after SIGTERM")
            result["matrix"] = rows
        if a.mode in ("soak", "all"):
            srv = Server(a, serve_dir, adapters, os.path.join(out, "serve_soak.log"), runtime_lora=True)
            srv.start()
            churn = []
            for p in adapters:
                rel = os.path.relpath(os.path.realpath(p), os.path.realpath(srv.lora_dir))
                churn += ["--churn-path", rel if not rel.startswith("..") else os.path.realpath(p)]
            try:
                rep = load_gen(a, srv, ["base"] + names, a.soak_concurrency, None,
                               os.path.join(out, "soak.json"), vocab,
                               ["--duration", str(a.soak_duration), "--random-lengths",
                                "--range-ratio", str(a.soak_range_ratio), "--rss-interval", "1",
                                "--churn-interval", str(a.churn_interval), "--warmup", str(a.warmup),
                                "--drain-timeout", "180", "--verify-solo", str(a.soak_verify),
                                "--sampled-fraction", str(a.soak_sampled)] + churn,
                               seed=a.seed * 1000 + 999)
                rep["server_alive_after"] = srv.alive()
            finally:
                rc = srv.stop()
            rep["server_exit_code"] = rc
            result["soak"] = rep
            log(f"soak: {rep['requests_ok']}/{rep['requests_sent']} ok, non-503 errors "
                f"{rep['errors_non_503']}, RSS verdict {rep.get('rss_verdict')}")
    finally:
        write_reports(a, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
