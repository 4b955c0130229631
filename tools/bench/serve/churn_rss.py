#!/usr/bin/env python3
"""Adapter churn against one `loom serve`, nothing else running: the server's VmRSS every 10 cycles.

Each cycle loads an adapter under a new name (`churn-<i>`, path `r16-<i mod 8>` in --lora-dir),
sends one 2-token completion to it and unloads it (`--mode churn`); `--mode load` skips the
request, `--mode base` only sends the request to the base model. A server whose RSS keeps rising
cycle after cycle holds something per adapter name; one that levels off only reached its
allocator's high-water mark. Standard library only.

  .venv-serve-bench/bin/python tools/bench/serve/churn_rss.py --mode churn --cycles 120
"""
import argparse
import json
import os
import re
import subprocess
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["churn", "load", "base"], default="churn")
    ap.add_argument("--cycles", type=int, default=60)
    ap.add_argument("--port", type=int, default=18123)
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--model", default=os.path.join(ROOT, "bench-models", "qwen2.5-0.5b-shape-serve"))
    ap.add_argument("--lora-dir", default=os.path.join(ROOT, "bench-models", "adapters"))
    a = ap.parse_args()
    server = subprocess.Popen(
        [a.loom, "--threads", "2", "serve", "--model", a.model, "--served-model-name", "base",
         "--max-num-seqs", "8", "--max-model-len", "2048", "--port", str(a.port),
         "--lora-dir", a.lora_dir, "--allow-runtime-lora"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def post(path, body):
        req = urllib.request.Request(f"http://127.0.0.1:{a.port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.read()

    def rss_mib():
        with open(f"/proc/{server.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) // 1024

    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{a.port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        print(f"cycle 0: {rss_mib()} MiB", flush=True)
        for i in range(a.cycles):
            name = f"churn-{i}"
            if a.mode != "base":
                post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": f"r16-{i % 8}"})
            if a.mode != "load":
                post("/v1/completions", {"model": name if a.mode == "churn" else "base",
                                         "prompt": [1, 2, 3, 4, 5, 6, 7, 8], "max_tokens": 2})
            if a.mode != "base":
                post("/v1/unload_lora_adapter", {"lora_name": name})
            if i % 10 == 9:
                print(f"cycle {i + 1}: {rss_mib()} MiB", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
