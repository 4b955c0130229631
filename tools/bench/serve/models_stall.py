"""/health latency on loom's I/O thread while another client polls /v1/models, on a server with
N adapter names (the tiny llama fixture under tests/fixtures, N --lora of one adapter).

    python tools/bench/serve/models_stall.py build/loom 2048

Prints p50/p99/max of back-to-back /health requests for 4 s, alternately alone and with a poller;
every stream's chunks go through the same I/O thread, so its stalls are theirs."""
import pathlib
import re
import subprocess
import sys
import threading
import time

import requests

binary, n = sys.argv[1], int(sys.argv[2])
fx = str(pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures")
args = [binary, "serve", "--model", f"{fx}/models/llama_f32", "--port", "0", "--max-cpu-loras", "2",
        "--max-lora-names", str(n + 10)]
for i in range(n):
    args += ["--lora", f"a{i:04d}={fx}/adapters/llama_qv_r8_f32"]
p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
port = None
for line in p.stderr:
    m = re.search(r"listening on http://[^:]+:(\d+)", line)
    if m: port = m.group(1)
    if line.startswith("loom: ready") and port: break
    if "error" in line or "warning" in line: print(line.strip()[:300], flush=True)
threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
url = f"http://127.0.0.1:{port}"
def health(poll):
    stop = False
    polls = [0]
    def poller():
        while not stop:
            requests.get(url + "/v1/models"); polls[0] += 1
    t = threading.Thread(target=poller)
    if poll: t.start()
    out = []
    sess = requests.Session()
    t_end = time.perf_counter() + 4
    while time.perf_counter() < t_end:
        t0 = time.perf_counter(); sess.get(url + "/health"); out.append(time.perf_counter() - t0)
    stop = True
    if poll: t.join()
    out.sort()
    return out[len(out)//2]*1e3, out[int(len(out)*0.99)]*1e3, out[-1]*1e3, polls[0]
for poll in (False, True, False, True):
    print("poll" if poll else "idle", "/health p50 %.2f ms, p99 %.2f ms, max %.2f ms, %d /v1/models" % health(poll), flush=True)
p.terminate(); p.wait()
