#!/usr/bin/env bash
# Throughput of a large download through `sbx port-forward` against a direct
# connection to the same server inside the sandbox (subprocess driver,
# --network none). The server (Python, in the sandbox) sends SIZE_MIB MiB per
# connection; the same client reads it once from the host through
# port-forward, and once from inside the sandbox's network namespace (nsenter
# into the agent's netns: the direct loopback path, no relay). Prints MB/s and
# the ratio (target: >= 0.5x). Needs root (the subprocess driver, nsenter).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
SIZE_MIB=${SIZE_MIB:-1024}
ROUNDS=${ROUNDS:-3}
PORT=7777
work=$(mktemp -d /tmp/sbx-bench-pf.XXXXXX)
sbx=(env USE_REMOTE_SANDBOX=false LOCAL_SANDBOX_BACKEND=subprocess "$SBX" --state-dir "$work/state")
server="" fwd=""
cleanup() {
  [ -n "$fwd" ] && { kill -INT "$fwd" 2>/dev/null; wait "$fwd" 2>/dev/null || true; }
  [ -n "$server" ] && { kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null || true; }
  "${sbx[@]}" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

id=$("${sbx[@]}" create --network none | tail -1)
# The server: SIZE bytes to every connection, from one preallocated buffer.
"${sbx[@]}" exec "$id" -- python3 -u -c '
import socket, sys, threading
size, buf = int(sys.argv[2]) << 20, memoryview(bytes(1 << 20))
def send(c):
    left = size
    while left:
        left -= c.send(buf[:min(left, len(buf))])
    c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(16); print("listening", flush=True)
while True:
    threading.Thread(target=send, args=(s.accept()[0],), daemon=True).start()
' "$PORT" "$SIZE_MIB" >"$work/server.out" &
server=$!
for _ in $(seq 100); do grep -q listening "$work/server.out" 2>/dev/null && break; sleep 0.1; done
"${sbx[@]}" port-forward "$id" 0:$PORT >"$work/fwd.out" &
fwd=$!
for _ in $(seq 100); do grep -q Forwarding "$work/fwd.out" 2>/dev/null && break; sleep 0.1; done
local_port=$(sed -n 's/^Forwarding 127.0.0.1:\([0-9]*\) .*/\1/p' "$work/fwd.out")
agent_pid=$("${sbx[@]}" ls --json | python3 -c "import json,sys; print([r for r in json.load(sys.stdin) if r['id']=='$id'][0]['agent_pid'])")

# Seconds to read one whole download from 127.0.0.1:PORT (best of ROUNDS).
client='
import socket, sys, time
best = None
for _ in range(int(sys.argv[2])):
    t0 = time.monotonic(); s = socket.create_connection(("127.0.0.1", int(sys.argv[1]))); buf = bytearray(1 << 20); got = 0
    while True:
        n = s.recv_into(buf)
        if not n: break
        got += n
    s.close(); t = time.monotonic() - t0
    assert got == int(sys.argv[3]) << 20, got
    best = t if best is None or t < best else best
print(best)
'
direct=$(nsenter -t "$agent_pid" -n python3 -c "$client" "$PORT" "$ROUNDS" "$SIZE_MIB")
forwarded=$(python3 -c "$client" "$local_port" "$ROUNDS" "$SIZE_MIB")
calc() { python3 -c "print($1)"; }
echo "== download of $SIZE_MIB MiB from a server in a subprocess sandbox (best of $ROUNDS)"
printf '%-44s %8s %8s\n' what MB/s ratio
printf '%-44s %8.1f %7.2fx\n' "direct (in the sandbox's netns)" "$(calc "$SIZE_MIB * 1.048576 / $direct")" 1
printf '%-44s %8.1f %7.2fx\n' "sbx port-forward (host loopback)" "$(calc "$SIZE_MIB * 1.048576 / $forwarded")" \
  "$(calc "$direct / $forwarded")"
