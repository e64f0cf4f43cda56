#!/usr/bin/env bash
# The deno driver, side by side with the same code run on the host, in one run:
#   warm Python  `sbx exec ID -- python3 -c 'print(1)'`  vs  /usr/bin/python3 -c 'print(1)'  (target: <= 1.0x)
#   warm JS      `sbx exec ID -- node -e 'console.log(1)'`  vs  deno run of the same line on the host
#   cold Python  `sbx exec --rm -- python3 -c 'print(1)'` (no pool)  (target: <= 150 ms)
#   cold JS      `sbx exec --rm -- node -e 'console.log(1)'` (no pool)  (target: <= 100 ms)
#   pooled Python the cold Python one-shot with SBX_POOL=deno=1, 3 s between calls
#                (the spare the previous call refilled has loaded its interpreter)
# Prints each median and the ratios. Needs the deno runtime (scripts/setup-deno.sh);
# installs hyperfine from Debian if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
RUNS=${RUNS:-100}
COLD_RUNS=${COLD_RUNS:-10}
POOL_RUNS=${POOL_RUNS:-5}
need_sbx
need_pkgs hyperfine
deno_bin=$(ls "${SBX_DENO_HOME:-/usr/local/lib/sbx/deno}"/node_modules/@deno/linux-*/deno 2>/dev/null | head -1)
[[ -x $deno_bin ]] || { echo "bench: no deno runtime: run scripts/setup-deno.sh" >&2; exit 1; }

work=$(mktemp -d /tmp/sbx-bench-deno.XXXXXX)
state="$work/state"
cleanup() {
  "$SBX" --state-dir "$state" rm --all >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
export USE_REMOTE_SANDBOX=false
echo 'console.log(1)' >"$work/one.js"

run() { # name json runs command
  hyperfine -N --warmup 5 --runs "$3" --export-json "$2" "$4" >/dev/null
  printf '%-44s %9.2f ms\n' "$1" "$(median_ms "$2")"
}

id=$("$SBX" --state-dir "$state" create --driver deno)
echo "== warm exec into a running deno sandbox ($RUNS runs)"
run "sbx exec ID -- python3 -c 'print(1)'" "$work/py-sbx.json" "$RUNS" \
  "$SBX --state-dir $state exec $id -- python3 -c 'print(1)'"
run "host /usr/bin/python3 -c 'print(1)'" "$work/py-host.json" "$RUNS" "/usr/bin/python3 -c 'print(1)'"
run "sbx exec ID -- node -e 'console.log(1)'" "$work/js-sbx.json" "$RUNS" \
  "$SBX --state-dir $state exec $id -- node -e 'console.log(1)'"
run "host deno run one.js" "$work/js-host.json" "$RUNS" "$deno_bin run --quiet $work/one.js"

echo "== cold one-shot: a new deno sandbox, no pool, removed after ($COLD_RUNS runs)"
run "sbx exec --rm -- python3 -c 'print(1)'" "$work/py-cold.json" "$COLD_RUNS" \
  "$SBX --state-dir $state exec --rm --driver deno -- python3 -c 'print(1)'"
run "sbx exec --rm -- node -e 'console.log(1)'" "$work/js-cold.json" "$COLD_RUNS" \
  "$SBX --state-dir $state exec --rm --driver deno -- node -e 'console.log(1)'"
echo "== pooled one-shot: SBX_POOL=deno=1, each call takes the spare the previous one refilled (3 s apart, $POOL_RUNS runs)"
SBX_POOL=deno=1 hyperfine -N --warmup 1 --prepare 'sleep 3' --runs "$POOL_RUNS" --export-json "$work/py-pooled.json" \
  "$SBX --state-dir $state exec --rm --driver deno -- python3 -c 'print(1)'" >/dev/null
printf '%-44s %9.2f ms\n' "sbx exec --rm -- python3 (pooled)" "$(median_ms "$work/py-pooled.json")"
figure deno.py_cold "$(median_ms "$work/py-cold.json")"
figure deno.py_pooled "$(median_ms "$work/py-pooled.json")"
figure deno.py_host "$(median_ms "$work/py-host.json")"

python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
m = lambda n: json.load(open(f"{w}/{n}.json"))["results"][0]["median"]
def line(what, value, target, ok):
    print(f"{what:<44} = {value}  (target {target}) {'PASS' if ok else 'MISS'}")
print()
r = m("py-sbx") / m("py-host")
line("warm Python ratio sbx/host python3", f"{r:.2f}x", "<= 1.00x", r <= 1.0)
r = m("js-sbx") / m("js-host")
print(f"{'warm JS ratio sbx/host deno run':<44} = {r:.2f}x")
line("cold Python one-shot", f"{m('py-cold') * 1000:.0f} ms", "<= 150 ms", m("py-cold") <= 0.15)
line("cold JS one-shot", f"{m('js-cold') * 1000:.0f} ms", "<= 100 ms", m("js-cold") <= 0.1)
line("pooled Python one-shot (SBX_POOL=deno=1)", f"{m('py-pooled') * 1000:.0f} ms", "<= 150 ms", m("py-pooled") <= 0.15)
PY
