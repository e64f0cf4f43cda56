#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz: builds them into build-fuzz/ (clang,
# -DSBX_FUZZ=ON: ASan, UBSan and the fuzzer's coverage) and runs each for
# SBX_FUZZ_SECONDS (default 12; longer runs: SBX_FUZZ_SECONDS=600) from its
# seed corpus in tests/fuzz/corpus/<target>/, one run per core at a time
# (each run is one process on one core: 17 runs take ~2 minutes on two cores).
# Fails on any crash, leak, timeout (10 s for one input) or an input past
# 2 GiB of memory; the input that did it is left in build-fuzz/fuzz/artifacts/.
# Prints each target's executions.
# Usage: scripts/fuzz.sh [--build-only] [TARGET...]      (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${SBX_FUZZ_SECONDS:-12}
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSBX_WERROR=ON \
  -DSBX_FUZZ=ON -DSBX_BUILD_TESTS=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
all=()
for f in tests/fuzz/fuzz_*.cpp; do all+=("$(basename "$f" .cpp)"); done
targets=("${@:-${all[@]}}")
nice cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"

((build_only)) && exit 0

out=build-fuzz/fuzz
mkdir -p "$out/artifacts"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=$(mktemp -d /tmp/sbx-fuzz-failed.XXXXXX)
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
    # Its log's tail is printed after every run has ended, so that another run's lines cannot cut into it.
    tail -n 60 "$log" >"$failed/$name"
  fi
  rm -rf "$log" "$work"
}
# Side by side, at most one run per core: a failure leaves its log's tail in
# $failed, so no exit status has to be collected from `wait -n`.
side_by_side() {  # name binary [env...]
  while (($(jobs -pr | wc -l) >= $(nproc))); do wait -n || true; done
  run "$@" &
}
for t in "${targets[@]}"; do
  side_by_side "$t" "$out/$t"
  # safe_path again through the user-space walk used where openat2 is missing.
  if [[ $t == fuzz_safe_path ]]; then side_by_side fuzz_safe_path_portable "$out/$t" SBX_SAFE_PATH_PORTABLE=1; fi
done
wait
status=0
for f in "$failed"/*; do
  [[ -e $f ]] || continue
  echo "-- ${f##*/}: the end of its log"
  cat "$f"
  status=1
done
rm -rf "$failed"
echo "== fuzzing: ${#targets[@]} targets in $((SECONDS - start)) s"
exit "$status"
