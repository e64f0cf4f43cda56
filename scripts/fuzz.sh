#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz: builds them into build-fuzz/ (clang,
# -DSBX_FUZZ=ON: ASan, UBSan and the fuzzer's coverage) and runs each for
# SBX_FUZZ_SECONDS (default 12: with 17 runs the whole step stays under 4 minutes on two
# cores; longer runs: SBX_FUZZ_SECONDS=600) from its seed corpus in
# tests/fuzz/corpus/<target>/. Fails on any crash, leak, timeout (10 s for
# one input) or an input past 2 GiB of memory; the input that did it is left
# in build-fuzz/fuzz/artifacts/. Prints each target's executions.
# Usage: scripts/fuzz.sh [TARGET...]      (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${SBX_FUZZ_SECONDS:-12}

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_WERROR=ON \
  -DSBX_FUZZ=ON -DSBX_BUILD_TESTS=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
all=()
for f in tests/fuzz/fuzz_*.cpp; do all+=("$(basename "$f" .cpp)"); done
targets=("${@:-${all[@]}}")
nice cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"

out=build-fuzz/fuzz
mkdir -p "$out/artifacts"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
status=0
start=$SECONDS
run() {  # name binary [env...]
  local name=$1 bin=$2 log work
  shift 2
  log=$(mktemp /tmp/sbx-fuzz-log.XXXXXX)
  # New inputs go to a scratch corpus: the committed seeds stay as they are.
  work=$(mktemp -d /tmp/sbx-fuzz-corpus.XXXXXX)
  if env "$@" "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$out/artifacts/$name-" "$work" "tests/fuzz/corpus/${bin##*/}" >"$log" 2>&1; then
    echo "-- $name: ok, $(sed -n 's/^stat::number_of_executed_units: *//p' "$log") executions in ${seconds} s"
  else
    echo "-- $name: FAILED"
    tail -n 60 "$log"
    status=1
  fi
  rm -rf "$log" "$work"
}
for t in "${targets[@]}"; do
  run "$t" "$out/$t"
  # safe_path again through the user-space walk used where openat2 is missing.
  if [[ $t == fuzz_safe_path ]]; then run fuzz_safe_path_portable "$out/$t" SBX_SAFE_PATH_PORTABLE=1; fi
done
echo "== fuzzing: ${#targets[@]} targets in $((SECONDS - start)) s"
exit "$status"
