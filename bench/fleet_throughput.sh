#!/usr/bin/env bash
# Aggregate exec/s of a fleet of 3 managers against 1 (subprocess driver, wrk,
# /bin/true in a sandbox per manager, each manager's own sandbox asked directly,
# 8 connections per manager), and the ratio. Every manager and wrk share this
# machine's cores: on 2 cores the ratio is bounded by the cores, not by the fleet
# (nproc is printed beside it).
# Needs root; installs wrk from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/fleet_common.sh
wrk_lua "$work/exec.lua" POST '{"cmd": ["/bin/true"]}'
total() {  # total SIZE -> aggregate exec/s
  local size=$1 n pids=() sum=0
  start_fleet "$size"
  for ((n = 0; n < size; n++)); do
    id=$(create_on $n)
    wrk -t1 -c8 -d"$DURATION" --latency -s "$work/exec.lua" "http://127.0.$n.1:$port/v1/sandboxes/$id/exec" \
      >"$work/tp-$size-$n.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[@]}"
  for ((n = 0; n < size; n++)); do
    rps=$(wrk_stats "$work/tp-$size-$n.txt" | cut -d' ' -f1) || true
    [ -n "$rps" ] || { echo "bench: wrk against manager $n of $size gave no numbers:" >&2; cat "$work/tp-$size-$n.txt" >&2; exit 1; }
    sum=$(python3 -c "print($sum + $rps)")
  done
  stop_fleet
  echo "$sum"
}
# Not in $(...): a subshell would keep the managers it started from the cleanup trap.
total 1 >"$work/one.txt"
total 3 >"$work/three.txt"
one=$(cat "$work/one.txt") three=$(cat "$work/three.txt")
python3 - "$one" "$three" "$(nproc)" <<'PY'
import sys
one, three, cores = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
print(f"1 manager:  {one:8.0f} exec/s")
print(f"3 managers: {three:8.0f} exec/s  ({three / one:.2f}x; {cores} cores shared by every manager and wrk)")
PY
