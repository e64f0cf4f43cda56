#!/usr/bin/env bash
# Side by side, in one run: `sbx create --network jail` vs `sbx create --network none`.
# Target: the jail adds <= 10 ms to create.
# Creates alternate (none, jail, none, jail, ...) so a busy host slows both alike;
# each sandbox is removed again, untimed. Two cases:
#   warm: another jail is up on the host, so its nftables table exists (the usual case)
#   cold: no other jail, so each create also builds the table and each rm deletes it
# Prints the medians, the median of the paired differences and the ratio, per
# driver (runsc when installed, microvm when usable). Needs root. Sends no packet anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-40}
RUNS_RUNSC=${RUNS_RUNSC:-12}
RUNS_MICROVM=${RUNS_MICROVM:-4}
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }

work=$(mktemp -d /tmp/sbx-bench.XXXXXX)
export USE_REMOTE_SANDBOX=false LOCAL_SANDBOX_BACKEND=subprocess SBX_CONFIG=/dev/null
# The jail's DNS forwarding rule needs an upstream; no query is ever sent here.
export SBX_NET_DNS=${SBX_NET_DNS:-192.0.2.53}
cleanup() {
  for s in "$work/state" "$work/anchor"; do "$SBX" --state-dir "$s" rm --all >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

compare() { # driver runs
  echo "== $1: create, $2 alternating pairs per case"
  python3 - "$SBX" "$work" "$1" "$2" <<'PY'
import statistics, subprocess, sys, time
sbx, work, driver, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
state = f"{work}/state"

def sbx_run(*args, state_dir=state):
    r = subprocess.run([sbx, "--state-dir", state_dir, *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: sbx {' '.join(args)} failed: {r.stderr.strip()}")
    return r.stdout.strip()

def timed_create(network):
    t0 = time.perf_counter()
    sid = sbx_run("create", "--driver", driver, "--network", network)
    ms = (time.perf_counter() - t0) * 1000
    sbx_run("rm", sid)
    return ms

def case(label):
    for _ in range(3):  # warm-up: caches, the skeleton, runsc's platform choice
        timed_create("none"); timed_create("jail")
    none, jail = [], []
    for _ in range(runs):
        none.append(timed_create("none"))
        jail.append(timed_create("jail"))
    diff = statistics.median(j - n for j, n in zip(jail, none))
    mn, mj = statistics.median(none), statistics.median(jail)
    # A micro-VM's boot (seconds, noisy under TCG) drowns a 10 ms target: there the figure is information.
    verdict = ("PASS" if diff <= 10 else "MISS") if label == "warm" and driver != "microvm" else "(info)"
    print(f"  {label}: none {mn:7.2f} ms, jail {mj:7.2f} ms: jail adds {diff:+6.2f} ms "
          f"(ratio {mj / mn:.2f}x; target <= +10 ms) {verdict}")

case("cold")
anchor = sbx_run("create", "--driver", "subprocess", "--network", "jail", state_dir=f"{work}/anchor")
try:
    case("warm")
finally:
    sbx_run("rm", anchor, state_dir=f"{work}/anchor")
PY
}

compare subprocess "$RUNS"
if command -v runsc >/dev/null; then
  compare runsc "$RUNS_RUNSC"
else
  echo "== runsc: not installed, skipped"
fi
if "$SBX" doctor --driver microvm >/dev/null 2>&1; then
  compare microvm "$RUNS_MICROVM"
else
  echo "== microvm: not usable here (sbx doctor --driver microvm), skipped"
fi
