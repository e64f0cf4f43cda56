#!/usr/bin/env bash
# The manager under load, side by side in one run:
#   exec throughput and latency through `sbx serve` (subprocess driver) at
#   CLIENTS (default 1, 8 and 64) concurrent clients, with wrk
#   (targets at 8 clients: >= 1500 exec/s, p99 <= 20 ms), and 8 clients again
#   on a sandbox whose CPU cap is every core (the default cap, one CPU, bounds
#   what one sandbox's commands can fork and exec), beside the host's
#   floor for any exec service: vfork+exec+wait of /bin/true per second in a
#   C loop, one loop (the most a one-CPU sandbox can run) and one per core
#   (an exec through sbx adds the shim, the agent and HTTP to that)
#   a forwarded `sbx exec ID -- /bin/true` against a local one, with hyperfine
#   (target: forwarding overhead <= 2 ms per exec)
# Needs root; installs wrk and hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-1 8 64}
[[ " $CLIENTS " == *" 8 "* ]] || CLIENTS="$CLIENTS 8"  # the targets' row
need_sbx
need_pkgs wrk hyperfine gcc
work=$(mktemp -d /tmp/sbx-bench-mgr.XXXXXX)
key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# The default per-key cap (32 concurrent execs) would turn most of 64 clients into 429s.
printf 'server:\n  max_execs_per_key: 1000\n' >"$work/config.yaml"
ADMIN_API_KEY=$key "$SBX" --config "$work/config.yaml" --state-dir "$work/server" serve --listen 127.0.0.1:$port \
  --driver subprocess 2>"$work/serve.log" &
server=$!
cleanup() {
  kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true
  "$SBX" --state-dir "$work/server" rm --all >/dev/null 2>&1 || true
  "$SBX" --state-dir "$work/client" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 50); do curl -fs -H "X-API-Key: $key" "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
url="http://127.0.0.1:$port"
create() { # BODY: a sandbox's id
  curl -fs -H "X-API-Key: $key" -X POST -d "$1" "$url/v1/sandboxes" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}
id=$(create '{"persistent": true}')
id_all=$(create "{\"persistent\": true, \"limits\": {\"cpus\": $(nproc)}}")

cat >"$work/exec.lua" <<LUA
wrk.method = "POST"
wrk.body = '{"cmd": ["/bin/true"]}'
wrk.headers["X-API-Key"] = "$key"
wrk.headers["Content-Type"] = "application/json"
LUA
# wrk_row SANDBOX CLIENTS LABEL: one row of the table; its sums go to wrk-LABEL.txt.sum.
wrk_row() {
  local c=$2 threads=$(($2 < 2 ? 1 : 2))
  wrk -t$threads -c$c -d"$DURATION" --latency -s "$work/exec.lua" "$url/v1/sandboxes/$1/exec" >"$work/wrk-$3.txt" 2>&1
  python3 - "$work/wrk-$3.txt" "$3" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def lat(p):
    m = re.search(r"^\s+%s%%\s+([\d.]+)(us|ms|s)" % p, t, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
total = int(re.search(r"(\d+) requests in", t).group(1))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
errors = int(non2xx.group(1)) if non2xx else 0
rps = rps * (total - errors) / max(total, 1)  # only answered execs count
print(f"{sys.argv[2]:<8} {rps:10.1f} {lat(50):7.2f}ms {lat(90):7.2f}ms {lat(99):7.2f}ms" + (f"  ({errors} errors)" if errors else ""))
open(sys.argv[1] + ".sum", "w").write(f"{rps} {lat(99)}\n")
PY
}
echo "== exec /bin/true through the manager ($DURATION each; 'wrk -c N')"
printf '%-8s %10s %9s %9s %9s\n' clients "exec/s" p50 p90 p99
for c in $CLIENTS; do wrk_row "$id" "$c" "$c"; done
wrk_row "$id_all" 8 "8-all"
echo "(8-all: 8 clients on a sandbox whose CPU cap is all $(nproc) cores; the rows above have the default cap, 1 CPU)"

# The floor: vfork, exec and wait of /bin/true in a C loop (bench/exec_floor.c),
# what any exec service pays for its commands alone. One loop is the most a
# sandbox capped at one CPU (the rows' default) could run; one per core, the
# machine's. A shell loop would also pay the shell's fork of itself.
cc -O2 -Wall -o "$work/exec_floor" bench/exec_floor.c
floor_1cpu=$("$work/exec_floor" loop 1000)
loops=$(nproc)
pids=()
for i in $(seq "$loops"); do "$work/exec_floor" loop 1000 >"$work/floor.$i" & pids+=($!); done
wait "${pids[@]}"  # not the manager's
floor=$(cat "$work"/floor.* | awk '{s += $1} END {printf "%d", s}')
echo "floor: vfork+exec+wait of /bin/true in C, one loop = $floor_1cpu /s, $loops loops at once = $floor /s"
figure manager.floor "$floor"
figure manager.floor_1cpu "$floor_1cpu"

echo "== forwarding overhead: sbx exec ID -- /bin/true, local vs through the manager"
lid=$("$SBX" --state-dir "$work/client" create --driver subprocess)
rid=$(USE_REMOTE_SANDBOX=true SANDBOX_MANAGER_URL=$url ADMIN_API_KEY=$key "$SBX" --state-dir "$work/client" create --driver remote)
USE_REMOTE_SANDBOX=true SANDBOX_MANAGER_URL=$url ADMIN_API_KEY=$key hyperfine -N --warmup 20 --runs 300 \
  --export-json "$work/fwd.json" \
  "$SBX --state-dir $work/client exec $lid -- /bin/true" \
  "$SBX --state-dir $work/client exec $rid -- /bin/true" >/dev/null 2>&1
python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
r = json.load(open(f"{w}/fwd.json"))["results"]
local, fwd = r[0]["median"] * 1000, r[1]["median"] * 1000
rps8, p99_8 = map(float, open(f"{w}/wrk-8.txt.sum").read().split())
rps8_all, p99_8_all = map(float, open(f"{w}/wrk-8-all.txt.sum").read().split())
print(f"local exec {local:.2f} ms, forwarded exec {fwd:.2f} ms (medians)")
print(f"\nthroughput at 8 clients = {rps8:.0f} exec/s  (target >= 1500) {'PASS' if rps8 >= 1500 else 'MISS'}")
print(f"p99 at 8 clients        = {p99_8:.2f} ms   (target <= 20 ms) {'PASS' if p99_8 <= 20 else 'MISS'}")
print(f"  the same, sandbox capped at every core: {rps8_all:.0f} exec/s, p99 {p99_8_all:.2f} ms")
print(f"forwarding overhead     = {fwd - local:.2f} ms   (target <= 2 ms) {'PASS' if fwd - local <= 2 else 'MISS'}")
PY
read -r rps8 p99_8 <"$work/wrk-8.txt.sum"
figure manager.rps8 "$rps8"
figure manager.p99_8 "$p99_8"
read -r rps8_all p99_8_all <"$work/wrk-8-all.txt.sum"
figure manager.rps8_all "$rps8_all"
figure manager.p99_8_all "$p99_8_all"
