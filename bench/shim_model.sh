#!/usr/bin/env bash
# The warm exec's remaining lever, measured before building it: an agent
# that forks its shim (sbx today) against one that vforks and execs a static
# shim (bench/shim_model.c says what each does). ROUNDS (default 4)
# alternating runs of N (default 2000) execs each; prints the medians and the
# ratio spawn/fork (below 1: the exec'd shim would pay). Installs gcc from Debian if missing.
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
done | python3 -c '
import statistics, sys
runs = {}
for line in sys.stdin:
    model, us = line.split()
    runs.setdefault(model, []).append(float(us))
fork, spawn = statistics.median(runs["fork"]), statistics.median(runs["spawn"])
print(f"fork a shim (sbx today): {fork:.0f} us per exec; vfork+exec a static shim: {spawn:.0f} us; "
      f"ratio {spawn / fork:.2f}x (runs: {runs})")
'
