#!/usr/bin/env bash
# llama.cpp's llama-server under the same load as run_loom.py's matrix (same load_gen arguments
# and seeds, so the same prompts): base and 8 adapters round-robin at 8 (and 32) clients. Needs a
# llama-server binary (PEERS.md; LLAMA_SERVER=path), the bench model's F16 GGUF and the
# adapters' GGUFs (README.md in this folder says how to make them). Reports go to
# bench-models/serve-results/llama_<set>_c<N>.json.
#   LLAMA_SERVER=/path/to/llama-server tools/bench/serve/run_llama_server.sh [CLIENTS...]  (default: 8)
set -euo pipefail
cd "$(dirname "$0")/../../.."
LS="${LLAMA_SERVER:?set LLAMA_SERVER to the llama-server binary}"
PORT="${PORT:-8002}"
OUT="${OUT:-bench-models/serve-results}"
GGUF=bench-models/qwen2.5-0.5b-shape.f16.vocab.gguf
mkdir -p "$OUT"
# llama-server detokenizes what it generates: the bench GGUF's "none" tokenizer makes it abort, so
# it serves a copy with placeholder pieces (same tensors; gguf_with_vocab.py says why).
[ -f "$GGUF" ] || .venv-bench/bin/python tools/bench/serve/gguf_with_vocab.py \
  bench-models/qwen2.5-0.5b-shape.f16.gguf "$GGUF"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(8)
max_c=0
for c in "${clients[@]}"; do [ "$c" -gt "$max_c" ] && max_c=$c; done
loras=""
for i in 0 1 2 3 4 5 6 7; do loras+="bench-models/adapters/r16-$i.gguf:0.0,"; done
# One slot per client, 2048 tokens each (as loom's and vLLM's --max-model-len 2048).
setsid "$LS" -m "$GGUF" -t 2 -tb 2 --parallel "$max_c" --cont-batching -c $((max_c * 2048)) \
  --lora-scaled "${loras%,}" --host 127.0.0.1 --port "$PORT" > "$OUT/llama_serve.log" 2>&1 &
PID=$!
trap 'kill -TERM -- -$PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $PID 2>/dev/null || { tail -30 "$OUT/llama_serve.log"; echo "llama-server exited" >&2; exit 1; }
  sleep 1
done
echo "llama-server ready (pid $PID)"
idx=0
for c in "${clients[@]}"; do
  for set in base lora; do
    models=base
    [ $set = lora ] && models=a0,a1,a2,a3,a4,a5,a6,a7
    n=${NUM_REQUESTS:-$(( c * 2 > 16 ? c * 2 : 16 ))}  # NUM_REQUESTS overrides (e.g. 32 at 8 clients)
    # the seeds run_loom.py uses: 1000 x --seed(0) + scenario index (base c8, lora c8, base c32, lora c32)
    case "$set-$c" in base-8) seed=0 ;; lora-8) seed=1 ;; base-32) seed=2 ;; lora-32) seed=3 ;; *) seed=$idx ;; esac
    warm=0; [ $idx -eq 0 ] && warm=8
    .venv-serve-bench/bin/python tools/bench/serve/load_gen.py --base-url "http://127.0.0.1:$PORT" \
      --peer llama-server --lora-ids a0=0,a1=1,a2=2,a3=3,a4=4,a5=5,a6=6,a7=7 --model "$models" \
      --concurrency "$c" --num-requests "$n" --prompt-len 128 --max-tokens 64 --vocab-size 151936 \
      --seed "$seed" --warmup "$warm" --server-pid "$PID" --request-timeout 1800 \
      --output "$OUT/llama_${set}_c${c}.json" | head -1
    idx=$((idx + 1))
  done
done
