#!/usr/bin/env bash
# Creating a deno sandbox: `sbx create --driver deno` until it answers, cold
# (a new Deno process, its Python interpreter loading from the per-host
# snapshot in the background), side by side with `sbx create --driver
# subprocess`. `--pool` is for the warm pool of pre-started sandboxes (the
# pool work in core); this build has none, so it says so and stops.
# Target from the issue: pooled create <= 10 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-20}
if [[ "${1:-}" == "--pool" ]]; then
  "$SBX" --help 2>&1 | grep -qi pool ||
    { echo "bench: this sbx has no warm pool yet; only cold create can be measured" >&2; exit 2; }
fi
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/sbx-bench-create.XXXXXX)
trap '"$SBX" --state-dir "$work/state" rm --all >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export USE_REMOTE_SANDBOX=false

python3 - "$SBX" "$work/state" "$RUNS" <<'PY'
import statistics, subprocess, sys, time
sbx, state, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
def create_ms(driver):
    out = []
    for _ in range(runs + 2):
        t0 = time.perf_counter()
        sid = subprocess.run([sbx, "--state-dir", state, "create", "--driver", driver],
                             check=True, capture_output=True, text=True).stdout.strip()
        out.append((time.perf_counter() - t0) * 1000)
        subprocess.run([sbx, "--state-dir", state, "rm", sid], check=True, capture_output=True)
    return out[2:]  # the first ones warm the page cache and the snapshot
res = {d: create_ms(d) for d in ("deno", "subprocess")}
for d, v in res.items():
    print(f"cold create --driver {d:<11} mean {statistics.mean(v):7.1f} ms  median {statistics.median(v):7.1f} ms  ({runs} runs)")
r = statistics.mean(res["deno"]) / statistics.mean(res["subprocess"])
print(f"ratio deno/subprocess = {r:.2f}x   (pooled create target <= 10 ms needs the warm pool)")
PY
