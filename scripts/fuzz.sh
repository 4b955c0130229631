#!/usr/bin/env bash
# Long libFuzzer run of one target: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#   TARGET: safetensors | adapter_config | config | generation_config | adapter | batch | sampler |
#           tokenizer | tokenizer_model | chat_template | openai_request | chat_request |
#           http_transport
# Builds build-fuzz (clang, ASan + UBSan + fuzzer coverage) if needed, seeds a working corpus
# (build-fuzz/fuzz-corpus/TARGET, kept between runs) from the target's seed folders, and runs.
# Crashes are written to build-fuzz/fuzz-artifacts/TARGET/; rerun one with
#   build-fuzz/tests/fuzz/TARGET_fuzz build-fuzz/fuzz-artifacts/TARGET/crash-...
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
[ -f build-fuzz/CMakeCache.txt ] || cmake --preset fuzz "${launcher[@]}" >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target "${target}_fuzz" >/dev/null
seeds=build-fuzz/tests/fuzz/${target}.seeds
[ -f "$seeds" ] || { echo "fuzz.sh: unknown target '$target'" >&2; exit 2; }
corpus=build-fuzz/fuzz-corpus/$target
artifacts=build-fuzz/fuzz-artifacts/$target
mkdir -p "$corpus" "$artifacts"
# Seeds: small files only (libFuzzer's max_len follows the largest seed); JSON only for the
# config targets (their seed folders hold the fixture models' weights too).
filter=(-size -1M)
case $target in config|generation_config) filter+=(-name '*.json') ;; esac
while IFS= read -r dir; do
  [ -d "$dir" ] || continue
  find "$dir" -type f "${filter[@]}" -print0 |
    while IFS= read -r -d '' f; do cp -f "$f" "$corpus/$(cksum < "$f" | cut -d' ' -f1)-$(basename "$f")"; done
done < "$seeds"
# A dictionary of the format's words where the target has one.
dict=()
case $target in
  openai_request|chat_request) dict=(-dict=tests/fuzz/openai_request.dict) ;;
  chat_template) dict=(-dict=tests/fuzz/chat_template.dict) ;;
  tokenizer) dict=(-dict=tests/fuzz/tokenizer.dict) ;;
  http_transport) dict=(-dict=tests/fuzz/http_transport.dict) ;;
esac
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "build-fuzz/tests/fuzz/${target}_fuzz" "$corpus" -max_total_time="$seconds" \
  -artifact_prefix="$artifacts/" -rss_limit_mb=4096 -timeout=20 -print_final_stats=1 "${dict[@]}" "$@"
