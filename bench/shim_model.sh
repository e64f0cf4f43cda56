#!/usr/bin/env bash
# Three ways for the agent to start an exec's shim, with nothing else: a
# fork (sbx until 2026-12-07), a vfork and exec of a static shim, and a clone
# that shares the agent's memory (sbx now); bench/shim_model.c says what each
# does. ROUNDS (default 4) alternating runs of N (default 2000) execs each;
# prints the medians and each one's ratio to the fork. Installs gcc from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need_pkgs gcc
ROUNDS=${ROUNDS:-4}
N=${N:-2000}
work=$(mktemp -d /tmp/sbx-bench-shim.XXXXXX)
trap 'rm -rf "$work"' EXIT
cc -O2 -Wall -static -o "$work/shim_model" bench/shim_model.c
for _ in $(seq "$ROUNDS"); do
  "$work/shim_model" fork "$N"
  "$work/shim_model" spawn "$N"
  "$work/shim_model" clone "$N"
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    model, us = line.split()
    runs.setdefault(model, []).append(float(us))
fork, spawn, clone = (statistics.median(runs[m]) for m in ("fork", "spawn", "clone"))
print(f"fork a shim (sbx until 2026-12-07): {fork:.0f} us per exec; vfork+exec a static shim: {spawn:.0f} us "
      f"({spawn / fork:.2f}x); a clone sharing the memory of the agent (sbx now): {clone:.0f} us ({clone / fork:.2f}x)")
print(f"runs: {runs}")
'
