#!/usr/bin/env bash
# End-to-end tests: starts the real `loom serve` on loopback and drives it with the official
# openai client (tests/e2e). Run after the C++ build. Creates .venv-e2e (once) with the pinned
# tests/e2e/requirements.txt, then runs pytest and exits with its code.
#   LOOM_BIN   the binary to test (default: build/loom)
#   PYTHON     the interpreter that makes the venv (default: python3)
#   extra arguments go to pytest, e.g. scripts/run-e2e.sh -k adapters -x
set -euo pipefail
cd "$(dirname "$0")/.."
export LOOM_BIN="${LOOM_BIN:-build/loom}"
case "$LOOM_BIN" in /*) ;; *) LOOM_BIN="$PWD/$LOOM_BIN" ;; esac
if [[ ! -x "$LOOM_BIN" ]]; then
  echo "run-e2e: $LOOM_BIN is not an executable; build loom first (or set LOOM_BIN)" >&2
  exit 2
fi
VENV=.venv-e2e
REQS=tests/e2e/requirements.txt
if [[ ! -x "$VENV/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$VENV"
fi
# Install only when the requirements changed since the last install.
STAMP="$VENV/.requirements.sha256"
WANT="$(sha256sum "$REQS" | cut -d' ' -f1)"
if [[ ! -f "$STAMP" || "$(cat "$STAMP")" != "$WANT" ]]; then
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQS"
  echo "$WANT" > "$STAMP"
fi
set +e
"$VENV/bin/python" -m pytest -q tests/e2e "$@"
exit $?
