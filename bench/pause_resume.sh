#!/usr/bin/env bash
# Side by side, in one run, on one sandbox per driver (subprocess always,
# runsc when `sbx doctor --driver runsc` passes; RUNSC=0 skips it):
# `sbx pause` and `sbx resume` (each a whole CLI call: sbx's start-up, the
# registry lock and record write, the driver's freeze or thaw) against the
# peer `sbx exec ID true` (the cheapest call that reaches the sandbox).
# The issue's target: resume <= 10 ms on subprocess. Prints each median and the
# ratio to the exec. Needs root; installs hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-50}
source bench/local_lib.sh

for d in "${drivers[@]}"; do
  id=$("$SBX" create --driver "$d")
  echo "== $d ($RUNS runs each)"
  run "peer: sbx exec ID true" "$work/exec-$d.json" "$RUNS" "true" "$SBX exec $id -- true"
  exec_ms=$(median_ms "$work/exec-$d.json")
  run "sbx pause (from running)" "$work/pause-$d.json" "$RUNS" "$SBX resume $id" "$SBX pause $id"
  pause_ms=$(median_ms "$work/pause-$d.json")
  run "sbx resume (from paused)" "$work/resume-$d.json" "$RUNS" "$SBX pause $id" "$SBX resume $id"
  resume_ms=$(median_ms "$work/resume-$d.json")
  python3 - "$exec_ms" "$pause_ms" "$resume_ms" "$d" <<'PY'
import sys
e, p, r, d = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
print(f"pause / exec = {p / e:.2f}x, resume / exec = {r / e:.2f}x")
if d == "subprocess":
    print(f"target resume <= 10 ms: {'met' if r <= 10 else 'NOT met'} ({r:.2f} ms)")
PY
  "$SBX" rm "$id" >/dev/null
done
