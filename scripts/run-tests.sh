#!/usr/bin/env bash
# The test command: installs dependencies, builds loom and runs every ctest (unit, golden); the
# end-to-end tests (the real server driven by the official openai client, tests/e2e); then the
# unit tests again with ASan + UBSan and each libFuzzer target for a short budget, both from one
# clang build (build-fuzz; LOOM_FUZZ_SECONDS, default 10 s; 0 skips the fuzz runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)  # the affinity mask; a container's CPU quota bounds it too (cgroup v2, then v1)
quota=0
if [ -r /sys/fs/cgroup/cpu.max ]; then
  read -r q p < /sys/fs/cgroup/cpu.max || true
  [ "${q:-max}" != max ] && [ "${p:-0}" -gt 0 ] && quota=$(( (q + p - 1) / p ))
elif [ -r /sys/fs/cgroup/cpu/cpu.cfs_quota_us ] && [ -r /sys/fs/cgroup/cpu/cpu.cfs_period_us ]; then
  q=$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us); p=$(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)
  [ "$q" -gt 0 ] && [ "$p" -gt 0 ] && quota=$(( (q + p - 1) / p ))
fi
[ "$quota" -gt 0 ] && [ "$quota" -lt "$jobs" ] && jobs=$quota
# ccache keys on paths relative to the checkout, so a fresh clone reuses earlier compiles.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=ON "${launcher[@]}" >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs" --timeout 600

# End to end: loom serve on loopback, the openai client, prometheus_client's parser.
bash scripts/run-e2e.sh

# Sanitized: one clang build (build-fuzz: ASan + UBSan, libFuzzer coverage in every object)
# holds the unit tests and the libFuzzer targets, so the library is compiled once for both.
# The golden tests are not built there: slow under ASan, and the Release run checked them.
seconds=${LOOM_FUZZ_SECONDS:-10}
targets=(loom_unit_tests)
[ "$seconds" -gt 0 ] && targets+=(loom_fuzz_targets)
cmake --preset fuzz "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"$jobs" --target "${targets[@]}"
# Memory errors, undefined behaviour and leaks (LeakSanitizer on).
ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-fuzz --output-on-failure -j"$jobs" --timeout 900 -L unit

if [ "$seconds" -gt 0 ]; then
  for target in safetensors adapter_config config generation_config adapter batch sampler \
                tokenizer tokenizer_model chat_template openai_request chat_request http_transport; do
    log=build-fuzz/fuzz-$target.log
    echo "fuzz: $target for ${seconds} s"
    if ! bash scripts/fuzz.sh "$target" "$seconds" >"$log" 2>&1; then
      tail -50 "$log"
      echo "fuzz: $target FAILED (log: $log)" >&2
      exit 1
    fi
    grep -E "^stat::number_of_executed_units" "$log" || true
  done
fi
