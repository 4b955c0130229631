#!/usr/bin/env bash
# Sends the same chat question to the base model and to every adapter a running `loom serve`
# lists, all at once (so they share batches), and prints the answers side by side.
#   scripts/demo-client.sh ["question" ...]      (default: three questions for the demo model)
#   PORT=8000 HOST=127.0.0.1 LOOM_API_KEY=...    (where the server is)
# Needs only python3's standard library.
set -euo pipefail
HOST="${HOST:-127.0.0.1}"
PORT="${PORT:-8000}"
exec python3 - "http://$HOST:$PORT" "$@" <<'PYEOF'
import concurrent.futures, json, os, sys, textwrap, urllib.request

base_url, questions = sys.argv[1], sys.argv[2:]
if not questions:
    questions = ["What colour is the sky?", "What is 3 plus 4?", "In which city does the cat live?"]
headers = {"Content-Type": "application/json"}
if os.environ.get("LOOM_API_KEY"):
    headers["Authorization"] = "Bearer " + os.environ["LOOM_API_KEY"]

def call(path, body=None):
    req = urllib.request.Request(base_url + path, headers=headers,
                                 data=None if body is None else json.dumps(body).encode())
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)

try:
    models = [m["id"] for m in call("/v1/models")["data"]]
except OSError as e:
    sys.exit(f"demo-client: no loom server at {base_url} ({e}); start one with scripts/run-demo.sh")

def ask(model, question):
    out = call("/v1/chat/completions", {
        "model": model, "messages": [{"role": "user", "content": question}],
        "temperature": 0, "max_tokens": 64})
    return out["choices"][0]["message"]["content"].strip()

width = max(len(m) for m in models)
with concurrent.futures.ThreadPoolExecutor(len(models) * len(questions)) as pool:
    jobs = {(q, m): pool.submit(ask, m, q) for q in questions for m in models}
    for q in questions:
        print(f"\n\033[1m{q}\033[0m")
        for m in models:
            answer = jobs[(q, m)].result()
            lines = textwrap.wrap(answer, 100 - width) or [""]
            print(f"  {m:<{width}}  {lines[0]}")
            for line in lines[1:]:
                print(f"  {'':<{width}}  {line}")
PYEOF
