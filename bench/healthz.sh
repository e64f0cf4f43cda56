#!/usr/bin/env bash
# The manager's health check, side by side in one run (subprocess driver, one client, wrk):
#   GET /healthz                  (target: p50 <= 5 ms: probes are cached and refreshed in the background)
#   GET /v1/sandboxes             (the floor: an authenticated route that reads the registry, as /healthz does)
# and, with SBX_BEFORE=path/to/an/older/sbx, the same /healthz on that binary (which ran
# every driver's probes per call) with the ratio.
# Needs root; installs wrk from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

# manager BINARY NAME: starts it, sets $url
manager() {
  local port
  port=$(free_port)
  start_manager "$1" "$2" "127.0.0.1:$port"
  url="http://127.0.0.1:$port"
  wait_healthy "$url" "$2"
}

# latency URL -> "p50 p99" in ms, one client
latency() {
  echo "wrk.headers[\"X-API-Key\"] = \"$key\"" >"$work/get.lua"
  wrk -t1 -c1 -d"$DURATION" --latency -s "$work/get.lua" "$1" >"$work/wrk.txt" 2>&1
  wrk_stats "$work/wrk.txt" | cut -d' ' -f2-
}

manager "$SBX" now
read -r h50 h99 < <(latency "$url/healthz")
read -r l50 l99 < <(latency "$url/v1/sandboxes")
printf '%-34s %9s %9s\n' "" p50 p99
printf '%-34s %7.2fms %7.2fms\n' "GET /healthz" "$h50" "$h99" "GET /v1/sandboxes (floor)" "$l50" "$l99"
python3 - "$h50" "$l50" <<'PY'
import sys
h, floor = map(float, sys.argv[1:])
print(f"/healthz vs the floor: {h / floor:.2f}x; target p50 <= 5 ms: {'PASS' if h <= 5 else 'MISS'} ({h:.2f} ms)")
PY
if [[ -n "${SBX_BEFORE:-}" ]]; then
  manager "$SBX_BEFORE" before
  read -r b50 b99 < <(latency "$url/healthz")
  printf '%-34s %7.2fms %7.2fms\n' "GET /healthz on SBX_BEFORE" "$b50" "$b99"
  python3 -c "import sys; print(f'now vs before: {float(sys.argv[1]) / float(sys.argv[2]):.3f}x')" "$h50" "$b50"
fi
