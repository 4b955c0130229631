#!/usr/bin/env bash
# The main job: installs dependencies, builds loom and generates from the bundled demo model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target loom
./build/loom generate --model tests/fixtures/models/qwen3_bf16 \
  --prompt-tokens 50,214,41,56,207 --max-tokens 24 --temperature 0.8 --seed 7 \
  --logprobs 3 --output json "$@"
