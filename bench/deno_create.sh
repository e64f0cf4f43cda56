#!/usr/bin/env bash
# Creating a deno sandbox, side by side in one run:
#   (default) `sbx create --driver deno` cold (a new Deno process, its Python
#             interpreter loading from the per-host snapshot in the background)
#             vs `sbx create --driver subprocess` cold;
#   --pool    `sbx create --driver deno` cold vs taken from the core warm pool
#             (`sbx pool fill` with SBX_POOL=deno=N). Target: pooled create <= 10 ms.
# Pooled runs go in batches: fill BATCH sandboxes, wait until their agents
# are idle (each loads Python in the background, which would steal the CPU
# from the timed creates; at most SETTLE seconds), time BATCH creates, then
# check with `sbx ls --json` that every one of them came from the pool (the
# bench fails if not).
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-20}
BATCH=${BATCH:-5}
SETTLE=${SETTLE:-30}
mode=cold
[[ "${1:-}" == "--pool" ]] && mode=pool
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/sbx-bench-create.XXXXXX)
: >"$work/config.yaml"
export SBX_STATE_DIR=$work/state SBX_CONFIG=$work/config.yaml USE_REMOTE_SANDBOX=false
trap 'SBX_POOL=deno=0 "$SBX" rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

python3 - "$SBX" "$RUNS" "$mode" "$BATCH" "$SETTLE" <<'PY'
import json, os, statistics, subprocess, sys, time
sbx, runs, mode, batch, settle = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
def sbx_run(*args, pool=0):
    env = dict(os.environ, SBX_POOL=f"deno={pool}")
    return subprocess.run([sbx, *args], check=True, capture_output=True, text=True, env=env).stdout
def timed_create(driver, pool=0):
    t0 = time.perf_counter()
    sid = sbx_run("create", "--driver", driver, pool=pool).strip()
    return sid, (time.perf_counter() - t0) * 1000
def cold_ms(driver):
    out = []
    for _ in range(runs + 2):
        sid, ms = timed_create(driver)
        out.append(ms)
        sbx_run("rm", sid)
    return out[2:]  # the first ones warm the page cache and the snapshot
def cpu_ticks(ids):
    """CPU time used so far by the deno processes of these pooled sandboxes."""
    total = 0
    for r in json.loads(sbx_run("ls", "--json", "--filter", "state=pooled")):
        if r["id"] not in ids:
            continue
        sup = r["agent_pid"]
        for kid in open(f"/proc/{sup}/task/{sup}/children").read().split():
            fields = open(f"/proc/{kid}/stat").read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total
def wait_idle(ids):
    deadline, last = time.monotonic() + settle, cpu_ticks(ids)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_ticks(ids)
        if now - last <= 1:
            return
        last = now
    print(f"bench: pooled agents still busy after {settle:.0f} s; figures include their load", file=sys.stderr)
def pooled_ms():
    out, done = [], 0
    while done < runs:
        n = min(batch, runs - done)
        filled = set(sbx_run("pool", "fill", pool=n).split())
        assert len(filled) == n, f"bench: pool fill started {len(filled)} of {n}"
        wait_idle(filled)
        ids = []
        for _ in range(n):
            sid, ms = timed_create("deno", pool=n)
            ids.append(sid)
            out.append(ms)
        recs = {r["id"]: r for r in json.loads(sbx_run("ls", "--json", pool=n))}
        cold = [i for i in ids if i not in filled or not recs.get(i, {}).get("from_pool")]
        if cold:
            sys.exit(f"bench: a pooled run started cold: {cold}")
        sbx_run("rm", "--all", pool=0)
        done += n
    return out
def line(label, v):
    print(f"{label:<34} mean {statistics.mean(v):7.1f} ms  median {statistics.median(v):7.1f} ms  ({len(v)} runs)")
if mode == "cold":
    res = {d: cold_ms(d) for d in ("deno", "subprocess")}
    for d, v in res.items():
        line(f"cold create --driver {d}", v)
    r = statistics.mean(res["deno"]) / statistics.mean(res["subprocess"])
    print(f"ratio deno/subprocess = {r:.2f}x   (pooled create target <= 10 ms: run with --pool)")
else:
    cold, pool = cold_ms("deno"), pooled_ms()
    line("cold create --driver deno", cold)
    line("pooled create --driver deno", pool)
    m = statistics.mean(pool)
    print(f"speed-up cold/pooled = {statistics.mean(cold) / m:.1f}x   "
          f"pooled create <= 10 ms: {'PASS' if m <= 10 else 'MISS'} ({m:.1f} ms)")
PY
