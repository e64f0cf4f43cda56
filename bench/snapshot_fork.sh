#!/usr/bin/env bash
# Side by side, in one run, per driver (subprocess always; runsc, microvm and
# deno when `sbx doctor --driver NAME` passes; RUNSC=0, MICROVM=0, DENO=0 skip
# them), on a source sandbox holding FILL_MB (default 8) MiB of files in its
# writable layer (deno: in its SQLite store):
#   sbx snapshot ID NAME        (pause, sync, sparse copy of the layer, hash, resume)
#   sbx create --from NAME      (fork create-to-ready: the layer copied in, agent answering)
#   sbx fork ID                 (both of the above in one call)
#   sbx create --from NAME      with a pool of the snapshot (SBX_POOL=snapshot:NAME=1, refilled)
# against `sbx create` of the same image cold and from a filled warm pool.
# Target (issue 15): fork create-to-ready <= 1.5x a pooled create. Each timed
# call is a whole CLI call; hyperfine's --prepare removes every sandbox but the
# source (and tops the pool up for the pooled runs). Needs root; installs
# hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-20}
RUNS_RUNSC=${RUNS_RUNSC:-10}
RUNS_MICROVM=${RUNS_MICROVM:-3}
RUNS_DENO=${RUNS_DENO:-5}
FILL_MB=${FILL_MB:-8}
source bench/local_lib.sh
add_driver microvm "${MICROVM:-1}"
add_driver deno "${DENO:-1}"

# --prepare: removes every sandbox but the source ($1); with a driver ($2), fills its pool of 1.
cat >"$work/others.sh" <<END
set -euo pipefail
for id in \$("$SBX" ls --json | python3 -c 'import json,sys; [print(r["id"]) for r in json.load(sys.stdin) if r["id"] != sys.argv[1]]' "\$1"); do
  "$SBX" rm -f "\$id" >/dev/null
done
if [[ -n \${2:-} ]]; then SBX_POOL=\$2=1 "$SBX" pool fill >/dev/null; fi
END

for d in "${drivers[@]}"; do
  n=$RUNS
  case $d in runsc) n=$RUNS_RUNSC ;; microvm) n=$RUNS_MICROVM ;; deno) n=$RUNS_DENO ;; esac
  src=$(SBX_POOL=$d=0 "$SBX" create --driver "$d")
  if [[ $d == deno ]]; then  # no shell there: Python writes the files
    "$SBX" exec "$src" -- python3 -c "import os; os.makedirs('/work/data'); open('/work/data/blob', 'wb').write(os.urandom($((FILL_MB << 20)))); open('/work/mark', 'w').write('ok')" >/dev/null
  else
    "$SBX" exec "$src" -- sh -c "mkdir -p /work/data && head -c $((FILL_MB << 20)) /dev/urandom > /work/data/blob && echo ok > /work/mark" >/dev/null
  fi
  echo "== $d ($n runs each; $FILL_MB MiB of files in the source)"
  run "sbx snapshot ID NAME" "$work/snap-$d.json" "$n" "true" "$SBX snapshot $src bench-$d"
  run "fork: sbx create --from NAME" "$work/from-$d.json" "$n" "bash $work/others.sh $src" \
    "env SBX_POOL=$d=0 $SBX create --from bench-$d"
  run "fork: sbx create --from NAME, snapshot pool of 1 (refilled)" "$work/pooledfrom-$d.json" "$n" \
    "bash $work/others.sh $src snapshot:bench-$d" "env SBX_POOL=snapshot:bench-$d=1 $SBX create --from bench-$d"
  run "sbx fork ID (snapshot + create)" "$work/fork-$d.json" "$n" "bash $work/others.sh $src" "$SBX fork $src"
  run "peer: cold create" "$work/cold-$d.json" "$n" "bash $work/others.sh $src" \
    "env SBX_POOL=$d=0 $SBX create --driver $d"
  run "peer: pooled create (pool of 1, refilled)" "$work/pool-$d.json" "$n" "bash $work/others.sh $src $d" \
    "env SBX_POOL=$d=1 $SBX create --driver $d"
  bash "$work/others.sh" "$src"
  "$SBX" rm --all >/dev/null
  "$SBX" snapshot rm "bench-$d" >/dev/null
done

python3 - "$work" "${drivers[@]}" <<'PY'
import json, sys
w, drivers = sys.argv[1], sys.argv[2:]
m = lambda n: json.load(open(f"{w}/{n}.json"))["results"][0]["median"] * 1000
print()
for d in drivers:
    snap, frm, pfrm, fork, cold, pool = (m(f"{k}-{d}") for k in ("snap", "from", "pooledfrom", "fork", "cold", "pool"))
    print(f"{d:<11} snapshot {snap:7.2f} ms  create --from {frm:7.2f} ms (snapshot pool: {pfrm:7.2f} ms)  "
          f"fork {fork:7.2f} ms  cold {cold:7.2f} ms  pooled {pool:6.2f} ms")
    for what, t in (("create --from, cold", frm), ("create --from, snapshot pool", pfrm)):
        print(f"{'':<11} {what}: / pooled = {t / pool:.2f}x, / cold = {t / cold:.2f}x; "
              f"target <= 1.5x pooled: {'PASS' if t <= 1.5 * pool else 'MISS'}")
PY
