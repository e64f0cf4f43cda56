#!/usr/bin/env bash
# Side by side, in one run, warm exec latency in one micro-VM:
#   `sbx exec ID -- true` from the host, through the VM monitor's relay and
#     the guest agent (hyperfine, RUNS runs)
#   vs  `sh -c true` run by a shell loop inside the same VM (the guest's own
#     cost of starting a command, without sbx)
# (target: <= 1.5x). Needs root, QEMU, the guest image and hyperfine.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-100}
need_sbx
need_pkgs hyperfine
work=$(mktemp -d /tmp/sbx-bench-mvx.XXXXXX)
state="$work/state"
trap '"$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

id=$("$SBX" --state-dir "$state" create --driver microvm)
hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$work/sbx.json" "$SBX --state-dir $state exec $id -- true" >/dev/null
sbx_ms=$(median_ms "$work/sbx.json")
# Inside: the mean of many `sh -c true` by the guest's clock (/proc/uptime,
# 10 ms resolution, so the loop runs long enough for that not to matter).
in_ms=$("$SBX" --state-dir "$state" exec "$id" -- sh -c '
  n=$((5 * '"$RUNS"')); i=0; sh -c true
  read s _ < /proc/uptime; while [ $i -lt $n ]; do sh -c true; i=$((i + 1)); done; read e _ < /proc/uptime
  echo "$s $e $n"' | awk '{printf "%.3f", ($2 - $1) * 1000 / $3}')
python3 - "$sbx_ms" "$in_ms" <<'PY'
import sys
s, b = float(sys.argv[1]), float(sys.argv[2])
print(f"sbx exec ID -- true (host)       {s:8.2f} ms")
print(f"sh -c true inside the same VM    {b:8.2f} ms")
print(f"warm exec ratio sbx/in-guest = {s/b:.2f}x  (target <= 1.50x) {'PASS' if s/b <= 1.5 else 'MISS'}")
PY
figure microvm.sbx "$sbx_ms"
figure microvm.guest "$in_ms"
