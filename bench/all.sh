#!/usr/bin/env bash
# Issue 16's speed table in one run: each path side by side with its peer or
# floor (hyperfine -N medians, wrk for the manager), the ratio and PASS/MISS
# against its target. Each row comes from the bench script that owns it (run
# here with fewer repetitions; their full output is shown above the table):
#   process_start.sh  exec_latency.sh  deno_exec.sh  idle_memory.sh
#   manager_throughput.sh  runsc.sh  microvm_exec.sh
# A driver this host cannot run (`sbx doctor --driver D` fails) has its rows
# marked "n/a" with the reason. The figures are kept in SAVE (default
# /tmp/sbx-bench-all.figures); BEFORE=FILE (an earlier run's SAVE, e.g. with
# SBX_BIN= an older build) adds them as a "before" column; `bench/all.sh
# --table` prints the table of SAVE (and BEFORE) again without measuring.
# Needs root; installs its peers (bubblewrap, crun, runc, hyperfine, wrk) from Debian.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
need_sbx
need_pkgs bubblewrap crun runc hyperfine wrk busybox-static
SAVE=${SAVE:-/tmp/sbx-bench-all.figures}
export SBX_BENCH_FIGURES=$SAVE SBX_BIN=$SBX
skipped=()
start=$SECONDS
measure=1
[[ ${1:-} == --table ]] && measure=0
((measure)) && : >"$SAVE"

# part NAME [VAR=VALUE ...]: runs bench/NAME.sh with those variables; a failure is reported, the rest goes on.
part() {
  local name=$1
  shift
  echo "=== bench/$name.sh $*"
  if ! env "$@" "bench/$name.sh" 2>&1 | sed 's/^/    /'; then
    echo "    (bench/$name.sh failed: its rows are n/a)"
  fi
}
# driver D: whether this host runs driver D; if not, why goes into the table's notes.
driver() {
  local why
  why=$("$SBX" doctor --driver "$1" 2>&1 | grep -E '^\s+✗' | head -1 | sed 's/^ *✗ *//' || true)
  "$SBX" doctor --driver "$1" >/dev/null 2>&1 && return 0
  skipped+=("$1: sbx doctor --driver $1 fails: ${why:-see its output}")
  return 1
}

if ((measure)); then
  part process_start RUNS=300
  part exec_latency RUNS=100
  if driver deno; then
    part deno_exec RUNS=20 COLD_RUNS=10
    part idle_memory
  fi
  part manager_throughput DURATION=5s CLIENTS=8
  if driver runsc; then part runsc RUNS=20 CREATES=8; fi
  if driver microvm; then part microvm_exec RUNS=50; fi
fi

echo
echo "=== the table$( ((measure)) && echo " ($((SECONDS - start)) s)"); figures in $SAVE"
python3 - "$SAVE" "${BEFORE:-}" "${skipped[@]+"${skipped[@]}"}" <<'PY'
import sys

def load(path):
    out = {}
    for line in open(path):
        k, v = line.split()
        out[k] = float(v)
    return out

