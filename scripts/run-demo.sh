#!/usr/bin/env bash
# The main job: installs dependencies, builds loom and serves a bundled model with two PEFT
# adapters on http://127.0.0.1:${PORT:-8000}; sends one request to the base and to each
# adapter (curl and the official openai client), then keeps serving until Ctrl-C.
#
# The bundled model is a tiny random-weight Llama (tests/fixtures/models/llama_f32, 3 layers,
# a 256-token byte-level vocabulary): its "text" is noise, but every part of the serving path
# is real — chat template, tokenizer, per-request adapters in one batch, streaming, metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${PORT:-8000}"
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target loom

MODEL=build/demo-model/tiny-llama
python3 tests/e2e/tiny_model.py tests/fixtures/models/llama_f32 "$MODEL"
./build/loom serve --model "$MODEL" --port "$PORT" \
  --lora qv=tests/fixtures/adapters/llama_qv_r8_f32 \
  --lora mlp=tests/fixtures/adapters/llama_mlp_r6 \
  --lora-dir tests/fixtures/adapters --allow-runtime-lora "$@" &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER' INT TERM
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $SERVER 2>/dev/null || { echo "loom serve exited"; exit 1; }
  sleep 0.1
done

echo; echo "== GET /v1/models"
curl -s "http://127.0.0.1:$PORT/v1/models"; echo
for model in tiny-llama qv mlp; do
  echo; echo "== POST /v1/completions model=$model (greedy, 12 tokens, token ids back)"
  curl -s "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"model\": \"$model\", \"prompt\": [50, 214, 41, 56, 207], \"max_tokens\": 12,
         \"temperature\": 0, \"return_token_ids\": true}"
  echo
done
# The official openai client, if it is installed (the test command installs it in .venv-e2e).
PY=python3
[ -x .venv-e2e/bin/python ] && PY=.venv-e2e/bin/python
if "$PY" -c 'import openai' 2>/dev/null; then
  echo; echo "== openai client: chat, streamed, adapter 'qv'"
  "$PY" - "$PORT" <<'PYEOF'
import sys
from openai import OpenAI
client = OpenAI(base_url=f"http://127.0.0.1:{sys.argv[1]}/v1", api_key="unused")
stream = client.chat.completions.create(
    model="qv", messages=[{"role": "user", "content": "Hello!"}], max_tokens=12,
    temperature=0, stream=True, stream_options={"include_usage": True})
for chunk in stream:
    if chunk.choices and chunk.choices[0].delta.content:
        print(repr(chunk.choices[0].delta.content), end=" ")
    if chunk.usage:
        print("\nusage:", chunk.usage)
PYEOF
fi
cat <<MSG

loom is serving on http://127.0.0.1:$PORT (model 'tiny-llama'; adapters 'qv', 'mlp', and any
folder under tests/fixtures/adapters by name, e.g. 'llama_all_r4_f16'). Try:
  curl http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' \\
       -d '{"model": "mlp", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}'
  curl http://127.0.0.1:$PORT/metrics
Ctrl-C stops it (SIGTERM drains running requests first).
MSG
wait $SERVER
