#!/usr/bin/env bash
# Creates .venv-bench/ in the repo root with the peer-benchmark packages (tools/bench/requirements.txt).
#
# Idempotent: rerunning it skips what is already installed. llama-cpp-python is compiled from its sdist
# (it vendors llama.cpp) as a CPU-only build with GGML_NATIVE=ON (-march=native: AVX-512, AVX512-BF16,
# AMX, ... whatever this CPU has). The compile log goes to .venv-bench/llama-cpp-python-build.log.
#
# Environment knobs:
#   PYTHON=python3            interpreter used to create the venv
#   BENCH_BUILD_JOBS=1        parallel compile jobs for llama.cpp (default 1: 2-core machines)
#   FORCE_LLAMA_REBUILD=1     rebuild llama-cpp-python even if it is installed
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="$ROOT/.venv-bench"
REQ="$ROOT/tools/bench/requirements.txt"
PYTHON="${PYTHON:-python3}"
JOBS="${BENCH_BUILD_JOBS:-1}"
LOG="$VENV/llama-cpp-python-build.log"

if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup_venv] creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"
"$PY" -m pip install --quiet --upgrade pip

# Everything except llama-cpp-python (plain wheels).
grep -v -E '^\s*(#|$)' "$REQ" | grep -v -i '^llama-cpp-python' > "$VENV/.req-wheels.txt"
echo "[setup_venv] installing wheels: $(tr '\n' ' ' < "$VENV/.req-wheels.txt")"
"$PY" -m pip install --quiet -r "$VENV/.req-wheels.txt"

LLAMA_REQ="$(grep -i '^llama-cpp-python' "$REQ")"
LLAMA_VER="${LLAMA_REQ#*==}"
HAVE_VER="$("$PY" -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))' 2>/dev/null || true)"
if [ "$HAVE_VER" = "$LLAMA_VER" ] && [ "${FORCE_LLAMA_REBUILD:-0}" != "1" ] \
   && "$PY" -c 'import llama_cpp' 2>/dev/null; then
    echo "[setup_venv] llama-cpp-python $HAVE_VER already installed (FORCE_LLAMA_REBUILD=1 to rebuild)"
else
    echo "[setup_venv] building $LLAMA_REQ from source with $JOBS job(s); log: $LOG"
    echo "[setup_venv] this takes a long time on 2 cores (see tools/bench/README.md)"
    start=$(date +%s)
    # CPU only, native ISA; no multimodal (mtmd) library, which the benchmark does not use.
    export CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF"
    export CMAKE_BUILD_PARALLEL_LEVEL="$JOBS"
    export MAKEFLAGS="-j$JOBS"
    # --no-cache-dir: a -march=native wheel must not be reused from pip's cache on another CPU.
    if ! nice -n 19 "$PY" -m pip install --verbose --no-cache-dir --force-reinstall --no-deps \
            --no-binary llama-cpp-python "$LLAMA_REQ" > "$LOG" 2>&1; then
        echo "[setup_venv] llama-cpp-python build FAILED; last lines of $LOG:" >&2
        tail -40 "$LOG" >&2
        exit 1
    fi
    # Its runtime dependencies (typing-extensions, diskcache, jinja2, numpy) as wheels.
    "$PY" -m pip install --quiet "$LLAMA_REQ"
    echo "[setup_venv] llama-cpp-python built in $(( $(date +%s) - start )) s" | tee -a "$LOG"
fi

"$PY" - <<'PYEOF'
import llama_cpp, gguf, numpy
print("[setup_venv] ok: llama-cpp-python", llama_cpp.__version__, "| numpy", numpy.__version__,
      "| gguf", __import__("importlib.metadata").metadata.version("gguf"))
print("[setup_venv] llama.cpp system info:", llama_cpp.llama_print_system_info().decode().strip())
PYEOF
