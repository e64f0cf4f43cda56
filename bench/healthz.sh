#!/usr/bin/env bash
# The manager's health check, side by side in one run (subprocess driver, one client, wrk):
#   GET /healthz                  (target: p50 <= 5 ms: probes are cached and refreshed in the background)
#   GET /v1/sandboxes             (the floor: an authenticated route that reads the registry, as /healthz does)
# and, with SBX_BEFORE=path/to/an/older/sbx, the same /healthz on that binary (which ran
# every driver's probes per call) with the ratio.
# Needs root; installs wrk from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
DURATION=${DURATION:-5s}
dpkg-query -W -f='${Status}' wrk 2>/dev/null | grep -q "install ok installed" ||
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
work=$(mktemp -d /tmp/sbx-bench-healthz.XXXXXX)
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
servers=()
cleanup() {
  for s in "${servers[@]}"; do kill -TERM "$s" 2>/dev/null; wait "$s" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

# start_manager BINARY NAME: starts it, sets $url
start_manager() {
  local bin=$1 name=$2 port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ADMIN_API_KEY=$key "$bin" --state-dir "$work/$name" serve --listen 127.0.0.1:$port --driver subprocess \
    >/dev/null 2>"$work/$name.log" &
  servers+=($!)
  url="http://127.0.0.1:$port"
  for _ in $(seq 100); do curl -fs -H "X-API-Key: $key" "$url/healthz" >/dev/null && return; sleep 0.1; done
  echo "bench: $bin serve did not become healthy:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

# latency URL -> "p50 p99" in ms, one client
latency() {
  cat >"$work/get.lua" <<LUA
wrk.headers["X-API-Key"] = "$key"
LUA
  wrk -t1 -c1 -d"$DURATION" --latency -s "$work/get.lua" "$1" >"$work/wrk.txt" 2>&1
  python3 - "$work/wrk.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def lat(p):
    m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, t, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
print(f"{lat(50):.3f} {lat(99):.3f}")
PY
}

start_manager "$SBX" now
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
  start_manager "$SBX_BEFORE" before
  read -r b50 b99 < <(latency "$url/healthz")
  printf '%-34s %7.2fms %7.2fms\n' "GET /healthz on SBX_BEFORE" "$b50" "$b99"
  python3 -c "import sys; print(f'now vs before: {float(sys.argv[1]) / float(sys.argv[2]):.3f}x')" "$h50" "$b50"
fi
