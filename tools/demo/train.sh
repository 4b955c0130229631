#!/usr/bin/env bash
# Trains the demo model (models/demo): tokenizer, base Llama, three PEFT LoRA adapters, then the
# goldens. CPU only, 2 threads, fixed seeds; about 35 minutes on 2 cores.
#   bash tools/demo/train.sh [OUT_DIR]        (default models/demo)
# Uses .venv-ref (made here from tools/demo/requirements.txt when missing; the same pins as
# tools/ref/requirements.txt). Set PYTHON to use another interpreter with those packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-models/demo}"
PY="${PYTHON:-.venv-ref/bin/python}"
if [ -z "${PYTHON:-}" ] && ! "$PY" -c 'import torch, transformers, peft, tokenizers' 2>/dev/null; then
  [ -x .venv-ref/bin/python ] || python3 -m venv .venv-ref
  .venv-ref/bin/pip install -q -r tools/demo/requirements.txt
fi
export PYTHONHASHSEED=0 OMP_NUM_THREADS="${DEMO_THREADS:-2}" DEMO_THREADS="${DEMO_THREADS:-2}"
mkdir -p "$OUT"
rm -f "$OUT/training_stats.json"
start=$(date +%s)
"$PY" tools/demo/train.py tokenizer --out "$OUT"
"$PY" tools/demo/train.py base --out "$OUT"
"$PY" tools/demo/train.py base2 --out "$OUT"
for a in shout pirate facts; do "$PY" tools/demo/train.py adapter "$a" --out "$OUT"; done
"$PY" tools/demo/goldens.py --out "$OUT"
echo "train.sh: done in $(( $(date +%s) - start )) s"
