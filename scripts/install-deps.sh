#!/usr/bin/env bash
# Installs what loom builds and tests with (Debian packages); idempotent. --ref also makes the
# Python venv (.venv-ref) that tools/ref/ uses to regenerate fixtures (torch, transformers, peft).
set -euo pipefail
cd "$(dirname "$0")/.."

# clang + libclang-rt-14-dev: the sanitized build and libFuzzer targets (scripts/run-tests.sh,
# scripts/fuzz.sh); ccache makes their rebuilds cheap.
PACKAGES=(build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libboost-dev
          libpcre2-dev libutf8proc-dev libgtest-dev libgmock-dev libbenchmark-dev python3 python3-venv
          clang libclang-rt-14-dev ccache)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = "--ref" ]; then
  if [ ! -x .venv-ref/bin/python ]; then python3 -m venv .venv-ref; fi
  .venv-ref/bin/pip install -q -r tools/ref/requirements.txt
fi
