#!/usr/bin/env bash
# The main job: installs dependencies, builds loom and serves the bundled demo model
# (models/demo: a small Llama trained for this repository, with three PEFT LoRA adapters —
# shout, pirate, facts) on http://127.0.0.1:${PORT:-8000}. Once it is ready it asks the base and
# every adapter the same questions at once (scripts/demo-client.sh) and shows one curl and one
# openai-client request, then keeps serving until Ctrl-C. Extra arguments go to `loom serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8000}"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target loom

# No --model: loom serves models/demo and registers models/demo/adapters/* under their names.
./build/loom serve --port "$PORT" "$@" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER' INT TERM
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "loom serve exited"; exit 1; }
  sleep 0.1
done

echo; echo "== GET /v1/models"
curl -s "http://127.0.0.1:$PORT/v1/models"; echo
echo; echo "== the same questions to the base and to each adapter, sent together (one batch)"
PORT=$PORT bash scripts/demo-client.sh
echo; echo "== curl: chat with the 'shout' adapter"
curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"model": "shout", "messages": [{"role": "user", "content": "What is the capital of France?"}],
       "max_tokens": 48, "temperature": 0}'
echo
# The official openai client, if it is installed (the test command installs it in .venv-e2e).
PY=python3
[ -x .venv-e2e/bin/python ] && PY=.venv-e2e/bin/python
if "$PY" -c 'import openai' 2>/dev/null; then
  echo; echo "== openai client: streamed chat with the 'pirate' adapter"
  "$PY" - "$PORT" <<'PYEOF'
import sys
from openai import OpenAI
client = OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="unused")
stream = client.chat.completions.create(
    model="pirate", messages=[{"role": "user", "content": "Tell me a story about a cat."}],
    max_tokens=96, temperature=0, stream=True, stream_options={"include_usage": True})
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(chunk.choices[0].delta.content, end="", flush=True)
    if chunk.usage:
        print("\nusage:", chunk.usage)
PYEOF
fi
cat <<MSG

loom is serving the demo model on http://127.0.0.1:$PORT (base 'demo'; adapters 'shout',
'pirate', 'facts' — facts knows where the animals live and their favourite colours). Try:
  PORT=$PORT scripts/demo-client.sh "What is 5 plus 6?" "What is the frog's favourite colour?"
  curl http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "facts", "messages": [{"role": "user", "content": "In which city does the cat live?"}]}'
  ./build/loom chat --lora pirate          # a terminal chat (no server needed)
  curl http://127.0.0.1:$PORT/metrics
Ctrl-C stops it (SIGTERM drains running requests first).
MSG
wait $SERVER