now = load(sys.argv[1])
before = load(sys.argv[2]) if sys.argv[2] else None
# path, sbx's key, peer or floor, its key (None: an absolute target), unit, how the target reads, pass test
ROWS = [
    ("`sbx --version` (process start)", "start.sbx", "`/bin/true`", "start.floor", "ms", "<= 1.3x", lambda r: r <= 1.3),
    ("warm `sbx exec ID -- /bin/true` (subprocess)", "warm.sbx", "`crun exec`", "warm.crun", "ms", "<= 0.4x", lambda r: r <= 0.4),
    ("one-shot `sbx exec --rm --driver subprocess -- /bin/true`", "oneshot.sbx", "`bwrap --unshare-all`", "oneshot.bwrap", "ms", "<= 1.0x", lambda r: r <= 1.0),
    ("one-shot `sbx exec --rm -- python3 -c 'print(1)'` (deno)", "deno.py_cold", "host `python3 -c`", "deno.py_host", "ms", "<= 150 ms", lambda v: v <= 150),
    ("idle deno sandbox, cgroup memory", "memory.deno", "idle subprocess sandbox", "memory.subprocess", "MiB", "<= 64 MiB", lambda v: v <= 64),
    ("manager exec/s, wrk, 8 clients (subprocess)", "manager.rps8", "floor: vfork+exec+wait of `/bin/true`, a C loop per core", "manager.floor", "/s", ">= 1500", lambda v: v >= 1500),
    ("manager p99 at 8 clients", "manager.p99_8", "-", None, "ms", "<= 20 ms", lambda v: v <= 20),
    ("runsc warm exec", "runsc.warm", "`runsc exec`", "runsc.warm_peer", "ms", "<= 0.5x", lambda r: r <= 0.5),
    ("runsc create-to-ready", "runsc.create", "`runsc run --detach`, same bundle", "runsc.create_peer", "ms", "<= 1.1x", lambda r: r <= 1.1),
    ("microvm warm exec (TCG)", "microvm.sbx", "`sh -c true` in the guest", "microvm.guest", "ms", "<= 1.5x", lambda r: r <= 1.5),
]
ratio_target = lambda t: t.endswith("x")
fmt = lambda v, unit: "n/a" if v is None else (f"{v:.0f}{unit}" if unit == "/s" else f"{v:.2f} {unit}" if v < 100 else f"{v:.0f} {unit}")

head = ["path", "sbx", "peer or floor", "ratio", "target", "verdict"] + (["before", "ratio before"] if before else [])
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
misses = 0
for path, key, peer, pkey, unit, target, ok in ROWS:
    s, p = now.get(key), now.get(pkey) if pkey else None
    ratio = s / p if s is not None and p and ratio_target(target) else None
    judged = ratio if ratio_target(target) else s
    verdict = "n/a" if judged is None else "PASS" if ok(judged) else "MISS"
    misses += verdict == "MISS"
    peer_cell = peer if pkey is None else f"{peer} {fmt(p, unit)}"
    cells = [path, fmt(s, unit), peer_cell, "-" if ratio is None else f"{ratio:.2f}x", target, verdict]
    if before:
        b, bp = before.get(key), before.get(pkey) if pkey else None
        cells += [fmt(b, unit), "-" if b is None or not bp or not ratio_target(target) else f"{b / bp:.2f}x"]
    print("| " + " | ".join(cells) + " |")
print(f"\n{misses} of {len(ROWS)} rows miss their target.")
if now.get("warm.floor") and now.get("warm.crun"):
    print(f"warm exec floor (bench/exec_floor.c: start, connect, fork+exec+wait, nothing else): "
          f"{now['warm.floor']:.2f} ms = {now['warm.floor'] / now['warm.crun']:.2f}x `crun exec`")
if now.get("manager.floor_1cpu"):
    print(f"the manager row's sandbox has the default CPU cap, one CPU: its commands alone, in a C loop on one "
          f"core, reach {now['manager.floor_1cpu']:.0f}/s, the most that row can reach")
if now.get("manager.rps8_all"):
    print(f"manager at 8 clients on a sandbox whose CPU cap is every core (the row's has 1 CPU): "
          f"{now['manager.rps8_all']:.0f}/s, p99 {now['manager.p99_8_all']:.1f} ms")
if now.get("deno.py_pooled"):
    print(f"deno Python one-shot with a warm pool (SBX_POOL=deno=1, 3 s between calls): {now['deno.py_pooled']:.0f} ms")
for note in sys.argv[3:]:
    print(f"n/a: {note}")
PY
# Every create's cgroup attach waits for an RCU grace period without it: the
# one-shot and create rows depend on it (docs/speed.md).
if ((measure)); then
  echo "host: $("$SBX" doctor --driver subprocess 2>/dev/null | grep -m1 'cgroup attach' | sed 's/^ *//')"
fi
