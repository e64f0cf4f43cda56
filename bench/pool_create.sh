#!/usr/bin/env bash
# Side by side, in one run: `sbx create` started cold vs taken from a filled
# warm pool (target: pooled create <= 10 ms), per driver: subprocess always,
# runsc when `sbx doctor --driver runsc` passes (RUNSC=0 skips it).
# Before each timed create, hyperfine's --prepare removes the previous
# sandbox and (pooled runs) tops the pool up to 1, so every pooled run finds
# one ready and every cold run starts from the same empty state root.
# Prints each median, the speed-up and the target check. Needs root; installs
# hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-50}
RUNS_RUNSC=${RUNS_RUNSC:-10}
source bench/local_lib.sh

# The pooled runs' --prepare: fails (and with it the bench) if the previous
# timed create was not served by the pool, then empties the state root and fills a pool of 1.
cat >"$work/refill.sh" <<END
set -euo pipefail
export SBX_POOL=\$1=1
"$SBX" ls --json | python3 -c 'import json,sys; cold=[r["id"] for r in json.load(sys.stdin) if not r["from_pool"]]; sys.exit("bench: a pooled run started cold: %s" % cold if cold else 0)'
"$SBX" rm --all >/dev/null
"$SBX" pool fill >/dev/null
END

for d in "${drivers[@]}"; do
  n=$RUNS
  [[ $d == runsc ]] && n=$RUNS_RUNSC
  echo "== $d: sbx create, cold vs from the warm pool ($n runs each)"
  run "cold   (no pool)" "$work/cold-$d.json" "$n" "$SBX rm --all" \
    "env SBX_POOL=$d=0 $SBX create --driver $d"
  "$SBX" rm --all >/dev/null
  run "pooled (pool of 1, refilled)" "$work/pool-$d.json" "$n" \
    "bash $work/refill.sh $d" "env SBX_POOL=$d=1 $SBX create --driver $d"
  bash "$work/refill.sh" "$d"
  "$SBX" rm --all >/dev/null
done

python3 - "$work" "${drivers[@]}" <<'PY'
import json, sys
w, drivers = sys.argv[1], sys.argv[2:]
m = lambda n: json.load(open(f"{w}/{n}.json"))["results"][0]["median"] * 1000
print()
for d in drivers:
    cold, pool = m(f"cold-{d}"), m(f"pool-{d}")
    print(f"{d:<11} cold {cold:8.2f} ms   pooled {pool:6.2f} ms   speed-up {cold / pool:6.1f}x   "
          f"pooled <= 10 ms: {'PASS' if pool <= 10 else 'MISS'}")
PY
