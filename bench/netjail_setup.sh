#!/usr/bin/env bash
# Side by side, in one run: `sbx create --network jail` vs `sbx create --network none`
# (each sandbox removed again between timed runs, untimed). Target: the jail adds <= 10 ms.
#   warm: another jail is up on the host, so its nftables table exists (the usual case)
#   cold: no other jail, so each create also builds the table and each rm deletes it
# Prints each mean, the difference and the ratio, per driver (runsc when installed).
# Needs root; installs hyperfine from Debian if missing. Sends no packet anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
SBX=${SBX_BIN:-$PWD/build/sbx}
RUNS=${RUNS:-40}
RUNS_RUNSC=${RUNS_RUNSC:-10}
dpkg-query -W -f='${Status}' hyperfine 2>/dev/null | grep -q "install ok installed" ||
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine >/dev/null; }
[[ -x $SBX ]] || { echo "bench: build sbx first (scripts/setup.sh)" >&2; exit 1; }

work=$(mktemp -d /tmp/sbx-bench.XXXXXX)
state="$work/state"
anchor_state="$work/anchor"
export USE_REMOTE_SANDBOX=false LOCAL_SANDBOX_BACKEND=subprocess SBX_CONFIG=/dev/null
# The jail's DNS forwarding rule needs an upstream; no query is ever sent here.
export SBX_NET_DNS=${SBX_NET_DNS:-192.0.2.53}
cleanup() {
  "$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true
  "$SBX" --state-dir "$anchor_state" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

ms() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"]*1000)' "$1"; }
run() { # label json driver network runs
  hyperfine -N --warmup 3 --runs "$5" --prepare "$SBX --state-dir $state rm --all" \
    --cleanup "$SBX --state-dir $state rm --all" --export-json "$2" \
    "$SBX --state-dir $state create --driver $3 --network $4" >/dev/null 2>"$work/hyperfine.err" ||
    { cat "$work/hyperfine.err" >&2; exit 1; }
  printf '%-40s %8.2f ms\n' "$1" "$(ms "$2")"
}
compare() { # driver runs
  local d=$1 n=$2
  echo "== $d: create, $n runs each"
  run "create --network none" "$work/$d-none.json" "$d" none "$n"
  run "create --network jail (cold: no other jail)" "$work/$d-cold.json" "$d" jail "$n"
  anchor=$("$SBX" --state-dir "$anchor_state" create --driver subprocess --network jail)
  run "create --network jail (warm: a jail is up)" "$work/$d-warm.json" "$d" jail "$n"
  "$SBX" --state-dir "$anchor_state" rm "$anchor" >/dev/null
  python3 - "$work" "$d" <<'PY'
import json, sys
w, d = sys.argv[1], sys.argv[2]
m = lambda n: json.load(open(f"{w}/{d}-{n}.json"))["results"][0]["mean"] * 1000
none, warm, cold = m("none"), m("warm"), m("cold")
for label, v in (("warm", warm), ("cold", cold)):
    diff = v - none
    verdict = ("PASS" if diff <= 10 else "MISS") if label == "warm" else "(info)"
    print(f"  jail {label}: {diff:+7.2f} ms over none, ratio {v / none:.2f}x  (target <= +10 ms) {verdict}")
PY
}

compare subprocess "$RUNS"
if command -v runsc >/dev/null; then
  compare runsc "$RUNS_RUNSC"
else
  echo "== runsc: not installed, skipped"
fi
