#!/usr/bin/env bash
# Keystroke round trip (one stdin byte -> its echo on stdout) of `cat` in a
# subprocess sandbox, two ways in one run:
#   through the manager: a WebSocket client on GET /v1/sandboxes/{id}/exec/ws
#     (binary message 0x00+byte out, 0x01+byte back)     (target: <= 5 ms on loopback)
#   locally: `sbx exec -i ID -- cat` with its stdin and stdout as pipes
# and prints the ratio. Needs python3-websockets (scripts/setup.sh) and root.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
N=${N:-500}
work=$(mktemp -d /tmp/sbx-bench-rtt.XXXXXX)
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ADMIN_API_KEY=$key "$SBX" --state-dir "$work/server" serve --listen 127.0.0.1:$port --driver subprocess \
  2>"$work/serve.log" &
server=$!
cleanup() {
  kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true
  "$SBX" --state-dir "$work/server" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -fs -H "X-API-Key: $key" "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$port"
id=$(curl -fs -H "X-API-Key: $key" -X POST -d '{}' "$url/v1/sandboxes" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

/usr/bin/python3 - "$SBX" "$work/server" "$url" "$key" "$id" "$N" <<'PY'
import asyncio, json, os, statistics, subprocess, sys, time
import websockets

sbx, state, url, key, sid, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6])

async def via_manager():
    ws = await websockets.connect(url.replace("http://", "ws://") + f"/v1/sandboxes/{sid}/exec/ws",
                                  extra_headers={"X-API-Key": key}, compression=None)
    await ws.send(json.dumps({"cmd": ["cat"]}))
    times = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        await ws.send(b"\x00x")
        while True:
            m = await ws.recv()
            if isinstance(m, bytes) and m[0] == 1:
                break
        if i >= 20:  # warm-up
            times.append(time.perf_counter() - t0)
    await ws.send(json.dumps({"eof": True}))
    await ws.close()
    return times

def local():
    p = subprocess.Popen([sbx, "--state-dir", state, "exec", "-i", sid, "--", "cat"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, bufsize=0)
    times = []
    for i in range(n + 20):
        t0 = time.perf_counter()
        os.write(p.stdin.fileno(), b"x")
        os.read(p.stdout.fileno(), 1)
        if i >= 20:
            times.append(time.perf_counter() - t0)
    p.stdin.close()
    p.wait()
    return times

def show(name, t):
    t = sorted(t)
    p50, p99 = statistics.median(t) * 1000, t[int(len(t) * 0.99) - 1] * 1000
    print(f"{name:<28} p50 {p50:6.3f} ms   p99 {p99:6.3f} ms")
    return p50

print(f"== keystroke round trip, {n} keystrokes, `cat` in a subprocess sandbox")
m = show("through the manager (ws)", asyncio.run(via_manager()))
l = show("local sbx exec -i", local())
print(f"manager / local (p50): {m / l:.2f}x   target: <= 5 ms through the manager: {'met' if m <= 5 else 'MISSED'}")
PY
