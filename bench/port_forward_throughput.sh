#!/usr/bin/env bash
# Throughput of a large download through `sbx port-forward` against a direct
# connection to the same server inside the sandbox (subprocess driver,
# --network none). The server (Python, in the sandbox) sends SIZE_MIB MiB per
# connection; the same client reads it once from the host through
# port-forward, and once from inside the sandbox's network namespace (nsenter
# into the agent's netns: the direct loopback path, no relay). Prints MB/s and
# the ratio (target: >= 0.5x), and the CPU seconds each path cost per GiB
# (server, client and, forwarded, the agent and sbx port-forward; from
# /proc/PID/stat and the client's rusage): on a busy machine the MB/s follow
# the load, the CPU cost much less. Needs root (the subprocess driver, nsenter).
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

# The server: the python3 the agent started (through its shim).
server_pid=$(ps -e -o pid=,ppid=,comm= | python3 -c '
import sys
rows = [l.split() for l in sys.stdin]
kids, seen = {}, {sys.argv[1]}
for pid, ppid, comm in rows: kids.setdefault(ppid, []).append((pid, comm))
todo = [sys.argv[1]]
while todo:
    for pid, comm in kids.get(todo.pop(), []):
        if comm == "python3": print(pid); sys.exit()
        todo.append(pid)' "$agent_pid")
# CPU seconds (user + system, all threads) the given processes have used so far.
cpu() { python3 -c '
import os, sys
t = 0
for p in sys.argv[1:]:
    try: f = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()
    except OSError: continue
    t += int(f[11]) + int(f[12])
print(t / os.sysconf("SC_CLK_TCK"))' "$@"; }

# Seconds to read one whole download from 127.0.0.1:PORT (best of ROUNDS), then the client's CPU seconds.
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
import resource
r = resource.getrusage(resource.RUSAGE_SELF)
print(best, r.ru_utime + r.ru_stime)
'
calc() { python3 -c "print($1)"; }
c0=$(cpu "$server_pid")
read -r direct direct_client < <(nsenter -t "$agent_pid" -n python3 -c "$client" "$PORT" "$ROUNDS" "$SIZE_MIB")
c1=$(cpu "$server_pid") r0=$(cpu "$agent_pid" "$fwd")
read -r forwarded fwd_client < <(python3 -c "$client" "$local_port" "$ROUNDS" "$SIZE_MIB")
c2=$(cpu "$server_pid") r1=$(cpu "$agent_pid" "$fwd")
gib=$(calc "$SIZE_MIB * $ROUNDS / 1024")
direct_cpu=$(calc "($c1 - $c0 + $direct_client) / $gib")
fwd_cpu=$(calc "($c2 - $c1 + $r1 - $r0 + $fwd_client) / $gib")
echo "== download of $SIZE_MIB MiB from a server in a subprocess sandbox (best of $ROUNDS)"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-44s %8s %8s %10s %10s\n' what MB/s ratio CPU-s/GiB CPU-ratio
printf '%-44s %8.1f %7.2fx %10.2f %9.2fx\n' "direct (in the sandbox's netns)" "$(calc "$SIZE_MIB * 1.048576 / $direct")" 1 \
  "$direct_cpu" 1
printf '%-44s %8.1f %7.2fx %10.2f %9.2fx\n' "sbx port-forward (host loopback)" "$(calc "$SIZE_MIB * 1.048576 / $forwarded")" \
  "$(calc "$direct / $forwarded")" "$fwd_cpu" "$(calc "$direct_cpu / $fwd_cpu")"
