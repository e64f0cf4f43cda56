#!/usr/bin/env bash
# The fleet's proxy hop, side by side in one run (subprocess driver, one client, wrk):
# a sandbox owned by manager 1, asked directly and through manager 0
#   GET /v1/sandboxes/{id}               direct vs through a peer
#   POST /v1/sandboxes/{id}/exec true    direct vs through a peer
# p50/p99 and the added latency (target: <= 1 ms added on loopback). Direct and
# through-a-peer runs alternate, ROUNDS (3) of DURATION each, and the medians of their
# p50s and p99s are compared: on a shared host the load changes between runs more than
# a hop costs, and alternating gives both sides the same spread of it.
# Needs root; installs wrk from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/fleet_common.sh
ROUNDS=${ROUNDS:-3}
start_fleet 3
id=$(create_on 1)
wrk_lua "$work/get.lua" GET
wrk_lua "$work/exec.lua" POST '{"cmd": ["/bin/true"]}'
for what in get exec; do
  path=/v1/sandboxes/$id
  [ $what = exec ] && path=$path/exec
  for ((round = 0; round < ROUNDS; round++)); do
    for via in 1 0; do
      wrk -t1 -c1 -d"$DURATION" --latency -s "$work/$what.lua" "http://127.0.$via.1:$port$path" >"$work/wrk.txt" 2>&1
      wrk_stats "$work/wrk.txt" >>"$work/$what-$via.txt"
    done
  done
done
python3 - "$work" <<'PY'
import statistics, sys
def medians(name):  # median p50, p99 over the rounds
    rows = [list(map(float, l.split())) for l in open(f"{sys.argv[1]}/{name}.txt")]
    return statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows), len(rows)
print(f"{'':34} {'p50':>9} {'p99':>9}   (medians of {medians('get-1')[2]} alternating rounds)")
for what, name in (("get", "GET"), ("exec", "exec")):
    (d, d99, _), (p, p99, _) = medians(f"{what}-1"), medians(f"{what}-0")
    print(f"{what + ', direct':34} {d:7.3f}ms {d99:7.3f}ms")
    print(f"{what + ', through a peer':34} {p:7.3f}ms {p99:7.3f}ms")
    added = p - d
    print(f"{name}: hop adds {added:.3f} ms at p50 ({p / d:.2f}x), {p99 - d99:.3f} ms at p99  "
          f"(target <= 1 ms) {'PASS' if added <= 1 else 'MISS'}")
PY
