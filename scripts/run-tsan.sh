#!/usr/bin/env bash
# ThreadSanitizer run (not part of CI: ~5 min of build and ~4 of tests on 2 cores): a clang
# build of loom and the unit tests whose code runs on several threads (build-tsan, preset
# "tsan"), those tests, then the whole end-to-end suite against the instrumented server (its
# I/O thread, engine thread, adapter loads on handler threads, the kernel pool). Any report
# fails the run; the server's reports are written under $OUT (default /tmp/loom-tsan).
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
tests=(thread_pool_test adapter_store_test stream_writer_test http_body_test http_transport_test
       scheduler_test engine_test async_engine_test)
cmake --preset tsan "${launcher[@]}" >/dev/null
cmake --build build-tsan -j"$(nproc)" --target loom "${tests[@]}"
OUT=${OUT:-/tmp/loom-tsan}
rm -rf "$OUT" && mkdir -p "$OUT"
for t in "${tests[@]}"; do
  echo "tsan: $t"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 allocator_may_return_null=1" "build-tsan/tests/$t" >"$OUT/$t.log" 2>&1 ||
    { tail -60 "$OUT/$t.log"; echo "tsan: $t FAILED (log: $OUT/$t.log)" >&2; exit 1; }
done
# The server under the end-to-end suite; LOOM_E2E_SANITIZER skips what ThreadSanitizer cannot run
# (an address-space rlimit below its shadow memory).
rc=0
TSAN_OPTIONS="log_path=$OUT/server second_deadlock_stack=1" LOOM_E2E_SANITIZER=1 \
  LOOM_BIN=build-tsan/loom bash scripts/run-e2e.sh "$@" || rc=$?
if compgen -G "$OUT/server.*" >/dev/null; then
  grep -h -A12 'WARNING: ThreadSanitizer' "$OUT"/server.* | head -80
  echo "tsan: reports from the server: $(ls "$OUT"/server.* | tr '\n' ' ')" >&2
  exit 1
fi
exit "$rc"
