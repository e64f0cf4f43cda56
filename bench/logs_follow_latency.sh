#!/usr/bin/env bash
# `sbx logs -f` latency: the time from a line written by a background process
# (`sbx exec -d`) to it appearing on the follower's stdout, on this host
# (subprocess driver; DRIVER=runsc or microvm for another). The process writes
# a line with its clock each INTERVAL; the follower compares with its own
# (one host, one clock: subprocess and runsc share it; on microvm the guest's
# clock may be off by its skew). Prints the median and p90 in ms. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
DRIVER=${DRIVER:-subprocess}
LINES=${LINES_N:-100}
work=$(mktemp -d /tmp/sbx-bench-logs.XXXXXX)
export SBX_STATE_DIR=$work/state USE_REMOTE_SANDBOX=false
id=$("$SBX" create --driver "$DRIVER")
trap '"$SBX" rm -f "$id" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
pid=$("$SBX" exec -d "$id" -- python3 -c "
import time
time.sleep(1)
for i in range($LINES):
    print(time.time(), flush=True)
    time.sleep(0.05)")

/usr/bin/python3 - "$SBX" "$id" "$pid" <<'PY'
import statistics, subprocess, sys, time
sbx, sid, pid = sys.argv[1:]
p = subprocess.Popen([sbx, "logs", "-f", sid, pid], stdout=subprocess.PIPE)
lat = []
for line in p.stdout:
    lat.append((time.time() - float(line)) * 1000)
p.wait()
lat = sorted(lat[1:])  # the first may be a replay of the kept log
print(f"sbx logs -f: {len(lat)} lines, median {statistics.median(lat):.3f} ms, p90 {lat[int(len(lat) * 0.9)]:.3f} ms")
PY
