#!/usr/bin/env bash
# The fleet's proxy hop, side by side in one run (subprocess driver, one client, wrk):
# a sandbox owned by manager 1, asked directly and through manager 0
#   GET /v1/sandboxes/{id}               direct vs through a peer
#   POST /v1/sandboxes/{id}/exec true    direct vs through a peer
# p50/p99 and the added latency (target: <= 1 ms added on loopback).
# Needs root; installs wrk from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/fleet_common.sh
start_fleet 3
id=$(create_on 1)
wrk_lua "$work/get.lua" GET
wrk_lua "$work/exec.lua" POST '{"cmd": ["/bin/true"]}'
printf '%-34s %9s %9s\n' "" p50 p99
declare -A r
for what in get exec; do
  path=/v1/sandboxes/$id
  [ $what = exec ] && path=$path/exec
  for via in 1 0; do
    wrk -t1 -c1 -d"$DURATION" --latency -s "$work/$what.lua" "http://127.0.$via.1:$port$path" >"$work/$what-$via.txt" 2>&1
    read -r _ p50 p99 < <(wrk_stats "$work/$what-$via.txt")
    r[$what-$via]="$p50 $p99"
    label="$what, $([ $via = 1 ] && echo direct || echo 'through a peer')"
    printf '%-34s %7.3fms %7.3fms\n' "$label" "$p50" "$p99"
  done
done
python3 - "${r[get-1]}" "${r[get-0]}" "${r[exec-1]}" "${r[exec-0]}" <<'PY'
import sys
(g1, g1_99), (g0, g0_99), (e1, e1_99), (e0, e0_99) = (map(float, a.split()) for a in sys.argv[1:])
for name, d, p, d99, p99 in (("GET", g1, g0, g1_99, g0_99), ("exec", e1, e0, e1_99, e0_99)):
    added = p - d
    print(f"{name}: hop adds {added:.3f} ms at p50 ({p / d:.2f}x), {p99 - d99:.3f} ms at p99  "
          f"(target <= 1 ms) {'PASS' if added <= 1 else 'MISS'}")
PY
