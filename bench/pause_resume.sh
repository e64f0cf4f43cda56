#!/usr/bin/env bash
# Side by side, in one run, on one sandbox per driver (subprocess always,
# runsc when `sbx doctor --driver runsc` passes; RUNSC=0 skips it):
# `sbx pause` and `sbx resume` (each a whole CLI call: sbx's start-up, the
# registry lock and record write, the driver's freeze or thaw) against the
# peer `sbx exec ID true` (the cheapest call that reaches the sandbox).
# The issue's target: resume <= 10 ms on subprocess. Prints each mean and the
# ratio to the exec. Needs root; installs hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-50}
source bench/local_lib.sh

run() { # label json prepare command -> prints the mean, returns it in $last
  hyperfine -N --warmup 2 --runs "$RUNS" --prepare "$3" --export-json "$2" "$4" >/dev/null
  last=$(mean_ms "$2")
  printf '%-40s %9.2f ms\n' "$1" "$last"
}

drivers=(subprocess)
if [[ ${RUNSC:-1} != 0 ]] && "$SBX" doctor --driver runsc >/dev/null 2>&1; then drivers+=(runsc); fi

for d in "${drivers[@]}"; do
  id=$("$SBX" create --driver "$d")
  echo "== $d ($RUNS runs each)"
  run "peer: sbx exec ID true" "$work/exec-$d.json" "true" "$SBX exec $id -- true"
  exec_ms=$last
  run "sbx pause (from running)" "$work/pause-$d.json" "$SBX resume $id" "$SBX pause $id"
  pause_ms=$last
  run "sbx resume (from paused)" "$work/resume-$d.json" "$SBX pause $id" "$SBX resume $id"
  resume_ms=$last
  python3 - "$exec_ms" "$pause_ms" "$resume_ms" "$d" <<'PY'
import sys
e, p, r, d = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"pause / exec = {p / e:.2f}x, resume / exec = {r / e:.2f}x")
if d == "subprocess":
    print(f"target resume <= 10 ms: {'met' if r <= 10 else 'NOT met'} ({r:.2f} ms)")
PY
  "$SBX" rm "$id" >/dev/null
done
